/*
 * core/writebarrier.c - the write barrier of the heap file: the SIGSEGV handler
 * that parks a writer while a mesh or a fork protects the memory it
 * writes, the protection of one slab for a mesh (userfaultfd or
 * mprotect), and the waits of the system-call wrappers (see heapfile.h).
 */
#define _GNU_SOURCE
#include "heapfile.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "heapfile_internal.h"
#include "options.h"
#include "os.h"
#include "types.h"
#include "uffd.h"

/* The barrier.  wbarrier_prot_gen is odd while [wbarrier_lo, wbarrier_hi)
 * is read-only.  wbarrier_generation counts every barrier going up or down (a
 * mesh's protect, a fork): it is bumped before a barrier is raised and
 * before it is marked lifted, so whoever sees a barrier lifted also sees
 * the bump. */
uintptr_t wbarrier_lo, wbarrier_hi;
unsigned wbarrier_prot_gen;
unsigned wbarrier_generation;
static unsigned long wbarrier_retries;   /* system calls told to retry */
static unsigned long fault_waits;

/* The userfaultfd barrier (core/uffd.h): on while uffd_ready().  A mesh's
 * range [wbarrier_lo, wbarrier_hi) is then protected through it, the
 * generations stay as they are (no system call can fail for it), and
 * wbarrier_remapped says the range was mapped anew before the release. */
int wbarrier_uffd;                       /* this mesh's range: uffd */
int wbarrier_remapped;
static unsigned long uffd_waits;        /* writers the uffd barrier parked */
static unsigned long uffd_fallbacks;    /* uffd failed: mprotect from then on */
static sigset_t prot_saved_mask;        /* the mesher's mask, signals blocked */

static __thread uintptr_t retry_addr;
static __thread unsigned retry_count;
__thread int wbarrier_mine;              /* this thread raised the barrier */

/* ---------------------------------------------------------------- */
/* The SIGSEGV handler                                               */

/* The two waits, shared by the handler and wbarrier_wait().  They
 * yield the CPU: a mesh's pause is microseconds, a fork's the time the
 * child takes to copy the heap. */
static void wbarrier_wait_fork(void)
{
    if (getpid() != forkcopy_pid)
        forkcopy_child_copy();              /* the child wrote before its handler ran */
    else
        while (__atomic_load_n(&forkcopy_active, __ATOMIC_ACQUIRE))
            sched_yield();
}

static void wbarrier_wait_protect(unsigned g)
{
    while (__atomic_load_n(&wbarrier_prot_gen, __ATOMIC_ACQUIRE) == g)
        sched_yield();
}

void wbarrier_segv(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (si->si_code > 0 && heapfile_contains((void *)a)) {
        if (__atomic_load_n(&forkcopy_active, __ATOMIC_ACQUIRE) && forkcopy_step(a, uc)) {
            errno = saved;
            return;
        }
        if (__atomic_load_n(&forkcopy_active, __ATOMIC_ACQUIRE)) {
            wbarrier_wait_fork();
            __atomic_fetch_add(&fault_waits, 1, __ATOMIC_RELAXED);
            errno = saved;
            return;
        }
        unsigned g = __atomic_load_n(&wbarrier_prot_gen, __ATOMIC_ACQUIRE);
        if ((g & 1) && a >= wbarrier_lo && a < wbarrier_hi) {
            wbarrier_wait_protect(g);
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
    sigchain_call(sig, si, uc);
}

unsigned long wbarrier_fault_waits(void)
{
    return __atomic_load_n(&fault_waits, __ATOMIC_RELAXED) +
           __atomic_load_n(&uffd_waits, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- */
/* A mesh's protected range                                          */

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
    os_syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, &prot_saved_mask, 8);
}

static void restore_signals(void)
{
    os_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &prot_saved_mask, NULL, 8);
}

static void uffd_failed(const char *what, int err)
{
    if (__atomic_fetch_add(&uffd_fallbacks, 1, __ATOMIC_RELAXED) == 0)
        sd_warn("meshing: userfaultfd %s failed (errno %d); using the mprotect "
                "barrier from now on", what, err);
}

/* The userfaultfd barrier's descriptor is opened at the first mesh, so
 * that a program that never meshes holds none; wbarrier_init probes at
 * start-up (open, close) whether it can be had, and says so once. */
static int uffd_usable;                 /* probed: uffd_open() works here */

static void uffd_warn(int e)
{
    if (sd_opt.mesh_barrier == SD_BARRIER_UFFD)
        sd_warn("SLABDEFRAG_MESH_BARRIER=uffd: userfaultfd is not available "
                "(errno %d); using mprotect", e);
}

void wbarrier_init(void)
{
    if (sd_opt.mesh_barrier == SD_BARRIER_MPROTECT)
        return;
    int e = uffd_open();
    if (e) {
        uffd_warn(e);
        return;
    }
    uffd_close();
    uffd_usable = 1;
}

static void uffd_first_open(void)
{
    if (!uffd_usable)
        return;
    uffd_usable = 0;
    int e = uffd_open();
    if (e)
        uffd_warn(e);
}

int wbarrier_protect_begin(void *p, size_t size)
{
    uffd_first_open();
    wbarrier_lo = (uintptr_t)p;
    wbarrier_hi = (uintptr_t)p + size;
    wbarrier_mine = 1;
    block_signals();
    if (uffd_ready()) {
        int err = uffd_protect(p, size);
        if (!err) {
            wbarrier_remapped = 0;
            wbarrier_uffd = 1;
            return 0;
        }
        uffd_failed("write-protect", err);
    }
    __atomic_fetch_add(&wbarrier_generation, 1, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&wbarrier_prot_gen, 1, __ATOMIC_ACQ_REL);        /* odd */
    int err = os_protect(p, size, 0);
    if (err)
        wbarrier_protect_end();
    return err;
}

void wbarrier_protect_end(void)
{
    if (wbarrier_uffd) {
        int err;
        unsigned long n = uffd_release((void *)wbarrier_lo, wbarrier_hi - wbarrier_lo,
                                       wbarrier_remapped, &err);
        __atomic_fetch_add(&uffd_waits, n, __ATOMIC_RELAXED);
        if (err)
            uffd_failed("release", err);
        wbarrier_uffd = 0;
    } else {
        __atomic_fetch_add(&wbarrier_generation, 1, __ATOMIC_ACQ_REL);
        __atomic_fetch_add(&wbarrier_prot_gen, 1, __ATOMIC_ACQ_REL);    /* even */
    }
    wbarrier_mine = 0;
    restore_signals();
}

const char *wbarrier_name(void)
{
    if (!heapfile_on)
        return "none";
    return uffd_ready() || uffd_usable ? "uffd" : "mprotect";
}

/* ---------------------------------------------------------------- */
/* System calls at the barrier                                       */

unsigned wbarrier_gen(void)
{
    return __atomic_load_n(&wbarrier_generation, __ATOMIC_ACQUIRE);
}

/* Does [a, a+len) meet [lo, hi)?  (len > 0; a wild a+len saturates.) */
static int overlaps(uintptr_t a, size_t len, uintptr_t lo, uintptr_t hi)
{
    uintptr_t end = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len;
    return a < hi && end > lo;
}

/* wbarrier_wait(), for [a, a+len) or (known 0) any buffer. */
static int wait_at_barrier(uintptr_t a, size_t len, int known, unsigned gen)
{
    if (!heapfile_on || wbarrier_mine || (known && !heapfile_overlaps((void *)a, len)))
        return 0;                       /* (a signal handler on the mesher: EFAULT) */
    int saved = errno, retry = 1;
    /* The flags before the generation: a barrier seen lifted has its
     * bump visible (wbarrier_generation is bumped before the flag is cleared). */
    if (__atomic_load_n(&forkcopy_active, __ATOMIC_ACQUIRE)) {
        wbarrier_wait_fork();                    /* the whole arena: ours for sure */
    } else {
        unsigned pg = __atomic_load_n(&wbarrier_prot_gen, __ATOMIC_ACQUIRE);
        uintptr_t lo = wbarrier_lo, hi = wbarrier_hi;
        unsigned now = __atomic_load_n(&wbarrier_generation, __ATOMIC_ACQUIRE);
        if (pg & 1) {
            /* One range, up since before the call and no other barrier
             * meanwhile: if it misses the buffer, the fault is not ours. */
            if (known && now == gen && __atomic_load_n(&wbarrier_prot_gen, __ATOMIC_ACQUIRE) == pg &&
                !overlaps(a, len, lo, hi))
                retry = 0;
            else
                wbarrier_wait_protect(pg);
        } else {
            retry = now != gen;         /* a barrier came and went */
        }
    }
    if (retry)
        __atomic_fetch_add(&wbarrier_retries, 1, __ATOMIC_RELAXED);
    errno = saved;
    return retry;
}

int wbarrier_wait(const void *buf, size_t len, unsigned gen)
{
    return wait_at_barrier((uintptr_t)buf, len, 1, gen);
}

int wbarrier_wait_any(unsigned gen)
{
    return wait_at_barrier(0, 0, 0, gen);
}

unsigned long wbarrier_syscall_retries(void)
{
    return __atomic_load_n(&wbarrier_retries, __ATOMIC_RELAXED);
}

