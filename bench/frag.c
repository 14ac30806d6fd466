/*
 * bench/frag.c - the fragmentation benchmark (non-cooperating, any
 * allocator).
 *
 *   frag [-m MB] [-f FREE_PERCENT] [-H HOLD_SECONDS] [-s SEED]
 *
 * 1. Allocate blocks until their requested sizes add up to MB MiB (default
 *    256): 70% 16..256 B, 25% 257..4096 B, 5% 4 KiB..64 KiB.  Every byte
 *    is written, so the pages are resident.
 * 2. Free a random FREE_PERCENT% (default 90) of the blocks, in random
 *    order.  The survivors are scattered over the whole heap: this is the
 *    situation where an allocator that cannot move objects keeps most of
 *    its pages.
 * 3. Hold for HOLD_SECONDS (default 2) without calling the allocator, so
 *    that allocators with a background purge or shrinker get the chance
 *    to act (jemalloc's default decay is 10 s, so a short hold is not in
 *    its favour: that is part of what is measured).
 *
 * The program does not cooperate with the allocator in any way: no
 * malloc_trim(), no sd_* calls.  The pointer and size arrays live in
 * mmap()ed memory so they do not perturb the heap; they are shrunk to the
 * survivors before the hold.  The same seed gives the same sequence under
 * every allocator.
 *
 * Reported on stderr (key=value): baseline_rss_kb (before step 1),
 * peak_live_bytes, rss_at_peak_kb, live_bytes (after step 2),
 * rss_after_free_kb, final_rss_kb (end of hold), rss_per_live (final RSS /
 * live bytes) and heap_rss_per_live ((final - baseline) / live bytes).
 */
#include "benchutil.h"

#include <sys/mman.h>
#include <unistd.h>

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        bu_die("frag", "mmap failed");
    return p;
}

static size_t pick_size(bu_rng *r)
{
    unsigned p = (unsigned)(bu_next(r) % 100);
    if (p < 70)
        return bu_range(r, 16, 256);
    if (p < 95)
        return bu_range(r, 257, 4096);
    return bu_range(r, 4097, 65536);
}

int main(int argc, char **argv)
{
    double mb = 256, hold = 2.0;
    int free_pct = 90;
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "m:f:H:s:h")) != -1) {
        switch (c) {
        case 'm': mb = atof(optarg); break;
        case 'f': free_pct = atoi(optarg); break;
        case 'H': hold = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: frag [-m MB] [-f FREE_PERCENT] [-H HOLD_SECONDS] [-s SEED]\n");
            return 2;
        }
    }
    if (mb <= 0 || free_pct < 0 || free_pct > 100)
        bu_die("frag", "bad argument");

    bu_rng r;
    bu_seed(&r, seed);
    long baseline = bu_status_kb("VmRSS");
    bu_kv_long("baseline_rss_kb", baseline);
    bu_event("start");

    size_t target = (size_t)(mb * 1024 * 1024);
    size_t cap = target / 16 + 16;          /* upper bound on block count */
    char **ptr = map(cap * sizeof *ptr);
    unsigned *len = map(cap * sizeof *len);
    size_t n = 0, live = 0;
    while (live < target) {
        size_t sz = pick_size(&r);
        char *p = malloc(sz);
        if (!p)
            bu_die("frag", "malloc failed");
        memset(p, (int)(n & 0xff), sz);
        ptr[n] = p;
        len[n] = (unsigned)sz;
        n++;
        live += sz;
    }
    long rss_peak = bu_status_kb("VmRSS");
    bu_event("alloc_done");

    /* Fisher-Yates over the indices: the first free_pct% are freed. */
    unsigned *order = map(n * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = (unsigned)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(bu_next(&r) % (i + 1));
        unsigned t = order[i]; order[i] = order[j]; order[j] = t;
    }
    size_t nfree = n * (size_t)free_pct / 100;
    size_t peak_live = live;
    for (size_t i = 0; i < nfree; i++) {
        size_t k = order[i];
        free(ptr[k]);
        live -= len[k];
        ptr[k] = NULL;
    }
    /* Keep the survivors in small arrays; drop the big ones. */
    size_t nkeep = n - nfree;
    char **kp = map((nkeep + 1) * sizeof *kp);
    unsigned *kl = map((nkeep + 1) * sizeof *kl);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (ptr[i]) {
            kp[m] = ptr[i];
            kl[m] = len[i];
            m++;
        }
    munmap(ptr, cap * sizeof *ptr);
    munmap(len, cap * sizeof *len);
    munmap(order, n * sizeof *order);
    long rss_free = bu_status_kb("VmRSS");
    bu_event("free_done");

    bu_sleep(hold);

    /* Check that the survivors are intact (and keep them live). */
    unsigned long bad = 0;
    for (size_t i = 0; i < m; i++)
        if ((unsigned char)kp[i][0] != (unsigned char)kp[i][kl[i] - 1])
            bad++;
    if (bad)
        bu_die("frag", "surviving blocks were corrupted");

    long final_rss = bu_status_kb("VmRSS");
    printf("frag: %zu blocks, %.1f MiB live at peak (RSS %.1f MiB); "
           "after freeing %d%%: %.1f MiB live, RSS %.1f MiB, after %.1fs hold "
           "%.1f MiB (%.2fx live)\n",
           n, peak_live / 1048576.0, rss_peak / 1024.0, free_pct,
           live / 1048576.0, rss_free / 1024.0, hold, final_rss / 1024.0,
           live ? final_rss * 1024.0 / (double)live : 0.0);
    bu_kv_long("blocks", (long long)n);
    bu_kv_long("peak_live_bytes", (long long)peak_live);
    bu_kv_long("rss_at_peak_kb", rss_peak);
    bu_kv_long("live_bytes", (long long)live);
    bu_kv_long("rss_after_free_kb", rss_free);
    if (live) {
        bu_kv_double("rss_per_live", final_rss * 1024.0 / (double)live);
        bu_kv_double("heap_rss_per_live",
                     (final_rss - baseline) * 1024.0 / (double)live);
    }
    bu_final();
    for (size_t i = 0; i < m; i++)
        free(kp[i]);
    return 0;
}
