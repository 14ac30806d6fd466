/*
 * bench/sizemix.c - threads that each replace random blocks of their own
 * working set, sizes drawn from an inverse-square law (any allocator,
 * plain C).
 *
 *   sizemix [-t THREADS] [-w WORKING_SET] [-n STEPS] [-m MIN] [-M MAX] [-s SEED]
 *
 * Each of THREADS threads (default: the online CPUs) keeps WORKING_SET
 * (default 1024) slots and does STEPS (default 20,000,000) steps: pick a
 * random slot, free its block, malloc a new one and write its first and
 * last byte.  Sizes follow P(size > x) ~ MIN / x between MIN (default 4)
 * and MAX (default 32,768) bytes: mostly tiny blocks, now and then one of
 * several KiB, the size mix glibc's own malloc benchmark draws.  The
 * threads share nothing: what it measures is the fast paths of malloc and
 * free back to back in the same size class, and how often the thread or
 * CPU caches of the rarer, larger classes run dry or overflow.
 *
 * The clock covers the steps of all threads (start to the last one done).
 *
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = one malloc or one free), `final_rss_kb=`, `peak_rss_kb=`.
 */
#include "benchutil.h"

static long steps = 20000000, wset = 1024;
static double min_sz = 4, max_sz = 32768;
static uint64_t seed = 88;

static void *worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    bu_rng r;
    bu_seed(&r, seed + (uint64_t)id);
    char **p = calloc((size_t)wset, sizeof *p);
    unsigned *n = calloc((size_t)wset, sizeof *n);
    if (!p || !n)
        bu_die("sizemix", "out of memory");
    /* Inverse square: size = 1 / (a + (b - a) u), a = 1/MAX, b = 1/MIN. */
    double a = 1.0 / max_sz, b = 1.0 / min_sz;
    for (long s = 0; s < steps; s++) {
        size_t k = (size_t)(bu_next(&r) % (uint64_t)wset);
        if (p[k]) {
            bu_check("sizemix", p[k], n[k]);
            free(p[k]);
        }
        double u = (double)(bu_next(&r) >> 11) * (1.0 / 9007199254740992.0);
        n[k] = (unsigned)(1.0 / (a + (b - a) * u));
        if (n[k] < 1)
            n[k] = 1;
        if (!(p[k] = malloc(n[k])))
            bu_die("sizemix", "malloc failed");
        bu_tag(p[k], n[k]);
    }
    for (long k = 0; k < wset; k++)
        free(p[k]);
    free(p);
    free(n);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: sizemix [-t THREADS] [-w WORKING_SET] [-n STEPS] [-m MIN] "
                    "[-M MAX] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long threads = bu_ncpu();
    int c;
    while ((c = getopt(argc, argv, "t:w:n:m:M:s:h")) != -1) {
        switch (c) {
        case 't': threads = atol(optarg); break;
        case 'w': wset = atol(optarg); break;
        case 'n': steps = atol(optarg); break;
        case 'm': min_sz = atof(optarg); break;
        case 'M': max_sz = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (threads < 1 || wset < 1 || steps < 1 || min_sz < 1 || max_sz < min_sz)
        usage();
    pthread_t *t = malloc((size_t)threads * sizeof *t);
    if (!t)
        bu_die("sizemix", "out of memory");
    bu_event("start");
    double t0 = bu_now();
    for (long i = 0; i < threads; i++)
        bu_thread("sizemix", &t[i], 0, worker, (void *)(intptr_t)i);
    for (long i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double sec = bu_now() - t0;
    free(t);
    double ops = 2.0 * (double)steps * (double)threads;
    printf("sizemix: %ld threads x %ld steps over %ld slots, %.0f..%.0f B: %.2f s, %.3g ops/s\n",
           threads, steps, wset, min_sz, max_sz, sec, ops / sec);
    bu_speed(ops, sec);
    bu_final();
    return 0;
}
