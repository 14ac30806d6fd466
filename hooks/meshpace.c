/*
 * hooks/meshpace.c - when the shrinker's mesh passes come.
 *
 * The free path nudges the shrinker's thread per 64 slabs that frees
 * left sparse (classes/cache.c), and once the nudges pause for
 * NUDGE_QUIET_MS a pass meshes (hooks/shrinker.c).  Two refinements live
 * here:
 *
 * Watched nudges.  Once a nudge woke it, the thread waits for the frees
 * to pause and wakes by then anyway, so later nudges only move the time
 * it looks at (nudge_last), without the eventfd write: a write each would
 * wake the thread on another CPU for nothing, an interrupt for the
 * freeing thread too.  The
 * thread stops watching (nudge_watch 0) before it decides the frees
 * paused, then reads nudge_last again: a nudge either sees it no longer
 * watches and writes, or is seen (both sequentially consistent).
 *
 * The computing program.  Once the frees pause, the mesh pass still
 * waits while the program computes without allocating - its other threads
 * ran for more than a quarter of a CPU over the last COMPUTE_LOOK_MS, with
 * no refill and no free to a slab (program_sig) - for at most
 * MESH_COMPUTE_HOLD_MS: each mesh costs the running threads two or three
 * TLB shootdowns (on this project's guests, an interrupt taken through
 * the hypervisor), while a heap that nothing allocates from or frees to
 * does not change, so meshing it later costs nothing.  An idle program
 * (bench/burst, a server between requests) is meshed at once.  The
 * decision: a look COMPUTE_LOOK_MS before the frees' quiet time is up
 * (the shrinker loop's tend() takes it), one at that time, and one every
 * COMPUTE_LOOK_MS while the hold lasts.
 */
#define _GNU_SOURCE
#include "meshpace.h"

#include <time.h>

#include "cache.h"
#include "mallocfam.h"
#include "os.h"
#include "pcpu.h"
#include "shrinkpass.h"

#define MESH_COMPUTE_HOLD_MS 1000

static uint64_t nudge_last;                 /* ns of the latest nudge */
static int nudge_watch;                     /* the thread reads nudge_last
                                               on its own: no write */

/* The malloc classes' refills and frees to slabs, summed: what the
 * program's allocation traffic moves.  The shrinker's own passes move it
 * too (their vectors, drains and purges), so the idle test compares with
 * a snapshot taken after the thread's last pass (shrink_note_program):
 * compared call to call, every full catch-up would make the next one
 * look busy, and an idle program would get slow full passes instead of
 * mesh passes. */
unsigned long program_sig(void)
{
    unsigned long sig = 0;
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        sig += cache_stat_read(&sd_malloc_caches[i], SD_STAT_ALLOC_REFILL) +
               cache_stat_read(&sd_malloc_caches[i], SD_STAT_FREE_REMOTE);
    return sig;
}

/* ---------------------------------------------------------------- */
/* Watched nudges                                                    */

int nudge_note(void)
{
    __atomic_store_n(&nudge_last, os_now_ns(), __ATOMIC_SEQ_CST);
    return !__atomic_load_n(&nudge_watch, __ATOMIC_SEQ_CST);
}

void nudge_watch_set(int on)
{
    __atomic_store_n(&nudge_watch, on, __ATOMIC_SEQ_CST);
}

uint64_t nudge_latest(uint64_t nudged)
{
    uint64_t l = __atomic_load_n(&nudge_last, __ATOMIC_SEQ_CST);
    return l > nudged ? l : nudged;
}

int nudge_unwatch(uint64_t *nudged)
{
    __atomic_store_n(&nudge_watch, 0, __ATOMIC_SEQ_CST);
    uint64_t l = nudge_latest(*nudged);
    if (l == *nudged)
        return 0;
    *nudged = l;
    __atomic_store_n(&nudge_watch, 1, __ATOMIC_SEQ_CST);
    return 1;
}

/* ---------------------------------------------------------------- */
/* The computing program                                             */

int compute_look(struct compute_look *l, uint64_t now)
{
    struct timespec p, t;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p) || clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t))
        return 0;
    uint64_t others = os_timespec_ns(&p) - os_timespec_ns(&t);
    unsigned long sig = program_sig();
    /* (the process clock sums its threads' clocks: never trust it to
     * have moved as much as ours) */
    uint64_t ran = others > l->others ? others - l->others : 0;
    int busy = l->at && sig == l->sig && ran * 4 > now - l->at;
    l->at = now;
    l->others = others;
    l->sig = sig;
    return busy;
}

/* The thread's own work since the last look (a pass, a decay pass, a
 * settle) moves the counters program_sig() reads - in per-thread mode an
 * interval pass takes idle threads' cached slabs back - and is not the
 * program's: the next look compares with the counters after it. */
void compute_rebase(struct compute_look *l)
{
    if (l->at)
        l->sig = program_sig();
}

/* Should the quiet pass wait (MESH_COMPUTE_HOLD_MS)?  Decided from a look
 * COMPUTE_LOOK_MS before the frees' quiet time is up (taken then by
 * shrinker_main) and one now. */
int compute_hold(struct compute_look *l, uint64_t now)
{
    const uint64_t look = COMPUTE_LOOK_MS * 1000000ull;
    if (!l->at) {                       /* no look yet: this one, decide later */
        compute_look(l, now);
        return 1;
    }
    if (now - l->at < look)
        return 1;
    if (!compute_look(l, now))
        return 0;
    if (!l->since)
        l->since = now;
    if (now - l->since >= MESH_COMPUTE_HOLD_MS * 1000000ull)
        return 0;
    __atomic_fetch_add(&shrink_stats.compute_holds, 1, __ATOMIC_RELAXED);
    return 1;
}
