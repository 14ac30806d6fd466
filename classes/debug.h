/*
 * classes/debug.h - SLABDEFRAG_DEBUG (slub_debug's letters).  A cache with
 * debugging never hands out a private freelist: every allocation and free
 * of it comes here, so caches without debugging lose no speed.
 *
 * Layout of one object of a debug cache (stride c->size; the user pointer
 * is the object start, as for every cache):
 *
 *   [0, object_size)        the object (poisoned 0x6b..0xa5 while free, P)
 *   [object_size, meta)     red zone, 0xcc (Z; at least 16 bytes)
 *   [meta, meta+8)          free pointer (c->fp_off == meta)
 *   [meta+8, meta+16)       free tag (core/slab.h, "Free tags")
 *   [meta+16, meta+24)      state word: DEBUG_LIVE / DEBUG_FREE / 0 (fresh)
 *   [meta+24, +2 tracks)    allocation and last-free call sites (U)
 *
 * meta = round8(object_size) + (Z ? 16 : 0).  The free pointer lives past
 * the object so that poisoning covers every byte and a ctor's state stays.
 */
#ifndef SD_CLASSES_DEBUG_H
#define SD_CLASSES_DEBUG_H

#include "cache.h"

/* Called by cache_setup for a cache with c->debug set (object_size, size,
 * align and id filled in): sets c->size, c->fp_off, c->kind, c->capacity. */
void debug_geometry(struct sd_cache *c);

/* Every allocation of a debug cache: called from cache_alloc_slow with no
 * allocator lock held. */
void *debug_alloc(struct sd_cache *c);
/* Every free of an object of a debug cache (slab s, found from p; the slab
 * lock is not held).  Reports and aborts on a double or invalid free. */
void  debug_free(struct sd_cache *c, struct slab *s, void *p, const char *call);

#endif
