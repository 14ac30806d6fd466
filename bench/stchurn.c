/*
 * bench/stchurn.c - single-thread random-order churn over a working set
 * larger than any thread cache (any allocator, plain C).
 *
 *   stchurn [-w LIVE] [-n STEPS] [-m MIN] [-M MAX] [-s SEED]
 *
 * One thread fills an array of LIVE (default 100,000) blocks of random
 * sizes, uniform in MIN..MAX bytes (default 16..256; about 13 MiB
 * requested), then does STEPS (default 8,000,000) random replacements:
 * pick a random slot, check and free its block, malloc a new one of a
 * random size and tag it.  With 100k live blocks spread over thousands of
 * slabs or pages, a free rarely lands where the last ones did: it is the
 * cost of frees scattered over the heap (cache and TLB misses, slabs
 * going from full to partial and back), not of a hot thread cache.
 *
 * The clock covers the replacements only (not the fill or the final
 * frees).  The same seed gives the same sequence under every allocator.
 *
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = one malloc or one free: 2 per step), `fill_s=` (the initial fill),
 * `churn_rss_kb=` (VmRSS at the end of the replacements, all blocks
 * live), `final_rss_kb=` (after the final frees), `peak_rss_kb=`.
 */
#include "benchutil.h"

static void usage(void)
{
    fprintf(stderr, "usage: stchurn [-w LIVE] [-n STEPS] [-m MIN] [-M MAX] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long live = 100000, steps = 8000000;
    size_t min_sz = 16, max_sz = 256;
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "w:n:m:M:s:h")) != -1) {
        switch (c) {
        case 'w': live = atol(optarg); break;
        case 'n': steps = atol(optarg); break;
        case 'm': min_sz = (size_t)atol(optarg); break;
        case 'M': max_sz = (size_t)atol(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (live < 1 || steps < 1 || min_sz < 1 || max_sz < min_sz)
        usage();

    bu_rng r;
    bu_seed(&r, seed);
    char **p = malloc((size_t)live * sizeof *p);
    unsigned *n = malloc((size_t)live * sizeof *n);
    if (!p || !n)
        bu_die("stchurn", "out of memory");
    bu_event("start");
    double t0 = bu_now();
    for (long i = 0; i < live; i++) {
        n[i] = (unsigned)bu_range(&r, min_sz, max_sz);
        if (!(p[i] = malloc(n[i])))
            bu_die("stchurn", "malloc failed");
        bu_tag(p[i], n[i]);
    }
    double t1 = bu_now();
    for (long s = 0; s < steps; s++) {
        size_t k = (size_t)(bu_next(&r) % (uint64_t)live);
        bu_check("stchurn", p[k], n[k]);
        free(p[k]);
        n[k] = (unsigned)bu_range(&r, min_sz, max_sz);
        if (!(p[k] = malloc(n[k])))
            bu_die("stchurn", "malloc failed");
        bu_tag(p[k], n[k]);
    }
    double sec = bu_now() - t1;
    bu_event("churn_done");
    long rss = proc_status_kb("VmRSS");
    for (long i = 0; i < live; i++) {
        bu_check("stchurn", p[i], n[i]);
        free(p[i]);
    }
    free(p);
    free(n);
    double ops = 2.0 * (double)steps;
    printf("stchurn: %ld live blocks of %zu..%zu B, %ld steps: %.2f s, %.3g ops/s "
           "(fill %.3f s, RSS at the end of the churn %.1f MiB)\n",
           live, min_sz, max_sz, steps, sec, ops / sec, t1 - t0, rss / 1024.0);
    bu_speed(ops, sec);
    bu_kv_double("fill_s", t1 - t0);
    bu_kv_long("churn_rss_kb", rss);
    bu_final();
    return 0;
}
