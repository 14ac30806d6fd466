/*
 * hooks/shrinker.c - the background shrinker.
 *
 * One thread, started lazily: when a cache with get/kick is created, when
 * sd_shrink_wake() is called, or at start-up when an option asks for it
 * (SLABDEFRAG_BACKGROUND, SLABDEFRAG_RSS_LIMIT_MB, SLABDEFRAG_CONTROL).
 * Never from inside malloc.  It sleeps in poll() on:
 *   - an eventfd (sd_shrink_wake, shutdown),
 *   - a PSI trigger on /proc/pressure/memory (150 ms of stall in 2 s),
 *   - the cgroup v2 memory.events file (a memory.high/max event),
 *   - the control socket (slabinfo), when enabled,
 * with SLABDEFRAG_SHRINK_INTERVAL_MS as the timeout.  On an interval it
 * shrinks only if RSS exceeds SLABDEFRAG_RSS_LIMIT_MB (or the cgroup's
 * memory.high) or some cache has get/kick or meshing is on; on pressure or
 * a wake, always.  With SLABDEFRAG_MESH=1 each pass ends with a mesh pass
 * (classes/mesh.c) of its own budget, and while that one finds more
 * candidates than it had time for, the next pass comes after 20 ms.
 * A pass walks the caches round-robin and stops when its time budget
 * (SLABDEFRAG_PASS_BUDGET_MS) is spent; the next pass resumes there.
 */
#define _GNU_SOURCE
#include "shrinker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cache.h"
#include "fmt.h"
#include "large.h"
#include "mesh.h"
#include "options.h"
#include "os.h"
#include "tcache.h"
#include "vacate.h"

static sd_mutex lock = SD_MUTEX_INIT;       /* start/stop */
static pthread_t thread;
static int running, stopping;
static int wake_fd = -1;
static int control_fd = -1;
static void (*control_ready)(int fd);
static unsigned cursor;                      /* next cache to shrink */
static struct shrinker_stats stats;
static int mesh_more;                        /* last mesh pass was cut short */

static void stat_max(uint64_t *p, uint64_t v)
{
    uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, 0,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

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

/* One bounded pass; returns the bytes released.  `urgent` (memory
 * pressure, the RSS limit, sd_shrink_wake) releases every retained empty
 * slab; a pass of the interval only those idle past the decay: a program
 * that frees and allocates again would otherwise fault its slabs back in
 * every second (python's churn under meshing released and refaulted
 * 95 MB in 19 passes). */
static size_t pass(int urgent)
{
    uint64_t t0 = os_now_ns();
    uint64_t deadline = t0 + (uint64_t)sd_opt.pass_budget_ms * 1000000ull;
    size_t bytes = large_trim();
    for (unsigned n = 0; n < SD_MAX_CACHES; n++) {
        unsigned i = (cursor + n) % SD_MAX_CACHES;
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (!c || c->dead)
            continue;
        bytes += vacate_shrink_cache(c, deadline, !urgent);
        if (os_now_ns() > deadline) {
            cursor = i + 1;
            break;
        }
    }
    /* kick() callbacks allocated through this thread: give its active
     * slabs back so they can fill up or be vacated next time. */
    tcache_flush(&sd_tc);
    /* Meshing, with a budget of its own: a pass holds one slab write-
     * protected at a time, for the copy of one slab. */
    if (mesh_enabled())
        bytes += mesh_pass(os_now_ns() + (uint64_t)sd_opt.pass_budget_ms * 1000000ull,
                           &mesh_more, urgent);
    uint64_t dt = os_now_ns() - t0;
    __atomic_fetch_add(&stats.passes, 1, __ATOMIC_RELAXED);
    stat_max(&stats.longest_pass_ns, dt);
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
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
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
        ssize_t m = read(fd, v, sizeof v - 1);
        close(fd);
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
        close(fd);
        return -1;
    }
    return fd;
}

static void *shrinker_main(void *arg)
{
    struct pollfd fds[4];
    size_t high = 0;
    int psi = sd_opt.psi ? psi_open() : -1;
    int cg = sd_opt.psi ? cgroup_events_open(&high) : -1;
    for (;;) {
        int n = 0;
        fds[n++] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
        int ipsi = -1, icg = -1, ictl = -1;
        if (psi >= 0) { ipsi = n; fds[n++] = (struct pollfd){ .fd = psi, .events = POLLPRI }; }
        if (cg >= 0)  { icg = n;  fds[n++] = (struct pollfd){ .fd = cg, .events = POLLPRI }; }
        int cfd = __atomic_load_n(&control_fd, __ATOMIC_ACQUIRE);
        if (cfd >= 0) { ictl = n; fds[n++] = (struct pollfd){ .fd = cfd, .events = POLLIN }; }
        /* While meshing has candidates left, come back soon (each pass
         * stays bounded by its budget). */
        int timeout = mesh_more && sd_opt.shrink_interval_ms > 20
                          ? 20 : (int)sd_opt.shrink_interval_ms;
        int r = poll(fds, (nfds_t)n, timeout);
        if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
            break;
        if (r < 0 && errno != EINTR)
            break;
        int do_pass = 0;
        if (r > 0 && fds[0].revents & POLLIN) {
            uint64_t v;
            if (read(wake_fd, &v, sizeof v) < 0) { /* spurious */ }
            __atomic_fetch_add(&stats.wake_explicit, 1, __ATOMIC_RELAXED);
            do_pass = 2;          /* urgent */
        }
        if (r > 0 && ipsi >= 0 && fds[ipsi].revents & (POLLPRI | POLLERR)) {
            __atomic_fetch_add(&stats.wake_pressure, 1, __ATOMIC_RELAXED);
            do_pass = 2;          /* urgent */
        }
        if (r > 0 && icg >= 0 && fds[icg].revents & (POLLPRI | POLLERR)) {
            char b[256];
            lseek(cg, 0, SEEK_SET);
            if (read(cg, b, sizeof b) < 0) { /* nothing */ }
            __atomic_fetch_add(&stats.wake_pressure, 1, __ATOMIC_RELAXED);
            do_pass = 2;          /* urgent */
        }
        if (r > 0 && ictl >= 0 && fds[ictl].revents & POLLIN && control_ready)
            control_ready(cfd);
        if (r == 0) {
            size_t rss = os_rss_bytes();
            size_t limit = (size_t)sd_opt.rss_limit_mb << 20;
            if ((limit && rss > limit) || (high && rss > high - high / 10)) {
                __atomic_fetch_add(&stats.wake_rss, 1, __ATOMIC_RELAXED);
                do_pass = 2;          /* urgent */
            } else if (any_ops_cache() || sd_opt.background || mesh_enabled()) {
                __atomic_fetch_add(&stats.wake_interval, 1, __ATOMIC_RELAXED);
                do_pass = 1;
            }
        }
        if (do_pass)
            pass(do_pass == 2);
    }
    if (psi >= 0) close(psi);
    if (cg >= 0) close(cg);
    return NULL;
}

void shrinker_start(void)
{
    if (__atomic_load_n(&running, __ATOMIC_ACQUIRE))
        return;
    sd_mutex_lock(&lock);
    if (!running) {
        if (wake_fd < 0)
            wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        stopping = 0;
        if (wake_fd >= 0 && pthread_create(&thread, NULL, shrinker_main, NULL) == 0) {
            __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
            stats.running = 1;
        }
    }
    sd_mutex_unlock(&lock);
}

int shrinker_wake(void)
{
    shrinker_start();
    if (!__atomic_load_n(&running, __ATOMIC_ACQUIRE))
        return -EAGAIN;
    uint64_t one = 1;
    return write(wake_fd, &one, sizeof one) == sizeof one ? 0 : -errno;
}

void shrinker_stop(void)
{
    sd_mutex_lock(&lock);
    if (running && !pthread_equal(thread, pthread_self())) {
        __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(wake_fd, &one, sizeof one) < 0) { /* it will time out */ }
        pthread_join(thread, NULL);
        running = 0;
        stats.running = 0;
    }
    sd_mutex_unlock(&lock);
}

void shrinker_after_fork_child(void)
{
    lock = (sd_mutex)SD_MUTEX_INIT;
    int was = running;
    running = 0;
    control_fd = -1;                /* the parent's; the child opens its own */
    control_ready = NULL;
    stats.running = 0;
    if (was)
        shrinker_start();
}

void shrinker_set_control(int fd, void (*on_ready)(int fd))
{
    control_ready = on_ready;
    __atomic_store_n(&control_fd, fd, __ATOMIC_RELEASE);
    if (fd >= 0 && __atomic_load_n(&running, __ATOMIC_ACQUIRE)) {
        uint64_t one = 1;           /* re-poll with the new fd */
        if (write(wake_fd, &one, sizeof one) < 0) { /* ignore */ }
    }
}

void shrinker_get_stats(struct shrinker_stats *st)
{
    *st = stats;
    st->running = __atomic_load_n(&running, __ATOMIC_ACQUIRE);
    st->longest_vacate_ns = __atomic_load_n(&vacate_longest_ns, __ATOMIC_RELAXED);
    st->longest_pause_ns = __atomic_load_n(&vacate_longest_pause_ns, __ATOMIC_RELAXED);
}
