/*
 * tests/defrag/test_hint.c - sd_defrag_hint()/sd_defrag_realloc() on plain
 * malloc blocks (the Redis + jemalloc "active defrag" model).
 */
#include "defrag_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#define NBLOCKS 200000
#define BSIZE 64

static unsigned char **blocks;
static uint32_t nsurv;
static uint32_t *surv;          /* ids of the surviving blocks */

static void block_fill(unsigned char *p, uint32_t id)
{
    uint64_t st = id * 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < BSIZE; i += 8) {
        uint64_t w = dt_rand(&st);
        memcpy(p + i, &w, 8);
    }
}

static int block_ok(const unsigned char *p, uint32_t id)
{
    unsigned char want[BSIZE];
    block_fill(want, id);
    return memcmp(p, want, BSIZE) == 0;
}

/* Allocate NBLOCKS 64-byte blocks and free a random 90%. */
static void make_sparse_malloc_64(void)
{
    blocks = calloc(NBLOCKS, sizeof(*blocks));
    surv = calloc(NBLOCKS, sizeof(*surv));
    cr_assert(blocks && surv);
    for (uint32_t i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(BSIZE);
        cr_assert_not_null(blocks[i]);
        block_fill(blocks[i], i);
    }
    uint64_t seed = 99;
    for (uint32_t i = 0; i < NBLOCKS; i++) {
        if (dt_rand(&seed) % 10 != 0) {
            free(blocks[i]);
            blocks[i] = NULL;
        } else {
            surv[nsurv++] = i;
        }
    }
}

static size_t malloc64_slabs(void)
{
    sd_cache *c = sd_cache_find("malloc-64");
    cr_assert_not_null(c, "sd_cache_find(\"malloc-64\") returned NULL");
    return dt_info(c).slabs;
}

Test(defrag, find_malloc_64)
{
    sd_cache *c = sd_cache_find("malloc-64");
    cr_assert_not_null(c);
    struct sd_cache_info info = dt_info(c);
    cr_expect_str_eq(info.name, "malloc-64");
    cr_expect_geq(info.object_size, 64);
}

Test(defrag, find_unknown_returns_null)
{
    cr_assert_null(sd_cache_find("no-such-cache-here"));
}

Test(defrag, hint_null_returns_0)
{
    cr_assert_eq(sd_defrag_hint(NULL), 0);
}

Test(defrag, hint_some_survivors_of_sparse_malloc_slabs)
{
    make_sparse_malloc_64();
    uint32_t hinted = 0;
    for (uint32_t k = 0; k < nsurv; k++)
        hinted += sd_defrag_hint(blocks[surv[k]]) == 1;
    cr_log_info("%u of %u survivors hinted", hinted, nsurv);
    cr_assert_gt(hinted, 0, "no survivor of a 90%%-freed malloc-64 hinted");
}

Test(defrag, realloc_moves_hinted_blocks_contents_intact)
{
    make_sparse_malloc_64();
    uint32_t moved = 0, same = 0, bad = 0;
    for (uint32_t k = 0; k < nsurv; k++) {
        uint32_t id = surv[k];
        if (!sd_defrag_hint(blocks[id]))
            continue;
        unsigned char *q = sd_defrag_realloc(blocks[id]);
        if (q == blocks[id])
            same++;
        else
            moved++;
        if (!block_ok(q, id))
            bad++;
        blocks[id] = q;
    }
    cr_assert_gt(moved, 0, "no hinted block moved");
    cr_expect_eq(same, 0, "%u hinted blocks stayed where they were", same);
    cr_assert_eq(bad, 0, "%u moved blocks damaged", bad);
    for (uint32_t k = 0; k < nsurv; k++)
        cr_assert(block_ok(blocks[surv[k]], surv[k]), "block %u damaged", surv[k]);
}

Test(defrag, realloc_unhinted_returns_same_pointer)
{
    make_sparse_malloc_64();
    uint32_t checked = 0;
    for (uint32_t k = 0; k < nsurv && checked < 1000; k++) {
        uint32_t id = surv[k];
        if (sd_defrag_hint(blocks[id]))
            continue;
        unsigned char *q = sd_defrag_realloc(blocks[id]);
        cr_assert_eq(q, blocks[id], "an unhinted block moved");
        checked++;
    }
}

Test(defrag, realloc_all_hinted_then_shrink_all_slabs_fall)
{
    make_sparse_malloc_64();
    sd_shrink_all();                     /* baseline: empty slabs gone */
    size_t before = malloc64_slabs();
    for (int pass = 0; pass < 3; pass++)
        for (uint32_t k = 0; k < nsurv; k++) {
            uint32_t id = surv[k];
            if (sd_defrag_hint(blocks[id]))
                blocks[id] = sd_defrag_realloc(blocks[id]);
        }
    size_t released = sd_shrink_all();
    size_t after = malloc64_slabs();
    cr_log_info("malloc-64 slabs %zu -> %zu, %zu bytes released", before,
                after, released);
    cr_assert_lt(after, before, "malloc-64 slabs %zu -> %zu", before, after);
    for (uint32_t k = 0; k < nsurv; k++)
        cr_assert(block_ok(blocks[surv[k]], surv[k]), "block %u damaged", surv[k]);
}

Test(defrag, shrink_all_returns_freed_malloc_memory)
{
    enum { N = 100000 };
    void **p = calloc(N, sizeof(*p));
    for (int i = 0; i < N; i++) {
        p[i] = malloc(256);
        memset(p[i], 1, 256);
    }
    long full = dt_rss_kb();
    for (int i = 0; i < N; i++)
        free(p[i]);
    size_t released = sd_shrink_all();
    long after = dt_rss_kb();
    cr_log_info("RSS %ld -> %ld kB, sd_shrink_all released %zu bytes", full,
                after, released);
    /* 25 MB freed entirely: at least half of it is back with the OS. */
    cr_assert_lt(after, full - 12 * 1024, "RSS %ld kB -> %ld kB", full, after);
    free(p);
}
