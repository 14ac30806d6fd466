/*
 * classes/xfer.h - transfer caches: per malloc class, one locked array of
 * free objects between the CPUs' stacks and the slabs (tcmalloc's
 * transfer cache).
 *
 * A full stack's batch (pcpu_free_slow) goes here instead of back to its
 * slabs while there is room, and an empty stack's refill (pcpu_alloc_slow)
 * takes a batch from here before it goes to the slabs.  Objects made on
 * one CPU and freed on another (a producer and a consumer, a thread pool)
 * then move between the CPUs as arrays of pointers: no slab lock, no list
 * move, no free pointer written into or read out of each object (the
 * consumer's CPU wrote it, the producer's would read it: a cache-line
 * transfer per object, and a slab emptied and refilled per batch).
 *
 * Bound: one CPU stack's worth per class (the same cap, pcpu.c), so a
 * program caches at most (CPUs + 1) x the per-CPU budget.  Objects here
 * count as in use for their slabs, as on a stack: every drain of the CPUs'
 * stacks (pcpu_drain: the shrinker, a mesh pass, an idle program, trim)
 * empties them back to the slabs, and a vacate's quiesce closes its
 * class's transfer cache (xfer_close) so that nothing goes in or out while
 * it makes the slab's occupancy true.
 *
 * Locking: each has a leaf lock (sd_spin): held for a copy of at most a
 * stack's half, never while another allocator lock is taken.  The fork
 * handler takes them all after pcpu_lock (xfer_lock_all).
 */
#ifndef SD_CLASSES_XFER_H
#define SD_CLASSES_XFER_H

#include "cache.h"

/* Put up to n objects of malloc class c (n <= XFER_BATCH_MAX); returns
 * how many went in, from objs[0] up (0 for a cache that is not a malloc
 * class, a closed or full one). */
unsigned xfer_put(struct sd_cache *c, void *const *objs, unsigned n);
/* Take up to n objects of c into out[]; returns how many. */
unsigned xfer_take(struct sd_cache *c, void **out, unsigned n);
/* Give every object back to its slab: of class c (NULL: all classes). */
void xfer_flush(const struct sd_cache *c);
/* Close (and flush) c's transfer cache while a vacate makes a slab's
 * occupancy true; xfer_open undoes it.  Calls nest. */
void xfer_close(const struct sd_cache *c);
void xfer_open(const struct sd_cache *c);
/* Objects held for cache id (racy); bytes held for all classes. */
size_t xfer_cached(uint16_t id);
size_t xfer_bytes(void);
/* Fork (classes/fork.c, through pcpu_drain_lock): take every lock;
 * release them, in the parent, or reset them, in the child. */
void xfer_lock_all(void);
void xfer_unlock_all(int child);

#endif
