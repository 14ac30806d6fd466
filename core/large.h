/*
 * core/large.h - blocks above the largest size class (32 KiB).
 *
 * Two kinds, one interface:
 *  - up to LARGE_EXTENT_MAX (and aligned up to LARGE_ALIGN_MAX): an extent
 *    of whole pages in a 64 MiB chunk (core/extent.h).  Freed ones go to
 *    a per-CPU stash first (up to LARGE_STASH_SLOTS blocks of at most
 *    LARGE_STASH_MAX pages each), from which the next malloc of about the
 *    same size on that CPU takes them without touching an arena; the
 *    others, and those a stash evicts, become dirty free extents of their
 *    arena, reused at once (best fit, dirty first) and purged
 *    (MADV_DONTNEED) after SLABDEFRAG_DECAY_MS, or at once when the last
 *    thread allocating from their arena ends (core/large.c).
 *  - above: a huge block, its own mapping (core/huge.h), realloc'd with
 *    mremap.
 *
 * Why 16 MiB.  Up to there a block is at most 1/4 of a chunk, so blocks
 * of every size of the range share chunks, and a tail no block fits in
 * is address space, not memory (it stays purged).  What decides it is
 * reuse: a freed extent's pages are reused dirty, with no page fault,
 * while a huge block is a fresh mapping, 1,024+ faults to touch, so a
 * lower bound makes a program that grows blocks by realloc through the
 * megabytes pay most of its page faults for huge blocks, for no gain in
 * peak RSS (docs/benchmarks.md, large-mixed).  Above 16 MiB, a block's own mapping costs little
 * beside its faults, mremap grows it without copying, and unmapping it
 * returns its address space at once.  mimalloc puts the boundary at
 * 16 MiB too (1/2 of its segment); jemalloc nowhere (every size is an
 * extent, those of 8 MiB and more purged at once).
 * The mapping count is then at most: chunks (heap bytes in extents / 64
 * MiB, plus one per arena in use) + huge blocks (heap bytes / 16 MiB) + 8
 * cached huge mappings: bounded by the heap's size, never by the number
 * of blocks.
 *
 * Locking: a stash has a spinlock, held for a few loads and stores and
 * never with another allocator lock; arena and huge-block locks are
 * described in core/extent.c and core/huge.h.  No lock is shared by all
 * threads on the path of an extent's malloc or free.
 */
#ifndef SD_CORE_LARGE_H
#define SD_CORE_LARGE_H

#include <stddef.h>
#include <stdint.h>

#define LARGE_EXTENT_MAX   (16UL << 20) /* bytes: larger blocks are huge */
#define LARGE_ALIGN_MAX    (2UL << 20)  /* alignment extents serve */
#define LARGE_STASH_SLOTS  8            /* blocks per CPU stash */
#define LARGE_STASH_MAX    64           /* pages of one stashed block (256 KiB) */
#define LARGE_STASH_PAGES  256          /* pages of one stash (1 MiB) */

/* A block of at least size bytes aligned to align (power of two), zeroed
 * if `zero`.  NULL and errno ENOMEM on failure. */
void *large_alloc(size_t size, size_t align, int zero);
/* Usable bytes of the live block starting at p, 0 if p starts none. */
size_t large_usable(const void *p);
/* Free the block starting at p.  0; -1 if p starts no large block; -2 if
 * p starts a large block that is already free (a double free). */
int large_free(void *p);
/* Resize in place (an extent: shrinking, or growing into a free extent
 * after it; a huge block: mremap) or by moving.  NULL + ENOMEM on failure
 * (p is then untouched).  p must start a live large block. */
void *large_realloc(void *p, size_t size);
/* Purge every free extent, flush the stashes, unmap cached huge mappings;
 * returns bytes released. */
size_t large_trim(void);
/* Out of address space (an mmap failed under RLIMIT_AS): give back what
 * large blocks hold of it without being in use - the stashes, the cached
 * huge mappings, the free ends of chunks.  Bytes unmapped; 0 when no
 * limit is set.  Call with no allocator lock held. */
size_t large_release_address_space(void);
/* The same for what is older than the decay only. */
size_t large_purge_decayed(void);
/* Purge what is past the decay, cheaply when nothing is (slow paths). */
void large_decay(void);

struct large_stats {
    size_t blocks, bytes;                 /* live large blocks, usable bytes */
    size_t extent_blocks, extent_bytes;   /* ... of which extents */
    size_t huge_blocks, huge_bytes;       /* ... of which huge */
    size_t cached_blocks, cached_bytes;   /* freed extents in the stashes */
    size_t dirty_extents, dirty_bytes;    /* free extents, resident */
    size_t purged_extents, purged_bytes;  /* free extents, purged or fresh */
    size_t purged_total;                  /* bytes purged since start */
    size_t chunks, chunk_bytes;           /* chunks mapped */
    size_t huge_cached_maps, huge_cached_bytes;
    size_t mappings;                      /* chunks + huge + cached huge */
};
void large_get_stats(struct large_stats *out);

void large_lock_all(void);
void large_unlock_all(int child);

#endif
