/*
 * classes/debug.c - the debug paths (F: full sanity checks on every free).
 */
#include "debug.h"

#include "alloc.h"
#include "fmt.h"
#include "slab.h"

int cache_slab_freed_locked(struct sd_cache *c, struct slab *s);

void *debug_alloc(struct sd_cache *c)
{
    return cache_alloc_direct(c, NULL, 0);
}

void debug_free(struct sd_cache *c, struct slab *s, void *p, const char *call)
{
    sd_spin_lock(&s->lock);
    uint64_t map[SLAB_MAX_OBJECTS / 64];
    if (slab_free_map(s, map) < 0) {
        sd_spin_unlock(&s->lock);
        sd_fatal("%s(): freelist of slab %p in cache %s is corrupt", call,
                 (void *)s->start, c->name);
    }
    uint32_t i = slab_index(s, p);
    if (map[i >> 6] >> (i & 63) & 1) {
        sd_spin_unlock(&s->lock);
        report_double_free(call, p, c);
    }
    *slab_fp(s, p) = s->freelist;
    s->freelist = p;
    s->inuse--;
    int release = cache_slab_freed_locked(c, s);
    sd_spin_unlock(&s->lock);
    if (release)
        cache_slab_release(c, s);
}
