/*
 * core/sigchain.c - the program's signal calls while our SIGSEGV handler
 * is installed: its SIGSEGV handler is chained behind ours, SIGSEGV stays
 * unblocked, and a signal stack inside the arena is replaced by a private
 * one (see sigchain.h).
 */
#define _GNU_SOURCE
#include "heapfile.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "heapfile_internal.h"
#include "lock.h"
#include "os.h"
#include "types.h"

int sigchain_handler_on;
struct sigaction sigchain_theirs;       /* the program's (or previous) handler */
static sd_spin sigchain_lock;

int sigchain_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = wbarrier_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    return __sigaction(SIGSEGV, &sa, &sigchain_theirs) ? errno : 0;
}

/* A fault that is not ours: to the program's handler, or the default. */
void sigchain_call(int sig, siginfo_t *si, void *uc)
{
    struct sigaction p = sigchain_theirs;
    if (p.sa_flags & SA_RESETHAND) {
        sigchain_theirs.sa_handler = SIG_DFL;
        sigchain_theirs.sa_flags = 0;
    }
    if (p.sa_flags & SA_SIGINFO) {
        if (p.sa_sigaction) {
            p.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) {
        p.sa_handler(sig);
        return;
    }
    /* Default action: uninstall ourselves and let the fault recur (or
     * re-raise a signal that was sent, not caused). */
    struct sigaction d;
    memset(&d, 0, sizeof d);
    d.sa_handler = SIG_DFL;
    sigemptyset(&d.sa_mask);
    __sigaction(sig, &d, NULL);
    __atomic_store_n(&sigchain_handler_on, 0, __ATOMIC_RELEASE);
    if (si->si_code <= 0)
        raise(sig);
}

/* The signal stack standing in for this thread's own (sigchain_sigaltstack):
 * the program's stack, its size, and our mapping. */
static __thread void *alt_theirs, *alt_ours;
static __thread size_t alt_theirs_size, alt_ours_size;

int sigchain_sigaltstack(const stack_t *ss, stack_t *old)
{
    stack_t cur;
    if (os_syscall(SYS_sigaltstack, NULL, &cur))
        return -1;
    if (old) {
        *old = cur;
        if (alt_ours && cur.ss_sp == alt_ours) {
            old->ss_sp = alt_theirs;
            old->ss_size = alt_theirs_size;
        }
    }
    if (!ss)
        return 0;
    uintptr_t p = (uintptr_t)ss->ss_sp;
    int inside = !(ss->ss_flags & SS_DISABLE) && heapfile_overlaps((void *)p, ss->ss_size);
    void *m = NULL;
    size_t msize = (ss->ss_size + SD_PAGE_SIZE - 1) & ~(SD_PAGE_SIZE - 1);
    stack_t mine = *ss;
    if (inside) {
        if (os_map_aligned(msize, SD_PAGE_SIZE, &m)) {
            errno = ENOMEM;
            return -1;
        }
        mine.ss_sp = m;
        mine.ss_size = msize;
    }
    /* Fails with EPERM while the thread runs on its signal stack: then
     * nothing changes and ours, if any, stays. */
    if (os_syscall(SYS_sigaltstack, &mine, NULL)) {
        int e = errno;
        if (m)
            os_unmap(m, msize);
        errno = e;
        return -1;
    }
    if (alt_ours)
        os_unmap(alt_ours, alt_ours_size);
    alt_ours = m;
    alt_ours_size = msize;
    alt_theirs = inside ? ss->ss_sp : NULL;
    alt_theirs_size = inside ? ss->ss_size : 0;
    return 0;
}

int sigchain_handler_ours(void)
{
    if (!__atomic_load_n(&sigchain_handler_on, __ATOMIC_ACQUIRE))
        return 0;
    struct sigaction cur;
    if (__sigaction(SIGSEGV, NULL, &cur))
        return 0;
    return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == wbarrier_segv;
}

int sigchain_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig != SIGSEGV || !__atomic_load_n(&sigchain_handler_on, __ATOMIC_ACQUIRE))
        return __sigaction(sig, act, old);
    sd_spin_lock(&sigchain_lock);
    if (old)
        *old = sigchain_theirs;
    if (act)
        sigchain_theirs = *act;
    sd_spin_unlock(&sigchain_lock);
    return 0;
}

int sigchain_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    if (set && how != SIG_UNBLOCK) {
        copy = *set;
        unsigned long *w = (unsigned long *)&copy;
        w[0] &= ~(1UL << (32 - 1) | 1UL << (33 - 1));  /* SIGCANCEL, SIGSETXID */
        if (__atomic_load_n(&sigchain_handler_on, __ATOMIC_ACQUIRE))
            w[0] &= ~(1UL << (SIGSEGV - 1));
        set = &copy;
    }
    long r = os_syscall(SYS_rt_sigprocmask, how, set, old, 8);
    return r < 0 ? errno : 0;
}

