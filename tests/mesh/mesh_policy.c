/*
 * tests/mesh/mesh_policy.c - which classes the background shrinker meshes
 * (classes/mesh.c, "Which classes a pass meshes"), under the
 * shared library with SLABDEFRAG_MESH=1 and a short interval
 * (SLABDEFRAG_SHRINK_INTERVAL_MS=20): `mesh_policy <case>` (tests/subject.h).
 * Figures come from the JSON statistics (sd_stats_print_json) only.
 *
 *   backoff   a class whose meshes are undone (the sparse slabs meshed in
 *             the background, then every survivor freed, which unmeshes
 *             them) is backed off: the statistics count a back-off, and
 *             the shrinker's passes over fresh sparse slabs of it made at
 *             once leave it alone (mesh_skipped_backoff; the back-off is
 *             1 s or more); sd_shrink_all still meshes them (memory first
 *             when the program asks)
 *   busy      a class a thread keeps refilling (thousands of refills a
 *             second) is left alone by the interval's passes: the
 *             statistics count skipped passes (after up to 5 s in which
 *             the churn's frees hold the interval's meshing back anyway:
 *             hooks/shrinker.c, MESH_HOLD_MAX_MS)
 *   hold      while a program's frees go on (the free path's nudges), the
 *             interval's passes leave meshing out (the shrinker's
 *             mesh_held counts them) over a second of frees; once the
 *             frees pause, meshes come
 *   lazy      the thread is not started with the program (hooks/shrinker.c,
 *             "Lazy start"): not while it only allocates, not by frees
 *             that the C library makes (fclose of 7 in 8 of 8,192
 *             fmemopen streams: sparse slabs, nudges), but by the
 *             program's own next free; then sparse slabs are meshed
 *   compute   once the frees pause, a program that computes without
 *             allocating is not meshed (hooks/meshpace.c,
 *             MESH_COMPUTE_HOLD_MS): the shrinker holds meshing back while
 *             it spins (compute_holds counts it), meshes come once it
 *             sleeps; and one that computes on is meshed after the hold's
 *             second
 *   decay     (a one-minute interval) in an idle program, what the passes
 *             left to idle past the decay goes back in a decay pass about
 *             a decay after the last one, not at the next interval
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "slabdefrag.h"

#include "../subject.h"

#include "meshjson.h"

#define OBJ     1000              /* a block of malloc-1024 */
#define CLASS   "malloc-1024"
#define NBLOCKS 8192              /* blocks per round (about 8 MiB) */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* ---- sparse slabs ---- */

static char *blocks[NBLOCKS];

/* NBLOCKS blocks, then every block but one in eight (at random) freed:
 * sparse slabs, which the shuffled freelists make likely to mesh. */
static unsigned make_sparse(unsigned seed)
{
    for (unsigned i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(OBJ);
        check(blocks[i], "malloc");
        memset(blocks[i], (int)(i & 0xff), OBJ);
    }
    unsigned kept = 0;
    for (unsigned i = 0; i < NBLOCKS; i++) {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 8) {
            free(blocks[i]);
            blocks[i] = NULL;
        } else {
            kept++;
        }
    }
    return kept;
}

static void free_all(void)
{
    for (unsigned i = 0; i < NBLOCKS; i++) {
        if (blocks[i]) {
            check((unsigned char)blocks[i][OBJ - 1] == (i & 0xff), "block %u changed", i);
            free(blocks[i]);
            blocks[i] = NULL;
        }
    }
}

/* Counter `key` of the shrinker so far (the JSON statistics). */
static unsigned long shrinker_count(const char *key)
{
    char *json = stats_json();
    const char *o = json_object(json, "shrinker");
    check(o, "no shrinker object in the statistics");
    unsigned long n = json_num(o, key);
    free(json);
    return n;
}

/* Wait (at most 30 s) until the class has made `want` meshes in all, or
 * until its back-off count is no longer `b0` (then *backoffs says so). */
static unsigned long wait_meshes(unsigned long want, unsigned long b0, unsigned long *backoffs)
{
    unsigned long m = 0;
    for (int i = 0; i < 1500; i++) {
        m = cache_counter(CLASS, "meshes");
        *backoffs = cache_counter(CLASS, "mesh_backoffs");
        if (m >= want || *backoffs != b0)
            break;
        sleep_ms(20);
    }
    return m;
}

Scenario(backoff, .timeout = 120)
{
    /* Rounds of meshes undone.  A pass backs the class off when it judges
     * (at least 1 s after its last verdict) that more than half of the
     * meshes since were undone, which may be after this round's frees or
     * while the next round meshes: the counter is polled in both, every
     * 10-20 ms, so that what follows its change runs within the back-off
     * (1 s). */
    /* One block kept throughout, so that the class stays listed in the
     * statistics after the trims below (a class without slabs is not). */
    void *pin = malloc(OBJ);
    check(pin, "malloc");
    unsigned long m0 = cache_counter(CLASS, "meshes");
    unsigned long b0 = cache_counter(CLASS, "mesh_backoffs"), backoffs = b0;
    for (int round = 0; round < 6 && backoffs == b0; round++) {
        make_sparse(7u + (unsigned)round);
        unsigned long m = wait_meshes(m0 + 32, b0, &backoffs);
        if (backoffs != b0)
            break;                      /* judged on the last round's unmeshes */
        check(m >= m0 + 32, "round %d: only %lu meshes in the background", round, m - m0);
        free_all();                     /* every host empties ... */
        /* ... once the per-CPU stacks and transfer caches are drained, and
         * is unmeshed when it is released, which the empties' hysteresis
         * would otherwise put off to the decay.  Without the trim, a
         * shrinker that gets little CPU (a loaded machine) left the freed
         * blocks cached until the next round allocated them again: no
         * host emptied, no mesh was undone, no back-off in 6 rounds. */
        malloc_trim(0);
        for (int i = 0; i < 300 && (backoffs = cache_counter(CLASS, "mesh_backoffs")) == b0; i++)
            sleep_ms(10);
        m0 = cache_counter(CLASS, "meshes");
    }
    check(backoffs > b0, "no back-off after rounds of meshes undone (meshes %lu, unmeshes %lu)",
          cache_counter(CLASS, "meshes"), cache_counter(CLASS, "unmeshes"));
    /* Backed off (1 s or more): the shrinker's passes over fresh sparse
     * slabs leave the class alone, which the class's statistics count
     * (waited for, up to 30 s: at the 20 ms interval some 50 passes come
     * in the back-off's second). */
    free_all();
    unsigned long before = cache_counter(CLASS, "meshes");
    unsigned long skipped = cache_counter(CLASS, "mesh_skipped_backoff"), s = skipped;
    make_sparse(99);
    for (int i = 0; i < 3000 && s == skipped; i++) {
        sleep_ms(10);
        s = cache_counter(CLASS, "mesh_skipped_backoff");
    }
    check(s > skipped, "no pass left the backed-off class alone in 30 s (%lu passes)",
          shrinker_count("passes"));
    /* The program's own request is not backed off.  (A pass after the
     * back-off's end may have meshed the slabs first.) */
    unsigned long during = cache_counter(CLASS, "meshes");
    sd_shrink_all();
    check(cache_counter(CLASS, "meshes") > during || during > before,
          "neither sd_shrink_all nor a pass after the back-off meshed the sparse slabs");
    free_all();
    free(pin);
}

/* ---- busy ---- */

static volatile int stop_churn;

/* Refills the class's per-CPU stacks (or its active slabs) over and over:
 * a few hundred blocks allocated and freed each time. */
static void *churn(void *arg)
{
    (void)arg;
    void *v[512];
    while (!__atomic_load_n(&stop_churn, __ATOMIC_RELAXED)) {
        for (int i = 0; i < 512; i++)
            v[i] = malloc(OBJ);
        for (int i = 0; i < 512; i++)
            free(v[i]);
    }
    return NULL;
}

Scenario(busy, .timeout = 120)
{
    make_sparse(11);                    /* sparse slabs it could mesh */
    unsigned long skipped = cache_counter(CLASS, "mesh_skipped_busy");
    pthread_t t;
    check(pthread_create(&t, NULL, churn, NULL) == 0, "pthread_create");
    /* The churn's frees hold meshing back for up to 5 s; then the busy
     * rule. */
    for (int i = 0; i < 1000 && cache_counter(CLASS, "mesh_skipped_busy") == skipped; i++)
        sleep_ms(30);
    unsigned long now = cache_counter(CLASS, "mesh_skipped_busy");
    __atomic_store_n(&stop_churn, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    check(now > skipped, "the busy class was not skipped in 30 s (refills %lu)",
          cache_counter(CLASS, "alloc_refill"));
    free_all();
}

/* ---- hold: no meshing while the frees go on ---- */

#define HOLD_N 65536                    /* 64 MiB of malloc-1024 */
static char *hold_blocks[HOLD_N];

Scenario(hold, .timeout = 120)
{
    for (unsigned i = 0; i < HOLD_N; i++) {
        hold_blocks[i] = malloc(OBJ);
        check(hold_blocks[i], "malloc");
        hold_blocks[i][0] = (char)i;
    }
    unsigned order[HOLD_N];
    for (unsigned i = 0; i < HOLD_N; i++)
        order[i] = i;
    unsigned seed = 7;
    for (unsigned i = HOLD_N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        unsigned j = (seed >> 8) % (i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    /* 85% freed in a random order over a second at least (the interval
     * is 20 ms: some 50 interval passes meanwhile, each of which must
     * leave meshing out while the frees go on). */
    unsigned nfree = HOLD_N / 100 * 85;
    unsigned long held = shrinker_count("mesh_held");
    for (unsigned k = 0; k < nfree; k++) {
        free(hold_blocks[order[k]]);
        hold_blocks[order[k]] = NULL;
        if (k % 256 == 255)
            sleep_ms(4);
    }
    unsigned long held_end = shrinker_count("mesh_held");
    unsigned long m100 = cache_counter(CLASS, "meshes");
    unsigned long m = m100;
    for (int i = 0; i < 1500 && m == m100; i++) {
        sleep_ms(20);
        m = cache_counter(CLASS, "meshes");
    }
    printf("hold: %lu interval passes held meshing back while the frees went on; "
           "%lu meshes at their end, %lu after them\n", held_end - held, m100, m);
    check(held_end > held, "no interval pass held meshing back in a second of frees");
    check(m > m100, "no mesh within 30 s of the frees' end");
    for (unsigned i = 0; i < HOLD_N; i++)
        if (hold_blocks[i]) {
            check(hold_blocks[i][0] == (char)i, "block %u changed", i);
            free(hold_blocks[i]);
        }
}

/* ---- lazy ---- */

/* The JSON statistics in a static buffer: no malloc or free of the
 * program's own (one would start a thread that waits to start, and they
 * would make the program look busy to the shrinker). */
static const char *stats_quiet(void)
{
    static char buf[1 << 20];
    int fd = memfd_create("stats", 0);
    check(fd >= 0, "memfd_create: %s", strerror(errno));
    check(sd_stats_print_json(fd) == 0, "sd_stats_print_json");
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    check(n > 0 && (size_t)n < sizeof buf - 1, "reading the statistics back");
    buf[n] = 0;
    return buf;
}

/* Member `key` (true or false) of the statistics' shrinker object. */
static int shrinker_flag(const char *key)
{
    const char *o = json_object(stats_quiet(), "shrinker");
    check(o, "no shrinker object in the statistics");
    char k[40];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *v = strstr(o, k);
    check(v, "no %s in the shrinker statistics", key);
    return strncmp(v + strlen(k), "true", 4) == 0;
}

static int shrinker_running(void)
{
    return shrinker_flag("running");
}

#define NSTREAMS 8192
static FILE *streams[NSTREAMS];

Scenario(lazy, .timeout = 60)
{
    /* fmemopen allocates each stream (a FILE, its cookie) in the C
     * library, and fclose frees them there, never as a tail call (a libc
     * function that ends by calling free has no frame left, and its
     * free's return address is the program's). */
    static char text[] = "lazy";
    check(!shrinker_running(), "the thread runs before the program freed anything");
    check(shrinker_flag("armed"), "the statistics do not say the thread is armed");
    for (unsigned i = 0; i < NSTREAMS; i++) {
        streams[i] = fmemopen(text, sizeof text - 1, "r");
        check(streams[i], "fmemopen: %s", strerror(errno));
    }
    check(!shrinker_running(), "the thread runs before any free");
    unsigned seed = 5, closed = 0;
    for (unsigned i = 0; i < NSTREAMS; i++) {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 8) {         /* 7 in 8 */
            check(fclose(streams[i]) == 0, "fclose");
            streams[i] = NULL;
            closed++;
        }
    }
    check(!shrinker_running(), "frees made by the C library (fclose) started the thread");
    free(malloc(16));                   /* the program's own */
    check(shrinker_running(), "the program's free after %u fclose calls that left sparse "
          "slabs did not start the thread", closed);
    check(!shrinker_flag("armed"), "armed still, with the thread running");
    unsigned long m = 0;
    for (int i = 0; i < 1500 && !m; i++) {
        char *json = stats_json();
        m = json_num(json_object(json, "mesh"), "meshes");
        free(json);
        if (!m)
            sleep_ms(20);
    }
    check(m > 0, "no mesh in 30 s after the thread started");
    for (unsigned i = 0; i < NSTREAMS; i++)
        if (streams[i])
            fclose(streams[i]);
}

/* ---- compute: no meshing while the program computes ---- */

/* 64 MiB of blocks, 85% of them freed at once in a random order. */
static void fill_and_free(unsigned seed)
{
    for (unsigned i = 0; i < HOLD_N; i++) {
        hold_blocks[i] = malloc(OBJ);
        check(hold_blocks[i], "malloc");
        hold_blocks[i][0] = (char)i;
    }
    for (unsigned k = 0; k < HOLD_N / 100 * 85; k++) {
        seed = seed * 1103515245u + 12345u;
        unsigned i = (seed >> 8) % HOLD_N;
        while (!hold_blocks[i])
            i = (i + 1) % HOLD_N;
        free(hold_blocks[i]);
        hold_blocks[i] = NULL;
    }
}

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One pass over the surviving blocks, reading each. */
static void read_survivors(void)
{
    volatile unsigned sum = 0;
    for (unsigned i = 0; i < HOLD_N; i++)
        if (hold_blocks[i])
            sum += (unsigned char)hold_blocks[i][0];
}

static int computing;

static void *compute_more(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&computing, __ATOMIC_RELAXED))
        read_survivors();
    return NULL;
}

/* Read the surviving blocks over and over for `s` seconds, calling
 * nothing that allocates, in this thread and COMPUTE_MORE others (created
 * at once, before the shrinker's first look): the shrinker judges a
 * program computing from the CPU its threads got (a quarter of one), which
 * four threads get on a machine loaded with a few busy processes per core
 * too.  Returns the share of a CPU this thread got. */
#define COMPUTE_MORE 3
static double compute(double s)
{
    pthread_t t[COMPUTE_MORE];
    __atomic_store_n(&computing, 1, __ATOMIC_RELAXED);
    for (int k = 0; k < COMPUTE_MORE; k++)
        check(pthread_create(&t[k], NULL, compute_more, NULL) == 0, "pthread_create");
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID), w;
    do {
        read_survivors();
        w = clock_s(CLOCK_MONOTONIC);
    } while (w - w0 < s);
    double share = (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0) / (w - w0);
    __atomic_store_n(&computing, 0, __ATOMIC_RELAXED);
    for (int k = 0; k < COMPUTE_MORE; k++)
        pthread_join(t[k], NULL);
    return share;
}

static unsigned long meshes_now(void)
{
    return json_num(json_object(stats_quiet(), "mesh"), "meshes");
}

static unsigned long compute_holds_now(void)
{
    return json_num(json_object(stats_quiet(), "shrinker"), "compute_holds");
}

static void free_survivors(void)
{
    for (unsigned i = 0; i < HOLD_N; i++)
        if (hold_blocks[i]) {
            check(hold_blocks[i][0] == (char)i, "block %u changed", i);
            free(hold_blocks[i]);
            hold_blocks[i] = NULL;
        }
}

Scenario(compute, .timeout = 170)
{
    /* The shrinker holds meshing back while the program computes: rounds
     * of frees then 0.6 s of computing until a round's is seen (up to 10
     * rounds; the shrinker judges from the share of a CPU the program got,
     * which a loaded machine may keep under its threshold).  Reading the
     * statistics allocates: only between rounds. */
    unsigned long h0 = compute_holds_now(), h = h0, m0 = 0, m1 = 0;
    double share = 0;
    for (int round = 0; round < 10 && h == h0; round++) {
        if (round)
            free_survivors();
        fill_and_free(7u + (unsigned)round);
        m0 = meshes_now();
        share = compute(0.6);
        h = compute_holds_now();
        m1 = meshes_now();
    }
    unsigned long m = m1;
    for (int i = 0; i < 1500 && m == m1; i++) {
        sleep_ms(20);
        m = meshes_now();
    }
    printf("compute: %lu wakes held meshing back, %lu meshes while the program computed "
           "for 0.6 s (%.0f%% of a CPU), %lu once it slept\n", h - h0, m1 - m0, share * 100,
           m - m1);
    check(h > h0, "the shrinker never held meshing back for a computing program");
    check(m > m1, "no mesh within 30 s of the program's sleep");
    free_survivors();

    /* Computing on: meshed once the hold's second is over (computing for
     * 2.5 s, then on in rounds of a second, up to 30 s). */
    fill_and_free(31);
    m0 = meshes_now();
    share = compute(2.5);
    m1 = meshes_now();
    for (int i = 0; i < 28 && m1 == m0; i++) {
        compute(1.0);
        m1 = meshes_now();
    }
    printf("compute: %lu meshes while the program computed (%.0f%% of a CPU)\n",
           m1 - m0, share * 100);
    check(m1 > m0, "no mesh while the program computed for 30 s");
    free_survivors();
}

/* ---- decay ---- */

/* Run with a one-minute interval (tests/mesh/meson.build): in an idle
 * program, what the passes left to idle past the decay (empty slabs,
 * per-CPU caches, the free pages of small classes' sparse slabs) goes
 * back about a decay after the last pass, in a decay pass - not at the
 * next interval (hooks/shrinker.c, decay_due). */
Scenario(decay, .timeout = 60)
{
    make_sparse(11);                    /* nudges: the thread, then a mesh pass */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long meshes = 0, decays = 0;
    double s = 0;
    /* Nothing from here on but reads of the statistics (which allocate
     * inside the library: the program is not idle to the shrinker). */
    while (s < 30 && !decays) {
        sleep_ms(250);
        const char *json = stats_quiet();
        meshes = json_num(json_object(json, "mesh"), "meshes");
        decays = json_num(json_object(json, "shrinker"), "decay_passes");
        clock_gettime(CLOCK_MONOTONIC, &t);
        s = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
    }
    const char *json = stats_quiet();
    unsigned long intervals = json_num(json_object(json, "shrinker"), "wake_interval");
    printf("decay: %lu meshes, a decay pass that gave memory back %.2f s after the frees; "
           "%lu interval passes\n", meshes, s, intervals);
    check(meshes > 0, "no mesh in 30 s");
    check(intervals == 0, "an interval pass came (the interval is a minute)");
    check(decays > 0, "no decay pass gave memory back within 30 s of the frees (idle since)");
    free_all();
}
