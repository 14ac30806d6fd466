/*
 * classes/mallinfo.c - mallinfo2()'s figures, gathered from the layers
 * that own them: segments (mapped slab memory), the large allocator
 * (extents and huge blocks) and the caches (objects in use).  The preload
 * layer exports it as mallinfo2 and mallinfo.
 */
#include "mallocfam.h"

#include <string.h>

#include "cache.h"
#include "large.h"
#include "segment.h"

struct mallinfo2 sdm_mallinfo2(void)
{
    struct mallinfo2 mi;
    memset(&mi, 0, sizeof mi);
    size_t mapped, slots;
    segment_usage(&mapped, &slots);
    struct large_stats l;
    large_get_stats(&l);
    size_t lbytes = l.bytes, lcached = l.cached_bytes + l.dirty_bytes + l.huge_cached_bytes;
    mi.arena = mapped;
    mi.hblks = l.huge_blocks + l.extent_blocks;
    mi.hblkhd = lbytes;
    size_t inuse = 0;
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (!c)
            continue;
        struct cache_usage u;
        cache_usage(c, &u);
        inuse += u.objects_inuse * c->size;
    }
    mi.uordblks = inuse + lbytes;
    mi.fordblks = mapped > inuse ? mapped - inuse : 0;
    mi.keepcost = lcached;
    return mi;
}
