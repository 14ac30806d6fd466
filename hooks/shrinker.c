/*
 * hooks/shrinker.c - the background shrinker: its thread's life and its
 * loop, which decides when to run which pass (the passes themselves are
 * hooks/shrinkpass.c).
 *
 * One thread, started lazily: when a cache with get/kick is created, when
 * sd_shrink_wake() is called, at start-up when an option asks for it
 * (SLABDEFRAG_BACKGROUND, SLABDEFRAG_RSS_LIMIT_MB, SLABDEFRAG_CONTROL),
 * with meshing (SLABDEFRAG_MESH) once frees leave sparse slabs or the
 * program starts a thread ("Lazy start" below), or in per-thread mode
 * once the program runs more than four threads per CPU (their caches are
 * bounded by taking idle threads' slabs back).  Never from inside malloc
 * with an allocator or C library lock held.  It sleeps in poll() on:
 *   - an eventfd (sd_shrink_wake, shutdown, the free path's nudges, the
 *     first released slot of meshing's arena),
 *   - a PSI trigger on /proc/pressure/memory (150 ms of stall in 2 s),
 *   - the cgroup v2 memory.events file (a memory.high/max event),
 *     these two from a second after the thread first started (watch_from),
 *   - the control socket (slabinfo), when enabled.
 *
 * The loop (shrinker_main) is one round per wake:
 *   next_wake     the earliest deadline: the interval, a quiet or catch-up
 *                 mesh, released slots, the pressure files, a decay pass;
 *   woken         what the poll returned: an explicit wake or memory
 *                 pressure asks for an urgent pass, a nudge is noted;
 *   tend          what every wake does: the nudges and compute_hold's
 *                 look, opening the pressure files, released slots;
 *   interval_due  at SLABDEFRAG_SHRINK_INTERVAL_MS (a deadline: wakes and
 *                 nudges do not postpone it): urgent over the RSS limit
 *                 (SLABDEFRAG_RSS_LIMIT_MB, or near the cgroup's
 *                 memory.high), a pass if some cache has get/kick, meshing
 *                 is on, the option asks for it or per-thread mode has many
 *                 threads, else a decay pass alone;
 *   choose_pass   then, in this order: what the wake or the interval asked,
 *                 a quiet mesh, a catch-up, a decay pass (enum pass_kind);
 *   run_pass      run it and note when the next may come.
 * With meshing, the free path nudges the thread per 64 slabs that frees
 * left sparse (classes/cache.c, cache_sparse_nudge): the nudge notes its
 * time, and writes the eventfd only while the thread does not watch the
 * nudges already (hooks/meshpace.c).  Once the nudges pause for
 * NUDGE_QUIET_MS a quiet pass meshes, classes that grew included; until
 * they pause (for at most MESH_HOLD_MAX_MS) the interval's passes and the
 * catch-ups do not mesh, nor, for a bounded time more, while the program
 * computes without allocating (hooks/meshpace.c, compute_hold).  While a
 * mesh pass finds more candidates than it had time for, a catch-up comes
 * MESH_AGAIN_MS after it, or after the rest the last catch-up asked for
 * (hooks/shrinkpass.c).  A decay (plus DECAY_SLACK_MS) after a pass that
 * gave memory back or left slots dirty comes a decay pass, and another a
 * decay later while one gives something back.  A pass walks the caches
 * round-robin and stops when its time budget (SLABDEFRAG_PASS_BUDGET_MS)
 * is spent; the next pass resumes there.
 *
 * Locks.  `lock` guards the thread's life (the variables below it); the
 * loop takes it only to leave (leave()), holds it across no pass, and
 * once the thread has set `leaving` it takes it no more, so
 * shrinker_stop and shrinker_park join it with `lock` held.  The passes
 * take the caches' locks in classes/cache.c's order with no lock of this
 * file held.  The
 * free path's nudge runs under a slab lock and takes no lock here: a
 * clock read and at most the eventfd write (wake_add).
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
#include "mallocfam.h"
#include "mesh.h"
#include "meshpace.h"
#include "options.h"
#include "os.h"
#include "pcpu.h"
#include "segment.h"
#include "shrinkpass.h"
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
 * closed: closing a PSI trigger waits for an RCU grace period (some
 * milliseconds), and a thread that closed them on its way out would keep a
 * park's bounded join or exit's join waiting that long.  The kernel closes
 * them with the process, and the process's exit waits that grace period
 * instead.  So the thread opens them only once the process has run
 * WATCH_DELAY_MS since the thread first started (watch_from): a short-lived
 * process (a shell script runs many) never pays it.  Memory pressure in a process's first second goes unwatched; the
 * interval and RSS limit do not depend on these files. */
static int psi_fd = -1, cg_fd = -1;
static size_t cg_high;                       /* our cgroup's memory.high (bytes), 0: none */
static int watch_open;                       /* psi_fd and cg_fd were opened (the thread's) */
static uint64_t watch_from;                  /* monotonic ns: open them from then on; 0: not set */
#define WATCH_DELAY_MS 1000
static int *control_slot;       /* the control socket's (core/fdguard.h) */
static void (*control_ready)(int fd);
struct shrinker_stats shrink_stats;           /* shrinkpass.h */

/* After a mesh pass that ran out of budget with candidates left, the
 * next mesh pass comes this many ms after it ended, so that a large heap
 * is meshed within seconds of its frees rather than tens of seconds.  In
 * an idle program these catch-up passes mesh only (shrink_mesh_catchup). */
#define MESH_AGAIN_MS 2
/* The free path's nudge (a burst of frees made many slabs sparse) is
 * acted on once no nudge came for this long. */
#define NUDGE_QUIET_MS 100
/* Until then, for at most this long, neither the interval's passes nor
 * catch-ups mesh: a slab meshed while the frees go on may empty and
 * unmesh, and each mesh interrupts the freeing threads (TLB flushes).
 * A program whose frees never pause is meshed once this has passed. */
#define MESH_HOLD_MAX_MS 5000
/* Then, while the program computes: hooks/meshpace.c, compute_hold. */
/* Released slots of meshing's arena wait dirty, and released mesh
 * aliases stale (core/segment.c), this long after the thread first sees
 * them (the first one wakes it) before it punches or maps them back, off
 * the program's threads (shrink_purge_released: all of them in an idle program,
 * only what the decay asks in a busy one): meanwhile a new slab may take
 * a dirty slot back, without a fault. */
#define DIRTY_PURGE_MS 20
/* A decay pass comes this long after the decay of what the last pass
 * left empty (struct shrink_loop's decay_due). */
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

int shrinker_stopping(void)
{
    return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

void shrinker_note_pass(size_t bytes)
{
    __atomic_fetch_add(&shrink_stats.bytes_released, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&shrink_stats.last_pass_ns, os_now_ns(), __ATOMIC_RELAXED);
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

/* core/segment.c's wake for its first dirty slot or stale alias: only
 * the eventfd write (it comes from the free path). */
static void dirty_wake(void)
{
    wake_add(WAKE_DIRTY);
}

/* ---------------------------------------------------------------- */
/* The loop                                                          */

/* What the loop keeps from one wake to the next (times in monotonic ns,
 * 0: none). */
struct shrink_loop {
    /* The interval is a deadline, not a poll timeout: wakes, nudges and
     * catch-up passes in between neither postpone it nor stand in for
     * it, so a program whose frees nudge more often than once an
     * interval still gets its interval pass. */
    uint64_t interval, next_interval;
    uint64_t nudged;                /* the last nudge not acted on */
    uint64_t held_from;             /* meshing first held back for frees
                                       that go on (MESH_HOLD_MAX_MS) */
    int held;                       /* ...and is held back now */
    int again;                      /* a catch-up is wanted (shrink_mesh_more) */
    struct compute_look look;       /* compute_hold */
    uint64_t last_mesh;             /* the end of the last pass or catch-up */
    uint64_t again_gap;             /* from last_mesh to the next catch-up */
    uint64_t dirty_seen;            /* first saw released slots or stale
                                       aliases not yet dealt with */
    /* What the passes left empty or dirty goes back once it has idled
     * for the decay: a decay pass then, and again a decay later while one
     * gives something back, rather than at the next interval. */
    uint64_t decay_wait, decay_due;
    size_t high;                    /* cg_high, once the files are open */
    int watch_wait;                 /* opens psi_fd and cg_fd at watch_from */
};

/* The descriptors one poll watches, and where each is in fds. */
struct shrink_poll {
    struct pollfd fds[4];
    int n, ipsi, icg, ictl, cfd;
};

#define MS (1000000ull)

static void loop_init(struct shrink_loop *l)
{
    *l = (struct shrink_loop){ 0 };
    l->interval = (uint64_t)sd_opt.shrink_interval_ms * MS;
    l->next_interval = os_now_ns() + l->interval;
    l->again_gap = MESH_AGAIN_MS * MS;
    l->decay_wait = ((uint64_t)sd_opt.decay_ms + DECAY_SLACK_MS) * MS;
    l->high = cg_high;
    l->watch_wait = !watch_open && sd_opt.psi;
}

/* The descriptors to poll, read each time: the program may have made
 * ours move (core/fdguard.h). */
static void poll_set(struct shrink_poll *p)
{
    int psi = __atomic_load_n(&psi_fd, __ATOMIC_ACQUIRE),
        cg = __atomic_load_n(&cg_fd, __ATOMIC_ACQUIRE);
    int *cs = __atomic_load_n(&control_slot, __ATOMIC_ACQUIRE);
    p->n = 0;
    p->ipsi = p->icg = p->ictl = -1;
    p->cfd = cs ? __atomic_load_n(cs, __ATOMIC_ACQUIRE) : -1;
    p->fds[p->n++] = (struct pollfd){ .fd = __atomic_load_n(&wake_fd, __ATOMIC_ACQUIRE),
                                      .events = POLLIN };
    if (psi >= 0) {
        p->ipsi = p->n;
        p->fds[p->n++] = (struct pollfd){ .fd = psi, .events = POLLPRI };
    }
    if (cg >= 0) {
        p->icg = p->n;
        p->fds[p->n++] = (struct pollfd){ .fd = cg, .events = POLLPRI };
    }
    if (p->cfd >= 0) {
        p->ictl = p->n;
        p->fds[p->n++] = (struct pollfd){ .fd = p->cfd, .events = POLLIN };
    }
}

/* When to wake next: the earliest of the interval's deadline and what
 * waits on a time.  While meshing has candidates left it comes back
 * soon: MESH_AGAIN_MS after the last mesh pass, or the rest a busy
 * program's catch-up asked for, until a pass makes no progress.  Sets
 * l->held and l->again for this round. */
static uint64_t next_wake(struct shrink_loop *l, uint64_t now)
{
    const uint64_t quiet = NUDGE_QUIET_MS * MS, look_gap = COMPUTE_LOOK_MS * MS;
    const uint64_t hold_max = MESH_HOLD_MAX_MS * MS;
    uint64_t wake_at = l->next_interval;
    /* held_from is set with nudged (after the poll) and cleared with it
     * (the quiet pass). */
    l->held = l->nudged && now - l->held_from < hold_max;
    if (l->held && l->held_from + hold_max < wake_at)
        wake_at = l->held_from + hold_max;
    l->again = shrink_mesh_more && sd_opt.shrink_interval_ms > MESH_AGAIN_MS && !l->held;
    if (l->again && l->last_mesh + l->again_gap < wake_at)
        wake_at = l->last_mesh + l->again_gap;
    if (l->nudged) {                    /* a mesh pass once the frees pause */
        const struct compute_look *k = &l->look;
        uint64_t at = !k->at ? l->nudged + quiet - look_gap         /* the first look */
                    : k->at + look_gap > l->nudged + quiet ? k->at + look_gap
                    : l->nudged + quiet;
        if (at < wake_at)
            wake_at = at;
    }
    if (!l->dirty_seen && (segment_dirty_bytes() || segment_stale_aliases()))
        l->dirty_seen = now;
    if (l->dirty_seen && l->dirty_seen + DIRTY_PURGE_MS * MS < wake_at)
        wake_at = l->dirty_seen + DIRTY_PURGE_MS * MS;
    if (l->watch_wait && watch_from < wake_at)
        wake_at = watch_from;
    if (l->decay_due && l->decay_due < wake_at)
        wake_at = l->decay_due;
    return wake_at;
}

/* What woke the thread (r: poll's result): PASS_URGENT for an explicit
 * wake or memory pressure, else PASS_NONE.  A nudge sets l->nudged; a
 * control connection is served here. */
static enum pass_kind woken(struct shrink_loop *l, struct shrink_poll *p, int r)
{
    enum pass_kind kind = PASS_NONE;
    if (r <= 0)
        return kind;
    if (p->fds[0].revents & POLLIN) {
        uint64_t v;
        int fd = fdguard_get(&wake_fd);
        if (fd < 0 || os_read(fd, &v, sizeof v) < 0)
            v = 0;                      /* spurious */
        fdguard_put();
        if (v & WAKE_EXPLICIT_MASK) {
            __atomic_fetch_add(&shrink_stats.wake_explicit, 1, __ATOMIC_RELAXED);
            kind = PASS_URGENT;
        } else if (v >= WAKE_NUDGE) {
            l->nudged = os_now_ns();    /* frees made slabs sparse: quiet_due */
            nudge_watch_set(1);
        }
    }
    if (p->ipsi >= 0 && p->fds[p->ipsi].revents & (POLLPRI | POLLERR)) {
        __atomic_fetch_add(&shrink_stats.wake_pressure, 1, __ATOMIC_RELAXED);
        kind = PASS_URGENT;
    }
    if (p->icg >= 0 && p->fds[p->icg].revents & (POLLPRI | POLLERR)) {
        char b[256];
        int fd = fdguard_get(&cg_fd);
        if (fd >= 0 && os_pread(fd, b, sizeof b, 0) < 0) { /* nothing */ }
        fdguard_put();
        __atomic_fetch_add(&shrink_stats.wake_pressure, 1, __ATOMIC_RELAXED);
        kind = PASS_URGENT;
    }
    if (p->ictl >= 0 && p->fds[p->ictl].revents & POLLIN && control_ready)
        control_ready(p->cfd);
    return kind;
}

/* The bookkeeping of every wake, whatever pass follows: the nudges and
 * the look at a computing program, the pressure files once their time
 * has come, and released slots that waited DIRTY_PURGE_MS.  Returns the
 * time after it. */
static uint64_t tend(struct shrink_loop *l)
{
    const uint64_t quiet = NUDGE_QUIET_MS * MS, look_gap = COMPUTE_LOOK_MS * MS;
    uint64_t now = os_now_ns();
    if (l->nudged)
        l->nudged = nudge_latest(l->nudged);
    if (l->look.at && l->look.at < l->nudged)
        l->look.at = 0;                 /* frees since the look: look again */
    if (l->nudged && !l->look.at && now >= l->nudged + quiet - look_gap)
        compute_look(&l->look, now);
    if (l->nudged && !l->held_from)     /* a nudge in this poll */
        l->held_from = now;
    l->held = l->nudged && now - l->held_from < MESH_HOLD_MAX_MS * MS;
    if (l->watch_wait && now >= watch_from) {
        /* Only this thread opens them, and one thread runs at a time
         * (a restarted one starts with them open). */
        fdguard_open_begin();
        fdguard_adopt(psi_open(), &psi_fd);
        fdguard_adopt(cgroup_events_open(&cg_high), &cg_fd);
        fdguard_open_end();
        l->high = cg_high;
        watch_open = 1;
        l->watch_wait = 0;
    }
    if (l->dirty_seen && now >= l->dirty_seen + DIRTY_PURGE_MS * MS) {
        l->dirty_seen = 0;
        shrink_purge_released();        /* stale aliases, then dirty slots */
        compute_rebase(&l->look);
        now = os_now_ns();
    }
    return now;
}

/* At the interval's deadline: PASS_URGENT over the RSS limit (or near the
 * cgroup's memory.high), PASS_INTERVAL when there is something to shrink,
 * else only a decay pass, here.  `kind`: what woke the thread, which
 * stands. */
static enum pass_kind interval_due(struct shrink_loop *l, uint64_t now, enum pass_kind kind)
{
    if (now < l->next_interval)
        return kind;
    l->next_interval = now + l->interval;
    size_t rss = os_rss_bytes();
    size_t limit = (size_t)sd_opt.rss_limit_mb << 20;
    if ((limit && rss > limit) || (l->high && rss > l->high - l->high / 10)) {
        __atomic_fetch_add(&shrink_stats.wake_rss, 1, __ATOMIC_RELAXED);
        return PASS_URGENT;
    }
    if (kind != PASS_NONE)
        return kind;
    if (shrink_any_ops_cache() || sd_opt.background == SD_BG_ON || mesh_enabled() ||
        tcache_reclaim_wanted()) {
        __atomic_fetch_add(&shrink_stats.wake_interval, 1, __ATOMIC_RELAXED);
        return PASS_INTERVAL;
    }
    shrink_decay_pass(1);
    compute_rebase(&l->look);
    return PASS_NONE;
}

/* Frees made many slabs sparse and have paused for NUDGE_QUIET_MS: a
 * mesh pass now, of the classes that grew too (not an interval later;
 * not while the frees go on, or the slabs meshed would empty and
 * unmesh; not while the program computes, compute_hold). */
static int quiet_due(struct shrink_loop *l, uint64_t now)
{
    return l->nudged && now - l->nudged >= NUDGE_QUIET_MS * MS &&
           !compute_hold(&l->look, now) && !nudge_unwatch(&l->nudged);
}

/* Which pass to run, `kind` being what the wake and the interval asked. */
static enum pass_kind choose_pass(struct shrink_loop *l, uint64_t now, enum pass_kind kind)
{
    if (kind != PASS_NONE)
        return kind;
    if (quiet_due(l, now))
        return PASS_QUIET;
    if (l->again && now >= l->last_mesh + l->again_gap)
        return PASS_CATCHUP;
    if (l->decay_due && now >= l->decay_due)
        return PASS_DECAY;
    return PASS_NONE;
}

/* Run it, and note what the next wakes depend on. */
static void run_pass(struct shrink_loop *l, enum pass_kind kind)
{
    size_t released = 0;
    uint64_t rest = MESH_AGAIN_MS * MS;
    int rebase = 0;
    switch (kind) {
    case PASS_NONE:
        return;
    case PASS_DECAY:
        l->decay_due = 0;
        if (shrink_decay_pass(shrink_program_idle()))
            l->decay_due = os_now_ns() + l->decay_wait;
        compute_rebase(&l->look);
        return;
    case PASS_QUIET:
        l->nudged = 0;
        l->look = (struct compute_look){ 0 };
        l->held_from = 0;
        released = shrink_pass(kind, 0);
        break;
    case PASS_INTERVAL:
    case PASS_URGENT:
        released = shrink_pass(kind, l->held);
        rebase = 1;
        break;
    case PASS_CATCHUP: {
        uint64_t asked = shrink_mesh_catchup(&released);
        if (asked > rest)
            rest = asked;
        break;
    }
    }
    l->last_mesh = os_now_ns();
    l->again_gap = rest;
    shrink_note_program();
    if (rebase)
        compute_rebase(&l->look);
    /* After a pass that gave memory back or left released slots dirty:
     * a decay pass a decay later, unless one is due. */
    if (!l->decay_due && (released || segment_dirty_bytes()))
        l->decay_due = l->last_mesh + l->decay_wait;
}

void *shrinker_main(void *arg)
{
    struct shrink_loop l;
    struct shrink_poll p;
    loop_init(&l);
    nudge_watch_set(0);                 /* a new thread: wake it */
    segment_dirty_purger(dirty_wake);
    for (;;) {
        if (l.nudged)                   /* the nudges it watched, not woken by */
            l.nudged = nudge_latest(l.nudged);
        poll_set(&p);
        uint64_t now = os_now_ns(), wake_at = next_wake(&l, now);
        int timeout = wake_at <= now ? 0 : (int)((wake_at - now + MS - 1) / MS);
        int r = poll(p.fds, (nfds_t)p.n, timeout);
        int failed = r < 0 && errno != EINTR;
        if ((failed || __atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) && leave(failed))
            break;
        enum pass_kind kind = woken(&l, &p, r);
        now = tend(&l);
        kind = interval_due(&l, now, kind);
        run_pass(&l, choose_pass(&l, now, kind));
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
 * single thread, so a program that locks a mutex per operation runs
 * slower beside an idle shrinker thread.  So the thread is armed instead
 * (shrinker_arm) and started when meshing has work: at the free path's
 * first nudge.  Not
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
 * a process has one thread. */
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
        shrink_stats.running = 1;
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
        shrink_stats.running = 0;
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
    shrink_stats.running = 0;
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
    *st = shrink_stats;
    st->running = __atomic_load_n(&running, __ATOMIC_ACQUIRE);
    st->armed = !st->running && __atomic_load_n(&armed, __ATOMIC_RELAXED);
    st->longest_vacate_ns = __atomic_load_n(&vacate_longest_ns, __ATOMIC_RELAXED);
    st->longest_pause_ns = __atomic_load_n(&vacate_longest_pause_ns, __ATOMIC_RELAXED);
}
