/*
 * bench/demos/demo_util.c - small helpers shared by the cooperating demos:
 * a seeded PRNG, VmRSS from /proc/self/status, argument parsing.
 *
 * Nothing here uses slabdefrag, so the -malloc variants link it too.  The
 * prototypes are repeated at the top of each demo (DEMO_UTIL_PROTOS).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* splitmix64: deterministic, seedable, good enough for workloads. */
#include "demo_util.h"

uint64_t demo_rand(demo_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
uint64_t demo_below(demo_rng *r, uint64_t n)
{
    return n ? demo_rand(r) % n : 0;
}

/* A stateless mix of two words (value generators, checksums). */
uint64_t demo_mix(uint64_t a, uint64_t b)
{
    demo_rng r = { a * 0xd6e8feb86659fd93ULL ^ b };
    return demo_rand(&r);
}

uint64_t demo_fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Fisher-Yates shuffle of 0..n-1 into a[]. */
void demo_permutation(uint32_t *a, size_t n, demo_rng *r)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = demo_below(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* A field of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 if unknown.
 * Reads into a stack buffer: no allocation. */
long demo_status_kb(const char *field)
{
    char buf[8192];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n, len = 0;
    while (len < (ssize_t)sizeof(buf) - 1 &&
           (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += n;
    close(fd);
    buf[len] = '\0';
    size_t fl = strlen(field);
    for (char *p = buf; p && *p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        if (strncmp(p, field, fl) == 0 && p[fl] == ':')
            return strtol(p + fl + 1, NULL, 10);
    }
    return -1;
}

long demo_rss_kb(void) { return demo_status_kb("VmRSS"); }

/* Parse an unsigned number with an optional k/m suffix (x1000, x1000000).
 * Returns 0 on success. */
int demo_parse_u64(const char *s, uint64_t *out)
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
 * or NULL when argv[*i] is not this option. */
const char *demo_opt(int argc, char **argv, int *i,
                                   const char *name)
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

