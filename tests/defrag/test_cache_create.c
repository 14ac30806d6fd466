/*
 * tests/defrag/test_cache_create.c - the cache API under the shared
 * library, where tests/test_core.c (the static core, also run under the
 * sanitizers) does not already check it: the SD_CACHE macro's alignment
 * and SD_CACHE_OPS, reuse of freed objects, exact sd_cache_get_info()
 * counts, cache merging.  Argument errors, names, alloc/free, alignment,
 * constructors and the statistics table are test_core.c's.
 */
#include "defrag_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

static void *nop_get(sd_cache *s, int nr, void **objs) { return NULL; }
static void nop_kick(sd_cache *s, int nr, void **objs, void *p) { }

/* ------------------------------------------------------------- macros */

struct macro_aligned { _Alignas(64) char bytes[40]; };
struct macro_with_ops { char bytes[200]; };

Test(defrag, sd_cache_macro_alignment)
{
    sd_cache *s = SD_CACHE(macro_aligned, 0);
    cr_assert_not_null(s, "SD_CACHE: %s", strerror(errno));
    for (int i = 0; i < 300; i++) {
        void *p = sd_cache_alloc(s);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % 64, 0, "object %p not 64-byte aligned", p);
    }
}

Test(defrag, sd_cache_ops_macro)
{
    static const struct sd_cache_ops ops = { .get = nop_get, .kick = nop_kick };
    sd_cache *s = SD_CACHE_OPS(macro_with_ops, 0, &ops);
    cr_assert_not_null(s, "SD_CACHE_OPS: %s", strerror(errno));
    struct sd_cache_info info = dt_info(s);
    cr_expect_str_eq(info.name, "macro_with_ops");
    cr_expect_eq(info.object_size, sizeof(struct macro_with_ops));
    cr_expect_eq(info.aliases, 0);
}

/* -------------------------------------------------------- alloc/free */

Test(defrag, alloc_reuses_freed_objects)
{
    sd_cache *s = sd_cache_create("alloc_reuse", 64, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(s);
    enum { N = 2000 };
    void **p = calloc(N, sizeof(*p));
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++)
            cr_assert_not_null(p[i] = sd_cache_alloc(s));
        for (int i = 0; i < N; i++)
            sd_cache_free(s, p[i]);
    }
    struct sd_cache_info info = dt_info(s);
    /* 20 rounds of N must not have needed 20 x the slabs of one round. */
    size_t need = (N + info.objects_per_slab - 1) / info.objects_per_slab;
    cr_expect_leq(info.slabs, 2 * need + 2, "slabs %zu for %d objects", info.slabs, N);
    free(p);
}

/* ---------------------------------------------------------------- info */

Test(defrag, info_fields_after_known_allocs_and_frees)
{
    sd_cache *s = sd_cache_create("info_fields", 100, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(s);
    struct sd_cache_info info = dt_info(s);
    cr_expect_str_eq(info.name, "info_fields");
    cr_expect_eq(info.object_size, 100);
    cr_expect_geq(info.objects_per_slab, 1);
    cr_expect_leq(info.objects_per_slab * info.object_size, info.slab_size,
                  "%zu objects of %zu bytes in a slab of %zu",
                  info.objects_per_slab, info.object_size, info.slab_size);
    cr_expect_eq(info.objects_inuse, 0);

    enum { N = 1000 };
    void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = sd_cache_alloc(s);
    info = dt_info(s);
    cr_expect_eq(info.objects_inuse, N, "objects_inuse %zu after %d allocs",
                 info.objects_inuse, N);
    size_t min_slabs = (N + info.objects_per_slab - 1) / info.objects_per_slab;
    cr_expect_geq(info.slabs, min_slabs, "slabs %zu < %zu", info.slabs, min_slabs);

    /* Free 37 from the start (older, non-active slabs) and 37 from the end
     * (the thread's active slab). */
    for (int i = 0; i < 37; i++) {
        sd_cache_free(s, p[i]);
        sd_cache_free(s, p[N - 1 - i]);
    }
    info = dt_info(s);
    cr_expect_eq(info.objects_inuse, N - 74,
                 "objects_inuse %zu after %d allocs and 74 frees",
                 info.objects_inuse, N);
    for (int i = 37; i < N - 37; i++)
        sd_cache_free(s, p[i]);
    cr_expect_eq(dt_info(s).objects_inuse, 0);
    cr_expect_eq(sd_cache_shrink(s), 0);
    info = dt_info(s);
    cr_expect_eq(info.objects_inuse, 0, "objects_inuse %zu after the shrink", info.objects_inuse);
    cr_expect_geq(info.slabs * info.objects_per_slab, info.objects_inuse);
}

/* ------------------------------------------------------------ merging */

struct merge_a { long x[6]; };
struct merge_b { long y[6]; };
struct merge_c { long z[6]; };

static int ctor_calls;
static void merge_ctor(void *obj) { ctor_calls++; memset(obj, 0xc7, 48); }

Test(defrag, merge_same_size_plain_caches_alias)
{
    sd_cache *a = SD_CACHE(merge_a, 0);
    sd_cache *b = SD_CACHE(merge_b, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    struct sd_cache_info ia = dt_info(a);
    cr_assert(a == b || ia.aliases >= 1,
              "two mergeable caches of 48 bytes neither alias nor count "
              "aliases (a=%p b=%p aliases=%d)", (void *)a, (void *)b, ia.aliases);
}

Test(defrag, merge_not_with_ctor)
{
    sd_cache *a = SD_CACHE(merge_a, 0);
    sd_cache *c = sd_cache_create("merge_ctor", sizeof(struct merge_c),
                                  _Alignof(struct merge_c), 0, merge_ctor, NULL);
    cr_assert_not_null(a);
    cr_assert_not_null(c);
    cr_expect_neq(a, c, "a cache with a ctor was merged");
    cr_expect_eq(dt_info(c).aliases, 0);
    cr_expect_str_eq(dt_info(c).name, "merge_ctor");
}

Test(defrag, merge_not_with_ops)
{
    static const struct sd_cache_ops ops = { .get = nop_get, .kick = nop_kick };
    sd_cache *a = SD_CACHE(merge_a, 0);
    sd_cache *d = SD_CACHE_OPS(merge_c, 0, &ops);
    sd_cache *b = SD_CACHE(merge_b, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(d);
    cr_assert_not_null(b);
    cr_expect_neq(a, d, "a cache with ops was merged");
    cr_expect_neq(b, d, "a plain cache was merged into one with ops");
    cr_expect_eq(dt_info(d).aliases, 0);
    cr_expect_str_eq(dt_info(d).name, "merge_c");
}

Test(defrag, merge_not_with_no_merge_flag)
{
    sd_cache *a = SD_CACHE(merge_a, 0);
    sd_cache *e = SD_CACHE(merge_b, SD_NO_MERGE);
    cr_assert_not_null(a);
    cr_assert_not_null(e);
    cr_expect_neq(a, e);
    cr_expect_str_eq(dt_info(e).name, "merge_b");
}

Test(defrag, merged_caches_share_objects_correctly)
{
    sd_cache *a = SD_CACHE(merge_a, 0);
    sd_cache *b = SD_CACHE(merge_b, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    enum { N = 500 };
    struct merge_a *pa[N];
    struct merge_b *pb[N];
    for (int i = 0; i < N; i++) {
        pa[i] = sd_cache_alloc(a);
        pb[i] = sd_cache_alloc(b);
        cr_assert_not_null(pa[i]);
        cr_assert_not_null(pb[i]);
        for (int k = 0; k < 6; k++) {
            pa[i]->x[k] = i * 10 + k;
            pb[i]->y[k] = -(i * 10 + k);
        }
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 6; k++) {
            cr_assert_eq(pa[i]->x[k], i * 10 + k);
            cr_assert_eq(pb[i]->y[k], -(i * 10 + k));
        }
    for (int i = 0; i < N; i++) {
        sd_cache_free(a, pa[i]);
        sd_cache_free(b, pb[i]);
    }
}
