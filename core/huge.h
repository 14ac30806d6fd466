/*
 * core/huge.h - huge blocks: those above LARGE_EXTENT_MAX (core/large.h),
 * or aligned beyond LARGE_ALIGN_MAX.  Everything between 32 KiB and that
 * bound lives in extents (core/extent.h).
 *
 * Each huge block is its own page-aligned mapping, found by address through an
 * open-addressing hash table (O(1); a pointer that is not a block start is
 * not found).  Freed mappings wait in a small cache for `decay` ms so that
 * a program that frees and reallocates big buffers does not thrash mmap;
 * past the decay, or the cache limits, they are unmapped.
 *
 * Locking: one mutex, a leaf (taken with no other allocator lock held).
 * It is global, but only blocks of more than 16 MiB take it: their mmap,
 * munmap or mremap takes the process's mmap lock anyway, and faulting in
 * 1,024 pages costs a thousand times the mutex.
 */
#ifndef SD_CORE_HUGE_H
#define SD_CORE_HUGE_H

#include <stddef.h>

/* A block of at least size bytes aligned to align (power of two), zeroed
 * if `zero`.  NULL and errno ENOMEM on failure. */
void *huge_alloc(size_t size, size_t align, int zero);
/* Usable bytes of the block starting at p, 0 if p starts no large block. */
size_t huge_usable(const void *p);
/* Free the block starting at p.  0, or -1 if p starts no large block. */
int huge_free(void *p);
/* Resize in place or by moving (mremap); NULL + ENOMEM on failure (p is
 * then untouched).  p must start a large block with default alignment. */
void *huge_realloc(void *p, size_t size);
/* Unmap every cached mapping; returns bytes released. */
size_t huge_trim(void);
/* Release cached mappings older than the decay (called from slow paths);
 * returns bytes released. */
size_t huge_decay(void);
/* Live blocks and their mapped bytes; cached mappings and their bytes. */
void huge_usage(size_t *blocks, size_t *bytes, size_t *cached_bytes, size_t *cached_maps);

void huge_lock_all(void);
void huge_unlock_all(int child);

#endif
