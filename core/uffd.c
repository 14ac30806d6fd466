/*
 * core/uffd.c - the userfaultfd write barrier (see uffd.h).  Nothing here
 * allocates: uffd_open() runs inside the first malloc.
 */
#define _GNU_SOURCE
#include "uffd.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdguard.h"
#include "os.h"

#ifndef USERFAULTFD_IOC_NEW             /* linux/userfaultfd.h before 6.1 */
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM /* before 5.19: no WP of shared memory */
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1 << 12)
#endif

static int ufd = -1;                    /* O_CLOEXEC | O_NONBLOCK; guarded
                                           (core/fdguard.h) */
static pid_t ufd_pid;                   /* the process it belongs to */

/* A descriptor that handles kernel faults too (no UFFD_USER_MODE_ONLY):
 * the system call, or /dev/userfaultfd when the call is refused. */
static int new_fd(int *fd)
{
    long r = os_syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (r >= 0) {
        *fd = (int)r;
        return 0;
    }
    int err = errno;
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev < 0)
        return err;                     /* EPERM, ENOSYS: the call's reason */
    r = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    err = errno;
    os_syscall(SYS_close, dev);
    if (r < 0)
        return err;
    *fd = (int)r;
    return 0;
}

/* Write protection of shared memory, and the ioctls we use.  An unknown
 * feature bit (an older kernel) fails UFFDIO_API with EINVAL. */
static int negotiate(int fd)
{
    struct uffdio_api api = { .api = UFFD_API,
                              .features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM };
    if (ioctl(fd, UFFDIO_API, &api))
        return errno;
    uint64_t need = 1ULL << _UFFDIO_REGISTER | 1ULL << _UFFDIO_UNREGISTER;
    if ((api.ioctls & need) != need)
        return EINVAL;
    return 0;
}

int uffd_open(void)
{
    fdguard_open_begin();
    int fd = -1, err = new_fd(&fd);
    if (!err && (err = negotiate(fd)))
        os_syscall(SYS_close, fd);
    if (!err) {
        ufd_pid = getpid();
        fdguard_adopt(fd, &ufd);
    }
    fdguard_open_end();
    return err;
}

int uffd_ready(void)
{
    return __atomic_load_n(&ufd, __ATOMIC_RELAXED) >= 0;
}

void uffd_close(void)
{
    /* The kernel's release wakes every waiter and clears the protection. */
    fdguard_close(&ufd);
}

void uffd_fork_child(void)
{
    /* The descriptor is the parent's (its mm): drop our reference (the
     * parent's stays open) and open our own for the next mesh. */
    if (uffd_ready()) {
        fdguard_close(&ufd);
        uffd_open();                    /* or the barrier falls back to mprotect */
    }
}

static int do_register(int fd, void *p, size_t size)
{
    struct uffdio_register reg = {
        .range = { .start = (uintptr_t)p, .len = size },
        .mode = UFFDIO_REGISTER_MODE_WP,
    };
    /* A range already registered by us is left as it is. */
    if (ioctl(fd, UFFDIO_REGISTER, &reg))
        return errno;
    return reg.ioctls & (1ULL << _UFFDIO_WRITEPROTECT) ? 0 : EINVAL;
}

int uffd_register(void *p, size_t size)
{
    if (uffd_ready() && ufd_pid != getpid())
        uffd_fork_child();              /* a child made without atfork */
    int fd = fdguard_get(&ufd), err = fd < 0 ? EBADF : do_register(fd, p, size);
    fdguard_put();
    return err;
}

int uffd_protect(void *p, size_t size)
{
    if (uffd_ready() && ufd_pid != getpid())
        uffd_fork_child();              /* a child made without atfork */
    /* The use lasts until uffd_release: the descriptor cannot move or be
     * taken by the program while the range is protected through it. */
    int fd = fdguard_get(&ufd);
    if (fd < 0) {
        fdguard_put();
        return EBADF;
    }
    struct uffdio_writeprotect wp = {
        .range = { .start = (uintptr_t)p, .len = size },
        .mode = UFFDIO_WRITEPROTECT_MODE_WP,
    };
    /* Usually registered already; ENOENT: a mapping made since (a new
     * segment, a restored alias): register it. */
    int err = 0;
    if (ioctl(fd, UFFDIO_WRITEPROTECT, &wp)) {
        err = errno;
        if (err == ENOENT && !(err = do_register(fd, p, size)) &&
            ioctl(fd, UFFDIO_WRITEPROTECT, &wp))
            err = errno;
    }
    if (err) {
        uffd_close();                   /* drops any part it protected */
        fdguard_put();
    }
    return err;
}

/* Read the queued fault messages (non-blocking): the writers that have
 * waited.  Reading is not needed to wake them; it only counts. */
static unsigned long drain(int fd)
{
    struct uffd_msg msg[16];
    unsigned long n = 0;
    ssize_t r;
    while ((r = os_read(fd, msg, sizeof msg)) > 0) {
        n += (unsigned long)r / sizeof msg[0];
        if ((size_t)r < sizeof msg)
            break;
    }
    return n;
}

unsigned long uffd_release(void *p, size_t size, int remapped, int *err)
{
    *err = 0;
    int fd = __atomic_load_n(&ufd, __ATOMIC_RELAXED);  /* uffd_protect's use */
    unsigned long n = 0;
    if (fd >= 0) {
        n = drain(fd);
        struct uffdio_range range = { .start = (uintptr_t)p, .len = size };
        int r;
        if (remapped) {
            r = ioctl(fd, UFFDIO_WAKE, &range);
        } else {
            struct uffdio_writeprotect wp = { .range = range, .mode = 0 };   /* and wake */
            r = ioctl(fd, UFFDIO_WRITEPROTECT, &wp);
        }
        /* Last resort, so that nobody sleeps on: closing the descriptor
         * wakes every waiter and drops every protection. */
        if (r) {
            *err = errno ? errno : EIO;
            uffd_close();
        }
    }
    fdguard_put();                      /* uffd_protect's use ends */
    return n;
}
