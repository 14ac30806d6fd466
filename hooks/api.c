/*
 * hooks/api.c - the public typed-cache API of slabdefrag.h.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "cache.h"
#include "fmt.h"
#include "large.h"
#include "mallocfam.h"
#include "mesh.h"
#include "prof.h"
#include "sample.h"
#include "segment.h"
#include "shrinker.h"
#include "slabdefrag.h"
#include "tcache.h"
#include "vacate.h"

/* A cache pointer the caller handed us: one of ours and alive? */
static struct sd_cache *cache_checked(const sd_cache *s)
{
    if (!s)
        return NULL;
    for (unsigned i = 0; i < SD_MAX_CACHES; i++)
        if (__atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE) == s)
            return (struct sd_cache *)s;
    return NULL;
}

SD_EXPORT sd_cache *sd_cache_create(const char *name, size_t size, size_t align,
                                    unsigned long flags, void (*ctor)(void *),
                                    const struct sd_cache_ops *ops)
{
    tcache_check_get("sd_cache_create");
    if (!name || !*name || size == 0 || size > SD_MAX_SMALL ||
        (align & (align - 1)) || align > 4096 || (flags & ~SD_CACHE_FLAGS) ||
        (ops && (!ops->get || !ops->kick))) {
        errno = EINVAL;
        return NULL;
    }
    struct sd_cache *c = cache_create(name, size, align, flags, ctor, ops,
                                      sdm_malloc);
    if (c && c->has_ops)
        shrinker_start();
    return c;
}

SD_EXPORT void sd_cache_destroy(sd_cache *s)
{
    tcache_check_get("sd_cache_destroy");
    struct sd_cache *c = cache_checked(s);
    if (!c || c->is_malloc) {
        if (s)
            sd_warn("sd_cache_destroy(): %p is not a cache that can be destroyed",
                    (void *)s);
        return;
    }
    sd_mutex_lock(&sd_caches_lock);
    int last = --c->refcount == 0;
    sd_mutex_unlock(&sd_caches_lock);
    if (!last)
        return;
    tcache_flush_self_bin(c->id);
    pcpu_drain(c);
    struct cache_usage u;
    cache_usage(c, &u);
    if (u.objects_inuse) {
        sd_warn("sd_cache_destroy(%s): %zu objects still allocated; the cache "
                "and its memory are kept", c->name, u.objects_inuse);
        return;
    }
    if (u.active) {
        /* Other threads still hold active slabs of it: keep it, marked
         * dead, so those slabs stay valid until the threads exit. */
        c->dead = 1;
        cache_release_empty(c, 1);
        return;
    }
    c->dead = 1;
    cache_release_empty(c, 1);
    vacate_shrink_cache(c, 0, 0, 0);          /* releases nothing live */
    if (c->nr_slabs == 0) {
        sd_mutex_lock(&sd_caches_lock);
        __atomic_store_n(&sd_caches[c->id], NULL, __ATOMIC_RELEASE);
        sd_mutex_unlock(&sd_caches_lock);
        sdm_free(c);
    }
}

static inline void *cache_alloc_entry(struct sd_cache *c)
{
    char *base = sd_tc.pcpu;
    if (likely(base))
        return pcpu_alloc(c, c->id, base);
    if (c->is_malloc)
        return cache_alloc_fast(c, &sd_tc.bins[c->id]);
    if (pcpu_on() && !sd_tc.in_get && pcpu_thread_init())
        return pcpu_alloc(c, c->id, sd_tc.pcpu);
    struct tbin *b = tcache_ubin_of(&sd_tc, c->id);
    if (unlikely(!b)) {
        tcache_check_get("sd_cache_alloc");
        b = tcache_ubin(c->id);
        if (!b)
            return cache_alloc_direct(c, NULL, 0);
    }
    return cache_alloc_fast(c, b);
}

/* An allocation that crossed a sample point (classes/sample.h). */
static __attribute__((noinline, cold)) void *cache_alloc_sampled(struct sd_cache *c)
{
    int how = sample_check(c->object_size);
    void *p = cache_alloc_entry(c);
    if (how)
        sample_taken(p, c->object_size, how);
    return p;
}

/* A free of an object that may be sampled: the sample goes first. */
static __attribute__((noinline, cold)) void cache_free_sampled(struct slab *sl, void *obj)
{
    sample_slab_freed(sl, obj);
    cache_free_fast(sl, obj, "sd_cache_free");
}

SD_EXPORT void *sd_cache_alloc(sd_cache *s)
{
    struct sd_cache *c = (struct sd_cache *)s;
    if (unlikely(!c)) {
        errno = EINVAL;
        return NULL;
    }
    if (unlikely(sample_due(c->object_size)))
        return cache_alloc_sampled(c);
    return cache_alloc_entry(c);
}

SD_EXPORT void sd_cache_free(sd_cache *s, void *obj)
{
    if (unlikely(!obj))
        return;
    struct slab *sl = segment_slab_of(obj);
    if (unlikely(!sl))
        report_invalid("sd_cache_free", obj);
    struct sd_cache *owner = __atomic_load_n(&sl->cache, __ATOMIC_RELAXED);
    if (unlikely(owner != (struct sd_cache *)s)) {
        if (owner && slab_contains(sl, obj))
            sd_fatal("sd_cache_free(): %p belongs to cache %s, not %s", obj,
                     owner->name, s ? ((struct sd_cache *)s)->name : "(null)");
        report_invalid("sd_cache_free", obj);
    }
    if (unlikely(sample_slab_marked(sl)))
        return cache_free_sampled(sl, obj);
    cache_free_fast(sl, obj, "sd_cache_free");
}

SD_EXPORT int sd_cache_shrink(sd_cache *s)
{
    tcache_check_get("sd_cache_shrink");
    struct sd_cache *c = cache_checked(s);
    if (!c)
        return -EINVAL;
    tcache_flush_self_bin(c->id);
    vacate_shrink_cache(c, 0, 0, 0);
    cache_fold_returns(c);          /* every free object on its freelist */
    cache_settle_slots(1, 0);
    return 0;
}

SD_EXPORT size_t sd_shrink_all(void)
{
    tcache_check_get("sd_shrink_all");
    cache_init();
    tcache_flush_self();
    tcache_reclaim(1);
    size_t bytes = large_trim();
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (c) {
            bytes += vacate_shrink_cache(c, 0, 0, 0);
            cache_fold_returns(c);  /* every free object on its freelist */
        }
    }
    bytes += mesh_pass(0, NULL, MESH_GROWING | MESH_FORCE);    /* SLABDEFRAG_MESH=1: unbounded */
    /* The shrink's own scratch (vacate_shrink_cache's lists) went through
     * this thread's active slabs, which it made here - perhaps in a
     * released mesh host's slot, file-backed until its slab goes. */
    tcache_flush_self();
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        bytes += cache_release_empty(&sd_malloc_caches[i], 1);
    cache_settle_slots(1, 0);
    shrinker_note_pass(bytes);
    return bytes;
}

SD_EXPORT int sd_shrink_wake(void)
{
    return shrinker_wake();
}

SD_EXPORT sd_cache *sd_cache_find(const char *name)
{
    if (!name)
        return NULL;
    cache_init();
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (c && !c->dead && !strcmp(c->name, name))
            return c;
    }
    return NULL;
}

SD_EXPORT int sd_cache_get_info(const sd_cache *s, struct sd_cache_info *out)
{
    struct sd_cache *c = cache_checked(s);
    if (!c || !out)
        return -EINVAL;
    struct cache_usage u;
    cache_usage(c, &u);
    memset(out, 0, sizeof *out);
    memcpy(out->name, c->name, sizeof out->name);
    out->object_size = c->object_size;
    out->slab_size = seg_kind_bytes(c->kind);
    out->objects_per_slab = c->capacity;
    out->slabs = u.slabs;
    out->partial_slabs = u.partial;
    out->objects_inuse = u.objects_inuse;
    out->vacate_attempts = __atomic_load_n(&c->stat[SD_STAT_VACATE_ATTEMPTS], __ATOMIC_RELAXED);
    out->vacate_successes = __atomic_load_n(&c->stat[SD_STAT_VACATE_SUCCESSES], __ATOMIC_RELAXED);
    out->objects_kicked = __atomic_load_n(&c->stat[SD_STAT_OBJECTS_KICKED], __ATOMIC_RELAXED);
    out->shrink_passes = __atomic_load_n(&c->stat[SD_STAT_SHRINK_PASSES], __ATOMIC_RELAXED);
    out->bytes_released = __atomic_load_n(&c->stat[SD_STAT_BYTES_RELEASED], __ATOMIC_RELAXED);
    out->aliases = c->refcount > 1 ? c->refcount - 1 : 0;
    return 0;
}
