/*
 * classes/cache.h - struct sd_cache, SLUB's kmem_cache in user space.
 *
 * Every malloc size class is an sd_cache ("malloc-<size>", ids 0..71);
 * sd_cache_create() adds typed caches (ids 72..SD_MAX_CACHES-1).  A
 * cache's id is also the index of each thread's tbin for it.
 */
#ifndef SD_CLASSES_CACHE_H
#define SD_CLASSES_CACHE_H

#include "sizeclass.h"
#include "slabdefrag.h"
#include "stat.h"
#include "types.h"

#define SD_MAX_CACHES 1024

/* sd_cache.page_purge: which frees give back the free pages of sparse
 * slabs (cache.c, "Pages of sparse slabs"). */
enum { PURGE_NONE, PURGE_IN_PASSES, PURGE_EACH_FREE };

struct sd_cache {
    char      name[48];
    uint16_t  id;               /* index into sd_caches[] and tbins */
    uint8_t   is_malloc;        /* a malloc size class */
    uint8_t   debug;            /* SD_DEBUG_* letters for this cache */
    uint8_t   has_ops;          /* both get and kick */
    uint8_t   dead;             /* destroyed (id never reused) */
    uint8_t   tagged;           /* free objects carry the free tag (core/
                                   slab.h): all but those of caches with
                                   get() that hold their free pointer at 0
                                   (no ctor, no debug), as get() may read
                                   any word of an object it is handed */
    uint32_t  object_size;      /* bytes the caller asked for */
    uint32_t  size;             /* bytes between objects */
    uint32_t  align;            /* bytes */
    uint32_t  capacity;         /* objects per slab */
    uint16_t  fp_off;           /* free pointer's offset in a free object */
    uint8_t   kind;             /* segment kind: slab bytes */
    uint8_t   page_kind;        /* meshing: SEG_KIND_4K or _8K once the
                                   class is big (classes/mesh.c) */
    uint32_t  page_capacity;    /* objects per small slab, or 0 */
    struct segment *page_seg;   /* the segment its new small slabs are cut
                                   from, in address order (core/segment.c,
                                   "Small slabs"; under that kind's lock) */
    uint8_t   shuffle;          /* meshing: the order of new slabs'
                                   freelists, enum slab_order; address
                                   order turns to rotation when a mesh
                                   pass sees a pattern (mesh.c; relaxed
                                   atomic: written under mesh_lock) */
    uint8_t   page_purge;       /* PURGE_*: free pages of its sparse slabs go back
                                   to the OS (cache.c: "Pages of sparse
                                   slabs") */
    unsigned long mesh_seen_new;  /* meshing: stat[SD_STAT_SLAB_NEW] at the
                                     last pass (under mesh_lock) */
    unsigned long mesh_seen_refill;   /* meshing's policy (classes/mesh.c, */
    uint64_t  mesh_seen_ns;           /*   under mesh_lock): refills and */
    unsigned long mesh_seen_meshes;   /*   time at the last look, meshes */
    unsigned long mesh_seen_unmeshes; /*   and unmeshes at the last check, */
    uint64_t  mesh_backoff_until;     /*   no meshing before (ns), */
    uint64_t  mesh_judged_ns;         /*   the last waste check (ns), */
    uint32_t  mesh_backoff_ms;        /*   the next back-off (ms), */
    uint8_t   mesh_busy;              /*   the last busy verdict */
    unsigned long flags;        /* SD_* creation flags */
    void    (*ctor)(void *obj);
    struct sd_cache_ops ops;
    int       refcount;         /* creations aliased onto this cache */
    char      aliases[160];     /* names merged into this one, comma list */

    sd_mutex  list_lock;        /* guards partial, empty and their counts */
    struct sd_list partial;     /* fullest first after a shrink */
    size_t    nr_partial;
    unsigned long partial_gen;  /* bumped at each change of the partial
                                   list (list lock; hooks/vacate.c skips
                                   re-sorting a list that did not change) */
    unsigned long sorted_sig;   /* partial_gen and the frees and direct
                                   allocations at the last sort (list lock) */
    struct sd_list empty;       /* retained empty slabs, oldest last */
    size_t    nr_empty;
    uint32_t  empty_want;       /* empties to keep beyond the eighth: slabs
                                   it had to make soon after releasing one
                                   (list lock; cache.c "Empty slabs") */
    uint64_t  empty_released_ns;  /* when the bound last released one */
    struct slab *defrag_fill;   /* sd_defrag_realloc's target slab, or NULL */
    size_t    nr_slabs;         /* slabs held (atomic) */
    unsigned long stat[SD_NSTATS];  /* atomic counters */
};

extern SD_HIDDEN struct sd_cache sd_malloc_caches[SD_NCLASSES];
extern SD_HIDDEN struct sd_cache *sd_caches[SD_MAX_CACHES];
extern SD_HIDDEN sd_mutex sd_caches_lock;     /* guards sd_caches[] and creation */

static inline void cache_stat_add(struct sd_cache *c, enum sd_stat i,
                                  unsigned long n)
{
    __atomic_fetch_add(&c->stat[i], n, __ATOMIC_RELAXED);
}

/* ---- classes/cachesetup.c ---- */
/* One-time set-up of the malloc caches (idempotent). */
void cache_init(void);
/* The fields a new cache starts with: name, id, sizes, geometry, lists,
 * debug layout (cache_init, cache_create). */
void cache_setup(struct sd_cache *c, uint16_t id, const char *name,
                 uint32_t object_size, uint32_t size, uint32_t align);
/* ---- classes/fork.c ---- */
/* Register the allocator's fork handlers (classes/fork.c). */
void fork_handlers_install(void);
/* The same handlers, called by the preload layer around the forks that
 * skip pthread_atfork's (_Fork, syscall(SYS_fork), clone). */
void fork_raw_prepare(void);
void fork_raw_parent(void);
void fork_raw_child(void);
/* ---- classes/cache.c ---- */
/* A typed cache (sd_cache_create, hooks/api.c): merged into a compatible
 * one (its name added to the aliases) or a new one, whose struct comes
 * from alloc_struct (called with sd_caches_lock held).  NULL and errno
 * on error. */
struct sd_cache *cache_create(const char *name, size_t size, size_t align,
                              unsigned long flags, void (*ctor)(void *),
                              const struct sd_cache_ops *ops,
                              void *(*alloc_struct)(size_t));
/* Create a slab for c: formatted, unlocked, on no list.  NULL + ENOMEM. */
struct slab *cache_slab_new(struct sd_cache *c);
/* Give a slab that is off every list (state RELEASING) back to the OS;
 * returns bytes released. */
size_t cache_slab_release(struct sd_cache *c, struct slab *s);
/* Put back a slab that was ACTIVE or FROZEN (slab locked by the caller,
 * who keeps the lock): onto partial (head or tail), FULL, or empty/
 * RELEASING.  Returns 1 if the caller must release it (after unlocking). */
int cache_slab_settle_locked(struct sd_cache *c, struct slab *s, int tail);
/* The same, then unlock s and release it if it is not kept: how a slab
 * leaves a thread's ring or active slot, a vacate that gave up, a mesh
 * candidate that found no partner, a per-CPU refill.  Returns the bytes
 * released (0: kept, on a list or FULL). */
size_t cache_slab_settle_unlock(struct sd_cache *c, struct slab *s, int tail);
/* The free path's list moves, called with s locked after `freed` objects
 * went onto its freelist (classes/alloc.c, classes/debug.c).  Returns 1
 * if the caller must release it. */
int cache_slab_freed_locked(struct sd_cache *c, struct slab *s, uint32_t freed);
/* Make slab s PARTIAL and put it at the head of the partial list, or at
 * its tail if `tail` (list lock held). */
void cache_partial_add_locked(struct sd_cache *c, struct slab *s, int tail);
/* Unlink a PARTIAL slab from the partial list (list lock held). */
void cache_partial_del_locked(struct sd_cache *c, struct slab *s);
/* Take a slab off partial (or the retained empties) with its lock held;
 * NULL if none could be locked. */
struct slab *cache_partial_take(struct sd_cache *c);
/* Take a retained empty slab off c->empty with its lock held (list lock
 * held); NULL if none could be locked. */
struct slab *cache_empty_take_locked(struct sd_cache *c);
/* Called each time frees have made another MESH_NUDGE_SPARSE slabs of a
 * meshing class sparse, with the class's count of slabs made sparse so far
 * and of its slabs now: hooks/shrinker.c sets it to wake (or start) its
 * thread for meshing.  Called with a slab lock held: it must only write
 * to an eventfd (or defer, sdm_entry_defer). */
extern SD_HIDDEN void (*cache_sparse_nudge)(unsigned long sparse, unsigned long slabs);
/* A slab whose freelist ran dry takes its purged pages' objects back
 * (slab locked).  Returns the objects added to the freelist. */
uint32_t cache_slab_unpurge_locked(struct sd_cache *c, struct slab *s);
/* From the allocation slow paths (no lock held): every 100 ms, release
 * the retained empty slabs past the decay of every malloc class, and the
 * big blocks' memory past it (core/large.h). */
void cache_decay_tick(void);
/* Give back the free pages of the sparse slabs of small malloc classes
 * (PURGE_IN_PASSES), until `deadline` (os_now_ns); returns the bytes (the
 * shrinker's passes). */
size_t cache_purge_sparse(uint64_t deadline);
/* Release every malloc class's empty slabs retained past the decay;
 * returns the bytes (the shrinker's decay pass). */
size_t cache_release_decayed(void);
/* Meshing's arena (core/segment.c): map the stale aliases back, then
 * punch the dirty slots - all of them, or (all 0) the kinds that have had
 * some for the decay; until `deadline` (os_now_ns; 0: none).  Returns the
 * bytes punched.  No lock held. */
size_t cache_settle_slots(int all, uint64_t deadline);
/* Release retained empty slabs: all, or those past the decay.  Returns
 * bytes released. */
size_t cache_release_empty(struct sd_cache *c, int all);
/* Every free object of c's listed slabs onto its freelist: the return
 * maps folded in (core/slab.h), as malloc_trim and the explicit shrinks
 * (sd_cache_shrink, sd_shrink_all) leave a heap, so that validation and
 * the hardened free pointers see every free object; a slab whose lock is
 * taken (a vacate's get()) keeps its map. */
void cache_fold_returns(struct sd_cache *c);

/* ---- classes/cacheusage.c ---- */
/* Figures for statistics; objects_inuse excludes thread-private lists. */
struct cache_usage {
    size_t slabs, partial, active, full, frozen, empty;
    size_t objects_inuse;
    size_t bytes;               /* slab bytes (slabs may differ in size) */
};
void cache_usage(struct sd_cache *c, struct cache_usage *u);

/* ---- classes/cache.c ---- */
/* Fork support: every cache's list lock and every slab lock. */
void cache_lock_all(void);
void cache_unlock_all(int child);

#endif
