/*
 * hooks/shrinker.c - the background shrinker.
 *
 * One thread, started lazily: when a cache with get/kick is created, when
 * sd_shrink_wake() is called, at start-up when an option asks for it
 * (SLABDEFRAG_BACKGROUND, SLABDEFRAG_RSS_LIMIT_MB, SLABDEFRAG_CONTROL),
 * with meshing (SLABDEFRAG_MESH) once frees leave sparse slabs or the
 * program starts a thread ("Lazy start" below), or in per-thread mode
 * once the program runs more than four threads per CPU (their caches are
 * bounded by taking idle threads' slabs back).  Never from inside malloc
 * with an allocator or C library lock held.  It sleeps in poll() on:
 *   - an eventfd (sd_shrink_wake, shutdown),
 *   - a PSI trigger on /proc/pressure/memory (150 ms of stall in 2 s),
 *   - the cgroup v2 memory.events file (a memory.high/max event),
 *     these two from a second after the thread first started (watch_from),
 *   - the control socket (slabinfo), when enabled,
 * with the next SLABDEFRAG_SHRINK_INTERVAL_MS deadline as the timeout
 * (a deadline: wakes and nudges do not postpone it).  On an interval it
 * shrinks only if RSS exceeds SLABDEFRAG_RSS_LIMIT_MB (or the cgroup's
 * memory.high) or some cache has get/kick or meshing is on or per-thread
 * mode has many threads; on pressure or a wake, always.  With SLABDEFRAG_MESH=1 each pass ends with a mesh pass
 * (classes/mesh.c) of its own budget, and while that one finds more
 * candidates than it had time for, a catch-up comes MESH_AGAIN_MS after
 * it: a longer mesh pass alone in an idle program, after a rest as long
 * as the last one took, a full pass in one that allocates, after a rest
 * of four times its duration (mesh_catchup).  With meshing, the free
 * path also nudges the thread (per 64 slabs that frees left sparse:
 * classes/cache.c; an eventfd write unless the thread already watches the
 * nudges, sparse_nudge) and once the nudges pause for NUDGE_QUIET_MS, a
 * pass meshes at once, classes that grew included: a burst of frees is
 * meshed within about two seconds, and an idle program gets no pass but
 * the interval's.  Until they pause (for at most MESH_HOLD_MAX_MS), the
 * interval's passes and the catch-ups do not mesh; nor, for at most
 * MESH_COMPUTE_HOLD_MS more, while the program computes without
 * allocating (compute_hold, hooks/meshpace.c).  A decay (plus
 * DECAY_SLACK_MS) after a pass that gave memory back or left slots dirty
 * comes a decay pass (decay_pass: empties and extents past the decay,
 * idle CPUs' caches; every dirty slot if the program is idle), and
 * another a decay later while one gives something back: bench/burst's
 * steady state came at 1.89-2.01 s after its frees, with the interval's
 * phase; now 1.16 s.
 * A pass walks the caches round-robin and stops when its time budget
 * (SLABDEFRAG_PASS_BUDGET_MS) is spent; the next pass resumes there.
 *
 * The thread is the allocator's, not the program's, so it changes nothing
 * about how the program lives and dies:
 *   - Signals.  It starts with every asynchronous signal blocked, so that
 *     a signal sent to the process always goes to a thread of the program
 *     (which may block it on purpose).  Synchronous ones (SIGSEGV, SIGBUS,
 *     SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay unblocked: a fault with its
 *     signal blocked kills the process, and this thread writes the heap,
 *     where the mesh and fork write barrier parks writers in a SIGSEGV
 *     handler (core/heapfile.h).  glibc keeps its own SIGCANCEL and SIGSETXID
 *     unblocked whatever the mask says.
 *   - Life.  glibc ends a process with exit(0) when its last thread ends
 *     (main having called pthread_exit), and this thread would be the
 *     last forever.  preload/lifetime.c counts the program's threads; when
 *     the last one ends, shrinker_park() asks this thread to leave its
 *     loop and joins it, so that the program's thread is the last and
 *     glibc's exit(0) runs its atexit handlers there, as without us.  The
 *     join is bounded (a pass, or a kick() waiting for that very thread,
 *     can take longer): past the bound the thread is left to finish on
 *     its own, and glibc's exit(0) comes from it instead, after it has
 *     taken the signal mask of the program's last thread.  While parked,
 *     nothing starts a thread; a program thread that appears again (one
 *     started by a TSD destructor, or by a thread glibc created for
 *     SIGEV_THREAD, which is not counted) unparks it.
 *   - Exit.  exit() stops and joins the thread (shrinker_stop, from the
 *     library destructor): at most the rest of one bounded pass.  From the
 *     thread itself (glibc's exit(0) above, or a kick() calling exit) it
 *     is not joined.
 *   - Fork.  The child has no thread; shrinker_after_fork_child starts one
 *     if the parent's was running (the forking thread is the child's
 *     program thread, counted by preload/lifetime.c).
 */
#define _GNU_SOURCE
#include "shrinker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "fdguard.h"
#include "fmt.h"
#include "large.h"
#include "mesh.h"
#include "meshpace.h"
#include "options.h"
#include "os.h"
#include "pcpu.h"
#include "sdmalloc.h"
#include "segment.h"
#include "sigchain.h"
#include "stat.h"
#include "tcache.h"
#include "vacate.h"

/* The thread's life, under `lock`.  Once it has set `leaving` the thread
 * takes `lock` no more, so it can be joined with `lock` held. */
static sd_mutex lock = SD_MUTEX_INIT;
static pthread_cond_t left = PTHREAD_COND_INITIALIZER;  /* `leaving` was set, or `stopping` cleared */
static pthread_t thread;
static int running;                          /* a thread exists that nobody has joined */
static int stopping;                         /* it is asked to leave its loop (read unlocked) */
static int leaving;                          /* it has left its loop for good */
static int shut_down;                        /* exit is under way: start nothing */
static int parked;                           /* no program thread is left: start nothing */
static int resume;                           /* start it when unparked */
static int abandoned;                        /* a park stopped waiting for it */
static sigset_t park_mask;                   /* the signal mask of the thread that parked */
static int wake_fd = -1;
/* The pressure files the thread polls, opened once per process and never
 * closed: closing a PSI trigger waits for an RCU grace period (8-12 ms
 * measured), and a thread that closed them on its way out would keep a
 * park's bounded join or exit's join waiting that long.  The kernel closes
 * them with the process, and the process's exit waits that grace period
 * instead.  So the thread opens them only once the process has run
 * WATCH_DELAY_MS since the thread first started (watch_from): a short-lived
 * process never pays.  Before, every process with the thread took 13-15 ms
 * to exit (a malloc/free program with SLABDEFRAG_MESH=1: 15.0 ms a run
 * against 1.7 ms with meshing off), and pyenv's `python3 -c pass`, a shell
 * script of some 50 processes, took 1.31 s with meshing against 0.11 s.
 * Memory pressure in a process's first second goes unwatched; the
 * interval and RSS limit do not depend on these files. */
static int psi_fd = -1, cg_fd = -1;
static size_t cg_high;                       /* our cgroup's memory.high (bytes), 0: none */
static int watch_open;                       /* psi_fd and cg_fd were opened (the thread's) */
static uint64_t watch_from;                  /* monotonic ns: open them from then on; 0: not set */
#define WATCH_DELAY_MS 1000
static int *control_slot;       /* the control socket's (core/fdguard.h) */
static void (*control_ready)(int fd);
static unsigned cursor;                      /* next cache to shrink */
static struct shrinker_stats stats;
static int mesh_more;                        /* last mesh pass was cut short */

/* After a mesh pass that ran out of budget with candidates left, the
 * next mesh pass comes this many ms after it ended (it was 20: 1M blocks
 * of 16..255 B, 90% freed at random, took 10 s to mesh; now 2 s, issue
 * 16).  In an idle program these catch-up passes mesh only
 * (mesh_catchup). */
#define MESH_AGAIN_MS 2
/* A catch-up pass of an idle program meshes for this many pass budgets
 * (mesh_catchup). */
#define MESH_IDLE_BUDGET 8
/* In a program that allocates, the thread rests this many times as long
 * as its last catch-up took before the next: at most a fifth of a CPU.
 * python's churn (scripts/pyphases, 5 runs interleaved): back to back
 * (2 ms apart), 50 full passes a second, the churn phase 1.31 s against
 * 0.92 s with meshing off, wall 1.28x; resting 4x, 0.97 s and 1.08x-1.16x
 * for the same final RSS (198-202 MiB); resting 9x, 0.89 s, 1.20x. */
#define MESH_BUSY_REST 4
/* In an idle program, as long as its last catch-up took: half a CPU.
 * Back to back, burst's RSS settled 1.2-1.5 s after its frees and
 * python's churn, which exits 0.5 s after the churn, spent its hold
 * meshing (its gc.collect() against the write barriers) and its teardown
 * unmeshing: 1.27x meshing off (9 runs interleaved; 1.10x when the idle
 * test was broken and the hold got no idle catch-up, see program_sig).
 * Resting 1x: burst 1.6 s, python 1.18x (7 runs); 2x: burst 2.0 s. */
#define MESH_IDLE_REST 1
/* The free path's nudge (a burst of frees made many slabs sparse) is
 * acted on once no nudge came for this long. */
#define NUDGE_QUIET_MS 100
/* Until then, for at most this long, neither the interval's passes nor
 * catch-ups mesh: a slab meshed while the frees go on may empty and
 * unmesh, and each mesh interrupts the freeing threads (TLB flushes).
 * kvstore's deletes, meshed from the interval pass at 1.0 s to its exit
 * at 1.25 s (3,258 meshes), ran 1.12x meshing off, 1.07x with no mesh
 * made (README, issue 16).  A program whose frees never pause is meshed
 * as before once this has passed. */
#define MESH_HOLD_MAX_MS 5000
/* Then, while the program computes: hooks/meshpace.c, compute_hold. */
/* Released slots of meshing's arena wait dirty, and released mesh
 * aliases stale (core/segment.c), this long after the thread first sees
 * them (the first one wakes it) before it punches or maps them back, off
 * the program's threads (settle(): all of them in an idle program, only
 * what the decay asks in a busy one): meanwhile a new slab may take a
 * dirty slot back, without a fault. */
#define DIRTY_PURGE_MS 20
/* A decay pass comes this long after the decay of what the last pass
 * left empty (shrinker_main's decay_due). */
#define DECAY_SLACK_MS 20

/* The wake eventfd's counter: explicit wakes (sd_shrink_wake, stop) add
 * 1, the first dirty slot or stale alias after none WAKE_DIRTY (a wake
 * that only shortens the sleep: core/segment.c), the free path's nudges
 * WAKE_NUDGE.  The thread reads the counter at every wake, long before
 * 2^20 explicit or 2^12 dirty wakes pile up. */
#define WAKE_DIRTY (1ULL << 20)
#define WAKE_NUDGE (1ULL << 32)
#define WAKE_EXPLICIT_MASK (WAKE_DIRTY - 1)

/* Add v to the wake eventfd's counter, from the free path too (possibly
 * under a slab lock): only the write, and errno kept, as free() keeps it. */
static void wake_add(uint64_t v)
{
    int saved = errno, fd = fdguard_get(&wake_fd);
    if (fd >= 0 && write(fd, &v, sizeof v) < 0) { /* it will time out */ }
    fdguard_put();
    errno = saved;
}

/* How much longer than a pass budget shrinker_park() waits for the thread
 * (ms): a pass checks its budget between slabs, and a slab's get()/kick()
 * and a control request can run past it. */
#define PARK_WAIT_MS 100

void shrinker_note_pass(size_t bytes)
{
    __atomic_fetch_add(&stats.bytes_released, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&stats.last_pass_ns, os_now_ns(), __ATOMIC_RELAXED);
}

static int any_ops_cache(void)
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

/* One bounded pass; returns the bytes released.  `mesh_all`: mesh the
 * classes that made new slabs since the last pass too.  `urgent` (memory
 * pressure, the RSS limit, sd_shrink_wake) releases every retained empty
 * slab; a pass of the interval only those idle past the decay: a program
 * that frees and allocates again would otherwise fault its slabs back in
 * every second (python's churn under meshing released and refaulted
 * 95 MB in 19 passes). */
static size_t pass(int urgent, int mesh_all, int mesh)
{
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
    if (mesh && mesh_enabled() && !__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
        bytes += mesh_pass(os_now_ns() + budget,
                           &mesh_more, (mesh_all ? MESH_GROWING : 0) | (urgent ? MESH_FORCE : 0));
    /* Released slots (counted above): a pass of the interval punches the
     * kinds dirty for the decay, for a budget (settle() the rest). */
    segment_purge_dirty(urgent, urgent ? 0 : os_now_ns() + budget);
    uint64_t now = os_now_ns(), dt = now - t0;
    if (sd_opt.pass_events && bytes)    /* scripts/compare marks it on its plots */
        pass_event(bytes);
    __atomic_fetch_add(&stats.passes, 1, __ATOMIC_RELAXED);
    stat_max(&stats.longest_pass_ns, dt);
    shrinker_note_pass(bytes);
    return bytes;
}

/* An interval with nothing to shrink: what idled past the decay goes
 * back all the same (retained empty slabs, free extents and cached
 * mappings of big blocks), which the allocation slow path does for a
 * busy program, and nothing does for an idle one (a server between
 * requests: redis-age kept 4 MiB of a freed dict table and the empties of
 * a dozen classes for as long as it idled), and the free pages of the
 * small classes' sparse slabs, which no free gives back (classes/cache.c,
 * "Pages of sparse slabs").  A program whose per-CPU
 * caches did nothing for an interval has them drained first (their
 * slabs' pages then go back with the rest: classes/pcpu.h).  A few
 * hundred relaxed loads when there is nothing; counted as a pass only
 * when it released memory. */
static size_t decay_pass(int idle)
{
    pcpu_drain_idle();
    size_t bytes = cache_purge_sparse(os_now_ns() + (uint64_t)sd_opt.pass_budget_ms * 1000000ull);
    bytes += large_purge_decayed() + cache_release_decayed();
    /* Idle: every released slot; else the kinds dirty for the decay (the
     * rest wait for new slabs to take them without a fault). */
    bytes += segment_purge_dirty(idle, 0);
    if (!bytes)
        return 0;
    __atomic_fetch_add(&stats.decay_passes, 1, __ATOMIC_RELAXED);
    if (sd_opt.pass_events)
        pass_event(bytes);
    shrinker_note_pass(bytes);
    return bytes;
}

/* cgroup v2: the memory.events file of our cgroup and memory.high. */
static int cgroup_events_open(size_t *high_bytes)
{
    char buf[512], path[600];
    int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = os_read(fd, buf, sizeof buf - 1);
    os_close(fd);
    if (n <= 3 || strncmp(buf, "0::", 3))
        return -1;
    buf[n] = 0;
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = 0;
    sd_fmt(path, sizeof path, "/sys/fs/cgroup%s/memory.high", buf + 3);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char v[32];
        ssize_t m = os_read(fd, v, sizeof v - 1);
        os_close(fd);
        *high_bytes = 0;
        for (ssize_t i = 0; i < m && v[i] >= '0' && v[i] <= '9'; i++)
            *high_bytes = *high_bytes * 10 + (size_t)(v[i] - '0');
    }
    sd_fmt(path, sizeof path, "/sys/fs/cgroup%s/memory.events", buf + 3);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static int psi_open(void)
{
    int fd = open("/proc/pressure/memory", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    static const char trig[] = "some 150000 2000000";
    if (write(fd, trig, sizeof trig) < 0) {
        os_close(fd);
        return -1;
    }
    return fd;
}

/* ---------------------------------------------------------------- */
/* The thread                                                        */

/* Leave the loop if asked to (or `anyway`: poll failed), unless asked
 * back meanwhile (shrinker_unpark).  After this returns 1 the thread
 * touches no shared state.
 * A thread that a park stopped waiting for is likely to be the process's
 * last: glibc's exit(0) and the atexit handlers will run here.  It takes
 * the mask of the program's last thread first, so that the handlers run
 * with the signals the program expects (a SIGTERM during a long handler
 * still ends the process).  Only then: while a program thread is waiting
 * in shrinker_park, every signal must stay its own. */
static int leave(int anyway)
{
    sd_mutex_lock(&lock);
    int out = stopping || anyway;
    int own = out && parked && abandoned;
    sigset_t mask = park_mask;
    if (out) {
        __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
        leaving = 1;
        pthread_cond_broadcast(&left);
    }
    sd_mutex_unlock(&lock);
    if (own)
        sigchain_sigmask(SIG_SETMASK, &mask, NULL);
    return out;
}

static unsigned long sig_after_pass;    /* program_sig() after the last pass */

/* Has the program made no refill and no free to a slab since the
 * shrinker's last pass ended? */
static int program_idle(void)
{
    return program_sig() == sig_after_pass;
}

/* Meshing's catch-up (issue 16).  In an idle program (burst's hold, a
 * server between requests) a mesh pass alone, without the walk of every
 * cache (drains, sorts, releases) that a full pass does first, and for
 * MESH_IDLE_BUDGET pass budgets: nothing waits for it but the meshing.
 * With a full pass of one budget each time, burst's 4 s hold (1M blocks
 * of 16..255 B, 90% freed) took 237 passes, 41% of the process's samples
 * in vacate_shrink_cache re-sorting partial lists that had not changed,
 * and RSS settled 3.7-3.8 s after the frees; mesh-only with one budget
 * 3.8 s, with 8 budgets 2.6-3.0 s (load 11-13).  In a program that
 * allocates, a full pass as before: its sort is what makes the refills
 * fill the fuller slabs, and python's churn with mesh-only catch-ups kept
 * 199-210 MiB against 188-191.  But not back to back: the program's
 * thread pays for every full pass (its per-CPU stacks drained, its
 * refills waiting on the sort's list lock, a CPU beside it busy), and
 * the slabs meshed while it churns soon empty and unmesh again.  A busy
 * program's catch-up comes MESH_BUSY_REST times the last one's duration
 * after it, an idle one's MESH_IDLE_REST times.  Returns the rest it
 * asks for (ns; at least MESH_AGAIN_MS is taken); *released: the bytes
 * the catch-up gave back. */
static uint64_t mesh_catchup(size_t *released)
{
    if (!program_idle()) {
        uint64_t t0 = os_now_ns();
        *released = pass(0, 0, 1);
        return (os_now_ns() - t0) * MESH_BUSY_REST;
    }
    uint64_t t0 = os_now_ns();
    size_t bytes = mesh_pass(t0 + (uint64_t)sd_opt.pass_budget_ms * MESH_IDLE_BUDGET * 1000000ull,
                             &mesh_more, 0);
    *released = bytes;
    __atomic_fetch_add(&stats.mesh_catchups, 1, __ATOMIC_RELAXED);
    if (bytes) {
        if (sd_opt.pass_events)
            pass_event(bytes);
        shrinker_note_pass(bytes);
    }
    return (os_now_ns() - t0) * MESH_IDLE_REST;
}

static unsigned long sig_settled;       /* program_sig() after the last settle */

/* The released slots of meshing's arena, DIRTY_PURGE_MS after the thread
 * first saw them.  An idle program's stale aliases are mapped back and
 * its dirty slots punched, for MESH_IDLE_BUDGET pass budgets (nothing
 * waits for it).  A busy program's aliases are mapped back for one
 * budget, and only the kinds dirty for the decay are punched: the rest
 * wait for a new slab to take them back without a fault, or for the
 * bound past which the releasing thread punches them itself
 * (core/segment.c, "Dirty slots").  Each mmap, registration and purge
 * from this thread flushes the TLB of the CPU the program runs on, an
 * IPI that a virtual machine pays on both sides.  The budgets also
 * bound how long exit waits for this thread (shrinker_stop): python's
 * teardown unmeshes thousands of hosts, and exit waited 22-78 ms for
 * their aliases to be mapped back, now under 1 ms.  python's churn with
 * meshing (scripts/pyphases, 13 runs interleaved): every released slot
 * punched within 20 ms and no budgets, 1.13x the wall time of meshing
 * off, the shrinker's CPU 1.27 s, final RSS 198 MiB; this, 1.08x, 1.07 s
 * and 193 MiB. */
static void settle(void)
{
    uint64_t t0 = os_now_ns(), budget = (uint64_t)sd_opt.pass_budget_ms * 1000000ull;
    unsigned long sig = program_sig();
    if (sig == sig_settled || program_idle())
        cache_settle_slots(1, t0 + budget * MESH_IDLE_BUDGET);
    else
        cache_settle_slots(0, t0 + budget);
    sig_settled = sig;
}

/* core/segment.c's wake for its first dirty slot or stale alias: only
 * the eventfd write (it comes from the free path). */
static void dirty_wake(void)
{
    wake_add(WAKE_DIRTY);
}

/* After a pass that gave memory back or left released slots dirty: a
 * decay pass at `at` (shrinker_main's decay_due), unless one is due. */
static void decay_after(uint64_t *due, uint64_t at, size_t released)
{
    if (!*due && (released || segment_dirty_bytes()))
        *due = at;
}

void *shrinker_main(void *arg)
{
    struct pollfd fds[4];
    size_t high = cg_high;
    int watch_wait = !watch_open && sd_opt.psi;  /* opens them at watch_from */
    uint64_t nudged = 0;            /* ns of the last nudge not acted on */
    struct compute_look look = { 0 };   /* compute_hold */
    const uint64_t quiet = NUDGE_QUIET_MS * 1000000ull, look_gap = COMPUTE_LOOK_MS * 1000000ull;
    /* The interval is a deadline, not a poll timeout: wakes, nudges and
     * catch-up passes in between do not postpone it (a program whose
     * frees nudged more often than once a second got no interval pass),
     * and catch-up passes do not stand in for it. */
    const uint64_t interval = (uint64_t)sd_opt.shrink_interval_ms * 1000000ull;
    uint64_t next_interval = os_now_ns() + interval;
    uint64_t last_mesh = 0;         /* ns of the end of the last mesh pass */
    const uint64_t again_min = MESH_AGAIN_MS * 1000000ull;
    uint64_t again_gap = again_min; /* from last_mesh to the next catch-up */
    uint64_t dirty_seen = 0;        /* ns it first saw dirty slots or stale
                                       aliases it has not dealt with */
    uint64_t held_from = 0;         /* ns meshing was first held back for
                                       frees that go on (MESH_HOLD_MAX_MS) */
    const uint64_t hold_max = MESH_HOLD_MAX_MS * 1000000ull;
    /* What the passes left empty or dirty goes back once it has idled
     * for the decay: a decay pass then (every dirty slot punched if the
     * program is idle), and again a decay later while one gives something
     * back - not at the next interval (bench/burst's steady state came
     * 1.89-2.01 s after its frees, as the interval's phase fell). */
    const uint64_t decay_wait = ((uint64_t)sd_opt.decay_ms + DECAY_SLACK_MS) * 1000000ull;
    uint64_t decay_due = 0;         /* ns: a decay pass then; 0: none */
    nudge_watch_set(0);             /* a new thread: wake it */
    segment_dirty_purger(dirty_wake);
    for (;;) {
        if (nudged)                     /* the nudges it watched, not woken by */
            nudged = nudge_latest(nudged);
        /* (Each time: the program may have made ours move, core/fdguard.h.) */
        int n = 0, psi = __atomic_load_n(&psi_fd, __ATOMIC_ACQUIRE),
            cg = __atomic_load_n(&cg_fd, __ATOMIC_ACQUIRE);
        fds[n++] = (struct pollfd){ .fd = __atomic_load_n(&wake_fd, __ATOMIC_ACQUIRE),
                                    .events = POLLIN };
        int ipsi = -1, icg = -1, ictl = -1;
        if (psi >= 0) { ipsi = n; fds[n++] = (struct pollfd){ .fd = psi, .events = POLLPRI }; }
        if (cg >= 0)  { icg = n;  fds[n++] = (struct pollfd){ .fd = cg, .events = POLLPRI }; }
        int *cs = __atomic_load_n(&control_slot, __ATOMIC_ACQUIRE);
        int cfd = cs ? __atomic_load_n(cs, __ATOMIC_ACQUIRE) : -1;
        if (cfd >= 0) { ictl = n; fds[n++] = (struct pollfd){ .fd = cfd, .events = POLLIN }; }
        /* While meshing has candidates left, come back soon: MESH_AGAIN_MS
         * after the last mesh pass, or the rest a busy program's catch-up
         * asked for (each bounded by its budget), until a pass makes no
         * progress. */
        uint64_t now = os_now_ns(), wake_at = next_interval;
        /* held_from is set with nudged (after the poll) and cleared with
         * it (the quiet pass). */
        int held = nudged && now - held_from < hold_max;
        if (held && held_from + hold_max < wake_at)
            wake_at = held_from + hold_max;
        int again = mesh_more && sd_opt.shrink_interval_ms > MESH_AGAIN_MS && !held;
        if (again && last_mesh + again_gap < wake_at)
            wake_at = last_mesh + again_gap;
        if (nudged) {                   /* a mesh pass once the frees pause */
            uint64_t at = !look.at ? nudged + quiet - look_gap     /* the first look */
                        : look.at + look_gap > nudged + quiet ? look.at + look_gap
                        : nudged + quiet;
            if (at < wake_at)
                wake_at = at;
        }
        if (!dirty_seen && (segment_dirty_bytes() || segment_stale_aliases()))
            dirty_seen = now;
        if (dirty_seen && dirty_seen + DIRTY_PURGE_MS * 1000000ull < wake_at)
            wake_at = dirty_seen + DIRTY_PURGE_MS * 1000000ull;
        if (watch_wait && watch_from < wake_at)
            wake_at = watch_from;
        if (decay_due && decay_due < wake_at)
            wake_at = decay_due;
        int timeout = wake_at <= now ? 0 : (int)((wake_at - now + 999999u) / 1000000u);
        int r = poll(fds, (nfds_t)n, timeout);
        int failed = r < 0 && errno != EINTR;
        if ((failed || __atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) && leave(failed))
            break;
        int do_pass = 0;
        if (r > 0 && fds[0].revents & POLLIN) {
            uint64_t v;
            int fd = fdguard_get(&wake_fd);
            if (fd < 0 || os_read(fd, &v, sizeof v) < 0)
                v = 0;            /* spurious */
            fdguard_put();
            if (v & WAKE_EXPLICIT_MASK) {
                __atomic_fetch_add(&stats.wake_explicit, 1, __ATOMIC_RELAXED);
                do_pass = 2;      /* urgent */
            } else if (v >= WAKE_NUDGE) {
                nudged = os_now_ns();   /* frees made slabs sparse: see below */
                nudge_watch_set(1);
            }
        }
        if (r > 0 && ipsi >= 0 && fds[ipsi].revents & (POLLPRI | POLLERR)) {
            __atomic_fetch_add(&stats.wake_pressure, 1, __ATOMIC_RELAXED);
            do_pass = 2;          /* urgent */
        }
        if (r > 0 && icg >= 0 && fds[icg].revents & (POLLPRI | POLLERR)) {
            char b[256];
            int fd = fdguard_get(&cg_fd);
            if (fd >= 0 && os_pread(fd, b, sizeof b, 0) < 0) { /* nothing */ }
            fdguard_put();
            __atomic_fetch_add(&stats.wake_pressure, 1, __ATOMIC_RELAXED);
            do_pass = 2;          /* urgent */
        }
        if (r > 0 && ictl >= 0 && fds[ictl].revents & POLLIN && control_ready)
            control_ready(cfd);
        now = os_now_ns();
        if (nudged)
            nudged = nudge_latest(nudged);
        if (look.at && look.at < nudged)
            look.at = 0;                /* frees since the look: look again */
        if (nudged && !look.at && now >= nudged + quiet - look_gap)
            compute_look(&look, now);
        if (nudged && !held_from)       /* a nudge in this poll */
            held_from = now;
        held = nudged && now - held_from < hold_max;
        if (watch_wait && now >= watch_from) {
            /* Only this thread opens them, and one thread runs at a time
             * (a restarted one starts with them open). */
            fdguard_open_begin();
            fdguard_adopt(psi_open(), &psi_fd);
            fdguard_adopt(cgroup_events_open(&cg_high), &cg_fd);
            fdguard_open_end();
            high = cg_high;
            watch_open = 1;
            watch_wait = 0;
        }
        if (dirty_seen && now >= dirty_seen + DIRTY_PURGE_MS * 1000000ull) {
            dirty_seen = 0;
            settle();                   /* stale aliases, then dirty slots */
            compute_rebase(&look);
            now = os_now_ns();
        }
        if (now >= next_interval) {
            next_interval = now + interval;
            size_t rss = os_rss_bytes();
            size_t limit = (size_t)sd_opt.rss_limit_mb << 20;
            if ((limit && rss > limit) || (high && rss > high - high / 10)) {
                __atomic_fetch_add(&stats.wake_rss, 1, __ATOMIC_RELAXED);
                do_pass = 2;          /* urgent */
            } else if (do_pass) {
                /* already one */
            } else if (any_ops_cache() || sd_opt.background == SD_BG_ON || mesh_enabled() ||
                       tcache_reclaim_wanted()) {
                __atomic_fetch_add(&stats.wake_interval, 1, __ATOMIC_RELAXED);
                do_pass = 1;
            } else {
                decay_pass(1);
                compute_rebase(&look);
            }
        }
        /* Frees made many slabs sparse and have paused for NUDGE_QUIET_MS:
         * a mesh pass now, of the classes that grew too (not a second
         * later, after the interval; not while the frees go on, or the
         * slabs meshed would empty and unmesh). */
        if (nudged && !do_pass && now - nudged >= quiet && !compute_hold(&look, now) &&
            !nudge_unwatch(&nudged)) {
            nudged = 0;
            look = (struct compute_look){ 0 };
            held_from = 0;
            size_t b = pass(0, 1, 1);
            last_mesh = os_now_ns();
            again_gap = again_min;
            sig_after_pass = program_sig();
            decay_after(&decay_due, last_mesh + decay_wait, b);
            continue;
        }
        if (do_pass) {
            size_t b = pass(do_pass == 2, do_pass == 2, do_pass == 2 || !held);
            last_mesh = os_now_ns();
            again_gap = again_min;
            sig_after_pass = program_sig();
            compute_rebase(&look);
            decay_after(&decay_due, last_mesh + decay_wait, b);
        } else if (again && now >= last_mesh + again_gap) {
            size_t b;
            uint64_t g = mesh_catchup(&b);
            last_mesh = os_now_ns();
            again_gap = g > again_min ? g : again_min;
            sig_after_pass = program_sig();
            decay_after(&decay_due, last_mesh + decay_wait, b);
        } else if (decay_due && now >= decay_due) {
            decay_due = 0;
            if (decay_pass(program_idle()))
                decay_due = os_now_ns() + decay_wait;
            compute_rebase(&look);
        }
    }
    segment_dirty_purger(NULL);
    return NULL;
}

/* ---------------------------------------------------------------- */
/* Starting, stopping, parking                                       */

/* The free path's nudge (classes/cache.h): called with a slab lock held,
 * so nothing but a clock read and, unless the thread watches the nudges
 * (hooks/meshpace.c), the eventfd write.  Counted in the eventfd's high
 * half, so the thread tells it from an explicit wake. */
static void sparse_nudge(unsigned long sparse, unsigned long slabs)
{
    (void)sparse, (void)slabs;
    if (nudge_note())
        wake_add(WAKE_NUDGE);
}

/* Lazy start.  With meshing as the only reason for the thread, it is not
 * started with the program: a thread changes how the program runs even
 * while it sleeps - glibc takes the fast, atomic-free paths of
 * pthread_mutex_lock and stdio's locks only while a process has a
 * single thread, and bench/demos/kvstore, which locks a mutex per
 * operation, ran 1.03x the time of meshing off with an idle shrinker
 * thread alone (issue 16).  So the thread is armed instead (shrinker_arm)
 * and started when meshing has work: at the free path's first nudge.  Not
 * from the nudge itself - it holds a slab lock, and pthread_create
 * allocates - but from the next malloc or free that the program calls
 * from its own code (sdm_entry_defer: the entries check their return
 * address until then), after that call: the C library calls free with
 * its own locks held (the stack cache's while it frees a dead thread's
 * TLS, the loader's during dlclose), which pthread_create may take, and
 * this library with its own.  The program's code holds none of those:
 * glibc lets a program create a thread whenever it holds only its own
 * locks, single-threaded fast paths included (a lock taken without
 * atomics is released with them).  A program that starts a thread of its
 * own starts this one with it (shrinker_note_threads), so the thread is
 * only ever armed while the program has one thread.
 *
 * SLABDEFRAG_BACKGROUND=1 starts it with the program instead: for a
 * program that forbids new threads later (a seccomp sandbox), or a build
 * whose entries are not tail jumps (preload/init.c). */
static int armed;                            /* a nudge will start it (written under
                                                `lock`, read without it too) */

static void lazy_start(void)
{
    shrinker_start();
    wake_add(WAKE_NUDGE);                    /* the nudge that asked for it */
}

/* The nudge while armed: under a slab lock, so only the deferral, and
 * only once the class has made an eighth of its slabs sparse
 * (ARMED_SPARSE_SHIFT), not at its first 64: meshing has little to do
 * before, and the thread costs the program every lock glibc elides while
 * a process has one thread.  kvstore's mutex (pthread_mutex_lock and
 * unlock, main thread samples, 4 runs each): 385 meshing off; 1,248 with
 * the thread started at the first nudge (its 380,000th of 850,000
 * deletes); 1,140 at an eighth (the 580,000th). */
#define ARMED_SPARSE_SHIFT 3
static void armed_nudge(unsigned long sparse, unsigned long slabs)
{
    if (sparse << ARMED_SPARSE_SHIFT >= slabs)
        sdm_entry_defer(lazy_start);
}

void shrinker_arm(void)
{
    sd_mutex_lock(&lock);
    if (!running && !shut_down) {
        __atomic_store_n(&armed, 1, __ATOMIC_RELAXED);  /* read unlocked: note_threads */
        __atomic_store_n(&cache_sparse_nudge, armed_nudge, __ATOMIC_RELEASE);
    }
    sd_mutex_unlock(&lock);
}

static void wake_thread(void)
{
    wake_add(1);
}

/* Create the thread with every asynchronous signal blocked (see the top
 * of this file).  The mask goes through the attribute, so that no signal
 * can arrive between the thread's start and a mask it would set itself,
 * and the caller's own mask is never touched. */
static int create_thread_locked(void)
{
    SD_ASSERT(sd_mutex_held(&lock));
    static const int synchronous[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS };
    sigset_t mask;
    sigfillset(&mask);
    for (unsigned i = 0; i < sizeof synchronous / sizeof synchronous[0]; i++)
        sigdelset(&mask, synchronous[i]);
    pthread_attr_t attr;
    if (pthread_attr_init(&attr))
        return -1;
    int err = pthread_attr_setsigmask_np(&attr, &mask);
    /* In the shared library this is deliberately the preload layer's own
     * pthread_create (preload/lifetime.c), which starts shrinker_main
     * without counting it among the program's threads; in the static core
     * it is libc's. */
    if (!err)
        err = pthread_create(&thread, &attr, shrinker_main, NULL);
    pthread_attr_destroy(&attr);
    return err ? -1 : 0;
}

static void start_locked(void)
{
    SD_ASSERT(sd_mutex_held(&lock));
    if (shut_down)
        return;
    if (parked) {
        resume = 1;             /* when a program thread comes back */
        return;
    }
    if (running && !leaving) {
        if (stopping) {         /* parked and unparked before it left */
            __atomic_store_n(&stopping, 0, __ATOMIC_RELEASE);
            abandoned = 0;
            pthread_cond_broadcast(&left);
        }
        return;
    }
    if (running) {              /* leaving: it is out of its loop, the join is short */
        pthread_join(thread, NULL);
        __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&stopping, 0, __ATOMIC_RELEASE);
        leaving = abandoned = 0;
    }
    if (wake_fd < 0) {
        fdguard_open_begin();
        fdguard_adopt(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), &wake_fd);
        fdguard_open_end();
    }
    if (!watch_from)
        watch_from = os_now_ns() + WATCH_DELAY_MS * 1000000ull;
    if (wake_fd >= 0 && create_thread_locked() == 0) {
        __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
        stats.running = 1;
        __atomic_store_n(&cache_sparse_nudge, sparse_nudge, __ATOMIC_RELEASE);
        if (armed) {
            __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
            sdm_entry_defer(NULL);  /* the plain entries back, if a nudge came */
        }
    }
}

/* Ask the thread to leave, wait until it has (at most until `deadline_ns`,
 * monotonic; 0: no bound) and join it.  1 when it is gone; 0 when it is
 * still there: the caller is the thread itself, it was asked back, or the
 * deadline passed (it will leave on its own). */
static int stop_locked(uint64_t deadline_ns)
{
    SD_ASSERT(sd_mutex_held(&lock));
    if (!running)
        return 1;
    if (pthread_equal(thread, pthread_self()))
        return 0;
    if (!stopping) {
        __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
        wake_thread();
    }
    /* The waits are cancellation points; the callers are at exit or in a
     * thread's TSD destructor, where acting on a cancellation is wrong. */
    int cs;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
    while (stopping && !leaving) {
        uint32_t me = lock.holder;
        lock.holder = 0;        /* pthread_cond_*wait drop and retake lock.m */
        int err;
        if (deadline_ns) {
            struct timespec ts = { (time_t)(deadline_ns / 1000000000u),
                                   (long)(deadline_ns % 1000000000u) };
            err = pthread_cond_clockwait(&left, &lock.m, CLOCK_MONOTONIC, &ts);
        } else {
            err = pthread_cond_wait(&left, &lock.m);
        }
        lock.holder = me;
        if (err == ETIMEDOUT)
            break;
    }
    int gone = leaving;
    if (gone) {
        pthread_join(thread, NULL);
        __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&stopping, 0, __ATOMIC_RELEASE);
        leaving = 0;
        abandoned = 0;
        stats.running = 0;
    } else if (stopping && running) {
        abandoned = 1;          /* it leaves on its own */
    }
    pthread_setcancelstate(cs, NULL);
    return gone;
}

void shrinker_start(void)
{
    if (__atomic_load_n(&running, __ATOMIC_ACQUIRE) &&
        !__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
        return;
    sd_mutex_lock(&lock);
    start_locked();
    sd_mutex_unlock(&lock);
}

void shrinker_note_threads(unsigned live)
{
    if (__atomic_load_n(&running, __ATOMIC_ACQUIRE))
        return;
    if ((live >= 2 && (sd_opt.background == SD_BG_AUTO ||
                       __atomic_load_n(&armed, __ATOMIC_RELAXED))) ||
        (live > 4 * os_ncpus() && tcache_reclaim_wanted()))
        shrinker_start();
}

int shrinker_wake(void)
{
    shrinker_start();
    if (!__atomic_load_n(&running, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
        return -EAGAIN;
    uint64_t one = 1;
    int fd = fdguard_get(&wake_fd);
    int r = fd >= 0 && write(fd, &one, sizeof one) == sizeof one ? 0 : fd < 0 ? -EBADF : -errno;
    fdguard_put();
    return r;
}

void shrinker_stop(void)
{
    sd_mutex_lock(&lock);
    shut_down = 1;
    stop_locked(0);
    sd_mutex_unlock(&lock);
}

void shrinker_park(void)
{
    sd_mutex_lock(&lock);
    if (!parked && !shut_down) {
        parked = 1;
        resume = running && !stopping;
        sigchain_sigmask(SIG_BLOCK, NULL, &park_mask);
        /* A thread that is asleep leaves at once; one in a pass finishes
         * it first (its budget, plus what kick() callbacks overrun). */
        uint64_t wait_ms = sd_opt.pass_budget_ms + PARK_WAIT_MS;
        stop_locked(os_now_ns() + wait_ms * 1000000u);
    }
    sd_mutex_unlock(&lock);
}

void shrinker_unpark(void)
{
    sd_mutex_lock(&lock);
    if (parked) {
        parked = 0;
        if (resume) {
            resume = 0;
            start_locked();
        }
    }
    sd_mutex_unlock(&lock);
}

void shrinker_after_fork_child(void)
{
    lock = (sd_mutex)SD_MUTEX_INIT;
    left = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    /* The child has no thread: the parent's running one (or the one a
     * parked parent would resume) is started again. */
    int was = (running && !stopping && !shut_down) || (parked && resume);
    int was_armed = armed && !shut_down;
    running = stopping = leaving = shut_down = parked = resume = abandoned = armed = 0;
    cache_sparse_nudge = NULL;      /* until the child's own eventfd is open */
    segment_dirty_purger(NULL);     /* and its own thread runs */
    /* The files shared with the parent: a wake would reach its thread, and
     * the two would take each other's pressure events.  Closing our copies
     * leaves the parent's open. */
    fdguard_close(&wake_fd);
    fdguard_close(&psi_fd);
    fdguard_close(&cg_fd);
    cg_high = 0;
    watch_open = 0;
    watch_from = 0;                 /* the child waits its own first second */
    control_slot = NULL;            /* the parent's; the child opens its own */
    control_ready = NULL;
    stats.running = 0;
    if (was)
        shrinker_start();
    else if (was_armed)
        shrinker_arm();             /* a deferred start, if any, stays */
}

void shrinker_set_control(int *slot, void (*on_ready)(int fd))
{
    control_ready = on_ready;
    __atomic_store_n(&control_slot, slot, __ATOMIC_RELEASE);
    if (slot && __atomic_load_n(&running, __ATOMIC_ACQUIRE))
        wake_add(1);                /* re-poll with the new fd */
}

void shrinker_get_stats(struct shrinker_stats *st)
{
    *st = stats;
    st->running = __atomic_load_n(&running, __ATOMIC_ACQUIRE);
    st->armed = !st->running && __atomic_load_n(&armed, __ATOMIC_RELAXED);
    st->longest_vacate_ns = __atomic_load_n(&vacate_longest_ns, __ATOMIC_RELAXED);
    st->longest_pause_ns = __atomic_load_n(&vacate_longest_pause_ns, __ATOMIC_RELAXED);
}
