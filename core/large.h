/*
 * core/large.h - blocks above the largest size class.
 *
 * Each block is its own page-aligned mapping, found by address through an
 * open-addressing hash table (O(1); a pointer that is not a block start is
 * not found).  Freed mappings wait in a small cache for `decay` ms so that
 * a program that frees and reallocates big buffers does not thrash mmap;
 * past the decay, or the cache limits, they are unmapped.
 *
 * Locking: one mutex, a leaf (taken with no other allocator lock held).
 */
#ifndef SD_CORE_LARGE_H
#define SD_CORE_LARGE_H

#include <stddef.h>

/* A block of at least size bytes aligned to align (power of two), zeroed
 * if `zero`.  NULL and errno ENOMEM on failure. */
void *large_alloc(size_t size, size_t align, int zero);
/* Usable bytes of the block starting at p, 0 if p starts no large block. */
size_t large_usable(const void *p);
/* Free the block starting at p.  0, or -1 if p starts no large block. */
int large_free(void *p);
/* Resize in place or by moving (mremap); NULL + ENOMEM on failure (p is
 * then untouched).  p must start a large block with default alignment. */
void *large_realloc(void *p, size_t size);
/* Unmap every cached mapping; returns bytes released. */
size_t large_trim(void);
/* Release cached mappings older than the decay (called from slow paths). */
void large_decay(void);
/* Live blocks and their mapped bytes. */
void large_usage(size_t *blocks, size_t *bytes, size_t *cached_bytes);

void large_lock_all(void);
void large_unlock_all(int child);

#endif
