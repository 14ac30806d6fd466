/*
 * core/os.c - mmap, madvise, munmap and friends (see os.h).
 */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int os_map_aligned(size_t size, size_t align, void **out)
{
    if (align < SD_PAGE_SIZE)
        align = SD_PAGE_SIZE;
    if (size + align < size)
        return ENOMEM;
    size_t span = size + align - SD_PAGE_SIZE;
    void *p = mmap(NULL, span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return ENOMEM;
    uintptr_t a = (uintptr_t)p;
    uintptr_t start = (a + align - 1) & ~(uintptr_t)(align - 1);
    if (start > a)
        munmap(p, start - a);
    uintptr_t end = start + size, mend = a + span;
    if (mend > end)
        munmap((void *)end, mend - end);
    *out = (void *)start;
    return 0;
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

int os_remap(void *old, size_t old_size, size_t new_size, void **out)
{
    void *p = mremap(old, old_size, new_size, MREMAP_MAYMOVE);
    if (p == MAP_FAILED)
        return errno;
    *out = p;
    return 0;
}

uint32_t os_gettid(void)
{
    return (uint32_t)syscall(SYS_gettid);
}

uint64_t os_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

size_t os_rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = buf;
    while (*p && *p != ' ') p++;          /* skip size */
    while (*p == ' ') p++;
    size_t pages = 0;
    while (*p >= '0' && *p <= '9')
        pages = pages * 10 + (size_t)(*p++ - '0');
    return pages * SD_PAGE_SIZE;
}
