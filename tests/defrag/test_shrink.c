/*
 * tests/defrag/test_shrink.c - sd_cache_shrink() on caches with get/kick
 * after a random 90% of the objects were freed: slabs fall, vacates
 * succeed, RSS falls; with a moving kick every object survives intact.
 */
#include "defrag_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#define MIB (1024UL * 1024UL)

/* Fill `bytes` worth of struct tobj, then free a random `pct`% of them. */
static size_t fill_and_thin(sd_cache *s, size_t bytes, unsigned pct, uint64_t seed)
{
    size_t n = bytes / sizeof(struct tobj);
    dt_slots_init(n);
    for (size_t i = 0; i < n; i++)
        dt_alloc_slot(s, i);
    uint32_t *perm = malloc(n * sizeof(*perm));
    cr_assert_not_null(perm);
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = dt_rand(&seed) % i;
        uint32_t t = perm[i - 1]; perm[i - 1] = perm[j]; perm[j] = t;
    }
    size_t nfree = n * pct / 100;
    for (size_t i = 0; i < nfree; i++)
        dt_free_slot(s, perm[i]);
    free(perm);
    return n - nfree;
}

struct shrink_result {
    struct sd_cache_info before, after;
    long rss_before, rss_after;
    int rc;
    size_t live;
};

static struct shrink_result run_shrink(const char *name, int kick_mode,
                                       size_t bytes)
{
    struct shrink_result r;
    sd_cache *s = dt_cache(name, 1);
    dt_kick_mode = kick_mode;
    r.live = fill_and_thin(s, bytes, 90, 12345);
    r.before = dt_info(s);
    r.rss_before = dt_rss_kb();
    r.rc = sd_cache_shrink(s);
    r.rss_after = dt_rss_kb();
    r.after = dt_info(s);
    cr_log_info("%s: slabs %zu -> %zu, partial %zu -> %zu, vacates %lu/%lu, "
                "RSS %ld -> %ld kB, live %zu objects", name,
                r.before.slabs, r.after.slabs, r.before.partial_slabs,
                r.after.partial_slabs, r.after.vacate_successes,
                r.after.vacate_attempts, r.rss_before, r.rss_after, r.live);
    return r;
}

/* ------------------------------------------------ reclaiming kick */

Test(defrag, shrink_reclaim_returns_0)
{
    struct shrink_result r = run_shrink("shrink_rc", KICK_FREE_ALL, 16 * MIB);
    cr_assert_eq(r.rc, 0, "sd_cache_shrink returned %d", r.rc);
}

Test(defrag, shrink_reclaim_slabs_fall)
{
    struct shrink_result r = run_shrink("shrink_slabs", KICK_FREE_ALL, 64 * MIB);
    cr_assert_lt(r.after.slabs, r.before.slabs / 2,
                 "slabs %zu -> %zu after freeing 90%% and shrinking",
                 r.before.slabs, r.after.slabs);
}

Test(defrag, shrink_reclaim_vacate_successes)
{
    struct shrink_result r = run_shrink("shrink_vacates", KICK_FREE_ALL, 64 * MIB);
    cr_assert_gt(r.after.vacate_successes, r.before.vacate_successes,
                 "no successful vacate (attempts %lu)", r.after.vacate_attempts);
    cr_expect_geq(r.after.vacate_attempts, r.after.vacate_successes);
    cr_expect_gt(r.after.objects_kicked, 0);
}

Test(defrag, shrink_reclaim_rss_falls)
{
    struct shrink_result r = run_shrink("shrink_rss", KICK_FREE_ALL, 64 * MIB);
    /* 64 MiB spread thinly; a reclaiming kick empties nearly every slab.
     * Ask for at least half of it back. */
    cr_assert_lt(r.rss_after, r.rss_before - 32 * 1024,
                 "RSS %ld kB -> %ld kB: less than 32 MiB returned",
                 r.rss_before, r.rss_after);
}

Test(defrag, shrink_reclaim_counts_agree)
{
    struct shrink_result r = run_shrink("shrink_counts", KICK_FREE_ALL, 16 * MIB);
    cr_assert_eq(r.after.objects_inuse, dt_live(),
                 "allocator counts %zu objects, the registry %zu",
                 r.after.objects_inuse, dt_live());
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i), "object %zu damaged", i);
}

Test(defrag, shrink_reclaim_bytes_released)
{
    struct shrink_result r = run_shrink("shrink_released", KICK_FREE_ALL, 16 * MIB);
    cr_assert_gt(r.after.bytes_released, r.before.bytes_released);
    cr_expect_gt(r.after.shrink_passes, r.before.shrink_passes);
}

/* --------------------------------------------------- moving kick */

Test(defrag, shrink_moving_contents_intact)
{
    struct shrink_result r = run_shrink("shrink_move", KICK_MOVE, 32 * MIB);
    size_t live = 0, bad = 0;
    for (size_t i = 0; i < dt_nslots; i++) {
        if (!dt_slots[i])
            continue;
        live++;
        if (!tobj_ok(dt_slots[i], (uint32_t)i) && bad++ < 5)
            cr_log_error("object %zu damaged after the shrink", i);
    }
    cr_assert_eq(bad, 0, "%zu objects damaged", bad);
    cr_assert_eq(live, r.live, "%zu objects left of %zu", live, r.live);
    cr_expect_gt(dt_moved, 0, "kick() moved nothing");
}

Test(defrag, shrink_moving_slabs_fall)
{
    struct shrink_result r = run_shrink("shrink_move_slabs", KICK_MOVE, 32 * MIB);
    cr_assert_lt(r.after.slabs, r.before.slabs / 2, "slabs %zu -> %zu",
                 r.before.slabs, r.after.slabs);
    cr_expect_gt(r.after.vacate_successes, 0);
    cr_expect_eq(r.after.objects_inuse, r.live);
}

Test(defrag, shrink_moving_rss_falls)
{
    struct shrink_result r = run_shrink("shrink_move_rss", KICK_MOVE, 64 * MIB);
    /* 10% of 64 MiB stays live, compacted: at least 32 MiB come back. */
    cr_assert_lt(r.rss_after, r.rss_before - 32 * 1024,
                 "RSS %ld kB -> %ld kB", r.rss_before, r.rss_after);
}

/* -------------------------------------------- cache without ops */

Test(defrag, shrink_without_ops_never_calls_back_releases_empty)
{
    sd_cache *s = dt_cache("shrink_no_ops", 0);
    size_t per = dt_info(s).objects_per_slab;
    size_t n = 64 * per;
    dt_slots_init(n);
    for (size_t i = 0; i < n; i++)
        dt_alloc_slot(s, i);
    /* Empty whole slabs (every other slab) and thin the rest. */
    for (size_t i = 0; i < n; i++)
        if ((i / per) % 2 == 0 || i % per >= 2)
            dt_free_slot(s, i);
    struct sd_cache_info before = dt_info(s);
    cr_assert_eq(sd_cache_shrink(s), 0);
    struct sd_cache_info after = dt_info(s);
    cr_expect_eq(dt_get_calls, 0);
    cr_expect_eq(after.vacate_successes, 0);
    cr_expect_eq(after.objects_inuse, dt_live());
    /* the ~32 empty slabs are gone, the 32 thin ones stay */
    cr_expect_leq(after.slabs, 34, "slabs %zu -> %zu", before.slabs, after.slabs);
    cr_expect_geq(after.slabs, 32, "slabs %zu -> %zu", before.slabs, after.slabs);
    for (size_t i = 0; i < n; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i));
}

Test(defrag, shrink_null_einval)
{
    cr_assert_eq(sd_cache_shrink(NULL), -EINVAL);
}

/* ------------------------------------------- which slabs, in which order */

static int max_get_nr;
static void *q_get(sd_cache *s, int nr, void **objs)
{
    if (nr > max_get_nr)
        max_get_nr = nr;
    return NULL;                     /* take nothing: */
}
static void q_kick(sd_cache *s, int nr, void **objs, void *p) { }

Test(defrag, shrink_vacates_only_quarter_full_slabs)
{
    static const struct sd_cache_ops ops = { .get = q_get, .kick = q_kick };
    sd_cache *s = sd_cache_create("quarter_rule", 64, 0, 0, NULL, &ops);
    cr_assert_not_null(s);
    size_t per = dt_info(s).objects_per_slab;
    cr_assert_geq(per, 8);
    size_t nslabs = 40, n = nslabs * per;
    void **p = calloc(n, sizeof(*p));
    for (size_t i = 0; i < n; i++)
        p[i] = sd_cache_alloc(s);
    /* slab k keeps (k % 8 + 1) * per / 8 objects: 1/8 .. 8/8 full */
    for (size_t k = 0; k + 1 < nslabs; k++) {
        size_t keep = (k % 8 + 1) * per / 8;
        for (size_t j = keep; j < per; j++)
            sd_cache_free(s, p[k * per + j]);
    }
    cr_assert_eq(sd_cache_shrink(s), 0);
    cr_expect_gt(dt_info(s).vacate_attempts, 0, "no slab vacated at all");
    cr_assert_leq((size_t)max_get_nr, per / 4,
                  "get() called for a slab with %d of %zu objects in use",
                  max_get_nr, per);
    free(p);
}

Test(defrag, shrink_sorts_partial_slabs_fullest_first)
{
    sd_cache *s = sd_cache_create("sort_rule", 64, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(s);
    size_t per = dt_info(s).objects_per_slab;
    cr_assert_geq(per, 16);
    enum { NS = 10 };
    size_t n = NS * per;               /* exactly full: the active slab too */
    char **p = calloc(n, sizeof(*p));
    for (size_t i = 0; i < n; i++)
        p[i] = sd_cache_alloc(s);
    /* Thin slabs 0..8 to different fill levels, in a scrambled order; the
     * fullest is slab 5 (per - 2 objects). */
    static const int order[NS - 1] = { 3, 8, 5, 0, 7, 1, 6, 2, 4 };
    for (int k = 0; k < NS - 1; k++) {
        int sl = order[k];
        size_t keep = sl == 5 ? per - 2 : (size_t)(sl + 1) * per / 16;
        for (size_t j = keep; j < per; j++)
            sd_cache_free(s, p[sl * per + j]);
    }
    cr_assert_eq(sd_cache_shrink(s), 0);
    /* The active slab is full: the next object comes from the partial list,
     * whose head must now be the fullest slab. */
    char *q = sd_cache_alloc(s);
    char *lo = p[5 * per], *hi = p[5 * per];
    for (size_t j = 0; j < per; j++) {
        char *x = p[5 * per + j];
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    cr_assert(q >= lo && q <= hi,
              "after the shrink the next object (%p) is not from the fullest "
              "partial slab [%p, %p]", (void *)q, (void *)lo, (void *)hi);
    free(p);
}

Test(defrag, shrink_that_frees_nothing_keeps_everything)
{
    sd_cache *s = dt_cache("shrink_refused", 1);
    dt_get_mode = GET_NULL_ODD;          /* odd entries refused ... */
    dt_kick_mode = KICK_FREE_NONE;       /* ... and kick frees nothing */
    size_t live = fill_and_thin(s, 8 * MIB, 90, 777);
    struct sd_cache_info before = dt_info(s);
    cr_assert_eq(sd_cache_shrink(s), 0);
    struct sd_cache_info after = dt_info(s);
    cr_expect_gt(after.vacate_attempts, before.vacate_attempts);
    cr_expect_eq(after.vacate_successes, before.vacate_successes);
    cr_expect_eq(after.objects_inuse, live);
    cr_expect_eq(dt_live(), live);
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i) && dt_slots[i]->pins == 0,
                      "object %zu damaged or still pinned", i);
    /* and the cache still works: refill every slot */
    for (size_t i = 0; i < dt_nslots; i++)
        if (!dt_slots[i])
            dt_alloc_slot(s, i);
    cr_expect_eq(dt_info(s).objects_inuse, dt_nslots);
}

/* kick() freeing objects of other slabs - some of them frozen in the same
 * shrink, waiting for their own get() - as a dentry kick drops parents. */
Test(defrag, shrink_kick_frees_objects_on_other_slabs)
{
    sd_cache *s = dt_cache("shrink_buddies", 1);
    dt_kick_mode = KICK_FREE_BUDDY;
    size_t live = fill_and_thin(s, 16 * MIB, 90, 31337);
    dt_buddy_half = dt_nslots / 2;
    struct sd_cache_info before = dt_info(s);
    cr_assert_eq(sd_cache_shrink(s), 0);
    struct sd_cache_info after = dt_info(s);
    cr_log_info("slabs %zu -> %zu, live %zu -> %zu, vacates %lu/%lu", before.slabs,
                after.slabs, live, dt_live(), after.vacate_successes,
                after.vacate_attempts);
    cr_expect_eq(dt_get_bad, 0, "get() was handed %d freed objects", dt_get_bad);
    cr_expect_eq(after.objects_inuse, dt_live(), "allocator %zu, registry %zu",
                 after.objects_inuse, dt_live());
    cr_expect_lt(after.slabs, before.slabs / 2, "slabs %zu -> %zu", before.slabs,
                 after.slabs);
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i), "object %zu damaged", i);
    /* The cache still works. */
    for (size_t i = 0; i < dt_nslots; i++)
        if (!dt_slots[i])
            dt_alloc_slot(s, i);
    cr_expect_eq(dt_info(s).objects_inuse, dt_nslots);
}
