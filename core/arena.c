/*
 * core/arena.c - the memfd arena, its write barrier and its fork copy
 * (see arena.h).  Only core/os.c maps; this file decides what goes where.
 */
#define _GNU_SOURCE
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "options.h"
#include "os.h"
#include "segment.h"
#include "types.h"
#include "uffd.h"

extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

uintptr_t arena_base;
static int arena_fd = -1;
static size_t arena_next;               /* bytes handed out (atomic) */

/* The barrier.  prot_gen is odd while [prot_lo, prot_hi) is read-only.
 * barrier_gen counts every barrier going up or down (a mesh's protect, a
 * fork): it is bumped before a barrier is raised and before it is marked
 * lifted, so whoever sees a barrier lifted also sees the bump. */
static uintptr_t prot_lo, prot_hi;
static unsigned prot_gen;
static unsigned barrier_gen;
static unsigned long barrier_retries;   /* system calls told to retry */
static int fork_active;                 /* the whole arena is read-only */
static int fork_protected;              /* ... and we made it so */
static pid_t fork_pid;                  /* the parent's pid during a fork */
static uint32_t fork_tid;               /* the forking thread */
static uintptr_t step_page;             /* a page let through for one
                                           instruction (fork_step) */
static struct sigaction step_old;       /* SIGTRAP's action meanwhile */
static int step_unblocked;              /* SIGTRAP was blocked: block again */
static int fork_pipe[2] = { -1, -1 };
static int child_done;
static unsigned long fault_waits;

static int handler_on;
static struct sigaction chained;        /* the program's (or previous) handler */
static sd_spin chained_lock;

/* The userfaultfd barrier (core/uffd.h): on while uffd_ready().  A mesh's
 * range [prot_lo, prot_hi) is then protected through it, prot_gen and
 * barrier_gen stay as they are (no system call can fail for it), and
 * prot_remapped says the range was mapped anew before the release. */
static int barrier_uffd;                /* this mesh's range: uffd */
static int prot_remapped;
static unsigned long uffd_waits;        /* writers the uffd barrier parked */
static unsigned long uffd_fallbacks;    /* uffd failed: mprotect from then on */
static sigset_t prot_saved_mask;        /* the mesher's mask, signals blocked */

static __thread uintptr_t retry_addr;
static __thread unsigned retry_count;
static __thread int barrier_mine;       /* this thread raised the barrier */

static size_t arena_used(void)
{
    size_t n = __atomic_load_n(&arena_next, __ATOMIC_ACQUIRE);
    return n < ARENA_SIZE ? n : ARENA_SIZE;
}

/* ---------------------------------------------------------------- */
/* The SIGSEGV handler                                               */

static void chain(int sig, siginfo_t *si, void *uc)
{
    struct sigaction p = chained;
    if (p.sa_flags & SA_RESETHAND) {
        chained.sa_handler = SIG_DFL;
        chained.sa_flags = 0;
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
    __atomic_store_n(&handler_on, 0, __ATOMIC_RELEASE);
    if (si->si_code <= 0)
        raise(sig);
}

static void fork_child_copy(void);

/* The two waits, shared by the handler and arena_barrier_wait().  They
 * yield the CPU: a mesh's pause is microseconds, a fork's the time the
 * child takes to copy the heap. */
static void wait_fork(void)
{
    if (getpid() != fork_pid)
        fork_child_copy();              /* the child wrote before its handler ran */
    else
        while (__atomic_load_n(&fork_active, __ATOMIC_ACQUIRE))
            sched_yield();
}

static void wait_protect(unsigned g)
{
    while (__atomic_load_n(&prot_gen, __ATOMIC_ACQUIRE) == g)
        sched_yield();
}

/* glibc's fork() writes malloc'd memory of its own after the prepare
 * handlers and before the fork system call: the NSS database state's lock
 * (__nss_database_fork_prepare_parent).  The forking thread must not wait
 * for a fork it is itself holding up.  So its write goes through: the
 * page is made writable for exactly one instruction (the trap flag), and
 * the trap after it protects the page again, still before the fork, so
 * no write after the fork ever reaches the child's copy.  x86-64 only;
 * elsewhere such a write would wait forever (as before). */
#if defined(__x86_64__)
static void fork_step_done(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    if (step_page && os_gettid() == fork_tid) {
        os_protect((void *)step_page, SD_PAGE_SIZE, 0);
        step_page = 0;
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100L;
        if (step_unblocked)
            sigaddset(&uc->uc_sigmask, SIGTRAP);
        __sigaction(SIGTRAP, &step_old, NULL);
        return;
    }
    __sigaction(SIGTRAP, &step_old, NULL);  /* not ours: theirs again */
}

static int fork_step(uintptr_t a, void *ucv)
{
    ucontext_t *uc = ucv;
    if (!fork_protected || step_page || getpid() != fork_pid || os_gettid() != fork_tid)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = fork_step_done;
    sa.sa_flags = SA_SIGINFO;
    sigfillset(&sa.sa_mask);
    if (__sigaction(SIGTRAP, &sa, &step_old))
        return 0;
    step_unblocked = sigismember(&uc->uc_sigmask, SIGTRAP) == 1;
    sigdelset(&uc->uc_sigmask, SIGTRAP);
    step_page = a & ~(SD_PAGE_SIZE - 1);
    os_protect((void *)step_page, SD_PAGE_SIZE, 1);
    uc->uc_mcontext.gregs[REG_EFL] |= 0x100L;   /* trap after one instruction */
    return 1;
}
#else
static int fork_step(uintptr_t a, void *ucv) { return 0; }
#endif

static void segv(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (si->si_code > 0 && arena_base && a - arena_base < arena_used()) {
        if (__atomic_load_n(&fork_active, __ATOMIC_ACQUIRE) && fork_step(a, uc)) {
            errno = saved;
            return;
        }
        if (__atomic_load_n(&fork_active, __ATOMIC_ACQUIRE)) {
            wait_fork();
            __atomic_fetch_add(&fault_waits, 1, __ATOMIC_RELAXED);
            errno = saved;
            return;
        }
        unsigned g = __atomic_load_n(&prot_gen, __ATOMIC_ACQUIRE);
        if ((g & 1) && a >= prot_lo && a < prot_hi) {
            wait_protect(g);
            __atomic_fetch_add(&fault_waits, 1, __ATOMIC_RELAXED);
            errno = saved;
            return;
        }
        /* Not protected now: the protection may have ended between the
         * fault and our look.  Retry; a fault that persists is not ours. */
        if (retry_addr != a) {
            retry_addr = a;
            retry_count = 0;
        }
        if (retry_count++ < 64) {
            sched_yield();
            errno = saved;
            return;
        }
    }
    errno = saved;
    chain(sig, si, uc);
}

/* The signal stack standing in for this thread's own (arena_sigaltstack):
 * the program's stack, its size, and our mapping. */
static __thread void *alt_theirs, *alt_ours;
static __thread size_t alt_theirs_size, alt_ours_size;

int arena_sigaltstack(const stack_t *ss, stack_t *old)
{
    stack_t cur;
    if (syscall(SYS_sigaltstack, NULL, &cur))
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
    int inside = arena_base && !(ss->ss_flags & SS_DISABLE) &&
                 p < arena_base + ARENA_SIZE && p + ss->ss_size > arena_base;
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
    if (syscall(SYS_sigaltstack, &mine, NULL)) {
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

int arena_handler_ours(void)
{
    if (!__atomic_load_n(&handler_on, __ATOMIC_ACQUIRE))
        return 0;
    struct sigaction cur;
    if (__sigaction(SIGSEGV, NULL, &cur))
        return 0;
    return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == segv;
}

int arena_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig != SIGSEGV || !__atomic_load_n(&handler_on, __ATOMIC_ACQUIRE))
        return __sigaction(sig, act, old);
    sd_spin_lock(&chained_lock);
    if (old)
        *old = chained;
    if (act)
        chained = *act;
    sd_spin_unlock(&chained_lock);
    return 0;
}

int arena_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t copy;
    if (set && how != SIG_UNBLOCK) {
        copy = *set;
        unsigned long *w = (unsigned long *)&copy;
        w[0] &= ~(1UL << (32 - 1) | 1UL << (33 - 1));  /* SIGCANCEL, SIGSETXID */
        if (__atomic_load_n(&handler_on, __ATOMIC_ACQUIRE))
            w[0] &= ~(1UL << (SIGSEGV - 1));
        set = &copy;
    }
    long r = syscall(SYS_rt_sigprocmask, how, set, old, 8);
    return r < 0 ? errno : 0;
}

unsigned long arena_fault_waits(void)
{
    return __atomic_load_n(&fault_waits, __ATOMIC_RELAXED) +
           __atomic_load_n(&uffd_waits, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- */
/* System calls at the barrier                                       */

unsigned arena_barrier_gen(void)
{
    return __atomic_load_n(&barrier_gen, __ATOMIC_ACQUIRE);
}

/* Does [a, a+len) meet [lo, hi)?  (len > 0; a wild a+len saturates.) */
static int overlaps(uintptr_t a, size_t len, uintptr_t lo, uintptr_t hi)
{
    uintptr_t end = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len;
    return a < hi && end > lo;
}

/* arena_barrier_wait(), for [a, a+len) or (known 0) any buffer. */
static int barrier_wait(uintptr_t a, size_t len, int known, unsigned gen)
{
    if (!arena_base || barrier_mine ||
        (known && (!len || !overlaps(a, len, arena_base, arena_base + arena_used()))))
        return 0;                       /* (a signal handler on the mesher: EFAULT) */
    int saved = errno, retry = 1;
    /* The flags before the generation: a barrier seen lifted has its
     * bump visible (barrier_gen is bumped before the flag is cleared). */
    if (__atomic_load_n(&fork_active, __ATOMIC_ACQUIRE)) {
        wait_fork();                    /* the whole arena: ours for sure */
    } else {
        unsigned pg = __atomic_load_n(&prot_gen, __ATOMIC_ACQUIRE);
        uintptr_t lo = prot_lo, hi = prot_hi;
        unsigned now = __atomic_load_n(&barrier_gen, __ATOMIC_ACQUIRE);
        if (pg & 1) {
            /* One range, up since before the call and no other barrier
             * meanwhile: if it misses the buffer, the fault is not ours. */
            if (known && now == gen && __atomic_load_n(&prot_gen, __ATOMIC_ACQUIRE) == pg &&
                !overlaps(a, len, lo, hi))
                retry = 0;
            else
                wait_protect(pg);
        } else {
            retry = now != gen;         /* a barrier came and went */
        }
    }
    if (retry)
        __atomic_fetch_add(&barrier_retries, 1, __ATOMIC_RELAXED);
    errno = saved;
    return retry;
}

int arena_barrier_wait(const void *buf, size_t len, unsigned gen)
{
    return barrier_wait((uintptr_t)buf, len, 1, gen);
}

int arena_barrier_wait_any(unsigned gen)
{
    return barrier_wait(0, 0, 0, gen);
}

int arena_mapped(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    return arena_base && a >= arena_base && len <= arena_used() &&
           a - arena_base <= arena_used() - len;
}

unsigned long arena_syscall_retries(void)
{
    return __atomic_load_n(&barrier_retries, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- */
/* Set-up and segments                                               */

int arena_init(void)
{
    static int done;
    if (done)
        return arena_base ? 0 : EINVAL;
    done = 1;
    void *base;
    int fd, err = os_reserve_aligned(ARENA_SIZE, SD_SEGMENT_SIZE, &base);
    if (err)
        return err;
    if ((err = os_memfd(ARENA_SIZE, &fd))) {
        os_unmap(base, ARENA_SIZE);
        return err;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (__sigaction(SIGSEGV, &sa, &chained)) {
        err = errno;
        close(fd);
        os_unmap(base, ARENA_SIZE);
        return err;
    }
    arena_fd = fd;
    /* The barrier of a mesh: userfaultfd where permitted (auto, uffd). */
    if (sd_opt.mesh_barrier != SD_BARRIER_MPROTECT) {
        int e = uffd_open();
        if (e && sd_opt.mesh_barrier == SD_BARRIER_UFFD)
            sd_warn("SLABDEFRAG_MESH_BARRIER=uffd: userfaultfd is not available "
                    "(errno %d); using mprotect", e);
    }
    __atomic_store_n(&handler_on, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&arena_base, (uintptr_t)base, __ATOMIC_RELEASE);
    return 0;
}

int arena_segment_map(void **out)
{
    if (!arena_base)
        return ENOMEM;
    size_t off = __atomic_fetch_add(&arena_next, SD_SEGMENT_SIZE, __ATOMIC_ACQ_REL);
    if (off + SD_SEGMENT_SIZE > ARENA_SIZE)
        return ENOMEM;
    void *p = (void *)(arena_base + off);
    int err = os_map_shared_fixed(p, SD_SEGMENT_SIZE, arena_fd, off);
    if (err)
        return err;                     /* the hole stays unused */
    if (uffd_ready())
        uffd_register(p, SD_SEGMENT_SIZE);      /* for the uffd barrier */
    *out = p;
    return 0;
}

void arena_purge(void *p, size_t size)
{
    if (arena_contains(p))
        os_punch_hole(arena_fd, (uintptr_t)p - arena_base, size);
    else
        os_purge(p, size);
}

/* A remap of the range under the uffd barrier replaces its VMA: the
 * release must wake its waiters rather than un-protect (core/uffd.h). */
static void note_remap(void *dst)
{
    if (barrier_mine && barrier_uffd && (uintptr_t)dst == prot_lo)
        prot_remapped = 1;
}

int arena_alias(void *dst, const void *src, size_t size)
{
    note_remap(dst);
    return os_map_shared_fixed(dst, size, arena_fd, (uintptr_t)src - arena_base);
}

int arena_unalias(void *dst, size_t size)
{
    note_remap(dst);
    int err = os_map_shared_fixed(dst, size, arena_fd, (uintptr_t)dst - arena_base);
    if (!err && uffd_ready() && !(barrier_mine && barrier_uffd))
        uffd_register(dst, size);       /* merges with its registered neighbours */
    return err;
}

/* The mesher blocks the asynchronous signals while a range is protected:
 * a handler running on it that wrote into the range would wait for the
 * thread it interrupted, forever, under either barrier. */
static void block_signals(void)
{
    sigset_t set;
    sigfillset(&set);                   /* glibc leaves its internal two out */
    sigdelset(&set, SIGSEGV);           /* synchronous: never blocked */
    sigdelset(&set, SIGBUS);
    sigdelset(&set, SIGILL);
    sigdelset(&set, SIGFPE);
    sigdelset(&set, SIGTRAP);
    sigdelset(&set, SIGSYS);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, &prot_saved_mask, 8);
}

static void restore_signals(void)
{
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &prot_saved_mask, NULL, 8);
}

static void uffd_failed(const char *what, int err)
{
    if (__atomic_fetch_add(&uffd_fallbacks, 1, __ATOMIC_RELAXED) == 0)
        sd_warn("meshing: userfaultfd %s failed (errno %d); using the mprotect "
                "barrier from now on", what, err);
}

int arena_protect_begin(void *p, size_t size)
{
    prot_lo = (uintptr_t)p;
    prot_hi = (uintptr_t)p + size;
    barrier_mine = 1;
    block_signals();
    if (uffd_ready()) {
        int err = uffd_protect(p, size);
        if (!err) {
            prot_remapped = 0;
            barrier_uffd = 1;
            return 0;
        }
        uffd_failed("write-protect", err);
    }
    __atomic_fetch_add(&barrier_gen, 1, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&prot_gen, 1, __ATOMIC_ACQ_REL);        /* odd */
    int err = os_protect(p, size, 0);
    if (err)
        arena_protect_end();
    return err;
}

void arena_protect_end(void)
{
    if (barrier_uffd) {
        int err;
        unsigned long n = uffd_release((void *)prot_lo, prot_hi - prot_lo,
                                       prot_remapped, &err);
        __atomic_fetch_add(&uffd_waits, n, __ATOMIC_RELAXED);
        if (err)
            uffd_failed("release", err);
        barrier_uffd = 0;
    } else {
        __atomic_fetch_add(&barrier_gen, 1, __ATOMIC_ACQ_REL);
        __atomic_fetch_add(&prot_gen, 1, __ATOMIC_ACQ_REL);    /* even */
    }
    barrier_mine = 0;
    restore_signals();
}

const char *arena_barrier_name(void)
{
    if (!arena_base)
        return "none";
    return uffd_ready() ? "uffd" : "mprotect";
}

/* ---------------------------------------------------------------- */
/* Fork                                                              */

void arena_fork_prepare(void)
{
    if (!arena_base)
        return;
    if (pipe2(fork_pipe, O_CLOEXEC))
        fork_pipe[0] = fork_pipe[1] = -1;
    fork_pid = getpid();
    fork_tid = os_gettid();
    child_done = 0;
    __atomic_fetch_add(&barrier_gen, 1, __ATOMIC_ACQ_REL);
    barrier_mine = 1;
    __atomic_store_n(&fork_active, 1, __ATOMIC_RELEASE);
    /* Without our handler a writer would crash: then copy unprotected
     * (the child may see writes the parent's other threads make while it
     * copies; documented in arena.h's caller, classes/mesh.c). */
    fork_protected = arena_handler_ours() && fork_pipe[0] >= 0 &&
                     os_protect((void *)arena_base, arena_used(), 0) == 0;
}

void arena_fork_parent(void)
{
    if (!arena_base)
        return;
    if (fork_pipe[1] >= 0) {
        close(fork_pipe[1]);
        char c;
        while (read(fork_pipe[0], &c, 1) < 0 && errno == EINTR)
            ;                           /* EOF if the fork failed */
        close(fork_pipe[0]);
    }
    fork_pipe[0] = fork_pipe[1] = -1;
    if (fork_protected) {
        os_protect((void *)arena_base, arena_used(), 1);
        segment_guard_all(1);           /* the fork handler holds the kind locks */
    }
    __atomic_fetch_add(&barrier_gen, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&fork_active, 0, __ATOMIC_RELEASE);
    barrier_mine = 0;
}

static void realias_one(struct slab *s, void *arg)
{
    if (s->state == SLAB_MESHED && s->mesh_host)
        arena_alias(s->start, s->mesh_host->start, seg_kind_bytes(s->kind));
}

/* Runs once in the child: from the atfork handler, or from the SIGSEGV
 * handler if the child wrote to the heap first.  Single-threaded. */
static void fork_child_copy(void)
{
    if (child_done)
        return;
    child_done = 1;
    int fd;
    size_t used = arena_used();
    if (os_memfd(ARENA_SIZE, &fd) ||
        os_copy_file_data(arena_fd, fd, used) ||
        os_map_shared_fixed((void *)arena_base, used, fd, 0))
        sd_fatal("fork: cannot copy the mesh arena for the child (errno %d)", errno);
    int old = arena_fd;
    arena_fd = fd;
    segment_for_each_slab(realias_one, NULL, 1);
    segment_guard_all(1);
    uffd_fork_child();                  /* the inherited one is the parent's */
    if (uffd_ready())
        uffd_register((void *)arena_base, used);   /* the new mappings */
    close(old);
    if (fork_pipe[1] >= 0) {
        char c = 1;
        if (write(fork_pipe[1], &c, 1) < 0) { /* the parent sees EOF */ }
        close(fork_pipe[1]);
        close(fork_pipe[0]);
    }
    fork_pipe[0] = fork_pipe[1] = -1;
    __atomic_store_n(&fork_active, 0, __ATOMIC_RELEASE);
    barrier_mine = 0;
}

void arena_fork_child(void)
{
    if (arena_base)
        fork_child_copy();
}
