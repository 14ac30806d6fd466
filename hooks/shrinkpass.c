/*
 * hooks/shrinkpass.c - the passes of the background shrinker's thread
 * (hooks/shrinker.c runs them): a full pass over every cache, a decay
 * pass, meshing's catch-up, and the released slots of meshing's arena.
 */
#define _GNU_SOURCE
#include "shrinkpass.h"

#include "cache.h"
#include "large.h"
#include "mesh.h"
#include "meshpace.h"
#include "options.h"
#include "os.h"
#include "pcpu.h"
#include "segment.h"
#include "stat.h"
#include "tcache.h"
#include "vacate.h"

int shrink_mesh_more;
static unsigned cursor;                 /* next cache to shrink */
static unsigned long sig_after_pass;    /* program_sig() after the last pass */

/* A catch-up pass of an idle program meshes for this many pass budgets
 * (shrink_mesh_catchup). */
#define MESH_IDLE_BUDGET 8
/* In a program that allocates, the thread rests this many times as long
 * as its last catch-up took before the next: at most a fifth of a CPU.
 * Full passes back to back slow the program's own threads down (their
 * stacks drained, their refills waiting on the sort's list lock) for no
 * lower final RSS; a longer rest leaves more to mesh later. */
#define MESH_BUSY_REST 4
/* In an idle program, as long as its last catch-up took: half a CPU.
 * Back to back, a program that only looks idle (a garbage collector
 * walking its heap against the write barriers) would pay for meshing it
 * soon unmeshes at exit; a longer rest would leave an idle heap's RSS up
 * for longer. */
#define MESH_IDLE_REST 1

int shrink_any_ops_cache(void)
{
    for (unsigned i = SD_NCLASSES; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (c && c->has_ops && !c->dead)
            return 1;
    }
    return 0;
}

static void pass_event(size_t bytes)
{
    uint64_t now = os_now_ns();
    sd_dprintf(2, "event=shrink_pass mono=%lu.%09lu bytes=%zu\n",
               (unsigned long)(now / 1000000000ull),
               (unsigned long)(now % 1000000000ull), bytes);
}

/* One bounded pass of kind PASS_INTERVAL, PASS_URGENT, PASS_QUIET or
 * PASS_CATCHUP; returns the bytes released.  An urgent pass releases
 * every retained empty slab, the others only those idle past the decay:
 * a program that frees and allocates again would otherwise fault its
 * slabs back in at every pass.  Urgent and quiet passes mesh the classes
 * that made new slabs since the last pass too; an interval's pass meshes
 * nothing while meshing is `held` back for frees that go on. */
size_t shrink_pass(enum pass_kind kind, int held)
{
    int urgent = kind == PASS_URGENT, mesh_all = urgent || kind == PASS_QUIET;
    int mesh = kind != PASS_INTERVAL || !held;
    if (!mesh)
        __atomic_fetch_add(&shrink_stats.mesh_held, 1, __ATOMIC_RELAXED);
    uint64_t t0 = os_now_ns(), budget = (uint64_t)sd_opt.pass_budget_ms * 1000000ull;
    uint64_t deadline = t0 + budget;
    size_t bytes = urgent ? large_trim() : large_purge_decayed();
    /* One drain of every CPU's stacks for the pass, not one per cache:
     * each is a membarrier fence, an IPI to every CPU running the program
     * (a hundred per pass with the malloc classes alone). */
    pcpu_drain(NULL);
    for (unsigned n = 0; n < SD_MAX_CACHES; n++) {
        unsigned i = (cursor + n) % SD_MAX_CACHES;
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (!c || c->dead)
            continue;
        bytes += vacate_shrink_cache(c, deadline, !urgent, 1);
        if (os_now_ns() > deadline) {
            cursor = i + 1;
            break;
        }
    }
    bytes += cache_purge_sparse(deadline);  /* small classes' sparse pages */
    /* kick() callbacks allocated through this thread: give its active
     * slabs back so they can fill up or be vacated next time. */
    tcache_flush_self();
    /* Per-thread mode: threads that made no allocator call since the last
     * pass give their active slabs and rings back (the gate, tcache.h). */
    tcache_reclaim(urgent);
    /* Meshing, with a budget of its own: a pass holds one slab write-
     * protected at a time, for the copy of one slab.  Not when asked to
     * leave: exit waits for this thread (shrinker_stop). */
    if (mesh && mesh_enabled() && !shrinker_stopping())
        bytes += mesh_pass(os_now_ns() + budget,
                           &shrink_mesh_more, (mesh_all ? MESH_GROWING : 0) | (urgent ? MESH_FORCE : 0));
    /* Released slots (counted above): a pass of the interval punches the
     * kinds dirty for the decay, for a budget (shrink_purge_released the rest). */
    segment_purge_dirty(urgent, urgent ? 0 : os_now_ns() + budget);
    uint64_t now = os_now_ns(), dt = now - t0;
    if (sd_opt.pass_events && bytes)    /* scripts/compare marks it on its plots */
        pass_event(bytes);
    __atomic_fetch_add(&shrink_stats.passes, 1, __ATOMIC_RELAXED);
    stat_max(&shrink_stats.longest_pass_ns, dt);
    shrinker_note_pass(bytes);
    return bytes;
}

/* An interval with nothing to shrink: what idled past the decay goes
 * back all the same (retained empty slabs, free extents and cached
 * mappings of big blocks), which the allocation slow path does for a
 * busy program, and nothing does for an idle one (a server between
 * requests would keep a freed table and its classes' empty slabs for as
 * long as it idles), and the free pages of the
 * small classes' sparse slabs, which no free gives back (classes/cache.c,
 * "Pages of sparse slabs").  A program whose per-CPU
 * caches did nothing for an interval has them drained first (their
 * slabs' pages then go back with the rest: classes/pcpu.h).  A few
 * hundred relaxed loads when there is nothing; counted as a pass only
 * when it released memory. */
size_t shrink_decay_pass(int idle)
{
    pcpu_drain_idle();
    size_t bytes = cache_purge_sparse(os_now_ns() + (uint64_t)sd_opt.pass_budget_ms * 1000000ull);
    bytes += large_purge_decayed() + cache_release_decayed();
    /* Idle: every released slot; else the kinds dirty for the decay (the
     * rest wait for new slabs to take them without a fault). */
    bytes += segment_purge_dirty(idle, 0);
    if (!bytes)
        return 0;
    __atomic_fetch_add(&shrink_stats.decay_passes, 1, __ATOMIC_RELAXED);
    if (sd_opt.pass_events)
        pass_event(bytes);
    shrinker_note_pass(bytes);
    return bytes;
}

/* Has the program made no refill and no free to a slab since the
 * shrinker's last pass ended? */
void shrink_note_program(void)
{
    sig_after_pass = program_sig();
}

int shrink_program_idle(void)
{
    return program_sig() == sig_after_pass;
}

/* Meshing's catch-up.  In an idle program (bench/burst's hold, a server
 * between requests) a mesh pass alone, without the walk of every cache
 * (drains, sorts, releases) that a full pass does first, and for
 * MESH_IDLE_BUDGET pass budgets: nothing waits for it but the meshing,
 * and a full pass would spend most of its time re-sorting partial lists
 * that have not changed.  In a program that allocates, a full pass: its
 * sort is what makes the refills fill the fuller slabs, and mesh-only
 * catch-ups leave a churning heap larger.  But not back to back: the
 * program's thread pays for every full pass (its per-CPU stacks drained, its
 * refills waiting on the sort's list lock, a CPU beside it busy), and
 * the slabs meshed while it churns soon empty and unmesh again.  A busy
 * program's catch-up comes MESH_BUSY_REST times the last one's duration
 * after it, an idle one's MESH_IDLE_REST times.  Returns the rest it
 * asks for (ns; at least MESH_AGAIN_MS is taken); *released: the bytes
 * the catch-up gave back. */
uint64_t shrink_mesh_catchup(size_t *released)
{
    if (!shrink_program_idle()) {
        uint64_t t0 = os_now_ns();
        *released = shrink_pass(PASS_CATCHUP, 0);
        return (os_now_ns() - t0) * MESH_BUSY_REST;
    }
    uint64_t t0 = os_now_ns();
    size_t bytes = mesh_pass(t0 + (uint64_t)sd_opt.pass_budget_ms * MESH_IDLE_BUDGET * 1000000ull,
                             &shrink_mesh_more, 0);
    *released = bytes;
    __atomic_fetch_add(&shrink_stats.mesh_catchups, 1, __ATOMIC_RELAXED);
    if (bytes) {
        if (sd_opt.pass_events)
            pass_event(bytes);
        shrinker_note_pass(bytes);
    }
    return (os_now_ns() - t0) * MESH_IDLE_REST;
}

static unsigned long sig_purged;        /* program_sig() after the last purge */

/* The released slots of meshing's arena, DIRTY_PURGE_MS after the thread
 * first saw them.  An idle program's stale aliases are mapped back and
 * its dirty slots punched, for MESH_IDLE_BUDGET pass budgets (nothing
 * waits for it).  A busy program's aliases are mapped back for one
 * budget, and only the kinds dirty for the decay are punched: the rest
 * wait for a new slab to take them back without a fault, or for the
 * bound past which the releasing thread punches them itself
 * (core/segment.c, "Dirty slots").  Each mmap, registration and purge
 * from this thread flushes the TLB of the CPU the program runs on, an
 * IPI that a virtual machine pays on both sides, so a busy program's
 * slots are left to the decay.  The budgets also bound how long exit
 * waits for this thread (shrinker_stop) when a program's teardown
 * unmeshes thousands of hosts. */
void shrink_purge_released(void)
{
    uint64_t t0 = os_now_ns(), budget = (uint64_t)sd_opt.pass_budget_ms * 1000000ull;
    unsigned long sig = program_sig();
    if (sig == sig_purged || shrink_program_idle())
        cache_settle_slots(1, t0 + budget * MESH_IDLE_BUDGET);
    else
        cache_settle_slots(0, t0 + budget);
    sig_purged = sig;
}
