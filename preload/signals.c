/*
 * preload/signals.c - the signal calls the mesh barrier needs to see:
 * sigaction, signal, sigprocmask, pthread_sigmask and sigaltstack under
 * their libc names, each a call into core/sigchain.c (core/heapfile.h says
 * why each is wrapped).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "fmt.h"
#include "sigchain.h"

/* SIGSEGV belongs to the mesh barrier while meshing is on (core/heapfile.h):
 * a program's handler is chained behind ours, as Mesh does.  Every other
 * signal, and SIGSEGV with meshing off, goes straight to libc.  The signal
 * masks keep SIGSEGV unblocked while meshing is on (sigchain_sigmask). */
SD_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return sigchain_sigaction(sig, act, old);
}
SD_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    return sigchain_sigmask(how, set, old);
}
SD_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    int err = sigchain_sigmask(how, set, old);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}
SD_EXPORT int sigaltstack(const stack_t *ss, stack_t *old)
{
    return sigchain_sigaltstack(ss, old);
}
SD_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;           /* BSD semantics, as glibc's signal() */
    if (sigchain_sigaction(sig, &sa, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

