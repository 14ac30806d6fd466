/*
 * tests/harness.h - a minimal stand-in for Criterion, for the test programs
 * that cannot run under it: the same Test(suite, name, .timeout = N) and
 * cr_assert* macros, and the same command line (--filter suite/name), so
 * that tests/meson.build registers them like every other test.
 *
 * Who uses it and why:
 *   - test_stress.c under ThreadSanitizer (-DSTRESS_NO_CRITERION=1):
 *     Criterion's sandbox (BoxFort) maps an arena at random fixed
 *     addresses that collide with TSan's shadow ("Could not initialize
 *     inheritable arena").  Each test runs in a forked child with its
 *     timeout.
 *   - the programs of tests/mesh/ (mesh_test.c, mesh_syscall.c,
 *     mesh_pattern.c, mesh_policy.c, mesh_robust.c, nss_fork.c;
 *     HARNESS_IN_PROCESS): a test framework's own SIGSEGV handling would
 *     stand between meshing's write barrier (a SIGSEGV handler, or
 *     userfaultfd) and the program, and Criterion runs each test in a
 *     child forked from its runner, whose fork goes through the
 *     allocator's fork handling first.  The selected test runs in this
 *     process, alone.
 * Every other C test is Criterion's.
 *
 * Output is Criterion-style ([PASS] suite::name, [====] Synthesis); the
 * exit status is 0 if every selected test passed, 77 if one was skipped
 * (cr_skip_test: meson's SKIP), non-zero otherwise.  Include it once, from
 * the file that holds the tests (it defines main).
 */
#ifndef SD_TESTS_HARNESS_H
#define SD_TESTS_HARNESS_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef HARNESS_IN_PROCESS
#define HARNESS_IN_PROCESS 0
#endif

struct mini_test {
    const char *suite, *name;
    void (*fn)(void);
    int timeout;                /* seconds; 0: 60 */
};
static struct mini_test mini_tests[64];
static int mini_ntests;

static void mini_register(const char *suite, const char *name, void (*fn)(void),
                          int timeout)
{
    if (mini_ntests == (int)(sizeof mini_tests / sizeof mini_tests[0])) {
        fprintf(stderr, "harness.h: more than %d tests\n", mini_ntests);
        abort();
    }
    mini_tests[mini_ntests++] = (struct mini_test){ suite, name, fn, timeout };
}

struct mini_opts { int timeout; };
#define Test(suite, name, ...)                                                 \
    static void suite##_##name(void);                                          \
    __attribute__((constructor)) static void reg_##suite##_##name(void)        \
    {                                                                          \
        struct mini_opts o = { __VA_ARGS__ };                                  \
        mini_register(#suite, #name, suite##_##name, o.timeout);               \
    }                                                                          \
    static void suite##_##name(void)

/* (no format attribute: an assertion without a message passes "") */
static void mini_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "[----] %s:%d: Assertion Failed (%s)\n[----]   ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    _exit(1);
}
#define MINI_FAIL(cond, ...) mini_fail(__FILE__, __LINE__, cond, "" __VA_ARGS__)
#define cr_assert(c, ...) do { if (!(c)) MINI_FAIL(#c, __VA_ARGS__); } while (0)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), "" __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), "" __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), "" __VA_ARGS__)
#define cr_assert_not_null(a, ...) cr_assert((a) != NULL, "" __VA_ARGS__)
/* Skip the test (meson counts exit status 77 as skipped). */
#define cr_skip_test(...)                                                      \
    do { fprintf(stderr, "[SKIP] " __VA_ARGS__); fputc('\n', stderr);          \
         fflush(NULL); _exit(77); } while (0)

/* Run test t: in a forked child (the default) or in this process. */
static int mini_run(const struct mini_test *t)
{
    unsigned tmo = t->timeout ? (unsigned)t->timeout : 60;
    fflush(NULL);
    if (HARNESS_IN_PROCESS) {
        alarm(tmo);
        t->fn();
        alarm(0);
        return 0;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        alarm(tmo);
        t->fn();
        fflush(NULL);
        exit(0);        /* exit, not _exit: lets the sanitizer report */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        exit(77);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFSIGNALED(st))
        fprintf(stderr, "[----] %s::%s: killed by signal %d%s\n", t->suite, t->name,
                WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
    else
        fprintf(stderr, "[----] %s::%s: exit status %d\n", t->suite, t->name,
                WEXITSTATUS(st));
    return 1;
}

int main(int argc, char **argv)
{
    /* Criterion's command line, in part: --filter suite/name; the rest
     * (--jobs N, ...) is ignored.  In-process, exactly one test. */
    const char *filter = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            filter = argv[++i];
        else if (!strncmp(argv[i], "--filter=", 9))
            filter = argv[i] + 9;
    if (HARNESS_IN_PROCESS) {
        setvbuf(stdout, NULL, _IONBF, 0);
        if (!filter) {
            fprintf(stderr, "usage: %s --filter SUITE/NAME (one test per process); "
                    "tests:", argv[0]);
            for (int i = 0; i < mini_ntests; i++)
                fprintf(stderr, " %s/%s", mini_tests[i].suite, mini_tests[i].name);
            fputc('\n', stderr);
            return 2;
        }
    }
    int failed = 0, ran = 0;
    for (int i = 0; i < mini_ntests; i++) {
        const struct mini_test *t = &mini_tests[i];
        char full[256];
        snprintf(full, sizeof full, "%s/%s", t->suite, t->name);
        if (filter && strcmp(filter, full) != 0)
            continue;
        ran++;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int bad = mini_run(t);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        failed += bad;
        fprintf(stderr, "[%s] %s::%s: (%.2fs)\n", bad ? "FAIL" : "PASS", t->suite,
                t->name, secs);
    }
    fprintf(stderr, "[====] Synthesis: Tested: %d | Passing: %d | Failing: %d\n",
            ran, ran - failed, failed);
    if (!ran) {
        fprintf(stderr, "no test matches --filter %s\n", filter ? filter : "");
        return 3;
    }
    return failed ? 1 : 0;
}

#endif
