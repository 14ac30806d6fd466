/*
 * bench/churn.c - multi-threaded random malloc/free churn, each thread in
 * its own working set (any allocator, plain C).
 *
 *   churn [-t THREADS] [-n STEPS] [-w LIVE] [-m MIN] [-M MAX] [-s SEED]
 *
 * THREADS threads (default: the number of online CPUs; scripts/compare
 * runs it with 1 and with that number) each fill an array of LIVE
 * (default 2000) blocks of random sizes, uniform in MIN..MAX bytes
 * (default 16..512), then do STEPS (default 25,000,000) random
 * replacements: pick a random slot, check and free its block, malloc a new
 * one of a random size and tag it.  Nothing crosses threads: this is the
 * allocator's thread-local fast path and how it scales with threads.  The
 * work per thread is fixed, so with perfect scaling (and free CPUs) the
 * time is the same at 1 and at N threads.
 *
 * The threads start together on a barrier once they have filled their
 * arrays; the clock runs from the barrier to the last thread's end of its
 * replacements (the final frees are not timed).  Each thread has its own
 * seed: the same sequence under every allocator.
 *
 * After the timed phase, before the final frees, the threads' live
 * blocks are laid side by side: `shared_lines_pct=` is the share of the
 * 64-byte cache lines they touch that hold blocks of two threads or more
 * (false sharing: each such line moves between the CPUs whenever both
 * threads write their blocks), `shared_pages_pct=` the same for 4 KiB
 * pages.  A thread-private layout (jemalloc's arena per thread) gives 0.
 *
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = one malloc or one free: 2 per step, summed over the threads),
 * `shared_lines_pct=`, `shared_pages_pct=`, `final_rss_kb=`,
 * `peak_rss_kb=`.
 */
#include "benchutil.h"

struct worker {
    pthread_t tid;
    uint64_t seed;
    double t_end;
    char **p;                   /* its live blocks, for shared_layout() */
    unsigned *n;
};

static long steps = 25000000;
static int live = 2000;
static size_t min_sz = 16, max_sz = 512;
static pthread_barrier_t start, timed, laid_out;

struct unit { uintptr_t no; int thread; };

static int unit_cmp(const void *a, const void *b)
{
    const struct unit *x = a, *y = b;
    return x->no < y->no ? -1 : x->no > y->no;
}

/* Percent of the units (cache lines at shift 6, pages at 12) in u that
 * hold blocks of more than one thread; sorts u. */
static double shared_pct(struct unit *u, size_t m, int shift)
{
    for (size_t i = 0; i < m; i++)
        u[i].no >>= shift;
    qsort(u, m, sizeof *u, unit_cmp);
    size_t all = 0, shared = 0;
    for (size_t i = 0, j; i < m; i = j) {
        int mixed = 0;
        for (j = i; j < m && u[j].no == u[i].no; j++)
            mixed |= u[j].thread != u[i].thread;
        all++;
        shared += (size_t)mixed;
    }
    return all ? 100.0 * (double)shared / (double)all : 0.0;
}

/* The threads' live blocks side by side: what share of the cache lines and
 * pages they touch holds blocks of two threads (see the top). */
static void shared_layout(const struct worker *w, int threads)
{
    size_t m = 0, cap = 0;
    for (int t = 0; t < threads; t++)
        for (int i = 0; i < live; i++)
            cap += w[t].n[i] / 64 + 2;
    struct unit *u = malloc(cap * sizeof *u);
    if (!u)
        bu_die("churn", "out of memory");
    for (int t = 0; t < threads; t++)
        for (int i = 0; i < live; i++) {
            uintptr_t a = (uintptr_t)w[t].p[i];
            for (uintptr_t l = a >> 6; l <= (a + w[t].n[i] - 1) >> 6; l++)
                u[m++] = (struct unit){ l << 6, t };
        }
    double lines = shared_pct(u, m, 6);
    for (size_t i = 0; i < m; i++)
        u[i].no <<= 6;                   /* back to addresses */
    double pages = shared_pct(u, m, 12);
    free(u);
    bu_kv_double("shared_lines_pct", lines);
    bu_kv_double("shared_pages_pct", pages);
}

static void *work(void *argp)
{
    struct worker *w = argp;
    bu_rng r;
    bu_seed(&r, w->seed);
    char **p = malloc((size_t)live * sizeof *p);
    unsigned *n = malloc((size_t)live * sizeof *n);
    if (!p || !n)
        bu_die("churn", "out of memory");
    for (int i = 0; i < live; i++) {
        n[i] = (unsigned)bu_range(&r, min_sz, max_sz);
        if (!(p[i] = malloc(n[i])))
            bu_die("churn", "malloc failed");
        bu_tag(p[i], n[i]);
    }
    pthread_barrier_wait(&start);
    for (long s = 0; s < steps; s++) {
        unsigned k = (unsigned)(bu_next(&r) % (uint64_t)live);
        bu_check("churn", p[k], n[k]);
        free(p[k]);
        n[k] = (unsigned)bu_range(&r, min_sz, max_sz);
        if (!(p[k] = malloc(n[k])))
            bu_die("churn", "malloc failed");
        bu_tag(p[k], n[k]);
    }
    w->t_end = bu_now();
    w->p = p;
    w->n = n;
    pthread_barrier_wait(&timed);       /* main lays the blocks out */
    pthread_barrier_wait(&laid_out);
    for (int i = 0; i < live; i++) {
        bu_check("churn", p[i], n[i]);
        free(p[i]);
    }
    free(p);
    free(n);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: churn [-t THREADS] [-n STEPS] [-w LIVE] [-m MIN] [-M MAX] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = bu_ncpu();
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "t:n:w:m:M:s:h")) != -1) {
        switch (c) {
        case 't': threads = atoi(optarg); break;
        case 'n': steps = atol(optarg); break;
        case 'w': live = atoi(optarg); break;
        case 'm': min_sz = (size_t)atol(optarg); break;
        case 'M': max_sz = (size_t)atol(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (threads < 1 || steps < 1 || live < 1 || min_sz < 1 || max_sz < min_sz)
        usage();

    struct worker *w = calloc((size_t)threads, sizeof *w);
    if (!w)
        bu_die("churn", "out of memory");
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&timed, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&laid_out, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        w[i].seed = seed + 1000 * (uint64_t)i;
        bu_thread("churn", &w[i].tid, 0, work, &w[i]);
    }
    pthread_barrier_wait(&start);       /* every array is filled */
    double t0 = bu_now();
    bu_event("start");
    double t1 = t0;
    pthread_barrier_wait(&timed);       /* every thread is done, blocks live */
    shared_layout(w, threads);
    pthread_barrier_wait(&laid_out);
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].t_end > t1)
            t1 = w[i].t_end;
    }
    double sec = t1 - t0;
    double ops = 2.0 * (double)steps * threads;
    printf("churn: %d thread(s) x %ld steps, %d live blocks of %zu..%zu B each: "
           "%.2f s, %.3g ops/s\n", threads, steps, live, min_sz, max_sz, sec, ops / sec);
    bu_speed(ops, sec);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&timed);
    pthread_barrier_destroy(&laid_out);
    free(w);
    bu_final();
    return 0;
}
