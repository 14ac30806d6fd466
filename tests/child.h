/*
 * tests/child.h - run a bad call in a forked child and read what it said.
 *
 * The child's stderr goes to a pipe; the test then checks how it died
 * (expect_sigabrt) and the line it printed (find_line).  Included by the
 * Criterion tests that assert the allocator's fatal reports.
 */
#ifndef SD_TESTS_CHILD_H
#define SD_TESTS_CHILD_H

#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

struct child {
    int status;
    char err[16384];
    size_t len;
};

typedef void (*child_fn)(void *arg);

static inline void run_child(child_fn fn, void *arg, struct child *c)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        struct rlimit no_core = { 0, 0 };
        setrlimit(RLIMIT_CORE, &no_core);
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        alarm(20);                      /* a hang dies of SIGALRM, not SIGABRT */
        fn(arg);
        _exit(0);                       /* the bad call returned */
    }
    close(fds[1]);
    c->len = 0;
    for (;;) {
        ssize_t n = read(fds[0], c->err + c->len, sizeof c->err - 1 - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        c->len += (size_t)n;
        if (c->len == sizeof c->err - 1)
            break;
    }
    c->err[c->len] = 0;
    close(fds[0]);
    while (waitpid(pid, &c->status, 0) < 0 && errno == EINTR)
        ;
}

static inline const char *describe(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "status 0x%x", status);
    return buf;
}

static inline void expect_sigabrt(const struct child *c)
{
    char d[96];
    cr_assert(WIFSIGNALED(c->status) && WTERMSIG(c->status) == SIGABRT,
              "child %s, want SIGABRT; stderr:\n%s",
              describe(c->status, d, sizeof d), c->err);
}

/* The line of c->err that contains needle, copied into line; 0 if none. */
static inline int find_line(const struct child *c, const char *needle, char *line, size_t n)
{
    const char *hit = strstr(c->err, needle);
    if (!hit)
        return 0;
    const char *start = hit;
    while (start > c->err && start[-1] != '\n')
        start--;
    const char *end = strchr(hit, '\n');
    size_t len = end ? (size_t)(end - start) : strlen(start);
    if (len >= n)
        len = n - 1;
    memcpy(line, start, len);
    line[len] = 0;
    return 1;
}

#endif
