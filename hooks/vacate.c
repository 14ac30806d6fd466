/*
 * hooks/vacate.c - slab defragmentation: vacate one slab through the
 * cache's get()/kick() callbacks, and shrink a cache.
 *
 * This follows patch 02/10 of Lameter's series exactly:
 *   - the slab is frozen (off the partial list: nothing is allocated from
 *     it) and locked; its allocated objects are collected in address order;
 *   - get(s, nr, objs) runs with the slab lock held: frees of objects on
 *     the slab spin on that lock until get() returns.  The thread's
 *     allocator entry points are guarded meanwhile (tcache_guard_enter), so
 *     a get() that allocates or frees is reported by name and aborts;
 *   - the lock is dropped and kick(s, nr, objs, private) runs with no
 *     allocator lock held: it may free, or allocate-copy-free (the new
 *     objects come from the fullest partial slabs, as the shrink just
 *     sorted them);
 *   - the slab is relocked: in-use 0 means it is released to the OS;
 *     otherwise its freelist is resequenced into address order and it goes
 *     back to the tail of the partial list (or FULL).
 * Lock order and slab states: classes/cache.c.
 */
#include "vacate.h"

#include <string.h>

#include "alloc.h"
#include "cache.h"
#include "fmt.h"
#include "mallocfam.h"
#include "options.h"
#include "os.h"
#include "pcpu.h"
#include "prof.h"
#include "slab.h"
#include "slabdefrag.h"
#include "stat.h"
#include "tcache.h"

uint64_t vacate_longest_ns;
uint64_t vacate_longest_pause_ns;

/* Put frozen slab s (locked by the caller) back untouched; unlocks it. */
static void vacate_giveup_locked(struct sd_cache *c, struct slab *s, size_t *released)
{
    SD_ASSERT(sd_spin_held(&s->lock) && s->state == SLAB_FROZEN);
    *released += cache_slab_settle_unlock(c, s, 1);
}

/* Vacate frozen slab s, locked by the caller; returns with it unlocked and
 * either released or settled.  Returns the objects left on it. */
static uint32_t vacate_locked(struct sd_cache *c, struct slab *s, void **vec,
                              size_t *released)
{
    SD_ASSERT(sd_spin_held(&s->lock) && s->state == SLAB_FROZEN);
    uint64_t t0 = os_now_ns(), locked = t0;
    if (s->inuse) {
        int n = slab_collect_inuse(s, vec);
        if (n > 0) {
            cache_stat_add(c, SD_STAT_VACATE_ATTEMPTS, 1);
            struct tcache_guard g;
            tcache_guard_enter(&g, c);
            void *priv = c->ops.get(c, n, vec);
            tcache_guard_leave(&g);
            sd_spin_unlock(&s->lock);
            stat_max(&vacate_longest_pause_ns, os_now_ns() - locked);
            unsigned long kicked = 0;
            for (int i = 0; i < n; i++)
                kicked += vec[i] != NULL;
            cache_stat_add(c, SD_STAT_OBJECTS_KICKED, kicked);
            struct prof_kick k;
            int profiled = prof_kick_begin(&k, c, vec, n);
            c->ops.kick(c, n, vec, priv);
            if (profiled)
                prof_kick_end(&k);
            sd_spin_lock(&s->lock);
        }
    }
    uint32_t left = s->inuse;
    if (left == 0) {
        cache_stat_add(c, SD_STAT_VACATE_SUCCESSES, 1);
        slab_set_state(s, SLAB_RELEASING);
        sd_spin_unlock(&s->lock);
        *released += cache_slab_release(c, s);
    } else {
        slab_resequence(s);
        *released += cache_slab_settle_unlock(c, s, 1);
    }
    stat_max(&vacate_longest_ns, os_now_ns() - t0);
    return left;
}

SD_EXPORT int sd_vacate(void *addr)
{
    struct slab *s = segment_slab_of(addr);
    if (!s)
        return 0;
    struct sd_cache *c = __atomic_load_n(&s->cache, __ATOMIC_ACQUIRE);
    if (!c || !c->has_ops)
        return 0;
    void **vec = sdm_malloc(c->capacity * sizeof(void *));
    if (!vec)
        return 0;
    /* A slab on the caller's own ring: give it back first (another
     * thread's ring, like any active slab, is not ours to take). */
    tcache_release_own(s);
    int vacated = 0;
    sd_spin_lock(&s->lock);
    if (s->cache != c || !s->inuse ||
        (s->state != SLAB_PARTIAL && s->state != SLAB_FULL)) {
        sd_spin_unlock(&s->lock);
    } else {
        if (s->state == SLAB_PARTIAL) {
            sd_mutex_lock(&c->list_lock);
            cache_partial_del_locked(c, s);
            sd_mutex_unlock(&c->list_lock);
        }
        slab_set_state(s, SLAB_FROZEN);
        size_t released = 0;
        if (pcpu_on()) {
            /* Frozen, its frees take the locked path from now on; the
             * objects of it that the CPUs cache are free, not allocated:
             * back onto its freelist before get() sees the slab. */
            sd_spin_unlock(&s->lock);
            int ok = pcpu_quiesce(c, s);
            sd_spin_lock(&s->lock);
            if (!ok) {
                vacate_giveup_locked(c, s, &released);
                sdm_free(vec);
                return 0;
            }
        }
        vacated = vacate_locked(c, s, vec, &released) == 0;
    }
    sdm_free(vec);
    return vacated;
}

size_t vacate_shrink_cache(struct sd_cache *c, uint64_t deadline, int idle, int drained)
{
    cache_stat_add(c, SD_STAT_SHRINK_PASSES, 1);
    if (!drained)
        pcpu_drain(c);                  /* true occupancy: nothing cached */
    size_t released = cache_release_empty(c, !idle);
    if (!__atomic_load_n(&c->nr_partial, __ATOMIC_RELAXED))
        return released;
    /* Nothing moved on or off the list, and no object went back to or
     * came from one of its slabs, since the last sort: it is still
     * sorted.  Most classes of a program, most passes: re-sorting them
     * would be most of a pass's time, under the list lock the program's
     * refills wait for. */
    unsigned long sig = cache_stat_read(c, SD_STAT_FREE_REMOTE) +
                        cache_stat_read(c, SD_STAT_ALLOC_DIRECT);
    if (!c->has_ops) {
        sd_mutex_lock(&c->list_lock);
        int same = c->sorted_sig == sig + c->partial_gen;
        sd_mutex_unlock(&c->list_lock);
        if (same) {
            cache_stat_add(c, SD_STAT_SORTS_SKIPPED, 1);
            return released;
        }
    }

    /* slabs_by_inuse, as in kmem_cache_shrink; the vector for get(). */
    uint32_t cap = c->capacity;
    struct sd_list *by_inuse = sdm_malloc((cap + 1) * sizeof(struct sd_list));
    void **vec = c->has_ops ? sdm_malloc(cap * sizeof(void *)) : NULL;
    if (!by_inuse || (c->has_ops && !vec)) {
        sdm_free(by_inuse);
        sdm_free(vec);
        return released;
    }
    for (uint32_t i = 0; i <= cap; i++)
        list_init(&by_inuse[i]);
    struct sd_list zap;
    list_init(&zap);

    sd_mutex_lock(&c->list_lock);
    while (!list_empty(&c->partial)) {
        struct sd_list *l = c->partial.next;
        struct slab *s = list_entry(l, struct slab, link);
        uint32_t inuse = __atomic_load_n(&s->inuse, __ATOMIC_RELAXED);
        list_del(l);
        list_add_tail(&by_inuse[inuse <= cap ? inuse : cap], l);
    }
    for (uint32_t i = cap + 1; i-- > 0;)
        while (!list_empty(&by_inuse[i])) {
            struct sd_list *l = by_inuse[i].next;
            list_del(l);
            list_add_tail(&c->partial, l);
        }
    c->sorted_sig = sig + c->partial_gen;
    if (c->has_ops) {
        /* Take the sparsest slabs off the tail. */
        while (c->nr_partial > sd_opt.min_partial) {
            struct slab *s = list_entry(c->partial.prev, struct slab, link);
            if (!sd_spin_trylock(&s->lock))
                break;
            if (s->inuse * 4 > s->capacity) {
                sd_spin_unlock(&s->lock);
                break;
            }
            cache_partial_del_locked(c, s);
            slab_set_state(s, SLAB_FROZEN);
            sd_spin_unlock(&s->lock);
            list_add_tail(&zap, &s->link);
        }
    }
    sd_mutex_unlock(&c->list_lock);
    /* The frozen slabs' objects that were freed onto per-CPU stacks since
     * the first drain: back to them before get() is called. */
    if (!list_empty(&zap))
        pcpu_drain(c);

    while (!list_empty(&zap)) {
        struct slab *s = list_entry(zap.next, struct slab, link);
        list_del(&s->link);
        int ok = pcpu_quiesce(c, s);
        sd_spin_lock(&s->lock);
        if (!ok || (deadline && os_now_ns() > deadline)) {
            /* Out of time: back untouched. */
            vacate_giveup_locked(c, s, &released);
            continue;
        }
        vacate_locked(c, s, vec, &released);
    }
    sdm_free(by_inuse);
    sdm_free(vec);
    return released;
}
