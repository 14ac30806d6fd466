/*
 * core/os.h - the one contract with the operating system.
 *
 * Only core/os.c calls mmap, madvise, munmap or mremap.  Every function
 * states its preconditions; those that can fail return 0 or an errno.
 * A later memfd-backed arena (meshing) slots in behind os_reserve_aligned.
 */
#ifndef SD_CORE_OS_H
#define SD_CORE_OS_H

#include <stddef.h>
#include <stdint.h>

#define SD_PAGE_SIZE 4096UL

/* Map `size` bytes (a multiple of the page size) of zeroed read-write
 * memory aligned to `align` (a power of two >= page size).  *out gets the
 * address.  Returns 0 or ENOMEM. */
int os_map_aligned(size_t size, size_t align, void **out);
/* Map `size` bytes with MAP_NORESERVE (for sparse tables). 0 or ENOMEM. */
int os_map_sparse(size_t size, void **out);
/* Unmap [p, p+size); p and size page aligned. 0 or errno. */
int os_unmap(void *p, size_t size);
/* Give the physical memory of [p, p+size) back; the range stays mapped and
 * reads back as zero.  p and size page aligned.  0 or errno. */
int os_purge(void *p, size_t size);
/* Grow or shrink a mapping, possibly moving it.  0 or errno. */
int os_remap(void *old, size_t old_size, size_t new_size, void **out);

/* Thread id (gettid), never 0. */
uint32_t os_gettid(void);
/* Monotonic time in nanoseconds. */
uint64_t os_now_ns(void);
/* Resident set size of this process in bytes (from /proc/self/statm),
 * 0 if unknown.  Does not allocate. */
size_t os_rss_bytes(void);

#endif
