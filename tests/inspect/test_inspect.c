/*
 * tests/inspect/test_inspect.c - options, statistics, the slabinfo CLI and
 * SLABDEFRAG_DEBUG, tested from the outside: child processes run with
 * environment variables, their stderr is checked, and slabinfo talks to a
 * live child (inspect_child.c).  Paths come from meson: INSPECT_CHILD,
 * SLABINFO.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slabdefrag.h>

#include "../procstatus.h"

extern char **environ;

/* ------------------------------------------------------------------ */
/* Running programs                                                    */

struct run {
    int  status;
    char out[65536];
    char err[65536];
};

/* The environment without SLABDEFRAG_* or LD_PRELOAD, plus `add`. */
static char **make_env(const char *const *add)
{
    static char *env[512];
    int n = 0;
    for (char **e = environ; *e && n < 400; e++)
        if (strncmp(*e, "SLABDEFRAG_", 11) && strncmp(*e, "LD_PRELOAD=", 11))
            env[n++] = *e;
    for (; add && *add && n < 510; add++)
        env[n++] = (char *)*add;
    env[n] = NULL;
    return env;
}

static void slurp(int fd, char *buf, size_t size)
{
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd, buf + n, size - 1 - n)) > 0 && n < size - 1)
        n += (size_t)r;
    buf[n] = 0;
}

/* Run argv with env additions, stdin from /dev/null; wait for it. */
static void run(struct run *r, const char *const *argv, const char *const *add)
{
    int o[2], e[2];
    cr_assert(pipe(o) == 0 && pipe(e) == 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        dup2(o[1], 1);
        dup2(e[1], 2);
        close(o[0]);
        close(e[0]);
        execve(argv[0], (char **)argv, make_env(add));
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    /* Small outputs: read stdout then stderr (stderr fits a pipe). */
    slurp(o[0], r->out, sizeof r->out);
    slurp(e[0], r->err, sizeof r->err);
    close(o[0]);
    close(e[0]);
    waitpid(pid, &r->status, 0);
}

static int exit_code(const struct run *r)
{
    return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A live inspect_child "serve", talking over pipes. */
struct child {
    pid_t pid;
    FILE *in, *out;
};

static void child_start(struct child *c, const char *const *add)
{
    int i[2], o[2];
    cr_assert(pipe(i) == 0 && pipe(o) == 0);
    c->pid = fork();
    cr_assert(c->pid >= 0);
    if (c->pid == 0) {
        dup2(i[0], 0);
        dup2(o[1], 1);
        close_range(3, ~0U, CLOSE_RANGE_UNSHARE);  /* a small table: descriptor_table_grown_at_start */
        const char *argv[] = { INSPECT_CHILD, "serve", NULL };
        execve(argv[0], (char **)argv, make_env(add));
        _exit(127);
    }
    close(i[0]);
    close(o[1]);
    c->in = fdopen(i[1], "w");
    c->out = fdopen(o[0], "r");
    char line[128];
    cr_assert(fgets(line, sizeof line, c->out), "child did not start");
    cr_assert(!strncmp(line, "ready ", 6), "child said: %s", line);
}

/* Send a command; returns the first line of the answer in line. */
static void child_cmd(struct child *c, const char *cmd, char *line, size_t size)
{
    fprintf(c->in, "%s\n", cmd);
    fflush(c->in);
    cr_assert(fgets(line, (int)size, c->out), "no answer to %s", cmd);
}

static void child_stop(struct child *c)
{
    fprintf(c->in, "exit\n");
    fclose(c->in);
    fclose(c->out);
    int st;
    waitpid(c->pid, &st, 0);
}

static void slabinfo(struct run *r, pid_t pid, const char *a1, const char *a2)
{
    char p[32];
    snprintf(p, sizeof p, "%d", (int)pid);
    const char *argv[] = { SLABINFO, "-p", p, a1, a2, NULL };
    run(r, argv, NULL);
}

static const char *const control_env[] = { "SLABDEFRAG_CONTROL=1", NULL };

static long rss_kb(pid_t pid)
{
    return proc_status_field(pid, "VmRSS");
}

/* Raw request to the control socket; reply into buf. */
/* A socket connected to process pid's control socket; -1 (errno set) if
 * it does not listen. */
static int control_connect(pid_t pid)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "slabdefrag.%d", (int)pid);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    if (connect(fd, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0)
        return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

static void raw_request(pid_t pid, const void *req, size_t len, char *buf, size_t size)
{
    int fd = control_connect(pid);
    cr_assert(fd >= 0, "connect: %s", strerror(errno));
    if (len)
        send(fd, req, len, MSG_NOSIGNAL);
    slurp(fd, buf, size);
    close(fd);
}

/* ------------------------------------------------------------------ */
/* Options                                                             */

Test(options, bad_values_one_line_each)
{
    struct run r;
    const char *argv[] = { INSPECT_CHILD, "noop", NULL };
    const char *env[] = { "SLABDEFRAG_DECAY_MS=abc", "SLABDEFRAG_PSI=maybe",
                          "SLABDEFRAG_STATS=yaml", "SLABDEFRAG_DEBUG=FQ",
                          "SLABDEFRAG_NO_SUCH=1", "SLABDEFRAG_RETAIN_EMPTY=99999",
                          "SLABDEFRAG_MESH_SHUFFLE=sideways", NULL };
    run(&r, argv, env);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(strstr(r.out, "done"));
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_DECAY_MS=abc: expected a whole "
                            "number from 0 to 600000; using 1000\n"), "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_PSI=maybe: expected 0 or 1"), "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_STATS=yaml: expected 0, 1 or json"),
              "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_DEBUG=FQ: expected letters from FZPUT"),
              "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_NO_SUCH: unknown option (see "
                            "docs/options.md)"), "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_RETAIN_EMPTY=99999: expected a whole "
                            "number from 0 to 1024"), "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: SLABDEFRAG_MESH_SHUFFLE=sideways: expected address, "
                            "adapt, permute or rotate (or 0 to 3); using adapt"), "%s", r.err);
    cr_assert_eq(count_lines(r.err), 7, "one line per bad variable:\n%s", r.err);
}

Test(options, good_values_are_silent)
{
    struct run r;
    const char *argv[] = { INSPECT_CHILD, "noop", NULL };
    const char *env[] = { "SLABDEFRAG_DECAY_MS=0", "SLABDEFRAG_PSI=off",
                          "SLABDEFRAG_STATS=0", "SLABDEFRAG_DEBUG=FZ,malloc-64",
                          "SLABDEFRAG_MIN_PARTIAL=5", "SLABDEFRAG_CONTROL=1",
                          "SLABDEFRAG_MESH_SHUFFLE=rotate", NULL };
    run(&r, argv, env);
    cr_assert_eq(exit_code(&r), 0);
    cr_assert_str_empty(r.err, "unexpected: %s", r.err);
}

Test(options, stats_text_at_exit)
{
    struct run r;
    const char *argv[] = { INSPECT_CHILD, "noop", NULL };
    const char *env[] = { "SLABDEFRAG_STATS=1", NULL };
    run(&r, argv, env);
    cr_assert_eq(exit_code(&r), 0);
    cr_assert(!strncmp(r.err, "Name ", 5), "%s", r.err);
    cr_assert(strstr(r.err, "\nTotal: "), "%s", r.err);
    cr_assert(strstr(r.err, "\nShrinker: "), "%s", r.err);
}

Test(options, stats_json_at_exit)
{
    struct run r;
    const char *argv[] = { INSPECT_CHILD, "noop", NULL };
    const char *env[] = { "SLABDEFRAG_STATS=json", NULL };
    run(&r, argv, env);
    cr_assert_eq(exit_code(&r), 0);
    cr_assert(!strncmp(r.err, "{\"pid\":", 7), "%s", r.err);
    cr_assert(strstr(r.err, "\"caches\":["), "%s", r.err);
    cr_assert(strstr(r.err, "\"counters\":{\"alloc_refill\":"), "%s", r.err);
    cr_assert(strstr(r.err, "\"totals\":{"), "%s", r.err);
    cr_assert(strstr(r.err, "}\n") == r.err + strlen(r.err) - 2, "one object:\n%s", r.err);
    cr_assert_eq(count_lines(r.err), 1);
}

/* ------------------------------------------------------------------ */
/* An idle threaded program gives memory back (SLABDEFRAG_BACKGROUND)  */

static void idle_rss(const char *const *env, long *before, long *after)
{
    struct run r;
    const char *argv[] = { INSPECT_CHILD, "idle", NULL };
    run(&r, argv, env);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    const char *b = strstr(r.out, "before "), *a = strstr(r.out, "after ");
    cr_assert(b && a, "%s", r.out);
    *before = strtol(b + 7, NULL, 10);
    *after = strtol(a + 6, NULL, 10);
}

/* The default (auto) starts the shrinker with the program's second
 * thread, and its interval passes drain the idle per-CPU caches, purge
 * the free pages of sparse 64 B slabs (3 of their 4 pages) and the freed
 * 4 MiB block's extent: about 16 MiB of the child's RSS goes back while
 * it makes no allocator call.  With SLABDEFRAG_BACKGROUND=0 nothing does. */
Test(background, idle_threaded_program_gives_back, .timeout = 60)
{
    static const char *const fast[] = { "SLABDEFRAG_SHRINK_INTERVAL_MS=200",
                                        "SLABDEFRAG_DECAY_MS=200", NULL };
    static const char *const off[] = { "SLABDEFRAG_SHRINK_INTERVAL_MS=200",
                                       "SLABDEFRAG_DECAY_MS=200",
                                       "SLABDEFRAG_BACKGROUND=0", NULL };
    long before, after;
    idle_rss(fast, &before, &after);
    cr_assert(before > 16384, "before %ld kB", before);
    cr_assert(after <= before - 8192, "auto: RSS %ld kB -> %ld kB while idle", before, after);
    idle_rss(off, &before, &after);
    cr_assert(after > before - 2048, "BACKGROUND=0: RSS %ld kB -> %ld kB while idle",
              before, after);
}

/* 1 when process `pid` holds a file open whose link reads `target`. */
static int has_open(pid_t pid, const char *target)
{
    char dir[64], path[128], link[256];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(path, sizeof path, "%s/%d", dir, fd);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (!strcmp(link, target))
            return 1;
    }
    return 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The interval passes the shrinker of process `pid` has made (slabinfo
 * --json: "wake_interval" of its "shrinker" object); -1 if not there. */
static long interval_passes(pid_t pid)
{
    struct run r;
    slabinfo(&r, pid, "--json", NULL);
    const char *v = strstr(r.out, "\"wake_interval\":");
    return exit_code(&r) == 0 && v ? strtol(v + 16, NULL, 10) : -1;
}

/* The shrinker's PSI trigger is opened a second after its thread starts,
 * not at once: the kernel's close of a trigger waits an RCU grace period,
 * which every short-lived process paid at exit (hooks/shrinker.c).  The
 * serving child runs with SLABDEFRAG_BACKGROUND=1: the thread from its start.
 * The trigger is looked for every 50 ms (up to 30 s); when first seen, a
 * second at least has passed since the child was started, however fast
 * or loaded the machine.  With SLABDEFRAG_PSI=0, absence is
 * checked once the thread has made 6 passes of its 200 ms interval: past
 * its first second, where it would have opened the trigger. */
Test(background, pressure_watch_opens_after_a_second, .timeout = 90)
{
    int fd = open("/proc/pressure/memory", O_RDWR | O_NONBLOCK);
    if (fd < 0)
        cr_skip_test("no writable /proc/pressure/memory (%s)", strerror(errno));
    static const char trig[] = "some 150000 2000000";
    int ok = write(fd, trig, sizeof trig) > 0;
    close(fd);
    if (!ok)
        cr_skip_test("PSI triggers refused here (%s)", strerror(errno));

    static const char *const on[] = { "SLABDEFRAG_BACKGROUND=1", NULL };
    struct child c;
    double t0 = mono_s();
    child_start(&c, on);
    int open_ = has_open(c.pid, "/proc/pressure/memory");
    for (int i = 0; i < 600 && !open_; i++) {
        usleep(50000);
        open_ = has_open(c.pid, "/proc/pressure/memory");
    }
    double seen = mono_s() - t0;
    child_stop(&c);
    cr_assert(open_, "no PSI trigger open 30 s after the start");
    cr_expect(seen >= 1.0, "the PSI trigger was open %.2f s after the start", seen);

    static const char *const off[] = { "SLABDEFRAG_BACKGROUND=1", "SLABDEFRAG_PSI=0",
                                       "SLABDEFRAG_CONTROL=1",
                                       "SLABDEFRAG_SHRINK_INTERVAL_MS=200", NULL };
    child_start(&c, off);
    long passes = interval_passes(c.pid);
    for (int i = 0; i < 300 && passes < 6; i++) {
        usleep(100000);
        passes = interval_passes(c.pid);
    }
    int opened = has_open(c.pid, "/proc/pressure/memory");
    child_stop(&c);
    cr_assert(passes >= 6, "the shrinker made %ld interval passes in 30 s", passes);
    cr_assert(!opened, "SLABDEFRAG_PSI=0 opened the PSI trigger");
}

#define OS_FD_MIN_TEST 512             /* core/os.h's OS_FD_MIN */

/* The descriptor table is grown past 512 by the constructor, while the
 * program has one thread (core/os.h, os_fd_reserve): grown later, in a
 * threaded program, it waits an RCU grace period.  The serving child has
 * no shrinker thread and no descriptor of ours, so only the constructor
 * can have grown its table (FDSize in /proc/PID/status: 64 otherwise). */
Test(background, descriptor_table_grown_at_start, .timeout = 60)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur <= OS_FD_MIN_TEST)
        cr_skip_test("RLIMIT_NOFILE %lu: no descriptors from 512 up", (unsigned long)rl.rlim_cur);
    struct child c;
    child_start(&c, NULL);
    long size = proc_status_field(c.pid, "FDSize");
    child_stop(&c);
    cr_assert(size >= 0, "no FDSize in /proc/%d/status", (int)c.pid);
    cr_assert(size > OS_FD_MIN_TEST, "FDSize %ld: the table was not grown at start-up", size);
}

/* ------------------------------------------------------------------ */
/* Statistics: exact after a quiescent point                          */

Test(stats, typed_cache_exact)
{
    sd_cache *c = sd_cache_create("stats_exact", 100, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert(c);
    enum { N = 1000 };
    static void *v[N];
    for (int i = 0; i < N; i++)
        cr_assert(v[i] = sd_cache_alloc(c));
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(c, &in), 0);
    cr_assert_eq(in.objects_inuse, N);
    cr_assert_eq(in.object_size, 100);
    size_t slabs = (N + in.objects_per_slab - 1) / in.objects_per_slab;
    cr_assert_eq(in.slabs, slabs, "%zu slabs, expected %zu", in.slabs, slabs);
    for (int i = 0; i < N; i += 4)
        sd_cache_free(c, v[i]);
    cr_assert_eq(sd_cache_get_info(c, &in), 0);
    cr_assert_eq(in.objects_inuse, N - N / 4);

    /* The printed table says the same. */
    char path[] = "/tmp/sd-stats-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    unlink(path);
    cr_assert_eq(sd_stats_print(fd), 0);
    static char buf[65536];
    lseek(fd, 0, SEEK_SET);
    slurp(fd, buf, sizeof buf);
    close(fd);
    char *line = strstr(buf, "\nstats_exact ");
    cr_assert(line, "%s", buf);
    char name[64], sps[64];
    unsigned long objs, osize;
    cr_assert_eq(sscanf(line + 1, "%63s %lu %lu %*s %63s", name, &objs, &osize, sps), 4);
    cr_assert_eq(objs, N - N / 4);
    cr_assert_eq(osize, 100);
    char expect[64];
    snprintf(expect, sizeof expect, "%zu/", in.slabs);
    cr_assert(!strncmp(sps, expect, strlen(expect)), "%s vs %s", sps, expect);
}

/* ------------------------------------------------------------------ */
/* slabinfo against a live process                                     */

Test(cli, table_report_json_totals, .timeout = 60)
{
    struct child c;
    child_start(&c, control_env);
    struct run r;
    slabinfo(&r, c.pid, NULL, NULL);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "Name ", 5), "%s", r.out);
    char *l = strstr(r.out, "\ninspect_obj ");
    cr_assert(l, "%s", r.out);
    unsigned long objs;
    cr_assert_eq(sscanf(l + 1, "%*s %lu", &objs), 1);
    cr_assert_eq(objs, 1000);

    slabinfo(&r, c.pid, "-r", "inspect_obj");
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(strstr(r.out, "Cache inspect_obj\n"), "%s", r.out);
    cr_assert(strstr(r.out, "1000 in use"), "%s", r.out);
    cr_assert(strstr(r.out, "vacate_attempts"), "%s", r.out);
    cr_assert(strstr(r.out, "slab_new"), "%s", r.out);

    slabinfo(&r, c.pid, "--json", NULL);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "{\"pid\":", 7), "%s", r.out);
    cr_assert(strstr(r.out, "{\"name\":\"inspect_obj\",\"objects\":1000,"), "%s", r.out);

    slabinfo(&r, c.pid, "-T", NULL);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "Total: ", 7), "%s", r.out);
    cr_assert(!strstr(r.out, "inspect_obj"));

    slabinfo(&r, c.pid, "-S", NULL);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(strstr(r.out, "inspect_obj"));

    slabinfo(&r, c.pid, "-r", "no_such_cache");
    cr_assert_eq(exit_code(&r), 1);
    cr_assert(strstr(r.err, "error: no cache named no_such_cache"), "%s", r.err);
    child_stop(&c);
}

Test(cli, shrink_lowers_rss, .timeout = 60)
{
    struct child c;
    const char *env[] = { "SLABDEFRAG_CONTROL=1", "SLABDEFRAG_RETAIN_EMPTY=1024",
                          "SLABDEFRAG_DECAY_MS=600000", NULL };
    child_start(&c, env);
    char line[128];
    child_cmd(&c, "bigfree", line, sizeof line);
    long before = rss_kb(c.pid);
    struct run r;
    slabinfo(&r, c.pid, "-s", NULL);
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "shrink: ", 8), "%s", r.out);
    long after = rss_kb(c.pid);
    /* The 4000-byte class lives in 8 KiB slabs: a cache retains at most
     * 1024 empty ones (8 MiB of the 16), the rest went back at free. */
    cr_assert(after < before - 6 * 1024, "RSS %ld kB -> %ld kB", before, after);

    slabinfo(&r, c.pid, "-s", "inspect_obj");
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(strstr(r.out, "shrink inspect_obj: "), "%s", r.out);
    child_stop(&c);
}

Test(cli, validate_finds_planted_corruption, .timeout = 60)
{
    struct child c;
    child_start(&c, control_env);
    struct run r;
    slabinfo(&r, c.pid, "-v", NULL);
    cr_assert_eq(exit_code(&r), 0, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, ", 0 errors\n"), "%s", r.out);
    char line[128];
    child_cmd(&c, "corrupt", line, sizeof line);
    slabinfo(&r, c.pid, "-v", NULL);
    cr_assert_eq(exit_code(&r), 3, "%s%s", r.out, r.err);
    cr_assert(strstr(r.out, "corrupt: cache inspect_obj slab 0x"), "%s", r.out);
    cr_assert(strstr(r.out, "freelist pointer 0xdeadbeef0"), "%s", r.out);
    cr_assert(strstr(r.out, "points outside the slab"), "%s", r.out);
    cr_assert(strstr(r.out, ", 1 error\n"), "%s", r.out);
    /* The process lives on. */
    raw_request(c.pid, "ping\n", 5, line, sizeof line);
    cr_assert(!strncmp(line, "slabdefrag ", 11), "%s", line);
    child_stop(&c);
}

Test(cli, malformed_requests_get_errors, .timeout = 60)
{
    struct child c;
    child_start(&c, control_env);
    static char big[4096], reply[4096];
    memset(big, 'x', sizeof big);
    raw_request(c.pid, big, sizeof big, reply, sizeof reply);
    cr_assert(!strncmp(reply, "error: request too long", 23), "%s", reply);
    raw_request(c.pid, "\x01\x02\xff\n", 4, reply, sizeof reply);
    cr_assert(!strncmp(reply, "error: malformed request", 24), "%s", reply);
    raw_request(c.pid, "frobnicate\n", 11, reply, sizeof reply);
    cr_assert(!strncmp(reply, "error: unknown request", 22), "%s", reply);
    raw_request(c.pid, "stats bogus\n", 12, reply, sizeof reply);
    cr_assert(!strncmp(reply, "error: stats: unknown argument", 30), "%s", reply);
    raw_request(c.pid, "a b c d e f g h i j\n", 20, reply, sizeof reply);
    cr_assert(!strncmp(reply, "error: malformed request", 24), "%s", reply);
    raw_request(c.pid, "", 0, reply, sizeof reply);     /* silent client */
    cr_assert(!strncmp(reply, "error: timed out", 16), "%s", reply);
    raw_request(c.pid, "ping\n", 5, reply, sizeof reply);
    char expect[64];
    snprintf(expect, sizeof expect, "slabdefrag %s pid %d\n", SLABDEFRAG_VERSION,
             (int)c.pid);
    cr_assert_str_eq(reply, expect);
    child_stop(&c);
}

Test(cli, foreign_uid_refused, .timeout = 60)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to connect as another uid (setuid(65534))");
    struct child c;
    child_start(&c, control_env);
    int p[2];
    cr_assert(pipe(p) == 0);
    pid_t k = fork();
    if (k == 0) {
        close(p[0]);
        if (setgid(65534) || setuid(65534))
            _exit(2);
        char reply[256];
        raw_request(c.pid, "ping\n", 5, reply, sizeof reply);
        if (write(p[1], reply, strlen(reply)) < 0)
            _exit(3);
        _exit(0);
    }
    close(p[1]);
    char reply[256];
    slurp(p[0], reply, sizeof reply);
    int st;
    waitpid(k, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert(!strncmp(reply, "error: permission denied", 24), "%s", reply);
    child_stop(&c);
}

Test(cli, fork_child_serves_its_own_socket, .timeout = 60)
{
    struct child c;
    child_start(&c, control_env);
    char line[128];
    child_cmd(&c, "fork", line, sizeof line);
    int kid = 0;
    if (!strncmp(line, "child ", 6)) {
        kid = atoi(line + 6);
        cr_assert(fgets(line, sizeof line, c.out));
    } else {
        cr_assert(fgets(line, sizeof line, c.out));
        cr_assert(!strncmp(line, "child ", 6), "%s", line);
        kid = atoi(line + 6);
    }
    cr_assert(kid > 0);
    /* Its socket, once it listens (up to 30 s). */
    int fd = control_connect(kid);
    for (int i = 0; i < 1500 && fd < 0; i++) {
        usleep(20000);
        fd = control_connect(kid);
    }
    cr_assert(fd >= 0, "the forked child's socket did not listen in 30 s: %s", strerror(errno));
    close(fd);
    char reply[256], expect[64];
    raw_request(kid, "ping\n", 5, reply, sizeof reply);
    snprintf(expect, sizeof expect, "slabdefrag %s pid %d\n", SLABDEFRAG_VERSION, kid);
    cr_assert_str_eq(reply, expect);
    raw_request(c.pid, "ping\n", 5, reply, sizeof reply);
    snprintf(expect, sizeof expect, "slabdefrag %s pid %d\n", SLABDEFRAG_VERSION,
             (int)c.pid);
    cr_assert_str_eq(reply, expect);
    kill(kid, SIGKILL);
    child_stop(&c);
}

Test(cli, pid_without_slabdefrag_or_gone)
{
    struct child c;
    child_start(&c, NULL);              /* under slabdefrag, no control */
    struct run r;
    slabinfo(&r, c.pid, NULL, NULL);
    cr_assert_eq(exit_code(&r), 1);
    cr_assert_eq(count_lines(r.err), 1, "%s", r.err);
    cr_assert(strstr(r.err, "does not serve slabdefrag statistics"), "%s", r.err);
    cr_assert_str_empty(r.out);
    child_stop(&c);

    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    waitpid(gone, NULL, 0);
    slabinfo(&r, gone, NULL, NULL);
    cr_assert_eq(exit_code(&r), 1);
    cr_assert_eq(count_lines(r.err), 1, "%s", r.err);
    cr_assert(strstr(r.err, "no process with pid"), "%s", r.err);
}

/* ------------------------------------------------------------------ */
/* SLABDEFRAG_DEBUG                                                    */

static void debug_run(struct run *r, const char *mode, const char *debug)
{
    char var[64];
    snprintf(var, sizeof var, "SLABDEFRAG_DEBUG=%s", debug);
    const char *argv[] = { INSPECT_CHILD, mode, NULL };
    const char *env[] = { var, NULL };
    run(r, argv, env);
}

/* The first line of every report. */
static void assert_head(const char *err, const char *error)
{
    char want[128];
    snprintf(want, sizeof want, "slabdefrag: %s in cache malloc-64: object 0x", error);
    const char *l = strstr(err, want);
    cr_assert(l, "no \"%s\" in:\n%s", want, err);
    void *obj, *slab;
    size_t off;
    char tail[8];
    cr_assert_eq(sscanf(l + strlen(want) - 2, "%p (offset %zu in slab %p%1[)]",
                        &obj, &off, &slab, tail), 4, "%s", l);
    cr_assert_eq((char *)obj - (char *)slab, (ptrdiff_t)off);
}

Test(debug, F_double_free_aborts_with_report)
{
    struct run r;
    debug_run(&r, "double", "F,malloc-64");
    cr_assert(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "%s", r.err);
    assert_head(r.err, "double free");
    cr_assert(strstr(r.err, "free() of an object that is already free"), "%s", r.err);
    cr_assert(strstr(r.err, "  backtrace:\n    #0 "), "%s", r.err);
    cr_assert(strstr(r.err, "inspect_free+"), "symbolised:\n%s", r.err);
}

Test(debug, F_invalid_free)
{
    struct run r;
    debug_run(&r, "invalid", "F,malloc-64");
    cr_assert(WIFSIGNALED(r.status), "%s", r.err);
    assert_head(r.err, "invalid free");
    cr_assert(strstr(r.err, "the pointer is 8 bytes into the object"), "%s", r.err);
}

Test(debug, Z_red_zone_overflow_reported_at_free)
{
    struct run r;
    debug_run(&r, "overflow", "Z,malloc-64");
    cr_assert_eq(exit_code(&r), 0, "reported, then goes on:\n%s", r.err);
    assert_head(r.err, "red zone overwritten");
    cr_assert(strstr(r.err, "+0040: 41 41 41 41 41 41 cc cc"), "%s", r.err);
    cr_assert(strstr(r.err, "inspect_free+"), "%s", r.err);
}

Test(debug, P_use_after_free_reported_at_next_alloc)
{
    struct run r;
    debug_run(&r, "uaf", "P,malloc-64");
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    assert_head(r.err, "use after free");
    cr_assert(strstr(r.err, "first changed byte at offset 10"), "%s", r.err);
    cr_assert(strstr(r.err, "+0000: 6b 6b 6b 6b 6b 6b 6b 6b 6b 6b 58 6b"), "%s", r.err);
    cr_assert(strstr(r.err, "inspect_alloc+"), "%s", r.err);
}

Test(debug, U_call_sites_in_reports)
{
    struct run r;
    debug_run(&r, "double", "FU,malloc-64");
    cr_assert(WIFSIGNALED(r.status), "%s", r.err);
    assert_head(r.err, "double free");
    const char *a = strstr(r.err, "  allocated by thread ");
    const char *f = strstr(r.err, "  last freed by thread ");
    cr_assert(a && f, "%s", r.err);
    cr_assert(strstr(a, "inspect_alloc+"), "%s", r.err);
    cr_assert(strstr(f, "inspect_free+"), "%s", r.err);
}

Test(debug, T_traces_every_operation)
{
    struct run r;
    debug_run(&r, "trace", "T,malloc-64");
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: TRACE alloc malloc-64 0x"), "%s", r.err);
    cr_assert(strstr(r.err, "slabdefrag: TRACE free malloc-64 0x"), "%s", r.err);
}

Test(debug, other_caches_untouched)
{
    struct run r;
    debug_run(&r, "overflow", "FZPU,malloc-128");
    cr_assert_eq(exit_code(&r), 0);
    cr_assert(!strstr(r.err, "red zone"), "%s", r.err);
}

Test(debug, all_letters_all_caches_clean_run)
{
    struct run r;
    debug_run(&r, "trace", "FZPU");
    cr_assert_eq(exit_code(&r), 0, "%s", r.err);
    cr_assert_str_empty(r.err, "%s", r.err);
}
