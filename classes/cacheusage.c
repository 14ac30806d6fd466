/*
 * classes/cacheusage.c - a cache's figures (cache_usage): its slabs by
 * state, their bytes and the objects in use, counted on the slabs
 * themselves under their locks.
 */
#include "cache.h"

#include <string.h>

#include "pcpu.h"
#include "segment.h"
#include "slab.h"
#include "tcache.h"

struct usage_walk {
    struct sd_cache *c;
    struct cache_usage *u;
};

static void usage_one(struct slab *s, void *arg)
{
    struct usage_walk *w = arg;
    if (__atomic_load_n(&s->cache, __ATOMIC_RELAXED) != w->c)
        return;
    sd_spin_lock(&s->lock);
    if (s->cache == w->c) {
        switch (s->state) {
        case SLAB_ACTIVE:  w->u->active++; break;
        case SLAB_OWNED:   w->u->active++; break;
        case SLAB_PARTIAL: w->u->partial++; break;
        case SLAB_FULL:    w->u->full++; break;
        case SLAB_FROZEN:  w->u->frozen++; break;
        case SLAB_EMPTY:   w->u->empty++; break;
        default: break;
        }
        if (s->state != SLAB_UNUSED && s->state != SLAB_RELEASING &&
            s->state != SLAB_MESHED) {
            w->u->slabs++;
            w->u->bytes += seg_kind_bytes(s->kind) -
                           ((size_t)__builtin_popcountll(slab_purged(s)) << SLAB_PAGE_SHIFT);
            w->u->objects_inuse += s->inuse;
            if (s->state == SLAB_OWNED || s->state == SLAB_ACTIVE)
                w->u->objects_inuse -= __atomic_load_n(&s->nlocal, __ATOMIC_RELAXED);
        }
    }
    sd_spin_unlock(&s->lock);
}

void cache_usage(struct sd_cache *c, struct cache_usage *u)
{
    memset(u, 0, sizeof *u);
    struct usage_walk w = { c, u };
    /* No drain half done while counting: its objects would be counted on
     * their slabs and not on their stack, or the other way round. */
    pcpu_drain_lock();
    segment_for_each_slab(usage_one, &w, 0);
    size_t priv = tcache_private_objects(c->id) + pcpu_cached(c->id);
    pcpu_drain_unlock(0);
    u->objects_inuse = u->objects_inuse > priv ? u->objects_inuse - priv : 0;
}
