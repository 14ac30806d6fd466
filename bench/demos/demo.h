/*
 * bench/demos/demo.h - what the two cooperating demos (pathcache.c,
 * kvstore.c) share around their own workload: the caches' totals before
 * and after the shrink, the timed shrink, the shrink's counter lines, the
 * wait for an instant where the allocator's count of objects in use
 * agrees with the demo's own, and the closing lines; and their runs'
 * common part (struct demo_run): the shared arguments, the set-up, the
 * shrink with RSS around it, its report.  Header only; the includer
 * includes <slabdefrag.h> (unless USE_MALLOC) and ../benchutil.h first.
 */
#ifndef SD_DEMO_H
#define SD_DEMO_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The usage line's tail: --malloc exists only where slabdefrag does. */
#ifdef USE_MALLOC
#define DEMO_MALLOC_OPT ""
#else
#define DEMO_MALLOC_OPT " [--malloc]"
#endif

#ifndef USE_MALLOC
/* The counters of a set of caches, summed (sd_cache_get_info). */
struct demo_totals {
    size_t slabs, partial, inuse;
    unsigned long attempts, successes, kicked;
    size_t released;
};

static inline void demo_totals(sd_cache *const *caches, int n, struct demo_totals *t)
{
    memset(t, 0, sizeof(*t));
    for (int c = 0; c < n; c++) {
        struct sd_cache_info info;
        if (sd_cache_get_info(caches[c], &info) != 0)
            continue;
        t->slabs += info.slabs;
        t->partial += info.partial_slabs;
        t->inuse += info.objects_inuse;
        t->attempts += info.vacate_attempts;
        t->successes += info.vacate_successes;
        t->kicked += info.objects_kicked;
        t->released += info.bytes_released;
    }
}

/* sd_cache_shrink of every cache, timed (prints shrink_ms=); the totals
 * before and after in *tb and *ta.  Returns the first negative return of
 * sd_cache_shrink, or 0. */
static inline int demo_shrink(sd_cache *const *caches, int n, struct demo_totals *tb,
                              struct demo_totals *ta)
{
    int ret = 0;
    demo_totals(caches, n, tb);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int c = 0; c < n; c++) {
        int rc = sd_cache_shrink(caches[c]);
        if (rc < 0 && ret == 0)
            ret = rc;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("shrink_ms=%.1f\n", (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                                (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    demo_totals(caches, n, ta);
    return ret;
}

/* The shrink's counter lines, from the totals before and after it. */
static inline void demo_print_shrink(int shrink_rc, const struct demo_totals *tb,
                                     const struct demo_totals *ta)
{
    printf("shrink_rc=%d\n", shrink_rc);
    printf("slabs_before=%zu slabs_after=%zu\n", tb->slabs, ta->slabs);
    printf("partial_before=%zu partial_after=%zu\n", tb->partial, ta->partial);
    printf("objects_inuse_after=%zu\n", ta->inuse);
    printf("vacate_attempts=%lu vacate_successes=%lu objects_kicked=%lu\n",
           ta->attempts - tb->attempts, ta->successes - tb->successes,
           ta->kicked - tb->kicked);
    printf("bytes_released=%zu\n", ta->released - tb->released);
}

/* Whether the caches count as many objects in use as the demo holds
 * (*count, read under *lock).  A vacate running on another thread (the
 * background shrinker) holds a moved copy or an unfreed victim for a
 * moment, and its kick() changes the demo's count: a count read under the
 * lock is compared with the allocator's read just after, until they agree
 * at a quiet instant (up to 200 tries 5 ms apart).  On disagreement,
 * prints `PROG: allocator counts ...` on stderr and returns 1; *ta holds
 * the last totals read. */
static inline int demo_inuse_differs(const char *prog, sd_cache *const *caches, int n,
                                     pthread_mutex_t *lock, const size_t *count,
                                     struct demo_totals *ta)
{
    size_t want = 0;
    for (int tries = 0; tries < 200; tries++) {
        if (tries) {
            struct timespec ts = { 0, 5 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(lock);
        want = *count;
        pthread_mutex_unlock(lock);
        demo_totals(caches, n, ta);     /* (never call the allocator with the lock held) */
        if (ta->inuse == want)
            return 0;
    }
    fprintf(stderr, "%s: allocator counts %zu objects in use, the demo holds %zu\n",
            prog, ta->inuse, want);
    return 1;
}
#endif

/* What both demos' runs have: the object count, their hash table's size,
 * a permutation of the ids, RSS and the shrink around their workload, and
 * the verdict. */
struct demo_run {
    uint64_t n;                 /* objects (ids 0..n-1): the argument N */
    uint64_t seed;              /* --seed */
    size_t nb;                  /* hash buckets: n rounded up to a power of 2 */
    uint32_t *perm;             /* a permutation of the ids */
    long rss_full;              /* KiB, once every object is in */
    long rss_before, rss_after; /* KiB, around the shrink */
    int shrink_rc;              /* sd_cache_shrink's first error, or 0 */
    int bad;                    /* verification failures */
#ifndef USE_MALLOC
    struct demo_totals tb, ta;  /* the caches before and after the shrink */
#endif
};

/* The command line: N (default a million), --seed S (default 1) and
 * --malloc here (a USE_MALLOC build is always --malloc), the demo's own
 * options by own(argc, argv, &i, arg): 1 taken, 0 not one of its, -1 a
 * bad value.  Calls usage() on a bad or unknown argument. */
static inline void demo_parse(int argc, char **argv, struct demo_run *d, int *use_malloc,
                              int (*own)(int, char **, int *, void *), void *arg,
                              void (*usage)(void))
{
    d->n = 1000000;
    d->seed = 1;
#ifdef USE_MALLOC
    *use_malloc = 1;
#endif
    for (int i = 1; i < argc; i++) {
        const char *v;
        int k;
        if ((v = bu_opt(argc, argv, &i, "--seed")))
            k = bu_parse_u64(v, &d->seed) ? -1 : 1;
        else if (strcmp(argv[i], "--malloc") == 0)
            k = *use_malloc = 1;
        else if (argv[i][0] != '-')
            k = bu_parse_u64(argv[i], &d->n) || d->n == 0 || d->n > UINT32_MAX ? -1 : 1;
        else
            k = own(argc, argv, &i, arg);
        if (k <= 0)
            usage();
    }
}

/* The bucket count and the permutation array; prints the mode line.
 * Returns 1 (and says so) out of memory. */
static inline int demo_setup(const char *prog, struct demo_run *d, int use_malloc)
{
    d->nb = 1;
    while (d->nb < d->n)
        d->nb <<= 1;
    d->perm = malloc(d->n * sizeof(*d->perm));
    if (!d->perm) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    printf("mode=%s\n", use_malloc ? "malloc" : "slabdefrag");
    return 0;
}

#ifndef USE_MALLOC
/* The shrink of caches[0..n) (none with --malloc), with VmRSS before and
 * after it. */
static inline void demo_shrink_rss(struct demo_run *d, sd_cache *const *caches, int n,
                                   int use_malloc)
{
    d->rss_before = proc_status_kb("VmRSS");
    if (!use_malloc)
        d->shrink_rc = demo_shrink(caches, n, &d->tb, &d->ta);
    d->rss_after = proc_status_kb("VmRSS");
}
#else
#define demo_shrink_rss(d, caches, n, use_malloc)                              \
    ((d)->rss_before = proc_status_kb("VmRSS"), (d)->rss_after = proc_status_kb("VmRSS"))
#endif

/* The report's RSS lines around the shrink. */
static inline void demo_print_rss(const struct demo_run *d)
{
    printf("rss_kb_before_shrink=%ld\n", d->rss_before);
    printf("rss_kb_after_shrink=%ld\n", d->rss_after);
}

/* The closing lines (final and peak RSS, the verdict); the exit status. */
static inline int demo_finish(int bad)
{
    printf("final_rss_kb=%ld\n", proc_status_kb("VmRSS"));
    printf("peak_rss_kb=%ld\n", proc_status_kb("VmHWM"));
    printf("verify=%s\n", bad ? "FAILED" : "ok");
    fflush(stdout);
    return bad ? 1 : 0;
}

#endif
