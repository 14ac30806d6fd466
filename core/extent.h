/*
 * core/extent.h - page-granular extents for large blocks.
 *
 * Blocks from 32 KiB to LARGE_EXTENT_MAX (core/large.h) are extents: runs
 * of whole pages cut out of 64 MiB chunks, as jemalloc's extents and
 * mimalloc's spans are.
 *
 *   chunk    64 MiB of private anonymous memory, 64 MiB aligned, owned by
 *            one extent arena.  Its first pages are a header: one struct
 *            xpage per page of the chunk, and the nodes of its free
 *            extents.  A bit per 64 MiB of address
 *            space (xchunk_map) says "this is one of our chunks", so
 *            pointer -> page descriptor is O(1) and a foreign pointer is
 *            recognised.  Chunks are never unmapped (as segments: a stale
 *            pointer is diagnosed, never a crash); free extents are
 *            purged instead.  Under an address-space limit a chunk maps
 *            only its first pages and grows (core/extent.c, "Address
 *            space"); the rest of its 64 MiB may hold other mappings.
 *   extent   pages [i, i+n) of a chunk.  The extents of a chunk tile its
 *            pages after the header, always.  Tags: xpage[i] (first) and
 *            xpage[i+n-1] (last) hold n and the state; every other xpage
 *            of the extent has state 0 ("inside").
 *   arena    a mutex, its chunks, and the free extents of those chunks in
 *            two sets, dirty (freed, memory still there) and purged
 *            (MADV_DONTNEED'd, or never touched: reads back zero).  Each
 *            set is XBINS size bins (two per doubling of pages), a bin a
 *            treap of nodes (struct xnode) ordered by (pages, address): address-ordered best fit
 *            is the leftmost node >= the request in the request's bin, or
 *            the leftmost node of the next non-empty bin.  Dirty extents
 *            are also on a list in the order they were freed (the decay).
 *
 * Why chunks are not the slab segments (core/segment.c): with meshing on,
 * a segment's slots that host a mesh become shared objects
 * (core/heapfile.h), copied at fork and released by removal.  Extents
 * are never meshed, so they stay private anonymous memory: copy-on-write
 * at fork, purged with madvise.  Segments are 4 MiB of
 * equal slots with a slab descriptor per slot; a 4 MiB block would not fit
 * in one.
 *
 * Invariants (arena lock held):
 *   two neighbouring free extents never have the same state (they are
 *   coalesced when the second becomes free);
 *   XS_DIRTY and XS_PURGED extents are in exactly one bin of their set;
 *   XS_DIRTY ones are on the arena's dirty list, oldest first;
 *   XS_USED / XS_CACHED extents are on no structure of the arena: CACHED
 *   ones sit in a per-CPU stash (core/large.c).  USED <-> CACHED changes
 *   with an atomic exchange on the first tag, without the arena lock; every
 *   other change of state is made under it.
 *   XS_BUSY extents are being purged with the lock dropped: they are not
 *   free, so nothing merges with or grows into them.
 */
#ifndef SD_CORE_EXTENT_H
#define SD_CORE_EXTENT_H

#include <stddef.h>
#include <stdint.h>

#include "fmt.h"
#include "os.h"
#include "types.h"

#define XCHUNK_SHIFT    26
#define XCHUNK_SIZE     (1UL << XCHUNK_SHIFT)               /* 64 MiB */
#define XCHUNK_PAGES    (XCHUNK_SIZE / SD_PAGE_SIZE)        /* 16384 */
#define XARENAS         8       /* threads take arenas in turn */

enum xstate {
    XS_INSIDE = 0,      /* not a tag: inside an extent (or the header) */
    XS_USED,            /* handed out */
    XS_CACHED,          /* freed by the program, held by a per-CPU stash */
    XS_DIRTY,           /* free, memory still resident */
    XS_PURGED,          /* free, purged (or fresh): reads back zero */
    XS_BUSY,            /* being purged, lock dropped */
};

struct xnode;

/* 16 bytes a page: the header costs 1/256 of a chunk at most, and only
 * the entries of tags are ever written. */
struct xpage {
    struct xnode *node;             /* first tag of a free extent: its node */
    uint32_t npages;                /* tag: pages of the extent */
    uint8_t  state;                 /* tag: enum xstate (atomic on the
                                       first tag of a USED/CACHED one) */
    uint8_t  first;                 /* 1 on the first tag */
    uint16_t pad;
};

/* A free extent's place in its bin and on the dirty list.  Nodes of a
 * chunk are taken from its own array, most recently freed first, so the
 * pages of the array that are touched follow the number of free extents
 * the chunk has had at once, not its size. */
struct xnode {
    struct xnode *left, *right;     /* treap children in the bin */
    struct xnode *newer, *older;    /* dirty: the arena's dirty list */
    struct xpage *x;                /* the extent's first tag */
    uint64_t since;                 /* dirty: ns, when it became dirty */
    uint32_t npages;                /* = x->npages (the treap key) */
    uint32_t pad;
};

#define XCHUNK_NODES    XCHUNK_PAGES    /* one per page: always enough */

struct xchunk {
    uint32_t magic;                 /* XCHUNK_MAGIC */
    uint16_t arena;                 /* owner arena */
    uint16_t pad;
    struct xchunk *next;            /* the arena's chunks */
    struct xnode *free_nodes;       /* unused nodes, linked by `left` */
    uint32_t nodes_hwm;             /* nodes[0..hwm) have been used */
    uint32_t limit;                 /* pages [0, limit) are mapped: all
                                       of them but under an address-space
                                       limit (extent.c, "Address space");
                                       written under the arena lock,
                                       read atomically */
    uint64_t pad3[4];
    struct xpage pages[XCHUNK_PAGES]; /* one per page; header ones unused */
    struct xnode nodes[XCHUNK_NODES];
};

#define XCHUNK_MAGIC    0x5ddef7e1u
/* The first page of a chunk is a guard page (PROT_NONE), and the header
 * follows it: a linear overflow out of whatever lies below faults before
 * it reaches the page tags (as segments, core/segment.h). */
#define XCHUNK_GUARD    SD_PAGE_SIZE
#define XCHUNK_HEADER_PAGES \
    ((XCHUNK_GUARD + sizeof(struct xchunk) + SD_PAGE_SIZE - 1) / SD_PAGE_SIZE)  /* 290 */

static inline struct xchunk *xchunk_at(uintptr_t base)
{
    return (struct xchunk *)(base + XCHUNK_GUARD);
}

#define XCHUNK_MAP_WORDS ((1UL << (SD_VA_BITS - XCHUNK_SHIFT)) / 64)
extern SD_HIDDEN uint64_t xchunk_map[XCHUNK_MAP_WORDS];

/* The first tag of the extent that starts at p, or NULL when p is not in
 * one of our chunks.  When p is in a chunk but starts no extent, the
 * xpage of its page is returned anyway (state XS_INSIDE, or a last tag):
 * the caller checks `first`, the state, and page alignment. */
static inline struct xpage *extent_page_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (unlikely(a >> SD_VA_BITS))
        return NULL;
    uintptr_t i = a >> XCHUNK_SHIFT;
    if (!(__atomic_load_n(&xchunk_map[i >> 6], __ATOMIC_RELAXED) >> (i & 63) & 1))
        return NULL;
    struct xchunk *c = xchunk_at(a & ~(XCHUNK_SIZE - 1));
    uintptr_t page = (a & (XCHUNK_SIZE - 1)) >> 12;
    if (unlikely(page >= __atomic_load_n(&c->limit, __ATOMIC_RELAXED)))
        return NULL;                /* past a partial chunk: not ours */
    return &c->pages[page];
}

/* The address of the page an xpage describes. */
static inline void *extent_addr(const struct xpage *x)
{
    uintptr_t base = (uintptr_t)x & ~(XCHUNK_SIZE - 1);
    size_t i = (size_t)(x - xchunk_at(base)->pages);
    return (void *)(base + i * SD_PAGE_SIZE);
}

/* Is p the start of a live (USED) extent?  Its first tag, else NULL. */
static inline struct xpage *extent_used(const void *p)
{
    struct xpage *x = extent_page_of(p);
    if (!x || ((uintptr_t)p & (SD_PAGE_SIZE - 1)) || !x->first ||
        __atomic_load_n(&x->state, __ATOMIC_ACQUIRE) != XS_USED)
        return NULL;
    return x;
}

/* npages pages (>= 1) aligned to align_pages pages (a power of two) from
 * arena `arena`.  *zero says whether they read back zero (purged or fresh
 * memory).  The extent is XS_USED.  NULL when out of memory, or (grow 0)
 * when none of the arena's chunks has room: no chunk is mapped then.
 * Takes the arena lock; call with no allocator lock held. */
void *extent_alloc(unsigned arena, size_t npages, size_t align_pages, int *zero, int grow);
/* Give back an XS_CACHED extent: it becomes dirty, coalesced with dirty
 * neighbours.  Takes its arena's lock. */
void extent_release(struct xpage *x);
/* Resize the USED extent x to npages in place: shrinking always works,
 * growing when the extent after it is free and big enough.  0, or -1
 * (nothing changed).  Takes its arena's lock. */
int extent_resize(struct xpage *x, size_t npages);
/* Purge the dirty extents of every arena that became dirty before
 * `before` ns (UINT64_MAX: all of them).  Bytes purged. */
size_t extent_purge(uint64_t before);
/* Under an address-space limit, out of room: unmap the free extent at
 * the end of every chunk that has one, and lower the chunk's limit
 * (extent.c, "Address space").  Bytes unmapped.  Takes each arena lock
 * in turn. */
size_t extent_trim_tails(void);
/* Purge every dirty extent of arena `arena` (its last thread ended).
 * Bytes purged. */
size_t extent_purge_arena(unsigned arena);
/* The arena owning the chunk of the extent block p. */
static inline unsigned extent_arena_of(const void *p)
{
    return xchunk_at((uintptr_t)p & ~(XCHUNK_SIZE - 1))->arena;
}
/* Purge what is past the decay, if any arena has something to purge now
 * (one relaxed load per arena otherwise). */
void extent_decay(uint64_t now);

struct extent_stats {
    size_t used_blocks, used_bytes;     /* USED + CACHED */
    size_t dirty_extents, dirty_bytes;
    size_t purged_extents, purged_bytes; /* free and purged (or fresh) */
    size_t chunks;                      /* chunks mapped (64 MiB each) */
    size_t chunk_bytes;                 /* their bytes mapped (less under
                                           an address-space limit) */
    size_t purged_total;                /* bytes purged since start */
};
void extent_get_stats(struct extent_stats *out);

void extent_lock_all(void);
void extent_unlock_all(int child);

#endif
