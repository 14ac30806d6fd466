/*
 * hooks/hint.c - defragmenting plain malloc memory, the Redis "active
 * defrag" way: the application asks whether a block sits on a sparse slab
 * and, if so, reallocates it into a fuller one and repoints its reference.
 *
 * A slab is worth emptying when it is on the partial list (not a thread's
 * active slab, not full, not being vacated), at most a quarter full, and
 * its cache has more partial slabs than it keeps anyway.  The new block
 * comes from the fullest partial slab more than a quarter full; when there
 * is none (every partial slab is sparse), from the cache's fill slab, a
 * fresh slab that hints never point at until it is past a quarter.  Never
 * from a candidate, so moves converge instead of ping-ponging.  With
 * meshing, an object of an alias slab is judged by its host, whose counts
 * cover every slab sharing those pages: emptying the group frees them.
 *
 * Large blocks (extents, core/extent.h) are never hinted nor moved: the
 * free pages around them are purged page by page (MADV_DONTNEED after the
 * decay, or at once by sd_shrink_all), so a sparse chunk costs no memory,
 * only address space.  Moving a block to empty a chunk would copy it (up
 * to 16 MiB) to return nothing resident; and chunks are never unmapped,
 * so that a stale pointer into one is diagnosed, as with segments.
 */
#include <string.h>

#include "alloc.h"
#include "cache.h"
#include "fmt.h"
#include "options.h"
#include "prof.h"
#include "sample.h"
#include "slabdefrag.h"


/* The slab whose counts decide for ptr: its own, or for an object of a
 * meshed alias (classes/mesh.c) the host's, which count the whole group
 * of slabs sharing one set of pages.  *home is the slab ptr lies in. */
static struct slab *sparse_slab_of(const void *ptr, struct slab **home)
{
    if (!ptr)
        return NULL;
    struct slab *s = segment_slab_of(ptr);
    if (!s)
        return NULL;
    *home = s;
    /* Racy reads: this is a hint, rechecked by the move itself. */
    if (!slab_contains(s, ptr))
        return NULL;
    if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == SLAB_MESHED) {
        s = __atomic_load_n(&s->mesh_host, __ATOMIC_RELAXED);
        if (!s)
            return NULL;
    }
    struct sd_cache *c = __atomic_load_n(&s->cache, __ATOMIC_RELAXED);
    if (!c || __atomic_load_n(&s->state, __ATOMIC_RELAXED) != SLAB_PARTIAL ||
        __atomic_load_n(&c->defrag_fill, __ATOMIC_RELAXED) == s)
        return NULL;
    uint32_t inuse = __atomic_load_n(&s->inuse, __ATOMIC_RELAXED);
    if (inuse * 4 > s->capacity)
        return NULL;
    if (__atomic_load_n(&c->nr_partial, __ATOMIC_RELAXED) <= sd_opt.min_partial)
        return NULL;
    return s;
}

SD_EXPORT int sd_defrag_hint(const void *ptr)
{
    struct slab *home;
    return sparse_slab_of(ptr, &home) != NULL;
}

SD_EXPORT void *sd_defrag_realloc(void *ptr)
{
    struct slab *home;
    struct slab *s = sparse_slab_of(ptr, &home);
    if (!s)
        return ptr;
    struct sd_cache *c = s->cache;
    void *q = cache_alloc_direct(c, s, 1);
    if (!q)
        q = cache_alloc_fill(c, s);
    if (!q)
        return ptr;
    memcpy(q, ptr, c->size);
    cache_stat_add(c, SD_STAT_DEFRAG_MOVES, 1);
    if (unlikely(sample_marked(home, ptr)))
        prof_moved(ptr, q, c->object_size);            /* its sample moves with it */
    cache_free_slow(home, ptr, "sd_defrag_realloc");   /* an alias's: to its host */
    return q;
}
