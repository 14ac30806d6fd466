/*
 * tests/robust/forksig_prog.c - fork() from a signal handler that lands
 * while the program is inside fork().
 *
 *   forksig_prog [FORKS]
 *
 * The main thread forks FORKS times (default 200), each child _exit(0)ing
 * at once and reaped.  An interval timer (setitimer, ITIMER_REAL, 50 us)
 * sends SIGALRM all the while, and while the main thread is inside fork()
 * its handler forks too, once per main fork (its child _exit(0)s at once;
 * the handler reaps it): a signal that lands in a prepare, parent or
 * child handler of the allocator starts a second fork on the same thread.
 * (Forking on every signal would keep the main thread from ever getting
 * on: a fork takes longer than the interval.)  The program has
 * one thread, as glibc's fork then takes no lock of its own and is safe
 * this way.  Every block the main loop allocates is checked after each
 * fork.  Prints "forks N, in handler M" and exits 0; a deadlock is a
 * test that never ends (the runner's timeout).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t handler_forks;
static volatile sig_atomic_t in_fork;   /* 1: main is in fork(); 2: and
                                           the handler forked already */

static void on_alarm(int sig)
{
    (void)sig;
    if (in_fork != 1)
        return;
    in_fork = 2;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid > 0) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        handler_forks++;
    }
    errno = saved;
}

int main(int argc, char **argv)
{
    int forks = argc > 1 ? atoi(argv[1]) : 200;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL))
        return 1;
    struct itimerval it = { { 0, 50 }, { 0, 50 } };
    if (setitimer(ITIMER_REAL, &it, NULL))
        return 1;
    char *keep[64] = { 0 };
    for (int i = 0; i < forks; i++) {
        size_t size = (size_t)16 << (i % 16);               /* 16 B .. 512 KiB */
        free(keep[i % 64]);
        keep[i % 64] = malloc(size);
        if (!keep[i % 64])
            return 1;
        memset(keep[i % 64], i & 0xff, size);
        in_fork = 1;
        pid_t pid = fork();
        in_fork = 0;
        if (pid == 0) {
            char *p = malloc(100);          /* the child's allocator works */
            _exit(p ? 0 : 1);
        }
        if (pid < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ENOMEM) {
                i--;
                continue;
            }
            perror("fork");
            return 1;
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
            if (errno != EINTR) {
                perror("waitpid");
                return 1;
            }
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "forksig_prog: child %d ended with %#x\n", i, st);
            return 1;
        }
        if ((unsigned char)keep[i % 64][size - 1] != (unsigned char)(i & 0xff)) {
            fprintf(stderr, "forksig_prog: block %d changed\n", i);
            return 1;
        }
    }
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    for (int j = 0; j < 64; j++)
        free(keep[j]);
    printf("forks %d, in handler %d\n", forks, (int)handler_forks);
    return 0;
}
