/*
 * classes/alloc.h - allocation and free through a cache: the fast paths
 * (inline) and their named slow paths (classes/alloc.c).
 *
 * Per-CPU mode (classes/pcpu.h): allocation pops this CPU's stack of the
 * cache and free pushes onto it, each one restartable sequence (about ten
 * instructions, no lock, no atomic), with one unlikely branch each to
 * pcpu_alloc_slow() / pcpu_free_slow().
 *
 * Per-thread mode (the fallback): allocation pops the thread's private
 * freelist: two loads, two stores and one unlikely branch to
 * cache_alloc_slow(), inside the gate that lets the shrinker take an idle
 * thread's slabs (classes/tcache.h: two stores, a load, a branch).  Fast free pushes onto the slab's local list when
 * the slab is owned by this thread (its active slab or one on its ring),
 * with no lock and no atomic; the slow allocation path swaps the active
 * slab's local list in (mimalloc's free/local_free split).  Anything else
 * goes to cache_free_slow(), under the slab lock.
 *
 * Which one a thread takes is its sd_tc.pcpu: set once the thread uses
 * per-CPU stacks, NULL otherwise and while a get() callback runs.
 */
#ifndef SD_CLASSES_ALLOC_H
#define SD_CLASSES_ALLOC_H

#include "cache.h"
#include "pcpu.h"
#include "segment.h"
#include "slab.h"
#include "tcache.h"

void *cache_alloc_slow(struct sd_cache *c, struct tbin *b)
    __attribute__((noinline));
/* Allocate under the slab lock, without an active slab (threads without a
 * cache, debug caches).  `avoid` (may be NULL) is never used, and with
 * `fullest`, only a partial slab above a quarter full is taken (NULL if
 * none) - sd_defrag_realloc's rule. */
void *cache_alloc_direct(struct sd_cache *c, const struct slab *avoid,
                         int fullest);
/* sd_defrag_realloc's destination when no partial slab is above a
 * quarter: the cache's fill slab (a fresh or retained-empty slab at the
 * head of the partial list that hints never point at), never `avoid`.
 * NULL if none can be had. */
void *cache_alloc_fill(struct sd_cache *c, const struct slab *avoid);
/* Free p (an object boundary of live slab s is checked here). */
void cache_free_slow(struct slab *s, void *p, const char *call)
    __attribute__((noinline));
/* p is not in a slab: a large block or a foreign pointer (reported). */
void free_not_slab(void *p, const char *call) __attribute__((noinline));
void report_invalid(const char *call, const void *p)
    __attribute__((noreturn, cold));
void report_double_free(const char *call, const void *p,
                        const struct sd_cache *c) __attribute__((noreturn, cold));
/* A free of p whose free tag was set (core/slab.h, "Free tags"): p is
 * looked for among the free objects of its slab, after every CPU's stack
 * and transfer cache (per-CPU mode) or the idle threads' lists
 * (per-thread mode) went back to it; found, or its slab no longer live:
 * a double free, reported; otherwise a live object that held the key
 * itself, freed.  No lock held by the caller. */
void cache_free_tagged(struct slab *s, void *p, const char *call)
    __attribute__((noinline, cold));

/* Clear the free tag of p, an object of c just taken for the program. */
static inline void *cache_untag(const struct sd_cache *c, void *p)
{
    if (likely(c->tagged))
        *(uintptr_t *)((char *)p + c->fp_off + sizeof(void *)) = 0;
    return p;
}

/* Take up to n objects of c from one of its slabs (the first partial one,
 * else a retained empty or a new slab), counted in use there; *got says
 * how many.  Returns the slab, whose feeding count the caller drops once
 * the objects are on a stack or back (a vacate waits for that), or NULL
 * when out of memory.  No lock held by the caller. */
struct slab *cache_take_refill(struct sd_cache *c, void **out, unsigned n,
                               unsigned *got);
/* Give n objects back to their slabs (any caches), under each slab's lock
 * once per run of objects of one slab; the ones a slab cannot take as a
 * plain free (frozen for a get(), meshed, debug) go through
 * cache_free_slow.  No lock held by the caller but pcpu_lock. */
void cache_return_objects(void *const *objs, unsigned n, const char *call);

/* ThreadSanitizer cannot see the per-CPU stacks (assembly): hand it the
 * happens-before edge that a push and the pop that finds it make. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define pcpu_tsan_acquire(p) __tsan_acquire(p)
#define pcpu_tsan_release(p) __tsan_release(p)
#else
#define pcpu_tsan_acquire(p) ((void)0)
#define pcpu_tsan_release(p) ((void)0)
#endif

/* Pop an object of cache c (id: c->id) from this CPU's stack; `base` is
 * sd_tc.pcpu. */
static inline void *pcpu_alloc(struct sd_cache *c, unsigned id, char *base)
{
#if SD_HAVE_RSEQ
    void *p = pcpu_pop(base, rseq_self(), id);
    if (unlikely(!p))
        return pcpu_alloc_slow(c);
    pcpu_tsan_acquire(p);
    return cache_untag(c, p);
#else
    return NULL;
#endif
}

/* Per-thread mode's allocation (out of line, as cache_free_thread): pop
 * the thread's private freelist of b inside the gate (classes/tcache.h),
 * or refill. */
void *cache_alloc_thread(struct sd_cache *c, struct tbin *b)
    __attribute__((noinline));

/* Allocate an object of c; b: this thread's bin of c (per-thread mode). */
static inline void *cache_alloc_fast(struct sd_cache *c, struct tbin *b)
{
    char *base = sd_tc.pcpu;
    if (likely(base))
        return pcpu_alloc(c, c->id, base);
    return cache_alloc_thread(c, b);
}

/* Per-thread mode's free (out of line, so that the per-CPU fast path
 * keeps few registers live): a slab this thread owns takes it on its local
 * list, with no lock; anything else goes to cache_free_slow(). */
void cache_free_thread(struct slab *s, void *p, const char *call)
    __attribute__((noinline));

/* Free an object of slab s (found from p); call names the entry point.
 * A set free tag goes to cache_free_tagged; per-CPU mode writes it here,
 * before the push that makes p another thread's to pop; per-thread mode
 * in cache_free_thread (its own slabs) or under the slab lock. */
static inline void cache_free_fast(struct slab *s, void *p, const char *call)
{
#if SD_HAVE_RSEQ
    char *base = sd_tc.pcpu;
    if (likely(base)) {
        if (likely(slab_contains(s, p))) {
            if (likely(s->tagged)) {
                uintptr_t *tag = slab_tag(s, p);
                if (unlikely(*tag == sd_free_tag)) {
                    cache_free_tagged(s, p, call);
                    return;
                }
                *tag = sd_free_tag;
            }
            pcpu_tsan_release(p);
            int why = pcpu_push(base, rseq_self(), s, p);
            if (likely(why == 0))
                return;
            pcpu_free_slow(s, p, call, why);
            return;
        }
        cache_free_slow(s, p, call);        /* reports the interior pointer */
        return;
    }
#endif
    cache_free_thread(s, p, call);
}

#endif
