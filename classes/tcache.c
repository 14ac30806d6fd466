/*
 * classes/tcache.c - thread caches: set-up, exit, the registry, and the
 * get() guard.
 *
 * A thread's cache is TLS (initial-exec).  It is set up on the thread's
 * first slow path; a pthread key's destructor gives its active slabs back
 * at thread exit.  Until set-up completes (pthread_setspecific may itself
 * allocate) and after exit, the thread allocates through the direct,
 * locked path, so blocks it allocated can always be freed by others.
 *
 * The registry lock is a leaf (see classes/cache.c).
 */
#include "tcache.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "alloc.h"
#include "os.h"
#include "segment.h"

__thread struct tcache sd_tc __attribute__((tls_model("initial-exec"))) = {
    .token = 1,
};

static sd_mutex registry_lock = SD_MUTEX_INIT;
static struct sd_list registry = { &registry, &registry };
static pthread_key_t exit_key;
static int key_state;               /* 0 none, 1 creating, 2 ready */

uint32_t sd_self_tid(void)
{
    uint32_t t = sd_tc.tid;
    if (unlikely(!t))
        t = sd_tc.tid = os_gettid();
    return t;
}

void sd_spin_self_deadlock(const sd_spin *l)
{
    if (sd_tc.in_get)
        sd_fatal("get() of cache %s called the allocator (it runs with the "
                 "slab locked and must not allocate or free)",
                 sd_tc.get_cache ? sd_tc.get_cache->name : "?");
    sd_fatal("slab lock %p taken twice by thread %u", (const void *)l,
             sd_self_tid());
}

static size_t ubins_bytes(void)
{
    size_t bytes = (SD_MAX_CACHES - SD_NCLASSES) * sizeof(struct tbin);
    return (bytes + SD_PAGE_SIZE - 1) & ~(SD_PAGE_SIZE - 1);
}

/* Thread t's bin for cache id, or NULL (a typed cache it never used). */
static struct tbin *bin_of(struct tcache *t, uint16_t id)
{
    return id < SD_NCLASSES ? &t->bins[id]
         : t->ubins ? &t->ubins[id - SD_NCLASSES] : NULL;
}

/* This thread's counters into their caches (thread exit). */
static void stats_fold(struct tcache *t)
{
    for (unsigned id = 0; id < SD_MAX_CACHES; id++) {
        struct tbin *b = bin_of(t, (uint16_t)id);
        struct sd_cache *c = __atomic_load_n(&sd_caches[id], __ATOMIC_ACQUIRE);
        if (!b || !c)
            continue;
        if (b->n_refill)
            cache_stat_add(c, SD_STAT_ALLOC_REFILL, b->n_refill);
        if (b->n_remote)
            cache_stat_add(c, SD_STAT_FREE_REMOTE, b->n_remote);
        __atomic_store_n(&b->n_refill, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->n_remote, 0, __ATOMIC_RELAXED);
    }
}

static void thread_exit(void *arg)
{
    struct tcache *t = arg;
    if (t != &sd_tc)
        return;
    tcache_flush(t);
    sd_mutex_lock(&registry_lock);
    stats_fold(t);                  /* under the lock: never counted twice */
    list_del(&t->link);
    sd_mutex_unlock(&registry_lock);
    t->state = TC_DEAD;
    t->token = 1;
    if (t->ubins) {
        struct tbin *u = t->ubins;
        t->ubins = NULL;
        os_unmap(u, ubins_bytes());
    }
}

int tcache_init(void)
{
    struct tcache *t = &sd_tc;
    if (t->state != TC_NEW)
        return t->state == TC_LIVE ? 0 : -1;
    t->state = TC_INIT;
    cache_init();
    sd_self_tid();
    if (__atomic_load_n(&key_state, __ATOMIC_ACQUIRE) != 2) {
        int expect = 0;
        if (__atomic_compare_exchange_n(&key_state, &expect, 1, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            if (pthread_key_create(&exit_key, thread_exit)) {
                __atomic_store_n(&key_state, 0, __ATOMIC_RELEASE);
                t->state = TC_NEW;
                return -1;
            }
            __atomic_store_n(&key_state, 2, __ATOMIC_RELEASE);
        } else {
            t->state = TC_NEW;          /* another thread is creating it */
            return -1;
        }
    }
    if (pthread_setspecific(exit_key, t)) {
        t->state = TC_NEW;
        return -1;
    }
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        list_init(&t->bins[i].owned);
    sd_mutex_lock(&registry_lock);
    list_add_tail(&registry, &t->link);
    sd_mutex_unlock(&registry_lock);
    t->token = (uintptr_t)t;
    t->state = TC_LIVE;
    return 0;
}

struct tbin *tcache_ubin(uint16_t id)
{
    struct tcache *t = &sd_tc;
    if (t->state != TC_LIVE && tcache_init())
        return NULL;
    if (!t->ubins) {
        if (t->in_get)
            return NULL;
        void *m;
        if (os_map_aligned(ubins_bytes(), SD_PAGE_SIZE, &m))
            return NULL;
        struct tbin *u = m;
        for (unsigned i = 0; i < SD_MAX_CACHES - SD_NCLASSES; i++)
            list_init(&u[i].owned);
        t->ubins = u;
    }
    return &t->ubins[id - SD_NCLASSES];
}

/* Put a thread-private list of n objects of s back on its shared freelist
 * (slab locked). */
static void list_splice_free(struct slab *s, void *head, uint32_t n)
{
    if (!head)
        return;
    void *tail = head;
    while (*slab_fp(s, tail))
        tail = *slab_fp(s, tail);
    *slab_fp(s, tail) = s->freelist;
    s->freelist = head;
    __atomic_store_n(&s->inuse, s->inuse - n, __ATOMIC_RELAXED);
}

void tcache_owned_release(struct tbin *b, struct slab *s)
{
    struct sd_cache *c = s->cache;
    list_del(&s->link);
    b->nowned--;
    sd_spin_lock(&s->lock);
    list_splice_free(s, s->local_free, s->nlocal);
    s->local_free = NULL;
    s->nlocal = 0;
    int release = cache_slab_settle_locked(c, s, 0);
    sd_spin_unlock(&s->lock);
    cache_stat_add(c, SD_STAT_DEACTIVATE, 1);
    if (release)
        cache_slab_release(c, s);
}

void tcache_flush_bin(struct tbin *b)
{
    while (b->nowned)
        tcache_owned_release(b, list_entry(b->owned.prev, struct slab, link));
    struct slab *s = b->slab;
    if (!s)
        return;
    struct sd_cache *c = s->cache;
    sd_spin_lock(&s->lock);
    list_splice_free(s, b->free, b->nfree);
    list_splice_free(s, s->local_free, s->nlocal);
    s->local_free = NULL;
    s->nlocal = 0;
    b->free = NULL;
    b->nfree = 0;
    b->slab = NULL;
    int release = cache_slab_settle_locked(c, s, 0);
    sd_spin_unlock(&s->lock);
    cache_stat_add(c, SD_STAT_DEACTIVATE, 1);
    if (release)
        cache_slab_release(c, s);
}

void tcache_flush(struct tcache *t)
{
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        tcache_flush_bin(&t->bins[i]);
    if (t->ubins)
        for (unsigned i = 0; i < SD_MAX_CACHES - SD_NCLASSES; i++)
            tcache_flush_bin(&t->ubins[i]);
}

/* The sum over live threads of the uint32_t at byte off of their bins of
 * cache id (racy reads; exact at a quiescent point). */
static unsigned long registry_sum(uint16_t id, size_t off)
{
    unsigned long n = 0;
    sd_mutex_lock(&registry_lock);
    for (struct sd_list *l = registry.next; l != &registry; l = l->next) {
        struct tbin *b = bin_of(list_entry(l, struct tcache, link), id);
        if (b)
            n += __atomic_load_n((uint32_t *)((char *)b + off), __ATOMIC_RELAXED);
    }
    sd_mutex_unlock(&registry_lock);
    return n;
}

size_t tcache_private_objects(uint16_t id)
{
    return registry_sum(id, offsetof(struct tbin, nfree));
}

void tcache_stat_hot(struct sd_cache *c, enum sd_stat i)
{
    struct tcache *t = &sd_tc;
    struct tbin *b = t->state == TC_LIVE ? bin_of(t, c->id) : NULL;
    if (!b) {
        cache_stat_add(c, i, 1);
        return;
    }
    uint32_t *n = i == SD_STAT_ALLOC_REFILL ? &b->n_refill : &b->n_remote;
    __atomic_store_n(n, *n + 1, __ATOMIC_RELAXED);     /* owner only: no lock prefix */
}

unsigned long tcache_stat_sum(uint16_t id, enum sd_stat i)
{
    return registry_sum(id, i == SD_STAT_ALLOC_REFILL ? offsetof(struct tbin, n_refill)
                                                      : offsetof(struct tbin, n_remote));
}

/* ---------------------------------------------------------------- */
/* The get() guard                                                   */

void tcache_guard_enter(struct tcache_guard *g, const struct sd_cache *c)
{
    struct tcache *t = &sd_tc;
    g->pcpu = t->pcpu;
    t->pcpu = NULL;
    for (unsigned i = 0; i < SD_NCLASSES; i++) {
        g->free[i] = t->bins[i].free;
        t->bins[i].free = NULL;
    }
    g->ubins = t->ubins;
    g->token = t->token;
    t->ubins = NULL;
    t->token = 1;
    t->get_cache = c;
    t->in_get = 1;
}

void tcache_guard_leave(struct tcache_guard *g)
{
    struct tcache *t = &sd_tc;
    t->pcpu = g->pcpu;
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        t->bins[i].free = g->free[i];
    t->ubins = g->ubins;
    t->token = g->token;
    t->in_get = 0;
    t->get_cache = NULL;
}

void tcache_check_get(const char *call)
{
    if (unlikely(sd_tc.in_get))
        sd_fatal("%s() called from get() of cache %s: get() runs with the "
                 "slab locked and must not call the allocator",
                 call, sd_tc.get_cache ? sd_tc.get_cache->name : "?");
}

/* ---------------------------------------------------------------- */
/* Fork                                                              */

void tcache_lock_registry(void) { sd_mutex_lock(&registry_lock); }

void tcache_unlock_registry(int child)
{
    if (child)
        sd_mutex_reset_child(&registry_lock);
    else
        sd_mutex_unlock(&registry_lock);
}

/* In the child only the forking thread exists.  The others stopped at
 * whatever instruction they were on, possibly in the middle of moving a
 * slab between their active slot and their ring, or of popping their
 * private list: their tbins cannot be trusted, and walking them (as this
 * once did) could put one slab on two lists.  So their slabs are found
 * from the segments instead, by owner: each is un-owned and settled by
 * its count as any slab (FULL, PARTIAL with its shared freelist, EMPTY).
 * Objects that were on a dead thread's private or local lists stay counted
 * as in use: leaked in the child, a few slabs' worth per thread at most,
 * as jemalloc and glibc leak other threads' caches after fork.  So do
 * the objects a per-CPU refill of a vanished thread held (feeding).  Called
 * with every allocator lock already released. */
struct adopt {
    uintptr_t keep;             /* the surviving thread's token */
    struct sd_list release;     /* slabs that turned out empty */
};

static void adopt_dead_slab(struct slab *s, void *arg)
{
    struct adopt *a = arg;
    unsigned st = s->state;
    s->feeding = 0;                 /* refills of threads that are gone */
    if ((st != SLAB_ACTIVE && st != SLAB_OWNED) || s->owner == a->keep)
        return;
    sd_spin_lock(&s->lock);
    s->local_free = NULL;
    s->nlocal = 0;
    int release = cache_slab_settle_locked(s->cache, s, 0);
    sd_spin_unlock(&s->lock);
    if (release)                    /* not now: the walk holds segment locks */
        list_add_tail(&a->release, &s->link);
}

void tcache_after_fork_child(void)
{
    struct tcache *t = &sd_tc;
    t->tid = os_gettid();
    sd_mutex_lock(&registry_lock);
    while (!list_empty(&registry))
        list_del(registry.next);
    if (t->state == TC_LIVE)
        list_add_tail(&registry, &t->link);
    sd_mutex_unlock(&registry_lock);
    struct adopt a = { t->state == TC_LIVE ? t->token : 0, { NULL, NULL } };
    list_init(&a.release);
    segment_for_each_slab(adopt_dead_slab, &a, 0);
    while (!list_empty(&a.release)) {
        struct slab *s = list_entry(a.release.next, struct slab, link);
        list_del(&s->link);
        cache_slab_release(s->cache, s);
    }
}
