/*
 * core/large.c - blocks above 32 KiB: which kind (extent or huge), the
 * per-CPU stashes of freed extents, the decay, statistics (see large.h).
 *
 * Locking.  A stash's spinlock guards its slots and counters; it is held
 * for a scan of at most LARGE_STASH_SLOTS slots and never with another
 * allocator lock (evicted blocks go to their arena after it is dropped).
 * The slot count is also read without the lock (relaxed) to skip empty
 * stashes.  A stash is chosen by the CPU the thread runs on now: a thread
 * preempted while holding one makes another thread on that CPU wait at
 * most one time slice, as with any spinlock (sd_spin sleeps on a futex
 * after a while).  fork: large_lock_all() takes the huge-block lock, the
 * arena locks, then every stash lock (classes/fork.c); the child counts
 * only its one thread as bound to an arena.  The bound-thread counters are
 * atomics; a thread's end (thread_ends) takes the stash locks one at a
 * time, then its arena's lock, then the huge-block lock, never two at once.
 *
 * A stashed extent is XS_CACHED: freed for the program (a second free is
 * a double free, malloc_usable_size rejects it) but still in use for its
 * arena.  The free that stashes it makes USED -> CACHED with one atomic
 * compare-and-swap, which is also the double-free check, whether the
 * block then goes to a stash or to its arena.
 */
#define _GNU_SOURCE
#include "large.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "extent.h"
#include "huge.h"
#include "options.h"
#include "os.h"

#define NSTASH 64               /* stashes: CPU % NSTASH */

struct stash_slot {
    void    *p;                 /* block start */
    uint32_t npages;
    uint64_t since;             /* ns, when it was freed */
};

struct stash {
    sd_spin  lock;
    uint32_t n;                 /* slots in use (relaxed reads unlocked) */
    uint32_t pages;             /* pages of the blocks held */
    uint64_t expire;            /* ns when the oldest slot decays, 0: empty
                                   (relaxed reads unlocked) */
    struct stash_slot slot[LARGE_STASH_SLOTS];
} __attribute__((aligned(64)));

static struct stash stashes[NSTASH];
static unsigned stash_hi;       /* stashes used: [0, stash_hi) (atomic max) */

static inline unsigned current_cpu(void)
{
    int c = sched_getcpu();     /* rseq's cpu_id, or the vDSO */
    return c < 0 ? 0 : (unsigned)c;
}

/* A thread allocates from one arena (threads take them in turn): its
 * blocks share chunks wherever it runs.  Frees go to the owner arena.
 *
 * When the last thread bound to an arena ends, the arena is retired: its
 * stashed blocks go back to it and every dirty extent of it is purged at
 * once, without waiting for the decay (jemalloc purges an arena whose
 * last thread ends the same way).  No thread allocates from it any more
 * until the turn comes round again, so its dirty pages would only be
 * reused by chance.  When no bound thread is left at all, the cached huge
 * mappings are unmapped too.  A thread is counted out by a pthread key's
 * destructor; one whose key could not be set stays counted (its arena is
 * then left to the decay). */
static __thread unsigned my_arena __attribute__((tls_model("initial-exec")));
static unsigned arena_turn;
static unsigned arena_threads[XARENAS];     /* bound threads (atomic) */
static unsigned bound_threads;              /* their sum (atomic) */
static pthread_key_t retire_key;
static int retire_state;        /* 0: no key yet, 1: being made, 2: ready,
                                   -1: pthread_key_create failed */

static void stash_flush_arena(unsigned arena);

static void thread_ends(void *v)
{
    unsigned a = (unsigned)(uintptr_t)v - 1;
    my_arena = 0;               /* a later destructor may bind again */
    if (__atomic_sub_fetch(&arena_threads[a], 1, __ATOMIC_ACQ_REL) == 0) {
        stash_flush_arena(a);
        extent_purge_arena(a);
    }
    if (__atomic_sub_fetch(&bound_threads, 1, __ATOMIC_ACQ_REL) == 0)
        huge_trim();
}

static int retire_key_ready(void)
{
    int st = __atomic_load_n(&retire_state, __ATOMIC_ACQUIRE);
    if (st)
        return st == 2;
    if (!__atomic_compare_exchange_n(&retire_state, &st, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return st == 2;         /* another thread is making it: not counted */
    st = pthread_key_create(&retire_key, thread_ends) ? -1 : 2;
    __atomic_store_n(&retire_state, st, __ATOMIC_RELEASE);
    return st == 2;
}

static __attribute__((noinline, cold)) unsigned arena_bind(void)
{
    unsigned a = __atomic_fetch_add(&arena_turn, 1, __ATOMIC_RELAXED) % XARENAS;
    my_arena = a + 1;
    /* Counted before the key is set: a thread whose key fails stays
     * counted, so its arena is never retired under it. */
    __atomic_add_fetch(&arena_threads[a], 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&bound_threads, 1, __ATOMIC_ACQ_REL);
    if (retire_key_ready())
        pthread_setspecific(retire_key, (void *)(uintptr_t)(a + 1));
    return a + 1;
}

static inline unsigned thread_arena(void)
{
    unsigned a = my_arena;
    if (unlikely(!a))
        a = arena_bind();
    return a - 1;
}

static inline size_t pages_of(size_t size)
{
    size_t n = (size + SD_PAGE_SIZE - 1) / SD_PAGE_SIZE;
    return n ? n : 1;           /* memalign(big, 0): a real block */
}

/* ---------------------------------------------------------------- */
/* Stashes                                                           */

static void stash_expire_locked(struct stash *st)
{
    SD_ASSERT(sd_spin_held(&st->lock));
    uint64_t oldest = 0;
    for (unsigned i = 0; i < st->n; i++)
        if (!oldest || st->slot[i].since < oldest)
            oldest = st->slot[i].since;
    __atomic_store_n(&st->expire,
                     oldest ? oldest + (uint64_t)sd_opt.decay_ms * 1000000ull : 0,
                     __ATOMIC_RELAXED);
}

static void stash_remove_locked(struct stash *st, unsigned i)
{
    SD_ASSERT(sd_spin_held(&st->lock));
    st->pages -= st->slot[i].npages;
    st->slot[i] = st->slot[st->n - 1];
    __atomic_store_n(&st->n, st->n - 1, __ATOMIC_RELAXED);
}

/* A stashed block of npages..npages + npages/8 pages (the smallest), now
 * USED again, or NULL. */
static void *stash_take(unsigned cpu, size_t npages)
{
    struct stash *st = &stashes[cpu % NSTASH];
    if (!__atomic_load_n(&st->n, __ATOMIC_RELAXED))
        return NULL;
    void *p = NULL;
    sd_spin_lock(&st->lock);
    unsigned best = LARGE_STASH_SLOTS;
    for (unsigned i = 0; i < st->n; i++) {
        size_t np = st->slot[i].npages;
        if (np >= npages && np - npages <= npages / 8 &&
            (best == LARGE_STASH_SLOTS || np < st->slot[best].npages))
            best = i;
    }
    if (best != LARGE_STASH_SLOTS) {
        p = st->slot[best].p;
        stash_remove_locked(st, best);
        stash_expire_locked(st);
    }
    sd_spin_unlock(&st->lock);
    if (p)
        __atomic_store_n(&extent_page_of(p)->state, XS_USED, __ATOMIC_RELEASE);
    return p;
}

static void release_all(void **v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        extent_release(extent_page_of(v[i]));
}

/* Keep the CACHED block p of npages in this CPU's stash, evicting the
 * oldest blocks to their arenas as needed. */
static void stash_put(unsigned cpu, void *p, size_t npages)
{
    unsigned i = cpu % NSTASH;
    struct stash *st = &stashes[i];
    if (__atomic_load_n(&stash_hi, __ATOMIC_RELAXED) <= i) {
        unsigned hi = __atomic_load_n(&stash_hi, __ATOMIC_RELAXED);
        while (hi <= i && !__atomic_compare_exchange_n(&stash_hi, &hi, i + 1, 1,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
    void *evict[LARGE_STASH_SLOTS];
    unsigned nevict = 0;
    uint64_t now = os_now_ns();
    sd_spin_lock(&st->lock);
    while (st->n && (st->n == LARGE_STASH_SLOTS ||
                     st->pages + npages > LARGE_STASH_PAGES)) {
        unsigned old = 0;
        for (unsigned j = 1; j < st->n; j++)
            if (st->slot[j].since < st->slot[old].since)
                old = j;
        evict[nevict++] = st->slot[old].p;
        stash_remove_locked(st, old);
    }
    st->slot[st->n] = (struct stash_slot){ p, (uint32_t)npages, now };
    st->pages += (uint32_t)npages;
    __atomic_store_n(&st->n, st->n + 1, __ATOMIC_RELAXED);
    stash_expire_locked(st);
    sd_spin_unlock(&st->lock);
    release_all(evict, nevict);
}

/* Give the blocks of stash st freed before `before` ns, and of arena
 * `arena` (any: XARENAS), back to their arena. */
static void stash_drain(struct stash *st, uint64_t before, unsigned arena)
{
    void *out[LARGE_STASH_SLOTS];
    unsigned n = 0;
    sd_spin_lock(&st->lock);
    for (unsigned j = 0; j < st->n;) {
        if (st->slot[j].since < before &&
            (arena == XARENAS || extent_arena_of(st->slot[j].p) == arena)) {
            out[n++] = st->slot[j].p;
            stash_remove_locked(st, j);
        } else {
            j++;
        }
    }
    stash_expire_locked(st);
    sd_spin_unlock(&st->lock);
    release_all(out, n);
}

/* Give the stashed blocks freed before `before` ns back to their arenas. */
static void stash_flush(uint64_t before)
{
    unsigned hi = __atomic_load_n(&stash_hi, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < hi; i++) {
        uint64_t exp = __atomic_load_n(&stashes[i].expire, __ATOMIC_RELAXED);
        if (!exp || (before != UINT64_MAX &&
                     exp - (uint64_t)sd_opt.decay_ms * 1000000ull >= before))
            continue;
        stash_drain(&stashes[i], before, XARENAS);
    }
}

/* Give the stashed blocks of arena `arena` back to it (it is retired). */
static void stash_flush_arena(unsigned arena)
{
    unsigned hi = __atomic_load_n(&stash_hi, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < hi; i++)
        if (__atomic_load_n(&stashes[i].n, __ATOMIC_RELAXED))
            stash_drain(&stashes[i], UINT64_MAX, arena);
}

/* ---------------------------------------------------------------- */
/* The malloc family's large paths                                   */

/* No chunk could be mapped for the thread's arena (an address-space
 * limit, RLIMIT_AS, has no 64 MiB left): the room in the other arenas'
 * chunks first, then a mapping of the block's own size (a huge block),
 * then the same again, and a chunk tried once more, once the stashes and
 * the cached huge mappings are given back.  So a program gets its last megabytes under the limit as
 * it would from glibc, which maps such blocks one by one too. */
static __attribute__((noinline, cold)) void *large_alloc_tight(size_t size, size_t align,
                                                               int zero)
{
    size_t n = pages_of(size);
    for (int round = 0; round < 2; round++) {
        unsigned own = thread_arena();
        for (unsigned i = 1; i <= XARENAS; i++) {
            int fresh = 0;
            void *p = extent_alloc((own + i) % XARENAS, n, align / SD_PAGE_SIZE, &fresh,
                                   round && i == XARENAS);
            if (p) {
                if (zero && !fresh)
                    memset(p, 0, n * SD_PAGE_SIZE);
                return p;
            }
        }
        void *p = huge_alloc(size, align, zero);
        if (p || round)
            return p;
        large_trim();
        large_release_address_space();
    }
    return NULL;
}

void *large_alloc(size_t size, size_t align, int zero)
{
    if (align < SD_PAGE_SIZE)
        align = SD_PAGE_SIZE;
    if (size > LARGE_EXTENT_MAX || align > LARGE_ALIGN_MAX)
        return huge_alloc(size, align, zero);
    size_t n = pages_of(size);
    unsigned cpu = current_cpu();
    void *p = align == SD_PAGE_SIZE ? stash_take(cpu, n) : NULL;
    int fresh = 0;
    if (!p) {
        p = extent_alloc(thread_arena(), n, align / SD_PAGE_SIZE, &fresh, 1);
        if (unlikely(!p))
            return large_alloc_tight(size, align, zero);
    }
    if (zero && !fresh)
        memset(p, 0, n * SD_PAGE_SIZE);
    return p;
}

size_t large_usable(const void *p)
{
    struct xpage *x = extent_used(p);
    if (x)
        return (size_t)x->npages * SD_PAGE_SIZE;
    if (extent_page_of(p))
        return 0;
    return huge_usable(p);
}

int large_free(void *p)
{
    struct xpage *x = extent_page_of(p);
    if (!x)
        return huge_free(p);
    if (((uintptr_t)p & (SD_PAGE_SIZE - 1)) || !x->first)
        return -1;
    uint8_t st = XS_USED;
    if (!__atomic_compare_exchange_n(&x->state, &st, XS_CACHED, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return st == XS_INSIDE ? -1 : -2;
    size_t n = x->npages;
    if (n <= LARGE_STASH_MAX && sd_opt.decay_ms)
        stash_put(current_cpu(), p, n);
    else
        extent_release(x);
    return 0;
}

void *large_realloc(void *p, size_t size)
{
    struct xpage *x = extent_page_of(p);
    if (!x)
        return huge_realloc(p, size);
    if (!extent_used(p)) {
        errno = EINVAL;
        return NULL;
    }
    size_t have = (size_t)x->npages * SD_PAGE_SIZE;
    if (size <= LARGE_EXTENT_MAX && extent_resize(x, pages_of(size)) == 0)
        return p;
    void *q = large_alloc(size, 0, 0);
    if (!q)
        return NULL;
    memcpy(q, p, have < size ? have : size);
    large_free(p);
    return q;
}

/* ---------------------------------------------------------------- */
/* Purging                                                           */

size_t large_trim(void)
{
    stash_flush(UINT64_MAX);
    return extent_purge(UINT64_MAX) + huge_trim();
}

size_t large_release_address_space(void)
{
    if (!os_as_limited())
        return 0;
    stash_flush(UINT64_MAX);
    return huge_trim() + extent_trim_tails();
}

size_t large_purge_decayed(void)
{
    uint64_t now = os_now_ns(), d = (uint64_t)sd_opt.decay_ms * 1000000ull;
    uint64_t before = now > d ? now - d : 0;
    stash_flush(before);
    return extent_purge(before) + huge_decay();
}

void large_decay(void)
{
    uint64_t now = os_now_ns(), d = (uint64_t)sd_opt.decay_ms * 1000000ull;
    unsigned hi = __atomic_load_n(&stash_hi, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < hi; i++) {
        uint64_t exp = __atomic_load_n(&stashes[i].expire, __ATOMIC_RELAXED);
        if (exp && now >= exp) {
            stash_flush(now > d ? now - d : 0);
            break;
        }
    }
    extent_decay(now);
    huge_decay();
}

/* ---------------------------------------------------------------- */
/* Statistics and fork                                               */

void large_get_stats(struct large_stats *out)
{
    memset(out, 0, sizeof *out);
    struct extent_stats e;
    extent_get_stats(&e);
    unsigned hi = __atomic_load_n(&stash_hi, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < hi; i++) {
        sd_spin_lock(&stashes[i].lock);
        out->cached_blocks += stashes[i].n;
        out->cached_bytes += (size_t)stashes[i].pages * SD_PAGE_SIZE;
        sd_spin_unlock(&stashes[i].lock);
    }
    size_t hmaps;
    huge_usage(&out->huge_blocks, &out->huge_bytes, &out->huge_cached_bytes, &hmaps);
    out->huge_cached_maps = hmaps;
    /* The stashes are read after the arenas: a block freed meanwhile may
     * be counted in both, never in neither. */
    out->extent_blocks = e.used_blocks > out->cached_blocks
                       ? e.used_blocks - out->cached_blocks : 0;
    out->extent_bytes = e.used_bytes > out->cached_bytes
                      ? e.used_bytes - out->cached_bytes : 0;
    out->blocks = out->extent_blocks + out->huge_blocks;
    out->bytes = out->extent_bytes + out->huge_bytes;
    out->dirty_extents = e.dirty_extents;
    out->dirty_bytes = e.dirty_bytes;
    out->purged_extents = e.purged_extents;
    out->purged_bytes = e.purged_bytes;
    out->purged_total = e.purged_total;
    out->chunks = e.chunks;
    out->chunk_bytes = e.chunk_bytes;
    out->mappings = 2 * e.chunks + out->huge_blocks + hmaps;   /* a chunk: guard + rest */
}

void large_lock_all(void)
{
    huge_lock_all();
    extent_lock_all();
    for (unsigned i = 0; i < NSTASH; i++)
        sd_spin_lock(&stashes[i].lock);
}

void large_unlock_all(int child)
{
    for (unsigned i = NSTASH; i-- > 0;) {
        if (child)      /* the child runs as a new tid */
            __atomic_store_n(&stashes[i].lock.holder, 0, __ATOMIC_RELEASE);
        else
            sd_spin_unlock(&stashes[i].lock);
    }
    if (child) {                /* the forking thread is the only one */
        for (unsigned i = 0; i < XARENAS; i++)
            __atomic_store_n(&arena_threads[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&bound_threads, my_arena ? 1 : 0, __ATOMIC_RELAXED);
        if (my_arena)
            __atomic_store_n(&arena_threads[my_arena - 1], 1, __ATOMIC_RELAXED);
    }
    extent_unlock_all(child);
    huge_unlock_all(child);
}
