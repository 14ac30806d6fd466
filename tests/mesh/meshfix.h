/*
 * tests/mesh/meshfix.h - the sparse-slab fixture of the mesh tests that
 * run under the shared library (mesh_test.c, mesh_syscall.c): the blocks
 * make_sparse keeps, their contents, the slab geometry and the figures
 * of the JSON statistics.  The includer includes tests/subject.h (check)
 * and meshjson.h first.
 */
#ifndef SD_TESTS_MESHFIX_H
#define SD_TESTS_MESHFIX_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include "slabdefrag.h"
#include "../procstatus.h"

#define OBJ     1000              /* a block of malloc-1024 */
#define NSLABS  256               /* (meshes expected: NSLABS / 4 at least) */
#define NBLOCKS (NSLABS * 16)     /* blocks make_sparse allocates */

/* ---- figures: the JSON statistics and the API ---- */

struct mesh_fig { unsigned long meshes, unmeshed, aliases, limit, retried, filed; };

/* The "mesh" object of the JSON statistics. */
static inline struct mesh_fig mesh_fig(void)
{
    char *json = stats_json();
    const char *m = json_object(json, "mesh");
    check(m, "no \"mesh\" object in the JSON statistics");
    struct mesh_fig f = {
        .meshes = json_num(m, "meshes"),
        .unmeshed = json_num(m, "unmeshes"),
        .aliases = json_num(m, "aliases"),
        .limit = json_num(m, "map_limit_hits") != 0,
        .retried = json_num(m, "syscall_retries"),
        .filed = json_num(m, "filed"),
    };
    free(json);
    return f;
}

/* The geometry of malloc-1024, the class of the OBJ-byte blocks, from the
 * JSON statistics and sd_cache_get_info:
 *   stride  bytes from one block to the next
 *   slab    bytes of the slabs it gets past the first few: the page slabs
 *           of meshing (SLABDEFRAG_MESH_PAGE_SLABS) if it has them
 *   window  8 blocks: make_sparse keeps slots 0..2 or 4..6 of each window,
 *           harden writes into slot 7
 *   block   the parity unit of make_sparse: two windows, or a slab if larger */
static struct { size_t stride, slab, window, block; } geo;

static inline void load_geometry(void)
{
    if (geo.stride)
        return;
    struct sd_cache_info in;
    sd_cache *c = sd_cache_find("malloc-1024");
    check(c && sd_cache_get_info(c, &in) == 0, "no cache malloc-1024");
    char *json = stats_json();
    const char *o = json_cache(json, "malloc-1024");
    check(o, "malloc-1024 is not in the JSON statistics");
    geo.stride = json_num(o, "stride");
    geo.slab = json_num(o, "page_slab_size");
    if (!geo.slab)
        geo.slab = in.slab_size;
    free(json);
    geo.window = 8 * geo.stride;
    geo.block = geo.slab > 2 * geo.window ? geo.slab : 2 * geo.window;
    check(geo.stride >= OBJ && (geo.window & (geo.window - 1)) == 0 &&
          (geo.block & (geo.block - 1)) == 0 && geo.slab % geo.window == 0,
          "malloc-1024: stride %zu, %zu-byte slabs: not whole windows of 8 blocks, "
          "make_sparse cannot make slabs of disjoint occupancy", geo.stride, geo.slab);
    printf("malloc-1024: stride %zu, slabs of %zu bytes; windows of %zu, parity blocks "
           "of %zu\n", geo.stride, geo.slab, geo.window, geo.block);
}

static inline size_t rss_kb(void)
{
    long kb = proc_status_kb("VmRSS");
    return kb > 0 ? (size_t)kb : 0;
}

/* Objects kept after the sparse free, and their fill value. */
static char *kept[NBLOCKS];
static unsigned nkept;

static inline void fill(char *p, unsigned seed)
{
    for (unsigned i = 0; i < OBJ; i++)
        p[i] = (char)(seed * 31 + i * 7 + ((uintptr_t)p >> 4));
}

static inline int filled(const char *p, unsigned seed)
{
    for (unsigned i = 0; i < OBJ; i++)
        if (p[i] != (char)(seed * 31 + i * 7 + ((uintptr_t)p >> 4)))
            return 0;
    return 1;
}

/* The slot of address a in its window, and whether its parity block is
 * an odd one (geo). */
static inline unsigned slot_of(uintptr_t a) { return (unsigned)((a & (geo.window - 1)) / geo.stride); }
static inline int odd_block(uintptr_t a) { return (a / geo.block) & 1; }

/* Allocate NBLOCKS blocks and keep, in each window of 8 blocks, 3 objects
 * at slots that depend on the parity of the block of memory they lie in
 * (even blocks 0..2, odd ones 4..6 of every window): a slab is whole
 * windows inside one parity block, so any slab of an even block is
 * disjoint from any slab of an odd one.  Everything else is freed. */
static inline void make_sparse(unsigned seed)
{
    static char *all[NBLOCKS];
    nkept = 0;
    for (unsigned i = 0; i < NBLOCKS; i++) {
        all[i] = malloc(OBJ);
        check(all[i], "malloc");
    }
    load_geometry();                /* (a cache is listed once it has slabs) */
    for (unsigned i = 0; i < NBLOCKS; i++) {
        uintptr_t a = (uintptr_t)all[i];
        unsigned slot = slot_of(a);
        unsigned base = odd_block(a) ? 4 : 0;
        if (slot >= base && slot < base + 3) {
            kept[nkept++] = all[i];
            fill(all[i], seed);
        } else {
            free(all[i]);
        }
    }
}

/* make_sparse, then mesh (sd_shrink_all): some slabs must have meshed. */
static inline struct mesh_fig sparse_and_meshed(unsigned seed)
{
    make_sparse(seed);
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    check(f.aliases > 0, "nothing meshed");
    return f;
}

static inline void check_kept(unsigned seed, const char *when)
{
    for (unsigned i = 0; i < nkept; i++)
        check(filled(kept[i], seed), "object %u (%p) lost its contents %s", i,
              (void *)kept[i], when);
}

static inline void free_kept(void)
{
    for (unsigned i = 0; i < nkept; i++)
        free(kept[i]);
    nkept = 0;
}

#endif
