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
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = one malloc or one free: 2 per step, summed over the threads),
 * `final_rss_kb=`, `peak_rss_kb=`.
 */
#include "benchutil.h"

struct worker {
    pthread_t tid;
    uint64_t seed;
    double t_end;
};

static long steps = 25000000;
static int live = 2000;
static size_t min_sz = 16, max_sz = 512;
static pthread_barrier_t start;

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
    for (int i = 0; i < threads; i++) {
        w[i].seed = seed + 1000 * (uint64_t)i;
        bu_thread("churn", &w[i].tid, 0, work, &w[i]);
    }
    pthread_barrier_wait(&start);       /* every array is filled */
    double t0 = bu_now();
    bu_event("start");
    double t1 = t0;
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
    free(w);
    bu_final();
    return 0;
}
