/*
 * hooks/vacate.h - the shrink and vacate engine (patch 02/10).
 */
#ifndef SD_HOOKS_VACATE_H
#define SD_HOOKS_VACATE_H

#include "fmt.h"

#include <stddef.h>
#include <stdint.h>

struct sd_cache;

/* One shrink pass over c: release empty slabs (all, or with `idle` only
 * those past the decay), sort partial slabs fullest first (not again if
 * nothing changed since the last sort), and (caches with get/kick) vacate
 * those at most a quarter full while more than min_partial remain.  Slabs
 * not reached before `deadline_ns` (0: none) go back to the partial list
 * untouched.  `drained`: the caller has just drained every CPU's stacks
 * (pcpu_drain(NULL)), which this otherwise does for c.  Returns the bytes
 * returned to the OS. */
size_t vacate_shrink_cache(struct sd_cache *c, uint64_t deadline_ns, int idle, int drained);

/* The longest time one vacate kept a slab frozen (get, kick and all), and
 * the longest the slab lock was held across get() - the pause frees of
 * the program can see - in ns. */
extern SD_HIDDEN uint64_t vacate_longest_ns;
extern SD_HIDDEN uint64_t vacate_longest_pause_ns;

#endif
