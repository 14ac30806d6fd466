/*
 * tests/subject.h - a subject program: scenarios that a Criterion test runs
 * in a process of their own (tests/drive.h), for the programs that cannot
 * run inside Criterion:
 *   - tests/stress.c under ThreadSanitizer: Criterion's sandbox (BoxFort)
 *     maps an arena at fixed addresses that collide with TSan's shadow;
 *   - the programs of tests/mesh/: a framework's own SIGSEGV handling and
 *     its fork of each test would stand between meshing's write barrier (a
 *     SIGSEGV handler, or userfaultfd) and the program.
 *
 *   Scenario(name, .timeout = N) { ... check(cond, "fmt", ...); ... }
 *   program NAME      runs scenario NAME in this process and exits 0 if it
 *                     returned, 77 if it skipped (skip_scenario), 1 with one
 *                     line "FILE:LINE: check failed: COND: MESSAGE" on
 *                     stderr if a check failed; SIGALRM after its timeout
 *                     (default 60 s)
 *   program           lists the scenarios
 * Include it once, from the file that holds the scenarios (it defines main).
 */
#ifndef SD_TESTS_SUBJECT_H
#define SD_TESTS_SUBJECT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct scenario {
    const char *name;
    void (*fn)(void);
    int timeout;                        /* seconds; 0: 60 */
};
static struct scenario scenarios[64];
static int nscenarios;

static void scenario_register(const char *name, void (*fn)(void), int timeout)
{
    if (nscenarios == (int)(sizeof scenarios / sizeof scenarios[0])) {
        fprintf(stderr, "subject.h: more than %d scenarios\n", nscenarios);
        abort();
    }
    scenarios[nscenarios++] = (struct scenario){ name, fn, timeout };
}

struct scenario_opts { int timeout; };
#define Scenario(name, ...)                                                    \
    static void scenario_##name(void);                                         \
    __attribute__((constructor)) static void scenario_reg_##name(void)         \
    {                                                                          \
        struct scenario_opts o = { __VA_ARGS__ };                              \
        scenario_register(#name, scenario_##name, o.timeout);                  \
    }                                                                          \
    static void scenario_##name(void)

/* (no format attribute: a check without a message passes "") */
static void check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s:%d: check failed: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(1);
}
#define check(c, ...)                                                          \
    do { if (!(c)) check_failed(__FILE__, __LINE__, #c, "" __VA_ARGS__); } while (0)
#define check_eq(a, b, ...) check((a) == (b), "" __VA_ARGS__)
#define check_neq(a, b, ...) check((a) != (b), "" __VA_ARGS__)
#define check_geq(a, b, ...) check((a) >= (b), "" __VA_ARGS__)
#define check_not_null(a, ...) check((a) != NULL, "" __VA_ARGS__)
/* Skip the scenario: exit status 77, which the driver reports as skipped. */
#define skip_scenario(...)                                                     \
    do { fflush(stdout); fprintf(stderr, "skipped: " __VA_ARGS__); fputc('\n', stderr); \
         fflush(stderr); _exit(77); } while (0)

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int i = 0; argc == 2 && i < nscenarios; i++) {
        if (strcmp(argv[1], scenarios[i].name) != 0)
            continue;
        alarm(scenarios[i].timeout ? (unsigned)scenarios[i].timeout : 60);
        scenarios[i].fn();
        alarm(0);
        return 0;       /* exit, not _exit: lets a sanitizer report */
    }
    fprintf(stderr, "usage: %s SCENARIO (one per process); scenarios:", argv[0]);
    for (int i = 0; i < nscenarios; i++)
        fprintf(stderr, " %s", scenarios[i].name);
    fputc('\n', stderr);
    return 2;
}

#endif
