/*
 * classes/sizeclass.h - the malloc size classes.
 *
 * 16-byte steps up to 256 bytes, then eight classes per doubling up to
 * 32 KiB: a request is rounded up by at most 1/8 of its class above 256
 * bytes (internal waste <= 12.5%; jemalloc's four per doubling give 20%).
 * 72 classes, each served by the cache "malloc-<size>".
 */
#ifndef SD_CLASSES_SIZECLASS_H
#define SD_CLASSES_SIZECLASS_H

#include "fmt.h"

#include <stddef.h>
#include <stdint.h>

#define SD_NCLASSES   72
#define SD_MAX_SMALL  32768u

extern SD_HIDDEN const uint32_t sizeclass_size[SD_NCLASSES];

/* The class serving n bytes (n <= SD_MAX_SMALL). */
extern SD_HIDDEN const uint8_t sizeclass_small[65];   /* by (n + 15) >> 4 */

static inline unsigned sizeclass_of(size_t n)
{
    if (n <= 1024)
        return sizeclass_small[(n + 15) >> 4];
    unsigned k = 63u - (unsigned)__builtin_clzl(n - 1);     /* 8..14 */
    return 16 + (k - 8) * 8 + (unsigned)(((n - 1) >> (k - 3)) - 8);
}

/* The smallest class >= n whose size is a multiple of align, or -1. */
int sizeclass_aligned(size_t n, size_t align);
/* Slab kind (slot size) and objects per slab for objects of `size` bytes:
 * of a typed cache, and of a malloc class (smaller slabs for big classes). */
void sizeclass_geometry(uint32_t size, unsigned *kind, uint32_t *capacity);
void sizeclass_malloc_geometry(uint32_t size, unsigned *kind, uint32_t *capacity);

#endif
