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
    int64_t      sample_left;   /* heap profiling: bytes to the next sample
                                   point (classes/sample.h), beside pcpu so
                                   that malloc's fast path reaches both
                                   through one TLS address */
    uint64_t     gate;          /* per-thread mode (the gate, below): low
                                   32 bits, allocator calls of this thread
                                   under way; high 32, calls that left */
    uint8_t      revoked;       /* the shrinker is taking the bins */
    uintptr_t    token;         /* slab->owner of our active slabs; 1 = none */
    uint8_t      state;         /* enum tc_state */
    uint8_t      in_get;        /* inside a get() callback */
    const struct sd_cache *get_cache;  /* whose get() */
    struct tbin *ubins;         /* bins of typed caches, or NULL */
    struct sd_list link;        /* registry of live thread caches */
    size_t       ring_bytes;    /* bytes of the slabs on all its rings */
    struct tbin  bins[SD_NCLASSES];
    uint32_t     seen_calls;    /* the shrinker's (its own line, away from
                                   the hot one): calls at its last look, */
    uint32_t     looked;        /* and the reclaim that looked */
};

extern SD_HIDDEN __thread struct tcache sd_tc __attribute__((tls_model("initial-exec")));

/* Typed caches' bins (ids SD_NCLASSES and up) live in t->ubins, mapped on
 * the thread's first typed allocation: this is the one place that maps a
 * cache id to its bin there. */
#define TC_NUBINS (SD_MAX_CACHES - SD_NCLASSES)
static inline struct tbin *tcache_ubin_of(const struct tcache *t, uint16_t id)
{
    return t->ubins ? &t->ubins[id - SD_NCLASSES] : NULL;
}
/* Thread t's bin for cache id, or NULL (a typed cache it never used). */
static inline struct tbin *tcache_bin_of(struct tcache *t, uint16_t id)
{
    return id < SD_NCLASSES ? &t->bins[id] : tcache_ubin_of(t, id);
}

/* The tbin of cache id for this thread (typed caches: may set up ubins;
 * NULL if that fails or the thread has no cache). */
struct tbin *tcache_ubin(uint16_t id);

/* ---------------------------------------------------------------------
 * The gate (per-thread mode): how the shrinker takes the slabs of an idle
 * thread.  A thread's bins are owner-private, read and written with no
 * lock, so another thread may only touch them while the owner is outside
 * the allocator and will stay out until it is done.  Every path of the
 * owner that touches its bins runs between tcache_enter() and
 * tcache_leave(); the shrinker (tcache_reclaim) sets `revoked`, fences
 * every CPU with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), and takes
 * the bins only if the gate's depth then reads 0.  The owner's side is a
 * store, a compiler barrier and a load (an asymmetric Dekker: the
 * membarrier is the owner's missing fence): either the shrinker sees the
 * owner inside, and leaves it alone, or the owner sees `revoked` on its
 * way in, and waits in tcache_enter_wait() until the shrinker is done.
 * Nested entries (a signal handler's malloc, a slow path calling a fast
 * one) never wait: the outer one was already seen.  A thread waits at its
 * outermost entry only, where it holds no allocator lock.  The count of
 * calls that left tells the shrinker which threads were idle since its
 * last look.  The acquire and release orders cost nothing on x86; they
 * give ThreadSanitizer, which cannot see the membarrier, its edges. */
#define TC_GATE_IN    1ull
#define TC_GATE_OUT   ((1ull << 32) - 1)    /* depth - 1, calls + 1 */
#define TC_GATE_DEPTH(g) ((uint32_t)(g))
#define TC_GATE_CALLS(g) ((uint32_t)((g) >> 32))

void tcache_enter_wait(struct tcache *t) __attribute__((noinline, cold));

static inline void tcache_enter(struct tcache *t)
{
    __atomic_store_n(&t->gate, t->gate + TC_GATE_IN, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (unlikely(__atomic_load_n(&t->revoked, __ATOMIC_ACQUIRE)))
        tcache_enter_wait(t);
}

static inline void tcache_leave(struct tcache *t)
{
    __atomic_store_n(&t->gate, t->gate + TC_GATE_OUT, __ATOMIC_RELEASE);
}

/* Take the active slabs and rings of live threads that are outside the
 * allocator: with `all`, every such thread (malloc_trim, sd_shrink_all);
 * otherwise those that made no allocator call since the last look (the
 * shrinker's passes).  Per-thread mode only; nothing without membarrier.
 * Returns the number of threads whose bins it took.  No lock held. */
unsigned tcache_reclaim(int all);
/* Is there reason for the shrinker to run for idle threads (per-thread
 * mode, more live thread caches than a few per CPU)? */
int tcache_reclaim_wanted(void);

/* Set up this thread's cache (state NEW -> LIVE); 0 or -1 (then use the
 * direct, locked path). */
int tcache_init(void);
/* Give every active slab of this thread back (shrink, malloc_trim). */
void tcache_flush_self(void);
/* Give back this thread's active slab and ring of cache id. */
void tcache_flush_self_bin(uint16_t id);
/* Give back s if it is on this thread's ring (sd_vacate). */
void tcache_release_own(struct slab *s);
/* Put s (t's, locked by no one) on b's ring, past which (tbin_owned_max,
 * or SLABDEFRAG_THREAD_KB over all of t's rings) the oldest goes back;
 * and give back one slab of the ring.  The owner's thread, in the gate. */
void tcache_ring_add(struct tcache *t, struct tbin *b, struct slab *s);
void tcache_owned_release(struct tcache *t, struct tbin *b, struct slab *s);
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
/* core/lock.h's self-deadlock hook (set by cache_init): a slab lock taken
 * twice inside get() is reported as the get() misuse it is. */
void tcache_deadlock_report(const sd_spin *l);

/* Fork: the reclaim lock (outermost, with pcpu_lock) and the registry. */
void tcache_lock_reclaim(void);
void tcache_unlock_reclaim(int child);
void tcache_lock_registry(void);
void tcache_unlock_registry(int child);
/* Fork child: the registry holds only the surviving thread (if live). */
void tcache_registry_fork_child(void);

#endif
