/*
 * bench/demos/demo.h - what the two cooperating demos (pathcache.c,
 * kvstore.c) share around their own workload: the caches' totals before
 * and after the shrink, the timed shrink, the shrink's counter lines, the
 * wait for an instant where the allocator's count of objects in use
 * agrees with the demo's own, and the closing lines.  Header only; the
 * includer includes <slabdefrag.h> (unless USE_MALLOC) and
 * ../benchutil.h first.
 */
#ifndef SD_DEMO_H
#define SD_DEMO_H

#include <pthread.h>
#include <stdio.h>
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
