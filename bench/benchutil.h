/*
 * bench/benchutil.h - the one helper library of bench/: the workloads
 * (bench/NAME.c) and the cooperating demos (bench/demos/NAME.c).  Clock, /proc
 * figures, key=value output, seeded generators, argument parsing, threads.
 *
 * Nothing here knows about any allocator (the demos' -malloc builds use
 * it too), and nothing here allocates except where a comment says so.
 * The workloads talk to scripts/compare through stderr lines of the form
 * `key=value` (one per line) and `event=NAME mono=SECONDS`, where SECONDS
 * is CLOCK_MONOTONIC, the same clock as Python's time.monotonic(), so the
 * script can place the event on its own RSS-over-time axis (the demos
 * print their key=value lines on stdout).  Human-readable output goes to
 * stdout.
 */
#ifndef SD_BENCHUTIL_H
#define SD_BENCHUTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

/* proc_status_kb("VmRSS"): /proc/self/status, shared with the tests. */
#include "../tests/procstatus.h"

static inline double bu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bu_event(const char *name)
{
    fprintf(stderr, "event=%s mono=%.6f\n", name, bu_now());
}

static inline void bu_kv_long(const char *k, long long v)
{
    fprintf(stderr, "%s=%lld\n", k, v);
}

static inline void bu_kv_double(const char *k, double v)
{
    fprintf(stderr, "%s=%.6g\n", k, v);
}

/* Sleep for `sec` seconds (fractional). */
static inline void bu_sleep(double sec)
{
    if (sec <= 0)
        return;
    struct timespec ts = { (time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9) };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Two seeded generators, each the same sequence under every allocator for
 * a given seed.  Each keeps the stream its programs' published figures
 * (README) were measured with: xorshift64* (bu_rng) for the workloads,
 * splitmix64 (bu_sm) for the demos, whose --seed runs reproduce with it. */

/* xorshift64*: fast; seeded through a multiply. */
typedef struct { uint64_t s; } bu_rng;

static inline void bu_seed(bu_rng *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ULL + 0x1234567ULL;
    if (!r->s)
        r->s = 1;
}

static inline uint64_t bu_next(bu_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [lo, hi]. */
static inline size_t bu_range(bu_rng *r, size_t lo, size_t hi)
{
    return lo + (size_t)(bu_next(r) % (uint64_t)(hi - lo + 1));
}

/* splitmix64: the state is the seed itself (bu_sm r = { seed }). */
typedef struct { uint64_t s; } bu_sm;

static inline uint64_t bu_sm_next(bu_sm *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static inline uint64_t bu_sm_below(bu_sm *r, uint64_t n)
{
    return n ? bu_sm_next(r) % n : 0;
}

/* A stateless mix of two words (value generators, checksums). */
static inline uint64_t bu_mix(uint64_t a, uint64_t b)
{
    bu_sm r = { a * 0xd6e8feb86659fd93ULL ^ b };
    return bu_sm_next(&r);
}

/* FNV-1a over n bytes, continuing from h. */
static inline uint64_t bu_fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Fisher-Yates shuffle of 0..n-1 into a[]. */
static inline void bu_permutation(uint32_t *a, size_t n, bu_sm *r)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = bu_sm_below(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* Parse an unsigned number with an optional k/m suffix (x1000, x1000000).
 * 0 on success. */
static inline int bu_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s)
        return -1;
    if (*end == 'k' || *end == 'K') { v *= 1000ULL; end++; }
    else if (*end == 'm' || *end == 'M') { v *= 1000000ULL; end++; }
    if (*end)
        return -1;
    *out = v;
    return 0;
}

/* --name VALUE or --name=VALUE.  Returns the value (advancing *i past it),
 * or NULL when argv[*i] is not this option; a missing value exits 2. */
static inline const char *bu_opt(int argc, char **argv, int *i, const char *name)
{
    size_t l = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, l) != 0)
        return NULL;
    if (a[l] == '=')
        return a + l + 1;
    if (a[l] == '\0') {
        if (*i + 1 >= argc) {
            fprintf(stderr, "%s: missing value\n", name);
            exit(2);
        }
        return argv[++*i];
    }
    return NULL;
}

/* Report the final state: VmRSS and VmHWM as this process sees them now,
 * just before it exits.  scripts/compare takes final RSS from here. */
static inline int bu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v). */
static inline double bu_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bu_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline void bu_final(void)
{
    bu_kv_long("final_rss_kb", proc_status_kb("VmRSS"));
    bu_kv_long("peak_rss_kb", proc_status_kb("VmHWM"));
    bu_event("exit");
}

static inline void bu_die(const char *prog, const char *msg)
{
    fprintf(stderr, "%s: %s\n", prog, msg);
    exit(1);
}

/* Online CPUs (at least 1): the default thread count of the workloads. */
static inline int bu_ncpu(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* pthread_create with a stack of stack_kb KiB (0: the default); dies with
 * a message naming prog on failure. */
static inline void bu_thread(const char *prog, pthread_t *t, size_t stack_kb,
                             void *(*fn)(void *), void *arg)
{
    pthread_attr_t at;
    pthread_attr_init(&at);
    if (stack_kb && pthread_attr_setstacksize(&at, stack_kb * 1024))
        bu_die(prog, "pthread_attr_setstacksize failed (stack too small?)");
    if (pthread_create(t, &at, fn, arg))
        bu_die(prog, "pthread_create failed (too many threads?)");
    pthread_attr_destroy(&at);
}

/* Tag a block of n >= 1 bytes: its first and last byte get n's low byte.
 * bu_check() verifies the tag before the block is freed, so an allocator
 * that hands out overlapping blocks is caught. */
static inline void bu_tag(char *p, size_t n)
{
    p[0] = (char)n;
    p[n - 1] = (char)n;
}

static inline void bu_check(const char *prog, const char *p, size_t n)
{
    if (p[0] != (char)n || p[n - 1] != (char)n)
        bu_die(prog, "a live block was overwritten (allocator bug?)");
}

/* The figures of a speed workload: its own timed phase (time_s, which
 * scripts/compare uses for the time ratios) and ops_per_s, where an op is
 * one malloc or one free call. */
static inline void bu_speed(double ops, double sec)
{
    bu_kv_double("time_s", sec);
    bu_kv_double("ops_per_s", sec > 0 ? ops / sec : 0.0);
}

#endif
