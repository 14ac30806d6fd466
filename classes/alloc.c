/*
 * classes/alloc.c - the slow paths of allocation and free (see alloc.h;
 * the lock order and slab states are in classes/cache.c).
 */
#include "alloc.h"

#include <errno.h>

#include "debug.h"
#include "fmt.h"
#include "large.h"
#include "mesh.h"
#include "options.h"

void report_invalid(const char *call, const void *p)
{
    sd_fatal("%s(): invalid pointer %p", call, p);
}

void report_double_free(const char *call, const void *p, const struct sd_cache *c)
{
    sd_fatal("%s(): double free %p in cache %s", call, p, c ? c->name : "?");
}

/* Make s the thread's active slab (s locked; unlocked on return). */
static void activate_unlock(struct tbin *b, struct slab *s)
{
    if (pcpu_on())                      /* only per-CPU drains fill return maps */
        slab_rmap_fold(s);              /* the private list is all of them */
    slab_set_state(s, SLAB_ACTIVE);
    __atomic_store_n(&s->owner, sd_tc.token, __ATOMIC_RELAXED);
    b->slab = s;
    b->free = s->freelist;
    b->nfree = s->capacity - s->inuse;
    s->freelist = NULL;
    s->inuse = s->capacity;
    sd_spin_unlock(&s->lock);
}

/* The refill steps of cache_alloc_slow, in the order it tries them; each
 * fills b's private list (and returns 1) or leaves it empty (0).  Inlined
 * into their one caller, so the slow path is one function. */
#define REFILL_STEP static inline __attribute__((always_inline))

/* 1. Our own frees, no lock: from the slab that has the most of them,
 * the active one or one on the ring.  Taking the first slab with any
 * would refill a handful of objects at a time once the frees spread
 * over the ring (a random-replacement workload over k slabs yields
 * about slack/k per refill with "most", 1-3 with "first").  A ring slab
 * becomes the active one; the old active one goes to the ring. */
REFILL_STEP int refill_own_frees(struct tcache *t, struct tbin *b)
{
    struct slab *s = b->slab;
    struct slab *best = s && s->nlocal ? s : NULL;
    uint32_t most = best ? s->nlocal : 0;
    for (struct sd_list *l = b->owned.next; l != &b->owned; l = l->next) {
        struct slab *o = list_entry(l, struct slab, link);
        if (o->nlocal > most) {
            best = o;
            most = o->nlocal;
        }
    }
    if (best && best == s) {
        b->free = s->local_free;
        b->nfree = s->nlocal;
        s->local_free = NULL;
        s->nlocal = 0;
        return 1;
    }
    if (!best)
        return 0;
    list_del(&best->link);              /* off the ring first: the */
    b->nowned--;                        /* budget may release one */
    t->ring_bytes -= seg_kind_bytes(best->kind);
    if (s) {                            /* to the ring, still ours */
        sd_spin_lock(&s->lock);
        slab_set_state(s, SLAB_OWNED);
        sd_spin_unlock(&s->lock);
        tcache_ring_add(t, b, s);
    }
    sd_spin_lock(&best->lock);
    b->free = best->local_free;
    b->nfree = best->nlocal;
    best->local_free = NULL;
    best->nlocal = 0;
    slab_set_state(best, SLAB_ACTIVE);
    b->slab = best;
    sd_spin_unlock(&best->lock);
    return 1;
}

/* 2. Other threads' frees into the active slab (its shared freelist,
 * under its lock).  A full active slab goes to the ring, still owned, so
 * that this thread's frees into it stay lock-free. */
REFILL_STEP int refill_active_remote_frees(struct tcache *t, struct tbin *b)
{
    struct slab *s = b->slab;
    if (!s)
        return 0;
    sd_spin_lock(&s->lock);
    if (s->freelist) {
        b->free = s->freelist;
        b->nfree = s->capacity - s->inuse;
        s->freelist = NULL;
        s->inuse = s->capacity;
        sd_spin_unlock(&s->lock);
        return 1;
    }
    slab_set_state(s, SLAB_OWNED);
    sd_spin_unlock(&s->lock);
    b->slab = NULL;
    tcache_ring_add(t, b, s);
    return 0;
}

/* 3. No own frees anywhere: a ring slab with frees from other threads
 * (its shared freelist, under its lock) becomes active again. */
REFILL_STEP int refill_ring_remote_frees(struct tcache *t, struct tbin *b)
{
    for (struct sd_list *l = b->owned.next; l != &b->owned; l = l->next) {
        struct slab *o = list_entry(l, struct slab, link);
        /* A look without the lock first: other threads' frees keep these
         * lines busy, and a trylock per ring slab bounced them all. */
        if (!__atomic_load_n(&o->freelist, __ATOMIC_RELAXED) || !sd_spin_trylock(&o->lock))
            continue;
        if (!o->freelist) {
            sd_spin_unlock(&o->lock);
            continue;
        }
        list_del(&o->link);
        b->nowned--;
        t->ring_bytes -= seg_kind_bytes(o->kind);
        b->free = o->freelist;
        b->nfree = o->capacity - o->inuse;
        o->freelist = NULL;
        o->inuse = o->capacity;
        slab_set_state(o, SLAB_ACTIVE);
        b->slab = o;
        sd_spin_unlock(&o->lock);
        return 1;
    }
    return 0;
}

/* 4. From the cache: a partial slab (or a retained empty one), else a new
 * slab, becomes the active one.  0 when out of memory. */
REFILL_STEP int refill_from_cache(struct sd_cache *c, struct tbin *b)
{
    cache_decay_tick();
    struct slab *s = cache_partial_take(c);
    if (!s) {
        s = cache_slab_new(c);
        if (!s)
            return 0;
        sd_spin_lock(&s->lock);
    }
    activate_unlock(b, s);
    return 1;
}

static void *alloc_slow_body(struct sd_cache *c, struct tbin *b);

/* errno is ENOMEM on failure and untouched on success: a lock's futex
 * wait or an OS call on the way may set it, glibc's malloc never does. */
void *cache_alloc_slow(struct sd_cache *c, struct tbin *b)
{
    int saved = errno;
    void *p = alloc_slow_body(c, b);
    if (likely(p))
        errno = saved;
    return p;
}

static void *alloc_slow_body(struct sd_cache *c, struct tbin *b)
{
    struct tcache *t = &sd_tc;
    /* A malloc cache may not be set up yet (this thread's first call while
     * another thread runs cache_init): nothing of c is read before. */
    if (unlikely(t->state != TC_LIVE))
        cache_init();
    tcache_check_get(c->is_malloc ? "malloc" : "sd_cache_alloc");
    if (unlikely(c->debug))             /* every allocation of it, even early */
        return debug_alloc(c);
    if (pcpu_on() && pcpu_thread_init())   /* this thread's first call */
        return pcpu_alloc(c, c->id, t->pcpu);
    if (unlikely(t->state != TC_LIVE)) {
        if (t->state == TC_NEW && tcache_init() == 0) {
            if (!c->is_malloc)
                b = tcache_ubin(c->id);
            if (b && b->free)
                return cache_alloc_fast(c, b);
        }
        if (t->state != TC_LIVE || !b)
            return cache_alloc_direct(c, NULL, 0);
    }
    cache_stat_hot(c, SD_STAT_ALLOC_REFILL, 1);
    if (refill_own_frees(t, b) || refill_active_remote_frees(t, b) ||
        refill_ring_remote_frees(t, b) || refill_from_cache(c, b))
        return cache_alloc_fast(c, b);
    errno = ENOMEM;
    return NULL;
}

static void *partial_pop_locked(struct sd_cache *c, struct slab *s);

static int fuller_than_quarter(const struct slab *s)
{
    return s->inuse * 4 > s->capacity;
}

#define REFILL_SCAN 4       /* partial slabs a per-CPU refill compares */
#define DIRECT_SCAN 32      /* partial slabs a "fullest" allocation looks at */

void *cache_alloc_direct(struct sd_cache *c, const struct slab *avoid, int fullest)
{
    cache_stat_hot(c, SD_STAT_ALLOC_DIRECT, 1);
    for (;;) {
        struct slab *s = NULL;
        unsigned seen = 0;
        sd_mutex_lock(&c->list_lock);
        for (struct sd_list *l = c->partial.next; l != &c->partial; l = l->next) {
            struct slab *x = list_entry(l, struct slab, link);
            if (x == avoid)
                continue;
            /* The fuller slabs are at the head (a shrink sorts the list,
             * fill slabs go there): a bounded look, or a defrag pass over
             * a heap of thousands of sparse slabs turns quadratic. */
            if (fullest && ++seen > DIRECT_SCAN)
                break;
            if (fullest && !fuller_than_quarter(x))
                continue;
            if (sd_spin_trylock(&x->lock)) {
                s = x;
                break;
            }
        }
        if (s) {
            void *p = partial_pop_locked(c, s);
            sd_mutex_unlock(&c->list_lock);
            sd_spin_unlock(&s->lock);
            return p;
        }
        sd_mutex_unlock(&c->list_lock);
        if (fullest)
            return NULL;
        /* No partial slab: a retained empty one, or a new one, goes on the
         * partial list and the loop takes from it. */
        s = cache_partial_take(c);
        if (!s) {
            s = cache_slab_new(c);
            if (!s) {
                errno = ENOMEM;
                return NULL;
            }
            sd_spin_lock(&s->lock);
        }
        sd_mutex_lock(&c->list_lock);
        cache_partial_add_locked(c, s, 0);
        sd_mutex_unlock(&c->list_lock);
        sd_spin_unlock(&s->lock);
    }
}

/* Pop one object of partial slab s (slab and list locked). */
static void *partial_pop_locked(struct sd_cache *c, struct slab *s)
{
    SD_ASSERT(sd_spin_held(&s->lock));
    if (!s->freelist)
        slab_rmap_fold(s);
    void *p = s->freelist;
    s->freelist = slab_get_next(s, p);
    if (s->tagged)
        *slab_tag(s, p) = 0;                /* handed out */
    if (!s->freelist)
        cache_slab_unpurge_locked(c, s);    /* a PARTIAL slab keeps one */
    __atomic_store_n(&s->inuse, s->inuse + 1, __ATOMIC_RELAXED);  /* refill peeks */
    if (s->inuse == s->capacity) {
        list_del(&s->link);
        cnt_add(&c->nr_partial, -1);
        c->partial_gen++;
        slab_set_state(s, SLAB_FULL);
        if (c->defrag_fill == s)
            c->defrag_fill = NULL;
    }
    return p;
}

void *cache_alloc_fill(struct sd_cache *c, const struct slab *avoid)
{
    sd_mutex_lock(&c->list_lock);
    struct slab *s = c->defrag_fill;
    if (s && s != avoid && s->cache == c && s->state == SLAB_PARTIAL &&
        sd_spin_trylock(&s->lock)) {
        void *p = partial_pop_locked(c, s);
        sd_mutex_unlock(&c->list_lock);
        sd_spin_unlock(&s->lock);
        return p;
    }
    c->defrag_fill = NULL;
    struct slab *e = cache_empty_take_locked(c);
    sd_mutex_unlock(&c->list_lock);
    if (!e) {
        e = cache_slab_new(c);
        if (!e)
            return NULL;
        sd_spin_lock(&e->lock);
    }
    sd_mutex_lock(&c->list_lock);
    cache_partial_add_locked(c, e, 0);
    c->defrag_fill = e;
    void *p = partial_pop_locked(c, e);
    sd_mutex_unlock(&c->list_lock);
    sd_spin_unlock(&e->lock);
    return p;
}

void *cache_alloc_thread(struct sd_cache *c, struct tbin *b)
{
    struct tcache *t = &sd_tc;
    tcache_enter(t);
    void *p = b->free;
    if (likely(p)) {
        /* The private list is of the active slab (b->slab): its free
         * pointers are checked against it (core/slab.h). */
        b->free = slab_get_next(b->slab, p);
        b->nfree--;
        if (b->slab->tagged)
            *slab_tag(b->slab, p) = 0;
    } else {
        p = cache_alloc_slow(c, b);
    }
    tcache_leave(t);
    return p;
}

/* Is p's free tag set (p an object of s)?  Then p is free, or held the key. */
static inline int tag_set(const struct slab *s, void *p)
{
    return s->tagged && unlikely(*slab_tag(s, p) == sd_free_tag);
}

void cache_free_thread(struct slab *s, void *p, const char *call)
{
    struct tcache *t = &sd_tc;
    tcache_enter(t);
    int inside = slab_contains(s, p);
    if (likely(__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t->token) && likely(inside)) {
        /* Our active slab or one on our ring: its local list, which the
         * allocation path takes over when the private list runs dry. */
        if (likely(s->tagged)) {
            uintptr_t *tag = slab_tag(s, p), key = sd_free_tag;
            if (unlikely(*tag == key))
                goto tagged;
            *tag = key;
        } else if (unlikely(p == s->local_free)) {
            report_double_free(call, p, s->cache);
        }
        slab_set_next(s, p, s->local_free);
        s->local_free = p;
        s->nlocal++;
    } else if (inside && tag_set(s, p)) {
        goto tagged;
    } else {
        cache_free_slow(s, p, call);
    }
    tcache_leave(t);
    return;
tagged:                                 /* it looks at other threads' lists */
    tcache_leave(t);
    cache_free_tagged(s, p, call);
}

static void free_slow_body(struct slab *s, void *p, const char *call);

/* free() keeps errno (glibc 2.33+): a release's madvise or munmap, or a
 * lock's futex wait, may set it. */
void cache_free_slow(struct slab *s, void *p, const char *call)
{
    int saved = errno;
    free_slow_body(s, p, call);
    errno = saved;
}

static void free_slow_body(struct slab *s, void *p, const char *call)
{
    tcache_check_get(call);
    if (pcpu_on() && !sd_tc.pcpu &&
        __atomic_load_n(&s->fbin, __ATOMIC_RELAXED) != SD_BIN_NONE && pcpu_thread_init()) {
        cache_free_fast(s, p, call);        /* this thread's first call */
        return;
    }
    sd_spin_lock(&s->lock);
    struct sd_cache *c = s->cache;
    unsigned state = s->state;
    if (unlikely(c && c->debug)) {      /* it checks and reports itself */
        sd_spin_unlock(&s->lock);
        debug_free(c, s, p, call);
        return;
    }
    if (unlikely(!slab_state_live(state) || !slab_contains(s, p))) {
        sd_spin_unlock(&s->lock);
        if (state == SLAB_MESHED) {     /* an alias: free into its host */
            mesh_free(s, p, call);
            return;
        }
        if (state == SLAB_EMPTY && slab_contains(s, p))
            report_double_free(call, p, c);
        report_invalid(call, p);
    }
    if (unlikely(p == s->freelist || (pcpu_on() && slab_rmap_has(s, p))))
        report_double_free(call, p, c);
    if (s->owner == sd_tc.token) {
        /* Our own active or ring slab (a caller that skipped the fast path). */
        sd_spin_unlock(&s->lock);
        cache_free_fast(s, p, call);
        return;
    }
    if (s->tagged)
        *slab_tag(s, p) = sd_free_tag;
    slab_set_next(s, p, s->freelist);
    __atomic_store_n(&s->freelist, p, __ATOMIC_RELAXED);   /* the owner peeks */
    __atomic_store_n(&s->inuse, s->inuse - 1, __ATOMIC_RELAXED);  /* refill peeks */
    int went_empty = state == SLAB_PARTIAL && !s->inuse;
    int release = cache_slab_freed_locked(c, s, 1);
    sd_spin_unlock(&s->lock);
    cache_stat_hot(c, SD_STAT_FREE_REMOTE, 1);
    if (release)
        cache_slab_release(c, s);
    else if (went_empty)
        cache_release_empty(c, 0);          /* decay the older empties */
}

/* ---------------------------------------------------------------- */
/* Free tags (core/slab.h): is a tagged object free?                 */

/* Is p on the list that starts at `head`, of free objects of s?  At most
 * capacity steps; a pointer outside the slab ends the walk. */
static int list_has(const struct slab *s, void *head, const void *p)
{
    void *q = head;
    for (uint32_t n = 0; q && n <= s->capacity; n++) {
        if (q == p)
            return 1;
        q = slab_next_raw(s, q);
        if (q && !slab_contains(s, q))
            return 0;
    }
    return 0;
}

/* Per-thread mode: p on this thread's lists of s (its owner). */
static int own_lists_have(struct slab *s, void *p)
{
    struct tcache *t = &sd_tc;
    tcache_enter(t);
    int found = 0;
    if (__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == t->token) {
        struct tbin *b = tcache_bin_of(t, s->bin);
        found = list_has(s, s->local_free, p) ||
                (b && b->slab == s && list_has(s, b->free, p));
    }
    tcache_leave(t);
    return found;
}

void cache_free_tagged(struct slab *s, void *p, const char *call)
{
    tcache_check_get(call);
    int saved = errno;
    /* A mesh alias's object is its host's, at the same offset. */
    struct slab *h = s;
    void *hp = p;
    sd_spin_lock(&s->lock);
    if (s->state == SLAB_MESHED && s->mesh_host) {
        h = s->mesh_host;
        hp = h->start + ((char *)p - s->start);
    }
    sd_spin_unlock(&s->lock);
    struct sd_cache *c = h->cache;
    unsigned st = __atomic_load_n(&h->state, __ATOMIC_RELAXED);
    if (!slab_state_live(st) || !c || c->debug) {
        cache_free_slow(s, p, call);        /* debug's own report, or routed */
        errno = saved;
        return;
    }
    /* Every free object of h onto its freelist first (a frozen slab's
     * are there already: its vacate or mesh drained them). */
    int found = 0;
    uintptr_t owner = __atomic_load_n(&h->owner, __ATOMIC_RELAXED);
    if (st != SLAB_FROZEN) {
        if (pcpu_on())
            pcpu_quiesce(c, h);
        else if (owner == sd_tc.token)
            found = own_lists_have(h, hp);
        else if (owner)
            tcache_reclaim(1);
    }
    sd_spin_lock(&h->lock);
    st = h->state;
    owner = h->owner;
    if (pcpu_on() && slab_state_live(st))
        slab_rmap_fold(h);
    /* Released or emptied by the drain: no object of it was live. */
    found = found || !slab_state_live(st) || list_has(h, h->freelist, hp);
    /* Still another thread's, which was inside the allocator: its lists
     * cannot be read, and the tag says free. */
    found = found || (owner && owner != sd_tc.token);
    if (found) {
        sd_spin_unlock(&h->lock);
        report_double_free(call, p, c);
    }
    /* Not free: the program stored the key in a live object.  Cleared
     * under the lock (no get() reads it meanwhile), then freed. */
    *slab_tag(h, hp) = 0;
    sd_spin_unlock(&h->lock);
    errno = saved;
    cache_free_fast(s, p, call);
}

void free_not_slab(void *p, const char *call)
{
    tcache_check_get(call);
    int saved = errno;              /* free() preserves errno */
    int r = large_free(p);
    if (likely(r == 0)) {
        errno = saved;
        return;
    }
    if (r == -2)
        sd_fatal("%s(): double free %p (large block)", call, p);
    report_invalid(call, p);
}

/* ---------------------------------------------------------------- */
/* Batches for the per-CPU stacks (classes/pcpu.c)                   */

/* Pop up to n objects of slab s (slab and list locked, s PARTIAL or
 * about to be settled); a slab that fills up leaves the partial list. */
static unsigned slab_take_locked(struct sd_cache *c, struct slab *s, void **out,
                                 unsigned n)
{
    SD_ASSERT(sd_spin_held(&s->lock));
    unsigned k = 0;
    /* The return map first (core/slab.h): objects found by their bits,
     * in address order, without touching them. */
    uint64_t *map = slab_rmap(s);
    unsigned w = 0, words = slab_rmap_words(s);
    for (; w < words && k < n; w++) {
        uint64_t m = map[w];
        if (!m)
            continue;
        char *base = s->start + (size_t)w * 64 * s->size;
        for (; m && k < n; m &= m - 1)
            out[k++] = base + (size_t)__builtin_ctzll(m) * s->size;
        map[w] = m;
    }
    int mapped = 0;                     /* objects left in the map */
    for (unsigned v = w ? w - 1 : 0; v < words && !mapped; v++)
        mapped = map[v] != 0;
    /* The head in a register, stored once: out[] may alias s->freelist as
     * far as the compiler knows, which would store and reload it at
     * every step of a walk that is one dependent load after another. */
    void *p = s->freelist;
    while (k < n) {
        if (!p) {
            s->freelist = NULL;
            if (!cache_slab_unpurge_locked(c, s))
                break;
            p = s->freelist;
        }
        out[k++] = p;
        p = slab_get_next(s, p);
    }
    s->freelist = p;
    if (!p && !mapped)
        cache_slab_unpurge_locked(c, s);    /* a PARTIAL slab keeps one */
    __atomic_store_n(&s->inuse, s->inuse + k, __ATOMIC_RELAXED);  /* refill peeks */
    return k;
}

struct slab *cache_take_refill(struct sd_cache *c, void **out, unsigned n,
                               unsigned *got)
{
    struct slab *s = NULL;
    *got = 0;
    if (__atomic_load_n(&c->nr_partial, __ATOMIC_RELAXED)) {
        sd_mutex_lock(&c->list_lock);
        /* The fullest of the first REFILL_SCAN partial slabs: allocation
         * fills the fuller slabs, and the sparse ones drain. */
        struct slab *best = NULL;
        unsigned seen = 0;
        for (struct sd_list *l = c->partial.next; l != &c->partial && seen < REFILL_SCAN;
             l = l->next, seen++) {
            struct slab *x = list_entry(l, struct slab, link);
            if (__atomic_load_n(&x->feeding, __ATOMIC_RELAXED) == UINT8_MAX)
                continue;
            if (!best || __atomic_load_n(&x->inuse, __ATOMIC_RELAXED) >
                         __atomic_load_n(&best->inuse, __ATOMIC_RELAXED))
                best = x;
        }
        if (best && !sd_spin_trylock(&best->lock))
            best = NULL;
        for (struct sd_list *l = c->partial.next; !best && l != &c->partial; l = l->next) {
            struct slab *x = list_entry(l, struct slab, link);
            if (__atomic_load_n(&x->feeding, __ATOMIC_RELAXED) != UINT8_MAX &&
                sd_spin_trylock(&x->lock))
                best = x;
        }
        if (!best) {
            sd_mutex_unlock(&c->list_lock);
            goto fresh;
        }
        /* The list's part is decided from the counts (the free objects,
         * in the return map, on the freelist or on purged pages, are
         * capacity - inuse), so that the take runs under the slab's lock
         * alone: other refills of the class do not wait for it.  A slab the walk will fill leaves the list now and turns
         * FULL after the walk (its purged pages count while PARTIAL). */
        s = best;
        uint32_t avail = s->capacity - s->inuse;
        if (n >= avail)
            cache_partial_del_locked(c, s);
        __atomic_fetch_add(&s->feeding, 1, __ATOMIC_RELAXED);
        sd_mutex_unlock(&c->list_lock);
        *got = slab_take_locked(c, s, out, n);
        SD_ASSERT(*got == (n < avail ? n : avail));
        if (n >= avail)
            slab_set_state(s, SLAB_FULL);
        sd_spin_unlock(&s->lock);
        return s;
    }
fresh:
    /* No partial slab: a retained empty one, or a new one. */
    s = cache_partial_take(c);
    if (!s) {
        s = cache_slab_new(c);
        if (!s)
            return NULL;
        sd_spin_lock(&s->lock);
    }
    *got = slab_take_locked(c, s, out, n);
    __atomic_fetch_add(&s->feeding, 1, __ATOMIC_RELAXED);
    size_t released = cache_slab_settle_unlock(c, s, 0);   /* PARTIAL or FULL */
    SD_ASSERT(!released);
    (void)released;
    return s;
}

/* A batch's objects were freed at random over the heap, and each costs
 * its slab descriptor's two lines - in a big heap, misses one after the
 * other.  So the loop asks for those of the object RETURN_AHEAD places
 * on while it works on this one.  The objects themselves are not touched
 * (the return map), so not fetched. */
#define RETURN_AHEAD 4

/* Prefetch objects *pf.. up to `upto` (not past n); *pf: the next one. */
static inline void return_prefetch(void *const *objs, unsigned *pf, unsigned upto,
                                   unsigned n)
{
    for (; *pf < upto && *pf < n; ++*pf) {
        void *q = objs[*pf];
        struct slab *t = segment_slab_of(q);
        if (likely(t)) {
            __builtin_prefetch(t, 1);
            __builtin_prefetch((char *)t + 64, 1);
        }
    }
}

void cache_return_objects(void *const *objs, unsigned n, const char *call)
{
    unsigned pf = 0;
    for (unsigned i = 0; i < n;) {
        void *p = objs[i];
        return_prefetch(objs, &pf, i + RETURN_AHEAD + 1, n);
        struct slab *s = segment_slab_of(p);
        struct sd_cache *c = s ? s->cache : NULL;
        if (unlikely(!s)) {
            report_invalid(call, p);
        }
        sd_spin_lock(&s->lock);
        unsigned state = s->state;
        if (unlikely(!slab_state_live(state) || state == SLAB_FROZEN || s->cache != c ||
                     c->debug || !slab_contains(s, p))) {
            sd_spin_unlock(&s->lock);
            cache_free_slow(s, p, call);    /* routes, checks or reports it */
            i++;
            continue;
        }
        uint32_t before = s->inuse;
        /* A slab on the lists takes the run in its return map (core/slab.h):
         * a bit per object, the objects untouched.  One a thread owns
         * takes it on its freelist, as the other threads' frees. */
        uint64_t *map = state == SLAB_PARTIAL || state == SLAB_FULL ? slab_rmap(s) : NULL;
        /* The run's map word and count stay in registers and are stored
         * once a word (and once a run): a store and a load of the same
         * word for each object would chain the objects through store
         * forwarding. */
        uint32_t w = UINT32_MAX, freed = 0;
        uint64_t word = 0;
        do {                                /* the run of objects of s */
            if (map) {
                uint32_t k = slab_index(s, p);
                if (k >> 6 != w) {
                    if (w != UINT32_MAX)
                        map[w] = word;
                    w = k >> 6;
                    word = map[w];
                }
                uint64_t bit = 1ULL << (k & 63);
                if (unlikely(word & bit)) {
                    map[w] = word;
                    __atomic_store_n(&s->inuse, s->inuse - freed, __ATOMIC_RELAXED);
                    sd_spin_unlock(&s->lock);
                    report_double_free(call, p, c);
                }
                word |= bit;
            } else {
                if (unlikely(p == s->freelist)) {
                    __atomic_store_n(&s->inuse, s->inuse - freed, __ATOMIC_RELAXED);
                    sd_spin_unlock(&s->lock);
                    report_double_free(call, p, c);
                }
                if (s->tagged)
                    *slab_tag(s, p) = sd_free_tag;
                slab_set_next(s, p, s->freelist);
                __atomic_store_n(&s->freelist, p, __ATOMIC_RELAXED);
            }
            freed++;
            if (++i == n)
                break;
            p = objs[i];
            return_prefetch(objs, &pf, i + RETURN_AHEAD + 1, n);
        } while (segment_slab_of(p) == s && slab_contains(s, p));
        if (w != UINT32_MAX)
            map[w] = word;
        __atomic_store_n(&s->inuse, s->inuse - freed, __ATOMIC_RELAXED);
        int went_empty = state == SLAB_PARTIAL && !s->inuse;
        int release = cache_slab_freed_locked(c, s, before - s->inuse);
        sd_spin_unlock(&s->lock);
        if (release)
            cache_slab_release(c, s);
        else if (went_empty)
            cache_release_empty(c, 0);
    }
}
