/*
 * hooks/stats.h - the statistics printers: the one place the per-cache
 * figures are formatted, for sd_stats_print(), the exit report
 * (SLABDEFRAG_STATS) and the slabinfo CLI (preload/control.c).
 */
#ifndef SD_HOOKS_STATS_H
#define SD_HOOKS_STATS_H

#include "cache.h"

enum stats_sort {
    STATS_SORT_NONE,            /* cache id order */
    STATS_SORT_SIZE,            /* slab space, largest first */
    STATS_SORT_LOSS,            /* space - objects * object size, largest first */
    STATS_SORT_PARTIAL,         /* partial slabs, most first */
};

#define STATS_JSON    0x1u      /* one JSON object instead of the table */
#define STATS_TOTALS  0x2u      /* totals only */

/* The table (or JSON) of every cache with slabs, typed caches always.
 * Does not use stdio; may allocate (a sort vector), falling back to id
 * order if that fails.  0 or -errno from writing to fd. */
int stats_print(int fd, unsigned flags, enum stats_sort sort);
/* Everything about one cache: geometry, slab state counts, every counter
 * by name (slabinfo -r).  0 or -errno. */
int stats_print_cache(int fd, struct sd_cache *c, unsigned flags);

#endif
