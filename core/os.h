/*
 * core/os.h - the one contract with the operating system.
 *
 * Only core/os.c calls mmap, madvise, munmap or mremap.  Every function
 * states its preconditions; those that can fail return 0 or an errno.
 */
#ifndef SD_CORE_OS_H
#define SD_CORE_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define SD_PAGE_SIZE 4096UL

/* Map `size` bytes (a multiple of the page size) of zeroed read-write
 * memory aligned to `align` (a power of two >= page size).  *out gets the
 * address.  Returns 0 or ENOMEM.  It maps `size` bytes, or briefly less
 * than `size + align`, and under an address-space limit (RLIMIT_AS) with
 * no room for that, tries aligned addresses one by one: ENOMEM means
 * `size` bytes do not fit. */
int os_map_aligned(size_t size, size_t align, void **out);
/* Is an address-space limit (RLIMIT_AS) set?  A system call. */
int os_as_limited(void);
/* Map `size` bytes of zeroed read-write memory at exactly p (page
 * aligned), only if nothing is mapped there.  0, EEXIST or ENOMEM. */
int os_map_at(void *p, size_t size);
/* Map `size` bytes with MAP_NORESERVE (for sparse tables). 0 or ENOMEM. */
int os_map_sparse(size_t size, void **out);
/* Unmap [p, p+size); p and size page aligned. 0 or errno. */
int os_unmap(void *p, size_t size);
/* Give the physical memory of [p, p+size) back; the range stays mapped and
 * reads back as zero.  p and size page aligned.  0 or errno. */
int os_purge(void *p, size_t size);
/* Fault [p, p+size) in, writable, in one call (MADV_POPULATE_WRITE, Linux
 * 5.14): 0, or an errno (EINVAL before 5.14: nothing done). */
int os_populate(void *p, size_t size);
/* os_purge of n ranges: one process_madvise(2) call per OS_BATCH_MAX
 * ranges, whose one TLB flush (an IPI to every other CPU running the
 * program) covers them all on anonymous memory since Linux 6.16, where a
 * madvise each flushes each; madvise range by range on a kernel without
 * process_madvise(MADV_DONTNEED) for itself (before 6.13). */
#define OS_BATCH_MAX 64
struct os_range { void *p; size_t size; };
void os_purge_batch(const struct os_range *r, unsigned n);
/* Grow or shrink a mapping, possibly moving it.  0 or errno. */
int os_remap(void *old, size_t old_size, size_t new_size, void **out);

/* Make [p, p+size) inaccessible (PROT_NONE): a guard page.  0 or errno. */
int os_guard(void *p, size_t size);
/* CPUs online (at least 1; read once). */
unsigned os_ncpus(void);
/* membarrier(2) with command cmd (MEMBARRIER_CMD_*, no flags): its
 * result, or -errno. */
int os_membarrier(int cmd);

/* Block the calling thread's asynchronous signals: all but the
 * synchronous ones (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS: a
 * fault must still reach its handler) and glibc's two internal ones.
 * *old gets the mask as it was (the kernel's 64 bits), for
 * os_signals_restore.  Async-signal-safe; a system call each. */
void os_signals_block_async(uint64_t *old);
void os_signals_restore(uint64_t mask);

/* ---- remappable memory (meshing, core/heapfile.c) ----
 * Shared anonymous memory can be mapped at two addresses without a file
 * descriptor: a new object with os_map_shared_anon, a second view of its
 * pages with os_alias_fixed.  An object lives while any mapping of it does.
 *
 * Map `size` bytes of new shared anonymous memory (a zero object of its
 * own), read-write; `populate`: fault it all in now.  0 or errno. */
int os_map_shared_anon(size_t size, int populate, void **out);
/* Move the whole mapping [from, from+size) to `to`, replacing whatever
 * was there.  0 or errno; on a failure `to` may have been unmapped. */
int os_move_fixed(void *from, size_t size, void *to);
/* Map the pages of the shared mapping at [src, src+size) at `dst` too,
 * replacing whatever was there; src keeps its mapping.  0 or errno; on a
 * failure `dst` may have been unmapped. */
int os_alias_fixed(const void *src, size_t size, void *dst);
/* Free the pages of the shared object under [p, p+size) (MADV_REMOVE):
 * every mapping of them reads back zero.  0 or errno. */
int os_remove(void *p, size_t size);
/* Is every page of [p, p+size) mapped? */
int os_mapped(void *p, size_t size);
/* Map [p, p+size) read-write, private anonymous and zero, MAP_FIXED,
 * replacing whatever was there.  0 or errno. */
int os_map_anon_fixed(void *p, size_t size);
/* Make [p, p+size) read-only (writable 0) or read-write (1).  0 or errno. */
int os_protect(void *p, size_t size, int writable);
/* vm.max_map_count, or 65530 if it cannot be read. */
size_t os_max_map_count(void);

/* The allocator's own descriptors live at OS_FD_MIN or above
 * (core/fdguard.c): a program that closes its stdin and opens a file
 * expects fd 0 back. */
#define OS_FD_MIN 512
/* Grow the process's descriptor table past OS_FD_MIN now, from the library
 * constructor while the program has one thread.  A table shared by
 * several threads grows only after an RCU grace period (the kernel's
 * expand_fdtable), which would delay the move of the shrinker's eventfd,
 * created when the program starts its second thread, by milliseconds.
 * With one thread the growth costs microseconds; the table never
 * shrinks. */
void os_fd_reserve(void);
/* Thread id (gettid), never 0. */
uint32_t os_gettid(void);
/* Sleep about us microseconds. */
void os_sleep_us(unsigned us);
/* Monotonic time in nanoseconds. */
uint64_t os_now_ns(void);
/* A clock_gettime() reading in nanoseconds. */
static inline uint64_t os_timespec_ns(const struct timespec *t)
{
    return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}
/* ---- the allocator's own system calls ----
 * The shared library exports read, pread, close, fcntl, signal and
 * syscall under their libc names (preload/).  Inside it a plain call of
 * one of those names binds to that wrapper, while the static core the
 * tests link calls libc's: the allocator's own calls go through these
 * instead, so that both run the same code and no call binds to a higher
 * layer unseen.  Behind them are glibc's exported internal entries
 * (__read, __pread64, __close, __sigaction), which nothing interposes, and
 * the system call instruction.  Nothing here retries at the mesh write
 * barrier: every buffer passed is the caller's stack or static memory. */
ssize_t os_read(int fd, void *buf, size_t n);
ssize_t os_pread(int fd, void *buf, size_t n, off_t off);
int os_close(int fd);
#if defined(__x86_64__)
/* The system call instruction: the kernel's result, -errno on failure
 * (errno untouched).  os_syscall6's, and the preload layer's fork-like
 * calls' (preload/forks.c). */
static inline long os_raw_syscall6(long n, long a1, long a2, long a3, long a4, long a5,
                                   long a6)
{
    register long r10 __asm__("r10") = a4;
    register long r8 __asm__("r8") = a5;
    register long r9 __asm__("r9") = a6;
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}
#endif
/* syscall(2), without the preload layer's wrapper (which catches
 * fork-like numbers): up to six arguments, -1 and errno on failure. */
long os_syscall6(long n, long a1, long a2, long a3, long a4, long a5, long a6);
#define OS_SYSCALL_ARGS(n, a1, a2, a3, a4, a5, a6, ...) \
    os_syscall6((long)(n), (long)(a1), (long)(a2), (long)(a3), (long)(a4), (long)(a5), (long)(a6))
#define os_syscall(...) OS_SYSCALL_ARGS(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)
/* abort() with SIGABRT's default action: a program's handler, which may
 * allocate, does not run inside the allocator. */
void os_abort(void) __attribute__((noreturn));

/* Up to size bytes of the start of a small file (/proc, /sys) into buf;
 * the bytes read or -1.  Does not allocate. */
ssize_t os_read_file(const char *path, char *buf, size_t size);
/* Resident set size of this process in bytes (from /proc/self/statm),
 * 0 if unknown.  Does not allocate. */
size_t os_rss_bytes(void);

/* The code of the C library, the dynamic loader and this library: a call
 * from there may hold their locks (hooks/shrinker.c, "Lazy start").
 * os_runtime_text_init finds it (dl_iterate_phdr; at start-up) and returns
 * 0, or -1 when libc's or this library's code was not found;
 * os_in_runtime_text(pc) is 1 for an address in it (and for any address
 * before a successful init). */
int os_runtime_text_init(void);
int os_in_runtime_text(const void *pc);

#endif
