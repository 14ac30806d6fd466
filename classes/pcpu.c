/*
 * classes/pcpu.c - per-CPU caches: set-up, refill, drain, fence (pcpu.h).
 *
 * Budget.  SLABDEFRAG_PERCPU_KB (default 2048) is what one CPU may cache
 * of the malloc classes.  Each cache gets an equal share of it, budget /
 * 72 (28 KiB by default), as a stack of cap = share / size objects,
 * between 2 and 256: 256 objects of 16..112 B, 28 of 1 KiB, 2 of 14..32
 * KiB.  The bound this gives (the sum of cap x size over the classes,
 * printed by the statistics) is 2070 KiB per CPU by default; typed caches
 * add their own share each.  Why that much: it is what jemalloc keeps per
 * thread in its tcache (about 200 small objects per class) and less than
 * tcmalloc's 3 MiB per CPU, and the refill and drain batches (cap / 2)
 * stay long enough that the slab locks are taken about once per 16..128
 * operations of the small classes that dominate most programs.  A thread
 * keeps nothing of it: 1,024 threads on 2 CPUs cache at most about 4 MiB,
 * and the transfer caches (xfer.h) one more CPU's worth: 6 MiB.
 *
 * Slot ranges: every cache id gets the same range [begin, begin + cap) of
 * every CPU's slot array, at its first use, from one bump pointer.  When
 * the 65,535 slots are gone, later caches go without a per-CPU cache
 * (their allocations take the slab locks).
 *
 * Locking: pcpu_lock serialises header set-up and drains of other CPUs.
 * It is the outermost allocator lock: a drain holds it while it returns
 * objects to their slabs (slab locks, list locks, segment leaves), and it
 * is never taken with another allocator lock held (classes/cache.c).
 * The fast paths take no lock; a thread's own overflow and refill go
 * through rseq batch pops and pushes, never through pcpu_lock, and through
 * the transfer caches' leaf locks.  Batches on their way between a stack
 * and a slab or a transfer cache are counted per CPU as begun and ended
 * (LIMBO_*), which pcpu_quiesce waits to meet.
 */
#define _GNU_SOURCE
#include "pcpu.h"

#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "debug.h"
#include "fmt.h"
#include "options.h"
#include "os.h"
#include "tcache.h"
#include "xfer.h"

int sd_pcpu_on;

static char *base;                      /* ncpu regions */
static unsigned ncpu;
static size_t mapped;                   /* bytes mapped at the start of
                                           every region (pcpu_lock) */
static sd_mutex pcpu_lock = SD_MUTEX_INIT;
static uint16_t slot_next = 1;          /* next unassigned slot */
static uint16_t id_begin[SD_MAX_CACHES];/* slot range of each id; 0 = none yet */
static uint16_t id_cap[SD_MAX_CACHES];  /* its cap; PCPU_NO_SLOTS = none left */
static unsigned id_hi;                  /* ids below this may be set up */

/* Address space.  A region is PCPU_REGION bytes apart from the next, but
 * only its first `mapped` bytes are mapped: the headers, the statistics
 * and the slots handed out so far, in steps of PCPU_STEP (the malloc
 * classes take about 4,400 slots, 35 KiB, by default).  So a CPU costs
 * PCPU_MAPPED_MIN of address space, not 1 MiB, which an address-space
 * limit (RLIMIT_AS) counts whether the pages are touched or not, and
 * machines declare hundreds of possible CPUs.  Slots past `mapped` are
 * mapped at their first assignment where nothing else has been put since;
 * where something has, the cache goes without a per-CPU cache. */
#define PCPU_STEP       (64u << 10)
#define PCPU_MAPPED_MIN (PCPU_SLOTS_OFF + PCPU_STEP)

#define PCPU_NO_SLOTS 0xffffu
#define CAP_MIN 2u
#define CAP_MAX 256u
#define PCPU_NSTATS 5                   /* counters per id: 3 hot ones, and
                                           the drain batches begun and ended */
enum { LIMBO_BEGIN = 3, LIMBO_END = 4 };
/* The batch counters (stat.h REFILL_OBJECTS..DRAIN_XFER), per CPU, of the
 * malloc classes only: they fit after the hot counters in the statistics
 * area, and they are what tells how well a class's stacks absorb its
 * traffic (objects per refill and drain, the transfer cache's share). */
#define PCPU_NBATCH 4
#define PCPU_BATCH_OFF (PCPU_STATS_OFF + SD_MAX_CACHES * PCPU_NSTATS * sizeof(unsigned long))
_Static_assert(PCPU_BATCH_OFF + SD_NCLASSES * PCPU_NBATCH * sizeof(unsigned long) <=
               PCPU_SLOTS_OFF, "the batch counters fit before the slots");
_Static_assert(SD_STAT_DRAIN_XFER - SD_STAT_REFILL_OBJECTS == PCPU_NBATCH - 1,
               "the batch counters are consecutive");

static inline struct pcpu_hdr *hdr_of(unsigned cpu, unsigned id)
{
    return (struct pcpu_hdr *)(base + ((size_t)cpu << PCPU_REGION_SHIFT)) + id;
}

static inline void **slots_of(unsigned cpu)
{
    return (void **)(base + ((size_t)cpu << PCPU_REGION_SHIFT) + PCPU_SLOTS_OFF);
}

static inline uint32_t *bounds_of(struct pcpu_hdr *h)
{
    return (uint32_t *)h;               /* begin and end, one store */
}

/* Possible CPUs from /sys (sysconf may allocate: it runs inside malloc). */
static unsigned possible_cpus(void)
{
    char buf[256];
    ssize_t n = os_read_file("/sys/devices/system/cpu/possible", buf, sizeof buf - 1);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    unsigned hi = 0, v = 0;
    int digits = 0;
    for (char *p = buf;; p++) {         /* the largest number in "0-3,8-11" */
        if (*p >= '0' && *p <= '9') {
            v = v * 10 + (unsigned)(*p - '0');
            digits = 1;
            continue;
        }
        if (digits && v > hi)
            hi = v;
        v = 0;
        digits = 0;
        if (!*p)
            break;
    }
    return hi + 1;
}

unsigned pcpu_cap(uint32_t size)
{
    size_t share = ((size_t)sd_opt.percpu_kb << 10) / SD_NCLASSES;
    size_t cap = share / size;
    if (cap < CAP_MIN)
        cap = CAP_MIN;
    if (cap > CAP_MAX)
        cap = CAP_MAX;
    return (unsigned)cap;
}

void pcpu_init(void)
{
    if (!SD_HAVE_RSEQ || !sd_opt.percpu || sd_opt.percpu_kb == 0)
        return;
    ncpu = possible_cpus();
    if (!ncpu || ncpu > 4096 || !rseq_setup())
        return;
    /* A guard page first: an overflow out of memory below never reaches
     * the stacks of object pointers. */
    void *m;
    size_t span = SD_PAGE_SIZE + ((size_t)ncpu << PCPU_REGION_SHIFT);
    if (os_map_sparse(span, &m))
        return;
    if (os_guard(m, SD_PAGE_SIZE)) {
        os_unmap(m, span);
        return;
    }
    base = (char *)m + SD_PAGE_SIZE;
    for (unsigned cpu = 0; cpu < ncpu; cpu++)        /* "Address space" */
        os_unmap(base + ((size_t)cpu << PCPU_REGION_SHIFT) + PCPU_MAPPED_MIN,
                 PCPU_REGION - PCPU_MAPPED_MIN);
    mapped = PCPU_MAPPED_MIN;
    __atomic_store_n(&sd_pcpu_on, 1, __ATOMIC_RELEASE);
}

int pcpu_thread_init(void)
{
    struct tcache *t = &sd_tc;
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE) || t->in_get ||
        t->state == TC_LIVE || !rseq_thread_ok())
        return 0;
    t->pcpu = base;
    return 1;
}

/* Map slots up to `slots` in every region (pcpu_lock held); 0 if they
 * cannot be ("Address space"). */
static int room_locked(size_t slots)
{
    SD_ASSERT(sd_mutex_held(&pcpu_lock));
    size_t want = (PCPU_SLOTS_OFF + slots * sizeof(void *) + PCPU_STEP - 1) & ~(size_t)(PCPU_STEP - 1);
    if (want <= mapped)
        return 1;
    for (unsigned cpu = 0; cpu < ncpu; cpu++) {
        char *r = base + ((size_t)cpu << PCPU_REGION_SHIFT);
        if (os_map_at(r + mapped, want - mapped)) {
            while (cpu-- > 0)
                os_unmap(base + ((size_t)cpu << PCPU_REGION_SHIFT) + mapped, want - mapped);
            return 0;
        }
    }
    mapped = want;
    return 1;
}

/* Give cache id its slot range (pcpu_lock held); 0 if none is left. */
static int id_assign_locked(const struct sd_cache *c)
{
    SD_ASSERT(sd_mutex_held(&pcpu_lock));
    unsigned id = c->id;
    if (id_cap[id])
        return id_cap[id] != PCPU_NO_SLOTS;
    unsigned cap = pcpu_cap(c->size);
    if ((unsigned)slot_next + cap > PCPU_MAX_SLOTS || !room_locked((size_t)slot_next + cap)) {
        id_cap[id] = PCPU_NO_SLOTS;
        return 0;
    }
    id_begin[id] = slot_next;
    slot_next = (uint16_t)(slot_next + cap);
    __atomic_store_n(&id_cap[id], (uint16_t)cap, __ATOMIC_RELEASE);
    if (id + 1 > id_hi)
        __atomic_store_n(&id_hi, id + 1, __ATOMIC_RELEASE);
    return 1;
}

/* Set up cache c's header on cpu; 0 if c gets no per-CPU cache. */
static int hdr_setup(const struct sd_cache *c, unsigned cpu)
{
    if (c->debug || c->dead)
        return 0;
    int ok = 1;
    sd_mutex_lock(&pcpu_lock);
    if (!id_assign_locked(c)) {
        ok = 0;
    } else {
        struct pcpu_hdr *h = hdr_of(cpu, c->id);
        if (!__atomic_load_n(bounds_of(h), __ATOMIC_RELAXED)) {
            /* One store: a pop or push sees all of it or nothing. */
            uint16_t b = id_begin[c->id], k = id_cap[c->id];
            struct pcpu_hdr v = { b, (uint16_t)(b + k), b, k };
            uint64_t w;
            memcpy(&w, &v, sizeof w);
            __atomic_store_n((uint64_t *)h, w, __ATOMIC_RELEASE);
        }
    }
    sd_mutex_unlock(&pcpu_lock);
    return ok;
}

/* ---------------------------------------------------------------- */
/* Statistics                                                        */

static inline int stat_is_batch(enum sd_stat i)
{
    return i >= SD_STAT_REFILL_OBJECTS && i <= SD_STAT_DRAIN_XFER;
}

static inline unsigned long *batch_of(unsigned cpu, uint16_t id, enum sd_stat i)
{
    return (unsigned long *)(base + ((size_t)cpu << PCPU_REGION_SHIFT) + PCPU_BATCH_OFF) +
           (size_t)id * PCPU_NBATCH + (i - SD_STAT_REFILL_OBJECTS);
}

/* Add n to batch counter i of malloc class id, on cpu's line. */
static inline void batch_add(unsigned cpu, uint16_t id, enum sd_stat i, unsigned long n)
{
    if (id < SD_NCLASSES && cpu < ncpu)
        __atomic_fetch_add(batch_of(cpu, id, i), n, __ATOMIC_RELAXED);
}

static unsigned stat_slot(enum sd_stat i)
{
    return i == SD_STAT_ALLOC_REFILL ? 0 : i == SD_STAT_ALLOC_DIRECT ? 1 : 2;
}

static inline unsigned long *counter_of(unsigned cpu, uint16_t id, unsigned k)
{
    return (unsigned long *)(base + ((size_t)cpu << PCPU_REGION_SHIFT) + PCPU_STATS_OFF) +
           (size_t)id * PCPU_NSTATS + k;
}

static inline unsigned long *stat_of(unsigned cpu, uint16_t id, enum sd_stat i)
{
    return counter_of(cpu, id, stat_slot(i));
}

static unsigned long counter_sum(uint16_t id, unsigned k)
{
    unsigned long n = 0;
    for (unsigned cpu = 0; cpu < ncpu; cpu++)
        n += __atomic_load_n(counter_of(cpu, id, k), __ATOMIC_ACQUIRE);
    return n;
}

void pcpu_stat_add(uint16_t id, enum sd_stat i, unsigned long n)
{
    /* This CPU's line: shared only by the threads that run here. */
    unsigned cpu = __atomic_load_n(&rseq_self()->cpu_id_start, __ATOMIC_RELAXED);
    __atomic_fetch_add(stat_of(cpu < ncpu ? cpu : 0, id, i), n, __ATOMIC_RELAXED);
}

unsigned long pcpu_stat_sum(uint16_t id, enum sd_stat i)
{
    unsigned long n = 0;
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE) || id >= SD_MAX_CACHES)
        return 0;
    if (stat_is_batch(i)) {
        for (unsigned cpu = 0; id < SD_NCLASSES && cpu < ncpu; cpu++)
            n += __atomic_load_n(batch_of(cpu, id, i), __ATOMIC_RELAXED);
        return n;
    }
    for (unsigned cpu = 0; cpu < ncpu; cpu++)
        n += __atomic_load_n(stat_of(cpu, id, i), __ATOMIC_RELAXED);
    return n;
}

static size_t hdr_cached(const struct pcpu_hdr *h)
{
    struct pcpu_hdr v;
    uint64_t w = __atomic_load_n((const uint64_t *)h, __ATOMIC_RELAXED);
    memcpy(&v, &w, sizeof v);
    if (v.begin == 0xffff || v.cur < v.begin)   /* locked: being drained */
        return 0;
    return (size_t)(v.cur - v.begin);
}

size_t pcpu_cached(uint16_t id)
{
    size_t n = 0;
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE) || id >= SD_MAX_CACHES ||
        !__atomic_load_n(&id_cap[id], __ATOMIC_ACQUIRE))
        return 0;
    for (unsigned cpu = 0; cpu < ncpu; cpu++)
        n += hdr_cached(hdr_of(cpu, id));
    return n + xfer_cached(id);
}

size_t pcpu_cpu_bytes(unsigned cpu)
{
    size_t bytes = 0;
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE) || cpu >= ncpu)
        return 0;
    unsigned hi = __atomic_load_n(&id_hi, __ATOMIC_ACQUIRE);
    for (unsigned id = 0; id < hi; id++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[id], __ATOMIC_ACQUIRE);
        if (c && __atomic_load_n(&id_cap[id], __ATOMIC_ACQUIRE))
            bytes += hdr_cached(hdr_of(cpu, id)) * c->size;
    }
    return bytes;
}

void pcpu_get_info(struct pcpu_info *out)
{
    memset(out, 0, sizeof *out);
    out->on = __atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE);
    out->ncpu = ncpu;
    out->budget_bytes = (size_t)sd_opt.percpu_kb << 10;
    out->transfer_bytes = out->on ? xfer_bytes() : 0;
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        out->bound_bytes += (size_t)pcpu_cap(sizeclass_size[i]) * sizeclass_size[i];
}

/* ---------------------------------------------------------------- */
/* Slow paths                                                        */

static void *refill_body(struct sd_cache *c);

/* errno: ENOMEM on failure, untouched on success (a futex wait or an OS
 * call on the way may set it). */
void *pcpu_alloc_slow(struct sd_cache *c)
{
    int saved = errno;
    void *p = refill_body(c);
    if (likely(p))
        errno = saved;
    return p;
}

static void *refill_body(struct sd_cache *c)
{
    struct tcache *t = &sd_tc;
    tcache_check_get(c->is_malloc ? "malloc" : "sd_cache_alloc");
    if (unlikely(c->debug))
        return debug_alloc(c);
    struct rseq_area *rs = rseq_self();
    unsigned cpu = __atomic_load_n(&rs->cpu_id_start, __ATOMIC_RELAXED);
    struct pcpu_hdr *h = hdr_of(cpu, c->id);
    uint32_t bounds = __atomic_load_n(bounds_of(h), __ATOMIC_RELAXED);
    if (!bounds) {                              /* first use on this CPU */
        if (!hdr_setup(c, cpu))
            return cache_alloc_direct(c, NULL, 0);
        void *p = pcpu_pop(t->pcpu, rs, c->id);
        if (p) {
            pcpu_tsan_acquire(p);
            return cache_untag(c, p);
        }
        bounds = __atomic_load_n(bounds_of(h), __ATOMIC_RELAXED);
    }
    if (bounds == PCPU_LOCKED_BOUNDS)           /* a drain is under way */
        return cache_alloc_direct(c, NULL, 0);
    /* Refill half the stack, from the transfer cache or else from the
     * slabs; the first object is ours.  A batch from the transfer cache
     * is on no stack and no freelist until it is pushed: counted as
     * begun and ended, as a drain's (pcpu_quiesce). */
    unsigned want = __atomic_load_n(&h->cap, __ATOMIC_RELAXED) / 2 + 1, got;
    void *buf[CAP_MAX / 2 + 1];
    struct slab *src = NULL;
    unsigned long *limbo_end = NULL;
    if (c->is_malloc) {
        __atomic_fetch_add(counter_of(cpu, c->id, LIMBO_BEGIN), 1, __ATOMIC_SEQ_CST);
        limbo_end = counter_of(cpu, c->id, LIMBO_END);
        got = xfer_take(c, buf, want);
        if (!got) {
            __atomic_fetch_add(limbo_end, 1, __ATOMIC_RELEASE);
            limbo_end = NULL;
        }
    }
    if (!limbo_end) {
        src = cache_take_refill(c, buf, want, &got);
        if (!src) {
            errno = ENOMEM;
            return NULL;
        }
    }
    pcpu_stat_add(c->id, SD_STAT_ALLOC_REFILL, 1);
    batch_add(cpu, c->id, SD_STAT_REFILL_OBJECTS, got);
    if (!src)
        batch_add(cpu, c->id, SD_STAT_REFILL_XFER, 1);
    if (src && got > 1) {
        /* The slab hands objects out in address order (a resequenced
         * freelist): the stack must pop them in that order too. */
        for (unsigned i = 1, j = got - 1; i < j; i++, j--) {
            void *x = buf[i];
            buf[i] = buf[j];
            buf[j] = x;
        }
    }
    if (got > 1) {
        for (unsigned i = 1; i < got; i++)
            pcpu_tsan_release(buf[i]);
        unsigned pushed = pcpu_push_n(t->pcpu, rs, c->id, buf + 1, got - 1);
        if (pushed < got - 1)                   /* migrated, or another thread filled it */
            cache_return_objects(buf + 1 + pushed, got - 1 - pushed, "malloc");
    }
    /* Every object is on a stack or back on its slab: a vacate waiting
     * for src, or for the batch, may go on.  buf[0] is still ours, so src
     * cannot be empty and released under this store. */
    if (src)
        __atomic_fetch_sub(&src->feeding, 1, __ATOMIC_RELEASE);
    else
        __atomic_fetch_add(limbo_end, 1, __ATOMIC_RELEASE);
    cache_decay_tick();
    return cache_untag(c, buf[0]);
}

static void drain_body(struct slab *s, void *p, const char *call, int why);

/* free() keeps errno (glibc 2.33+). */
void pcpu_free_slow(struct slab *s, void *p, const char *call, int why)
{
    int saved = errno;
    drain_body(s, p, call, why);
    errno = saved;
}

static void drain_body(struct slab *s, void *p, const char *call, int why)
{
    struct tcache *t = &sd_tc;
    tcache_check_get(call);
    if (why == 2)
        report_double_free(call, p, s->cache);
    unsigned id = __atomic_load_n(&s->fbin, __ATOMIC_RELAXED);
    struct sd_cache *c = id < SD_MAX_CACHES ? s->cache : NULL;
    if (!c || c->debug || c->dead) {            /* frozen, meshed, empty, debug... */
        cache_free_slow(s, p, call);
        return;
    }
    struct rseq_area *rs = rseq_self();
    unsigned cpu = __atomic_load_n(&rs->cpu_id_start, __ATOMIC_RELAXED);
    struct pcpu_hdr *h = hdr_of(cpu, id);
    uint32_t bounds = __atomic_load_n(bounds_of(h), __ATOMIC_RELAXED);
    if (!bounds) {
        int r = hdr_setup(c, cpu) ? pcpu_push(t->pcpu, rs, s, p) : 1;
        if (r == 2)
            report_double_free(call, p, c);
        if (r)
            cache_free_slow(s, p, call);
        return;
    }
    if (bounds == PCPU_LOCKED_BOUNDS) {
        cache_free_slow(s, p, call);
        return;
    }
    /* Full: half of the stack, and p, go back to their slabs.  While they
     * are on the way they are on no stack and no freelist: the batch is
     * counted as begun and ended, and a vacate waits for the two counts
     * to meet (pcpu_quiesce). */
    void *buf[CAP_MAX / 2 + 1];
    __atomic_fetch_add(counter_of(cpu, (uint16_t)id, LIMBO_BEGIN), 1, __ATOMIC_SEQ_CST);
    unsigned half = __atomic_load_n(&h->cap, __ATOMIC_RELAXED) / 2;
    unsigned n = pcpu_pop_n(t->pcpu, rs, id, buf, half ? half : 1);
    for (unsigned i = 0; i < n; i++)
        pcpu_tsan_acquire(buf[i]);
    buf[n++] = p;
    pcpu_stat_add(c->id, SD_STAT_FREE_REMOTE, 1);
    unsigned put = xfer_put(c, buf, n);         /* another CPU's next refill */
    batch_add(cpu, c->id, SD_STAT_DRAIN_OBJECTS, n);
    batch_add(cpu, c->id, SD_STAT_DRAIN_XFER, put);
    if (put < n)
        cache_return_objects(buf + put, n - put, call);
    __atomic_fetch_add(counter_of(cpu, (uint16_t)id, LIMBO_END), 1, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- */
/* Draining other CPUs                                               */

void pcpu_drain(const struct sd_cache *only)
{
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE))
        return;
    sd_mutex_lock(&pcpu_lock);
    unsigned lo = only ? only->id : 0;
    unsigned hi = only ? only->id + 1u : id_hi;
    int any = 0;
    for (unsigned cpu = 0; cpu < ncpu; cpu++)
        for (unsigned id = lo; id < hi; id++) {
            if (id_cap[id] == 0 || id_cap[id] == PCPU_NO_SLOTS)
                continue;
            /* Every header that is set up, even an empty one: a push that
             * read the bounds (and a frozen slab's old fbin) before this
             * store may still commit after it, until the fence. */
            struct pcpu_hdr *h = hdr_of(cpu, id);
            if (!__atomic_load_n(bounds_of(h), __ATOMIC_RELAXED))
                continue;               /* not set up: nothing can push */
            __atomic_store_n(bounds_of(h), PCPU_LOCKED_BOUNDS, __ATOMIC_RELAXED);
            any = 1;
        }
    if (any && rseq_fence() == 0) {
        /* No push or pop that read the old bounds can commit now; the
         * stacks are ours until the bounds are back. */
        for (unsigned cpu = 0; cpu < ncpu; cpu++)
            for (unsigned id = lo; id < hi; id++) {
                struct pcpu_hdr *h = hdr_of(cpu, id);
                if (id_cap[id] == 0 || id_cap[id] == PCPU_NO_SLOTS ||
                    __atomic_load_n(bounds_of(h), __ATOMIC_RELAXED) != PCPU_LOCKED_BOUNDS)
                    continue;
                uint16_t b = id_begin[id];
                unsigned n = (unsigned)(__atomic_load_n(&h->cur, __ATOMIC_RELAXED) - b);
                for (unsigned i = 0; i < n; i++)
                    pcpu_tsan_acquire(slots_of(cpu)[b + i]);
                if (n)
                    cache_return_objects(slots_of(cpu) + b, n, "free");
                __atomic_store_n(&h->cur, b, __ATOMIC_RELAXED);
                __atomic_store_n(bounds_of(h),
                                 (uint32_t)b | (uint32_t)(b + id_cap[id]) << 16,
                                 __ATOMIC_RELEASE);
            }
    } else if (any) {
        /* No fence (cannot happen once registered): unlock untouched. */
        for (unsigned cpu = 0; cpu < ncpu; cpu++)
            for (unsigned id = lo; id < hi; id++) {
                struct pcpu_hdr *h = hdr_of(cpu, id);
                if (id_cap[id] && id_cap[id] != PCPU_NO_SLOTS &&
                    __atomic_load_n(bounds_of(h), __ATOMIC_RELAXED) == PCPU_LOCKED_BOUNDS)
                    __atomic_store_n(bounds_of(h),
                                     (uint32_t)id_begin[id] |
                                     (uint32_t)(id_begin[id] + id_cap[id]) << 16,
                                     __ATOMIC_RELEASE);
            }
    }
    xfer_flush(only);                   /* what the stacks handed on */
    sd_mutex_unlock(&pcpu_lock);
}

/* What the CPUs' caches have done: every counter of every CPU, and each
 * stack's top (pops and pushes that cancel out are missed: then an idle
 * CPU is taken for a busy one, or a drain refills once more). */
static uint64_t activity(void)
{
    uint64_t sig = 0;
    unsigned hi = __atomic_load_n(&id_hi, __ATOMIC_RELAXED);
    for (unsigned cpu = 0; cpu < ncpu; cpu++)
        for (unsigned id = 0; id < hi; id++) {
            for (unsigned k = 0; k < PCPU_NSTATS; k++)
                sig += __atomic_load_n(counter_of(cpu, (uint16_t)id, k), __ATOMIC_RELAXED);
            uint64_t w = __atomic_load_n((const uint64_t *)hdr_of(cpu, id), __ATOMIC_RELAXED);
            sig = sig * 31 + w;
        }
    return sig;
}

int pcpu_drain_idle(void)
{
    static uint64_t last;               /* the shrinker thread's alone */
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE))
        return 0;
    uint64_t now = activity();
    int idle = now == last;
    last = now;
    if (!idle)
        return 0;
    size_t cached = 0;
    for (unsigned cpu = 0; cpu < ncpu; cpu++)
        cached += pcpu_cpu_bytes(cpu);
    if (!cached)
        return 0;
    pcpu_drain(NULL);
    last = activity();
    return 1;
}

int pcpu_quiesce(const struct sd_cache *c, struct slab *s)
{
    if (!__atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE))
        return 1;
    /* Closed first: no batch goes into or out of the transfer cache from
     * here on, and what it held goes back to the slabs; the batches that
     * came out of it before are waited for below, as limbo. */
    xfer_close(c);
    pcpu_drain(c);
    for (unsigned i = 0;; i++) {
        /* Ends first, then begins: equal means that at some instant in
         * between no batch was on its way (both only grow). */
        unsigned long ended = counter_sum(c->id, LIMBO_END);
        unsigned long begun = counter_sum(c->id, LIMBO_BEGIN);
        if (ended == begun && !__atomic_load_n(&s->feeding, __ATOMIC_ACQUIRE))
            break;
        if (i == 2000) {
            xfer_open(c);
            return 0;                   /* about 20 ms: a thread was preempted */
        }
        if (i < 64)
            __builtin_ia32_pause();
        else
            os_sleep_us(10);
    }
    /* A refill may have pushed objects of s after the first drain. */
    pcpu_drain(c);
    xfer_open(c);
    return 1;
}

/* ---------------------------------------------------------------- */
/* Fork                                                              */

void pcpu_drain_lock(void)
{
    sd_mutex_lock(&pcpu_lock);
    xfer_lock_all();
}

void pcpu_drain_unlock(int child)
{
    xfer_unlock_all(child);
    if (child) {
        sd_mutex_reset_child(&pcpu_lock);
        if (pcpu_on())
            rseq_after_fork_child();
    } else {
        sd_mutex_unlock(&pcpu_lock);
    }
}
