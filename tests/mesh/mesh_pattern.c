/*
 * tests/mesh/mesh_pattern.c - where meshing's new slabs start their
 * freelists (classes/mesh.c, "Placement"), under the shared library with
 * SLABDEFRAG_MESH=1: `mesh_pattern pattern` (tests/subject.h), exit 0 on
 * success.  Figures come from the JSON statistics only.
 *
 *   pattern   every fourth object kept in allocation order, twice: slabs
 *             in address order cannot mesh; by default the first batch's
 *             pass sees the pattern and the second batch's slabs, rotated,
 *             mesh; rotated (SLABDEFRAG_MESH_SHUFFLE=3) or permuted (2)
 *             from the start both batches do, in address order (0) none
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slabdefrag.h"

#include "../subject.h"

#include "meshjson.h"

#define CLASS "malloc-256"              /* the class of the 250-byte objects */

/* One batch of the pattern test: N 250-byte objects, every fourth kept
 * in allocation order, the rest freed, a full shrink; returns the meshes
 * it made.  The survivors stay in pat_v[] and keep their contents. */
enum { PAT_N = 200000 };
static uint64_t *pat_v[PAT_N];

static unsigned long pattern_batch(void)
{
    unsigned long m0 = cache_counter(CLASS, "meshes");
    for (unsigned i = 0; i < PAT_N; i++) {
        pat_v[i] = malloc(250);
        check(pat_v[i], "malloc");
    }
    for (unsigned i = 0; i < PAT_N; i++) {
        if (i % 4) {
            free(pat_v[i]);
            pat_v[i] = NULL;
        } else {
            for (unsigned k = 0; k < 31; k++)
                pat_v[i][k] = (uintptr_t)pat_v[i] * 131 + k;
        }
    }
    sd_shrink_all();
    for (unsigned i = 0; i < PAT_N; i += 4)
        for (unsigned k = 0; k < 31; k++)
            check(pat_v[i][k] == (uintptr_t)pat_v[i] * 131 + k, "object %p lost word %u",
                  (void *)pat_v[i], k);
    return cache_counter(CLASS, "meshes") - m0;
}

/* Keep every fourth 256-byte object in allocation order, free the rest,
 * twice.  In address order every slab keeps the same slots (0, 4, 8...)
 * and none can mesh; rotated or permuted freelists scatter them.
 * SLABDEFRAG_MESH_SHUFFLE:
 *   1 (default)  the first batch's slabs are in address order and do not
 *                mesh, but its mesh pass sees the pattern; the second
 *                batch's new slabs are rotated and mesh
 *   2, 3         permuted or rotated from the start: both batches mesh
 *   0            neither does
 * The contents stay either way. */
Scenario(pattern, .timeout = 300)
{
    const char *sh = getenv("SLABDEFRAG_MESH_SHUFFLE");
    int mode = sh ? atoi(sh) : 1;
    unsigned long first = pattern_batch(), seen = cache_counter(CLASS, "mesh_patterns");
    for (unsigned i = 0; i < PAT_N; i += 4)
        free(pat_v[i]);
    sd_shrink_all();                    /* the first batch's slabs go */
    unsigned long second = pattern_batch();
    unsigned long patterns = cache_counter(CLASS, "mesh_patterns");
    printf("pattern: SLABDEFRAG_MESH_SHUFFLE=%d, %lu meshes in the first batch, %lu in the "
           "second, %lu patterns seen\n", mode, first, second, patterns);
    /* "Hardly any": a slab whose slots another allocation of the class
     * shifted (stdio, the runtime) may still find a partner (1 in a
     * clean-clone CI run; thousands with rotation). */
    if (mode == 2 || mode == 3)
        check(first > 100, "only %lu meshes with rotated or permuted slabs", first);
    else
        check(first <= 16, "%lu meshes among slabs that all keep the same slots", first);
    if (mode == 1) {
        check(seen >= 1, "the first batch's pattern went unseen");
        check(second > 100, "only %lu meshes among slabs made after the pattern was seen",
              second);
    } else {
        check(patterns == 0, "a pattern counted with SLABDEFRAG_MESH_SHUFFLE=%d", mode);
        check(mode == 0 ? second <= 16 : second > 100, "%lu meshes in the second batch",
              second);
    }
    for (unsigned i = 0; i < PAT_N; i += 4)
        free(pat_v[i]);
}
