/*
 * tests/defrag/test_api.c - sd_cache_create() and friends: argument errors,
 * the SD_CACHE/SD_CACHE_OPS macros, alloc/free, sd_cache_get_info(), cache
 * merging, constructors.
 */
#include "defrag_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

static void *nop_get(sd_cache *s, int nr, void **objs) { return NULL; }
static void nop_kick(sd_cache *s, int nr, void **objs, void *p) { }

/* ------------------------------------------------- argument errors */

Test(defrag, create_null_name_einval)
{
    errno = 0;
    sd_cache *s = sd_cache_create(NULL, 64, 0, 0, NULL, NULL);
    cr_assert_null(s);
    cr_assert_eq(errno, EINVAL, "errno %d", errno);
}

Test(defrag, create_size_zero_einval)
{
    errno = 0;
    sd_cache *s = sd_cache_create("size_zero", 0, 0, 0, NULL, NULL);
    cr_assert_null(s);
    cr_assert_eq(errno, EINVAL, "errno %d", errno);
}

Test(defrag, create_align_not_power_of_two_einval)
{
    static const size_t bad[] = { 3, 12, 24, 48, 100, 4095 };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        sd_cache *s = sd_cache_create("bad_align", 64, bad[i], 0, NULL, NULL);
        cr_expect_null(s, "align %zu accepted", bad[i]);
        cr_expect_eq(errno, EINVAL, "align %zu: errno %d", bad[i], errno);
    }
}

Test(defrag, create_align_above_4096_einval)
{
    errno = 0;
    sd_cache *s = sd_cache_create("huge_align", 64, 8192, 0, NULL, NULL);
    cr_assert_null(s);
    cr_assert_eq(errno, EINVAL, "errno %d", errno);
}

Test(defrag, create_ops_with_only_get_einval)
{
    struct sd_cache_ops only_get = { .get = nop_get };
    errno = 0;
    sd_cache *s = sd_cache_create("only_get", 64, 0, 0, NULL, &only_get);
    cr_assert_null(s);
    cr_assert_eq(errno, EINVAL, "errno %d", errno);
}

Test(defrag, create_ops_with_only_kick_einval)
{
    struct sd_cache_ops only_kick = { .kick = nop_kick };
    errno = 0;
    sd_cache *s = sd_cache_create("only_kick", 64, 0, 0, NULL, &only_kick);
    cr_assert_null(s);
    cr_assert_eq(errno, EINVAL, "errno %d", errno);
}

Test(defrag, get_info_null_einval)
{
    struct sd_cache_info info;
    cr_assert_eq(sd_cache_get_info(NULL, &info), -EINVAL);
}

/* ------------------------------------------------------------- macros */

struct macro_plain { long a, b, c; int d; };
struct macro_aligned { _Alignas(64) char bytes[40]; };
struct macro_with_ops { char bytes[200]; };

Test(defrag, sd_cache_macro_names_and_sizes)
{
    sd_cache *s = SD_CACHE(macro_plain, SD_NO_MERGE);
    cr_assert_not_null(s, "SD_CACHE: %s", strerror(errno));
    struct sd_cache_info info = dt_info(s);
    cr_expect_str_eq(info.name, "macro_plain");
    cr_expect_eq(info.object_size, sizeof(struct macro_plain));
}

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

Test(defrag, name_truncated_to_47_bytes)
{
    char name[100];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    sd_cache *s = sd_cache_create(name, 64, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(s);
    struct sd_cache_info info = dt_info(s);
    cr_expect_eq(strlen(info.name), 47);
    cr_expect_eq(strncmp(info.name, name, 47), 0);
}

/* -------------------------------------------------------- alloc/free */

Test(defrag, alloc_free_distinct_aligned_writable)
{
    sd_cache *s = sd_cache_create("alloc_free", 72, 8, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(s);
    enum { N = 5000 };
    unsigned char **p = calloc(N, sizeof(*p));
    for (int i = 0; i < N; i++) {
        p[i] = sd_cache_alloc(s);
        cr_assert_not_null(p[i]);
        cr_assert_eq((uintptr_t)p[i] % 8, 0);
        memset(p[i], i & 0xff, 72);
    }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 72; j++)
            cr_assert_eq(p[i][j], i & 0xff, "object %d overwritten", i);
    for (int i = 0; i < N; i++)
        sd_cache_free(s, p[i]);
    cr_expect_eq(dt_info(s).objects_inuse, 0);
    free(p);
}

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

/* --------------------------------------------------------------- ctor */

struct ctor_obj { uint64_t magic; uint64_t body[5]; };
#define CTOR_MAGIC 0xc0c0c0c0feedbeefULL
static int ctor2_calls;
static void ctor2(void *obj)
{
    struct ctor_obj *o = obj;
    o->magic = CTOR_MAGIC;
    ctor2_calls++;
}

Test(defrag, ctor_runs_on_every_object)
{
    sd_cache *s = sd_cache_create("ctor_obj", sizeof(struct ctor_obj), 0, 0,
                                  ctor2, NULL);
    cr_assert_not_null(s);
    size_t per = dt_info(s).objects_per_slab;
    size_t n = 3 * per + 1;
    struct ctor_obj **p = calloc(n, sizeof(*p));
    for (size_t i = 0; i < n; i++) {
        p[i] = sd_cache_alloc(s);
        cr_assert_not_null(p[i]);
        cr_assert_eq(p[i]->magic, CTOR_MAGIC, "object %zu not constructed", i);
    }
    cr_expect_geq((size_t)ctor2_calls, n, "ctor ran %d times for %zu objects",
                  ctor2_calls, n);
    /* Freed in the constructed state, they come back constructed. */
    for (size_t i = 0; i < n; i++)
        sd_cache_free(s, p[i]);
    for (size_t i = 0; i < n; i++) {
        p[i] = sd_cache_alloc(s);
        cr_assert_eq(p[i]->magic, CTOR_MAGIC, "reused object %zu lost its state", i);
    }
    free(p);
}

/* -------------------------------------------------------------- stats */

Test(defrag, stats_print_lists_caches)
{
    sd_cache *s = sd_cache_create("stats_listed_cache", 96, 0, SD_NO_MERGE,
                                  NULL, NULL);
    cr_assert_not_null(s);
    void *p = sd_cache_alloc(s);
    cr_assert_not_null(p);
    FILE *f = tmpfile();
    cr_assert_not_null(f);
    cr_assert_eq(sd_stats_print(fileno(f)), 0);
    char buf[65536];
    rewind(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    cr_expect(strstr(buf, "stats_listed_cache") != NULL, "not listed:\n%s", buf);
    cr_expect(strstr(buf, "malloc-64") != NULL, "malloc-64 not listed:\n%s", buf);
    sd_cache_free(s, p);
}
