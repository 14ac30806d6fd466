/*
 * classes/tcache.c - thread caches (per-thread mode): set-up, exit, the
 * rings, the registry, the shrinker's reclaim of idle threads' slabs, and
 * the get() guard.  (The locks' thread id is core/thread.h; the fork
 * child's adoption of dead threads' slabs is classes/fork.c.)
 *
 * A thread's cache is TLS (initial-exec).  It is set up on the thread's
 * first slow path; a pthread key's destructor gives its active slabs back
 * at thread exit.  Until set-up completes (pthread_setspecific may itself
 * allocate) and after exit, the thread allocates through the direct,
 * locked path, so blocks it allocated can always be freed by others.
 *
 * The registry lock is a leaf (see classes/cache.c).  The reclaim lock
 * is outermost: the shrinker holds it while it takes idle threads' bins
 * (the gate, tcache.h), and a thread that finds itself revoked waits for
 * it at its outermost allocator entry, holding no other lock.
 */
#include "tcache.h"

#include <errno.h>

#include <linux/membarrier.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "alloc.h"
#include "options.h"
#include "os.h"
#include "segment.h"

__thread struct tcache sd_tc __attribute__((tls_model("initial-exec"))) = {
    .token = 1,
};

static sd_mutex reclaim_lock = SD_MUTEX_INIT;
static sd_mutex registry_lock = SD_MUTEX_INIT;
static struct sd_list registry = { &registry, &registry };
static pthread_key_t exit_key;
static int key_state;               /* 0 none, 1 creating, 2 ready */

void tcache_deadlock_report(const sd_spin *l)
{
    if (sd_tc.in_get)
        sd_fatal("get() of cache %s called the allocator (it runs with the "
                 "slab locked and must not allocate or free)",
                 sd_tc.get_cache ? sd_tc.get_cache->name : "?");
}

static size_t ubins_bytes(void)
{
    size_t bytes = TC_NUBINS * sizeof(struct tbin);
    return (bytes + SD_PAGE_SIZE - 1) & ~(SD_PAGE_SIZE - 1);
}

/* This thread's counters into their caches (thread exit). */
static void stats_fold(struct tcache *t)
{
    for (unsigned id = 0; id < SD_MAX_CACHES; id++) {
        struct tbin *b = tcache_bin_of(t, (uint16_t)id);
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

static void flush(struct tcache *t);

static void thread_exit(void *arg)
{
    struct tcache *t = arg;
    if (t != &sd_tc)
        return;
    tcache_enter(t);
    flush(t);
    tcache_leave(t);
    sd_mutex_lock(&registry_lock);
    stats_fold(t);                  /* under the lock: never counted twice */
    list_del(&t->link);
    sd_mutex_unlock(&registry_lock);
    /* A reclaim that found t in the registry before it left holds the
     * reclaim lock until it is done with t: wait for it, so that t's
     * storage outlives its last look. */
    sd_mutex_lock(&reclaim_lock);
    sd_mutex_unlock(&reclaim_lock);
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
        for (unsigned i = 0; i < TC_NUBINS; i++)
            list_init(&u[i].owned);
        tcache_enter(t);                /* a reclaim reads t->ubins */
        t->ubins = u;
        tcache_leave(t);
    }
    return tcache_ubin_of(t, id);
}

/* Put a thread-private list of n objects of s back on its shared freelist
 * (slab locked). */
static void list_splice_free(struct slab *s, void *head, uint32_t n)
{
    if (!head)
        return;
    void *tail = head;
    for (void *next; (next = slab_get_next(s, tail));)
        tail = next;
    slab_set_next(s, tail, s->freelist);
    s->freelist = head;
    __atomic_store_n(&s->inuse, s->inuse - n, __ATOMIC_RELAXED);
}

/* Settle a slab that leaves a thread (locked; local list spliced). */
static void settle_unlock(struct sd_cache *c, struct slab *s)
{
    cache_stat_add(c, SD_STAT_DEACTIVATE, 1);
    cache_slab_settle_unlock(c, s, 0);
}

void tcache_ring_add(struct tcache *t, struct tbin *b, struct slab *s)
{
    list_add_head(&b->owned, &s->link);
    b->nowned++;
    t->ring_bytes += seg_kind_bytes(s->kind);
    if (b->nowned > tbin_owned_max(s->kind) ||
        t->ring_bytes > (size_t)sd_opt.thread_kb << 10)
        tcache_owned_release(t, b, list_entry(b->owned.prev, struct slab, link));
}

void tcache_owned_release(struct tcache *t, struct tbin *b, struct slab *s)
{
    list_del(&s->link);
    b->nowned--;
    t->ring_bytes -= seg_kind_bytes(s->kind);
    sd_spin_lock(&s->lock);
    list_splice_free(s, s->local_free, s->nlocal);
    s->local_free = NULL;
    s->nlocal = 0;
    settle_unlock(s->cache, s);
}

static void flush_bin(struct tcache *t, struct tbin *b)
{
    while (b->nowned)
        tcache_owned_release(t, b, list_entry(b->owned.prev, struct slab, link));
    struct slab *s = b->slab;
    if (!s)
        return;
    sd_spin_lock(&s->lock);
    list_splice_free(s, b->free, b->nfree);
    list_splice_free(s, s->local_free, s->nlocal);
    s->local_free = NULL;
    s->nlocal = 0;
    b->free = NULL;
    b->nfree = 0;
    b->slab = NULL;
    settle_unlock(s->cache, s);
}

static void flush(struct tcache *t)
{
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        flush_bin(t, &t->bins[i]);
    if (t->ubins)
        for (unsigned i = 0; i < TC_NUBINS; i++)
            flush_bin(t, &t->ubins[i]);
}

void tcache_flush_self(void)
{
    struct tcache *t = &sd_tc;
    tcache_enter(t);
    flush(t);
    tcache_leave(t);
}

void tcache_flush_self_bin(uint16_t id)
{
    struct tcache *t = &sd_tc;
    tcache_enter(t);
    struct tbin *b = tcache_bin_of(t, id);
    if (b)
        flush_bin(t, b);
    tcache_leave(t);
}

void tcache_release_own(struct slab *s)
{
    struct tcache *t = &sd_tc;
    tcache_enter(t);
    if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t->token &&
        s->state == SLAB_OWNED) {
        struct tbin *b = tcache_bin_of(t, s->bin);
        if (b)
            tcache_owned_release(t, b, s);
    }
    tcache_leave(t);
}

/* ---------------------------------------------------------------- */
/* Reclaim: the shrinker takes idle threads' bins (the gate, tcache.h) */

static int fence_state;             /* 0 unknown, 1 registered, -1 none */

static int fence_ready(void)
{
    int st = __atomic_load_n(&fence_state, __ATOMIC_RELAXED);
    if (!st) {
        int cmds = os_membarrier(MEMBARRIER_CMD_QUERY);
        st = cmds >= 0 && cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED &&
             os_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 ? 1 : -1;
        __atomic_store_n(&fence_state, st, __ATOMIC_RELAXED);
    }
    return st > 0;
}

void tcache_enter_wait(struct tcache *t)
{
    if (TC_GATE_DEPTH(t->gate) > 1)     /* nested: the outer entry was seen */
        return;
    int saved = errno;                  /* the lock's futex wait may set it */
    while (__atomic_load_n(&t->revoked, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&t->gate, t->gate - TC_GATE_IN, __ATOMIC_RELAXED);
        sd_mutex_lock(&reclaim_lock);       /* the shrinker is done with t */
        sd_mutex_unlock(&reclaim_lock);
        __atomic_store_n(&t->gate, t->gate + TC_GATE_IN, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
    errno = saved;
}

static int holds_slabs(const struct tcache *t)
{
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        if (t->bins[i].slab || t->bins[i].nowned)
            return 1;
    if (t->ubins)
        for (unsigned i = 0; i < TC_NUBINS; i++)
            if (t->ubins[i].slab || t->ubins[i].nowned)
                return 1;
    return 0;
}

#define RECLAIM_BATCH 64

unsigned tcache_reclaim(int all)
{
    if (pcpu_on() || !fence_ready())
        return 0;
    static uint32_t reclaims;           /* under reclaim_lock */
    struct tcache *self = &sd_tc, *batch[RECLAIM_BATCH];
    unsigned taken = 0, n;
    sd_mutex_lock(&reclaim_lock);
    uint32_t id = ++reclaims;
    do {
        n = 0;
        sd_mutex_lock(&registry_lock);
        for (struct sd_list *l = registry.next; l != &registry && n < RECLAIM_BATCH;
             l = l->next) {
            struct tcache *t = list_entry(l, struct tcache, link);
            if (t->looked == id)
                continue;
            t->looked = id;
            uint32_t calls = TC_GATE_CALLS(__atomic_load_n(&t->gate, __ATOMIC_RELAXED));
            int busy = calls != t->seen_calls;
            t->seen_calls = calls;
            if (t == self || (busy && !all))
                continue;
            __atomic_store_n(&t->revoked, 1, __ATOMIC_RELAXED);
            batch[n++] = t;
        }
        sd_mutex_unlock(&registry_lock);
        if (!n)
            break;
        /* Every CPU running one of them passes a full barrier: each
         * either stored its depth before it, and is seen inside, or will
         * see `revoked` on its way in. */
        os_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
        for (unsigned i = 0; i < n; i++) {
            struct tcache *t = batch[i];
            /* Outside: its bins are ours to read and take until the
             * `revoked` store below. */
            if (!TC_GATE_DEPTH(__atomic_load_n(&t->gate, __ATOMIC_ACQUIRE)) &&
                holds_slabs(t)) {
                flush(t);
                taken++;
            }
            __atomic_store_n(&t->revoked, 0, __ATOMIC_RELEASE);
        }
    } while (n == RECLAIM_BATCH);
    sd_mutex_unlock(&reclaim_lock);
    return taken;
}

int tcache_reclaim_wanted(void)
{
    if (pcpu_on())
        return 0;
    unsigned n = 0;
    sd_mutex_lock(&registry_lock);
    for (struct sd_list *l = registry.next; l != &registry; l = l->next)
        n++;
    sd_mutex_unlock(&registry_lock);
    return n > 4 * os_ncpus();
}

/* The sum over live threads of the uint32_t at byte off of their bins of
 * cache id (racy reads; exact at a quiescent point). */
static unsigned long registry_sum(uint16_t id, size_t off)
{
    unsigned long n = 0;
    sd_mutex_lock(&registry_lock);
    for (struct sd_list *l = registry.next; l != &registry; l = l->next) {
        struct tbin *b = tcache_bin_of(list_entry(l, struct tcache, link), id);
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
    struct tbin *b = t->state == TC_LIVE ? tcache_bin_of(t, c->id) : NULL;
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
    /* In the gate while the bins are set aside, so that no reclaim
     * flushes them half hidden.  It may wait here with the vacated
     * slab's lock held: a reclaim takes only the locks of the thread's own
     * slabs (active and ring, never frozen) and leaves. */
    tcache_enter(t);
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
    tcache_leave(t);
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

void tcache_lock_reclaim(void) { sd_mutex_lock(&reclaim_lock); }

void tcache_unlock_reclaim(int child)
{
    if (child) {
        sd_mutex_reset_child(&reclaim_lock);
        __atomic_store_n(&fence_state, 0, __ATOMIC_RELAXED);  /* a new mm */
    } else {
        sd_mutex_unlock(&reclaim_lock);
    }
}

void tcache_lock_registry(void) { sd_mutex_lock(&registry_lock); }

void tcache_unlock_registry(int child)
{
    if (child)
        sd_mutex_reset_child(&registry_lock);
    else
        sd_mutex_unlock(&registry_lock);
}

void tcache_registry_fork_child(void)
{
    struct tcache *t = &sd_tc;
    sd_mutex_lock(&registry_lock);
    while (!list_empty(&registry))
        list_del(registry.next);
    if (t->state == TC_LIVE)
        list_add_tail(&registry, &t->link);
    sd_mutex_unlock(&registry_lock);
}
