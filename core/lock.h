/*
 * core/lock.h - the allocator's two lock types.
 *
 * sd_spin:  a per-slab lock that records its holder's thread id, so
 *           that a thread taking a slab lock it already holds (a get()
 *           callback freeing an object of the slab being vacated) is
 *           reported by name instead of deadlocking.  Held for a handful
 *           of instructions, never across a callback other than get().
 *           Taken with one compare-and-swap; contended, it spins a
 *           little, then sleeps on a futex (the WAITERS bit asks the
 *           unlock to wake one): a holder preempted on a 2-core machine
 *           costs its waiters a sleep, not a storm of sched_yield calls,
 *           and a get() that runs long holds the slab's freers asleep.
 * sd_mutex: a pthread mutex (futex based, no allocation, statically
 *           initialisable) for the per-cache list locks and the global
 *           registries, where holders may wait.
 *
 * The lock order is documented in classes/cache.c, which owns slab states.
 */
#ifndef SD_CORE_LOCK_H
#define SD_CORE_LOCK_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "fmt.h"
#include "thread.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#ifdef SD_ASSERTS
#define SD_ASSERT(c) \
    ((c) ? (void)0 : sd_fatal("assertion failed: %s (%s:%d)", #c, __FILE__, __LINE__))
#else
#define SD_ASSERT(c) ((void)0)
#endif

typedef struct {
    uint32_t holder;            /* tid of the holder, 0 when free; and
                                   SD_SPIN_WAITERS while someone sleeps */
} sd_spin;

#define SD_SPIN_WAITERS 0x80000000u     /* tids stay below 2^22 (pid_max) */

#define SD_SPIN_INIT { 0 }

/* Report a self-deadlock on a slab lock (cold; aborts).  The hook, when
 * set, runs first and may give a better report (the classes layer names
 * a get() callback that called the allocator); it aborts or returns. */
void sd_spin_self_deadlock(const sd_spin *l) __attribute__((noreturn, cold));
extern SD_HIDDEN void (*sd_spin_deadlock_hook)(const sd_spin *l);

static inline int sd_spin_trylock(sd_spin *l)
{
    uint32_t expect = 0;
    return __atomic_compare_exchange_n(&l->holder, &expect, sd_self_tid(), 0,
                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* The contended paths (core/lock.c). */
void sd_spin_lock_slow(sd_spin *l, uint32_t me) __attribute__((noinline));
void sd_spin_wake(sd_spin *l) __attribute__((noinline));

static inline void sd_spin_lock(sd_spin *l)
{
    uint32_t me = sd_self_tid(), expect = 0;
    if (likely(__atomic_compare_exchange_n(&l->holder, &expect, me, 0,
                                           __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)))
        return;
    sd_spin_lock_slow(l, me);
}

static inline void sd_spin_unlock(sd_spin *l)
{
    SD_ASSERT((__atomic_load_n(&l->holder, __ATOMIC_RELAXED) & ~SD_SPIN_WAITERS) ==
              sd_self_tid());
    uint32_t was = __atomic_exchange_n(&l->holder, 0, __ATOMIC_RELEASE);
    if (unlikely(was & SD_SPIN_WAITERS))
        sd_spin_wake(l);
}

static inline int sd_spin_held(const sd_spin *l)
{
    return (__atomic_load_n(&l->holder, __ATOMIC_RELAXED) & ~SD_SPIN_WAITERS) ==
           sd_self_tid();
}

typedef struct {
    pthread_mutex_t m;
    uint32_t holder;            /* tid, kept for the _locked asserts */
} sd_mutex;

#define SD_MUTEX_INIT { PTHREAD_MUTEX_INITIALIZER, 0 }

static inline void sd_mutex_lock(sd_mutex *l)
{
    pthread_mutex_lock(&l->m);
    l->holder = sd_self_tid();
}

static inline int sd_mutex_trylock(sd_mutex *l)
{
    if (pthread_mutex_trylock(&l->m))
        return 0;
    l->holder = sd_self_tid();
    return 1;
}

static inline void sd_mutex_unlock(sd_mutex *l)
{
    SD_ASSERT(l->holder == sd_self_tid());
    l->holder = 0;
    pthread_mutex_unlock(&l->m);
}

static inline int sd_mutex_held(const sd_mutex *l)
{
    return l->holder == sd_self_tid();
}

/* In a fork child: the forking thread held every lock in prepare; the
 * child runs as a new tid, so ownership is rewritten before unlocking. */
static inline void sd_mutex_reset_child(sd_mutex *l)
{
    l->holder = 0;
    pthread_mutex_unlock(&l->m);
}

/* Which of a fork handler's three calls (classes/fork.c): before the
 * fork (take the locks), in the parent after it (release them), or in
 * the child (reset them, sd_mutex_reset_child). */
enum sd_fork_phase { SD_FORK_PREPARE, SD_FORK_PARENT, SD_FORK_CHILD };

#endif
