/*
 * tests/prof/twosites.c - a program with two allocation sites for the
 * heap profiler's tests (tests/prof/prof.sh):
 *   packed_site     objects that all stay live, packed in full slabs;
 *   scattered_site  objects of which one in four survives, spread over
 *                   every slab they were allocated in (sparse slabs).
 * It prints "live packed=<bytes> scattered=<bytes>" (the true figures) and
 * "ready", then waits for a line on stdin (time for slabinfo) and exits;
 * with "free", it first frees the scattered survivors.
 *
 *   twosites [scattered_objects [packed_objects [free]]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PACKED_SIZE    64
#define SCATTERED_SIZE 256

static void **packed, **scattered;

__attribute__((noinline)) void packed_site(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        packed[i] = malloc(PACKED_SIZE);
        if (!packed[i])
            abort();
        memset(packed[i], 1, PACKED_SIZE);
    }
}

__attribute__((noinline)) void scattered_site(size_t n)
{
    for (size_t i = 0; i < n; i++) {
        scattered[i] = malloc(SCATTERED_SIZE);
        if (!scattered[i])
            abort();
        memset(scattered[i], 2, SCATTERED_SIZE);
    }
}

static size_t parse(const char *s, size_t dflt)
{
    if (!s)
        return dflt;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || v == 0) {
        fprintf(stderr, "twosites: not a positive count: %s\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    size_t ns = parse(argc > 1 ? argv[1] : NULL, 2000000);
    size_t np = parse(argc > 2 ? argv[2] : NULL, 1000000);
    packed = calloc(np, sizeof *packed);
    scattered = calloc(ns, sizeof *scattered);
    if (!packed || !scattered)
        return 1;
    packed_site(np);
    scattered_site(ns);
    size_t live = 0;
    for (size_t i = 0; i < ns; i++) {
        if (i % 4) {
            free(scattered[i]);
            scattered[i] = NULL;
        } else {
            live++;
        }
    }
    printf("live packed=%zu scattered=%zu\n", np * PACKED_SIZE, live * SCATTERED_SIZE);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        line[0] = 0;
    if (argc > 3 && !strcmp(argv[3], "free"))
        for (size_t i = 0; i < ns; i++)
            free(scattered[i]);
    return 0;
}
