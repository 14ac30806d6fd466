/*
 * core/fdguard.c - the allocator's own descriptors, out of the program's
 * reach.  See fdguard.h.
 *
 * Locking: guard_lock (a spin lock, a leaf) guards the table of slots.
 * A use is counted in `users` (and in the thread's depth, so that uses
 * nest); a move takes move_lock (moves are one at a time), raises
 * `moving`, waits for `users` to reach zero, and only then takes
 * guard_lock for the move itself: a use may close its descriptor, which
 * takes guard_lock.  New uses wait for `moving` to fall.
 *
 * Opening a descriptor of ours races with the program's calls that close
 * or take numbers: a close(5) of a number the program never opened must
 * not close the eventfd that got number 5 a moment earlier, before it
 * moved up.  So the program's calls count themselves in `inflight`
 * (fdguard_call_begin/end) and an opening raises `creating` and waits for
 * `inflight` to reach zero (Dekker's order, both sequentially
 * consistent): a call either sees `creating` and waits for the opening to
 * end, or the opening waits for the call.  fcntl is not counted (a lock
 * wait there may last forever, and it closes nothing).
 */
#define _GNU_SOURCE
#include "fdguard.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lock.h"
#include "os.h"

#define FDGUARD_MAX 32

int fdguard_count;
static int *slots[FDGUARD_MAX];
static sd_spin guard_lock = SD_SPIN_INIT;
static sd_spin move_lock = SD_SPIN_INIT;    /* one move at a time */
static unsigned users;                  /* uses in progress, all threads */
static int moving;                      /* a move waits for the uses */
static __thread unsigned depth;         /* this thread's uses */
static unsigned long moved, lost;
static int creating;                    /* an opening of ours is under way */
static unsigned inflight;               /* program calls under way */
static sd_spin open_lock = SD_SPIN_INIT;    /* one opening at a time */
static __thread int opening;            /* this thread opens: its own calls
                                           (a temporary file's close) go on */

/* Count this thread in *count once *flag is down: the counting side of
 * the Dekker pairs above (uses against a move, program calls against an
 * opening). */
static void count_in_unless(unsigned *count, const int *flag)
{
    for (;;) {
        __atomic_fetch_add(count, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(flag, __ATOMIC_SEQ_CST))
            return;
        __atomic_fetch_sub(count, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(flag, __ATOMIC_ACQUIRE))
            sched_yield();
    }
}

void fdguard_open_begin(void)
{
    sd_spin_lock(&open_lock);
    opening = 1;
    __atomic_store_n(&creating, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&inflight, __ATOMIC_SEQ_CST))
        sched_yield();
}

void fdguard_open_end(void)
{
    opening = 0;
    __atomic_store_n(&creating, 0, __ATOMIC_SEQ_CST);
    sd_spin_unlock(&open_lock);
}

void fdguard_call_begin(void)
{
    if (!opening)
        count_in_unless(&inflight, &creating);
}

void fdguard_call_end(void)
{
    if (opening)
        return;
    __atomic_fetch_sub(&inflight, 1, __ATOMIC_RELEASE);
}

int fdguard_list(int *out, int max)
{
    int n = 0;
    for (unsigned i = 0; i < FDGUARD_MAX; i++) {
        int *s = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
        int fd = s ? __atomic_load_n(s, __ATOMIC_ACQUIRE) : -1;
        if (fd >= 0 && n < max) {
            int j = n++;
            for (; j > 0 && out[j - 1] > fd; j--)
                out[j] = out[j - 1];
            out[j] = fd;
        }
    }
    return n;
}

/* The system calls themselves: the exported close and fcntl are the
 * preload layer's wrappers, which would refuse our own descriptors. */
static void raw_close(int fd)
{
    os_syscall(SYS_close, fd);
}

static int raw_dup_high(int fd)
{
    int hi = (int)os_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, OS_FD_MIN);
    if (hi < 0)
        hi = (int)os_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3);   /* a low RLIMIT_NOFILE */
    return hi;
}

int fdguard_adopt(int fd, int *slot)
{
    if (fd < 0) {
        *slot = -1;
        return fd;
    }
    int hi = fd >= OS_FD_MIN ? -1 : raw_dup_high(fd);
    if (hi >= 0) {
        raw_close(fd);
        fd = hi;
    }
    sd_spin_lock(&guard_lock);
    unsigned i = 0;
    while (i < FDGUARD_MAX && slots[i])
        i++;
    if (i < FDGUARD_MAX) {
        slots[i] = slot;
        __atomic_store_n(&fdguard_count, fdguard_count + 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(slot, fd, __ATOMIC_RELEASE);
    sd_spin_unlock(&guard_lock);
    return fd;
}

void fdguard_close(int *slot)
{
    sd_spin_lock(&guard_lock);
    for (unsigned i = 0; i < FDGUARD_MAX; i++)
        if (slots[i] == slot) {
            slots[i] = NULL;
            __atomic_store_n(&fdguard_count, fdguard_count - 1, __ATOMIC_RELAXED);
        }
    int fd = __atomic_exchange_n(slot, -1, __ATOMIC_ACQ_REL);
    sd_spin_unlock(&guard_lock);
    if (fd >= 0)
        raw_close(fd);
}

int fdguard_get(int *slot)
{
    if (depth++ == 0)
        count_in_unless(&users, &moving);
    return __atomic_load_n(slot, __ATOMIC_ACQUIRE);
}

void fdguard_put(void)
{
    if (--depth == 0)
        __atomic_fetch_sub(&users, 1, __ATOMIC_RELEASE);
}

int fdguard_is_ours(int fd)
{
    if (fd < 0)
        return 0;
    for (unsigned i = 0; i < FDGUARD_MAX; i++) {
        int *s = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
        if (s && __atomic_load_n(s, __ATOMIC_ACQUIRE) == fd)
            return 1;
    }
    return 0;
}

void fdguard_evict(int fd)
{
    if (!fdguard_is_ours(fd))
        return;
    /* The wait happens outside guard_lock: a use in progress may close
     * its descriptor (a failed ioctl), which takes guard_lock. */
    sd_spin_lock(&move_lock);
    __atomic_store_n(&moving, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&users, __ATOMIC_SEQ_CST) > (depth ? 1u : 0u))
        sched_yield();
    sd_spin_lock(&guard_lock);
    for (unsigned i = 0; i < FDGUARD_MAX; i++) {
        if (!slots[i] || *slots[i] != fd)
            continue;
        int hi = raw_dup_high(fd);
        if (hi >= 0) {
            __atomic_store_n(slots[i], hi, __ATOMIC_RELEASE);
            moved++;
        } else {
            __atomic_store_n(slots[i], -1, __ATOMIC_RELEASE);
            slots[i] = NULL;
            __atomic_store_n(&fdguard_count, fdguard_count - 1, __ATOMIC_RELAXED);
            lost++;
        }
        raw_close(fd);
    }
    sd_spin_unlock(&guard_lock);
    __atomic_store_n(&moving, 0, __ATOMIC_RELEASE);
    sd_spin_unlock(&move_lock);
}

void fdguard_stats(unsigned long *m, unsigned long *l)
{
    *m = __atomic_load_n(&moved, __ATOMIC_RELAXED);
    *l = __atomic_load_n(&lost, __ATOMIC_RELAXED);
}

void fdguard_fork_child(void)
{
    guard_lock = (sd_spin)SD_SPIN_INIT;
    move_lock = (sd_spin)SD_SPIN_INIT;
    open_lock = (sd_spin)SD_SPIN_INIT;
    creating = 0;
    inflight = 0;
    opening = 0;
    users = 0;
    moving = 0;
    depth = 0;
}
