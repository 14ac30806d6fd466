/*
 * classes/alloc.h - allocation and free through a cache: the fast paths
 * (inline) and their named slow paths (classes/alloc.c).
 *
 * Fast allocation pops the thread's private freelist: two loads, two
 * stores and one unlikely branch to cache_alloc_slow().  Fast free pushes
 * onto the slab's local list when the slab is owned by this thread (its
 * active slab or one on its ring), with no lock and no atomic; the slow
 * allocation path swaps the active slab's local list in (mimalloc's
 * free/local_free split).  Anything else goes to cache_free_slow(), under
 * the slab lock.
 */
#ifndef SD_CLASSES_ALLOC_H
#define SD_CLASSES_ALLOC_H

#include "cache.h"
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

/* fpo: the cache's free-pointer offset (a constant 0 for malloc). */
static inline void *cache_alloc_fast(struct sd_cache *c, struct tbin *b,
                                     unsigned fpo)
{
    void *p = b->free;
    if (unlikely(!p))
        return cache_alloc_slow(c, b);
    b->free = *(void **)((char *)p + fpo);
    b->nfree--;
    return p;
}

/* Free an object of slab s (found from p); call names the entry point. */
static inline void cache_free_fast(struct slab *s, void *p, const char *call)
{
    if (likely(__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == sd_tc.token) &&
        likely(slab_contains(s, p))) {
        /* Our active slab or one on our ring: its local list, which the
         * allocation path takes over when the private list runs dry. */
        if (unlikely(p == s->local_free))
            report_double_free(call, p, s->cache);
        *slab_fp(s, p) = s->local_free;
        s->local_free = p;
        s->nlocal++;
        return;
    }
    cache_free_slow(s, p, call);
}

#endif
