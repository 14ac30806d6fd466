/*
 * preload/fds.c - the program's descriptor calls around the allocator's
 * own descriptors (core/fdguard.h): close, close_range, closefrom, dup,
 * dup2, dup3, fcntl and fcntl64.
 *
 * For the program a descriptor of ours is not open: close, dup and fcntl
 * on it fail with EBADF, as they would without the library; close_range
 * and closefrom close everything else in their range; dup2 and dup3 onto
 * its number first move ours elsewhere, then do what the program asked.
 * The calls that close or take numbers are counted while they run
 * (fdguard_call_begin), so that the library never opens one of its own
 * under them.  glibc's internal calls (closefrom inside posix_spawn's
 * child, which execs anyway) do not come here.
 */
#define _GNU_SOURCE
#undef _FILE_OFFSET_BITS    /* fcntl and fcntl64 are two symbols to define */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdguard.h"
#include "fmt.h"
#include "lock.h"
#include "os.h"

/* glibc: exported, not declared; close and fcntl are cancellation points
 * there, and stay so. */
extern int __close(int fd);
extern int __dup2(int fd, int fd2);
extern int __fcntl(int fd, int cmd, ...);

static int ours(int fd)
{
    return unlikely(fdguard_any()) && fdguard_is_ours(fd);
}

static int ebadf(void)
{
    errno = EBADF;
    return -1;
}

SD_EXPORT int close(int fd)
{
    fdguard_call_begin();
    int r = ours(fd) ? ebadf() : __close(fd);
    fdguard_call_end();
    return r;
}

SD_EXPORT int dup(int fd)
{
    fdguard_call_begin();
    int r = ours(fd) ? ebadf() : (int)os_syscall(SYS_dup, fd);
    fdguard_call_end();
    return r;
}

/* dup2 and dup3 onto a number of ours: ours moves first, unless the call
 * is bound to fail (a bad fd leaves fd2 as it is). */
static int take_number(int fd, int fd2)
{
    if (ours(fd))
        return -1;
    if (fd != fd2 && ours(fd2) && __fcntl(fd, F_GETFD) >= 0)
        fdguard_evict(fd2);
    return 0;
}

SD_EXPORT int dup2(int fd, int fd2)
{
    fdguard_call_begin();
    int r = take_number(fd, fd2) ? ebadf() : __dup2(fd, fd2);
    fdguard_call_end();
    return r;
}

SD_EXPORT int dup3(int fd, int fd2, int flags)
{
    fdguard_call_begin();
    int r = take_number(fd, fd2) ? ebadf() : (int)os_syscall(SYS_dup3, fd, fd2, flags);
    fdguard_call_end();
    return r;
}

/* The argument is an int or a pointer, by command: passed on as a word. */
static int fcntl_va(int fd, int cmd, va_list ap)
{
    void *arg = va_arg(ap, void *);
    return ours(fd) ? ebadf() : __fcntl(fd, cmd, arg);
}

SD_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    int r = fcntl_va(fd, cmd, ap);
    va_end(ap);
    return r;
}

SD_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    int r = fcntl_va(fd, cmd, ap);
    va_end(ap);
    return r;
}

/* close_range(2) over [lo, hi] but the numbers of ours in it. */
static int close_range_around(unsigned lo, unsigned hi, int flags)
{
    int mine[32], n = fdguard_any() ? fdguard_list(mine, 32) : 0;
    for (int i = 0; i < n; i++) {
        unsigned o = (unsigned)mine[i];
        if (o < lo || o > hi)
            continue;
        if (o > lo && os_syscall(SYS_close_range, lo, o - 1, flags))
            return -1;
        if (o == hi)
            return 0;
        lo = o + 1;
    }
    return os_syscall(SYS_close_range, lo, hi, flags) ? -1 : 0;
}

SD_EXPORT int close_range(unsigned lo, unsigned hi, int flags)
{
    fdguard_call_begin();
    int r = lo > hi ? (int)os_syscall(SYS_close_range, lo, hi, flags)
                    : close_range_around(lo, hi, flags);
    fdguard_call_end();
    return r;
}

SD_EXPORT void closefrom(int lo)
{
    if (lo < 0)
        lo = 0;
    fdguard_call_begin();
    int r = close_range_around((unsigned)lo, ~0U, 0), e = errno;
    fdguard_call_end();
    if (r == 0 || e != ENOSYS)
        return;
    /* A kernel without close_range (before 5.9): one close each, up to
     * the descriptor limit, through this file's own close, which passes
     * over ours. */
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1u << 20 ? (int)rl.rlim_cur
                                                                           : 1 << 20;
    for (int fd = lo; fd < max; fd++)
        close(fd);
}
