/*
 * classes/mesh.h - transparent meshing of sparse malloc slabs (after
 * Mesh, PLDI 2019).  The design, its proof of safety and its limits are at
 * the top of classes/mesh.c; the memory underneath is core/heapfile.h.
 */
#ifndef SD_CLASSES_MESH_H
#define SD_CLASSES_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"

/* Set up the arena when SLABDEFRAG_MESH=1 (from cache_init, before any
 * segment exists).  Meshing stays off if that fails (one warning). */
void mesh_init(void);
/* Malloc class c (just set up) gets page-sized slabs when meshing is on
 * and its objects are small (see classes/mesh.c). */
void mesh_geometry(struct sd_cache *c);
/* Is meshing on (arena up)? */
int mesh_enabled(void);
/* mesh_pass's flags. */
enum {
    MESH_GROWING = 1,   /* classes that made a new slab since the last pass,
                           and busy ones, too */
    MESH_FORCE = 2,     /* classes meshing backs off, too (memory pressure,
                           sd_shrink_all) */
};
/* One bounded pass over the malloc caches: mesh pairs of sparse PARTIAL
 * slabs until `deadline` (monotonic ns; 0 = no bound).  Without
 * MESH_GROWING, a class that made a new slab since the last pass, or that
 * is busy refilling, is left for later; without MESH_FORCE, so is a class
 * whose meshes were mostly undone (the policy in classes/mesh.c).
 * Returns bytes released; *more (may be NULL) says it stopped with
 * candidates left.  Call with no allocator lock held (the shrinker
 * thread, sd_shrink_all). */
size_t mesh_pass(uint64_t deadline, int *more, int flags);
/* Free p, an object address of alias slab s (state MESHED, s unlocked):
 * redirected to its host.  From cache_free_slow. */
void mesh_free(struct slab *s, void *p, const char *call);
/* Host s is on its way back (RELEASING, off every list, unlocked): give
 * every alias's slot back, as a stale alias that mesh_restore maps onto
 * its own (punched, zero) pages later.  From cache_slab_release.  Returns
 * the aliases given back. */
size_t mesh_unmesh_host(struct sd_cache *c, struct slab *s);
/* Map the stale aliases back, in runs (core/segment.c): from the
 * shrinker's thread, the decay tick and every explicit shrink), until
 * `deadline` (os_now_ns; 0: none).  Returns how many.  No allocator lock
 * held. */
size_t mesh_restore(uint64_t deadline);

struct mesh_stats {
    int      enabled;           /* SLABDEFRAG_MESH=1 and its handler is in */
    const char *off_reason;     /* SLABDEFRAG_MESH=1 but off: why, else NULL */
    int      handler_lost;      /* our SIGSEGV handler was replaced: stopped */
    const char *barrier;        /* "uffd" or "mprotect" (core/heapfile.h) */
    uint64_t passes;            /* mesh passes */
    uint64_t meshes;            /* aliases made (all caches) */
    uint64_t unmeshes;          /* aliases restored */
    uint64_t bytes_released;    /* by meshing */
    uint64_t aliases;           /* aliases now */
    uint64_t maps, max_maps;    /* mappings meshing holds (2 per alias and
                                   per filed host), cap */
    uint64_t filed;             /* slots made shared objects to host a
                                   mesh, now (core/segment.c) */
    uint64_t map_limit_hits;    /* meshes refused by the cap */
    uint64_t time_ns;           /* time spent meshing, in total */
    uint64_t longest_pause_ns;  /* the longest a slab stayed write-protected */
    uint64_t fault_waits;       /* writers parked by the barrier (mesh, fork):
                                   SIGSEGV waits and userfaultfd faults */
    uint64_t syscall_retries;   /* system calls retried after the barrier */
};
void mesh_get_stats(struct mesh_stats *st);

#endif
