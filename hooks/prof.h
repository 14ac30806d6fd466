/*
 * hooks/prof.h - the sampling heap profiler (SLABDEFRAG_PROF): who holds
 * the live bytes, and whose objects keep sparse slabs alive.
 *
 * The allocation path counts bytes down to the next sample point
 * (classes/sample.h); a sampled allocation's backtrace (libunwind) and
 * weight go into tables of their own mapping (hooks/prof.c), which never
 * call malloc and are bounded: what does not fit is counted and reported
 * as dropped.  Reports (hooks/profreport.c) attribute each sparse slab's
 * bytes to the call sites of its sampled objects, and write the gperftools
 * heap-profile format, folded stacks, and the profile at exit.
 */
#ifndef SD_HOOKS_PROF_H
#define SD_HOOKS_PROF_H

#include <stddef.h>
#include <stdint.h>

struct sd_cache;

/* ---------------------------------------------------------------------
 * Switching (any thread; no allocator lock held). */

/* Start sampling with a mean interval of `interval` bytes (0: keep the
 * current one, SLABDEFRAG_PROF's or the default 512 KiB).  0, or ENOMEM
 * when the tables cannot be mapped. */
int prof_start(uint64_t interval);
/* Stop taking new samples; live samples stay tracked until freed. */
void prof_stop(void);

/* ---------------------------------------------------------------------
 * The moves the allocator makes or watches (hooks/hint.c, hooks/vacate.c). */

/* p was copied to q (n bytes) and is about to be freed: q takes its
 * sample, if it has one. */
void prof_moved(void *p, void *q, size_t n);

/* A kick() of cache c on objs[0..n): while it runs, this thread's
 * allocations are moves, never sampled; those of c are candidate new
 * homes, and a sampled object it frees hands its sample to the candidate
 * holding the same bytes (else the oldest unclaimed one).  begin returns
 * 0 when the profiler never ran (then end must not be called). */
struct prof_kick {
    struct prof_kick_buf *buf;
    const struct sd_cache *cache;
    int64_t saved_left;         /* the thread's countdown before the kick */
    struct prof_kick *prev;     /* an enclosing kick of this thread */
};
int prof_kick_begin(struct prof_kick *k, const struct sd_cache *c,
                    void *const *objs, int n);
void prof_kick_end(struct prof_kick *k);

/* ---------------------------------------------------------------------
 * Reports (hooks/profreport.c); each writes to fd with no allocator lock
 * held and may take a while (on the control thread, or at exit). */

enum prof_sort { PROF_SORT_LIVE, PROF_SORT_PINNED };
/* One line of status: on/off, interval, samples, table use, drops. */
void prof_print_status(int fd);
/* The sites table: top `max` call sites by estimated live bytes or
 * pinned bytes, with the sparse-slab summary above it. */
void prof_print_sites(int fd, enum prof_sort sort, unsigned max);
/* The gperftools heap profile (heap_v2, read by google-pprof and go tool
 * pprof), with the process's mappings. */
void prof_write_heap(int fd);
/* Folded stacks ("outer;...;leaf bytes" lines): estimated live bytes, or
 * pinned bytes of sparse slabs.  Returns the lines written. */
size_t prof_write_folded(int fd, enum prof_sort what);
/* At exit with SLABDEFRAG_PROF: <prefix>.<pid>.heap and
 * <prefix>.<pid>.pinned.folded (SLABDEFRAG_PROF_PREFIX). */
void prof_write_final(void);

#endif
