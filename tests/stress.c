/*
 * tests/stress.c - threads, cross-thread frees, thread churn, fork: the
 * scenarios of a subject program (tests/subject.h) that tests/test_stress.c
 * runs, so that it can run under ThreadSanitizer, which Criterion cannot.
 *
 * Built twice:
 *   - linked with libslabdefrag.so, using plain malloc/free;
 *   - with -DSTRESS_SDM=1, linked with the static core, using sdm_*
 *     (the variant the ThreadSanitizer build runs).
 * Every block carries a cookie (its size and a pattern derived from its
 * address) that is checked when it is freed, by whichever thread frees it.
 * Failures are counted in the threads and asserted in the test's thread.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "subject.h"

#if STRESS_SDM
#include "mallocfam.h"        /* classes/mallocfam.h: sdm_* */
#define S_MALLOC  sdm_malloc
#define S_FREE    sdm_free
#define S_REALLOC sdm_realloc
#define S_CALLOC  sdm_calloc
#define S_USABLE  sdm_usable_size
#define S_TRIM()  sdm_trim()
#else
#include <malloc.h>
#define S_MALLOC  malloc
#define S_FREE    free
#define S_REALLOC realloc
#define S_CALLOC  calloc
#define S_USABLE  malloc_usable_size
#define S_TRIM()  malloc_trim(0)
#endif

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SCALE 4              /* sanitizers are slow: divide the work */
#else
#define SCALE 1
#endif

#define NTHREADS 4

/* ---- blocks with cookies ------------------------------------------------ */

struct hdr {
    size_t size;
    uint64_t cookie;
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Bytes of the block that carry the pattern: all of a small block, the
 * first and last 256 bytes of a big one. */
#define EDGE 256

static void stamp(void *p, size_t n)
{
    struct hdr *h = p;
    h->size = n;
    h->cookie = mix((uintptr_t)p ^ n);
    uint8_t c = (uint8_t)h->cookie;
    uint8_t *b = p;
    size_t lo = n <= 2 * EDGE ? n : EDGE;
    for (size_t i = sizeof *h; i < lo; i++)
        b[i] = (uint8_t)(c + i);
    if (n > 2 * EDGE)
        for (size_t i = n - EDGE; i < n; i++)
            b[i] = (uint8_t)(c + i);
}

/* 1 if the block is intact (assuming it moved from `was` if realloc'd). */
static int verify(const void *p, uint64_t cookie_addr)
{
    const struct hdr *h = p;
    size_t n = h->size;
    if (n < sizeof *h || n > (64u << 20))
        return 0;
    if (h->cookie != mix(cookie_addr ^ n))
        return 0;
    uint8_t c = (uint8_t)h->cookie;
    const uint8_t *b = p;
    size_t lo = n <= 2 * EDGE ? n : EDGE;
    for (size_t i = sizeof *h; i < lo; i++)
        if (b[i] != (uint8_t)(c + i))
            return 0;
    if (n > 2 * EDGE)
        for (size_t i = n - EDGE; i < n; i++)
            if (b[i] != (uint8_t)(c + i))
                return 0;
    return 1;
}

static size_t pick_size(uint64_t *rs)
{
    uint64_t r = rnd(rs);
    unsigned k = (unsigned)(r % 100);
    r >>= 8;
    if (k < 70)
        return 16 + r % 1009;                  /* 16 B .. 1 KiB */
    if (k < 97)
        return 1024 + r % (40 * 1024);         /* 1 KiB .. 41 KiB */
    return 100 * 1024 + r % (200 * 1024);      /* 100 KiB .. 300 KiB */
}

static void *alloc_block(uint64_t *rs, size_t n)
{
    void *p = (rnd(rs) & 7) == 0 ? S_CALLOC(1, n) : S_MALLOC(n);
    if (!p)
        return NULL;
    stamp(p, n);
    return p;
}

static unsigned long bad_cookies, null_allocs;

static void free_block(void *p)
{
    if (!verify(p, (uintptr_t)p))
        __atomic_fetch_add(&bad_cookies, 1, __ATOMIC_RELAXED);
    S_FREE(p);
}

/* Realloc a block to newsize(rs, its size), keeping its cookie valid (the
 * cookie is re-stamped for the new address and size after the old
 * contents were checked). */
static void *resize_block(uint64_t *rs, void *p, size_t (*newsize)(uint64_t *, size_t))
{
    if (!verify(p, (uintptr_t)p)) {
        __atomic_fetch_add(&bad_cookies, 1, __ATOMIC_RELAXED);
        return p;
    }
    size_t old = ((struct hdr *)p)->size;
    size_t n = newsize(rs, old);
    uint8_t first[EDGE];
    size_t keep = old < n ? old : n;
    if (keep > EDGE)
        keep = EDGE;
    memcpy(first, p, keep);
    void *q = S_REALLOC(p, n);
    if (!q) {
        __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
        return p;
    }
    if (memcmp(first, q, keep) != 0)
        __atomic_fetch_add(&bad_cookies, 1, __ATOMIC_RELAXED);
    stamp(q, n);
    return q;
}

static size_t any_size(uint64_t *rs, size_t old)
{
    (void)old;
    return pick_size(rs);
}

static void *realloc_block(uint64_t *rs, void *p)
{
    return resize_block(rs, p, any_size);
}

/* ---- lock-protected queues ---------------------------------------------- */

#define QCAP 2048

struct queue {
    pthread_mutex_t lock;
    size_t head, count;
    void *slot[QCAP];
};

static struct queue queues[NTHREADS];

static int q_push(struct queue *q, void *p)
{
    pthread_mutex_lock(&q->lock);
    int ok = q->count < QCAP;
    if (ok) {
        q->slot[(q->head + q->count) % QCAP] = p;
        q->count++;
    }
    pthread_mutex_unlock(&q->lock);
    return ok;
}

static void *q_pop(struct queue *q)
{
    void *p = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->count) {
        p = q->slot[q->head];
        q->head = (q->head + 1) % QCAP;
        q->count--;
    }
    pthread_mutex_unlock(&q->lock);
    return p;
}

static void queues_init(void)
{
    for (int i = 0; i < NTHREADS; i++) {
        pthread_mutex_init(&queues[i].lock, NULL);
        queues[i].head = queues[i].count = 0;
    }
}

static pthread_barrier_t start_barrier;

struct worker {
    pthread_t tid;
    int id;
    long iters;
    long allocated, freed;
    /* cross_worker: the sizes, the realloc, blocks kept (<= 256);
     * NULL, NULL, 0: pick_size, realloc_block, 256 */
    size_t (*pick)(uint64_t *rs);
    void *(*resize)(uint64_t *rs, void *p);
    unsigned local;
};

static void *cross_worker(void *arg)
{
    struct worker *w = arg;
    uint64_t rs = mix(0x1234u + (uint64_t)w->id) | 1;
    enum { LOCAL = 256 };
    void *local[LOCAL] = { 0 };
    size_t (*pick)(uint64_t *) = w->pick ? w->pick : pick_size;
    void *(*resize)(uint64_t *, void *) = w->resize ? w->resize : realloc_block;
    unsigned nlocal = w->local ? w->local : LOCAL;
    pthread_barrier_wait(&start_barrier);
    for (long i = 0; i < w->iters; i++) {
        uint64_t r = rnd(&rs);
        /* allocate, then keep it or send it to another thread */
        void *p = alloc_block(&rs, pick(&rs));
        if (!p) {
            __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
            continue;
        }
        w->allocated++;
        if (r & 1) {
            int to = (int)((w->id + 1 + (r >> 8) % (NTHREADS - 1)) % NTHREADS);
            if (!q_push(&queues[to], p)) {
                free_block(p);
                w->freed++;
            }
        } else {
            unsigned k = (unsigned)((r >> 16) % nlocal);
            if (local[k]) {
                free_block(local[k]);
                w->freed++;
            }
            local[k] = p;
        }
        /* free what others sent (sometimes realloc it first) */
        for (int j = 0; j < 2; j++) {
            void *q = q_pop(&queues[w->id]);
            if (!q)
                break;
            if ((rnd(&rs) & 15) == 0)
                q = resize(&rs, q);
            free_block(q);
            w->freed++;
        }
    }
    for (unsigned k = 0; k < LOCAL; k++)
        if (local[k]) {
            free_block(local[k]);
            w->freed++;
        }
    return NULL;
}

/* NTHREADS cross_workers of `iters` steps each; every block is checked. */
static void run_cross(long iters, size_t (*pick)(uint64_t *),
                      void *(*resize)(uint64_t *, void *), unsigned local)
{
    queues_init();
    bad_cookies = null_allocs = 0;
    struct worker w[NTHREADS];
    pthread_barrier_init(&start_barrier, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){ .id = i, .iters = iters, .pick = pick, .resize = resize,
                                .local = local };
        check_eq(pthread_create(&w[i].tid, NULL, cross_worker, &w[i]), 0);
    }
    long allocated = 0, freed = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(w[i].tid, NULL);
        allocated += w[i].allocated;
        freed += w[i].freed;
    }
    pthread_barrier_destroy(&start_barrier);
    /* whatever is still queued: freed here, by yet another thread */
    for (int i = 0; i < NTHREADS; i++)
        for (void *p; (p = q_pop(&queues[i]));) {
            free_block(p);
            freed++;
        }
    check_eq(null_allocs, 0, "%lu allocations returned NULL", null_allocs);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
    check_eq(allocated, freed, "allocated %ld, freed %ld", allocated, freed);
}

Scenario(cross_thread_frees, .timeout = 120)
{
    run_cross(150000 / SCALE, NULL, NULL, 0);
}

/* Large blocks (extents) between threads: 33 KiB..3 MiB and a
 * few of 12..20 MiB (either side of the 16 MiB extent bound: the biggest
 * extents and huge blocks), half sent to another thread to free, some
 * realloc'd (grown or shrunk, in place or not) by the thread that frees
 * them. */
static size_t pick_large(uint64_t *rs)
{
    uint64_t r = rnd(rs);
    if (r % 64 == 0)
        return (12u << 20) + (r >> 8) % (8u << 20);    /* big or huge */
    size_t base = (33u << 10) << (r % 6);              /* 33 KiB .. 1 MiB */
    return base + (r >> 8) % (2 * base);
}

/* Half the time 1.5x (in place when the next extent is free), else any. */
static size_t large_size(uint64_t *rs, size_t old)
{
    return (rnd(rs) & 1) ? old + old / 2 : pick_large(rs);
}

static void *large_realloc_block(uint64_t *rs, void *p)
{
    return resize_block(rs, p, large_size);
}

Scenario(large_blocks_cross_thread, .timeout = 180)
{
    run_cross(8000 / SCALE, pick_large, large_realloc_block, 32);
}

/* Producer/consumer pairs: every block is freed by a thread that did not
 * allocate it, and none is freed by its own thread. */
static void *producer(void *arg)
{
    struct worker *w = arg;
    uint64_t rs = mix(0xabcdu + (uint64_t)w->id) | 1;
    pthread_barrier_wait(&start_barrier);
    for (long i = 0; i < w->iters; i++) {
        size_t n = (rnd(&rs) & 1) ? 64 : pick_size(&rs);
        void *p = alloc_block(&rs, n);
        if (!p) {
            __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
            continue;
        }
        while (!q_push(&queues[w->id], p))
            sched_yield();
        w->allocated++;
    }
    while (!q_push(&queues[w->id], (void *)1))   /* end marker */
        sched_yield();
    return NULL;
}

static void *consumer(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(&start_barrier);
    for (;;) {
        void *p = q_pop(&queues[w->id]);
        if (!p) {
            sched_yield();
            continue;
        }
        if (p == (void *)1)
            break;
        free_block(p);
        w->freed++;
    }
    return NULL;
}

Scenario(producer_consumer_remote_frees, .timeout = 120)
{
    queues_init();
    bad_cookies = null_allocs = 0;
    enum { PAIRS = NTHREADS / 2 };
    struct worker prod[PAIRS], cons[PAIRS];
    pthread_barrier_init(&start_barrier, NULL, 2 * PAIRS);
    for (int i = 0; i < PAIRS; i++) {
        prod[i] = (struct worker){ .id = i, .iters = 200000 / SCALE };
        cons[i] = (struct worker){ .id = i };
        check_eq(pthread_create(&prod[i].tid, NULL, producer, &prod[i]), 0);
        check_eq(pthread_create(&cons[i].tid, NULL, consumer, &cons[i]), 0);
    }
    for (int i = 0; i < PAIRS; i++) {
        pthread_join(prod[i].tid, NULL);
        pthread_join(cons[i].tid, NULL);
    }
    pthread_barrier_destroy(&start_barrier);
    long a = 0, f = 0;
    for (int i = 0; i < PAIRS; i++) {
        a += prod[i].allocated;
        f += cons[i].freed;
    }
    check_eq(null_allocs, 0, "%lu allocations returned NULL", null_allocs);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
    check_eq(a, f, "produced %ld, consumed %ld", a, f);
}

/* The same with a thread that drains every CPU's cache and the transfer
 * caches (malloc_trim) while the batches move between the CPUs: objects on
 * their way between a stack, a transfer cache and a slab are neither lost
 * nor handed out twice. */
static int trimming;

static void *trimmer(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&trimming, __ATOMIC_ACQUIRE)) {
        S_TRIM();
        usleep(200);
    }
    return NULL;
}

Scenario(producer_consumer_while_draining, .timeout = 120)
{
    queues_init();
    bad_cookies = null_allocs = 0;
    struct worker prod = { .id = 0, .iters = 200000 / SCALE }, cons = { .id = 0 };
    pthread_t trim;
    __atomic_store_n(&trimming, 1, __ATOMIC_RELEASE);
    pthread_barrier_init(&start_barrier, NULL, 2);
    check_eq(pthread_create(&trim, NULL, trimmer, NULL), 0);
    check_eq(pthread_create(&prod.tid, NULL, producer, &prod), 0);
    check_eq(pthread_create(&cons.tid, NULL, consumer, &cons), 0);
    pthread_join(prod.tid, NULL);
    pthread_join(cons.tid, NULL);
    __atomic_store_n(&trimming, 0, __ATOMIC_RELEASE);
    pthread_join(trim, NULL);
    pthread_barrier_destroy(&start_barrier);
    check_eq(null_allocs, 0, "%lu allocations returned NULL", null_allocs);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
    check_eq(prod.allocated, cons.freed, "produced %ld, consumed %ld",
             prod.allocated, cons.freed);
}

/* ---- thread churn -------------------------------------------------------- */

static pthread_mutex_t handoff_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handoff;
static size_t handoff_n, handoff_cap;

static void *churn_thread(void *arg)
{
    uint64_t rs = mix((uintptr_t)arg + 77) | 1;
    enum { N = 200 };
    void *mine[N];
    int n = 0;
    for (int i = 0; i < N; i++) {
        void *p = alloc_block(&rs, pick_size(&rs));
        if (!p) {
            __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
            continue;
        }
        mine[n++] = p;
    }
    /* free some (every third), hand the rest to the main thread */
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0)
            free_block(mine[i]);
        else
            mine[kept++] = mine[i];
    }
    pthread_mutex_lock(&handoff_lock);
    for (int i = 0; i < kept; i++)
        handoff[handoff_n++] = mine[i];
    pthread_mutex_unlock(&handoff_lock);
    return NULL;
}

Scenario(thread_churn, .timeout = 120)
{
    enum { THREADS = 200, BATCH = 8 };
    bad_cookies = null_allocs = 0;
    handoff_cap = (size_t)THREADS * 200;
    handoff = calloc(handoff_cap, sizeof *handoff);      /* the test's own memory */
    handoff_n = 0;
    check_not_null(handoff);
    for (int t = 0; t < THREADS; t += BATCH) {
        pthread_t tid[BATCH];
        for (int i = 0; i < BATCH; i++)
            check_eq(pthread_create(&tid[i], NULL, churn_thread,
                                    (void *)(uintptr_t)(t + i)), 0);
        for (int i = 0; i < BATCH; i++)
            pthread_join(tid[i], NULL);
        /* free half of what was handed over so far, while threads come and go */
        pthread_mutex_lock(&handoff_lock);
        size_t half = handoff_n / 2;
        for (size_t i = half; i < handoff_n; i++)
            free_block(handoff[i]);
        handoff_n = half;
        pthread_mutex_unlock(&handoff_lock);
    }
    for (size_t i = 0; i < handoff_n; i++)
        free_block(handoff[i]);
    handoff_n = 0;
    free(handoff);
    check_eq(null_allocs, 0, "%lu allocations returned NULL", null_allocs);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
}

Scenario(thread_churn_detached_exit_with_live_blocks, .timeout = 120)
{
    /* Threads that exit while their active slabs still hold live blocks
     * that other threads then free, then new threads reuse the slabs. */
    enum { ROUNDS = 40, T = 4 };
    bad_cookies = null_allocs = 0;
    handoff_cap = (size_t)ROUNDS * T * 200;
    handoff = calloc(handoff_cap, sizeof *handoff);
    handoff_n = 0;
    check_not_null(handoff);
    for (int r = 0; r < ROUNDS / SCALE; r++) {
        pthread_t tid[T];
        for (int i = 0; i < T; i++)
            check_eq(pthread_create(&tid[i], NULL, churn_thread,
                                    (void *)(uintptr_t)(1000 + r * T + i)), 0);
        for (int i = 0; i < T; i++)
            pthread_join(tid[i], NULL);
    }
    for (size_t i = 0; i < handoff_n; i++)
        free_block(handoff[i]);
    handoff_n = 0;
    free(handoff);
    check_eq(null_allocs, 0);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
}

/* ---- fork while other threads allocate ------------------------------------ */

static volatile int stop_flag;

static void *busy_allocator(void *arg)
{
    uint64_t rs = mix((uintptr_t)arg + 991) | 1;
    enum { K = 64 };
    void *keep[K] = { 0 };
    while (!__atomic_load_n(&stop_flag, __ATOMIC_RELAXED)) {
        unsigned k = (unsigned)(rnd(&rs) % K);
        if (keep[k])
            free_block(keep[k]);
        keep[k] = alloc_block(&rs, pick_size(&rs));
        if (!keep[k])
            __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
    }
    for (unsigned k = 0; k < K; k++)
        if (keep[k])
            free_block(keep[k]);
    return NULL;
}

/* In the child: allocate and free through every path, check, exit. */
static int child_work(void)
{
    uint64_t rs = 0x9e3779b97f4a7c15ULL;
    enum { N = 500 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = alloc_block(&rs, pick_size(&rs));
        if (!p[i])
            return 2;
    }
    for (int i = 0; i < N; i += 2)
        p[i] = realloc_block(&rs, p[i]);
    for (int i = 0; i < N; i++) {
        if (!verify(p[i], (uintptr_t)p[i]))
            return 3;
        S_FREE(p[i]);
    }
    void *big = S_MALLOC(8u << 20);
    if (!big)
        return 4;
    memset(big, 1, 8u << 20);
    S_FREE(big);
    return bad_cookies ? 5 : 0;
}

/* Wait for pid at most `secs`; SIGKILL it on timeout.  Returns the wait
 * status, or -1 on timeout. */
static int wait_timeout(pid_t pid, double secs)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 && errno != EINTR)
            return -2;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 > secs) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
}

Scenario(fork_while_threads_allocate, .timeout = 180)
{
    enum { WORKERS = 3, FORKS = 20 };
    bad_cookies = null_allocs = 0;
    stop_flag = 0;
    pthread_t tid[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        check_eq(pthread_create(&tid[i], NULL, busy_allocator, (void *)(uintptr_t)i), 0);
    usleep(20000);
    int hung = 0, hung_at = -1, failed = 0, last_status = 0;
    for (int f = 0; f < FORKS; f++) {
        fflush(NULL);
        pid_t pid = fork();
        check_geq(pid, 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            alarm(90);
            _exit(child_work());
        }
        int st = wait_timeout(pid, 60.0);
        if (st == -1) {
            hung++;
            hung_at = f;
            break;              /* one hang is the answer; don't wait for more */
        } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            failed++;
            last_status = st;
        }
        usleep(5000);
    }
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(tid[i], NULL);
    check_eq(hung, 0, "forked child %d of %d hung (killed after 60 s)",
             hung_at, FORKS);
    check_eq(failed, 0, "%d of %d forked children failed; last: %s %d", failed, FORKS,
             WIFEXITED(last_status) ? "exit" : "signal",
             WIFEXITED(last_status) ? WEXITSTATUS(last_status) : WTERMSIG(last_status));
    check_eq(null_allocs, 0);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
}

/* Fork while another thread makes the process's first allocation (the
 * allocator's one-time set-up).  Each round runs in a fresh process P in
 * which the allocator has not been used yet (true for the static core,
 * where nothing before the scenario calls sdm_*; the shared library sets up
 * before main, so there the round only checks fork right after a thread
 * starts): P starts a thread that allocates, forks at once, and its child
 * must be able to allocate. */
static void *first_use(void *arg)
{
    (void)arg;
    S_FREE(S_MALLOC(16));
    return NULL;
}

static int first_use_round(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, first_use, NULL))
        return 10;
    pid_t c = fork();
    if (c < 0)
        return 11;
    if (c == 0) {
        alarm(5);
        void *p = S_MALLOC(16);
        S_FREE(p);
        _exit(p ? 0 : 12);
    }
    int st = wait_timeout(c, 3.0);
    pthread_join(t, NULL);
    if (st == -1)
        return 13;                      /* the child hung */
    return WIFEXITED(st) ? WEXITSTATUS(st) : 14;
}

Scenario(fork_during_first_use, .timeout = 120)
{
    enum { ROUNDS = 300 };
    for (int r = 0; r < ROUNDS; r++) {
        fflush(NULL);
        pid_t p = fork();
        check_geq(p, 0);
        if (p == 0)
            _exit(first_use_round());
        int st = wait_timeout(p, 20.0);
        check_neq(st, -1, "round %d: the test process hung", r);
        check(WIFEXITED(st), "round %d: killed by signal %d", r, WTERMSIG(st));
        check_neq(WEXITSTATUS(st), 13, "round %d of %d: a child forked during the "
                  "allocator's first use hung in its first allocation", r, ROUNDS);
        check_eq(WEXITSTATUS(st), 0, "round %d: status %d", r, WEXITSTATUS(st));
    }
}

Scenario(parent_still_works_after_forks, .timeout = 60)
{
    /* After fork with busy threads, the parent's allocator is intact. */
    stop_flag = 0;
    bad_cookies = null_allocs = 0;
    pthread_t t;
    check_eq(pthread_create(&t, NULL, busy_allocator, (void *)(uintptr_t)5), 0);
    for (int f = 0; f < 5; f++) {
        pid_t pid = fork();
        check_geq(pid, 0);
        if (pid == 0)
            _exit(child_work());
        int st = wait_timeout(pid, 60.0);
        check(st != -1, "forked child %d hung (killed after 60 s)", f);
        check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child %d: wait status %#x",
              f, st);
    }
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    check_eq(child_work(), 0, "parent allocations after forks failed");
    check_eq(bad_cookies, 0);
}

/* ---- many threads --------------------------------------------------------- */

/* 512 threads at once: each allocates blocks, hands half to a shared pile
 * and frees blocks from the pile (allocated by other threads, many of
 * which have exited by then), and leaves its own last blocks on the pile
 * when it exits; the others keep freeing into the slabs of the threads
 * that are gone.  With per-CPU caches every free lands on some CPU's
 * stack whichever thread allocated the block. */
enum { MANY = 512, PILE = 1 << 16 };
static pthread_mutex_t pile_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pile[PILE];
static size_t npile;
static unsigned long many_alloc, many_freed;

static void pile_put(void *p)
{
    pthread_mutex_lock(&pile_lock);
    if (npile < PILE) {
        pile[npile++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&pile_lock);
    if (p) {                                    /* pile full: free it here */
        free_block(p);
        __atomic_fetch_add(&many_freed, 1, __ATOMIC_RELAXED);
    }
}

static void *pile_take(void)
{
    void *p = NULL;
    pthread_mutex_lock(&pile_lock);
    if (npile)
        p = pile[--npile];
    pthread_mutex_unlock(&pile_lock);
    return p;
}

static void *many_worker(void *arg)
{
    uint64_t rs = mix(0x5eedu + (uintptr_t)arg) | 1;
    void *mine[16] = { 0 };
    for (int i = 0; i < 400 / SCALE; i++) {
        void *p = alloc_block(&rs, (rnd(&rs) & 3) ? 16 + rnd(&rs) % 500 : pick_size(&rs));
        if (!p) {
            __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
            continue;
        }
        __atomic_fetch_add(&many_alloc, 1, __ATOMIC_RELAXED);
        unsigned k = (unsigned)(rnd(&rs) % 16);
        if (rnd(&rs) & 1) {
            pile_put(p);
        } else {
            if (mine[k]) {
                free_block(mine[k]);
                __atomic_fetch_add(&many_freed, 1, __ATOMIC_RELAXED);
            }
            mine[k] = p;
        }
        void *q = pile_take();
        if (q) {
            free_block(q);
            __atomic_fetch_add(&many_freed, 1, __ATOMIC_RELAXED);
        }
    }
    for (unsigned k = 0; k < 16; k++)           /* freed by others, later */
        if (mine[k])
            pile_put(mine[k]);
    return NULL;
}

Scenario(many_threads_free_into_exited_threads, .timeout = 300)
{
    bad_cookies = null_allocs = 0;
    many_alloc = many_freed = 0;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 128 << 10);
    static pthread_t t[MANY];
    for (uintptr_t i = 0; i < MANY; i++)
        check_eq(pthread_create(&t[i], &at, many_worker, (void *)i), 0,
                 "pthread_create %lu", (unsigned long)i);
    for (unsigned i = 0; i < MANY; i++)
        pthread_join(t[i], NULL);
    pthread_attr_destroy(&at);
    for (void *p; (p = pile_take());) {
        free_block(p);
        many_freed++;
    }
    check_eq(null_allocs, 0);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
    check_eq(many_alloc, many_freed, "allocated %lu, freed %lu", many_alloc, many_freed);
}

/* A thread in the middle of its allocation loop forks, again and again,
 * while others allocate and free: the child (only that thread) allocates,
 * frees and exits 0. */
static void *forking_allocator(void *arg)
{
    uint64_t rs = mix(0xf0f0u) | 1;
    void *keep[64] = { 0 };
    intptr_t bad = 0;
    for (int f = 0; f < 20; f++) {
        for (int i = 0; i < 2000; i++) {        /* the hot loop */
            unsigned k = (unsigned)(rnd(&rs) % 64);
            if (keep[k])
                free_block(keep[k]);
            keep[k] = alloc_block(&rs, pick_size(&rs));
        }
        pid_t pid = fork();
        if (pid < 0)
            return (void *)1;
        if (pid == 0) {
            alarm(90);
            for (unsigned k = 0; k < 64; k++)   /* the parent's blocks, here too */
                if (keep[k])
                    free_block(keep[k]);
            _exit(child_work() || bad_cookies ? 1 : 0);
        }
        int st = wait_timeout(pid, 60.0);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    for (unsigned k = 0; k < 64; k++)
        if (keep[k])
            free_block(keep[k]);
    return (void *)bad;
}

Scenario(fork_from_thread_in_hot_loop, .timeout = 180)
{
    bad_cookies = null_allocs = 0;
    stop_flag = 0;
    pthread_t busy[2], forker;
    for (uintptr_t i = 0; i < 2; i++)
        check_eq(pthread_create(&busy[i], NULL, busy_allocator, (void *)(i + 7)), 0);
    check_eq(pthread_create(&forker, NULL, forking_allocator, NULL), 0);
    void *bad;
    pthread_join(forker, &bad);
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 2; i++)
        pthread_join(busy[i], NULL);
    check_eq((intptr_t)bad, 0, "%ld of 20 children forked from a busy thread failed "
             "or hung", (long)(intptr_t)bad);
    check_eq(bad_cookies, 0);
    check_eq(null_allocs, 0);
}


/* Per-thread mode (SLABDEFRAG_PERCPU=0): while threads allocate, free
 * and pause, another thread takes the slabs of those outside the
 * allocator, again and again (the gate of classes/tcache.h: the
 * shrinker's reclaim, or malloc_trim's).  No block is lost, damaged or
 * handed out twice.  The static-core build forces per-thread mode, counts
 * the takes through tcache_reclaim and requires some; in per-CPU mode the
 * preloaded build runs the same load (nothing to take there). */
#if STRESS_SDM
#include "tcache.h"
#endif
#define RECLAIM_THREADS 6
#define RECLAIM_SLOTS 256

#if STRESS_SDM
/* Options are read before main: run scenario `name` again in a process
 * started in per-thread mode, and check that it passed; 0 if this process
 * is the per-thread one already (the scenario goes on). */
static int again_per_thread(const char *name)
{
    const char *mode = getenv("SLABDEFRAG_PERCPU");
    if (mode && !strcmp(mode, "0"))
        return 0;
    pid_t pid = fork();
    check_geq(pid, 0);
    if (pid == 0) {
        char *env[] = { "SLABDEFRAG_PERCPU=0", NULL };
        execle("/proc/self/exe", "stress-sdm", name, (char *)NULL, env);
        _exit(127);
    }
    int st = wait_timeout(pid, 100.0);
    check(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "%s in per-thread mode failed (status %#x)", name, st);
    return 1;
}
#endif

static void *reclaim_worker(void *arg)
{
    uint64_t rs = mix(0xaceu + (uintptr_t)arg) | 1;
    void *slot[RECLAIM_SLOTS] = { 0 };
    for (int round = 0; round < 300 / SCALE && !__atomic_load_n(&stop_flag, __ATOMIC_RELAXED);
         round++) {
        for (int i = 0; i < 200; i++) {
            unsigned k = (unsigned)(rnd(&rs) % RECLAIM_SLOTS);
            if (slot[k])
                free_block(slot[k]);
            slot[k] = alloc_block(&rs, 16 + rnd(&rs) % 700);
            if (!slot[k])
                __atomic_fetch_add(&null_allocs, 1, __ATOMIC_RELAXED);
        }
        if (rnd(&rs) % 4 == 0)
            usleep(200);                /* outside the allocator: takeable */
    }
    for (unsigned k = 0; k < RECLAIM_SLOTS; k++)
        if (slot[k])
            free_block(slot[k]);
    return NULL;
}

Scenario(reclaim_idle_threads_while_others_run, .timeout = 120)
{
#if STRESS_SDM
    if (again_per_thread("reclaim_idle_threads_while_others_run"))
        return;
    uint64_t rs = mix(0x7ecu) | 1;
#endif
    bad_cookies = null_allocs = 0;
    stop_flag = 0;
    pthread_t t[RECLAIM_THREADS];
    for (uintptr_t i = 0; i < RECLAIM_THREADS; i++)
        check_eq(pthread_create(&t[i], NULL, reclaim_worker, (void *)i), 0);
#if STRESS_SDM
    unsigned long taken = 0;
#endif
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
#if STRESS_SDM
        taken += tcache_reclaim(rnd(&rs) & 1);
#else
        malloc_trim(0);
#endif
        usleep(300);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - t0.tv_sec < 2);
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < RECLAIM_THREADS; i++)
        pthread_join(t[i], NULL);
    check_eq(null_allocs, 0);
    check_eq(bad_cookies, 0, "%lu blocks had a damaged cookie when freed", bad_cookies);
#if STRESS_SDM
    check(taken > 0, "no idle thread's slabs were taken in 2 s");
#endif
}

/* Parked threads' slabs are taken at the shrinker's second look (the
 * first sees their calls since it last looked), and the survivors they
 * free afterwards go back as any other thread's frees would.  The
 * preloaded build takes them with malloc_trim (every thread outside the
 * allocator), in per-thread mode when the suite runs with
 * SLABDEFRAG_PERCPU=0. */
#define PARKED 8
static pthread_barrier_t parked_in, parked_out;

static void *parked_worker(void *arg)
{
    uint64_t rs = mix(0x9a4cu + (uintptr_t)arg) | 1;
    void *keep[64];
    for (int i = 0; i < 1024; i++) {
        void *p = alloc_block(&rs, 16 + rnd(&rs) % 480);
        if (i % 16 == 0 && p)
            keep[i / 16] = p;
        else if (p)
            free_block(p);                  /* onto the thread's own slabs */
    }
    pthread_barrier_wait(&parked_in);
    pthread_barrier_wait(&parked_out);      /* parked, outside the allocator */
    for (int i = 0; i < 64; i++)
        free_block(keep[i]);
    return NULL;
}

Scenario(reclaim_takes_parked_threads_at_second_look, .timeout = 60)
{
#if STRESS_SDM
    if (again_per_thread("reclaim_takes_parked_threads_at_second_look"))
        return;
#endif
    bad_cookies = 0;
    pthread_barrier_init(&parked_in, NULL, PARKED + 1);
    pthread_barrier_init(&parked_out, NULL, PARKED + 1);
    pthread_t t[PARKED];
    for (uintptr_t i = 0; i < PARKED; i++)
        check_eq(pthread_create(&t[i], NULL, parked_worker, (void *)i), 0);
    pthread_barrier_wait(&parked_in);
#if STRESS_SDM
    unsigned first = tcache_reclaim(0), second = tcache_reclaim(0), third = tcache_reclaim(0);
    check_eq(first, 0, "threads with calls since the last look were taken: %u", first);
    check_eq(second, PARKED, "took %u of %d parked threads", second, PARKED);
    check_eq(third, 0, "took %u threads that hold nothing", third);
#else
    malloc_trim(0);
#endif
    pthread_barrier_wait(&parked_out);
    for (unsigned i = 0; i < PARKED; i++)
        pthread_join(t[i], NULL);
    check_eq(bad_cookies, 0);
}
