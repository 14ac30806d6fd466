/*
 * tests/mesh/nss_fork.c - fork after glibc's NSS has been used, with
 * meshing on (the mesh-nss-fork test).
 *
 * glibc's fork() locks its NSS database state, which it allocated with
 * malloc, after the atfork prepare handlers and before the fork itself;
 * the mesh arena is write-protected from the prepare handler on, so the
 * forking thread must get its write through (core/heapfile.c, fork_step) or
 * it waits forever for the fork it is making.  Another thread exists so
 * that glibc takes its multi-threaded fork path, and each child uses NSS
 * too.  Exits 0 on success; a hang is ended by alarm() (SIGALRM).
 */
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *idle(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int resolve(void)
{
    struct addrinfo *r;
    if (getaddrinfo("localhost", NULL, NULL, &r))
        return 1;
    freeaddrinfo(r);
    return 0;
}

int main(void)
{
    alarm(60);
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) || resolve())
        return 2;
    for (int i = 0; i < 50; i++) {
        char *keep = malloc(64);            /* heap writes around each fork */
        memset(keep, i, 64);
        pid_t pid = fork();
        if (pid < 0)
            return 3;
        if (pid == 0)
            _exit(resolve() || keep[63] != (char)i ? 4 : 0);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "nss_fork: child %d failed (status %#x)\n", i, st);
            return 5;
        }
        free(keep);
    }
    puts("nss_fork: 50 forks after NSS use");
    return 0;
}
