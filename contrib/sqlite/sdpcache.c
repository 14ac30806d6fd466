/*
 * contrib/sqlite/sdpcache.c - sqlite3_pcache_methods2 on slabdefrag typed
 * caches, with get()/kick() so that the shrinker can empty sparse slabs.
 *
 * Types and invariants:
 *   struct sdp_size   one page geometry (szPage, szExtra): its pool of
 *                     slabdefrag caches, created on demand and kept until
 *                     the process ends (a cache id is never reused).
 *   struct sdp_slabs  one slabdefrag cache of a geometry; users == SQLite
 *                     cache instances allocating from it.  A pool cache
 *                     has at most one user (only), the shared cache any
 *                     number.
 *   struct sdp_cache  one SQLite cache instance (xCreate): a hash of its
 *                     pages by key, an LRU of its unpinned pages, a lock,
 *                     and the pool cache its pages come from.
 *                     npage == pages in the hash; nlru == pages on the LRU
 *                     == unpinned pages in the hash.
 *   struct sdp_page   one slab object: this header, then the page buffer
 *                     (szPage bytes), then SQLite's extra (szExtra bytes).
 *                     owner != NULL  <=>  the page is in owner's hash.
 *
 * Pinning follows the pcache2 contract, not a count: xFetch pins, and one
 * xUnpin unpins however many xFetch calls came before.
 *
 * Moves, and why this module drops instead.  SQLite keeps pointers into a
 * page's own object inside its extra bytes (pcache.c's PgHdr points at the
 * sqlite3_pcache_page, the buffer and the rest of the extra; btree's
 * MemPage points into the buffer), and re-uses them on the next xFetch
 * without re-deriving them unless the first 8 bytes of the extra are zero,
 * which makes the pager re-read the page.  A copied page would therefore
 * send SQLite into the freed original.  What the contract does allow is
 * eviction: "the page cache implementation may choose to evict unpinned
 * pages at any time", and SQLite unpins only clean pages (a dirty page
 * stays pinned until it is written), so an unpinned page of a purgeable
 * cache can always be dropped and is re-read from the file when needed.
 * Non-purgeable caches (in-memory databases) never hold unpinned pages
 * (sqlite3.h: xUnpin is called on them only to discard), so nothing of
 * theirs is ever taken.
 *
 *   get():  slab lock held, so no allocator call and no waiting: trylock
 *           the pages' cache (a pool cache's one user, or each page's
 *           owner on the shared cache); an unpinned page of a purgeable
 *           cache is taken out of the hash and the LRU (owner set to
 *           NULL); any other page is set to NULL in objs.
 *   kick(): no allocator lock: every taken page is freed.
 *
 * One slabdefrag cache per instance.  Each instance takes a cache of
 * its geometry's pool that no other instance uses, so that the pages of
 * one connection share slabs only with each other: when a connection
 * closes, or its cache is cleared, its slabs empty whole and go back to
 * the OS, instead of leaving every slab of a shared cache holding a few
 * pages of the connections that stay (slabs the shrinker cannot vacate
 * once they are more than a quarter full).  A cache whose instance is
 * destroyed goes back to the pool for the next one.  Past SDP_POOL_MAX
 * caches in a geometry (more instances alive at once than that), new
 * instances share the geometry's one shared cache.
 *
 * Constructed state.  get() may be handed an object whose instance is
 * still filling its header in, or has begun to free it.  On a pool
 * cache, everything an instance does to its objects, from sd_cache_alloc
 * to sd_cache_free, happens under its lock: once get() holds that lock,
 * every allocated object of the slab is a page in the hash, and get()
 * needs nothing from an object that it has not locked.  So pool caches
 * have no constructor, and their objects pack 15 to a 64 KiB slab (a
 * constructor would add the free pointer's two words to each, for 14).
 * On the shared cache get() has to read a page's owner before it can
 * lock anything: its constructor zeroes the header, and a page is freed
 * with owner NULL, so that an object not in a hash reads as ownerless.
 *
 * Lock order: sdp_cache.lock, then the allocator's locks (the normal path
 * allocates and frees with its cache locked).  get() runs inside the
 * allocator's slab lock and only ever trylocks a cache, so the reverse
 * order never waits.  A page's cache outlives the page: xDestroy frees the
 * pages (each free waits while its slab is in get()) before the cache, so
 * get() may follow a page's owner pointer to the cache's lock.
 *
 * Locks: sizes_lock guards the sizes table and the pools' users counts
 * (never taken by get()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slabdefrag.h>

#include "sdpcache.h"
#include "sdpcache_internal.h"

#define SDP_API __attribute__((visibility("default")))

struct sdp_cache;

struct sdp_page {
    sqlite3_pcache_page base;        /* pBuf, pExtra: what SQLite sees */
    struct sdp_cache *owner;         /* the cache whose hash holds it, or NULL */
    struct sdp_page  *hnext;         /* hash chain */
    struct sdp_page  *lru_prev, *lru_next;  /* on the LRU while unpinned */
    unsigned          key;           /* page number */
    int               pinned;        /* 1 between xFetch and xUnpin */
};

/* The buffer starts here, 16-byte aligned, in every page object. */
#define PAGE_HDR 64
_Static_assert(sizeof(struct sdp_page) <= PAGE_HDR, "page header too big");

/* Caches in one geometry's pool: instances alive at once beyond this share.
 * The allocator has 952 typed cache ids, never reused: all geometries
 * together make at most SDP_POOL_TOTAL pool caches. */
#define SDP_POOL_MAX 64
#define SDP_POOL_TOTAL 128
static unsigned pool_max = SDP_POOL_MAX;   /* sdp_pool_limit() */
static unsigned pool_total;                /* pool caches made (sizes_lock) */

struct sdp_slabs {
    sd_cache *cache;                 /* objects of PAGE_HDR + szpage + szextra */
    unsigned  users;                 /* instances allocating from it */
    struct sdp_cache *only;          /* a pool cache's user, or NULL (atomic) */
    int       shared;                /* 1: the shared cache (constructor, owners) */
};

struct sdp_size {
    int       szpage, szextra;       /* bytes, as SQLite asked; szpage 0: unused */
    size_t    objsz;                 /* bytes of one page object */
    unsigned  npool;                 /* caches created: pool[0..npool) (atomic) */
    struct sdp_slabs pool[SDP_POOL_MAX];   /* no constructor, one user each */
    struct sdp_slabs shared;         /* with a constructor; once the pool is full */
};

/* ------------------------------------------------------ instance lock */

/* An instance's lock: one byte, taken with one exchange and released with
 * a store.  SQLite calls an instance from one thread at a time (its
 * connection's or shared cache's mutex is held: pcache1 takes no lock at
 * all), and get() only tries it, so it is taken on every xFetch and
 * xUnpin and almost never waited for; a pthread mutex would cost two
 * calls and two atomic instructions per call instead.  The one wait is
 * behind a get() that has it (no allocation, no blocking): spin, then
 * yield. */
struct sdp_lock {
    unsigned char taken;             /* 1: held */
};

static __attribute__((noinline, cold)) void lock_wait(struct sdp_lock *l)
{
    for (unsigned spins = 0;; spins++) {
        if (!__atomic_load_n(&l->taken, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(&l->taken, 1, __ATOMIC_ACQUIRE))
            return;
        if (spins < 100)
            __builtin_ia32_pause();
        else
            sched_yield();
    }
}

static inline void lock_take(struct sdp_lock *l)
{
    if (__builtin_expect(__atomic_exchange_n(&l->taken, 1, __ATOMIC_ACQUIRE), 0))
        lock_wait(l);
}

/* 1: taken; 0: held by someone else (never waits). */
static inline int lock_try(struct sdp_lock *l)
{
    return !__atomic_load_n(&l->taken, __ATOMIC_RELAXED) &&
           !__atomic_exchange_n(&l->taken, 1, __ATOMIC_ACQUIRE);
}

static inline void lock_release(struct sdp_lock *l)
{
    __atomic_store_n(&l->taken, 0, __ATOMIC_RELEASE);
}

struct sdp_cache {
    struct sdp_lock  lock;
    struct sdp_size *size;
    struct sdp_slabs *slabs;         /* the cache its pages come from */
    int              purgeable;      /* xCreate's bPurgeable */
    unsigned         nmax;           /* xCachesize: pages wanted at most */
    unsigned         n90;            /* 90% of nmax: the pinned limit for createFlag 1 */
    unsigned         npage;          /* pages in the hash */
    unsigned         nlru;           /* unpinned pages (on the LRU) */
    unsigned         maxkey;         /* no page in the hash has a larger key */
    unsigned         nbucket;        /* hash buckets, a power of two */
    struct sdp_page **bucket;
    struct sdp_page  lru;            /* sentinel: lru_next newest, lru_prev oldest */
};

#define MAX_SIZES 32
static pthread_mutex_t sizes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_size sizes[MAX_SIZES];

/* The counters of struct sd_sqlite_pcache_stats, updated atomically. */
static struct sd_sqlite_pcache_stats stats;
#define STAT_ADD(f, n) __atomic_fetch_add(&stats.f, (unsigned long)(n), __ATOMIC_RELAXED)
#define STAT_SUB(f, n) __atomic_fetch_sub(&stats.f, (unsigned long)(n), __ATOMIC_RELAXED)

/* ------------------------------------------------------ hash and LRU */

static struct sdp_page **bucket_of(struct sdp_cache *c, unsigned key)
{
    return &c->bucket[(key * 2654435761u) & (c->nbucket - 1)];
}

static struct sdp_page *lookup_locked(struct sdp_cache *c, unsigned key)
{
    struct sdp_page *p = *bucket_of(c, key);
    while (p && p->key != key)
        p = p->hnext;
    return p;
}

static void hash_insert_locked(struct sdp_cache *c, struct sdp_page *p)
{
    struct sdp_page **b = bucket_of(c, p->key);
    p->hnext = *b;
    *b = p;
    if (p->key > c->maxkey)
        c->maxkey = p->key;
}

static void hash_remove_locked(struct sdp_cache *c, struct sdp_page *p)
{
    struct sdp_page **pp = bucket_of(c, p->key);
    while (*pp != p)
        pp = &(*pp)->hnext;
    *pp = p->hnext;
}

/* Double the buckets when pages outnumber them; on ENOMEM chains grow. */
static void hash_grow_locked(struct sdp_cache *c)
{
    unsigned n = c->nbucket * 2;
    struct sdp_page **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return;
    struct sdp_page **old = c->bucket;
    unsigned oldn = c->nbucket;
    c->bucket = nb;
    c->nbucket = n;
    for (unsigned i = 0; i < oldn; i++) {
        struct sdp_page *p = old[i], *next;
        for (; p; p = next) {
            next = p->hnext;
            hash_insert_locked(c, p);
        }
    }
    free(old);
}

static void lru_push_locked(struct sdp_cache *c, struct sdp_page *p)
{
    p->lru_prev = &c->lru;
    p->lru_next = c->lru.lru_next;
    c->lru.lru_next->lru_prev = p;
    c->lru.lru_next = p;
    c->nlru++;
}

static void lru_remove_locked(struct sdp_cache *c, struct sdp_page *p)
{
    p->lru_prev->lru_next = p->lru_next;
    p->lru_next->lru_prev = p->lru_prev;
    p->lru_prev = p->lru_next = NULL;
    c->nlru--;
}

/* Take p out of c entirely (hash, LRU, counts); the object stays allocated. */
static void page_unlink_locked(struct sdp_cache *c, struct sdp_page *p)
{
    hash_remove_locked(c, p);
    if (!p->pinned)
        lru_remove_locked(c, p);
    c->npage--;
    STAT_SUB(pages, 1);
}

static void page_free_locked(struct sdp_cache *c, struct sdp_page *p)
{
    page_unlink_locked(c, p);
    /* NULL owner is the constructed state get() skips. */
    __atomic_store_n(&p->owner, NULL, __ATOMIC_RELEASE);
    sd_cache_free(c->slabs->cache, p);
}

/* Drop the oldest unpinned pages until at most `limit` pages remain. */
static void evict_locked(struct sdp_cache *c, unsigned limit)
{
    while (c->npage > limit && c->nlru)
        page_free_locked(c, c->lru.lru_prev);
}

/* ----------------------------------------------------- get() and kick() */

/* The sdp_slabs of slabdefrag cache s, or NULL.  Entries are filled in
 * before their cache allocates anything, so no lock is needed. */
static struct sdp_slabs *slabs_of(const sd_cache *s)
{
    for (int i = 0; i < MAX_SIZES; i++) {
        struct sdp_size *z = &sizes[i];
        if (!__atomic_load_n(&z->szpage, __ATOMIC_ACQUIRE))
            break;
        if (__atomic_load_n(&z->shared.cache, __ATOMIC_ACQUIRE) == s)
            return &z->shared;
        unsigned n = __atomic_load_n(&z->npool, __ATOMIC_ACQUIRE);
        for (unsigned k = 0; k < n; k++)
            if (z->pool[k].cache == s)
                return &z->pool[k];
    }
    return NULL;
}

/* Take page p of c (locked by the caller) if it may be dropped: 1 if
 * taken (out of the hash and the LRU, owner NULL), 0 if it stays. */
static int page_take_locked(struct sdp_cache *c, struct sdp_page *p)
{
    if (p->owner != c)                  /* being built or freed (shared cache) */
        return 0;
    if (!c->purgeable) {                /* an in-memory database's page */
        STAT_ADD(get_kept, 1);
        return 0;
    }
    if (p->pinned) {
        STAT_ADD(get_pinned, 1);
        return 0;
    }
    page_unlink_locked(c, p);
    __atomic_store_n(&p->owner, NULL, __ATOMIC_RELEASE);
    STAT_ADD(get_taken, 1);
    return 1;
}

/* get() on the shared cache: each page's owner, trylocked in turn. */
static void page_get_shared(int nr, void **objs)
{
    for (int i = 0; i < nr; i++) {
        struct sdp_page *p = objs[i];
        struct sdp_cache *c = __atomic_load_n(&p->owner, __ATOMIC_ACQUIRE);
        if (!c) {                       /* being built or being freed */
            objs[i] = NULL;
        } else if (!lock_try(&c->lock)) {
            STAT_ADD(get_busy, 1);
            objs[i] = NULL;
        } else {
            if (!page_take_locked(c, p))
                objs[i] = NULL;
            lock_release(&c->lock);
        }
    }
}

/* Called with the slab lock held; must not allocate, free or wait. */
static void *page_get(sd_cache *s, int nr, void **objs)
{
    STAT_ADD(get_objects, nr);
    struct sdp_slabs *b = slabs_of(s);
    if (b && b->shared) {
        page_get_shared(nr, objs);
        return NULL;
    }
    /* A pool cache: its one user holds every object of the slab (their
     * frees wait for this get(), so the user cannot go meanwhile). */
    struct sdp_cache *c = b ? __atomic_load_n(&b->only, __ATOMIC_ACQUIRE) : NULL;
    int locked = c && lock_try(&c->lock);
    if (c && !locked)
        STAT_ADD(get_busy, nr);
    for (int i = 0; i < nr; i++)
        if (!locked || !page_take_locked(c, objs[i]))
            objs[i] = NULL;
    if (locked)
        lock_release(&c->lock);
    return NULL;
}

/* Called with no allocator lock held: free every page get() took. */
static void page_kick(sd_cache *s, int nr, void **objs, void *private_data)
{
    (void)private_data;
    for (int i = 0; i < nr; i++) {
        if (!objs[i])
            continue;
        sd_cache_free(s, objs[i]);
        STAT_ADD(kick_dropped, 1);
    }
}

static const struct sd_cache_ops page_ops = {
    .get = page_get,
    .kick = page_kick,
};

/* The constructed state of a page object of the shared cache: no owner. */
static void page_ctor(void *obj)
{
    memset(obj, 0, sizeof(struct sdp_page));
}

/* The geometry's entry (its pool possibly empty); NULL if the table is
 * full.  Called with sizes_lock held. */
static struct sdp_size *size_find_locked(int szpage, int szextra)
{
    for (int i = 0; i < MAX_SIZES; i++) {
        struct sdp_size *z = &sizes[i];
        if (!z->szpage) {
            z->szextra = szextra;
            z->objsz = PAGE_HDR + (size_t)szpage + (((size_t)szextra + 7) & ~(size_t)7);
            __atomic_store_n(&z->szpage, szpage, __ATOMIC_RELEASE);   /* slabs_of */
            return z;
        }
        if (z->szpage == szpage && z->szextra == szextra)
            return z;
    }
    fprintf(stderr, "sdsqlite: more than %d page geometries; %d+%d refused\n",
            MAX_SIZES, szpage, szextra);
    return NULL;
}

/* The cache new instance c of z allocates from: a pool cache nobody
 * uses, else a new pool cache, else the shared cache (made on first
 * need).  NULL if there is none to be had.  Called with sizes_lock held. */
static struct sdp_slabs *slabs_take_locked(struct sdp_size *z, struct sdp_cache *c)
{
    char name[48];
    struct sdp_slabs *b = NULL;
    for (unsigned i = 0; i < z->npool && !b; i++)
        if (!z->pool[i].users)
            b = &z->pool[i];
    if (!b && z->npool < pool_max && pool_total < SDP_POOL_TOTAL) {
        snprintf(name, sizeof(name), "sqlite-page-%d+%d#%u", z->szpage, z->szextra,
                 z->npool);
        sd_cache *sc = sd_cache_create(name, z->objsz, 16, SD_NO_MERGE, NULL, &page_ops);
        if (sc) {
            b = &z->pool[z->npool];
            b->cache = sc;
            pool_total++;
            __atomic_store_n(&z->npool, z->npool + 1, __ATOMIC_RELEASE);
        }
    }
    if (b) {
        b->users = 1;
        __atomic_store_n(&b->only, c, __ATOMIC_RELEASE);
        return b;
    }
    b = &z->shared;
    if (!b->cache) {
        snprintf(name, sizeof(name), "sqlite-page-%d+%d-shared", z->szpage, z->szextra);
        sd_cache *sc = sd_cache_create(name, z->objsz, 16, SD_NO_MERGE, page_ctor,
                                       &page_ops);
        if (!sc) {
            fprintf(stderr, "sdsqlite: sd_cache_create(%s): %s\n", name, strerror(errno));
            return NULL;
        }
        b->shared = 1;
        __atomic_store_n(&b->cache, sc, __ATOMIC_RELEASE);
    }
    b->users++;
    return b;
}

/* An instance allocates from b no more (its pages are freed).  Called
 * with sizes_lock held. */
static void slabs_put_locked(struct sdp_slabs *b)
{
    b->users--;
    if (!b->shared)
        __atomic_store_n(&b->only, NULL, __ATOMIC_RELEASE);
}

/* ------------------------------------------------- the pcache2 methods */

static int sdp_init(void *arg)
{
    (void)arg;
    return SQLITE_OK;
}

static void sdp_shutdown(void *arg)
{
    (void)arg;
}

static sqlite3_pcache *sdp_create(int szpage, int szextra, int purgeable)
{
    if (szpage <= 0 || szextra < 8 || szextra > 1024) {
        fprintf(stderr, "sdsqlite: xCreate: bad page geometry %d+%d\n",
                szpage, szextra);
        return NULL;
    }
    struct sdp_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->nbucket = 64;
    c->bucket = calloc(c->nbucket, sizeof(*c->bucket));
    if (!c->bucket) {
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&sizes_lock);
    struct sdp_size *z = size_find_locked(szpage, szextra);
    struct sdp_slabs *b = z ? slabs_take_locked(z, c) : NULL;
    pthread_mutex_unlock(&sizes_lock);
    if (!b) {
        free(c->bucket);
        free(c);
        return NULL;
    }
    c->size = z;
    c->slabs = b;
    c->purgeable = purgeable != 0;
    c->nmax = 100;
    c->n90 = 90;
    c->lru.lru_next = c->lru.lru_prev = &c->lru;
    STAT_ADD(caches, 1);
    return (sqlite3_pcache *)c;
}

static void sdp_cachesize(sqlite3_pcache *pc, int n)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    lock_take(&c->lock);
    c->nmax = n > 0 ? (unsigned)n : 0;
    c->n90 = (unsigned)((uint64_t)c->nmax * 9 / 10);
    if (c->purgeable)
        evict_locked(c, c->nmax);
    lock_release(&c->lock);
}

static int sdp_pagecount(sqlite3_pcache *pc)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    lock_take(&c->lock);
    int n = (int)c->npage;
    lock_release(&c->lock);
    return n;
}

/* A page for `key` when the cache has none: the LRU's oldest page when a
 * purgeable cache is full, else a new object; NULL if createFlag 1 finds
 * too many pages pinned (SQLite then spills and asks with 2). */
static struct sdp_page *page_new_locked(struct sdp_cache *c, unsigned key,
                                        int create)
{
    struct sdp_page *p = NULL;
    if (c->purgeable) {
        if (create == 1 && c->npage - c->nlru >= c->n90)
            return NULL;
        if (c->npage >= c->nmax && c->nlru) {
            p = c->lru.lru_prev;
            page_unlink_locked(c, p);
            STAT_ADD(pages_recycled, 1);
        }
    }
    if (!p) {
        p = sd_cache_alloc(c->slabs->cache);
        if (!p)
            return NULL;
        p->base.pBuf = (char *)p + PAGE_HDR;
        p->base.pExtra = (char *)p->base.pBuf + c->size->szpage;
        STAT_ADD(pages_created, 1);
    }
    if (c->npage >= c->nbucket)
        hash_grow_locked(c);
    p->key = key;
    p->pinned = 1;
    p->lru_prev = p->lru_next = NULL;
    /* pcache.c reads a page whose first 8 extra bytes are zero as new. */
    memset(p->base.pExtra, 0, 8);
    hash_insert_locked(c, p);
    c->npage++;
    STAT_ADD(pages, 1);
    __atomic_store_n(&p->owner, c, __ATOMIC_RELEASE);
    return p;
}

static sqlite3_pcache_page *sdp_fetch(sqlite3_pcache *pc, unsigned key,
                                      int create)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    lock_take(&c->lock);
    struct sdp_page *p = lookup_locked(c, key);
    if (p) {
        if (!p->pinned) {
            lru_remove_locked(c, p);
            p->pinned = 1;
        }
    } else if (create) {
        p = page_new_locked(c, key, create);
    }
    lock_release(&c->lock);
    return p ? &p->base : NULL;
}

static void sdp_unpin(sqlite3_pcache *pc, sqlite3_pcache_page *pg, int discard)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    struct sdp_page *p = (struct sdp_page *)pg;
    lock_take(&c->lock);
    if (discard) {
        page_free_locked(c, p);
    } else if (p->pinned) {
        p->pinned = 0;
        lru_push_locked(c, p);
        if (c->purgeable)
            evict_locked(c, c->nmax);
    }
    lock_release(&c->lock);
}

static void sdp_rekey(sqlite3_pcache *pc, sqlite3_pcache_page *pg,
                      unsigned oldkey, unsigned newkey)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    struct sdp_page *p = (struct sdp_page *)pg;
    (void)oldkey;
    lock_take(&c->lock);
    struct sdp_page *other = lookup_locked(c, newkey);
    if (other && other != p)
        page_free_locked(c, other);
    hash_remove_locked(c, p);
    p->key = newkey;
    hash_insert_locked(c, p);
    lock_release(&c->lock);
}

/* Free every page whose key is at least `limit`.  As pcache1 does: nothing
 * to do past maxkey; when fewer keys than buckets are in range, each is
 * looked up; else every chain is walked.  SQLite truncates at each
 * transaction's end, usually with nothing past the limit. */
static void truncate_locked(struct sdp_cache *c, unsigned limit)
{
    if (!c->npage || limit > c->maxkey) {
        if (!c->npage)
            c->maxkey = 0;
        return;
    }
    if (c->maxkey - limit < c->nbucket) {
        for (unsigned k = limit;; k++) {
            struct sdp_page *p = lookup_locked(c, k);
            if (p)
                page_free_locked(c, p);
            if (k == c->maxkey)
                break;
        }
    } else {
        for (unsigned i = 0; i < c->nbucket; i++) {
            struct sdp_page *p = c->bucket[i], *next;
            for (; p; p = next) {
                next = p->hnext;
                if (p->key >= limit)
                    page_free_locked(c, p);
            }
        }
    }
    c->maxkey = limit ? limit - 1 : 0;
}

static void sdp_truncate(sqlite3_pcache *pc, unsigned limit)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    lock_take(&c->lock);
    truncate_locked(c, limit);
    lock_release(&c->lock);
}

static void sdp_destroy(sqlite3_pcache *pc)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    lock_take(&c->lock);
    truncate_locked(c, 0);
    lock_release(&c->lock);
    pthread_mutex_lock(&sizes_lock);
    slabs_put_locked(c->slabs);
    pthread_mutex_unlock(&sizes_lock);
    free(c->bucket);
    free(c);
    STAT_SUB(caches, 1);
}

static void sdp_shrink(sqlite3_pcache *pc)
{
    struct sdp_cache *c = (struct sdp_cache *)pc;
    lock_take(&c->lock);
    if (c->purgeable)
        evict_locked(c, 0);
    lock_release(&c->lock);
}

static const sqlite3_pcache_methods2 sdp_methods = {
    .iVersion = 1,
    .pArg = NULL,
    .xInit = sdp_init,
    .xShutdown = sdp_shutdown,
    .xCreate = sdp_create,
    .xCachesize = sdp_cachesize,
    .xPagecount = sdp_pagecount,
    .xFetch = sdp_fetch,
    .xUnpin = sdp_unpin,
    .xRekey = sdp_rekey,
    .xTruncate = sdp_truncate,
    .xDestroy = sdp_destroy,
    .xShrink = sdp_shrink,
};

/* ------------------------------------------------------------- public */

SDP_API int sd_sqlite_pcache_install(void)
{
    return sqlite3_config(SQLITE_CONFIG_PCACHE2, &sdp_methods);
}

/* (The copy below reads the counters as an array.) */
_Static_assert(sizeof(struct sd_sqlite_pcache_stats) % sizeof(unsigned long) == 0,
               "stats must be unsigned longs only");

SDP_API void sd_sqlite_pcache_get_stats(struct sd_sqlite_pcache_stats *out)
{
    unsigned long *dst = (unsigned long *)out;
    const unsigned long *src = (const unsigned long *)&stats;
    for (size_t i = 0; i < sizeof(stats) / sizeof(unsigned long); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

void sdp_pool_limit(unsigned n)
{
    pthread_mutex_lock(&sizes_lock);
    pool_max = n < SDP_POOL_MAX ? n : SDP_POOL_MAX;
    pthread_mutex_unlock(&sizes_lock);
}

int sdp_methods_are_ours(const sqlite3_pcache_methods2 *m)
{
    return m->xInit == sdp_init;
}
