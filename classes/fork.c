/*
 * classes/fork.c - fork safety: the allocator's locks across fork(), and
 * the child's adoption of the slabs of the threads that did not survive.
 *
 * Registered once, before main (a constructor here, so the static core
 * used by the tests has it too) or at the allocator's first use if that
 * comes earlier (cache_init).  glibc keeps its first 48 atfork handlers in
 * static storage, so registering does not allocate.
 *
 * prepare takes every allocator lock in the documented order
 * (classes/cache.c), after the heap profiler's table locks (leaves that
 * are never held with an allocator lock: hooks/proftab.h): the reclaim
 * and drain locks, the cache registry, the thread registry, the segment
 * kind locks and the large-block leaves (huge blocks, extent arenas,
 * per-CPU stashes of freed extents: core/large.c), every slab lock, every
 * cache list lock.  The parent releases them.  The child resets them (it
 * runs as a new tid) and
 * adopts the slabs of the threads that did not survive the fork (found by
 * owner in the segments: their per-thread lists may be half updated; see
 * adopt_dead_threads_slabs below).
 * With meshing the slots that host a mesh are shared mappings: prepare
 * write-protects them last, the child copies each into a new object of
 * its own first, and the parent waits for that copy before it writes
 * again (core/heapfile.h, "Fork").
 * Layers above (the shrinker, the control socket) register their own child
 * handlers later, so they run after this one.
 *
 * Signals.  A program may fork from a signal handler (a SIGCHLD handler
 * that starts the next worker), and the signal may land while the same
 * thread is inside fork(), holding every lock prepare took: a second
 * prepare would wait for a lock its own thread holds, forever.  So
 * prepare blocks the asynchronous signals before its first lock, and
 * parent and child restore the thread's mask after their last unlock
 * (the child's pending signals are empty, as after any fork).  A fork
 * from a handler then runs before our prepare or after our parent/child
 * handler, when this thread holds none of our locks, and goes through
 * the whole sequence, forkcopy's steps included, as any fork: handlers
 * are never nested.  A signal that arrives inside the window is
 * delivered when the parent's handler returns, a fork later (with
 * meshing, after the child's copy of the arena).  The synchronous
 * signals stay open: meshing's write barrier faults into its SIGSEGV
 * handler while prepare has the arena write-protected.  (glibc's fork of
 * a multi-threaded process takes its own atfork lock around the
 * handlers, so a fork from a handler there deadlocks in glibc, with or
 * without us.)
 */
#include <pthread.h>

#include "cache.h"
#include "fdguard.h"
#include "forkcopy.h"
#include "large.h"
#include "mallocfam.h"
#include "os.h"
#include "pcpu.h"
#include "sample.h"
#include "segment.h"
#include "tcache.h"
#include "thread.h"

/* In the child only the forking thread exists.  The others stopped at
 * whatever instruction they were on, possibly in the middle of moving a
 * slab between their active slot and their ring, or of popping their
 * private list: their tbins cannot be trusted, and walking them (as this
 * once did) could put one slab on two lists.  So their slabs are found
 * from the segments instead, by owner: each is un-owned and settled by
 * its count as any slab (FULL, PARTIAL with its shared freelist, EMPTY).
 * Objects that were on a dead thread's private or local lists stay counted
 * as in use: leaked in the child, a few slabs' worth per thread at most,
 * as jemalloc and glibc leak other threads' caches after fork.  So do
 * the objects a per-CPU refill of a vanished thread held (feeding).  Called
 * with every allocator lock already released. */
struct adopt {
    uintptr_t keep;             /* the surviving thread's token */
    struct sd_list release;     /* slabs that turned out empty */
};

static void adopt_dead_slab(struct slab *s, void *arg)
{
    struct adopt *a = arg;
    unsigned st = s->state;
    __atomic_store_n(&s->feeding, 0, __ATOMIC_RELAXED);   /* refills of threads gone */
    if ((st != SLAB_ACTIVE && st != SLAB_OWNED) || s->owner == a->keep)
        return;
    sd_spin_lock(&s->lock);
    s->local_free = NULL;
    s->nlocal = 0;
    int release = cache_slab_settle_locked(s->cache, s, 0);
    sd_spin_unlock(&s->lock);
    if (release)                    /* not now: the walk holds segment locks */
        list_add_tail(&a->release, &s->link);
}

static void adopt_dead_threads_slabs(void)
{
    struct tcache *t = &sd_tc;
    struct adopt a = { t->state == TC_LIVE ? t->token : 0, { NULL, NULL } };
    list_init(&a.release);
    segment_for_each_slab(adopt_dead_slab, &a, 0);
    while (!list_empty(&a.release)) {
        struct slab *s = list_entry(a.release.next, struct slab, link);
        list_del(&s->link);
        cache_slab_release(s->cache, s);
    }
}

/* The forking thread's signal mask before prepare blocked the
 * asynchronous signals ("Signals" above). */
static __thread uint64_t fork_saved_mask __attribute__((tls_model("initial-exec")));

static void fork_prepare(void)
{
    os_signals_block_async(&fork_saved_mask);   /* before the first lock */
    sample_fork(SD_FORK_PREPARE);    /* the profiler's leaf locks, first */
    tcache_lock_reclaim();           /* outermost: no thread's bins half taken */
    pcpu_drain_lock();               /* outermost: no drain in flight */
    sd_mutex_lock(&sd_caches_lock);
    tcache_lock_registry();
    segment_lock_all();
    large_lock_all();
    cache_lock_all();
    sdm_entry_fork(SD_FORK_PREPARE); /* a leaf under the slab locks */
    forkcopy_prepare();           /* meshing: write-protect the arena */
}

static void fork_parent(void)
{
    forkcopy_parent();            /* waits for the child's copy */
    sdm_entry_fork(SD_FORK_PARENT);
    cache_unlock_all(0);
    large_unlock_all(0);
    segment_unlock_all(0);
    tcache_unlock_registry(0);
    sd_mutex_unlock(&sd_caches_lock);
    pcpu_drain_unlock(0);
    tcache_unlock_reclaim(0);
    sample_fork(SD_FORK_PARENT);
    os_signals_restore(fork_saved_mask);        /* after the last unlock */
}

static void fork_child(void)
{
    fdguard_fork_child();           /* no use or move of another thread's */
    sd_thread_fork_child();         /* a new thread id in the child */
    forkcopy_child();             /* a private copy of the arena */
    sdm_entry_fork(SD_FORK_CHILD);
    cache_unlock_all(1);
    large_unlock_all(1);
    segment_unlock_all(1);
    tcache_unlock_registry(1);
    sd_mutex_reset_child(&sd_caches_lock);
    pcpu_drain_unlock(1);
    tcache_unlock_reclaim(1);
    tcache_registry_fork_child();
    adopt_dead_threads_slabs();
    sample_fork(SD_FORK_CHILD);
    os_signals_restore(fork_saved_mask);        /* after the last unlock */
}

void fork_raw_prepare(void) { fork_prepare(); }
void fork_raw_parent(void) { fork_parent(); }
void fork_raw_child(void) { fork_child(); }

/* Once, without waiting: a thread that finds another one registering goes
 * on (the handlers are about to exist).  No pthread_once: a child forked
 * while another thread was inside it must not wait for a thread that is
 * gone (and sanitizers' pthread_once does not survive that). */
void fork_handlers_install(void)
{
    static int state;               /* 0 none, 1 registering, 2 done */
    int expect = 0;
    if (!__atomic_compare_exchange_n(&state, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
}

/* Before main, while the process has one thread. */
__attribute__((constructor(101))) static void fork_init(void)
{
    fork_handlers_install();
}
