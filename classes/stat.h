/*
 * classes/stat.h - the per-cache counters: one list drives the enum, the
 * names and every printer (API, exit report, slabinfo CLI).  Adding a
 * counter is one line.  Counted on slow paths only, with relaxed atomics;
 * the three hot ones per CPU in per-CPU mode (pcpu.h: cache_stat_hot).
 */
#ifndef SD_CLASSES_STAT_H
#define SD_CLASSES_STAT_H

#include <stdint.h>

#include "fmt.h"

#define SD_CACHE_STATS(X)                                                   \
    X(ALLOC_REFILL,     "alloc_refill",     "per-CPU stack or active slab refilled") \
    X(ALLOC_DIRECT,     "alloc_direct",     "allocations under the slab lock") \
    X(FREE_REMOTE,      "free_remote",      "frees to slabs: per-CPU batches, or remote frees") \
    X(SLAB_NEW,         "slab_new",         "slabs created")                 \
    X(SLAB_RELEASED,    "slab_released",    "slabs given back to the OS")    \
    X(DEACTIVATE,       "deactivate",       "active slabs given back")       \
    X(SHRINK_PASSES,    "shrink_passes",    "shrink passes over the cache")  \
    X(VACATE_ATTEMPTS,  "vacate_attempts",  "slabs handed to get()/kick()")  \
    X(VACATE_SUCCESSES, "vacate_successes", "slabs emptied by vacate")       \
    X(OBJECTS_KICKED,   "objects_kicked",   "objects passed to kick()")      \
    X(BYTES_RELEASED,   "bytes_released",   "bytes returned to the OS")      \
    X(DEFRAG_MOVES,     "defrag_moves",     "blocks moved by sd_defrag_realloc") \
    X(MESHES,           "meshes",           "slabs meshed into another (aliases made)") \
    X(MESH_BYTES,       "mesh_bytes_released", "bytes released by meshing") \
    X(UNMESHES,         "unmeshes",         "aliases restored when their host emptied") \
    X(SLAB_SPARSE,      "slab_sparse",      "partial slabs frees left at most a quarter in use") \
    X(PAGES_PURGED,     "pages_purged",     "free 4 KiB pages of sparse slabs given back") \
    X(PAGES_REFILLED,   "pages_refilled",   "purged pages taken back for allocation") \
    X(SORTS_SKIPPED,    "sorts_skipped",    "shrink passes that found the partial list as last sorted") \
    X(MESH_SKIPPED_BUSY, "mesh_skipped_busy", "mesh passes that left the class alone: busy refilling") \
    X(MESH_BACKOFFS,    "mesh_backoffs",    "times meshing backed off the class: its meshes were undone") \
    X(MESH_SKIPPED_BACKOFF, "mesh_skipped_backoff", "mesh passes that left the class alone: backed off") \
    X(MESH_PATTERNS,    "mesh_patterns",    "mesh batches whose slabs all left the same slots unused") \
    X(REFILL_OBJECTS,   "refill_objects",   "objects per-CPU refills brought (transfer cache or slabs)") \
    X(REFILL_XFER,      "refill_xfer",      "per-CPU refills the transfer cache served") \
    X(DRAIN_OBJECTS,    "drain_objects",    "objects full per-CPU stacks sent on (transfer cache or slabs)") \
    X(DRAIN_XFER,       "drain_xfer",       "of those, objects the transfer cache took")

enum sd_stat {
#define X(id, name, doc) SD_STAT_##id,
    SD_CACHE_STATS(X)
#undef X
    SD_NSTATS
};

extern SD_HIDDEN const char *const sd_stat_names[SD_NSTATS];

/* *p = max(*p, v), for the high-water marks of the statistics (relaxed:
 * any thread, no lock). */
static inline void stat_max(uint64_t *p, uint64_t v)
{
    uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, 0,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

#endif
