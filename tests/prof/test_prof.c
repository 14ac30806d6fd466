/*
 * tests/prof/test_prof.c - unit tests of the heap profiler on the static
 * core (hooks/prof.c, classes/sample.h): the weight, the estimate, samples
 * found again at free, realloc, sd_defrag_realloc and a kick() that moves,
 * the bounded table, fork and thread exit, and profiling switched on and
 * off while threads allocate and free.  The program keeps glibc's
 * malloc; only sdm_* and sd_* are sampled.  Each test runs in its own
 * process (tests/prof/meson.build).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mallocfam.h"
#include "prof.h"
#include "proftab.h"
#include "sample.h"
#include "slabdefrag.h"

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Live samples whose address is in set[0..n) (sorted in place); their
 * estimated bytes in *bytes. */
static size_t samples_in(void **set, size_t n, double *bytes)
{
    qsort(set, n, sizeof *set, cmp_ptr);
    size_t k = 0;
    double b = 0;
    for (int i = 0; i < PROF_SHARDS; i++) {
        struct prof_shard *sh = &prof_tab->shard[i];
        sd_mutex_lock(&sh->lock);
        for (uint32_t j = 0; j < PROF_SHARD_SLOTS; j++) {
            uintptr_t a = sh->slot[j].addr;
            if (a && bsearch(&a, set, n, sizeof *set, cmp_ptr)) {
                k++;
                b += (double)sh->slot[j].size * sh->slot[j].weight;
            }
        }
        sd_mutex_unlock(&sh->lock);
    }
    if (bytes)
        *bytes = b;
    return k;
}

static size_t samples_live(void)
{
    size_t k = 0;
    for (int i = 0; i < PROF_SHARDS; i++)
        k += prof_tab->shard[i].used;
    return k;
}

/* samples_live, with each shard locked (while other threads sample). */
static size_t samples_locked(void)
{
    size_t k = 0;
    for (int i = 0; i < PROF_SHARDS; i++) {
        sd_mutex_lock(&prof_tab->shard[i].lock);
        k += prof_tab->shard[i].used;
        sd_mutex_unlock(&prof_tab->shard[i].lock);
    }
    return k;
}

/* The slabs' sampled words and sd_sample_large agree with the table:
 * each slab counts its live samples, with their filter bits set. */
static void check_marks(void)
{
    enum { SET = 1 << 18 };
    struct { const struct slab *s; uint32_t n; } *set = calloc(SET, sizeof *set);
    size_t large = 0;
    cr_assert_not_null(set);
    for (int i = 0; i < PROF_SHARDS; i++) {
        struct prof_shard *sh = &prof_tab->shard[i];
        sd_mutex_lock(&sh->lock);
        for (uint32_t j = 0; j < PROF_SHARD_SLOTS; j++) {
            uintptr_t a = sh->slot[j].addr;
            if (!a)
                continue;
            const struct slab *s = segment_slab_of((void *)a);
            if (!s) {
                large++;
                continue;
            }
            cr_expect(sample_marked(s, (void *)a), "sample %#lx: filter bit clear",
                      (unsigned long)a);
            uint32_t h = (uint32_t)(((uintptr_t)s >> 7) * 0x9e3779b1u) & (SET - 1);
            while (set[h].s && set[h].s != s)
                h = (h + 1) & (SET - 1);
            set[h].s = s;
            set[h].n++;
        }
        sd_mutex_unlock(&sh->lock);
    }
    for (uint32_t h = 0; h < SET; h++)
        if (set[h].s) {
            uint32_t w = __atomic_load_n(&set[h].s->sampled, __ATOMIC_RELAXED);
            cr_expect((w & 0xffff) == 0xffff || (w & 0xffff) == set[h].n,
                      "slab %p counts %u samples, holds %u", (void *)set[h].s,
                      w & 0xffff, set[h].n);
        }
    cr_expect_eq(__atomic_load_n(&sd_sample_large, __ATOMIC_RELAXED), large,
                 "large marks %lu != large samples %zu", sd_sample_large, large);
    free(set);
}

Test(prof, weight)
{
    const double xs[] = { 1e-9, 1e-6, 1e-3, 0.1, 0.49, 0.5, 0.51, 1, 5, 30, 700, 800 };
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        double want = -expm1(-xs[i]), got = prof_one_minus_exp(xs[i]);
        cr_expect(fabs(got - want) <= 1e-13 * want, "1 - e^-%g: %.17g, want %.17g",
                  xs[i], got, want);
    }
}

Test(prof, unbiased)
{
    cr_assert_eq(prof_start(16384), 0);
    enum { N = 20000 };
    static void *p[N];
    static const size_t sizes[] = { 24, 100, 1000, 5000 };
    double truth = 0;
    for (int i = 0; i < N; i++) {
        p[i] = sdm_malloc(sizes[i & 3]);
        cr_assert(p[i]);
        truth += (double)sizes[i & 3];
    }
    double est;
    size_t k = samples_in(p, N, &est);
    /* ~1900 samples: a standard error of 2.3%; 10% is over 4 of them */
    cr_expect(fabs(est - truth) <= 0.10 * truth, "estimated %.0f bytes from %zu samples, "
              "truly %.0f", est, k, truth);
    check_marks();
    for (int i = 0; i < N; i++)
        sdm_free(p[i]);
    cr_expect_eq(samples_in(p, N, NULL), 0, "samples outlived their objects");
    check_marks();
}

Test(prof, free_forgets)
{
    cr_assert_eq(prof_start(256), 0);
    enum { N = 10000 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = sdm_calloc(1, 48 + (size_t)(i % 7) * 16);
    size_t k = samples_in(p, N, NULL);
    cr_expect(k > N / 4, "only %zu of %d objects sampled at a 256-byte interval", k, N);
    for (int i = 0; i < N; i += 2)
        sdm_free(p[i]);
    void *odd[N / 2], *even[N / 2];
    for (int i = 0; i < N / 2; i++) {
        even[i] = p[2 * i];
        odd[i] = p[2 * i + 1];
    }
    /* freed addresses may be reused by now: count before reuse */
    cr_expect_eq(samples_in(even, N / 2, NULL), 0);
    cr_expect_gt(samples_in(odd, N / 2, NULL), 0);
    check_marks();
    for (int i = 0; i < N / 2; i++)
        sdm_free(odd[i]);
    cr_expect_eq(samples_in(odd, N / 2, NULL), 0);
    check_marks();
}

Test(prof, large_and_realloc)
{
    cr_assert_eq(prof_start(4096), 0);
    enum { N = 40 };
    void *p[N], *q[N];
    for (int i = 0; i < N; i++)
        p[i] = sdm_malloc((size_t)1 << 20);
    cr_expect_eq(samples_in(p, N, NULL), N, "1 MiB blocks at a 4 KiB interval: all sampled");
    for (int i = 0; i < N; i++)
        q[i] = sdm_realloc(p[i], (size_t)2 << 20);
    double est;
    cr_expect_eq(samples_in(q, N, &est), N, "samples follow realloc");
    cr_expect(fabs(est - N * 2.0 * 1048576) < 0.01 * N * 2 * 1048576, "estimate %.0f", est);
    check_marks();
    for (int i = 0; i < N; i++)
        sdm_free(q[i]);
    cr_expect_eq(__atomic_load_n(&sd_sample_large, __ATOMIC_RELAXED), 0);
    check_marks();
}

Test(prof, defrag_realloc_moves)
{
    cr_assert_eq(prof_start(64), 0);
    enum { N = 8192 };
    static void *p[N], *keep[N / 8];
    for (int i = 0; i < N; i++)
        p[i] = sdm_malloc(100);
    for (int i = 0; i < N; i++)
        if (i % 8)
            sdm_free(p[i]);
    for (int i = 0; i < N / 8; i++)
        keep[i] = p[8 * i];
    size_t before = samples_in(keep, N / 8, NULL);
    cr_assert_gt(before, N / 16);
    size_t n = 0;
    for (int i = 0; i < N / 8; i++) {
        void *q = sd_defrag_realloc(keep[i]);
        n += q != keep[i];
        keep[i] = q;
    }
    cr_expect_gt(n, 0, "sd_defrag_realloc moved nothing");
    cr_expect_eq(samples_in(keep, N / 8, NULL), before, "samples lost in the moves");
    check_marks();
    for (int i = 0; i < N / 8; i++)
        sdm_free(keep[i]);
}

/* A cache whose kick() moves every object (its home is table[index]). */
struct node { size_t index; char pad[88]; };
static struct node *table[16384];

static void *move_get(sd_cache *s, int nr, void **objs) { return NULL; }
static void move_kick(sd_cache *s, int nr, void **objs, void *priv)
{
    for (int i = 0; i < nr; i++) {
        struct node *o = objs[i], *n;
        if (!o || !(n = sd_cache_alloc(s)))
            continue;
        memcpy(n, o, sizeof *n);
        table[n->index] = n;
        sd_cache_free(s, o);
    }
}
static const struct sd_cache_ops move_ops = { move_get, move_kick };

Test(prof, vacate_moves)
{
    cr_assert_eq(prof_start(64), 0);
    sd_cache *c = sd_cache_create("prof_move", sizeof(struct node), 8, 0, NULL, &move_ops);
    cr_assert(c);
    enum { N = 16384 };
    for (size_t i = 0; i < N; i++) {
        table[i] = sd_cache_alloc(c);
        table[i]->index = i;
    }
    static void *live[N / 4], *old[N / 4];
    for (size_t i = 0; i < N; i++)
        if (i % 4) {
            sd_cache_free(c, table[i]);
            table[i] = NULL;
        }
    for (size_t i = 0; i < N / 4; i++)
        old[i] = table[4 * i];
    size_t before = samples_in(old, N / 4, NULL);
    cr_assert_gt(before, N / 16);
    size_t released = sd_shrink_all();
    cr_expect_gt(released, 0, "nothing vacated");
    size_t stayed = 0;
    for (size_t i = 0; i < N / 4; i++) {
        live[i] = table[4 * i];
        stayed += live[i] == old[i];
    }
    /* (a slab that receives moved objects is no longer sparse: its own
     * objects stay) */
    cr_expect_lt(stayed, N / 4, "the kick moved none of %d objects", N / 4);
    cr_expect_eq(samples_in(live, N / 4, NULL), before,
                 "%zu samples before the kick, not all with their objects after", before);
    check_marks();
    for (size_t i = 0; i < N / 4; i++)
        sd_cache_free(c, live[i]);
    cr_expect_eq(samples_in(live, N / 4, NULL), 0);
}

Test(prof, table_full)
{
    cr_assert_eq(prof_start(64), 0);
    enum { N = 250000 };
    void **p = malloc(N * sizeof *p);
    for (int i = 0; i < N; i++)
        p[i] = sdm_malloc(64);
    cr_expect_gt(prof_dropped, 0, "%zu samples held, none dropped", samples_live());
    cr_expect_leq(samples_live(), (size_t)PROF_SHARDS * PROF_SHARD_MAX);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    prof_print_status(fds[1]);
    close(fds[1]);
    char buf[512] = "";
    cr_assert_gt(read(fds[0], buf, sizeof buf - 1), 0);
    cr_expect(strstr(buf, "dropped (table full)") && !strstr(buf, " 0 dropped"),
              "status: %s", buf);
    check_marks();
    for (int i = 0; i < N; i++)
        sdm_free(p[i]);
    cr_expect_eq(samples_in(p, N, NULL), 0);
    free(p);
}

Test(prof, off_costs_nothing)
{
    void *p[1000];
    for (int r = 0; r < 100; r++) {
        for (int i = 0; i < 1000; i++)
            p[i] = sdm_malloc(128);
        for (int i = 0; i < 1000; i++)
            sdm_free(p[i]);
    }
    cr_expect_null(prof_tab, "tables mapped with profiling never on");
    cr_assert_eq(prof_start(64), 0);
    for (int i = 0; i < 1000; i++)
        p[i] = sdm_malloc(128);
    cr_expect_gt(samples_in(p, 1000, NULL), 100);
    prof_stop();
    size_t held = samples_live();
    void *q[1000];
    for (int i = 0; i < 1000; i++)
        q[i] = sdm_malloc(128);
    /* at most the one sample each thread's countdown still had armed */
    cr_expect_leq(samples_in(q, 1000, NULL), 1, "samples taken after prof_stop");
    cr_expect_leq(samples_live(), held + 1);
    for (int i = 0; i < 1000; i++) {
        sdm_free(p[i]);
        sdm_free(q[i]);
    }
}

static volatile int spinning = 1;
static void *churn(void *arg)
{
    while (spinning) {
        void *p[64];
        for (int i = 0; i < 64; i++)
            p[i] = sdm_malloc(32 + (size_t)i * 8);
        for (int i = 0; i < 64; i++)
            sdm_free(p[i]);
    }
    return NULL;
}

Test(prof, fork_child)
{
    cr_assert_eq(prof_start(64), 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, churn, NULL);
    for (int round = 0; round < 20; round++) {
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            alarm(20);                  /* a lock left held: killed, reported */
            void *p[2000];
            for (int i = 0; i < 2000; i++)
                p[i] = sdm_malloc(64);
            for (int i = 0; i < 2000; i++)
                sdm_free(p[i]);
            int fds[2];
            if (pipe(fds) == 0) {
                prof_print_sites(fds[1], PROF_SORT_PINNED, 3);
                close(fds[1]);
            }
            _exit(0);
        }
        int st;
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x", round, st);
    }
    spinning = 0;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    check_marks();
}

enum { THREADS = 8, PER = 2000 };
static void *objs[THREADS * PER];
static void *fill_thread(void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    for (size_t i = 0; i < PER; i++)
        objs[k * PER + i] = sdm_malloc(80);
    return NULL;
}

Test(prof, thread_exit)
{
    cr_assert_eq(prof_start(128), 0);
    pthread_t t[THREADS];
    for (size_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, fill_thread, (void *)(uintptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    size_t k = samples_in(objs, THREADS * PER, NULL);
    cr_expect_gt(k, THREADS * PER / 4, "%zu samples", k);
    for (size_t i = 0; i < THREADS * PER; i++)
        sdm_free(objs[i]);
    cr_expect_eq(samples_in(objs, THREADS * PER, NULL), 0);
    check_marks();
}

/* Profiling switched on and off while threads allocate and free: every
 * sample is found again at its object's free, whichever entry points
 * (classes/mallocfam.h, sdm_entry) the malloc and the free went through.
 * A switch that let free stop checking while a sample lived (or before
 * malloc stopped sampling) leaves samples of freed objects behind. */
enum { SW_THREADS = 4, SW_LIVE = 256 };
static int sw_running = 1;           /* atomic */
static unsigned long sw_ops[SW_THREADS];

static void *switch_churn(void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    void *live[SW_LIVE] = { 0 };
    uint64_t r = 0x9e3779b97f4a7c15ull * (k + 1);
    unsigned long n = 0;
    while (__atomic_load_n(&sw_running, __ATOMIC_RELAXED)) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        if (k & 1) {
            /* freed at once: few samples live, so a stop often finds
             * none, while this thread may be inside a sampled malloc */
            sdm_free(sdm_malloc(16 + (size_t)(r >> 40) % 1000));
            n++;
            continue;
        }
        unsigned i = (unsigned)(r % SW_LIVE);
        sdm_free(live[i]);
        size_t size = 16 + (size_t)(r >> 40) % 1000;
        if ((r >> 20) % 64 == 0)
            live[i] = sdm_calloc(1, size);
        else if ((r >> 20) % 1024 == 1)
            live[i] = sdm_malloc(40000);    /* a large block now and then */
        else
            live[i] = sdm_malloc(size);
        cr_assert_not_null(live[i]);
        n++;
    }
    for (unsigned i = 0; i < SW_LIVE; i++)
        sdm_free(live[i]);
    sw_ops[k] = n;
    return NULL;
}

Test(prof, switch_while_allocating)
{
    struct sdm_entry plain = sdm_entry;     /* profiling never ran */
    pthread_t t[SW_THREADS];
    for (size_t i = 0; i < SW_THREADS; i++)
        pthread_create(&t[i], NULL, switch_churn, (void *)(uintptr_t)i);
    size_t peak = 0;
    for (int round = 0; round < 150; round++) {
        cr_assert_eq(prof_start(round % 2 ? 512 : 4096), 0);
        usleep(2000 + (round % 5) * 1000);
        if (round % 3 == 0) {
            size_t n = samples_locked();
            peak = n > peak ? n : peak;
        }
        prof_stop();
        usleep(1000 + (round % 7) * 700);
    }
    __atomic_store_n(&sw_running, 0, __ATOMIC_RELAXED);
    unsigned long ops = 0;
    for (int i = 0; i < SW_THREADS; i++) {
        pthread_join(t[i], NULL);
        ops += sw_ops[i];
    }
    cr_expect_gt(peak, 0, "no sample taken in %lu operations", ops);
    /* Every object is freed: no sample may be left, and no mark. */
    cr_expect_eq(samples_live(), 0, "%zu samples of freed objects left (%lu operations)",
                 samples_live(), ops);
    cr_expect_eq(__atomic_load_n(&sd_sample_large, __ATOMIC_RELAXED), 0);
    check_marks();
    /* Off with nothing live: the plain entry points again. */
    cr_expect(sdm_entry.malloc == plain.malloc && sdm_entry.free == plain.free &&
              sdm_entry.calloc == plain.calloc, "entry points still switched");
}
