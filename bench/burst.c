/*
 * bench/burst.c - how fast memory comes back after a burst of frees
 * (the shrinker's time to its steady state).
 *
 *   burst [-n BLOCKS] [-f FREE_PERCENT] [-H HOLD_SECONDS] [-s SEED]
 *
 * 1. Allocate BLOCKS (default 1M) blocks of 16..255 B, every byte written.
 * 2. Free a random FREE_PERCENT% (default 90), in random order.
 * 3. Hold HOLD_SECONDS (default 6) without calling the allocator, reading
 *    VmRSS every 50 ms.
 *
 * Reported on stderr (key=value): live_bytes, rss_after_free_kb,
 * final_rss_kb (end of the hold), rss_per_live, and steady_s: the time
 * from the end of the frees after which VmRSS stays within 5% (of the
 * memory released during the hold) of its final value, i.e. how long the
 * allocator took to give back what it was going to give back.  0 when
 * nothing comes back during the hold (no background work).  Events:
 * free_done.
 */
#include "benchutil.h"

#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long n = 1000000;
    int free_pct = 90;
    double hold = 6.0;
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "n:f:H:s:h")) != -1) {
        switch (c) {
        case 'n': n = atol(optarg); break;
        case 'f': free_pct = atoi(optarg); break;
        case 'H': hold = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: burst [-n BLOCKS] [-f FREE_PERCENT] [-H HOLD_SECONDS] [-s SEED]\n");
            return 2;
        }
    }
    if (n <= 0 || free_pct < 0 || free_pct > 100 || hold <= 0)
        bu_die("burst", "bad argument");
    bu_rng r;
    bu_seed(&r, seed);
    /* Bookkeeping in mmap()ed memory, off the heap being measured. */
    size_t nsamples = (size_t)(hold / 0.05) + 2;
    char **ptr = mmap(NULL, (size_t)n * sizeof *ptr, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned *len = mmap(NULL, (size_t)n * sizeof *len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double *st = mmap(NULL, nsamples * sizeof *st, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long *sr = mmap(NULL, nsamples * sizeof *sr, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED || len == MAP_FAILED || st == MAP_FAILED || sr == MAP_FAILED)
        bu_die("burst", "mmap failed");
    bu_event("start");
    for (long i = 0; i < n; i++) {
        size_t sz = bu_range(&r, 16, 255);
        if (!(ptr[i] = malloc(sz)))
            bu_die("burst", "malloc failed");
        memset(ptr[i], (int)(i & 0xff), sz);
        len[i] = (unsigned)sz;
    }
    size_t live = 0;
    for (long i = 0; i < n; i++) {
        if ((long)(bu_next(&r) % 100) < free_pct) {
            free(ptr[i]);
            ptr[i] = NULL;
        } else {
            live += len[i];
        }
    }
    bu_event("free_done");
    double t0 = bu_now();
    long after = proc_status_kb("VmRSS");
    size_t k = 0;
    while (k < nsamples) {
        st[k] = bu_now() - t0;
        sr[k++] = proc_status_kb("VmRSS");
        if (st[k - 1] >= hold)
            break;
        bu_sleep(0.05);
    }
    long final = sr[k - 1];
    /* Steady: the first sample from which every later one is within 5% of
     * what the hold released (at least 1 MiB) of the final value. */
    long band = (after - final) / 20;
    if (band < 1024)
        band = 1024;
    double steady = 0;
    for (size_t i = k; i-- > 0;)
        if (sr[i] > final + band || sr[i] < final - band) {
            steady = i + 1 < k ? st[i + 1] : st[i];
            break;
        }
    bu_kv_long("live_bytes", (long long)live);
    bu_kv_long("rss_after_free_kb", after);
    bu_kv_long("final_rss_kb", final);
    bu_kv_double("rss_per_live", final * 1024.0 / (double)live);
    bu_kv_double("steady_s", steady);
    bu_event("exit");
    return 0;
}
