/*
 * tests/robust/aslimit_prog.c - how much a program gets under an
 * address-space limit (RLIMIT_AS), with whatever malloc it runs under.
 *
 *   aslimit_prog MIB SIZE [set]
 *
 * Allocates blocks of SIZE bytes (a number, or "mix": sizes from 16 B to
 * 1 MiB, log-uniform, from a fixed seed) until malloc returns NULL, and
 * prints the MiB obtained.  With "set" the program lowers RLIMIT_AS to MIB
 * MiB itself, after start-up; without it the limit is expected to be set
 * already (`ulimit -v`), and MIB is only printed back.  At the first NULL
 * it checks what a program relies on:
 *   - errno is ENOMEM;
 *   - calloc, realloc (growing a block), posix_memalign and a second malloc
 *     of the same size fail cleanly too, or succeed: never a crash;
 *   - with one SIZE, after freeing a tenth of the blocks, as many
 *     allocations succeed again (the freed memory is reused, nothing was
 *     lost).  Not with "mix": glibc itself fails that, as its mmap
 *     threshold moves up with the blocks freed.
 * Exit status 0, or 1 with a line on stderr saying what failed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static size_t next_size(size_t fixed)
{
    if (fixed)
        return fixed;
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double u = (double)(rng >> 11) / (double)(1ull << 53);     /* [0, 1) */
    size_t s = 1;
    for (double e = 4.0 + u * 16.0; e >= 1.0; e -= 1.0)        /* 2^4 .. 2^20 */
        s *= 2;
    return s + (size_t)(rng % s);
}

static int fail(const char *what)
{
    fprintf(stderr, "aslimit_prog: %s\n", what);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return fail("usage: aslimit_prog MIB SIZE [set]");
    size_t mib = strtoull(argv[1], NULL, 10);
    size_t fixed = strcmp(argv[2], "mix") ? strtoull(argv[2], NULL, 10) : 0;
    if (argc > 3 && !strcmp(argv[3], "set")) {
        struct rlimit r = { mib << 20, mib << 20 };
        if (setrlimit(RLIMIT_AS, &r))
            return fail("setrlimit failed");
    }
    size_t cap = 1 << 16, n = 0, total = 0;
    void **v = malloc(cap * sizeof *v);
    size_t *sz = malloc(cap * sizeof *sz);
    if (!v || !sz)
        return fail("no memory for the block list");
    for (;;) {
        size_t s = next_size(fixed);
        errno = 0;
        char *p = malloc(s);
        if (!p) {
            if (errno != ENOMEM)
                return fail("malloc returned NULL without ENOMEM");
            break;
        }
        p[0] = 1;
        p[s - 1] = 1;
        if (n == cap) {
            void **nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(p);
                break;
            }
            v = nv;
            size_t *ns = realloc(sz, 2 * cap * sizeof *sz);
            if (!ns) {
                free(p);
                break;
            }
            sz = ns;
            cap *= 2;
        }
        v[n] = p;
        sz[n++] = s;
        total += s;
    }
    /* At the limit: the other entry points fail cleanly (or succeed). */
    size_t s = fixed ? fixed : 4096;
    errno = 0;
    void *q = calloc(1, s);
    if (!q && errno != ENOMEM)
        return fail("calloc returned NULL without ENOMEM");
    free(q);
    if (n) {
        errno = 0;
        void *r = realloc(v[n - 1], sz[n - 1] * 4 + 4096);
        if (!r && errno != ENOMEM)
            return fail("realloc returned NULL without ENOMEM");
        if (r) {
            v[n - 1] = r;
            sz[n - 1] = sz[n - 1] * 4 + 4096;
        }
    }
    void *a = NULL;
    int e = posix_memalign(&a, 4096, s);
    if (e && e != ENOMEM)
        return fail("posix_memalign failed without ENOMEM");
    free(a);
    /* A tenth freed: as much comes back. */
    for (size_t i = 0; fixed && i < n; i += 10) {
        free(v[i]);
        v[i] = NULL;
    }
    for (size_t i = 0; fixed && i < n; i += 10) {
        v[i] = malloc(sz[i]);
        if (!v[i])
            return fail("freed memory could not be allocated again");
    }
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    printf("%zu\n", total >> 20);
    return 0;
}
