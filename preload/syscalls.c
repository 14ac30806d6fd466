/*
 * preload/syscalls.c - the receiving system calls across the mesh write
 * barrier (core/heapfile.h): read, pread, readv, preadv, preadv2, recv,
 * recvfrom, recvmsg, and the __*_chk forms _FORTIFY_SOURCE turns some of
 * them into.
 *
 * While a mesh copies a slab under the mprotect barrier, or a fork child
 * copies the shared slots (under either barrier), those pages are read-only.  A
 * write from user space waits in the SIGSEGV handler; the kernel instead
 * fails the call with EFAULT.  (Under the userfaultfd barrier a mesh makes
 * no call fail: the kernel waits, and the wrappers see nothing of it.)
 * Each wrapper is one
 * predictable branch on heapfile_on when meshing is off, then the next
 * definition.  With meshing on it reads the barrier generation, calls, and
 * on EFAULT asks wbarrier_wait() whether a barrier explains it: if so
 * it has waited, and the call is made again.  Files, pipes and stream
 * sockets keep the data when the copy faults; what datagram sockets and
 * event fds lose is listed in core/heapfile.h.
 *
 * The next definition (libc's, or that of an interposer loaded after us)
 * is found with dlsym(RTLD_NEXT) by syscalls_init() in the constructor:
 * the calls stay cancellation points, as the raw syscall() would not be.
 * Until then read and pread go to glibc's exported __read and __pread64,
 * the same functions, and the others resolve at their first call.  (The
 * allocator's own reads do not come here but go to those two directly,
 * core/os.h: inside malloc, a dlsym that allocates would recurse.)  If RTLD_NEXT
 * finds nothing (libc ahead of us in the search order), libc's own
 * definition is taken from its handle; failing that, the system call.
 *
 * recvfrom and recvmsg write the source address, the control messages and
 * the header's lengths and flags after the data has left the socket: an
 * EFAULT there cannot be retried without losing the data.  So, with
 * meshing on, the kernel writes those into stack copies (the header
 * always, an address or a control buffer of at most CONTROL_MAX bytes when
 * it lies in the arena) and the wrapper copies them out from user space,
 * where a write waits at the barrier.  The price: the wrapper reads
 * recvmsg's header and recvfrom's address length itself, so a wild
 * pointer there is a SIGSEGV rather than EFAULT (with meshing on only).
 * Vectored calls retry without reading the iovec array (it may be the bad
 * pointer): any barrier during the call counts.
 */
#define _GNU_SOURCE
#undef _FILE_OFFSET_BITS    /* pread and pread64 are two symbols to define */
#undef _FORTIFY_SOURCE      /* its inline read() would clash with ours */
#include "syscalls.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/lib-names.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fmt.h"
#include "heapfile.h"
#include "lock.h"
#include "os.h"
#include "writebarrier.h"

#define CONTROL_MAX 512         /* bytes of ancillary data copied through the stack */

/* glibc: exported (GLIBC_2.2.5, GLIBC_2.3.4), not declared. */
extern ssize_t __read(int fd, void *buf, size_t n);
extern ssize_t __pread64(int fd, void *buf, size_t n, off64_t off);
extern void __chk_fail(void) __attribute__((noreturn));

/* ---------------------------------------------------------------- */
/* The next definitions                                              */

typedef ssize_t read_fn(int, void *, size_t);
typedef ssize_t pread64_fn(int, void *, size_t, off64_t);
typedef ssize_t readv_fn(int, const struct iovec *, int);
typedef ssize_t preadv64_fn(int, const struct iovec *, int, off64_t);
typedef ssize_t preadv64v2_fn(int, const struct iovec *, int, off64_t, int);
typedef ssize_t recv_fn(int, void *, size_t, int);
typedef ssize_t recvfrom_fn(int, void *, size_t, int, struct sockaddr *, socklen_t *);
typedef ssize_t recvmsg_fn(int, struct msghdr *, int);

/* The system calls, when no definition is found (not cancellation points). */
static ssize_t sys_readv(int fd, const struct iovec *v, int n)
{
    return os_syscall(SYS_readv, fd, v, n);
}
static ssize_t sys_preadv64(int fd, const struct iovec *v, int n, off64_t off)
{
    return os_syscall(SYS_preadv, fd, v, n, (long)off, (long)((uint64_t)off >> 32));
}
static ssize_t sys_preadv64v2(int fd, const struct iovec *v, int n, off64_t off, int fl)
{
    return os_syscall(SYS_preadv2, fd, v, n, (long)off, (long)((uint64_t)off >> 32), fl);
}
static ssize_t sys_recvfrom(int fd, void *buf, size_t n, int fl, struct sockaddr *a,
                            socklen_t *len)
{
    return os_syscall(SYS_recvfrom, fd, buf, n, fl, a, len);
}
static ssize_t sys_recv(int fd, void *buf, size_t n, int fl)
{
    return sys_recvfrom(fd, buf, n, fl, NULL, NULL);
}
static ssize_t sys_recvmsg(int fd, struct msghdr *m, int fl)
{
    return os_syscall(SYS_recvmsg, fd, m, fl);
}

void *syscalls_next_symbol(const char *name, void *fallback)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        void *libc = dlopen(LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
        if (libc) {
            f = dlsym(libc, name);
            dlclose(libc);
        }
    }
    return f ? f : fallback;
}

/* next_<name>: read and pread64 start at glibc's exported aliases; the
 * others at <name>_first, which resolves and calls. */
#define NEXT(name) __atomic_load_n(&next_##name, __ATOMIC_RELAXED)
#define RESOLVE(name, fallback) \
    __atomic_store_n(&next_##name, (name##_fn *)syscalls_next_symbol(#name, (void *)(fallback)), \
                     __ATOMIC_RELAXED)

static read_fn *next_read = __read;
static pread64_fn *next_pread64 = __pread64;

#define FIRST(name, fallback, params, args)                                 \
    static ssize_t name##_first params;                                     \
    static name##_fn *next_##name = name##_first;                           \
    static ssize_t name##_first params                                      \
    {                                                                       \
        RESOLVE(name, fallback);                                            \
        return NEXT(name) args;                                             \
    }
FIRST(readv, sys_readv, (int fd, const struct iovec *v, int n), (fd, v, n))
FIRST(preadv64, sys_preadv64, (int fd, const struct iovec *v, int n, off64_t off),
      (fd, v, n, off))
FIRST(preadv64v2, sys_preadv64v2,
      (int fd, const struct iovec *v, int n, off64_t off, int fl), (fd, v, n, off, fl))
FIRST(recv, sys_recv, (int fd, void *buf, size_t n, int fl), (fd, buf, n, fl))
FIRST(recvfrom, sys_recvfrom,
      (int fd, void *buf, size_t n, int fl, struct sockaddr *a, socklen_t *len),
      (fd, buf, n, fl, a, len))
FIRST(recvmsg, sys_recvmsg, (int fd, struct msghdr *m, int fl), (fd, m, fl))

void syscalls_init(void)
{
    RESOLVE(read, __read);
    RESOLVE(pread64, __pread64);
    RESOLVE(readv, sys_readv);
    RESOLVE(preadv64, sys_preadv64);
    RESOLVE(preadv64v2, sys_preadv64v2);
    RESOLVE(recv, sys_recv);
    RESOLVE(recvfrom, sys_recvfrom);
    RESOLVE(recvmsg, sys_recvmsg);
}

/* ---------------------------------------------------------------- */
/* The retry                                                         */

/* Evaluates to the result of `call`, made again for as long as it fails
 * with EFAULT and `wait` (an wbarrier_wait* call that may use g, the
 * generation read before the call) says a barrier explains it. */
#define BARRIER_RETRY(call, wait) ({                                        \
        ssize_t r_;                                                         \
        unsigned g;                                                         \
        do {                                                                \
            g = wbarrier_gen();                                             \
            r_ = (call);                                                    \
        } while (r_ < 0 && errno == EFAULT && (wait));                      \
        r_; })

/* The slow paths, with meshing on (not cold: then every call takes them). */
static __attribute__((noinline)) ssize_t read_barrier(int fd, void *buf, size_t n)
{
    return BARRIER_RETRY(NEXT(read)(fd, buf, n), wbarrier_wait(buf, n, g));
}

static __attribute__((noinline)) ssize_t pread_barrier(int fd, void *buf, size_t n,
                                                       off64_t off)
{
    return BARRIER_RETRY(NEXT(pread64)(fd, buf, n, off), wbarrier_wait(buf, n, g));
}

static __attribute__((noinline)) ssize_t readv_barrier(int fd, const struct iovec *v,
                                                       int n)
{
    return BARRIER_RETRY(NEXT(readv)(fd, v, n), wbarrier_wait_any(g));
}

static __attribute__((noinline)) ssize_t preadv_barrier(int fd, const struct iovec *v,
                                                        int n, off64_t off)
{
    return BARRIER_RETRY(NEXT(preadv64)(fd, v, n, off), wbarrier_wait_any(g));
}

static __attribute__((noinline)) ssize_t preadv2_barrier(int fd, const struct iovec *v,
                                                         int n, off64_t off, int fl)
{
    return BARRIER_RETRY(NEXT(preadv64v2)(fd, v, n, off, fl), wbarrier_wait_any(g));
}

static __attribute__((noinline)) ssize_t recv_barrier(int fd, void *buf, size_t n, int fl)
{
    return BARRIER_RETRY(NEXT(recv)(fd, buf, n, fl), wbarrier_wait(buf, n, g));
}

static __attribute__((noinline)) ssize_t recvfrom_barrier(int fd, void *buf, size_t n,
                                                          int fl, struct sockaddr *addr,
                                                          socklen_t *len)
{
    if (!addr || !len || (!heapfile_overlaps(addr, 1) && !heapfile_overlaps(len, sizeof *len)) ||
        (int)*len < 0)
        return BARRIER_RETRY(NEXT(recvfrom)(fd, buf, n, fl, addr, len),
                             wbarrier_wait(buf, n, g));
    /* The address is written after the data has left the socket: into
     * ours, then copied with the kernel's rules (truncated to the caller's
     * length, which becomes the address's full length). */
    struct sockaddr_storage a;
    socklen_t want = *len, got;
    ssize_t r = BARRIER_RETRY((got = sizeof a,
                               NEXT(recvfrom)(fd, buf, n, fl, (struct sockaddr *)&a, &got)),
                              wbarrier_wait(buf, n, g));
    if (r >= 0) {
        memcpy(addr, &a, want < got ? want : got);
        *len = got;
    }
    return r;
}

static __attribute__((noinline)) ssize_t recvmsg_barrier(int fd, struct msghdr *msg,
                                                         int fl)
{
    struct msghdr m = *msg, t;
    struct sockaddr_storage name;
    union { struct cmsghdr align; char buf[CONTROL_MAX]; } control;
    if (m.msg_name && (int)m.msg_namelen >= 0 && heapfile_overlaps(m.msg_name, 1)) {
        m.msg_name = &name;
        m.msg_namelen = sizeof name;    /* the kernel's cap too */
    }
    if (m.msg_control && m.msg_controllen <= CONTROL_MAX &&
        heapfile_overlaps(m.msg_control, 1))
        m.msg_control = control.buf;
    ssize_t r = BARRIER_RETRY((t = m, NEXT(recvmsg)(fd, &t, fl)),
                              wbarrier_wait_any(g));
    if (r < 0)
        return r;
    if (m.msg_name == &name)
        memcpy(msg->msg_name, &name, msg->msg_namelen < t.msg_namelen ? msg->msg_namelen
                                                                      : t.msg_namelen);
    if (m.msg_control == control.buf)
        memcpy(msg->msg_control, control.buf, t.msg_controllen);
    if (msg->msg_name)
        msg->msg_namelen = t.msg_namelen;
    msg->msg_controllen = t.msg_controllen;
    msg->msg_flags = t.msg_flags;
    return r;
}

/* ---------------------------------------------------------------- */
/* The exported calls                                                */

static inline ssize_t sd_read(int fd, void *buf, size_t n)
{
    if (likely(!heapfile_on))
        return NEXT(read)(fd, buf, n);
    return read_barrier(fd, buf, n);
}

static inline ssize_t sd_pread(int fd, void *buf, size_t n, off64_t off)
{
    if (likely(!heapfile_on))
        return NEXT(pread64)(fd, buf, n, off);
    return pread_barrier(fd, buf, n, off);
}

static inline ssize_t sd_preadv(int fd, const struct iovec *v, int n, off64_t off)
{
    if (likely(!heapfile_on))
        return NEXT(preadv64)(fd, v, n, off);
    return preadv_barrier(fd, v, n, off);
}

static inline ssize_t sd_preadv2(int fd, const struct iovec *v, int n, off64_t off, int fl)
{
    if (likely(!heapfile_on))
        return NEXT(preadv64v2)(fd, v, n, off, fl);
    return preadv2_barrier(fd, v, n, off, fl);
}

static inline ssize_t sd_recv(int fd, void *buf, size_t n, int fl)
{
    if (likely(!heapfile_on))
        return NEXT(recv)(fd, buf, n, fl);
    return recv_barrier(fd, buf, n, fl);
}

static inline ssize_t sd_recvfrom(int fd, void *buf, size_t n, int fl,
                                  struct sockaddr *addr, socklen_t *len)
{
    if (likely(!heapfile_on))
        return NEXT(recvfrom)(fd, buf, n, fl, addr, len);
    return recvfrom_barrier(fd, buf, n, fl, addr, len);
}

SD_EXPORT ssize_t read(int fd, void *buf, size_t n) { return sd_read(fd, buf, n); }
SD_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    return sd_pread(fd, buf, n, off);
}
SD_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
    return sd_pread(fd, buf, n, off);
}

SD_EXPORT ssize_t readv(int fd, const struct iovec *v, int n)
{
    if (likely(!heapfile_on))
        return NEXT(readv)(fd, v, n);
    return readv_barrier(fd, v, n);
}
SD_EXPORT ssize_t preadv(int fd, const struct iovec *v, int n, off_t off)
{
    return sd_preadv(fd, v, n, off);
}
SD_EXPORT ssize_t preadv64(int fd, const struct iovec *v, int n, off64_t off)
{
    return sd_preadv(fd, v, n, off);
}
SD_EXPORT ssize_t preadv2(int fd, const struct iovec *v, int n, off_t off, int fl)
{
    return sd_preadv2(fd, v, n, off, fl);
}
SD_EXPORT ssize_t preadv64v2(int fd, const struct iovec *v, int n, off64_t off, int fl)
{
    return sd_preadv2(fd, v, n, off, fl);
}

SD_EXPORT ssize_t recv(int fd, void *buf, size_t n, int fl)
{
    return sd_recv(fd, buf, n, fl);
}
SD_EXPORT ssize_t recvfrom(int fd, void *restrict buf, size_t n, int fl,
                           __SOCKADDR_ARG addr, socklen_t *restrict len)
{
    return sd_recvfrom(fd, buf, n, fl, addr.__sockaddr__, len);
}
SD_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int fl)
{
    if (likely(!heapfile_on))
        return NEXT(recvmsg)(fd, msg, fl);
    return recvmsg_barrier(fd, msg, fl);
}

/* _FORTIFY_SOURCE: glibc's own versions call its internal read, past us. */
SD_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t size)
{
    if (n > size)
        __chk_fail();
    return sd_read(fd, buf, n);
}
SD_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t size)
{
    if (n > size)
        __chk_fail();
    return sd_pread(fd, buf, n, off);
}
SD_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t size)
{
    if (n > size)
        __chk_fail();
    return sd_pread(fd, buf, n, off);
}
SD_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t size, int fl)
{
    if (n > size)
        __chk_fail();
    return sd_recv(fd, buf, n, fl);
}
SD_EXPORT ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t n, size_t size, int fl,
                                 __SOCKADDR_ARG addr, socklen_t *restrict len)
{
    if (n > size)
        __chk_fail();
    return sd_recvfrom(fd, buf, n, fl, addr.__sockaddr__, len);
}
