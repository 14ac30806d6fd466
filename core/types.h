/*
 * core/types.h - the map of the allocator's types and the invariants that
 * tie their fields together.
 *
 *   segment   4 MiB, 4 MiB aligned, of one kind: an array of equal slots
 *             (16 KiB, 64 KiB or 256 KiB; 4 or 8 KiB with meshing).  Its
 *             header (first slots) holds one struct slab per slot of the
 *             4 MiB: descriptors live out of line, so slab memory holds
 *             only objects.  Slots [0, nslots) are mapped: all of them but
 *             under an address-space limit (core/segment.c, "Address
 *             space").
 *   slab      one slot carved into `capacity` objects of `size` bytes, owned
 *             by one struct sd_cache (classes/cache.h).
 *   tbin      a thread's active slab of one cache and its private freelist
 *             (classes/tcache.h).
 *   large     a block above the largest class: up to 16 MiB an extent of
 *             whole pages in a 64 MiB chunk (core/extent.h), above that
 *             its own mapping found through a hash table (core/huge.c).
 *
 * Invariants (slab):
 *   inuse == capacity - |freelist|            (under the slab lock; less
 *                                             purged objects, below)
 *   objects handed out == inuse - |owner's private list| (tbin.nfree)
 *   owner != 0  <=>  state is ACTIVE or OWNED  (set/cleared under the lock)
 *   ACTIVE/OWNED: objects handed out == inuse - nlocal - (ACTIVE: the
 *   owner's tbin.nfree); local_free and nlocal: owner only
 *   state PARTIAL <=> on cache->partial; EMPTY <=> on cache->empty
 *   per-CPU mode: objects on a CPU's stack, and those a refill holds
 *   (feeding), count in inuse: they are free for the program but not on
 *   the freelist
 *   free objects hold the next-free pointer at byte fpo: 0, or past the
 *   object for caches with a ctor (a free object stays constructed); and
 *   the free tag at byte fpo + 8 (core/slab.h, "Free tags").
 *
 * Invariants (purged pages, classes/cache.c): a free object that overlaps
 * a page of s->purged is on no freelist and not counted in inuse:
 *   inuse == capacity - |freelist| - |objects overlapping purged pages|
 * A slab with purged pages is PARTIAL (FROZEN during a vacate), has a
 * non-empty freelist, never meshes, and is never retained EMPTY.
 *
 * Invariants (mesh, classes/mesh.c): an alias (MESHED) has inuse == 0, a
 * NULL freelist and mesh_host != NULL; its live objects are counted in the
 * host's inuse, and the host's freelist holds only slots free for the host
 * and every alias.  A host has no host.
 *
 * Pointer -> slab is O(1): a bit per 4 MiB of address space says "this is
 * one of our segments"; the slot index is (p - segment) >> slot_shift.
 */
#ifndef SD_CORE_TYPES_H
#define SD_CORE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "lock.h"

#define SD_SEGMENT_SHIFT 22
#define SD_SEGMENT_SIZE  (1UL << SD_SEGMENT_SHIFT)
#define SD_VA_BITS       47
#define SD_MIN_ALIGN     16
#define SD_BIN_NONE      1024     /* SD_MAX_CACHES: a per-CPU header that is
                                     never set up (classes/pcpu.h) */

struct sd_list {
    struct sd_list *next, *prev;
};

static inline void list_init(struct sd_list *l) { l->next = l->prev = l; }
static inline int list_empty(const struct sd_list *l) { return l->next == l; }
static inline void list_add_head(struct sd_list *h, struct sd_list *n)
{
    n->next = h->next; n->prev = h;
    h->next->prev = n; h->next = n;
}
static inline void list_add_tail(struct sd_list *h, struct sd_list *n)
{
    n->prev = h->prev; n->next = h;
    h->prev->next = n; h->prev = n;
}
static inline void list_del(struct sd_list *n)
{
    n->prev->next = n->next; n->next->prev = n->prev;
    n->next = n->prev = n;
}
#define list_entry(p, type, member) \
    ((type *)((char *)(p) - __builtin_offsetof(type, member)))

enum slab_state {
    SLAB_UNUSED = 0,    /* slot holds no slab (or is segment header) */
    SLAB_ACTIVE,        /* a thread's active slab: owner != 0, on no list */
    SLAB_OWNED,         /* on its owner's per-thread partial ring */
    SLAB_PARTIAL,       /* some objects free, on cache->partial */
    SLAB_FULL,          /* no free object, on no list */
    SLAB_EMPTY,         /* no object in use, retained on cache->empty */
    SLAB_FROZEN,        /* being vacated: on no list, nothing allocated */
    SLAB_RELEASING,     /* on its way back to the segment */
    SLAB_MESHED,        /* an alias: its objects live in mesh_host's
                           pages, its own memory is released (meshing,
                           classes/mesh.c); on no list, never allocated
                           from; frees are redirected to the host */
};

struct sd_cache;

struct slab {
    /* First cache line: everything the owner's lock-free free touches. */
    sd_spin   lock;           /* guards freelist, return map, inuse,
                                 state, owner */
    uint8_t   state;          /* enum slab_state */
    uint8_t   kind;           /* segment kind (slot size) */
    uint16_t  bin;            /* cache id: index of the owner's tbin */
    uint16_t  fpo;            /* bytes from an object to its free pointer */
    uint8_t   tz;             /* trailing zero bits of size */
    uint8_t   feeding;        /* per-CPU refills that took objects of this
                                 slab and have not pushed them yet (atomic;
                                 a vacate waits for 0: classes/pcpu.c) */
    uint32_t  inuse;          /* objects not on freelist */
    uint32_t  sampled;        /* heap profiler (atomic; hooks/prof.c): low
                                 16 bits, live sampled objects on the slab
                                 (0xffff: saturated, then kept); high 16,
                                 bit (p >> tz) & 15 of each of them (a
                                 filter: cleared when the count falls to
                                 0).  0 whenever profiling never ran; free's
                                 one check (classes/sample.h) */
    uint16_t  nlocal;         /* objects on local_free (owner only) */
    uint16_t  fbin;           /* per-CPU stack a fast free pushes to: bin
                                 while the slab takes frees that way
                                 (slab_set_state), else SD_BIN_NONE */
    uintptr_t owner;          /* tcache token of the active thread, or 0 */
    char     *start;          /* first object */
    uint64_t  inv;            /* inverse of size's odd part mod 2^64 */
    uint32_t  divlim;         /* capacity - 1: slab_contains */
    uint8_t   tagged;         /* its free objects carry the free tag
                                 (core/slab.h): the cache's tagged */
    void     *local_free;     /* ACTIVE/OWNED: the owner's frees, no lock */
    /* Second line: the locked paths. */
    uint32_t  capacity;       /* objects per slab */
    uint32_t  size;           /* bytes between objects */
    struct slab *mesh_alias;  /* meshing: a host's first alias; an alias's
                                 next alias of the same host (NULL-ended,
                                 changed under the host's lock) */
    uint64_t  recip;          /* ceil(2^40 / size): offset -> index */
    void     *freelist;       /* shared freelist (remote frees land here) */
    struct sd_cache *cache;
    struct sd_list link;      /* cache->partial, cache->empty, or the
                                 owner's ring (tbin->owned) */
    union {
        uint64_t empty_since; /* EMPTY: ns, when it joined cache->empty */
        struct slab *mesh_host; /* MESHED: the slab whose pages hold our
                                   objects (an alias is never EMPTY) */
        uint64_t purged;      /* PARTIAL (or FROZEN by a vacate): bit per
                                 4 KiB page of the slab given back to the
                                 OS while the slab lives (classes/cache.c,
                                 "Pages of sparse slabs"); 0 in any other
                                 state */
    };
} __attribute__((aligned(64)));   /* 128 bytes: slot -> descriptor is a shift */
_Static_assert(sizeof(struct slab) == 128, "struct slab must stay 128 bytes");

struct segment {
    uint32_t magic;           /* SEGMENT_MAGIC */
    uint8_t  kind;
    uint8_t  slot_shift;      /* log2 of slot bytes */
    uint16_t nslots;          /* slots mapped, header ones included: all
                                 of the 4 MiB but under an address-space
                                 limit (core/segment.c, "Address space");
                                 grows under the kind lock, read
                                 atomically by segment_slab_of */
    uint16_t first;           /* first slot after the header */
    uint16_t nfree;           /* free slots */
    uint16_t hint;            /* where to start looking for a free slot */
    uint16_t ndirty;          /* free slots whose pages are still resident */
    uint16_t nstale;          /* released mesh aliases not yet mapped back */
    uint8_t  anon;            /* meshing's arena, page slabs: anonymous
                                 memory but for the filed slots
                                 (core/segment.c, "Anonymous segments") */
    uint8_t  grow;            /* 1: nslots may still grow ("Address
                                 space"); 0 once all is mapped or another
                                 mapping holds the rest */
    struct sd_list link;      /* kind's list of segments */
    uint64_t used[16];        /* bit per slot: 1 = holds a slab (up to
                                 1024 slots: the 4 KiB kind) */
    uint64_t dirty[16];       /* bit per slot: released, pages not yet
                                 purged (core/segment.c, "Dirty slots") */
    uint64_t stale[16];       /* bit per slot: a released mesh alias, still
                                 mapped onto its host's pages ("Stale
                                 aliases") */
    uint64_t filed[16];       /* anon segments: bit per slot mapped onto
                                 its own offset of the arena file (a mesh
                                 host, or a released one until purged);
                                 atomic read-modify-writes */
    struct slab slabs[];      /* one per slot */
};

#define SEGMENT_MAGIC 0x5ddef7a6u

/* state and owner are written under the slab lock but read without it on
 * fast paths and hints: relaxed atomics (plain moves on x86) say so.
 * fbin follows the state: only a slab that is allocated from (ACTIVE,
 * OWNED, PARTIAL, FULL) takes frees through the per-CPU stacks; a frozen,
 * meshed, empty or released one sends them to the locked path, which
 * checks and routes them (a vacate's get() holds the slab lock, a mesh
 * alias forwards to its host, an empty slab's free is a double free). */
static inline void slab_set_state(struct slab *s, unsigned st)
{
    __atomic_store_n(&s->state, (uint8_t)st, __ATOMIC_RELAXED);
    int takes = st == SLAB_ACTIVE || st == SLAB_OWNED || st == SLAB_PARTIAL ||
                st == SLAB_FULL;
    __atomic_store_n(&s->fbin, takes ? s->bin : (uint16_t)SD_BIN_NONE, __ATOMIC_RELAXED);
}

/* A counter written under a lock and read without it (relaxed). */
static inline void cnt_add(size_t *c, long d)
{
    __atomic_store_n(c, *c + (size_t)d, __ATOMIC_RELAXED);
}

/* States in which a slab holds objects that may be freed. */
static inline int slab_state_live(unsigned st)
{
    return st == SLAB_ACTIVE || st == SLAB_OWNED || st == SLAB_PARTIAL ||
           st == SLAB_FULL || st == SLAB_FROZEN;
}

/* The free pointer of free object p. */
static inline void **slab_fp(const struct slab *s, void *p)
{
    return (void **)((char *)p + s->fpo);
}

/* Index of object p in its slab (p inside the slab). */
static inline uint32_t slab_index(const struct slab *s, const void *p)
{
    uint64_t off = (uint64_t)((const char *)p - s->start);
    return (uint32_t)((off * s->recip) >> 40);
}

static inline void *slab_object(const struct slab *s, uint32_t i)
{
    return s->start + (size_t)i * s->size;
}

#endif
