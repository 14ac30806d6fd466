/*
 * core/huge.c - huge blocks as their own mappings (see huge.h).
 */
#include "huge.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "lock.h"
#include "options.h"
#include "os.h"

struct lentry {
    uintptr_t addr;             /* user pointer, 0 = empty slot */
    size_t    usable;           /* bytes the user may touch */
    uintptr_t map;              /* start of the mapping */
    size_t    maplen;           /* bytes mapped */
};

struct cached {
    uintptr_t map;
    size_t    maplen;
    uint64_t  since;            /* ns */
};

#define LARGE_MAX       (1UL << 46)    /* bytes of one block, at most */
#define CACHE_SLOTS     8
/* At most 16 MiB of cached mappings, all resident: a larger cache adds
 * its whole size to a program's peak RSS for few page faults saved.
 * Since huge blocks begin above 16 MiB (core/large.h), only
 * those aligned beyond LARGE_ALIGN_MAX are small enough to be cached: a
 * mapping of more than 16 MiB costs 4,096+ page faults to touch, beside
 * which its mmap and munmap are noise, and keeping it would keep as much
 * memory resident. */
#define CACHE_MAX_BYTES (16UL << 20)
#define CACHE_MAX_ONE   (16UL << 20)

static sd_mutex lock = SD_MUTEX_INIT;
static struct lentry *table;    /* capacity a power of two */
static size_t cap, count, mapped;
static struct cached cache[CACHE_SLOTS];
static size_t ncached, cached_bytes;
static size_t ncached_hint;   /* ncached, for unlocked peeks (relaxed) */

static void unlock_huge(void)
{
    __atomic_store_n(&ncached_hint, ncached, __ATOMIC_RELAXED);
    sd_mutex_unlock(&lock);
}

static inline size_t hash(uintptr_t a, size_t mask)
{
    return (size_t)((a >> 12) * 0x9E3779B97F4A7C15ull >> 17) & mask;
}

static struct lentry *lookup_locked(uintptr_t a)
{
    SD_ASSERT(sd_mutex_held(&lock));
    if (!table)
        return NULL;
    size_t mask = cap - 1;
    for (size_t i = hash(a, mask);; i = (i + 1) & mask) {
        if (table[i].addr == a)
            return &table[i];
        if (!table[i].addr)
            return NULL;
    }
}

static void insert_raw(struct lentry *t, size_t c, const struct lentry *e)
{
    size_t mask = c - 1;
    size_t i = hash(e->addr, mask);
    while (t[i].addr)
        i = (i + 1) & mask;
    t[i] = *e;
}

static int grow_locked(void)
{
    SD_ASSERT(sd_mutex_held(&lock));
    size_t ncap = cap ? cap * 2 : 1024;
    void *mem;
    if (os_map_aligned(ncap * sizeof(struct lentry), SD_PAGE_SIZE, &mem))
        return ENOMEM;
    for (size_t i = 0; i < cap; i++)
        if (table[i].addr)
            insert_raw(mem, ncap, &table[i]);
    if (table)
        os_unmap(table, cap * sizeof(struct lentry));
    table = mem;
    cap = ncap;
    return 0;
}

/* Backward-shift deletion keeps linear probing free of tombstones. */
static void remove_locked(struct lentry *e)
{
    SD_ASSERT(sd_mutex_held(&lock));
    size_t mask = cap - 1;
    size_t i = (size_t)(e - table);
    for (size_t j = (i + 1) & mask; table[j].addr; j = (j + 1) & mask) {
        size_t h = hash(table[j].addr, mask);
        if (((j - h) & mask) >= ((j - i) & mask)) {
            table[i] = table[j];
            i = j;
        }
    }
    table[i].addr = 0;
    count--;
}

static size_t decay_locked(uint64_t now, int all, struct cached *out, size_t *nout)
{
    SD_ASSERT(sd_mutex_held(&lock));
    size_t bytes = 0;
    uint64_t decay = (uint64_t)sd_opt.decay_ms * 1000000ull;
    for (size_t i = 0; i < ncached;) {
        if (all || now - cache[i].since >= decay) {
            out[(*nout)++] = cache[i];
            bytes += cache[i].maplen;
            cached_bytes -= cache[i].maplen;
            cache[i] = cache[--ncached];
        } else {
            i++;
        }
    }
    return bytes;
}

static void unmap_list(struct cached *l, size_t n)
{
    for (size_t i = 0; i < n; i++)
        os_unmap((void *)l[i].map, l[i].maplen);
}

void *huge_alloc(size_t size, size_t align, int zero)
{
    if (align < SD_PAGE_SIZE)
        align = SD_PAGE_SIZE;
    size_t len = (size + SD_PAGE_SIZE - 1) & ~(SD_PAGE_SIZE - 1);
    if (len < size || len > LARGE_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    if (len == 0)
        len = SD_PAGE_SIZE;         /* memalign(big, 0): a real block */
    struct lentry e = { 0 };
    sd_mutex_lock(&lock);
    if (align == SD_PAGE_SIZE) {
        size_t best = CACHE_SLOTS;
        for (size_t i = 0; i < ncached; i++)
            if (cache[i].maplen >= len && cache[i].maplen - len <= len / 4 &&
                (best == CACHE_SLOTS || cache[i].maplen < cache[best].maplen))
                best = i;
        if (best != CACHE_SLOTS) {
            e.map = cache[best].map;
            e.maplen = cache[best].maplen;
            cached_bytes -= e.maplen;
            cache[best] = cache[--ncached];
        }
    }
    unlock_huge();
    if (!e.map) {
        void *m;
        if (os_map_aligned(len, align, &m)) {
            errno = ENOMEM;
            return NULL;
        }
        e.map = (uintptr_t)m;
        e.maplen = len;
    }
    else if (zero)
        memset((void *)e.map, 0, e.maplen);     /* a reused mapping */
    e.addr = e.map;
    e.usable = e.maplen;
    sd_mutex_lock(&lock);
    if ((count + 1) * 2 > cap && grow_locked()) {
        unlock_huge();
        os_unmap((void *)e.map, e.maplen);
        errno = ENOMEM;
        return NULL;
    }
    insert_raw(table, cap, &e);
    count++;
    mapped += e.maplen;
    unlock_huge();
    return (void *)e.addr;
}

size_t huge_usable(const void *p)
{
    sd_mutex_lock(&lock);
    struct lentry *e = lookup_locked((uintptr_t)p);
    size_t n = e ? e->usable : 0;
    unlock_huge();
    return n;
}

int huge_free(void *p)
{
    struct cached drop[CACHE_SLOTS + 1];
    size_t ndrop = 0;
    sd_mutex_lock(&lock);
    struct lentry *e = lookup_locked((uintptr_t)p);
    if (!e) {
        unlock_huge();
        return -1;
    }
    struct cached c = { e->map, e->maplen, os_now_ns() };
    mapped -= e->maplen;
    remove_locked(e);
    decay_locked(c.since, 0, drop, &ndrop);
    /* Cached bytes stay under half the bytes of the live huge blocks, or
     * the newest mapping alone (as free extents, core/extent.c): a
     * program that frees them all keeps one, a loop on one buffer reuses
     * it. */
    size_t limit = mapped / 2 < CACHE_MAX_BYTES ? mapped / 2 : CACHE_MAX_BYTES;
    int keep = sd_opt.decay_ms && c.maplen <= CACHE_MAX_ONE;
    if (keep && limit < c.maplen)
        limit = c.maplen;
    while (ncached && (ncached == CACHE_SLOTS ||
                       cached_bytes + (keep ? c.maplen : 0) > limit)) {
        drop[ndrop++] = cache[0];           /* the oldest is not tracked: any */
        cached_bytes -= cache[0].maplen;
        cache[0] = cache[--ncached];
    }
    if (keep) {
        cache[ncached++] = c;
        cached_bytes += c.maplen;
    } else {
        drop[ndrop++] = c;
    }
    unlock_huge();
    unmap_list(drop, ndrop);
    return 0;
}

void *huge_realloc(void *p, size_t size)
{
    size_t len = (size + SD_PAGE_SIZE - 1) & ~(SD_PAGE_SIZE - 1);
    if (len < size || len > LARGE_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    sd_mutex_lock(&lock);
    struct lentry *e = lookup_locked((uintptr_t)p);
    if (!e || e->addr != e->map) {
        unlock_huge();
        errno = EINVAL;
        return NULL;
    }
    struct lentry old = *e;
    remove_locked(e);
    unlock_huge();
    /* The block is out of the table while it moves: only its owner may
     * touch it, and the owner is in this call. */
    void *m = (void *)old.map;
    int err = len == old.maplen ? 0 : os_remap((void *)old.map, old.maplen, len, &m);
    struct lentry ne = old;
    if (!err) {
        ne.map = ne.addr = (uintptr_t)m;
        ne.maplen = ne.usable = len;
    }
    sd_mutex_lock(&lock);
    if ((count + 1) * 2 > cap)
        grow_locked();              /* cannot fail below half full */
    insert_raw(table, cap, &ne);
    count++;
    mapped += ne.maplen - old.maplen;
    unlock_huge();
    if (err) {
        errno = ENOMEM;
        return NULL;
    }
    return m;
}

size_t huge_trim(void)
{
    struct cached drop[CACHE_SLOTS];
    size_t ndrop = 0;
    sd_mutex_lock(&lock);
    size_t bytes = decay_locked(0, 1, drop, &ndrop);
    unlock_huge();
    unmap_list(drop, ndrop);
    return bytes;
}

size_t huge_decay(void)
{
    if (!__atomic_load_n(&ncached_hint, __ATOMIC_RELAXED))
        return 0;
    struct cached drop[CACHE_SLOTS];
    size_t ndrop = 0;
    sd_mutex_lock(&lock);
    size_t bytes = decay_locked(os_now_ns(), 0, drop, &ndrop);
    unlock_huge();
    unmap_list(drop, ndrop);
    return bytes;
}

void huge_usage(size_t *blocks, size_t *bytes, size_t *cbytes, size_t *cmaps)
{
    sd_mutex_lock(&lock);
    if (blocks) *blocks = count;
    if (bytes) *bytes = mapped;
    if (cbytes) *cbytes = cached_bytes;
    if (cmaps) *cmaps = ncached;
    unlock_huge();
}

void huge_lock_all(void) { sd_mutex_lock(&lock); }

void huge_unlock_all(int child)
{
    if (child)
        sd_mutex_reset_child(&lock);
    else
        unlock_huge();
}
