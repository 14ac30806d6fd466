/*
 * tools/slabinfo.c - inspect and shrink a process running under slabdefrag
 * (the kernel's tools/mm/slabinfo, for user space).
 *
 * It only talks to the process's control socket (preload/control.h): the
 * inspector reads what the allocator exposes and shares no code with it.
 *
 *   slabinfo -p PID                  the table of every cache
 *   slabinfo -p PID -T               totals only
 *   slabinfo -p PID -S | -L | -P     sorted by size, loss, partial slabs
 *   slabinfo -p PID --json           the table as JSON
 *   slabinfo -p PID -r CACHE         one cache in detail (with --json: JSON)
 *   slabinfo -p PID -s [CACHE]       shrink every cache, or one
 *   slabinfo -p PID -v               validate every slab
 *   slabinfo -p PID --sites | --pinned   heap profiler: call sites by live
 *                                    or by pinned bytes (SLABDEFRAG_PROF)
 *   slabinfo -p PID --prof on|off|BYTES  switch the profiler
 *   slabinfo -p PID --heap-profile   gperftools heap profile (google-pprof)
 *   slabinfo -p PID --folded live|pinned   folded stacks
 *   slabinfo -p PID --flamegraph [live|pinned]   an SVG flame graph
 *   slabinfo --flamegraph-from FILE [--title T]  an SVG flame graph of a
 *                                    folded file
 *
 * Exit status: 0 success, 1 error (no such process, not under slabdefrag,
 * refused, error reply), 2 usage, 3 -v found corruption.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "flamegraph.h"

#define REPLY_TIMEOUT_MS 30000

static const char *prog = "slabinfo";
static long pid = -1;
static FILE *reply_sink;        /* where a reply goes (stdout by default) */
static const char *flame_title; /* --title */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s -p PID [options]\n"
        "  -p PID        the process to inspect (run with SLABDEFRAG_CONTROL=1)\n"
        "  (none)        the slabinfo table of every cache\n"
        "  -T            totals only\n"
        "  -S, -L, -P    sort by size (slab space), loss (space not used by\n"
        "                objects), partial slabs; largest first\n"
        "  --json        JSON instead of text (table and -r)\n"
        "  -r CACHE      detailed report of one cache\n"
        "  -s [CACHE]    shrink every cache, or one; prints the bytes released\n"
        "  -v            validate every slab; exit 3 if corruption is found\n"
        "heap profiler (the process runs with SLABDEFRAG_PROF=1, or --prof on):\n"
        "  --sites       call sites by estimated live bytes, with the bytes of\n"
        "                sparse slabs (at most 1/4 full) their objects pin\n"
        "  --pinned      the same, sorted by pinned bytes\n"
        "  -n ROWS       rows of --sites/--pinned (default 20)\n"
        "  --prof on|off|BYTES   switch it (BYTES: on, with that mean interval)\n"
        "  --heap-profile        gperftools heap profile on stdout (google-pprof --text)\n"
        "  --folded live|pinned  folded stacks on stdout (flame graph input)\n"
        "  --flamegraph [live|pinned]  SVG flame graph on stdout (default pinned)\n"
        "  --flamegraph-from FILE      SVG flame graph of a folded file (- : stdin;\n"
        "                no -p needed)\n"
        "  --title TEXT  the flame graph's title\n"
        "  -h            this help\n", prog);
}

static int die(const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return 1;
}

/* Connect to the process; on failure print one line and return -1. */
static int connect_pid(void)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/%ld", pid);
    struct stat st;
    if (stat(proc, &st) != 0) {
        fprintf(stderr, "%s: no process with pid %ld\n", prog, pid);
        return -1;
    }
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, SD_CONTROL_NAME_FMT,
                     (int)pid);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "%s: socket: %s\n", prog, strerror(errno));
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&a, len) != 0) {
        int e = errno;
        close(fd);
        if (e == ECONNREFUSED || e == ENOENT)
            fprintf(stderr, "%s: process %ld does not serve slabdefrag statistics "
                    "(not running under libslabdefrag.so, or started without "
                    "SLABDEFRAG_CONTROL=1)\n", prog, pid);
        else
            fprintf(stderr, "%s: cannot connect to process %ld: %s\n", prog, pid,
                    strerror(e));
        return -1;
    }
    return fd;
}

/* Send one request and copy the reply to stdout.  Returns 0, 1 on error;
 * *tail gets the reply's last line (for -v). */
static int request(const char *req, char *tail, size_t tailsz)
{
    int fd = connect_pid();
    if (fd < 0)
        return 1;
    char line[SD_CONTROL_MAX_REQUEST + 1];
    int n = snprintf(line, sizeof line, "%s\n", req);
    if (n <= 0 || (size_t)n >= sizeof line) {
        close(fd);
        return die("request too long: %s", req);
    }
    if (send(fd, line, (size_t)n, MSG_NOSIGNAL) != n) {
        fprintf(stderr, "%s: process %ld: sending the request: %s\n", prog, pid,
                strerror(errno));
        close(fd);
        return 1;
    }
    shutdown(fd, SHUT_WR);
    char buf[8192];
    size_t total = 0;
    int first = 1, is_error = 0, rc = 0;
    char last[512] = "";
    size_t lastn = 0;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = poll(&p, 1, REPLY_TIMEOUT_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            fprintf(stderr, "%s: process %ld: no reply within %d s\n", prog, pid,
                    REPLY_TIMEOUT_MS / 1000);
            rc = 1;
            break;
        }
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            fprintf(stderr, "%s: process %ld: reading the reply: %s\n", prog, pid,
                    strerror(errno));
            rc = 1;
            break;
        }
        if (got == 0)
            break;
        if (first) {
            is_error = got >= 7 && !memcmp(buf, "error: ", 7);
            first = 0;
            if (is_error)
                fprintf(stderr, "%s: process %ld: ", prog, pid);
        }
        fwrite(buf, 1, (size_t)got, is_error ? stderr : reply_sink);
        total += (size_t)got;
        for (ssize_t i = 0; i < got; i++) {     /* keep the last line */
            if (lastn && last[lastn - 1] == '\n')
                lastn = 0;
            if (lastn < sizeof last - 1)
                last[lastn++] = buf[i];
        }
    }
    close(fd);
    fflush(reply_sink);
    last[lastn] = 0;
    if (tail)
        snprintf(tail, tailsz, "%s", last);
    if (!rc && total == 0) {
        fprintf(stderr, "%s: process %ld closed the connection without a reply\n",
                prog, pid);
        return 1;
    }
    return rc || is_error;
}

/* Draw folded stacks (a file, or a request's reply) as SVG on stdout. */
static int flamegraph(const char *file, const char *what)
{
    char title[160];
    FILE *in;
    char *text = NULL;
    size_t len = 0;
    if (file) {
        in = strcmp(file, "-") ? fopen(file, "r") : stdin;
        if (!in) {
            fprintf(stderr, "%s: --flamegraph-from: %s: %s\n", prog, file, strerror(errno));
            return 1;
        }
        snprintf(title, sizeof title, "Flame graph of %s", file);
    } else {
        FILE *mem = open_memstream(&text, &len);
        if (!mem)
            return die("%s", strerror(errno));
        char req[64];
        snprintf(req, sizeof req, "prof folded %s", what);
        reply_sink = mem;
        int rc = request(req, NULL, 0);
        reply_sink = stdout;
        fclose(mem);
        if (rc) {
            free(text);
            return rc;
        }
        in = fmemopen(text, len ? len : 1, "r");
        if (!in) {
            free(text);
            return die("%s", strerror(errno));
        }
        snprintf(title, sizeof title, "%s bytes by call site, process %ld",
                 strcmp(what, "live") ? "Pinned sparse-slab" : "Live", pid);
    }
    int rc = flamegraph_svg(in, stdout, flame_title ? flame_title : title, "bytes") ? 1 : 0;
    if (in != stdin)
        fclose(in);
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    const char *sites = NULL, *prof = NULL, *folded = NULL, *flame = NULL;
    const char *flame_file = NULL;
    long rows = 20;
    int heap = 0;
    reply_sink = stdout;
    int json = 0, totals = 0, validate = 0, shrink = 0;
    const char *sort = NULL, *report = NULL, *shrink_cache = NULL;
    prog = argv[0] && strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : "slabinfo";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-p") && i + 1 < argc) {
            char *end;
            pid = strtol(argv[++i], &end, 10);
            if (*end || pid <= 0 || pid > 0x7fffffff) {
                fprintf(stderr, "%s: -p: not a process id: %s\n", prog, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "-T")) {
            totals = 1;
        } else if (!strcmp(a, "--json") || !strcmp(a, "-j")) {
            json = 1;
        } else if (!strcmp(a, "-S")) {
            sort = "sort=size";
        } else if (!strcmp(a, "-L")) {
            sort = "sort=loss";
        } else if (!strcmp(a, "-P")) {
            sort = "sort=partial";
        } else if (!strcmp(a, "-v")) {
            validate = 1;
        } else if (!strcmp(a, "-r") && i + 1 < argc) {
            report = argv[++i];
        } else if (!strcmp(a, "-s")) {
            shrink = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-')
                shrink_cache = argv[++i];
        } else if (!strcmp(a, "--sites") || !strcmp(a, "--pinned")) {
            sites = a + 2;
        } else if (!strcmp(a, "-n") && i + 1 < argc) {
            char *end;
            rows = strtol(argv[++i], &end, 10);
            if (*end || rows < 1 || rows > 100000) {
                fprintf(stderr, "%s: -n: expected a number of rows from 1 to 100000: %s\n",
                        prog, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--prof") && i + 1 < argc) {
            prof = argv[++i];
            if (strcmp(prof, "on") && strcmp(prof, "off") &&
                strspn(prof, "0123456789") != strlen(prof)) {
                fprintf(stderr, "%s: --prof: expected on, off or a mean interval in "
                        "bytes: %s\n", prog, prof);
                return 2;
            }
        } else if (!strcmp(a, "--heap-profile")) {
            heap = 1;
        } else if (!strcmp(a, "--folded") && i + 1 < argc) {
            folded = argv[++i];
            if (strcmp(folded, "live") && strcmp(folded, "pinned")) {
                fprintf(stderr, "%s: --folded: expected live or pinned: %s\n", prog, folded);
                return 2;
            }
        } else if (!strcmp(a, "--flamegraph")) {
            flame = "pinned";
            if (i + 1 < argc && (!strcmp(argv[i + 1], "live") || !strcmp(argv[i + 1], "pinned")))
                flame = argv[++i];
        } else if (!strcmp(a, "--flamegraph-from") && i + 1 < argc) {
            flame_file = argv[++i];
        } else if (!strcmp(a, "--title") && i + 1 < argc) {
            flame_title = argv[++i];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "%s: unknown or incomplete option: %s\n", prog, a);
            usage(stderr);
            return 2;
        }
    }
    if (flame_file)
        return flamegraph(flame_file, NULL);
    if (pid < 0) {
        usage(stderr);
        return 2;
    }
    char req[SD_CONTROL_MAX_REQUEST];
    int rc = 0;
    int profiler = sites || prof || heap || folded || flame;
    if (prof) {
        snprintf(req, sizeof req, "prof %s", strcmp(prof, "off") ? "on" : "off");
        if (strcmp(prof, "on") && strcmp(prof, "off"))
            snprintf(req, sizeof req, "prof on %s", prof);
        if ((rc = request(req, NULL, 0)))
            return rc;
    }
    if (sites) {
        snprintf(req, sizeof req, "%s %ld", sites, rows);
        if ((rc = request(req, NULL, 0)))
            return rc;
    }
    if (heap && (rc = request("prof heap", NULL, 0)))
        return rc;
    if (folded) {
        snprintf(req, sizeof req, "prof folded %s", folded);
        if ((rc = request(req, NULL, 0)))
            return rc;
    }
    if (flame && (rc = flamegraph(NULL, flame)))
        return rc;
    if (profiler && !(shrink || validate || report || totals || sort))
        return 0;
    if (shrink) {
        snprintf(req, sizeof req, "shrink%s%s", shrink_cache ? " " : "",
                 shrink_cache ? shrink_cache : "");
        if ((rc = request(req, NULL, 0)))
            return rc;
    }
    if (validate) {
        char tail[512];
        if ((rc = request("validate", tail, sizeof tail)))
            return rc;
        if (!strstr(tail, " 0 errors"))
            return 3;
    }
    if (report) {
        if (strlen(report) > 200)
            return die("cache name too long: %s", report);
        snprintf(req, sizeof req, "report %s%s", report, json ? " json" : "");
        if ((rc = request(req, NULL, 0)))
            return rc;
    }
    if (!(shrink || validate || report) || totals || sort) {
        snprintf(req, sizeof req, "stats%s%s%s%s", json ? " json" : "",
                 totals ? " totals" : "", sort ? " " : "", sort ? sort : "");
        rc = request(req, NULL, 0);
    }
    return rc;
}
