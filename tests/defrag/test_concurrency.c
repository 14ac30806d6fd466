/*
 * tests/defrag/test_concurrency.c - threads allocate, verify and free
 * objects of a cache with get()/kick() while another thread shrinks and
 * vacates it over and over.  Objects carry a checksum; kick() moves them
 * (or reclaims them).  No corruption, no crash, counts agree at the end.
 */
#include "defrag_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#define NWORKERS 4
#define SLOTS_PER_WORKER 8192
#define RUN_SECONDS 3.0

static sd_cache *cc;
static pthread_barrier_t barrier;
static volatile int stop_phases, stop_shrinker;
static unsigned long errors, allocs, frees, checks, shrinks, vacates_ok;

static int cmp_uintptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static size_t count_duplicates(void)
{
    size_t np = 0, dups = 0;
    uintptr_t *ptrs = calloc(dt_nslots, sizeof(*ptrs));
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            ptrs[np++] = (uintptr_t)dt_slots[i];
    qsort(ptrs, np, sizeof(*ptrs), cmp_uintptr);
    for (size_t i = 1; i < np; i++)
        dups += ptrs[i] == ptrs[i - 1];
    free(ptrs);
    return dups;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void note_error(const char *what, size_t i)
{
    if (__atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED) < 10)
        fprintf(stderr, "concurrency: %s (slot %zu)\n", what, i);
}

/* Check slot i under the lock: the object must be whole and registered. */
static void check_slot(size_t i)
{
    pthread_mutex_lock(&dt_lock);
    struct tobj *o = dt_slots[i];
    if (o && (!(o->flags & TOBJ_VALID) || !tobj_ok(o, (uint32_t)i)))
        note_error("object damaged", i);
    pthread_mutex_unlock(&dt_lock);
    __atomic_fetch_add(&checks, 1, __ATOMIC_RELAXED);
}

static void worker_alloc(size_t i, uint32_t gen)
{
    struct tobj *o = sd_cache_alloc(cc);
    if (!o) {
        note_error("sd_cache_alloc failed", i);
        return;
    }
    tobj_fill(o, (uint32_t)i, gen);
    pthread_mutex_lock(&dt_lock);
    if (dt_slots[i])
        note_error("slot already full", i);
    dt_slots[i] = o;
    o->flags |= TOBJ_VALID;
    pthread_mutex_unlock(&dt_lock);
    __atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);
}

static void worker_free(size_t i)
{
    check_slot(i);
    dt_free_slot(cc, i);
    __atomic_fetch_add(&frees, 1, __ATOMIC_RELAXED);
}

static int slot_empty(size_t i)
{
    pthread_mutex_lock(&dt_lock);
    int empty = dt_slots[i] == NULL;
    pthread_mutex_unlock(&dt_lock);
    return empty;
}

static void *worker(void *arg)
{
    size_t w = (size_t)(uintptr_t)arg;
    uint64_t rng = 1000 + w;
    uint32_t gen = (uint32_t)w << 24;
    for (unsigned phase = 0;; phase++) {
        /* Each phase a worker works on another worker's range, so frees
         * are often remote (the object came from another thread). */
        size_t base = ((w + phase) % NWORKERS) * SLOTS_PER_WORKER;
        /* fill */
        for (size_t k = 0; k < SLOTS_PER_WORKER; k++)
            if (slot_empty(base + k))
                worker_alloc(base + k, ++gen);
        /* thin out to ~10%, in random order, checking as we go */
        for (size_t k = 0; k < SLOTS_PER_WORKER; k++) {
            size_t i = base + dt_rand(&rng) % SLOTS_PER_WORKER;
            if (dt_rand(&rng) % 10)
                worker_free(i);
            else
                check_slot(i);
        }
        /* churn: small alloc/free bursts in the sparse range */
        for (size_t k = 0; k < SLOTS_PER_WORKER / 4; k++) {
            size_t i = base + dt_rand(&rng) % SLOTS_PER_WORKER;
            if (slot_empty(i))
                worker_alloc(i, ++gen);
            else
                worker_free(i);
        }
        int r = pthread_barrier_wait(&barrier);
        (void)r;
        pthread_barrier_wait(&barrier);     /* main decides after the first */
        if (stop_phases)
            break;
    }
    return NULL;
}

static void *shrinker(void *arg)
{
    uint64_t rng = 77;
    (void)arg;
    while (!__atomic_load_n(&stop_shrinker, __ATOMIC_ACQUIRE)) {
        int rc = sd_cache_shrink(cc);
        if (rc < 0)
            note_error("sd_cache_shrink failed", (size_t)-rc);
        __atomic_fetch_add(&shrinks, 1, __ATOMIC_RELAXED);
        for (int k = 0; k < 64; k++) {
            size_t i = dt_rand(&rng) % dt_nslots;
            pthread_mutex_lock(&dt_lock);
            void *p = dt_slots[i];
            pthread_mutex_unlock(&dt_lock);
            /* p may be freed by now: any address is accepted. */
            if (p && sd_vacate(p) == 1)
                __atomic_fetch_add(&vacates_ok, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

/* Forks while the workers and the shrinker run: each child allocates and
 * frees in the caches (never taking dt_lock, which a parent thread may
 * have held at the fork), shrinks a cache without ops, and exits 0. */
static int with_forker;
static int fork_children, fork_failed, fork_hung;
static sd_cache *fork_plain;

static void fork_child_work(void)
{
    alarm(10);
    void *p[512];
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 512; i++) {
            p[i] = sd_cache_alloc(cc);
            if (!p[i])
                _exit(3);
            memset(p[i], 0x5c, sizeof(struct tobj));
        }
        for (int i = 0; i < 512; i++)
            sd_cache_free(cc, p[i]);
        for (int i = 0; i < 512; i++)
            p[i] = sd_cache_alloc(fork_plain);
        for (int i = 0; i < 512; i++)
            sd_cache_free(fork_plain, p[i]);
        for (int i = 0; i < 512; i++)
            p[i] = malloc(16 + i);
        for (int i = 0; i < 512; i++)
            free(p[i]);
    }
    if (sd_cache_shrink(fork_plain) < 0)
        _exit(4);
    struct sd_cache_info info;
    if (sd_cache_get_info(cc, &info))
        _exit(5);
    _exit(0);
}

static void *forker(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop_shrinker, __ATOMIC_ACQUIRE) && fork_children < 40) {
        struct timespec ts = { 0, 40 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        pid_t pid = fork();
        if (pid < 0) {
            note_error("fork failed", 0);
            break;
        }
        if (pid == 0)
            fork_child_work();
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        fork_children++;
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            fork_hung++;
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fork_failed++;
    }
    return NULL;
}

static void run(int kick_mode, const char *name)
{
    cc = dt_cache(name, 1);
    dt_kick_mode = kick_mode;
    dt_slots_init(NWORKERS * SLOTS_PER_WORKER);
    pthread_barrier_init(&barrier, NULL, NWORKERS + 1);
    pthread_t tw[NWORKERS], ts, tf;
    cr_assert_eq(pthread_create(&ts, NULL, shrinker, NULL), 0);
    if (with_forker) {
        fork_plain = sd_cache_create("fork_plain", 72, 0, SD_NO_MERGE, NULL, NULL);
        cr_assert_not_null(fork_plain);
        cr_assert_eq(pthread_create(&tf, NULL, forker, NULL), 0);
    }
    for (size_t w = 0; w < NWORKERS; w++)
        cr_assert_eq(pthread_create(&tw[w], NULL, worker, (void *)(uintptr_t)w), 0);
    double deadline = now_s() + RUN_SECONDS;
    unsigned phases = 0;
    for (;;) {
        pthread_barrier_wait(&barrier);     /* workers finished a phase */
        phases++;
        if (now_s() > deadline)
            stop_phases = 1;
        pthread_barrier_wait(&barrier);
        if (stop_phases)
            break;
    }
    for (size_t w = 0; w < NWORKERS; w++)
        pthread_join(tw[w], NULL);
    __atomic_store_n(&stop_shrinker, 1, __ATOMIC_RELEASE);
    pthread_join(ts, NULL);
    if (with_forker)
        pthread_join(tf, NULL);

    struct sd_cache_info info = dt_info(cc);
    cr_log_info("%s: %u phases, %lu allocs, %lu frees, %lu checks, %lu shrinks, "
                "%lu vacates ok, %lu moved, %lu freed by kick; vacates %lu/%lu",
                name, phases, allocs, frees, checks, shrinks, vacates_ok,
                dt_moved, dt_freed_by_kick, info.vacate_successes,
                info.vacate_attempts);
}

static void verify_end(void)
{
    size_t bad = 0;
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i] && (!tobj_ok(dt_slots[i], (uint32_t)i) ||
                            !(dt_slots[i]->flags & TOBJ_VALID) ||
                            dt_slots[i]->pins != 0))
            bad++;
    cr_expect_eq(errors, 0, "%lu errors during the run", errors);
    cr_expect_eq(bad, 0, "%zu objects damaged at the end", bad);
    size_t dups = count_duplicates();
    cr_expect_eq(dups, 0, "%zu objects handed out twice", dups);
    cr_expect_eq(dt_get_bad, 0, "get() was handed %d objects that were not "
                 "allocated", dt_get_bad);
    cr_expect_eq(dt_get_unordered, 0);
    cr_expect_gt(shrinks, 0);
    cr_expect_eq(dt_info(cc).objects_inuse, dt_live(),
                 "allocator counts %zu objects, the registry %zu",
                 dt_info(cc).objects_inuse, dt_live());
    for (size_t i = 0; i < dt_nslots; i++)
        dt_free_slot(cc, i);
    cr_expect_eq(dt_info(cc).objects_inuse, 0);
}

Test(defrag, concurrent_shrink_with_moving_kick, .timeout = 60)
{
    run(KICK_MOVE, "conc_move");
    verify_end();
}

Test(defrag, concurrent_shrink_with_reclaiming_kick, .timeout = 60)
{
    run(KICK_FREE_ALL, "conc_reclaim");
    verify_end();
}

Test(defrag, concurrent_shrink_and_fork, .timeout = 90)
{
    with_forker = 1;
    run(KICK_MOVE, "conc_fork");
    cr_log_info("%d children, %d failed, %d hung", fork_children, fork_failed,
                fork_hung);
    cr_expect_gt(fork_children, 0);
    cr_expect_eq(fork_hung, 0, "%d of %d children forked during shrinks hung",
                 fork_hung, fork_children);
    cr_expect_eq(fork_failed, 0, "%d of %d children forked during shrinks failed",
                 fork_failed, fork_children);
    verify_end();
}

/* ----------------------------- a live thread's slabs, seen from outside */

/* Thread R fills NS slabs, frees most of what it allocated (its own frees:
 * into its active slab and the slabs it still owns), then waits while the
 * main thread counts, vacates and shrinks; then R allocates again and
 * checks everything. */
#define RS_SLABS 6
static pthread_mutex_t rs_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rs_c = PTHREAD_COND_INITIALIZER;
static int rs_phase;
static size_t rs_per, rs_live_after_thin;

static void rs_wait(int phase)
{
    pthread_mutex_lock(&rs_m);
    while (rs_phase < phase)
        pthread_cond_wait(&rs_c, &rs_m);
    pthread_mutex_unlock(&rs_m);
}

static void rs_set(int phase)
{
    pthread_mutex_lock(&rs_m);
    rs_phase = phase;
    pthread_cond_broadcast(&rs_c);
    pthread_mutex_unlock(&rs_m);
}

static void *rs_thread(void *arg)
{
    (void)arg;
    size_t n = RS_SLABS * rs_per;
    for (size_t i = 0; i < n; i++)
        worker_alloc(i, 1);
    uint64_t rng = 4242;
    for (size_t i = 0; i < n; i++)
        if (dt_rand(&rng) % 10)
            dt_free_slot(cc, i);
    rs_live_after_thin = dt_live();
    rs_set(1);                          /* main: count, vacate, shrink */
    rs_wait(2);
    /* Allocate again into every empty slot: nothing handed out twice. */
    for (size_t i = 0; i < n; i++)
        if (slot_empty(i))
            worker_alloc(i, 2);
    for (size_t i = 0; i < n; i++)
        check_slot(i);
    rs_set(3);
    rs_wait(4);                         /* stay alive until main is done */
    return NULL;
}

Test(defrag, live_threads_slabs_counted_vacated_and_shrunk_safely, .timeout = 60)
{
    cc = dt_cache("live_thread_slabs", 1);
    dt_kick_mode = KICK_MOVE;
    rs_per = dt_info(cc).objects_per_slab;
    dt_slots_init(RS_SLABS * rs_per);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, rs_thread, NULL), 0);
    rs_wait(1);
    /* R is alive, with its active slab and the slabs it owns thinned by
     * its own frees. */
    struct sd_cache_info info = dt_info(cc);
    cr_expect_eq(info.objects_inuse, rs_live_after_thin,
                 "objects_inuse %zu while another thread holds %zu (its own "
                 "frees not counted out?)", info.objects_inuse, rs_live_after_thin);
    for (size_t i = 0; i < dt_nslots; i++) {
        pthread_mutex_lock(&dt_lock);
        void *p = dt_slots[i];
        pthread_mutex_unlock(&dt_lock);
        if (p)
            sd_vacate(p);               /* 0 or 1: either way consistent */
    }
    cr_expect_eq(sd_cache_shrink(cc), 0);
    cr_expect_eq(dt_info(cc).objects_inuse, dt_live());
    rs_set(2);
    rs_wait(3);
    cr_expect_eq(errors, 0, "%lu errors in the owner thread", errors);
    cr_expect_eq(dt_get_bad, 0);
    size_t dups = count_duplicates();
    cr_expect_eq(dups, 0, "%zu objects handed out twice", dups);
    cr_expect_eq(dt_info(cc).objects_inuse, dt_live(),
                 "allocator %zu, registry %zu", dt_info(cc).objects_inuse, dt_live());
    rs_set(4);
    pthread_join(t, NULL);
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i), "object %zu damaged", i);
    cr_expect_eq(dt_info(cc).objects_inuse, dt_live(), "after the thread exit");
}
