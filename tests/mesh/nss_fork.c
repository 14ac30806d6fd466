/*
 * tests/mesh/nss_fork.c - fork after glibc's NSS has been used, with
 * meshing on (the tests mesh-auto-nss_fork and mesh-mprotect-nss_fork).
 *
 * glibc's fork() locks its NSS database state, which it allocated with
 * malloc, after the atfork prepare handlers and before the fork itself;
 * the mesh arena is write-protected from the prepare handler on, so the
 * forking thread must get its write through (core/heapfile.c, fork_step) or
 * it waits forever for the fork it is making.  Another thread exists so
 * that glibc takes its multi-threaded fork path, and each child uses NSS
 * too.  `nss_fork nss_fork`, a subject program (tests/subject.h) like the
 * other mesh programs, run by tests/mesh/test_mesh.c: the scenario forks,
 * under meshing's write barrier.  A hang is ended by the scenario's alarm
 * (SIGALRM).
 */
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../subject.h"

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

Scenario(nss_fork, .timeout = 60)
{
    pthread_t t;
    check(pthread_create(&t, NULL, idle, NULL) == 0, "pthread_create");
    check(resolve() == 0, "getaddrinfo(localhost) failed");
    for (int i = 0; i < 50; i++) {
        char *keep = malloc(64);            /* heap writes around each fork */
        check(keep, "malloc");
        memset(keep, i, 64);
        pid_t pid = fork();
        check(pid >= 0, "fork");
        if (pid == 0)
            _exit(resolve() || keep[63] != (char)i ? 4 : 0);
        int st = 0;
        check(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child %d failed (status %#x)", i, st);
        free(keep);
    }
    puts("nss_fork: 50 forks after NSS use");
}
