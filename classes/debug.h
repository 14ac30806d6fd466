/*
 * classes/debug.h - SLABDEFRAG_DEBUG (slub_debug's letters).  A cache with
 * debugging never hands out a private freelist: every allocation and free
 * of it comes here, so caches without debugging lose no speed.
 */
#ifndef SD_CLASSES_DEBUG_H
#define SD_CLASSES_DEBUG_H

#include "cache.h"

void *debug_alloc(struct sd_cache *c);
void  debug_free(struct sd_cache *c, struct slab *s, void *p, const char *call);

#endif
