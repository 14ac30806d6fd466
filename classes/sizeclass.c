/*
 * classes/sizeclass.c - the class table and slab geometry.
 */
#include "sizeclass.h"

#include "segment.h"
#include "slab.h"

#define S16(i) (16u * (i))
#define D8(k)  (1u << (k)) + 1u * (1u << ((k) - 3)), (1u << (k)) + 2u * (1u << ((k) - 3)), \
               (1u << (k)) + 3u * (1u << ((k) - 3)), (1u << (k)) + 4u * (1u << ((k) - 3)), \
               (1u << (k)) + 5u * (1u << ((k) - 3)), (1u << (k)) + 6u * (1u << ((k) - 3)), \
               (1u << (k)) + 7u * (1u << ((k) - 3)), (1u << (k)) + 8u * (1u << ((k) - 3))

const uint32_t sizeclass_size[SD_NCLASSES] = {
    S16(1), S16(2), S16(3), S16(4), S16(5), S16(6), S16(7), S16(8),
    S16(9), S16(10), S16(11), S16(12), S16(13), S16(14), S16(15), S16(16),
    D8(8), D8(9), D8(10), D8(11), D8(12), D8(13), D8(14),
};

_Static_assert(sizeof sizeclass_size / sizeof sizeclass_size[0] == SD_NCLASSES,
               "class table");

/* Classes of requests up to 1 KiB, by (n + 15) >> 4. */
const uint8_t sizeclass_small[65] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,   /* ..256 */
    16, 16, 17, 17, 18, 18, 19, 19, 20, 20, 21, 21, 22, 22, 23, 23, /* ..512 */
    24, 24, 24, 24, 25, 25, 25, 25, 26, 26, 26, 26, 27, 27, 27, 27,
    28, 28, 28, 28, 29, 29, 29, 29, 30, 30, 30, 30, 31, 31, 31, 31, /* ..1024 */
};

int sizeclass_aligned(size_t n, size_t align)
{
    if (n > SD_MAX_SMALL)
        return -1;
    for (unsigned c = sizeclass_of(n); c < SD_NCLASSES; c++)
        if (sizeclass_size[c] % align == 0)
            return (int)c;
    return -1;
}

/* Slab sizes in the order geometry tries them. */
static const uint8_t by_size[] = { SEG_KIND_4K, SEG_KIND_8K, SEG_KIND_16K,
                                   SEG_KIND_64K, SEG_KIND_256K };

/* The first slot of by_size[first..] with at least `min` objects and at
 * most 1/8 of it left over; the largest slot otherwise. */
static void pick(uint32_t size, unsigned first, size_t min, unsigned *kind,
                 uint32_t *capacity)
{
    for (unsigned i = first; i < sizeof by_size; i++) {
        size_t slot = seg_kind_bytes(by_size[i]);
        size_t cap = slot / size;
        if (cap > SLAB_MAX_OBJECTS)
            cap = SLAB_MAX_OBJECTS;
        if ((cap >= min && (slot - cap * size) * 8 <= slot) ||
            by_size[i] == SEG_KIND_256K) {
            *kind = by_size[i];
            *capacity = (uint32_t)cap;
            return;
        }
    }
}

/* Typed caches (sd_cache_create): the smallest of 16, 64 and 256 KiB with
 * at least 8 objects and at most 1/8 left over. */
void sizeclass_geometry(uint32_t size, unsigned *kind, uint32_t *capacity)
{
    pick(size, 2, 8, kind, capacity);
}

/* Malloc classes are chosen for fragmentation as well as waste.
 * When a fraction q of a heap's objects survive at random, a slab of n
 * objects comes back empty with probability (1 - q)^n: at q = 0.15, 72% of
 * 2-object slabs, 52% of 4-object, 27% of 8-object and 7% of 16-object
 * ones.  So a class of at least 1 KiB (a page holds at most 4) takes the
 * smallest slot, 4 KiB up, with at least 2 objects and at most 1/8 left
 * over (jemalloc gives its 2 KiB class one page); 512..1023 B the
 * smallest, 8 KiB up, with at least 8; smaller classes keep the typed
 * caches' rule (16 KiB up, at least 8).  Below 512 B, smaller slabs hold
 * a per-CPU refill (half a stack) in fewer objects than it asks for, and
 * producer/consumer programs, whose objects go back to the slabs in bulk,
 * fault in and purge slabs at a higher rate: 4 KiB slabs for the 128..512
 * B classes would halve a producer/consumer program's throughput. */
void sizeclass_malloc_geometry(uint32_t size, unsigned *kind, uint32_t *capacity)
{
    if (size >= 1024)
        pick(size, 0, 2, kind, capacity);
    else
        pick(size, size >= 512 ? 1 : 2, 8, kind, capacity);
}
