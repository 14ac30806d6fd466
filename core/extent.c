/*
 * core/extent.c - extent arenas: chunks, tags, size bins, coalescing and
 * the decay (see extent.h for the types and their invariants).
 *
 * Locking.  One mutex per arena (XARENAS of them) guards the arena's chunk
 * list, bins, dirty list and counters, and every tag of its chunks except
 * the USED <-> CACHED exchange on a first tag, which core/large.c makes
 * with an atomic exchange and no lock.
 *  - An arena lock is a leaf: taken with no other allocator lock held, and
 *    never two at once (an extent, its neighbours and all a resize touches
 *    lie in one chunk, so in one arena).
 *  - It is held across the mmap of a new chunk (once per 64 MiB) and
 *    dropped across madvise: extents being purged are XS_BUSY meanwhile,
 *    so nothing merges with them, grows into them or allocates them.
 *  - fork: extent_lock_all() takes every arena lock in index order, after
 *    the segment locks and the huge-block lock (classes/fork.c).
 * Which arena: a thread allocates from one (core/large.c hands them out
 * in turn, as jemalloc does); a free or resize goes to the arena that
 * owns the chunk, whichever thread makes it (a cross-thread free is an
 * ordinary free).  Two threads meet on an arena lock only when more than
 * XARENAS threads allocate large blocks, or on a cross-thread free.
 */
#include "extent.h"

#include <errno.h>
#include <string.h>

#include "options.h"
#include "os.h"

#define XBINS       28          /* two per doubling of pages, 1..16384 */
#define SET_DIRTY   0
#define SET_PURGED  1
#define PURGE_BATCH 16          /* extents purged per lock drop */
#define DIRTY_FLOOR 256         /* pages (1 MiB) an arena keeps dirty
                                   beyond 1/3 of its pages in use */

uint64_t xchunk_map[XCHUNK_MAP_WORDS];

struct xarena {
    sd_mutex lock;
    struct xchunk *chunks;          /* every chunk of the arena */
    struct xnode *bins[2][XBINS];   /* [set][bin]: treap roots */
    uint32_t nonempty[2];           /* [set]: bit per non-empty bin */
    struct xnode *oldest, *newest;  /* the dirty list, by `since` */
    uint64_t next_decay;            /* ns when the oldest dirty extent
                                       decays, 0: none (relaxed reads) */
    size_t used_blocks, used_pages; /* USED and CACHED extents */
    size_t dirty_n, dirty_pages;
    size_t purged_n, purged_pages;  /* free purged extents (fresh too) */
    size_t nchunks;
    size_t mapped_pages;            /* pages of its chunks mapped */
    size_t purged_total;            /* pages purged since start */
} __attribute__((aligned(64)));

static struct xarena arenas[XARENAS] = {
    [0 ... XARENAS - 1] = { .lock = SD_MUTEX_INIT },
};

static uint64_t decay_ns(void)
{
    return (uint64_t)sd_opt.decay_ms * 1000000ull;
}

static inline struct xchunk *chunk_of(const struct xpage *x)
{
    return xchunk_at((uintptr_t)x & ~(XCHUNK_SIZE - 1));
}

static inline size_t page_index(const struct xpage *x)
{
    return (size_t)(x - chunk_of(x)->pages);
}

static inline struct xarena *arena_of(const struct xpage *x)
{
    return &arenas[chunk_of(x)->arena];
}

/* ---------------------------------------------------------------- */
/* Tags                                                              */

static void tag_clear(struct xpage *t)
{
    t->npages = 0;
    t->first = 0;
    __atomic_store_n(&t->state, XS_INSIDE, __ATOMIC_RELAXED);
}

static void tags_clear(struct xpage *x, size_t n)
{
    tag_clear(x + n - 1);
    tag_clear(x);
}

/* The last tag first: a reader that sees the first tag's state sees an
 * extent whose last tag is already right. */
static void tags_set(struct xpage *x, size_t n, unsigned state)
{
    struct xpage *l = x + n - 1;
    l->npages = (uint32_t)n;
    l->first = n == 1;
    __atomic_store_n(&l->state, (uint8_t)state, __ATOMIC_RELAXED);
    x->npages = (uint32_t)n;
    x->first = 1;
    __atomic_store_n(&x->state, (uint8_t)state, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- */
/* Bins: a treap of nodes per bin, ordered by (pages, address)       */

static inline unsigned bin_of(size_t n)
{
    if (n <= 1)
        return 0;
    unsigned k = 63u - (unsigned)__builtin_clzl(n);        /* 1..14 */
    return 2 * k - 1 + (unsigned)((n >> (k - 1)) & 1);
}

/* xpages are in address order (chunks too), so comparing them compares
 * the addresses they describe. */
static inline int key_lt(const struct xnode *a, const struct xnode *b)
{
    return a->npages < b->npages || (a->npages == b->npages && a->x < b->x);
}

static inline uint32_t prio(const struct xnode *n)
{
    return (uint32_t)(((uintptr_t)n->x * 0x9E3779B97F4A7C15ull) >> 32);
}

static void treap_split(struct xnode *t, const struct xnode *k, struct xnode **l,
                        struct xnode **r)
{
    while (t) {
        if (key_lt(t, k)) {
            *l = t;
            l = &t->right;
            t = t->right;
        } else {
            *r = t;
            r = &t->left;
            t = t->left;
        }
    }
    *l = *r = NULL;
}

static struct xnode *treap_merge(struct xnode *a, struct xnode *b)
{
    struct xnode *root = NULL, **at = &root;
    while (a && b) {
        if (prio(a) > prio(b)) {
            *at = a;
            at = &a->right;
            a = a->right;
        } else {
            *at = b;
            at = &b->left;
            b = b->left;
        }
    }
    *at = a ? a : b;
    return root;
}

static void treap_insert(struct xnode **root, struct xnode *n)
{
    struct xnode **p = root;
    while (*p && prio(*p) >= prio(n))
        p = key_lt(n, *p) ? &(*p)->left : &(*p)->right;
    treap_split(*p, n, &n->left, &n->right);
    *p = n;
}

static void treap_remove(struct xnode **root, struct xnode *n)
{
    struct xnode **p = root;
    while (*p != n) {
        SD_ASSERT(*p);
        p = key_lt(n, *p) ? &(*p)->left : &(*p)->right;
    }
    *p = treap_merge(n->left, n->right);
}

static void bin_insert(struct xarena *a, int set, struct xnode *n)
{
    unsigned b = bin_of(n->npages);
    n->left = n->right = NULL;
    treap_insert(&a->bins[set][b], n);
    a->nonempty[set] |= 1u << b;
}

static void bin_remove(struct xarena *a, int set, struct xnode *n)
{
    unsigned b = bin_of(n->npages);
    treap_remove(&a->bins[set][b], n);
    if (!a->bins[set][b])
        a->nonempty[set] &= ~(1u << b);
}

/* Address-ordered best fit: the first tag of the smallest free extent of
 * the set with at least n pages, the lowest address among equals. */
static struct xpage *bin_fit(struct xarena *a, int set, size_t n)
{
    unsigned b = bin_of(n);
    struct xnode *best = NULL;
    for (struct xnode *t = a->bins[set][b]; t;) {
        if (t->npages >= n) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    if (best)
        return best->x;
    uint32_t m = a->nonempty[set] & ~((2u << b) - 1);     /* bins above b */
    if (!m)
        return NULL;
    struct xnode *t = a->bins[set][__builtin_ctz(m)];
    while (t->left)
        t = t->left;
    return t->x;
}

/* ---------------------------------------------------------------- */
/* Free extents: nodes, the two sets, the dirty list, coalescing     */

static struct xnode *node_alloc(struct xchunk *c)
{
    struct xnode *n = c->free_nodes;
    if (n) {
        c->free_nodes = n->left;
        return n;
    }
    SD_ASSERT(c->nodes_hwm < XCHUNK_NODES);
    return &c->nodes[c->nodes_hwm++];
}

static void node_free(struct xchunk *c, struct xnode *n)
{
    n->left = c->free_nodes;
    c->free_nodes = n;
}

static void decay_update_locked(struct xarena *a)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    uint64_t next = a->oldest ? a->oldest->since + decay_ns() : 0;
    __atomic_store_n(&a->next_decay, next, __ATOMIC_RELAXED);
}

/* Take the free extent x off its set (its node goes back to the chunk). */
static void free_unlink_locked(struct xarena *a, struct xpage *x, int set)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    struct xnode *n = x->node;
    bin_remove(a, set, n);
    if (set == SET_DIRTY) {
        if (n->older)
            n->older->newer = n->newer;
        else
            a->oldest = n->newer;
        if (n->newer)
            n->newer->older = n->older;
        else
            a->newest = n->older;
        cnt_add(&a->dirty_n, -1);
        cnt_add(&a->dirty_pages, -(long)n->npages);
    } else {
        cnt_add(&a->purged_n, -1);
        cnt_add(&a->purged_pages, -(long)n->npages);
    }
    node_free(chunk_of(x), n);
    x->node = NULL;
}

/* Pages [x, x+n) become a free extent of `set`, merged with a neighbour of
 * the same set on either side.  Whatever tags they had are cleared. */
static void free_insert_locked(struct xarena *a, struct xpage *x, size_t n, int set,
                               uint64_t now)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    struct xchunk *c = chunk_of(x);
    unsigned st = set == SET_DIRTY ? XS_DIRTY : XS_PURGED;
    tags_clear(x, n);
    size_t i = page_index(x);
    if (i > XCHUNK_HEADER_PAGES) {
        struct xpage *l = &c->pages[i - 1];             /* a last tag */
        if (__atomic_load_n(&l->state, __ATOMIC_RELAXED) == st) {
            struct xpage *ls = l - (l->npages - 1);
            size_t ln = ls->npages;
            free_unlink_locked(a, ls, set);
            tags_clear(ls, ln);
            x = ls;
            n += ln;
            i -= ln;
        }
    }
    if (i + n < c->limit) {
        struct xpage *r = &c->pages[i + n];             /* a first tag */
        if (__atomic_load_n(&r->state, __ATOMIC_RELAXED) == st) {
            size_t rn = r->npages;
            free_unlink_locked(a, r, set);
            tags_clear(r, rn);
            n += rn;
        }
    }
    tags_set(x, n, st);
    struct xnode *nd = node_alloc(c);
    nd->x = x;
    nd->npages = (uint32_t)n;
    x->node = nd;
    bin_insert(a, set, nd);
    if (set == SET_DIRTY) {
        nd->since = now;
        nd->newer = NULL;
        nd->older = a->newest;
        if (a->newest)
            a->newest->newer = nd;
        else
            a->oldest = nd;
        a->newest = nd;
        cnt_add(&a->dirty_n, 1);
        cnt_add(&a->dirty_pages, (long)n);
        if (a->oldest == nd)
            decay_update_locked(a);
    } else {
        cnt_add(&a->purged_n, 1);
        cnt_add(&a->purged_pages, (long)n);
    }
}

static void dirty_bound_locked(struct xarena *a);

/* When a chunk is one purged extent again, the pages of its header that
 * tags and nodes touched are purged too (all but the first, which holds
 * the chunk's fields), and the extent gets its tags and node back: an
 * idle chunk costs one resident page.  Called after a purge, so a chunk
 * that keeps a block or two does not do it again and again. */
static void chunk_idle_locked(struct xarena *a, struct xchunk *c)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    struct xpage *x = &c->pages[XCHUNK_HEADER_PAGES];
    size_t n = c->limit - XCHUNK_HEADER_PAGES;
    if (__atomic_load_n(&x->state, __ATOMIC_RELAXED) != XS_PURGED || x->npages != n ||
        c->nodes_hwm <= 1)
        return;
    free_unlink_locked(a, x, SET_PURGED);
    c->free_nodes = NULL;
    c->nodes_hwm = 0;
    /* All of the header but the guard and the page with the chunk's own
     * fields. */
    os_purge((char *)c + SD_PAGE_SIZE,
             (XCHUNK_HEADER_PAGES - 1) * SD_PAGE_SIZE - XCHUNK_GUARD);
    free_insert_locked(a, x, n, SET_PURGED, 0);
}

/* Address space.  A chunk is 64 MiB of it, which an address-space limit
 * (RLIMIT_AS) counts whether its pages are touched or not, so that one
 * small array would cost a program a third of a 200 MiB limit.  So while
 * such a limit is set, a new
 * chunk maps only its header and the pages the request needs, rounded up
 * to CHUNK_STEP pages, and the rest of its 64 MiB is left to whatever
 * maps there; when no free extent fits, a chunk of the arena grows at its
 * end by what is needed, or by half its size if that fits, where nothing
 * else has been mapped since; when the limit is reached, the free
 * extents at the ends of chunks are unmapped for whatever needs the room
 * (extent_trim_tails).  Pages past a chunk's limit are not its own
 * (extent_page_of), and its last extent ends at the limit.  Where the
 * kernel chooses, a chunk often lands right below the libraries, whose
 * mappings inside its 64 MiB then stop its growth: so under a limit a new
 * chunk goes at PLACE_TOP and down, 64 MiB at a time, far from the
 * kernel's choices and below the segments (core/segment.c places them
 * from 3 << 45 down), and where the kernel chooses only when PLACE_TRIES
 * spots are taken.  Without a limit, chunks are mapped whole at once
 * where the kernel chooses, as address space costs nothing then. */
#define CHUNK_STEP 256          /* pages (1 MiB) */
#define PLACE_TOP (5UL << 44)
#define PLACE_TRIES 16

static uintptr_t chunk_low;     /* the lowest chunk placed ("Address space") */

/* Map `size` bytes for a new chunk under an address-space limit, 64 MiB
 * aligned ("Address space").  0 or ENOMEM. */
static int chunk_place(size_t size, void **out)
{
    uintptr_t h = __atomic_load_n(&chunk_low, __ATOMIC_RELAXED);
    if (!h)
        h = PLACE_TOP;
    for (unsigned t = 0; t < PLACE_TRIES && h > XCHUNK_SIZE; t++) {
        h -= XCHUNK_SIZE;
        int err = os_map_at((void *)h, size);
        if (!err) {
            uintptr_t low = __atomic_load_n(&chunk_low, __ATOMIC_RELAXED);
            while ((!low || h < low) &&
                   !__atomic_compare_exchange_n(&chunk_low, &low, h, 1, __ATOMIC_RELAXED,
                                                __ATOMIC_RELAXED))
                ;
            *out = (void *)h;
            return 0;
        }
        if (err != EEXIST)
            return ENOMEM;
    }
    return os_map_aligned(size, XCHUNK_SIZE, out) ? ENOMEM : 0;
}

static size_t round_step(size_t pages)
{
    return (pages + CHUNK_STEP - 1) / CHUNK_STEP * CHUNK_STEP;
}

/* A new chunk: one purged extent of every page after the header, the
 * request of `need` pages among them. */
static int chunk_new_locked(struct xarena *a, size_t need)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    size_t limit = XCHUNK_PAGES;
    int limited = os_as_limited();
    if (limited) {
        limit = round_step(XCHUNK_HEADER_PAGES + need);
        if (limit > XCHUNK_PAGES)
            limit = XCHUNK_PAGES;
    }
    void *m;
    if (limited ? chunk_place(limit * SD_PAGE_SIZE, &m)
                : os_map_aligned(limit * SD_PAGE_SIZE, XCHUNK_SIZE, &m))
        return ENOMEM;
    if (os_guard(m, XCHUNK_GUARD)) {
        os_unmap(m, limit * SD_PAGE_SIZE);
        return ENOMEM;
    }
    struct xchunk *c = xchunk_at((uintptr_t)m);
    c->magic = XCHUNK_MAGIC;
    c->arena = (uint16_t)(a - arenas);
    __atomic_store_n(&c->limit, (uint32_t)limit, __ATOMIC_RELAXED);
    c->next = a->chunks;
    a->chunks = c;
    cnt_add(&a->nchunks, 1);
    cnt_add(&a->mapped_pages, (long)limit);
    uintptr_t bit = (uintptr_t)m >> XCHUNK_SHIFT;
    __atomic_fetch_or(&xchunk_map[bit >> 6], 1ULL << (bit & 63), __ATOMIC_RELEASE);
    free_insert_locked(a, &c->pages[XCHUNK_HEADER_PAGES],
                       limit - XCHUNK_HEADER_PAGES, SET_PURGED, 0);
    return 0;
}

/* Grow a partial chunk of the arena so that a free extent of `need`
 * pages exists ("Address space").  0, or ENOMEM. */
static int chunk_grow_locked(struct xarena *a, size_t need)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    for (struct xchunk *c = a->chunks; c; c = c->next) {
        size_t limit = c->limit;
        if (limit == XCHUNK_PAGES)
            continue;
        /* the pages a free extent at the end already brings */
        struct xpage *l = &c->pages[limit - 1];
        unsigned st = __atomic_load_n(&l->state, __ATOMIC_RELAXED);
        size_t tail = st == XS_PURGED ? l->npages : 0;
        size_t min = need > tail ? need - tail : 0;
        size_t half = round_step(limit / 2 > min ? limit / 2 : min);
        size_t tries[2] = { half, round_step(min) };
        for (int t = 0; t < 2; t++) {
            size_t g = tries[t];
            if (g > XCHUNK_PAGES - limit)
                g = XCHUNK_PAGES - limit;
            if (g < min || !g)
                continue;
            char *end = (char *)c - XCHUNK_GUARD + limit * SD_PAGE_SIZE;
            if (os_map_at(end, g * SD_PAGE_SIZE))
                continue;
            __atomic_store_n(&c->limit, (uint32_t)(limit + g), __ATOMIC_RELEASE);
            cnt_add(&a->mapped_pages, (long)g);
            free_insert_locked(a, &c->pages[limit], g, SET_PURGED, 0);
            return 0;
        }
    }
    return ENOMEM;
}

size_t extent_trim_tails(void)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < XARENAS; i++) {
        struct xarena *a = &arenas[i];
        sd_mutex_lock(&a->lock);
        for (struct xchunk *c = a->chunks; c; c = c->next) {
            size_t limit = c->limit;
            if (limit <= XCHUNK_HEADER_PAGES)
                continue;
            struct xpage *l = &c->pages[limit - 1];
            unsigned st = __atomic_load_n(&l->state, __ATOMIC_RELAXED);
            if (st != XS_DIRTY && st != XS_PURGED)
                continue;
            size_t n = l->npages;
            struct xpage *x = l - (n - 1);
            free_unlink_locked(a, x, st == XS_DIRTY ? SET_DIRTY : SET_PURGED);
            tags_clear(x, n);
            __atomic_store_n(&c->limit, (uint32_t)(limit - n), __ATOMIC_RELEASE);
            cnt_add(&a->mapped_pages, -(long)n);
            os_unmap(extent_addr(x), n * SD_PAGE_SIZE);
            bytes += n * SD_PAGE_SIZE;
        }
        sd_mutex_unlock(&a->lock);
    }
    return bytes;
}

/* ---------------------------------------------------------------- */
/* Allocation, release, resize                                       */

void *extent_alloc(unsigned arena, size_t npages, size_t align_pages, int *zero, int grow)
{
    struct xarena *a = &arenas[arena % XARENAS];
    size_t need = npages + align_pages - 1;
    SD_ASSERT(need <= XCHUNK_PAGES - XCHUNK_HEADER_PAGES);
    sd_mutex_lock(&a->lock);
    int set = SET_DIRTY;                /* reuse resident memory first */
    struct xpage *x = bin_fit(a, SET_DIRTY, need);
    if (!x) {
        set = SET_PURGED;
        x = bin_fit(a, SET_PURGED, need);
        if (!x) {
            if (!grow || (chunk_grow_locked(a, need) && chunk_new_locked(a, need))) {
                sd_mutex_unlock(&a->lock);
                errno = ENOMEM;
                return NULL;
            }
            x = bin_fit(a, SET_PURGED, need);
        }
    }
    size_t m = x->npages;
    free_unlink_locked(a, x, set);
    tags_clear(x, m);
    uintptr_t addr = (uintptr_t)extent_addr(x);
    uintptr_t amask = align_pages * SD_PAGE_SIZE - 1;
    size_t front = (((addr + amask) & ~amask) - addr) / SD_PAGE_SIZE;
    struct xpage *u = x + front;
    tags_set(u, npages, XS_USED);
    cnt_add(&a->used_blocks, 1);
    cnt_add(&a->used_pages, (long)npages);
    uint64_t now = set == SET_DIRTY ? os_now_ns() : 0;
    if (front)
        free_insert_locked(a, x, front, set, now);
    if (m > front + npages)
        free_insert_locked(a, u + npages, m - front - npages, set, now);
    sd_mutex_unlock(&a->lock);
    *zero = set == SET_PURGED;
    return extent_addr(u);
}

/* Purge pages [x, x+n) now (decay 0): the lock is dropped meanwhile. */
static void release_purged_locked(struct xarena *a, struct xpage *x, size_t n)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    tags_set(x, n, XS_BUSY);
    sd_mutex_unlock(&a->lock);
    os_purge(extent_addr(x), n * SD_PAGE_SIZE);
    sd_mutex_lock(&a->lock);
    cnt_add(&a->purged_total, (long)n);
    free_insert_locked(a, x, n, SET_PURGED, 0);
    chunk_idle_locked(a, chunk_of(x));
}

void extent_release(struct xpage *x)
{
    struct xarena *a = arena_of(x);
    sd_mutex_lock(&a->lock);
    SD_ASSERT(__atomic_load_n(&x->state, __ATOMIC_RELAXED) == XS_CACHED);
    size_t n = x->npages;
    cnt_add(&a->used_blocks, -1);
    cnt_add(&a->used_pages, -(long)n);
    if (sd_opt.decay_ms) {
        free_insert_locked(a, x, n, SET_DIRTY, os_now_ns());
        dirty_bound_locked(a);
    } else {
        release_purged_locked(a, x, n);
    }
    sd_mutex_unlock(&a->lock);
}

int extent_resize(struct xpage *x, size_t npages)
{
    struct xarena *a = arena_of(x);
    int ret = 0;
    sd_mutex_lock(&a->lock);
    size_t m = x->npages;
    if (npages < m) {
        tag_clear(x + m - 1);
        tags_set(x, npages, XS_USED);
        cnt_add(&a->used_pages, -(long)(m - npages));
        if (sd_opt.decay_ms) {
            free_insert_locked(a, x + npages, m - npages, SET_DIRTY, os_now_ns());
            dirty_bound_locked(a);
        } else {
            release_purged_locked(a, x + npages, m - npages);
        }
    } else if (npages > m) {
        size_t i = page_index(x);
        struct xpage *r = i + m < chunk_of(x)->limit ? x + m : NULL;
        unsigned st = r ? __atomic_load_n(&r->state, __ATOMIC_RELAXED) : XS_INSIDE;
        if ((st == XS_DIRTY || st == XS_PURGED) && r->npages >= npages - m) {
            int set = st == XS_DIRTY ? SET_DIRTY : SET_PURGED;
            size_t rn = r->npages;
            free_unlink_locked(a, r, set);
            tags_clear(r, rn);
            if (m > 1)
                tag_clear(x + m - 1);
            tags_set(x, npages, XS_USED);
            cnt_add(&a->used_pages, (long)(npages - m));
            if (rn > npages - m)
                free_insert_locked(a, x + npages, rn - (npages - m), set,
                                   set == SET_DIRTY ? os_now_ns() : 0);
        } else {
            ret = -1;
        }
    }
    sd_mutex_unlock(&a->lock);
    return ret;
}

/* ---------------------------------------------------------------- */
/* The decay: dirty extents older than the decay are purged          */

/* Purge the dirty extents that became dirty before `before` ns, and the
 * oldest others while more than `keep` pages are dirty, except the newest
 * (a program that frees and allocates one big buffer in a loop keeps
 * reusing it).  Called and returns with the lock held; drops it around
 * each batch's madvise. */
static size_t purge_locked(struct xarena *a, uint64_t before, size_t keep)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    size_t pages = 0;
    struct xpage *batch[PURGE_BATCH];
    for (;;) {
        unsigned k = 0;
        while (k < PURGE_BATCH && a->oldest &&
               (a->oldest->since < before ||
                (a->dirty_pages > keep && a->oldest != a->newest))) {
            struct xpage *x = a->oldest->x;
            size_t n = x->npages;
            free_unlink_locked(a, x, SET_DIRTY);
            tags_set(x, n, XS_BUSY);
            batch[k++] = x;
        }
        decay_update_locked(a);
        if (!k)
            break;
        sd_mutex_unlock(&a->lock);
        struct os_range r[PURGE_BATCH];
        for (unsigned j = 0; j < k; j++)
            r[j] = (struct os_range){ extent_addr(batch[j]), batch[j]->npages * SD_PAGE_SIZE };
        os_purge_batch(r, k);           /* one TLB flush for the batch */
        sd_mutex_lock(&a->lock);
        for (unsigned j = 0; j < k; j++) {
            size_t n = batch[j]->npages;
            pages += n;
            cnt_add(&a->purged_total, (long)n);
            free_insert_locked(a, batch[j], n, SET_PURGED, 0);
            chunk_idle_locked(a, chunk_of(batch[j]));
        }
        if (k < PURGE_BATCH)
            break;
    }
    return pages * SD_PAGE_SIZE;
}

static size_t arena_purge(struct xarena *a, uint64_t before)
{
    sd_mutex_lock(&a->lock);
    size_t bytes = purge_locked(a, before, SIZE_MAX);
    sd_mutex_unlock(&a->lock);
    return bytes;
}

/* The dirty bound: 1/3 of the pages in use plus DIRTY_FLOOR, and the
 * newest dirty extent whatever its size.  Peak RSS stays near the live
 * bytes, and a program that frees everything keeps little resident, even
 * before the decay (jemalloc's decay curve does the same at its epochs).
 * Why 1/3: with large blocks the dirty extents are most of what RSS
 * holds above the live bytes, and each step down trades peak RSS for
 * page faults; at 1/3 the peak stays at jemalloc's with fewer faults,
 * at 1/2 it is above it (docs/benchmarks.md, large-mixed). */
static void dirty_bound_locked(struct xarena *a)
{
    SD_ASSERT(sd_mutex_held(&a->lock));
    size_t keep = a->used_pages / 3 + DIRTY_FLOOR;
    if (a->dirty_pages > keep)
        purge_locked(a, 0, keep);
}

size_t extent_purge(uint64_t before)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < XARENAS; i++)
        if (__atomic_load_n(&arenas[i].next_decay, __ATOMIC_RELAXED))
            bytes += arena_purge(&arenas[i], before);
    return bytes;
}

size_t extent_purge_arena(unsigned arena)
{
    return arena_purge(&arenas[arena % XARENAS], UINT64_MAX);
}

void extent_decay(uint64_t now)
{
    uint64_t d = decay_ns();
    for (unsigned i = 0; i < XARENAS; i++) {
        uint64_t next = __atomic_load_n(&arenas[i].next_decay, __ATOMIC_RELAXED);
        if (next && now >= next)
            arena_purge(&arenas[i], now - d);
    }
}

/* ---------------------------------------------------------------- */
/* Statistics and fork                                               */

void extent_get_stats(struct extent_stats *out)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < XARENAS; i++) {
        const struct xarena *a = &arenas[i];
        out->used_blocks += __atomic_load_n(&a->used_blocks, __ATOMIC_RELAXED);
        out->used_bytes += __atomic_load_n(&a->used_pages, __ATOMIC_RELAXED) * SD_PAGE_SIZE;
        out->dirty_extents += __atomic_load_n(&a->dirty_n, __ATOMIC_RELAXED);
        out->dirty_bytes += __atomic_load_n(&a->dirty_pages, __ATOMIC_RELAXED) * SD_PAGE_SIZE;
        out->purged_extents += __atomic_load_n(&a->purged_n, __ATOMIC_RELAXED);
        out->purged_bytes += __atomic_load_n(&a->purged_pages, __ATOMIC_RELAXED) * SD_PAGE_SIZE;
        out->chunks += __atomic_load_n(&a->nchunks, __ATOMIC_RELAXED);
        out->chunk_bytes += __atomic_load_n(&a->mapped_pages, __ATOMIC_RELAXED) * SD_PAGE_SIZE;
        out->purged_total += __atomic_load_n(&a->purged_total, __ATOMIC_RELAXED) * SD_PAGE_SIZE;
    }
}

void extent_lock_all(void)
{
    for (unsigned i = 0; i < XARENAS; i++)
        sd_mutex_lock(&arenas[i].lock);
}

void extent_unlock_all(int child)
{
    for (unsigned i = XARENAS; i-- > 0;) {
        if (child)
            sd_mutex_reset_child(&arenas[i].lock);
        else
            sd_mutex_unlock(&arenas[i].lock);
    }
}
