/*
 * tests/drive.h - Criterion tests that run a scenario of a subject program
 * (tests/subject.h) in a process of its own:
 *
 *   Test(mesh_test, basic) { drive("mesh_test", "basic"); }
 *
 * runs `DIR/mesh_test basic`, DIR being this program's own directory (the
 * build directory where meson puts both), with this process's environment
 * (the test's SLABDEFRAG_* options).  Its output passes through; the test
 * fails with the program's last line of stderr unless it exits 0, and is
 * skipped if it exits 77.  A test program whose only tests were skipped
 * exits 77 too, so that meson counts them as skipped.
 */
#ifndef SD_TESTS_DRIVE_H
#define SD_TESTS_DRIVE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE     /* pipe2 */
#endif
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Writes `prog`'s path (in this program's directory) to path[size]. */
static void drive_path(char *path, size_t size, const char *prog)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
    self[n] = 0;
    char *slash = strrchr(self, '/');
    cr_assert(slash, "no directory in %s", self);
    *slash = 0;
    int w = snprintf(path, size, "%s/%s", self, prog);
    cr_assert(w > 0 && (size_t)w < size, "path of %s too long", prog);
}

static void drive(const char *prog, const char *scenario)
{
    char path[4096];
    drive_path(path, sizeof path, prog);
    int p[2];
    cr_assert(pipe2(p, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(p[1], 2);
        execl(path, prog, scenario, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    /* Its stderr to ours as it comes, and its last line kept. */
    char buf[4096], last[512] = "", line[512];
    size_t ll = 0;
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (write(2, buf, (size_t)n) < 0) { /* the log is best effort */ }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                if (ll) {
                    memcpy(last, line, ll);
                    last[ll] = 0;
                }
                ll = 0;
            } else if (ll < sizeof line - 1) {
                line[ll++] = buf[i];
            }
        }
    }
    if (ll) {
        memcpy(last, line, ll);
        last[ll] = 0;
    }
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        cr_assert(errno == EINTR, "waitpid: %s", strerror(errno));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        cr_skip_test("%s %s: %s", prog, scenario, last);
    if (WIFSIGNALED(st))
        cr_assert_fail("%s %s: killed by signal %d%s; last line: %s", prog, scenario,
                       WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (its timeout)" : "", last);
    cr_assert_fail("%s %s: exit status %d: %s", prog, scenario, WEXITSTATUS(st), last);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    if (stats->tests_skipped && stats->tests_skipped == stats->nb_tests) {
        fflush(NULL);
        _exit(77);
    }
}

#endif
