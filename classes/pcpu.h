/*
 * classes/pcpu.h - per-CPU caches of free objects (SLUB's kmem_cache_cpu,
 * tcmalloc's per-CPU slabs), on restartable sequences (core/rseq.h).
 *
 * Each CPU keeps, per cache, a stack of up to cap free objects.  malloc
 * pops, free pushes, from any thread, with no lock and no atomic
 * instruction; a thread holds nothing of its own, so an idle or blocked
 * thread holds no memory and the cache a program keeps is bounded by its
 * CPUs times the per-CPU budget.  The stacks are refilled from, and
 * drained to, the cache's slabs in batches (classes/alloc.c).  Objects on
 * a stack count as in use for their slab; a vacate, a mesh, a shrink or a
 * trim first drains every CPU's stacks (pcpu_drain), fencing the CPUs
 * with membarrier so that no push or pop can still be on its way.
 *
 * When rseq or the fence cannot be had (no rseq registration by glibc,
 * Valgrind, a kernel before 5.10, SLABDEFRAG_PERCPU=0), every thread uses
 * the per-thread caches of classes/tcache.h instead; the choice is made
 * once, at start-up.  A thread whose own rseq area is not registered also
 * uses them.
 */
#ifndef SD_CLASSES_PCPU_H
#define SD_CLASSES_PCPU_H

#include <stddef.h>

#include "cache.h"
#include "rseq.h"
#include "tcache.h"

_Static_assert(SD_MAX_CACHES == SD_BIN_NONE, "PCPU_BIN_NONE is the last header");

/* 1 once per-CPU caches are in use (set at start-up, never cleared). */
extern SD_HIDDEN int sd_pcpu_on;
/* Read it (an atomic load: a trim or a statistics call in one thread may
 * come before another thread's first allocation sets it). */
static inline int pcpu_on(void)
{
    return __atomic_load_n(&sd_pcpu_on, __ATOMIC_ACQUIRE);
}

/* A cache's stack size, in objects, for objects of `size` bytes: the
 * per-CPU budget's equal share (pcpu.c), between 2 and 256. */
unsigned pcpu_cap(uint32_t size);
/* Decide the mode (cache_init, under sd_caches_lock). */
void pcpu_init(void);
/* Start using the per-CPU caches on this thread (sd_tc.pcpu); 1 if it
 * does now, 0 if it stays on its per-thread cache. */
int pcpu_thread_init(void);
/* The slow paths of the fast pop and push (alloc.h): refill, set-up,
 * drain to the slabs.  why: what the push returned (1 or 2). */
void *pcpu_alloc_slow(struct sd_cache *c) __attribute__((noinline));
void pcpu_free_slow(struct slab *s, void *p, const char *call, int why)
    __attribute__((noinline));
/* Drain every CPU's stacks of cache c (NULL: of every cache) back to the
 * slabs.  Slabs frozen before the call have nothing cached afterwards. */
void pcpu_drain(const struct sd_cache *c);
/* From the shrinker's interval: if no CPU's cache has done anything since
 * the last call (the program is idle), drain every stack, so that what
 * an idle program cached goes back to its slabs (and, past the decay,
 * to the OS) as tcmalloc's background thread reclaims idle CPUs' caches.
 * Returns 1 if it drained.  One caller (the shrinker thread). */
int pcpu_drain_idle(void);
/* Make frozen slab s's occupancy true (per-CPU mode; s unlocked): drain
 * the stacks of its cache, wait for the refills that took objects of s
 * before it froze and the drain batches under way to put theirs down, and
 * drain again.  0 if one is still under way after about 20 ms (the
 * caller puts s back untouched). */
int pcpu_quiesce(const struct sd_cache *c, struct slab *s);
/* Objects cached on all CPUs for cache id (racy; exact when quiescent). */
size_t pcpu_cached(uint16_t id);

/* Hot counters, counted per CPU and summed on read (stat.h ids
 * ALLOC_REFILL, ALLOC_DIRECT, FREE_REMOTE); pcpu_stat_sum also sums the
 * malloc classes' batch counters (REFILL_OBJECTS..DRAIN_XFER). */
void pcpu_stat_add(uint16_t id, enum sd_stat i, unsigned long n);
unsigned long pcpu_stat_sum(uint16_t id, enum sd_stat i);

/* A hot counter (refills, direct allocations, frees to slabs): per CPU
 * in per-CPU mode; per thread otherwise (tcache_stat_hot), but for the
 * direct allocations, which take the locks anyway. */
static inline void cache_stat_hot(struct sd_cache *c, enum sd_stat i, unsigned long n)
{
    if (pcpu_on())
        pcpu_stat_add(c->id, i, n);
    else if (i != SD_STAT_ALLOC_DIRECT)
        tcache_stat_hot(c, i);
    else
        cache_stat_add(c, i, n);
}

/* Any counter of c, summed over the CPUs. */
static inline unsigned long cache_stat_read(const struct sd_cache *c, enum sd_stat i)
{
    unsigned long n = __atomic_load_n(&c->stat[i], __ATOMIC_RELAXED);
    if (i == SD_STAT_ALLOC_REFILL || i == SD_STAT_ALLOC_DIRECT || i == SD_STAT_FREE_REMOTE ||
        (i >= SD_STAT_REFILL_OBJECTS && i <= SD_STAT_DRAIN_XFER))
        n += pcpu_stat_sum(c->id, i);
    if (i == SD_STAT_ALLOC_REFILL || i == SD_STAT_FREE_REMOTE)
        n += tcache_stat_sum(c->id, i);
    return n;
}

/* Statistics: the mode and each CPU's cached bytes. */
struct pcpu_info {
    int      on;                /* per-CPU caches in use */
    unsigned ncpu;              /* possible CPUs */
    size_t   bound_bytes;       /* per CPU, the malloc classes' caps */
    size_t   budget_bytes;      /* SLABDEFRAG_PERCPU_KB */
    size_t   transfer_bytes;    /* held by the transfer caches (xfer.h) */
};
void pcpu_get_info(struct pcpu_info *out);
/* Bytes cached on cpu (all caches). */
size_t pcpu_cpu_bytes(unsigned cpu);

/* The drain lock (outermost; see classes/cache.c): fork, and statistics
 * that must not see a drain half done. */
void pcpu_drain_lock(void);
void pcpu_drain_unlock(int child);

#endif
