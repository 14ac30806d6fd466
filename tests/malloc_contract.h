/*
 * tests/malloc_contract.h - the malloc contract (tests/malloc_contract.c),
 * written once and run against two families of entry points: the static
 * core's sdm_* (test-core, suite unit: what the sanitizer builds run) and
 * the libc names a preloaded libslabdefrag.so exports (test-libc, suite
 * api).  Each program defines `family`; the pattern helpers are shared
 * with the rest of test_core.c and test_libc.c.
 */
#ifndef SD_TESTS_MALLOC_CONTRACT_H
#define SD_TESTS_MALLOC_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

/* One family of entry points, with the libc signatures. */
struct malloc_family {
    void *(*malloc)(size_t n);
    void (*free)(void *p);
    void *(*calloc)(size_t n, size_t size);
    void *(*realloc)(void *p, size_t n);
    void *(*reallocarray)(void *p, size_t n, size_t size);
    void *(*memalign)(size_t align, size_t n);
    void *(*aligned_alloc)(size_t align, size_t n);
    int (*posix_memalign)(void **out, size_t align, size_t n);
    size_t (*usable_size)(void *p);
    int (*trim)(size_t pad);
};

/* Defined by the program that runs the contract, with MALLOC_FAMILY. */
extern const struct malloc_family family;

/* `family`: the entry points PREFIX##malloc, PREFIX##free ... (PREFIX sdm_,
 * or empty for the libc names), and the three given. */
#define MALLOC_FAMILY(prefix, aligned_alloc_fn, usable_size_fn, trim_fn)       \
    const struct malloc_family family = {                                      \
        .malloc = prefix##malloc,                                              \
        .free = prefix##free,                                                  \
        .calloc = prefix##calloc,                                              \
        .realloc = prefix##realloc,                                            \
        .reallocarray = prefix##reallocarray,                                  \
        .memalign = prefix##memalign,                                          \
        .aligned_alloc = aligned_alloc_fn,                                     \
        .posix_memalign = prefix##posix_memalign,                              \
        .usable_size = usable_size_fn,                                         \
        .trim = trim_fn,                                                       \
    }

/* Keep the compiler from reasoning about the allocator's results. */
extern void *volatile sink;

static inline uint8_t pat(size_t i, unsigned seed)
{
    return (uint8_t)(seed * 131u + i * 31u + (i >> 8) + (i >> 16));
}

static inline void fill(void *p, size_t n, unsigned seed)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = pat(i, seed);
}

/* Index of the first byte that differs from the pattern, or SIZE_MAX. */
static inline size_t check(const void *p, size_t n, unsigned seed)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(i, seed))
            return i;
    return SIZE_MAX;
}

static inline int aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* xorshift64 */
static inline uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
