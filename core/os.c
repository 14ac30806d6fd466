/*
 * core/os.c - mmap, madvise, munmap, mprotect, fallocate and friends (see
 * os.h).
 */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fdguard.h"

/* The aligned `size` bytes inside mapping [p, p+span): unmap the rest. */
static void *trim_aligned(void *p, size_t span, size_t size, size_t align)
{
    uintptr_t a = (uintptr_t)p;
    uintptr_t start = (a + align - 1) & ~(uintptr_t)(align - 1);
    if (start > a)
        munmap(p, start - a);
    uintptr_t end = start + size, mend = a + span;
    if (mend > end)
        munmap((void *)end, mend - end);
    return (void *)start;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define ALIGN_HINTS 64          /* aligned addresses tried under a limit */

static void *map_anon(void *hint, size_t size, int flags)
{
    return mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
}

/* Under an address-space limit (RLIMIT_AS) that leaves no room for the
 * over-mapping: `size` bytes at aligned addresses from `near` down, each
 * mapped only if nothing is there.  The kernel places mappings top-down,
 * so below the spot it chose for an unaligned one there is usually a gap. */
static void *map_aligned_hinted(uintptr_t near, size_t size, size_t align)
{
    uintptr_t h = near & ~(uintptr_t)(align - 1);
    for (unsigned i = 0; i < ALIGN_HINTS && h >= align; i++, h -= align) {
        void *p = map_anon((void *)h, size, MAP_FIXED_NOREPLACE);
        if (p == (void *)h)
            return p;
        if (p != MAP_FAILED)
            munmap(p, size);            /* a kernel that took it as a hint */
        else if (errno != EEXIST)
            return NULL;                /* ENOMEM: no room at all */
    }
    return NULL;
}

int os_map_aligned(size_t size, size_t align, void **out)
{
    if (align < SD_PAGE_SIZE)
        align = SD_PAGE_SIZE;
    if (size + align < size)
        return ENOMEM;
    /* Exactly `size` first: the kernel puts a mapping right below the
     * previous one, so segments and chunks often come out aligned. */
    void *p = map_anon(NULL, size, 0);
    if (p == MAP_FAILED)
        return ENOMEM;
    uintptr_t a = (uintptr_t)p, down = a & ~(uintptr_t)(align - 1);
    if (a == down) {
        *out = p;
        return 0;
    }
    /* Grow it down to the aligned address below and drop its top: never
     * more than `align` bytes beyond `size` mapped at once. */
    void *ext = map_anon((void *)down, a - down, MAP_FIXED_NOREPLACE);
    if (ext == (void *)down) {
        munmap((void *)(down + size), a - down);
        *out = (void *)down;
        return 0;
    }
    int err = ext == MAP_FAILED ? errno : EEXIST;
    if (ext != MAP_FAILED)
        munmap(ext, a - down);          /* a kernel that took it as a hint */
    munmap(p, size);
    if (err != ENOMEM) {                /* something below: map twice, trim */
        size_t span = size + align - SD_PAGE_SIZE;
        void *q = map_anon(NULL, span, 0);
        if (q != MAP_FAILED) {
            *out = trim_aligned(q, span, size, align);
            return 0;
        }
    }
    void *q = map_aligned_hinted(a, size, align);
    if (!q)
        return ENOMEM;
    *out = q;
    return 0;
}

int os_as_limited(void)
{
    struct rlimit r;
    return !getrlimit(RLIMIT_AS, &r) && r.rlim_cur != RLIM_INFINITY;
}

int os_map_at(void *p, size_t size)
{
    void *r = map_anon(p, size, MAP_FIXED_NOREPLACE);
    if (r == p)
        return 0;
    if (r == MAP_FAILED)
        return errno;
    munmap(r, size);                    /* a kernel that took it as a hint */
    return EEXIST;
}

int os_map_sparse(size_t size, void **out)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return ENOMEM;
    *out = p;
    return 0;
}

int os_unmap(void *p, size_t size)
{
    return munmap(p, size) ? errno : 0;
}

int os_purge(void *p, size_t size)
{
    return madvise(p, size, MADV_DONTNEED) ? errno : 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int os_populate(void *p, size_t size)
{
    return madvise(p, size, MADV_POPULATE_WRITE) ? errno : 0;
}

#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* A pidfd of this process for process_madvise(2), opened once per pid (a
 * fork child closes the parent's and opens its own), guarded
 * (core/fdguard.h).  Returns it with a use begun (end it with
 * fdguard_put), or -1 when the kernel has none. */
static int self_pidfd(void)
{
    static int fd = -1, owner;
    int me = (int)getpid();
    if (__atomic_load_n(&owner, __ATOMIC_ACQUIRE) != me) {
        fdguard_open_begin();           /* (one opening at a time) */
        if (owner != me) {
            fdguard_close(&fd);         /* the parent's, in a fork child */
            fdguard_adopt((int)os_syscall(SYS_pidfd_open, me, 0), &fd);
            __atomic_store_n(&owner, me, __ATOMIC_RELEASE);
        }
        fdguard_open_end();
    }
    int r = fdguard_get(&fd);
    if (r < 0)
        fdguard_put();
    return r;
}

void os_purge_batch(const struct os_range *r, unsigned n)
{
    for (; n > OS_BATCH_MAX; r += OS_BATCH_MAX, n -= OS_BATCH_MAX)
        os_purge_batch(r, OS_BATCH_MAX);
    static int unsupported;             /* no process_madvise(MADV_DONTNEED) */
    unsigned done = 0;
    int pfd;
    if (n > 1 && !__atomic_load_n(&unsupported, __ATOMIC_RELAXED) && (pfd = self_pidfd()) >= 0) {
        struct iovec iov[OS_BATCH_MAX];
        size_t want = 0;
        for (unsigned i = 0; i < n; i++) {
            iov[i] = (struct iovec){ r[i].p, r[i].size };
            want += r[i].size;
        }
        long got = os_syscall(SYS_process_madvise, pfd, iov, (size_t)n, MADV_DONTNEED, 0u);
        fdguard_put();
        if (got == (long)want)
            return;
        if (got < 0 && (errno == EINVAL || errno == ENOSYS || errno == EPERM))
            __atomic_store_n(&unsupported, 1, __ATOMIC_RELAXED);
        /* a partial one: the ranges it did not reach, one by one */
        for (size_t left = got > 0 ? (size_t)got : 0; done < n && left >= r[done].size; done++)
            left -= r[done].size;
    }
    for (; done < n; done++)
        madvise(r[done].p, r[done].size, MADV_DONTNEED);
}

int os_remap(void *old, size_t old_size, size_t new_size, void **out)
{
    void *p = mremap(old, old_size, new_size, MREMAP_MAYMOVE);
    if (p == MAP_FAILED)
        return errno;
    *out = p;
    return 0;
}

int os_guard(void *p, size_t size)
{
    return mprotect(p, size, PROT_NONE) ? errno : 0;
}

unsigned os_ncpus(void)
{
    static unsigned n;
    unsigned v = __atomic_load_n(&n, __ATOMIC_RELAXED);
    if (!v) {
        long r = sysconf(_SC_NPROCESSORS_ONLN);
        v = r > 0 ? (unsigned)r : 1;
        __atomic_store_n(&n, v, __ATOMIC_RELAXED);
    }
    return v;
}

int os_membarrier(int cmd)
{
    long r = os_syscall(__NR_membarrier, cmd, 0, 0);
    return r < 0 ? -errno : (int)r;
}

void os_signals_block_async(uint64_t *old)
{
    sigset_t set;
    sigfillset(&set);                   /* glibc leaves its internal two out */
    sigdelset(&set, SIGSEGV);
    sigdelset(&set, SIGBUS);
    sigdelset(&set, SIGILL);
    sigdelset(&set, SIGFPE);
    sigdelset(&set, SIGTRAP);
    sigdelset(&set, SIGSYS);
    os_syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, old, sizeof *old);
}

void os_signals_restore(uint64_t mask)
{
    os_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, sizeof mask);
}

void os_fd_reserve(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        int hi = (int)os_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, OS_FD_MIN);
        if (hi >= 0) {
            os_close(hi);
            return;
        }
        if (errno != EBADF)
            return;                     /* EINVAL, EMFILE: a low RLIMIT_NOFILE */
    }
}

int os_map_shared_anon(size_t size, int populate, void **out)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (p == MAP_FAILED)
        return errno;
    *out = p;
    return 0;
}

int os_move_fixed(void *from, size_t size, void *to)
{
    void *r = mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to);
    return r == MAP_FAILED ? errno : 0;
}

int os_alias_fixed(const void *src, size_t size, void *dst)
{
    /* An old size of 0 on a shared mapping maps its pages a second time
     * and leaves the first mapping as it is (mremap(2)). */
    void *r = mremap((void *)src, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    return r == MAP_FAILED ? errno : 0;
}

int os_remove(void *p, size_t size)
{
    return madvise(p, size, MADV_REMOVE) ? errno : 0;
}

int os_mapped(void *p, size_t size)
{
    return madvise(p, size, MADV_NORMAL) == 0 || errno != ENOMEM;
}

int os_map_anon_fixed(void *p, size_t size)
{
    void *r = mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    return r == MAP_FAILED ? errno : 0;
}

int os_protect(void *p, size_t size, int writable)
{
    return mprotect(p, size, writable ? PROT_READ | PROT_WRITE : PROT_READ)
               ? errno : 0;
}

/* ---------------------------------------------------------------- */
/* The allocator's own system calls                                  */

/* glibc: exported, not declared; the same functions as read, pread64,
 * close and sigaction, under names no wrapper of ours takes. */
extern ssize_t __read(int fd, void *buf, size_t n);
extern ssize_t __pread64(int fd, void *buf, size_t n, off64_t off);
extern int __close(int fd);
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

ssize_t os_read(int fd, void *buf, size_t n)
{
    return __read(fd, buf, n);
}

ssize_t os_pread(int fd, void *buf, size_t n, off_t off)
{
    return __pread64(fd, buf, n, off);
}

int os_close(int fd)
{
    return __close(fd);
}

#if defined(__x86_64__)
long os_syscall6(long n, long a1, long a2, long a3, long a4, long a5, long a6)
{
    long r = os_raw_syscall6(n, a1, a2, a3, a4, a5, a6);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
#else
/* The preload layer wraps syscall() on x86-64 only: here it is libc's. */
long os_syscall6(long n, long a1, long a2, long a3, long a4, long a5, long a6)
{
    return syscall(n, a1, a2, a3, a4, a5, a6);
}
#endif

void os_abort(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    __sigaction(SIGABRT, &sa, NULL);
    abort();
}

/* The start of a small /proc file into buf (NUL-ended); "" on error. */
static void read_proc(const char *path, char *buf, size_t size)
{
    ssize_t n = os_read_file(path, buf, size - 1);
    buf[n > 0 ? n : 0] = 0;
}

ssize_t os_read_file(const char *path, char *buf, size_t size)
{
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = os_read(fd, buf, size);
        os_close(fd);
    }
    return n;
}

/* The decimal number at *p, advancing p past it. */
static size_t parse_num(const char **p)
{
    size_t v = 0;
    while (**p >= '0' && **p <= '9')
        v = v * 10 + (size_t)(*(*p)++ - '0');
    return v;
}

size_t os_max_map_count(void)
{
    char buf[32];
    read_proc("/proc/sys/vm/max_map_count", buf, sizeof buf);
    const char *p = buf;
    size_t v = parse_num(&p);
    return v ? v : 65530;
}

uint32_t os_gettid(void)
{
    return (uint32_t)os_syscall(SYS_gettid);
}

uint64_t os_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return os_timespec_ns(&ts);
}

size_t os_rss_bytes(void)
{
    char buf[128];
    read_proc("/proc/self/statm", buf, sizeof buf);
    const char *p = buf;
    while (*p && *p != ' ') p++;          /* skip size */
    while (*p == ' ') p++;
    return parse_num(&p) * SD_PAGE_SIZE;
}

void os_sleep_us(unsigned us)
{
    struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- */
/* The runtime's code                                                */

#define RUNTIME_RANGES 12
static struct { uintptr_t lo, hi; } runtime_text[RUNTIME_RANGES];
static unsigned runtime_ranges;         /* set once, before any reader */
static int runtime_ready;

struct runtime_find {
    uintptr_t libc_pc, self_pc, loader_base;
    int libc, self;
};

static int runtime_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct runtime_find *f = arg;
    int libc = 0, self = 0, loader = f->loader_base && info->dlpi_addr == f->loader_base;
    for (int pass = 0; pass < 2; pass++)
        for (unsigned i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
                continue;
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
            if (pass == 0) {            /* which object is it? */
                libc |= f->libc_pc >= lo && f->libc_pc < hi;
                self |= f->self_pc >= lo && f->self_pc < hi;
            } else if ((libc || self || loader) && runtime_ranges < RUNTIME_RANGES) {
                runtime_text[runtime_ranges].lo = lo;
                runtime_text[runtime_ranges].hi = hi;
                runtime_ranges++;
            }
        }
    f->libc |= libc;
    f->self |= self;
    return 0;
}

int os_runtime_text_init(void)
{
    /* fflush is libc's (we do not interpose it); this function is ours. */
    struct runtime_find f = { (uintptr_t)&fflush, (uintptr_t)&os_runtime_text_init,
                              (uintptr_t)getauxval(AT_BASE), 0, 0 };
    runtime_ranges = 0;
    dl_iterate_phdr(runtime_object, &f);
    runtime_ready = f.libc && f.self;
    return runtime_ready ? 0 : -1;
}

int os_in_runtime_text(const void *pc)
{
    if (!runtime_ready)
        return 1;
    uintptr_t a = (uintptr_t)pc;
    for (unsigned i = 0; i < runtime_ranges; i++)
        if (a >= runtime_text[i].lo && a < runtime_text[i].hi)
            return 1;
    return 0;
}
