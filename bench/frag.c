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

/* The options, the blocks, and what each step measured. */
struct run {
    double mb, hold;
    int free_pct;
    uint64_t seed;
    long baseline, rss_peak, rss_free, final_rss;   /* VmRSS, kB */
    char **ptr;                 /* every block (mmap'd array) */
    unsigned *len;
    size_t cap;                 /* slots of ptr and len */
    size_t n, live, peak_live;  /* blocks; bytes live now, at the peak */
    char **kp;                  /* the survivors (mmap'd array) */
    unsigned *kl;
    size_t m;
};

static void parse_args(int argc, char **argv, struct run *r)
{
    r->mb = 256;
    r->hold = 2.0;
    r->free_pct = 90;
    r->seed = 42;
    int c;
    while ((c = getopt(argc, argv, "m:f:H:s:h")) != -1) {
        switch (c) {
        case 'm': r->mb = atof(optarg); break;
        case 'f': r->free_pct = atoi(optarg); break;
        case 'H': r->hold = atof(optarg); break;
        case 's': r->seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: frag [-m MB] [-f FREE_PERCENT] [-H HOLD_SECONDS] [-s SEED]\n");
            exit(2);
        }
    }
    if (r->mb <= 0 || r->free_pct < 0 || r->free_pct > 100)
        bu_die("frag", "bad argument");
}

/* Allocate mixed sizes until mb MiB are live; each block is filled. */
static void allocate(struct run *r, bu_rng *rng)
{
    size_t target = (size_t)(r->mb * 1024 * 1024);
    r->cap = target / 16 + 16;          /* upper bound on block count */
    r->ptr = map(r->cap * sizeof *r->ptr);
    r->len = map(r->cap * sizeof *r->len);
    while (r->live < target) {
        size_t sz = pick_size(rng);
        char *p = malloc(sz);
        if (!p)
            bu_die("frag", "malloc failed");
        memset(p, (int)(r->n & 0xff), sz);
        r->ptr[r->n] = p;
        r->len[r->n] = (unsigned)sz;
        r->n++;
        r->live += sz;
    }
    r->rss_peak = proc_status_kb("VmRSS");
}

/* Free a random free_pct% of the blocks (Fisher-Yates over the indices:
 * the first free_pct% are freed); keep the survivors in small arrays and
 * drop the big ones. */
static void free_random(struct run *r, bu_rng *rng)
{
    size_t n = r->n;
    unsigned *order = map(n * sizeof *order);
    for (size_t i = 0; i < n; i++)
        order[i] = (unsigned)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(bu_next(rng) % (i + 1));
        unsigned t = order[i]; order[i] = order[j]; order[j] = t;
    }
    size_t nfree = n * (size_t)r->free_pct / 100;
    r->peak_live = r->live;
    for (size_t i = 0; i < nfree; i++) {
        size_t k = order[i];
        free(r->ptr[k]);
        r->live -= r->len[k];
        r->ptr[k] = NULL;
    }
    size_t nkeep = n - nfree;
    r->kp = map((nkeep + 1) * sizeof *r->kp);
    r->kl = map((nkeep + 1) * sizeof *r->kl);
    for (size_t i = 0; i < n; i++)
        if (r->ptr[i]) {
            r->kp[r->m] = r->ptr[i];
            r->kl[r->m] = r->len[i];
            r->m++;
        }
    munmap(r->ptr, r->cap * sizeof *r->ptr);
    munmap(r->len, r->cap * sizeof *r->len);
    munmap(order, n * sizeof *order);
    r->rss_free = proc_status_kb("VmRSS");
}

/* Check that the survivors are intact (and keep them live). */
static void check_survivors(const struct run *r)
{
    unsigned long bad = 0;
    for (size_t i = 0; i < r->m; i++)
        if ((unsigned char)r->kp[i][0] != (unsigned char)r->kp[i][r->kl[i] - 1])
            bad++;
    if (bad)
        bu_die("frag", "surviving blocks were corrupted");
}

static void report(const struct run *r)
{
    printf("frag: %zu blocks, %.1f MiB live at peak (RSS %.1f MiB); "
           "after freeing %d%%: %.1f MiB live, RSS %.1f MiB, after %.1fs hold "
           "%.1f MiB (%.2fx live)\n",
           r->n, r->peak_live / 1048576.0, r->rss_peak / 1024.0, r->free_pct,
           r->live / 1048576.0, r->rss_free / 1024.0, r->hold, r->final_rss / 1024.0,
           r->live ? r->final_rss * 1024.0 / (double)r->live : 0.0);
    bu_kv_long("blocks", (long long)r->n);
    bu_kv_long("peak_live_bytes", (long long)r->peak_live);
    bu_kv_long("rss_at_peak_kb", r->rss_peak);
    bu_kv_long("live_bytes", (long long)r->live);
    bu_kv_long("rss_after_free_kb", r->rss_free);
    if (r->live) {
        bu_kv_double("rss_per_live", r->final_rss * 1024.0 / (double)r->live);
        bu_kv_double("heap_rss_per_live",
                     (r->final_rss - r->baseline) * 1024.0 / (double)r->live);
    }
}

int main(int argc, char **argv)
{
    struct run r = { 0 };
    parse_args(argc, argv, &r);
    bu_rng rng;
    bu_seed(&rng, r.seed);
    r.baseline = proc_status_kb("VmRSS");
    bu_kv_long("baseline_rss_kb", r.baseline);
    bu_event("start");
    allocate(&r, &rng);
    bu_event("alloc_done");
    free_random(&r, &rng);
    bu_event("free_done");
    bu_sleep(r.hold);
    check_survivors(&r);
    r.final_rss = proc_status_kb("VmRSS");
    report(&r);
    bu_final();
    for (size_t i = 0; i < r.m; i++)
        free(r.kp[i]);
    return 0;
}
