/*
 * bench/benchutil.h - small helpers shared by the bench/ workloads.
 *
 * Nothing here knows about any allocator.  The workloads talk to
 * scripts/compare through stderr lines of the form `key=value` (one per
 * line) and `event=NAME mono=SECONDS`, where SECONDS is CLOCK_MONOTONIC,
 * the same clock as Python's time.monotonic(), so the script can place the
 * event on its own RSS-over-time axis.  Human-readable output goes to
 * stdout.
 */
#ifndef SD_BENCHUTIL_H
#define SD_BENCHUTIL_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

static inline double bu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A field of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 if absent.
 * Reads into a stack buffer, unbuffered: the only heap use is fopen()'s
 * FILE, freed again at once. */
static inline long bu_status_kb(const char *field)
{
    char buf[8192];
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return -1;
    setvbuf(f, NULL, _IONBF, 0);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    size_t fl = strlen(field);
    for (char *p = buf; p && *p; ) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':')
            return strtol(p + fl + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
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

/* xorshift64*: a fast deterministic PRNG, the same sequence under every
 * allocator for a given seed. */
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

/* Report the final state: VmRSS and VmHWM as this process sees them now,
 * just before it exits.  scripts/compare takes final RSS from here. */
static inline void bu_final(void)
{
    bu_kv_long("final_rss_kb", bu_status_kb("VmRSS"));
    bu_kv_long("peak_rss_kb", bu_status_kb("VmHWM"));
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
