/*
 * core/lock.c - the contended paths of the slab lock and its
 * self-deadlock report (see lock.h).
 *
 * The protocol is Drepper's three-state mutex with the holder's tid as
 * the "locked" value: a waiter sets SD_SPIN_WAITERS and sleeps on the
 * word while it still reads the same; a waiter that wakes takes the lock
 * with the bit set (others may sleep behind it); unlock clears the word
 * and wakes one sleeper if the bit was set.
 */
#define _GNU_SOURCE
#include "lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "os.h"

#define SPINS 100                       /* about a slab lock's hold time */

void (*sd_spin_deadlock_hook)(const sd_spin *l);

void sd_spin_self_deadlock(const sd_spin *l)
{
    if (sd_spin_deadlock_hook)
        sd_spin_deadlock_hook(l);
    sd_fatal("slab lock %p taken twice by thread %u", (const void *)l,
             sd_self_tid());
}

void sd_spin_lock_slow(sd_spin *l, uint32_t me)
{
    for (unsigned i = 0; i < SPINS; i++) {
        uint32_t v = __atomic_load_n(&l->holder, __ATOMIC_RELAXED);
        if (unlikely((v & ~SD_SPIN_WAITERS) == me))
            sd_spin_self_deadlock(l);
        if (v == 0 && __atomic_compare_exchange_n(&l->holder, &v, me, 0,
                                                  __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        __builtin_ia32_pause();
    }
    for (;;) {
        uint32_t v = __atomic_load_n(&l->holder, __ATOMIC_RELAXED);
        if (v == 0) {
            if (__atomic_compare_exchange_n(&l->holder, &v, me | SD_SPIN_WAITERS, 0,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return;
            continue;
        }
        if (unlikely((v & ~SD_SPIN_WAITERS) == me))
            sd_spin_self_deadlock(l);
        if (!(v & SD_SPIN_WAITERS)) {
            if (!__atomic_compare_exchange_n(&l->holder, &v, v | SD_SPIN_WAITERS, 0,
                                             __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                continue;
            v |= SD_SPIN_WAITERS;
        }
        os_syscall(SYS_futex, &l->holder, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
    }
}

void sd_spin_wake(sd_spin *l)
{
    os_syscall(SYS_futex, &l->holder, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
