/*
 * classes/sample.h - the allocation path's side of heap profiling: a
 * per-thread countdown of bytes to the next sample, and the checks that
 * find sampled objects again at free.  The profiler itself (which objects
 * are sampled, their backtraces, the reports) is hooks/prof.c; it plugs in
 * through sd_sample_ops, as hooks reach this layer only through a table.
 *
 * Cost.  malloc, calloc and free enter through sdm_entry
 * (classes/mallocfam.h), which the profiler switches: with profiling off
 * and no sample live they have no profiling check at all.  While
 * profiling is on, malloc and calloc subtract from a thread-local counter
 * and branch; while samples live, free loads the slab descriptor's
 * `sampled` word (on the first line, which free reads anyway) and
 * branches, and in a slab that holds samples, tests a bit of a 16-bit
 * filter (by object index mod 16) and looks the object up only when it is
 * set.  sd_cache_alloc, sd_cache_free and memalign are not switched: they
 * always count down (the counter crosses zero once per SAMPLE_RECHECK
 * bytes with profiling off, when sample_check re-reads the switch) and
 * test the word.
 *
 * Sampling (jemalloc's prof, tcmalloc's sampler): sample points form a
 * Poisson process on the bytes a thread allocates, with mean distance R
 * (SLABDEFRAG_PROF).  The counter holds the bytes to the next point; an
 * allocation that makes it negative contains a point and is sampled.  An
 * allocation of n bytes is therefore sampled with probability
 * p = 1 - exp(-n/R), and hooks/prof.c gives it the weight 1/p objects,
 * n/p bytes: the sum of weights over live samples is an unbiased estimate
 * of the live objects and bytes.
 */
#ifndef SD_CLASSES_SAMPLE_H
#define SD_CLASSES_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "lock.h"
#include "segment.h"
#include "tcache.h"
#include "types.h"

#ifndef SD_HIDDEN
#define SD_HIDDEN __attribute__((visibility("hidden")))
#endif

/* With profiling off, sd_cache_alloc and memalign (which always count)
 * re-arm the counter to this many bytes: such a thread notices that
 * profiling was switched on within this much of its own allocation.
 * malloc and calloc do not count while profiling is off (sdm_entry). */
#define SAMPLE_RECHECK (1 << 20)

/* What sample_check decided for the allocation that crossed zero. */
enum sample_how {
    SAMPLE_NONE = 0,    /* not sampled (counter re-armed) */
    SAMPLE_TAKE,        /* sample it: call sd_sample_ops->taken after */
    SAMPLE_KICK,        /* inside a profiled kick(): report it as a
                           possible new home of a moved sample */
};

/* The profiler's entry points (hooks/prof.c).  Each is called with no
 * allocator lock held, from the thread that allocates or frees. */
struct sample_ops {
    /* The counter of this thread went below zero during an allocation of
     * n bytes: re-arm it and say what to do (enum sample_how). */
    int  (*check)(size_t n);
    /* p (n bytes asked for) was just allocated and check said how. */
    void (*taken)(void *p, size_t n, int how);
    /* p, marked by sample_marked or a large block while samples of
     * large blocks live, is about to be freed. */
    void (*freed)(void *p);
    /* p moved to q (n bytes now): sd_defrag_realloc, realloc of a large
     * block in place of a free and a malloc. */
    void (*moved)(void *p, void *q, size_t n);
    /* Fork (classes/fork.c): take, release or reset its locks. */
    void (*fork)(enum sd_fork_phase phase);
};

/* Bytes this thread may still allocate before the next sample point (in
 * the thread's cache, classes/tcache.h). */
#define sd_sample_left (sd_tc.sample_left)
/* Set once by the profiler's constructor; NULL before. */
extern SD_HIDDEN const struct sample_ops *sd_sample_ops;
/* Live samples that are large blocks (not in a slab). */
extern SD_HIDDEN unsigned long sd_sample_large;

/* The slow side of the countdown (classes/sample.c). */
int sample_check(size_t n) __attribute__((noinline, cold));

/* Count n bytes; true if the countdown crossed zero: then the caller
 * takes its slow path, which calls sample_check(n).  (Entry points keep
 * the slow side in a separate noinline function reached by a tail call,
 * so that their fast paths stay leaf functions without a frame.) */
static inline int sample_due(size_t n)
{
    /* In unsigned arithmetic: a request above INT64_MAX bytes (which
     * fails anyway) must not overflow a signed subtraction. */
    int64_t left = (int64_t)((uint64_t)sd_sample_left - (uint64_t)n);
    sd_sample_left = left;
    return unlikely(left < 0);
}

/* The filter bit of p in its slab's `sampled` word (core/types.h):
 * size = odd << tz, so (p >> tz) & 15 runs through every value as the
 * object index does. */
static inline uint32_t sample_bit(const struct slab *s, const void *p)
{
    return 1u << (16 + (((uintptr_t)p >> s->tz) & 15));
}

/* Might object p of slab s be sampled?  A free's fast path tests only
 * the word (sample_slab_marked); its slow side tests p's filter bit, and
 * the profiler looks p up. */
static inline int sample_slab_marked(const struct slab *s)
{
    return __atomic_load_n(&s->sampled, __ATOMIC_RELAXED) != 0;
}

static inline int sample_marked(const struct slab *s, const void *p)
{
    return (__atomic_load_n(&s->sampled, __ATOMIC_RELAXED) & sample_bit(s, p)) != 0;
}

/* At free of p, marked by sample_marked (or a large block while
 * sd_sample_large is not 0): the profiler drops or moves its sample. */
static inline void sample_freed(void *p)
{
    sd_sample_ops->freed(p);
}

/* At free of p in slab s whose word sample_slab_marked: drop p's sample
 * if its filter bit says it may have one. */
static inline void sample_slab_freed(const struct slab *s, void *p)
{
    if (sample_marked(s, p))
        sd_sample_ops->freed(p);
}

/* After an allocation for which sample_check returned how != 0. */
void sample_taken(void *p, size_t n, int how) __attribute__((noinline, cold));
/* Fork phases (classes/fork.c). */
void sample_fork(enum sd_fork_phase phase);

#endif
