/*
 * core/slab.h - the slab freelist: formatting, collecting and
 * resequencing.  Callers hold the slab lock (or own a slab nobody else can
 * see yet).
 */
#ifndef SD_CORE_SLAB_H
#define SD_CORE_SLAB_H

#include "segment.h"
#include "types.h"

#define SLAB_MAX_OBJECTS 4096

/* ---------------------------------------------------------------------
 * Hardened free pointers (SLABDEFRAG_HARDEN, on by default).  A free
 * object stores the address of the next free object of its list at byte
 * fpo, and a write after free can reach it.  So it is stored encoded, as
 * SLUB's CONFIG_SLAB_FREELIST_HARDENED does:
 *     stored = next ^ key ^ bswap(address of the stored word)
 * with a per-process random key; and every pointer read back is checked
 * to be NULL or an object of the same slab (inside it, on an object
 * boundary) before it is used.  A forged or damaged pointer aborts with
 * one line naming the object, its cache and its slab; it is never handed
 * out.  With hardening off, mask is 0: the plain pointer, unchecked. */
extern SD_HIDDEN uintptr_t sd_fp_key, sd_fp_mask;

/* Choose the key (once, before the first slab is formatted), and the
 * free tag (whether hardening is on or not). */
void slab_harden_init(int on);
/* Names the cache of a slab in the report (set by the layer above). */
extern SD_HIDDEN const char *(*slab_cache_name)(const struct slab *s);
void slab_fp_corrupt(const struct slab *s, const void *obj, const void *next)
    __attribute__((noreturn, cold));

static inline uintptr_t slab_fp_mix(void *const *fp)
{
    return (sd_fp_key ^ __builtin_bswap64((uint64_t)(uintptr_t)fp)) & sd_fp_mask;
}

/* The next pointer of free object p as stored, decoded but unchecked (for
 * walkers that judge a list themselves: validation, slab_free_map). */
static inline void *slab_next_raw(const struct slab *s, void *p)
{
    void **fp = slab_fp(s, p);
    return (void *)((uintptr_t)*fp ^ slab_fp_mix(fp));
}

/* Set free object p's next pointer. */
static inline void slab_set_next(const struct slab *s, void *p, void *next)
{
    void **fp = slab_fp(s, p);
    *fp = (void *)((uintptr_t)next ^ slab_fp_mix(fp));
}

/* ---------------------------------------------------------------------
 * Free tags (glibc's tcache key).  Every free writes sd_free_tag, a
 * per-process random word, into the freed object at byte fpo + 8, and
 * every allocation clears it; a free that finds the tag already there is
 * of an object that is free now, wherever it sits (a CPU's stack, a
 * transfer cache, a thread's list, a slab's freelist), so it goes to
 * cache_free_tagged (classes/alloc.h), which finds it on its slab's lists
 * before it reports a double free: a program that stored the key itself
 * loses nothing.  One load and compare per free, one store per allocation.
 * fpo + 8 is the object's second word (every stride is at least 16), or,
 * for a ctor, the word after the free pointer past the object (the stride
 * has room for both); for SLABDEFRAG_DEBUG, the word after its free
 * pointer (classes/debug.h).  Slabs of caches with get() and neither a
 * ctor nor debugging carry none (tagged 0; classes/cache.h): a get() may
 * read any word of an object it is handed, and a double free of theirs is
 * caught only on top of a stack or a freelist.  Objects on purged pages
 * lose theirs (the page reads back zero). */
extern SD_HIDDEN uintptr_t sd_free_tag;

static inline uintptr_t *slab_tag(const struct slab *s, void *p)
{
    return (uintptr_t *)((char *)p + s->fpo + sizeof(void *));
}

/* ---------------------------------------------------------------------
 * Return maps.  A batch a full per-CPU stack sends back to a PARTIAL or
 * FULL slab (classes/alloc.c, cache_return_objects) sets a bit per object
 * in the slab's return map (a bitmap in the segment header, after the
 * descriptors: core/segment.h) instead of writing a free pointer into each
 * object, and a per-CPU refill (slab_take_locked) takes the map's objects
 * first, by finding set bits: neither touches the objects, which a
 * program that frees much of its heap at once and allocates it again
 * (sh6bench, sh8bench) would otherwise bring into the cache twice more
 * each, once cold.  So a slab's free objects are those on its freelist,
 * those in its return map and those on purged pages.  Everything else
 * that takes objects off a freelist folds the map into it first
 * (slab_rmap_fold: activation by a thread, a direct allocation); the free
 * maps count it (slab_free_map: vacate, mesh, page purge), what rebuilds
 * a freelist from a free map clears it (resequence, mesh), the page purge
 * takes its objects on purged pages out of it, and validation counts it.
 * Bits are set and cleared under the slab lock. */
static inline uint64_t *slab_rmap(const struct slab *s)
{
    return segment_rmap(s);
}
static inline unsigned slab_rmap_words(const struct slab *s)
{
    return (s->capacity + 63) / 64;
}
/* Is object p of s in its return map? */
static inline int slab_rmap_has(const struct slab *s, const void *p)
{
    uint32_t i = slab_index(s, p);
    return slab_rmap(s)[i >> 6] >> (i & 63) & 1;
}
/* Link the return map's objects onto the freelist (ascending, ahead of
 * it) and clear the map.  Returns how many. */
uint32_t slab_rmap_fold(struct slab *s);
/* Clear the map (a slab formatted or emptied of every list). */
void slab_rmap_clear(struct slab *s);

/* How slab_format orders a new slab's freelist (meshing, classes/mesh.c:
 * "Placement"). */
enum slab_order {
    SLAB_ORDER_ADDRESS,     /* address order */
    SLAB_ORDER_ROTATE,      /* address order from a random object on,
                               wrapping around */
    SLAB_ORDER_SHUFFLE,     /* a random permutation */
};
/* Carve s (start, kind set) into capacity objects of `size` bytes, all on
 * the freelist, free pointers at byte fpo of each; run ctor on each if
 * given.  The freelist is in `order`; the random ones draw from seed. */
void slab_format(struct slab *s, uint32_t size, uint32_t capacity,
                 uint16_t fpo, void (*ctor)(void *), unsigned order, uint64_t seed);
/* Mark the free objects in bitmap `map` (capacity bits, cleared first):
 * those in the return map, on the freelist and on purged pages
 * (core/types.h).
 * Returns the number of free objects; -1 if the freelist is corrupt (a
 * pointer outside the slab, misaligned, or a cycle). */
int slab_free_map(const struct slab *s, uint64_t *map);
/* Allocated objects in address order into vec; returns their number, or -1
 * on a corrupt freelist. */
int slab_collect_inuse(const struct slab *s, void **vec);
/* Rebuild the freelist in address order (patch 02/10's
 * resequence_freelist), so that objects are handed out ascending; objects
 * on purged pages stay off it. */
void slab_resequence(struct slab *s);
/* Pages of a slab's purged set (types.h): bit i = the 4 KiB page at
 * start + i * 4096; a slab spans at most 64 pages (256 KiB). */
#define SLAB_PAGE_SHIFT 12
/* In s->purged of a slab below 64 pages: the shrinker's decay pass looked
 * for pages to purge since the slab's last free (classes/cache.c). */
#define SLAB_PURGE_SEEN (1ULL << 63)
/* s->purged where it means that (the union's other members belong to
 * EMPTY and MESHED slabs): 0 unless PARTIAL or FROZEN. */
static inline uint64_t slab_purged(const struct slab *s)
{
    unsigned st = s->state;
    return st == SLAB_PARTIAL || st == SLAB_FROZEN ? s->purged & ~SLAB_PURGE_SEEN : 0;
}
/* Pages every object of which is free in `map` (a free map, as above),
 * among the pages the slab's objects cover. */
uint64_t slab_free_pages(const struct slab *s, const uint64_t *map);
/* Take the objects overlapping `pages` off the freelist and the return
 * map, unless that would leave them both empty.  Returns the objects taken, 0 if none (nothing changed). */
uint32_t slab_unlink_pages(struct slab *s, uint64_t pages);
/* The pages object p of s overlaps, a bit each. */
uint64_t slab_object_pages(const struct slab *s, const void *p);
/* Put every object overlapping s->purged back on the freelist (its pages
 * fault back in, zero) and clear s->purged.  Returns the objects added. */
uint32_t slab_unpurge(struct slab *s);
/* Objects overlapping s->purged. */
uint32_t slab_purged_objects(const struct slab *s);

/* Is p the address of an object of s (inside and on a boundary)? */
static inline int slab_contains(const struct slab *s, const void *p)
{
    /* off % size == 0 and off / size < capacity, as a rotate of one
     * product and one compare (see slab_format). */
    uint64_t off = (uintptr_t)p - (uintptr_t)s->start;
    uint64_t q = off * s->inv;
    q = (q >> s->tz) | (q << ((64 - s->tz) & 63));
    return q <= s->divlim;
}

/* The next free object after free object p of s: NULL or an object of s,
 * checked; a forged or damaged pointer is reported (slab_fp_corrupt). */
static inline void *slab_get_next(const struct slab *s, void *p)
{
    void *next = slab_next_raw(s, p);
    if (sd_fp_mask && next && unlikely(!slab_contains(s, next)))
        slab_fp_corrupt(s, p, next);
    return next;
}

/* Append obj to a freelist being built in order: *last is the previous
 * object (NULL: obj becomes the head); slab_link_end closes the list. */
static inline void slab_link(struct slab *s, void **last, void *obj)
{
    if (*last)
        slab_set_next(s, *last, obj);
    else
        s->freelist = obj;
    *last = obj;
}

static inline void slab_link_end(struct slab *s, void *last)
{
    if (last)
        slab_set_next(s, last, NULL);
    else
        s->freelist = NULL;
}

#endif
