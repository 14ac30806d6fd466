/*
 * classes/tcache.h - per-thread active slabs (SLUB's per-cpu slab).
 *
 * Each thread has a tbin per cache: its active slab and the private
 * freelist taken from it.  The owner pops and pushes with no lock and no
 * atomic instruction; every other thread frees into the slab's shared
 * freelist under the slab lock.
 */
#ifndef SD_CLASSES_TCACHE_H
#define SD_CLASSES_TCACHE_H

#include "cache.h"
#include "segment.h"

struct tbin {
    void        *free;          /* private freelist (owner only) */
    struct slab *slab;          /* active slab, or NULL */
    uint32_t     nfree;         /* objects on the private freelist */
    uint32_t     nowned;        /* slabs on the ring */
    struct sd_list owned;       /* ring of full-when-left slabs the thread
                                   still owns (SLUB's cpu partial list):
                                   its frees to them take no lock */
    uint32_t     n_refill;      /* statistics, owner-written, summed on
                                   read and folded into the cache at exit: */
    uint32_t     n_remote;      /* ALLOC_REFILL and FREE_REMOTE */
};

/* Slabs a thread keeps on each ring; past it the oldest goes back.  Four
 * 16 KiB slabs' worth: the small slabs of meshing (SEG_KIND_4K, _8K) keep
 * as many bytes' worth, so that as many of the thread's frees stay
 * lock-free. */
#define TBIN_OWNED_MAX 4
static inline uint32_t tbin_owned_max(unsigned kind)
{
    return kind == SEG_KIND_4K ? 16 : kind == SEG_KIND_8K ? 8 : TBIN_OWNED_MAX;
}

enum tc_state { TC_NEW = 0, TC_INIT, TC_LIVE, TC_DEAD };

struct tcache {
    char        *pcpu;          /* per-CPU regions (classes/pcpu.h) once this
                                   thread uses them; NULL: the per-thread
                                   bins below (and while a get() runs) */
    uintptr_t    token;         /* slab->owner of our active slabs; 1 = none */
    uint32_t     tid;           /* gettid(), for the slab locks */
    uint8_t      state;         /* enum tc_state */
    uint8_t      in_get;        /* inside a get() callback */
    const struct sd_cache *get_cache;  /* whose get() */
    struct tbin *ubins;         /* bins of typed caches, or NULL */
    struct sd_list link;        /* registry of live thread caches */
    struct tbin  bins[SD_NCLASSES];
};

extern SD_HIDDEN __thread struct tcache sd_tc __attribute__((tls_model("initial-exec")));

/* The tbin of cache id for this thread (typed caches: may set up ubins;
 * NULL if that fails or the thread has no cache). */
struct tbin *tcache_ubin(uint16_t id);

/* Set up this thread's cache (state NEW -> LIVE); 0 or -1 (then use the
 * direct, locked path). */
int tcache_init(void);
/* Give every active slab of this thread back (thread exit, shrink). */
void tcache_flush(struct tcache *t);
/* Give back this thread's active slab and ring of one cache. */
void tcache_flush_bin(struct tbin *b);
/* Give back one slab of the ring (owner's thread). */
void tcache_owned_release(struct tbin *b, struct slab *s);
/* Objects on all live threads' private lists for cache id (racy reads;
 * exact at a quiescent point). */
size_t tcache_private_objects(uint16_t id);
/* Per-thread mode: count a refill or a remote free of cache c on this
 * thread's bin (no shared cache line written), or on the cache when the
 * thread has no bin for it.  i: SD_STAT_ALLOC_REFILL or _FREE_REMOTE. */
void tcache_stat_hot(struct sd_cache *c, enum sd_stat i);
/* Live threads' counts of i for cache id (dead ones are in c->stat). */
unsigned long tcache_stat_sum(uint16_t id, enum sd_stat i);

/* get() guard: while a get() runs, every allocator entry of this thread
 * falls to a slow path that reports the misuse: the thread's per-CPU
 * pointer and private freelists read NULL and its token matches no slab,
 * so the fast paths of this thread miss, at no cost to other threads. */
struct tcache_guard {
    char     *pcpu;
    void     *free[SD_NCLASSES];
    struct tbin *ubins;
    uintptr_t token;
};
void tcache_guard_enter(struct tcache_guard *g, const struct sd_cache *c);
void tcache_guard_leave(struct tcache_guard *g);
/* Called by slow paths: aborts with a report if inside get(). */
void tcache_check_get(const char *call);

void tcache_lock_registry(void);
void tcache_unlock_registry(int child);
void tcache_after_fork_child(void);

#endif
