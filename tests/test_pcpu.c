/*
 * tests/test_pcpu.c - the per-CPU primitives (core/rseq.h) on a private
 * region, and the per-CPU caches through the allocator (classes/pcpu.h).
 *
 *   meson test -C build --suite unit
 *   build/tests/test-pcpu --verbose
 *
 * The primitives are tested against the contract of rseq.h: LIFO push and
 * pop, bounds, a locked or unset header failing both ways, the double
 * free of the top object, conservation of objects under forced
 * migrations (sched_setaffinity), and under a drainer that locks, fences
 * and empties the stacks as pcpu_drain does.  Skipped where rseq is not
 * available (the allocator then runs per thread).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "mallocfam.h"
#include "pcpu.h"
#include "rseq.h"
#include "sizeclass.h"
#include "xfer.h"

#if SD_HAVE_RSEQ

#define ID 3
#define CAP 64
#define NCPU_MAX 64

static char *region;
static unsigned ncpus;

/* A fake slab: only the routing field at fbin's offset matters here. */
static struct slab fake;

static struct pcpu_hdr *hdr(unsigned cpu)
{
    return (struct pcpu_hdr *)(region + ((size_t)cpu << PCPU_REGION_SHIFT)) + ID;
}

static void **slots(unsigned cpu)
{
    return (void **)(region + ((size_t)cpu << PCPU_REGION_SHIFT) + PCPU_SLOTS_OFF);
}

static void setup(void)
{
    if (!rseq_setup())
        cr_skip_test("rseq or membarrier's rseq fence is not available here");
    long n = sysconf(_SC_NPROCESSORS_CONF);
    ncpus = n > 0 && n < NCPU_MAX ? (unsigned)n : NCPU_MAX;
    region = mmap(NULL, (size_t)ncpus << PCPU_REGION_SHIFT, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    cr_assert_neq(region, MAP_FAILED);
    for (unsigned c = 0; c < ncpus; c++)
        *hdr(c) = (struct pcpu_hdr){ 1, 1 + CAP, 1, CAP };
    fake.fbin = ID;
}

static int push(void *p)
{
    return pcpu_push(region, rseq_self(), &fake, p);
}

static void pin(unsigned cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

Test(pcpu, push_pop_lifo_and_bounds, .init = setup)
{
    pin(0);
    cr_assert_null(pcpu_pop(region, rseq_self(), ID), "an empty stack popped");
    for (uintptr_t i = 1; i <= CAP; i++)
        cr_assert_eq(push((void *)i), 0, "push %lu of %d failed", (unsigned long)i, CAP);
    cr_assert_eq(push((void *)1000), 1, "a full stack took a push");
    cr_assert_eq(hdr(0)->cur, 1 + CAP);
    for (uintptr_t i = CAP; i >= 1; i--)
        cr_assert_eq((uintptr_t)pcpu_pop(region, rseq_self(), ID), i, "not LIFO");
    cr_assert_null(pcpu_pop(region, rseq_self(), ID));
    cr_assert_eq(hdr(0)->cur, 1);
}

Test(pcpu, batch_push_pop, .init = setup)
{
    pin(0);
    void *in[CAP + 8], *out[CAP + 8];
    for (uintptr_t i = 0; i < CAP + 8; i++)
        in[i] = (void *)(i + 1);
    cr_assert_eq(pcpu_push_n(region, rseq_self(), ID, in, 10), 10);
    cr_assert_eq(pcpu_push_n(region, rseq_self(), ID, in + 10, CAP), CAP - 10,
                 "push_n did not stop at the cap");
    cr_assert_eq(pcpu_pop_n(region, rseq_self(), ID, out, 5), 5);
    for (unsigned i = 0; i < 5; i++)                /* the top five, bottom first */
        cr_assert_eq((uintptr_t)out[i], (uintptr_t)(CAP - 4 + i));
    cr_assert_eq(pcpu_pop_n(region, rseq_self(), ID, out, CAP + 8), CAP - 5);
    cr_assert_eq((uintptr_t)out[0], 1);
    cr_assert_eq(pcpu_pop_n(region, rseq_self(), ID, out, 4), 0);
}

Test(pcpu, locked_and_unset_headers_fail, .init = setup)
{
    pin(0);
    cr_assert_eq(push((void *)7), 0);
    __atomic_store_n((uint32_t *)hdr(0), PCPU_LOCKED_BOUNDS, __ATOMIC_RELAXED);
    void *x = (void *)8;
    cr_assert_eq(push(x), 1, "a locked stack took a push");
    cr_assert_null(pcpu_pop(region, rseq_self(), ID), "a locked stack popped");
    cr_assert_eq(pcpu_push_n(region, rseq_self(), ID, &x, 1), 0);
    cr_assert_eq(pcpu_pop_n(region, rseq_self(), ID, &x, 1), 0);
    cr_assert_eq(hdr(0)->cur, 2, "a failed sequence wrote cur");
    fake.fbin = SD_BIN_NONE;                        /* never set up: fails */
    *hdr(0) = (struct pcpu_hdr){ 1, 1 + CAP, 1, CAP };
    cr_assert_eq(push(x), 1, "a push went through the unset header");
}

Test(pcpu, double_free_of_top_detected, .init = setup)
{
    pin(0);
    cr_assert_eq(push((void *)5), 0);
    cr_assert_eq(push((void *)5), 2, "the same object pushed twice in a row");
    cr_assert_eq(push((void *)6), 0);
    cr_assert_eq(pcpu_pop(region, rseq_self(), ID), (void *)6);
    cr_assert_eq(pcpu_pop(region, rseq_self(), ID), (void *)5);
    cr_assert_eq(push((void *)5), 0, "an object popped and freed again is no double free");
}

/* ---------------------------------------------------------------- */
/* Conservation under migration and drains                           */

#define NTOK 4000
#define NWORK 4

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pool[NTOK * 2];
static unsigned npool;
static volatile int stop_all;
static unsigned long drains, migrations;

static void pool_put(void **v, unsigned *n, unsigned keep)
{
    pthread_mutex_lock(&pool_lock);
    while (*n > keep && npool < NTOK * 2)
        pool[npool++] = v[--*n];
    pthread_mutex_unlock(&pool_lock);
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *mine[256];
    unsigned n = 0;
    struct rseq_area *rs = rseq_self();
    for (unsigned long it = 0; !stop_all; it++) {
        if ((it & 4095) == 0) {                     /* force a migration */
            pin(rand_r(&seed) % ncpus);
            __atomic_fetch_add(&migrations, 1, __ATOMIC_RELAXED);
        }
        if (n == 0) {
            pthread_mutex_lock(&pool_lock);
            while (npool && n < 100)
                mine[n++] = pool[--npool];
            pthread_mutex_unlock(&pool_lock);
        }
        unsigned r = (unsigned)rand_r(&seed) % 4;
        if (r == 0 && n) {
            if (push(mine[n - 1]) == 0)
                n--;
        } else if (r == 1 && n < 250) {
            void *p = pcpu_pop(region, rs, ID);
            if (p)
                mine[n++] = p;
        } else if (r == 2 && n < 200) {
            n += pcpu_pop_n(region, rs, ID, mine + n, 8);
        } else if (r == 3 && n >= 8) {
            unsigned k = pcpu_push_n(region, rs, ID, mine + n - 8, 8);
            memmove(mine + n - 8, mine + n - 8 + k, (8 - k) * sizeof *mine);
            n -= k;                         /* in[0..k) went on */
        }
        if (n >= 240)
            pool_put(mine, &n, 50);
    }
    pool_put(mine, &n, 0);
    return NULL;
}

/* pcpu_drain's protocol: lock every header, fence, take the stacks,
 * reset cur, restore the bounds. */
static void *drainer(void *arg)
{
    while (!stop_all) {
        for (unsigned c = 0; c < ncpus; c++)
            __atomic_store_n((uint32_t *)hdr(c), PCPU_LOCKED_BOUNDS, __ATOMIC_RELAXED);
        cr_assert_eq(rseq_fence(), 0);
        for (unsigned c = 0; c < ncpus; c++) {
            unsigned cur = hdr(c)->cur;
            pthread_mutex_lock(&pool_lock);
            for (unsigned i = 1; i < cur && npool < NTOK * 2; i++)
                pool[npool++] = slots(c)[i];
            pthread_mutex_unlock(&pool_lock);
            __atomic_store_n(&hdr(c)->cur, 1, __ATOMIC_RELAXED);
            __atomic_store_n((uint32_t *)hdr(c), 1u | (1u + CAP) << 16, __ATOMIC_RELEASE);
        }
        drains++;
    }
    return NULL;
}

static void conservation(int with_drainer)
{
    for (uintptr_t i = 0; i < NTOK; i++)
        pool[npool++] = (void *)(i + 1);
    pthread_t w[NWORK], d;
    for (uintptr_t i = 0; i < NWORK; i++)
        cr_assert_eq(pthread_create(&w[i], NULL, worker, (void *)(i + 1)), 0);
    if (with_drainer)
        cr_assert_eq(pthread_create(&d, NULL, drainer, NULL), 0);
    struct timespec ts = { 1, 0 };
    nanosleep(&ts, NULL);
    stop_all = 1;
    for (unsigned i = 0; i < NWORK; i++)
        pthread_join(w[i], NULL);
    if (with_drainer)
        pthread_join(d, NULL);
    static unsigned char seen[NTOK + 1];
    unsigned bad = 0;
    for (unsigned c = 0; c < ncpus; c++)
        for (unsigned i = 1; i < hdr(c)->cur; i++)
            seen[(uintptr_t)slots(c)[i]]++;
    for (unsigned i = 0; i < npool; i++)
        seen[(uintptr_t)pool[i]]++;
    for (unsigned i = 1; i <= NTOK; i++)
        bad += seen[i] != 1;
    cr_log_info("%lu migrations, %lu drains", migrations, drains);
    cr_assert_eq(bad, 0, "%u of %d objects lost or duplicated", bad, NTOK);
    cr_assert_gt(migrations, NWORK);
}

Test(pcpu, conservation_under_migration, .init = setup, .timeout = 60)
{
    conservation(0);
}

Test(pcpu, conservation_under_drains, .init = setup, .timeout = 60)
{
    conservation(1);
    cr_assert_gt(drains, 10);
}

#endif /* SD_HAVE_RSEQ */

/* ---------------------------------------------------------------- */
/* Through the allocator                                             */

Test(pcpu, allocator_caches_per_cpu_and_drains)
{
    void *p[200];
    for (unsigned i = 0; i < 200; i++)
        p[i] = sdm_malloc(64);
    if (!sd_pcpu_on) {
        for (unsigned i = 0; i < 200; i++)
            sdm_free(p[i]);
        cr_skip_test("per-thread mode (rseq unavailable or SLABDEFRAG_PERCPU=0)");
    }
    unsigned cls = sizeclass_of(64);
    for (unsigned i = 0; i < 200; i++)
        sdm_free(p[i]);
    cr_assert_gt(pcpu_cached((uint16_t)cls), 0, "frees did not land on a CPU's stack");
    struct pcpu_info info;
    pcpu_get_info(&info);
    cr_assert_eq(info.on, 1);
    cr_assert_gt(info.bound_bytes, 0);
    pcpu_drain(NULL);
    cr_assert_eq(pcpu_cached((uint16_t)cls), 0, "a drain left objects on a stack");
    /* Reused after the drain, from the slabs. */
    for (unsigned i = 0; i < 200; i++)
        cr_assert_not_null(p[i] = sdm_malloc(64));
    for (unsigned i = 0; i < 200; i++)
        sdm_free(p[i]);
}

/* Transfer caches (classes/xfer.h): a full stack's batch goes there, and
 * another CPU's refill takes it; a drain empties them; a closed one takes
 * nothing in and gives nothing out. */
static void pin_to(unsigned cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0);
}

Test(pcpu, transfer_cache_moves_batches_between_cpus)
{
    enum { N = 1200 };
    static void *p[N];
    for (unsigned i = 0; i < N; i++)
        cr_assert_not_null(p[i] = sdm_malloc(64));
    if (!sd_pcpu_on || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        for (unsigned i = 0; i < N; i++)
            sdm_free(p[i]);
        cr_skip_test("per-thread mode, or one CPU");
    }
    uint16_t cls = (uint16_t)sizeclass_of(64);
    struct sd_cache *c = &sd_malloc_caches[cls];
    unsigned cap = pcpu_cap(64);
    pcpu_drain(NULL);
    pin_to(0);
    unsigned long drained = cache_stat_read(c, SD_STAT_DRAIN_OBJECTS),
                  to_xfer = cache_stat_read(c, SD_STAT_DRAIN_XFER),
                  refilled = cache_stat_read(c, SD_STAT_REFILL_OBJECTS),
                  from_xfer = cache_stat_read(c, SD_STAT_REFILL_XFER);
    for (unsigned i = 0; i < 2 * cap; i++)      /* a stack, and more */
        sdm_free(p[i]);
    size_t held = xfer_cached(cls);
    cr_assert_gt(held, 0, "a full stack's batch did not reach the transfer cache");
    cr_assert_leq(held, cap, "the transfer cache holds %zu of at most %u", held, cap);
    /* The batch counters saw it: a drain of at least half a stack, and
     * what the transfer cache took of it. */
    cr_assert_geq(cache_stat_read(c, SD_STAT_DRAIN_OBJECTS) - drained, cap / 2);
    cr_assert_geq(cache_stat_read(c, SD_STAT_DRAIN_XFER) - to_xfer, held);
    pin_to(1);                                  /* an empty stack: refill */
    for (unsigned i = 0; i < cap / 2 + 1; i++)
        cr_assert_not_null(p[i] = sdm_malloc(64));
    cr_assert_lt(xfer_cached(cls), held, "the refill did not take from the transfer cache");
    cr_assert_geq(cache_stat_read(c, SD_STAT_REFILL_XFER) - from_xfer, 1);
    cr_assert_geq(cache_stat_read(c, SD_STAT_REFILL_OBJECTS) - refilled, held - xfer_cached(cls));
    pcpu_drain(NULL);
    cr_assert_eq(xfer_cached(cls), 0, "a drain left objects in the transfer cache");
    cr_assert_eq(pcpu_cached(cls), 0);
    /* Closed: a full stack's batch goes to the slabs instead. */
    xfer_close(c);
    for (unsigned i = 2 * cap; i < N; i++)
        sdm_free(p[i]);
    cr_assert_eq(xfer_cached(cls), 0, "a closed transfer cache took objects");
    xfer_open(c);
    for (unsigned i = 0; i < cap / 2 + 1; i++)
        sdm_free(p[i]);
    pcpu_drain(NULL);
}
