/*
 * preload/control.c - the control socket (SLABDEFRAG_CONTROL=1) that
 * tools/slabinfo talks to; protocol in control.h.
 *
 * Why an abstract socket: nothing on the file system to create, protect or
 * remove (it disappears with the process, even one killed by SIGKILL), no
 * race on a shared /tmp, and a fork child simply binds its own pid.  Its
 * limit, visibility within one network namespace, is the right scope for
 * an inspector.  An abstract socket has no file permissions, so every
 * connection is checked with SO_PEERCRED.
 *
 * Serving runs on the shrinker thread, never inside malloc: it may
 * allocate, but writes through fds only (no stdio).  A client cannot hold
 * the thread for long: the request must arrive within SD_CONTROL_READ_MS,
 * each blocked write gives up after SD_CONTROL_WRITE_MS (and the printer
 * stops at the first failed write), and SIGPIPE is blocked on the thread
 * so a client that hangs up cannot kill the process.
 */
#define _GNU_SOURCE
#include "control.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "fdguard.h"
#include "fmt.h"
#include "options.h"
#include "os.h"
#include "prof.h"
#include "shrinker.h"
#include "sigchain.h"
#include "slabdefrag.h"
#include "stats.h"
#include "validate.h"

static int listen_fd = -1;

/* ---------------------------------------------------------------- */
/* One request                                                       */

static void reply_error(int fd, const char *msg)
{
    sd_dprintf(fd, "error: %s\n", msg);
}

/* Read one line into buf (NUL terminated, newline stripped).  Returns its
 * length, or -1 with *why set. */
static int read_request(int fd, char *buf, size_t size, const char **why)
{
    size_t n = 0;
    uint64_t deadline = os_now_ns() + SD_CONTROL_READ_MS * 1000000ull;
    for (;;) {
        uint64_t now = os_now_ns();
        if (now >= deadline) {
            *why = "timed out waiting for the request";
            return -1;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            *why = "timed out waiting for the request";
            return -1;
        }
        ssize_t got = os_read(fd, buf + n, size - 1 - n);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0)
            break;                      /* EOF: what we have is the request */
        n += (size_t)got;
        char *nl = memchr(buf, '\n', n);
        if (nl) {
            n = (size_t)(nl - buf);
            break;
        }
        if (n == size - 1) {
            *why = "request too long (at most 255 bytes and a newline)";
            return -1;
        }
    }
    buf[n] = 0;
    if (n && buf[n - 1] == '\r')
        buf[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e) {
            *why = "malformed request (not a line of printable ASCII)";
            return -1;
        }
    if (!n) {
        *why = "empty request";
        return -1;
    }
    return (int)n;
}

/* Split buf into at most max words; returns their number, -1 if more. */
static int split(char *buf, char **w, int max)
{
    int n = 0;
    for (char *p = buf; *p;) {
        while (*p == ' ' || *p == '\t')
            *p++ = 0;
        if (!*p)
            break;
        if (n == max)
            return -1;
        w[n++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    return n;
}

static void do_stats(int fd, char **w, int n)
{
    unsigned flags = 0;
    enum stats_sort sort = STATS_SORT_NONE;
    for (int i = 1; i < n; i++) {
        if (!strcmp(w[i], "json"))
            flags |= STATS_JSON;
        else if (!strcmp(w[i], "totals"))
            flags |= STATS_TOTALS;
        else if (!strcmp(w[i], "sort=size"))
            sort = STATS_SORT_SIZE;
        else if (!strcmp(w[i], "sort=loss"))
            sort = STATS_SORT_LOSS;
        else if (!strcmp(w[i], "sort=partial"))
            sort = STATS_SORT_PARTIAL;
        else {
            reply_error(fd, "stats: unknown argument (json, totals, "
                            "sort=size|loss|partial)");
            return;
        }
    }
    stats_print(fd, flags, sort);
}

static void do_report(int fd, char **w, int n)
{
    unsigned flags = 0;
    if (n < 2 || n > 3 || (n == 3 && strcmp(w[2], "json"))) {
        reply_error(fd, "usage: report <cache> [json]");
        return;
    }
    if (n == 3)
        flags |= STATS_JSON;
    struct sd_cache *c = (struct sd_cache *)sd_cache_find(w[1]);
    if (!c) {
        sd_dprintf(fd, "error: no cache named %s\n", w[1]);
        return;
    }
    stats_print_cache(fd, c, flags);
}

static void do_shrink(int fd, char **w, int n)
{
    if (n > 2) {
        reply_error(fd, "usage: shrink [<cache>]");
        return;
    }
    if (n == 1) {
        size_t bytes = sd_shrink_all();
        sd_dprintf(fd, "shrink: %zu bytes released\n", bytes);
        return;
    }
    struct sd_cache *c = (struct sd_cache *)sd_cache_find(w[1]);
    if (!c) {
        sd_dprintf(fd, "error: no cache named %s\n", w[1]);
        return;
    }
    unsigned long before = __atomic_load_n(&c->stat[SD_STAT_BYTES_RELEASED],
                                           __ATOMIC_RELAXED);
    int err = sd_cache_shrink(c);
    if (err) {
        sd_dprintf(fd, "error: shrinking %s failed (%d)\n", c->name, err);
        return;
    }
    unsigned long after = __atomic_load_n(&c->stat[SD_STAT_BYTES_RELEASED],
                                          __ATOMIC_RELAXED);
    sd_dprintf(fd, "shrink %s: %lu bytes released\n", c->name, after - before);
}

/* A count or a byte interval: digits only, within [min, max]. */
static int parse_count(const char *w, unsigned long min, unsigned long max,
                       unsigned long *out)
{
    unsigned long v = 0;
    if (!*w)
        return -1;
    for (; *w; w++) {
        if (*w < '0' || *w > '9' || v > max / 10)
            return -1;
        v = v * 10 + (unsigned long)(*w - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static void do_sites(int fd, char **w, int n, enum prof_sort sort)
{
    unsigned long max = 20;
    if (n > 2 || (n == 2 && parse_count(w[1], 1, 100000, &max))) {
        sd_dprintf(fd, "error: usage: %s [<rows, 1 to 100000>]\n", w[0]);
        return;
    }
    prof_print_sites(fd, sort, (unsigned)max);
}

static void do_prof(int fd, char **w, int n)
{
    unsigned long interval = 0;
    if (n == 1) {
        prof_print_status(fd);
    } else if (!strcmp(w[1], "on") && n <= 3) {
        if (n == 3 && parse_count(w[2], 64, 1ul << 30, &interval)) {
            reply_error(fd, "prof on: the interval is a number of bytes from 64 to 1073741824");
            return;
        }
        if (prof_start(interval)) {
            reply_error(fd, "prof on: cannot map the profiler's tables");
            return;
        }
        prof_print_status(fd);
    } else if (!strcmp(w[1], "off") && n == 2) {
        prof_stop();
        prof_print_status(fd);
    } else if (!strcmp(w[1], "heap") && n == 2) {
        prof_write_heap(fd);
    } else if (!strcmp(w[1], "folded") && n == 3 &&
               (!strcmp(w[2], "live") || !strcmp(w[2], "pinned"))) {
        int live = !strcmp(w[2], "live");
        if (!prof_write_folded(fd, live ? PROF_SORT_LIVE : PROF_SORT_PINNED))
            sd_dprintf(fd, "error: prof folded: no %s bytes sampled (profiling off, "
                       "or nothing sampled yet)\n", live ? "live" : "pinned");
    } else {
        reply_error(fd, "usage: prof [on [<bytes>] | off | heap | folded live|pinned]");
    }
}

static void serve(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
        (cr.uid != geteuid() && cr.uid != 0)) {
        reply_error(fd, "permission denied: only the process's own user may "
                        "inspect it");
        return;
    }
    struct timeval tv = { SD_CONTROL_WRITE_MS / 1000, (SD_CONTROL_WRITE_MS % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    tv = (struct timeval){ SD_CONTROL_READ_MS / 1000, (SD_CONTROL_READ_MS % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

    char buf[SD_CONTROL_MAX_REQUEST + 1];
    const char *why = NULL;
    if (read_request(fd, buf, sizeof buf, &why) < 0) {
        reply_error(fd, why);
        return;
    }
    char *w[8];
    int n = split(buf, w, 8);
    if (n <= 0) {
        reply_error(fd, "malformed request (too many words)");
        return;
    }
    if (!strcmp(w[0], "ping") && n == 1)
        sd_dprintf(fd, "slabdefrag %s pid %d\n", SLABDEFRAG_VERSION, (int)getpid());
    else if (!strcmp(w[0], "stats"))
        do_stats(fd, w, n);
    else if (!strcmp(w[0], "report"))
        do_report(fd, w, n);
    else if (!strcmp(w[0], "shrink"))
        do_shrink(fd, w, n);
    else if (!strcmp(w[0], "validate") && n == 1)
        validate_all(fd, NULL);
    else if (!strcmp(w[0], "prof"))
        do_prof(fd, w, n);
    else if (!strcmp(w[0], "sites"))
        do_sites(fd, w, n, PROF_SORT_LIVE);
    else if (!strcmp(w[0], "pinned"))
        do_sites(fd, w, n, PROF_SORT_PINNED);
    else
        reply_error(fd, "unknown request (ping, stats, report, shrink, validate, "
                        "prof, sites, pinned)");
}

/* On the shrinker thread, when the listening socket is readable. */
static void control_ready(int lfd)
{
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigchain_sigmask(SIG_BLOCK, &pipe, NULL);
    (void)lfd;                          /* read again: it may have moved */
    for (int k = 0; k < 8; k++) {       /* a few per wake-up, then shrink */
        static int conn = -1;           /* guarded, core/fdguard.h */
        fdguard_open_begin();
        int l = fdguard_get(&listen_fd);
        fdguard_adopt(l >= 0 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1, &conn);
        fdguard_put();
        fdguard_open_end();
        if (conn < 0)
            break;
        serve(fdguard_get(&conn));
        fdguard_put();
        fdguard_close(&conn);
    }
    /* A client that hung up left a SIGPIPE pending on this thread. */
    struct timespec zero = { 0, 0 };
    while (sigtimedwait(&pipe, NULL, &zero) == SIGPIPE)
        ;
}

/* ---------------------------------------------------------------- */
/* The listening socket                                              */

static void control_open(void)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t n = sd_fmt(a.sun_path + 1, sizeof a.sun_path - 1, SD_CONTROL_NAME_FMT,
                      (int)getpid());
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    fdguard_open_begin();
    int fd = fdguard_adopt(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
                           &listen_fd);
    fdguard_open_end();
    if (fd < 0) {
        sd_warn("SLABDEFRAG_CONTROL=1: cannot create the control socket (errno %d)",
                errno);
        return;
    }
    if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, 8)) {
        sd_warn("SLABDEFRAG_CONTROL=1: cannot listen on @%s (errno %d)",
                a.sun_path + 1, errno);
        fdguard_close(&listen_fd);
        return;
    }
    shrinker_start();
    shrinker_set_control(&listen_fd, control_ready);
}

void control_init(void)
{
    if (sd_opt.control && listen_fd < 0)
        control_open();
}

void control_shutdown(void)
{
    if (listen_fd < 0)
        return;
    shrinker_set_control(NULL, NULL);
    fdguard_close(&listen_fd);          /* the name goes with it */
}

void control_after_fork_child(void)
{
    /* The shrinker forgot the parent's socket (shrinker_after_fork_child);
     * closing our copy leaves the parent's listener untouched. */
    fdguard_close(&listen_fd);
    if (sd_opt.control)
        control_open();
}
