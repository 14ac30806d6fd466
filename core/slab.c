/*
 * core/slab.c - freelist formatting, collection and resequencing.
 */
#include "slab.h"

#include <string.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <time.h>

#include "fmt.h"

uintptr_t sd_fp_key, sd_fp_mask;
/* Nonzero before slab_harden_init: fresh memory reads zero, never a tag. */
uintptr_t sd_free_tag = 0x9e3779b97f4a7c15ULL;
const char *(*slab_cache_name)(const struct slab *s);

/* A random word: getrandom, or the exec's AT_RANDOM bytes mixed. */
static uint64_t random_word(int which)
{
    uint64_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        /* No getrandom (seccomp, old kernel): the kernel's AT_RANDOM bytes
         * of this exec, mixed with the time and an address. */
        const uint64_t *r = (const uint64_t *)getauxval(AT_RANDOM);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k = (r ? r[which] : 0) ^ (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^
            (uint64_t)(uintptr_t)&k;
    }
    return k;
}

void slab_harden_init(int on)
{
    static int tag_done;
    if (!tag_done) {
        uint64_t t = random_word(0);
        sd_free_tag = (uintptr_t)(t ? t : 1);
        tag_done = 1;
    }
    if (!on || sd_fp_mask)
        return;
    sd_fp_key = (uintptr_t)(random_word(1) | 1);
    sd_fp_mask = ~(uintptr_t)0;
}

void slab_fp_corrupt(const struct slab *s, const void *obj, const void *next)
{
    (void)next;     /* random when forged: the stored word says more */
    sd_fatal("heap corruption: free object %p of cache %s (slab %p) holds %p "
             "as its next pointer, which is not an object of its slab (a write "
             "after free?)", obj, slab_cache_name ? slab_cache_name(s) : "?",
             (void *)s->start, *slab_fp(s, (void *)obj));
}

/* splitmix64: the seed's stream of random words. */
static uint64_t next_rand(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void slab_format(struct slab *s, uint32_t size, uint32_t capacity,
                 uint16_t fpo, void (*ctor)(void *), unsigned order, uint64_t seed)
{
    s->fpo = fpo;
    s->size = size;
    s->capacity = capacity;
    s->recip = ((1ULL << 40) + size - 1) / size;
    /* Membership in one multiply: off % size == 0 iff off has tz low zero
     * bits and ror(off * inv, tz) <= (2^64-1) / size (Hacker's Delight
     * 10-17), and then that value is off / size.  So ror(off * inv, tz) <=
     * capacity - 1 holds exactly for the offsets of the slab's objects
     * (an offset below start wraps to a multiple far above the last). */
    unsigned tz = (unsigned)__builtin_ctz(size);
    uint64_t odd = size >> tz, inv = odd;
    for (int i = 0; i < 5; i++)
        inv *= 2 - odd * inv;               /* Newton: inv * odd == 1 */
    s->tz = (uint8_t)tz;
    s->inv = inv;
    s->divlim = capacity - 1;
    s->inuse = 0;
    slab_rmap_clear(s);
    void *last = NULL;
    if (order == SLAB_ORDER_SHUFFLE) {
        /* Fisher-Yates over the indices; once per slab, never per object. */
        uint16_t perm[SLAB_MAX_OBJECTS];
        for (uint32_t i = 0; i < capacity; i++)
            perm[i] = (uint16_t)i;
        for (uint32_t i = capacity; i > 1; i--) {
            uint32_t j = (uint32_t)(((next_rand(&seed) >> 32) * i) >> 32);
            uint16_t t = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = t;
        }
        for (uint32_t i = 0; i < capacity; i++) {
            void *obj = slab_object(s, perm[i]);
            if (ctor)
                ctor(obj);
            slab_link(s, &last, obj);
        }
        slab_link_end(s, last);
        return;
    }
    uint32_t r = order == SLAB_ORDER_ROTATE
                 ? (uint32_t)(((next_rand(&seed) >> 32) * capacity) >> 32) : 0;
    for (uint32_t k = 0; k < capacity; k++) {
        uint32_t i = k + r < capacity ? k + r : k + r - capacity;
        void *obj = slab_object(s, i);
        if (ctor)
            ctor(obj);
        slab_link(s, &last, obj);
    }
    slab_link_end(s, last);
}

/* The pages object i overlaps, a bit each. */
static uint64_t object_pages(const struct slab *s, uint32_t i)
{
    size_t off = (size_t)i * s->size;
    unsigned first = (unsigned)(off >> SLAB_PAGE_SHIFT);
    unsigned last = (unsigned)((off + s->size - 1) >> SLAB_PAGE_SHIFT);
    return (last - first >= 63 ? ~0ULL : (2ULL << (last - first)) - 1) << first;
}

static int object_on_pages(const struct slab *s, uint32_t i, uint64_t pages)
{
    return (object_pages(s, i) & pages) != 0;
}

uint64_t slab_object_pages(const struct slab *s, const void *p)
{
    return object_pages(s, slab_index(s, p));
}

_Static_assert(SEG_RMAP_MAX_OBJECTS == SLAB_MAX_OBJECTS,
               "a return map has a bit for every object a slab may hold");

uint32_t slab_rmap_fold(struct slab *s)
{
    uint64_t *map = slab_rmap(s);
    unsigned words = slab_rmap_words(s);
    void *head = s->freelist, *last = NULL;
    uint32_t n = 0;
    for (unsigned w = 0; w < words; w++) {
        for (uint64_t m = map[w]; m; m &= m - 1) {
            slab_link(s, &last, slab_object(s, w * 64 + (unsigned)__builtin_ctzll(m)));
            n++;
        }
        map[w] = 0;
    }
    if (last)
        slab_set_next(s, last, head);
    else
        s->freelist = head;
    return n;
}

void slab_rmap_clear(struct slab *s)
{
    /* The slot's whole map: the slab it held before may have had more
     * objects. */
    const struct segment *seg = segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
    uint64_t *map = slab_rmap(s);
    unsigned words = segment_rmap_words(seg->slot_shift);
    for (unsigned w = 0; w < words; w++)
        if (map[w])                     /* untouched pages stay untouched */
            map[w] = 0;
}

int slab_free_map(const struct slab *s, uint64_t *map)
{
    const uint64_t *r = slab_rmap(s);
    unsigned words = slab_rmap_words(s);
    int n = 0;
    for (unsigned w = 0; w < words; w++) {
        map[w] = r[w];
        n += __builtin_popcountll(r[w]);
    }
    if (s->capacity & 63 && map[words - 1] >> (s->capacity & 63))
        return -1;                  /* a bit past the last object */
    for (void *p = s->freelist; p; p = slab_next_raw(s, p)) {
        if (!slab_contains(s, p))
            return -1;
        uint32_t i = slab_index(s, p);
        if (map[i >> 6] >> (i & 63) & 1)
            return -1;              /* cycle, or an object freed twice */
        map[i >> 6] |= 1ULL << (i & 63);
        n++;
    }
    uint64_t purged = slab_purged(s);
    if (purged)
        for (uint32_t i = 0; i < s->capacity; i++)
            if (object_on_pages(s, i, purged)) {
                if (map[i >> 6] >> (i & 63) & 1)
                    return -1;      /* on the freelist and purged */
                map[i >> 6] |= 1ULL << (i & 63);
                n++;
            }
    return n;
}

uint64_t slab_free_pages(const struct slab *s, const uint64_t *map)
{
    unsigned npages = (unsigned)(((uint64_t)s->capacity * s->size +
                                  (1u << SLAB_PAGE_SHIFT) - 1) >> SLAB_PAGE_SHIFT);
    uint64_t covered = npages >= 64 ? ~0ULL : (1ULL << npages) - 1, busy = 0;
    for (uint32_t i = 0; i < s->capacity; i++)
        if (!(map[i >> 6] >> (i & 63) & 1))
            busy |= object_pages(s, i);
    return covered & ~busy;
}

uint32_t slab_unlink_pages(struct slab *s, uint64_t pages)
{
    uint32_t keep = 0, drop = 0;
    uint64_t *r = slab_rmap(s);
    unsigned words = slab_rmap_words(s);
    for (void *p = s->freelist; p; p = slab_get_next(s, p)) {
        if (object_on_pages(s, slab_index(s, p), pages))
            drop++;
        else
            keep++;
    }
    for (unsigned w = 0; w < words; w++)
        for (uint64_t m = r[w]; m; m &= m - 1) {
            if (object_on_pages(s, w * 64 + (uint32_t)__builtin_ctzll(m), pages))
                drop++;
            else
                keep++;
        }
    if (!keep || !drop)
        return 0;
    for (unsigned w = 0; w < words; w++)
        for (uint64_t m = r[w]; m; m &= m - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(m);
            if (object_on_pages(s, i, pages))
                r[w] &= ~(1ULL << (i & 63));
        }
    void *last = NULL;
    for (void *p = s->freelist, *next; p; p = next) {
        next = slab_get_next(s, p);
        if (!object_on_pages(s, slab_index(s, p), pages))
            slab_link(s, &last, p);
    }
    slab_link_end(s, last);
    return drop;
}

uint32_t slab_purged_objects(const struct slab *s)
{
    uint32_t n = 0;
    uint64_t purged = slab_purged(s);
    if (purged)
        for (uint32_t i = 0; i < s->capacity; i++)
            n += (uint32_t)object_on_pages(s, i, purged);
    return n;
}

uint32_t slab_unpurge(struct slab *s)
{
    uint64_t pages = slab_purged(s);
    if (!pages)
        return 0;
    /* Ascending, ahead of the list: the objects come back in address
     * order, as a resequenced freelist hands them out. */
    void *head = s->freelist, *last = NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->capacity; i++)
        if (object_on_pages(s, i, pages)) {
            slab_link(s, &last, slab_object(s, i));
            n++;
        }
    if (last)
        slab_set_next(s, last, head);
    else
        s->freelist = head;
    s->purged = 0;
    return n;
}

int slab_collect_inuse(const struct slab *s, void **vec)
{
    uint64_t map[SLAB_MAX_OBJECTS / 64];
    if (slab_free_map(s, map) < 0)
        return -1;
    int n = 0;
    for (uint32_t i = 0; i < s->capacity; i++)
        if (!(map[i >> 6] >> (i & 63) & 1))
            vec[n++] = slab_object(s, i);
    return n;
}

void slab_resequence(struct slab *s)
{
    uint64_t map[SLAB_MAX_OBJECTS / 64];
    if (slab_free_map(s, map) < 0)
        return;                     /* leave a corrupt list for validation */
    uint64_t purged = slab_purged(s);
    void *last = NULL;
    for (uint32_t i = 0; i < s->capacity; i++)
        if (map[i >> 6] >> (i & 63) & 1 && !(purged && object_on_pages(s, i, purged)))
            slab_link(s, &last, slab_object(s, i));
    slab_link_end(s, last);
    slab_rmap_clear(s);                 /* all on the list now */
}
