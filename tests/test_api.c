/*
 * tests/test_api.c - the malloc family with glibc's semantics, in a
 * program whose whole malloc is slabdefrag (linked with libslabdefrag.so).
 *
 * Every check is its own Test.  Functions that glibc 2.36 headers lack
 * (free_sized, free_aligned_sized, cfree) are resolved with dlsym so the
 * file also builds against plain glibc for a sanity run:
 *   gcc -O2 -fno-builtin tests/test_api.c -o /tmp/t -lcriterion -ldl
 * (the slabdefrag-specific and free_sized tests then fail, as they should).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef TEST_NO_SLABDEFRAG
#include "slabdefrag.h"
#endif

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

/* Keep the compiler from reasoning about the allocator's results. */
static void *volatile sink;

static inline uint8_t pat(size_t i, unsigned seed)
{
    return (uint8_t)(seed * 131u + i * 31u + (i >> 8) + (i >> 16));
}

static void fill(void *p, size_t n, unsigned seed)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = pat(i, seed);
}

/* Index of the first byte that differs from the pattern, or SIZE_MAX. */
static size_t check(const void *p, size_t n, unsigned seed)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(i, seed))
            return i;
    return SIZE_MAX;
}

static int aligned(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* Sizes: every size up to 4 KiB, a sweep to 64 KiB, then large ones. */
static size_t sweep_size(size_t i, int *done)
{
    static const size_t large[] = {
        64 * KiB + 1, 100 * KiB, 128 * KiB, 256 * KiB - 1, 1 * MiB,
        2 * MiB + 1, 5 * MiB, 16 * MiB, 33 * MiB + 7, 64 * MiB,
    };
    const size_t nmid = (64 * KiB - 4096) / 61;   /* 4096 + k*61 <= 64 KiB */
    *done = 0;
    if (i <= 4096)
        return i;
    i -= 4096;
    if (i <= nmid)
        return 4096 + i * 61;                      /* odd step: all residues */
    i -= nmid + 1;
    if (i < sizeof large / sizeof large[0])
        return large[i];
    *done = 1;
    return 0;
}

/* ---- sizes and alignment ------------------------------------------- */

Test(api, malloc_alignment_16_size_sweep)
{
    int done;
    for (size_t i = 0;; i++) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        void *p = malloc(n);
        cr_assert_not_null(p, "malloc(%zu) returned NULL", n);
        cr_assert(aligned(p, 16), "malloc(%zu) = %p is not 16-byte aligned", n, p);
        if (n) {
            ((volatile char *)p)[0] = 1;
            ((volatile char *)p)[n - 1] = 2;
        }
        free(p);
    }
}

Test(api, malloc_alignment_16_live_blocks)
{
    /* The same sweep with every block kept live (no reuse of one slot). */
    enum { N = 6000 };
    static void *keep[N];
    size_t k = 0;
    int done;
    for (size_t i = 0; k < N; i++) {
        size_t n = sweep_size(i, &done);
        if (done || n > 1 * MiB)
            break;
        keep[k] = malloc(n);
        cr_assert_not_null(keep[k], "malloc(%zu) returned NULL", n);
        cr_assert(aligned(keep[k], 16), "malloc(%zu) = %p not 16-aligned", n, keep[k]);
        k++;
    }
    for (size_t i = 0; i < k; i++)
        free(keep[i]);
}

Test(api, calloc_alignment_16_size_sweep)
{
    int done;
    for (size_t i = 0;; i += 7) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        unsigned char *p = calloc(1, n);
        cr_assert_not_null(p, "calloc(1, %zu) returned NULL", n);
        cr_assert(aligned(p, 16), "calloc(1, %zu) = %p not 16-aligned", n, (void *)p);
        free(p);
    }
}

Test(api, realloc_alignment_16_size_sweep)
{
    int done;
    void *p = NULL;
    for (size_t i = 0;; i += 3) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        if (n == 0)
            continue;
        void *q = realloc(p, n);
        cr_assert_not_null(q, "realloc(%p, %zu) returned NULL", p, n);
        cr_assert(aligned(q, 16), "realloc(.., %zu) = %p not 16-aligned", n, q);
        p = q;
    }
    free(p);
}

Test(api, malloc_usable_size_at_least_requested)
{
    int done;
    for (size_t i = 0;; i++) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        unsigned char *p = malloc(n);
        cr_assert_not_null(p);
        size_t u = malloc_usable_size(p);
        cr_assert_geq(u, n, "malloc_usable_size(malloc(%zu)) = %zu", n, u);
        if (u) {   /* every usable byte is writable */
            p[u - 1] = 0x5a;
            p[0] = 0xa5;
        }
        free(p);
    }
}

Test(api, malloc_usable_size_null_is_zero)
{
    cr_assert_eq(malloc_usable_size(NULL), 0);
}

Test(api, malloc_zero_returns_unique_pointers)
{
    void *a = malloc(0), *b = malloc(0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b, "two live malloc(0) blocks share an address");
    free(a);
    free(b);
}

static void memalign_sweep(const char *fn)
{
    for (size_t a = 16; a <= 4 * MiB; a *= 2) {
        size_t sizes[] = { 1, a / 2, a - 1, a, a + 1, 3 * a - 5 };
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            void *p = NULL;
            if (!strcmp(fn, "posix_memalign")) {
                int r = posix_memalign(&p, a, n);
                cr_assert_eq(r, 0, "posix_memalign(%zu, %zu) = %d", a, n, r);
            } else if (!strcmp(fn, "aligned_alloc")) {
                p = aligned_alloc(a, n);
            } else {
                p = memalign(a, n);
            }
            cr_assert_not_null(p, "%s(%zu, %zu) returned NULL", fn, a, n);
            cr_assert(aligned(p, a), "%s(%zu, %zu) = %p is misaligned", fn, a, n, p);
            size_t u = malloc_usable_size(p);
            cr_assert_geq(u, n, "%s(%zu, %zu): usable %zu", fn, a, n, u);
            fill(p, n, (unsigned)a);
            cr_assert_eq(check(p, n, (unsigned)a), SIZE_MAX);
            free(p);
        }
    }
}

Test(api, posix_memalign_alignment_sweep) { memalign_sweep("posix_memalign"); }
Test(api, aligned_alloc_alignment_sweep) { memalign_sweep("aligned_alloc"); }
Test(api, memalign_alignment_sweep) { memalign_sweep("memalign"); }

Test(api, memalign_size_zero_every_alignment)
{
    /* glibc: a minimal block, aligned, usable and freeable. */
    for (size_t a = 16; a <= 4 * MiB; a *= 2) {
        void *p = memalign(a, 0);
        cr_assert_not_null(p, "memalign(%zu, 0) returned NULL", a);
        cr_assert(aligned(p, a), "memalign(%zu, 0) = %p", a, p);
        sink = (void *)malloc_usable_size(p);
        free(p);
        void *q = NULL;
        cr_assert_eq(posix_memalign(&q, a, 0), 0, "posix_memalign(%zu, 0)", a);
        cr_assert(aligned(q, a));
        q = realloc(q, 10);
        cr_assert_not_null(q, "realloc of posix_memalign(%zu, 0) block", a);
        free(q);
    }
}

Test(api, memalign_small_alignments_live)
{
    /* Many live aligned blocks of one small size: each one aligned, none
     * overlapping (written patterns survive). */
    enum { N = 512 };
    static void *p[N];
    for (size_t a = 32; a <= 4096; a *= 2) {
        for (int i = 0; i < N; i++) {
            p[i] = memalign(a, 40);
            cr_assert_not_null(p[i]);
            cr_assert(aligned(p[i], a), "memalign(%zu, 40) = %p misaligned", a, p[i]);
            fill(p[i], 40, (unsigned)i);
        }
        for (int i = 0; i < N; i++) {
            cr_assert_eq(check(p[i], 40, (unsigned)i), SIZE_MAX,
                         "memalign(%zu) block %d overwritten", a, i);
            free(p[i]);
        }
    }
}

Test(api, posix_memalign_sizeof_pointer_alignment)
{
    void *p = NULL;
    cr_assert_eq(posix_memalign(&p, sizeof(void *), 100), 0);
    cr_assert_not_null(p);
    cr_assert(aligned(p, sizeof(void *)));
    free(p);
}

Test(api, valloc_page_aligned)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t sizes[] = { 1, 100, 4095, 4096, 4097, 40000, 1 << 20 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        void *p = valloc(sizes[k]);
        cr_assert_not_null(p, "valloc(%zu)", sizes[k]);
        cr_assert(aligned(p, (size_t)pg), "valloc(%zu) = %p", sizes[k], p);
        cr_assert_geq(malloc_usable_size(p), sizes[k]);
        memset(p, 0x11, sizes[k]);
        free(p);
    }
}

Test(api, pvalloc_page_aligned_and_rounded)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t sizes[] = { 1, 100, 4095, 4096, 4097, 40000, 1 << 20 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        void *p = pvalloc(n);
        size_t want = (n + pg - 1) / pg * pg;
        cr_assert_not_null(p, "pvalloc(%zu)", n);
        cr_assert(aligned(p, pg), "pvalloc(%zu) = %p", n, p);
        cr_assert_geq(malloc_usable_size(p), want, "pvalloc(%zu): usable %zu < %zu",
                      n, malloc_usable_size(p), want);
        memset(p, 0x22, want);
        free(p);
    }
}

/* ---- errors ---------------------------------------------------------- */

Test(api, malloc_huge_enomem)
{
    size_t sizes[] = { SIZE_MAX / 2, SIZE_MAX / 2 + 1, SIZE_MAX - 4096, SIZE_MAX };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        errno = 0;
        void *p = malloc(sizes[k]);
        sink = p;
        cr_assert_null(p, "malloc(%zu) succeeded", sizes[k]);
        cr_assert_eq(errno, ENOMEM, "malloc(%zu): errno %d", sizes[k], errno);
    }
}

Test(api, calloc_overflow_enomem)
{
    struct { size_t n, s; } c[] = {
        { SIZE_MAX, 2 }, { 2, SIZE_MAX }, { SIZE_MAX / 2 + 1, 2 },
        { (size_t)1 << 33, (size_t)1 << 33 }, { 65537, SIZE_MAX / 65536 },
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        errno = 0;
        void *p = calloc(c[k].n, c[k].s);
        sink = p;
        cr_assert_null(p, "calloc(%zu, %zu) succeeded", c[k].n, c[k].s);
        cr_assert_eq(errno, ENOMEM, "calloc(%zu, %zu): errno %d", c[k].n, c[k].s, errno);
    }
}

Test(api, calloc_huge_enomem)
{
    errno = 0;
    void *p = calloc(1, SIZE_MAX / 2);
    sink = p;
    cr_assert_null(p);
    cr_assert_eq(errno, ENOMEM);
}

Test(api, reallocarray_overflow_enomem_keeps_block)
{
    char *p = malloc(100);
    cr_assert_not_null(p);
    fill(p, 100, 7);
    errno = 0;
    void *q = reallocarray(p, SIZE_MAX / 4, 8);
    sink = q;
    cr_assert_null(q);
    cr_assert_eq(errno, ENOMEM, "errno %d", errno);
    cr_assert_eq(check(p, 100, 7), SIZE_MAX, "block changed by failed reallocarray");
    errno = 0;
    q = reallocarray(NULL, SIZE_MAX, SIZE_MAX);
    sink = q;
    cr_assert_null(q);
    cr_assert_eq(errno, ENOMEM);
    free(p);
}

Test(api, reallocarray_works)
{
    int *p = reallocarray(NULL, 10, sizeof(int));
    cr_assert_not_null(p);
    for (int i = 0; i < 10; i++)
        p[i] = i * 3;
    p = reallocarray(p, 100000, sizeof(int));
    cr_assert_not_null(p);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(p[i], i * 3);
    cr_assert_geq(malloc_usable_size(p), 100000 * sizeof(int));
    free(p);
}

Test(api, realloc_huge_enomem_keeps_block)
{
    size_t sizes[] = { 50, 5000, 200000 };
    for (size_t k = 0; k < 3; k++) {
        char *p = malloc(sizes[k]);
        cr_assert_not_null(p);
        fill(p, sizes[k], 9);
        errno = 0;
        void *q = realloc(p, SIZE_MAX / 2);
        sink = q;
        cr_assert_null(q, "realloc(%zu -> huge) succeeded", sizes[k]);
        cr_assert_eq(errno, ENOMEM);
        cr_assert_eq(check(p, sizes[k], 9), SIZE_MAX, "block of %zu changed", sizes[k]);
        free(p);
    }
}

Test(api, posix_memalign_bad_alignment_einval)
{
    size_t bad[] = { 0, 1, 2, 3, 4, 12, 24, 48, 96, 4095, 4097, sizeof(void *) + 1,
                     ((size_t)1 << 20) + 8 };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        void *p = (void *)0x1234;
        int r = posix_memalign(&p, bad[k], 64);
        cr_assert_eq(r, EINVAL, "posix_memalign(align %zu) = %d, want EINVAL", bad[k], r);
        cr_assert_eq(p, (void *)0x1234, "posix_memalign(align %zu) touched *memptr", bad[k]);
    }
}

Test(api, posix_memalign_huge_enomem)
{
    size_t aligns[] = { 16, 64, 4096, 1 << 21 };
    for (size_t k = 0; k < 4; k++) {
        void *p = (void *)0x5678;
        int r = posix_memalign(&p, aligns[k], SIZE_MAX / 2);
        cr_assert_eq(r, ENOMEM, "posix_memalign(%zu, huge) = %d, want ENOMEM", aligns[k], r);
        cr_assert_eq(p, (void *)0x5678, "posix_memalign(%zu, huge) touched *memptr", aligns[k]);
    }
}

Test(api, posix_memalign_success_preserves_errno)
{
    void *p;
    errno = 4321;
    cr_assert_eq(posix_memalign(&p, 64, 100), 0);
    cr_assert_eq(errno, 4321);
    free(p);
}

Test(api, aligned_alloc_huge_enomem)
{
    errno = 0;
    void *p = aligned_alloc(64, SIZE_MAX / 2);
    sink = p;
    cr_assert_null(p);
    cr_assert_eq(errno, ENOMEM);
}

/* ---- free ----------------------------------------------------------- */

Test(api, free_null_is_noop)
{
    errno = 77;
    free(NULL);
    cr_assert_eq(errno, 77);
}

Test(api, free_preserves_errno)
{
    size_t sizes[] = { 1, 64, 1000, 32768, 32769, 100000, 4 * MiB, 40 * MiB };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        /* Many blocks, so that some frees empty a slab or unmap. */
        enum { N = 64 };
        void *p[N];
        int n = sizes[k] > MiB ? 4 : N;
        for (int i = 0; i < n; i++) {
            p[i] = malloc(sizes[k]);
            cr_assert_not_null(p[i]);
            memset(p[i], 1, sizes[k] < 4096 ? sizes[k] : 4096);
        }
        for (int i = 0; i < n; i++) {
            errno = 9999;
            free(p[i]);
            cr_assert_eq(errno, 9999, "free() of a %zu-byte block changed errno to %d",
                         sizes[k], errno);
        }
    }
}

Test(api, free_many_sizes_reverse_order_preserves_errno)
{
    /* Many sizes, freed in reverse order of allocation. */
    enum { N = 2000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc((size_t)(i * 37) % 40000 + 1);
        cr_assert_not_null(p[i]);
    }
    for (int i = N - 1; i >= 0; i--) {
        errno = 31337;
        free(p[i]);
        cr_assert_eq(errno, 31337);
    }
}

/* ---- realloc -------------------------------------------------------- */

Test(api, realloc_zero_frees_and_returns_null)
{
    size_t sizes[] = { 1, 100, 5000, 100000 };
    for (size_t k = 0; k < 4; k++) {
        void *p = malloc(sizes[k]);
        cr_assert_not_null(p);
        void *q = realloc(p, 0);
        cr_assert_null(q, "realloc(p of %zu, 0) = %p, want NULL (glibc frees)", sizes[k], q);
    }
}

Test(api, realloc_null_zero_returns_valid_pointer)
{
    void *p = realloc(NULL, 0);
    cr_assert_not_null(p);
    cr_assert(aligned(p, 16));
    void *q = realloc(p, 100);
    cr_assert_not_null(q);
    memset(q, 3, 100);
    free(q);
}

Test(api, realloc_null_is_malloc)
{
    char *p = realloc(NULL, 1000);
    cr_assert_not_null(p);
    cr_assert_geq(malloc_usable_size(p), 1000);
    memset(p, 0, 1000);
    free(p);
}

static const size_t rsizes[] = { 1, 16, 17, 100, 1000, 4096, 20000, 32768, 32769,
                                 100000, 5 * MiB };
#define NRS (sizeof rsizes / sizeof rsizes[0])

Test(api, realloc_preserves_content_all_pairs)
{
    unsigned seed = 1;
    for (size_t i = 0; i < NRS; i++)
        for (size_t j = 0; j < NRS; j++, seed++) {
            size_t from = rsizes[i], to = rsizes[j];
            char *p = malloc(from);
            cr_assert_not_null(p);
            fill(p, from, seed);
            char *q = realloc(p, to);
            cr_assert_not_null(q, "realloc(%zu -> %zu) returned NULL", from, to);
            size_t keep = from < to ? from : to;
            size_t bad = check(q, keep, seed);
            cr_assert_eq(bad, SIZE_MAX, "realloc(%zu -> %zu): byte %zu lost", from, to, bad);
            cr_assert_geq(malloc_usable_size(q), to);
            memset(q, 0x77, to);     /* the whole new size is writable */
            free(q);
        }
}

Test(api, realloc_grow_chain_then_shrink_chain)
{
    char *p = malloc(rsizes[0]);
    cr_assert_not_null(p);
    fill(p, rsizes[0], 42);
    size_t have = rsizes[0];
    for (size_t i = 1; i < NRS; i++) {
        p = realloc(p, rsizes[i]);
        cr_assert_not_null(p);
        size_t bad = check(p, have, 42);
        cr_assert_eq(bad, SIZE_MAX, "grow to %zu: byte %zu lost", rsizes[i], bad);
        fill(p, rsizes[i], 42);
        have = rsizes[i];
    }
    for (size_t i = NRS - 1; i-- > 0;) {
        p = realloc(p, rsizes[i]);
        cr_assert_not_null(p);
        size_t bad = check(p, rsizes[i], 42);
        cr_assert_eq(bad, SIZE_MAX, "shrink to %zu: byte %zu lost", rsizes[i], bad);
    }
    free(p);
}

Test(api, realloc_step_by_one_byte)
{
    /* Grow 1 byte at a time through every small class boundary. */
    char *p = NULL;
    for (size_t n = 1; n <= 9000; n++) {
        p = realloc(p, n);
        cr_assert_not_null(p);
        p[n - 1] = (char)pat(n - 1, 5);
        if ((n & 511) == 0 || n < 300) {
            size_t bad = check(p, n, 5);
            cr_assert_eq(bad, SIZE_MAX, "at %zu bytes: byte %zu lost", n, bad);
        }
    }
    size_t bad = check(p, 9000, 5);
    cr_assert_eq(bad, SIZE_MAX);
    free(p);
}

Test(api, realloc_of_aligned_block_preserves_content)
{
    void *p = NULL;
    cr_assert_eq(posix_memalign(&p, 4096, 3000), 0);
    fill(p, 3000, 11);
    char *q = realloc(p, 70000);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 3000, 11), SIZE_MAX);
    q = realloc(q, 20);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 20, 11), SIZE_MAX);
    free(q);
    cr_assert_eq(posix_memalign(&p, 1 << 20, 2 << 20), 0);
    fill(p, 2 << 20, 12);
    q = realloc(p, 3 << 20);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 2 << 20, 12), SIZE_MAX);
    free(q);
}

/* ---- calloc --------------------------------------------------------- */

Test(api, calloc_zeroes_reused_memory)
{
    size_t sizes[] = { 1, 8, 16, 24, 64, 100, 256, 1000, 4096, 10000, 32768,
                       32769, 70000, 300000, 3 * MiB };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        int rounds = n > MiB ? 20 : 200;
        for (int r = 0; r < rounds; r++) {
            unsigned char *p = malloc(n);
            cr_assert_not_null(p);
            memset(p, 0xAA, malloc_usable_size(p));
            free(p);
            unsigned char *q = calloc(1, n);
            cr_assert_not_null(q);
            for (size_t i = 0; i < n; i++)
                if (q[i]) {
                    cr_assert_fail("calloc(1, %zu) round %d: byte %zu is 0x%02x",
                                   n, r, i, q[i]);
                }
            free(q);
        }
    }
}

Test(api, calloc_zeroes_after_many_live_dirty_blocks)
{
    /* Dirty a whole slab's worth, free it all, calloc it all back. */
    enum { N = 3000 };
    static unsigned char *p[N];
    size_t sizes[] = { 48, 208, 1536, 12288 };
    for (size_t k = 0; k < 4; k++) {
        for (int i = 0; i < N; i++) {
            p[i] = malloc(sizes[k]);
            cr_assert_not_null(p[i]);
            memset(p[i], 0xAA, sizes[k]);
        }
        for (int i = 0; i < N; i++)
            free(p[i]);
        for (int i = 0; i < N; i++) {
            p[i] = calloc(sizes[k] / 8, 8);
            cr_assert_not_null(p[i]);
            for (size_t b = 0; b < sizes[k]; b++)
                if (p[i][b])
                    cr_assert_fail("calloc block %d of %zu: byte %zu = 0x%02x",
                                   i, sizes[k], b, p[i][b]);
        }
        for (int i = 0; i < N; i++)
            free(p[i]);
    }
}

Test(api, calloc_zero_sizes)
{
    void *a = calloc(0, 10), *b = calloc(10, 0), *c = calloc(0, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_not_null(c);
    free(a);
    free(b);
    free(c);
}

/* ---- C23 / obsolete frees ------------------------------------------- */

typedef void (*free_sized_fn)(void *, size_t);
typedef void (*free_aligned_sized_fn)(void *, size_t, size_t);
typedef void (*cfree_fn)(void *);

/* Count distinct addresses over many alloc/free cycles: a free that does
 * nothing gives one new address per cycle. */
#define CYCLES 20000

static int addr_cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static size_t distinct(uintptr_t *v, size_t n)
{
    qsort(v, n, sizeof *v, addr_cmp);
    size_t d = n ? 1 : 0;
    for (size_t i = 1; i < n; i++)
        d += v[i] != v[i - 1];
    return d;
}

Test(api, free_sized_frees)
{
    free_sized_fn fs = (free_sized_fn)dlsym(RTLD_DEFAULT, "free_sized");
    cr_assert_not_null(fs, "free_sized is not exported");
    static uintptr_t seen[CYCLES];
    size_t sizes[] = { 24, 500, 9000, 200000 };
    for (size_t k = 0; k < 4; k++) {
        size_t cycles = sizes[k] > 100000 ? 2000 : CYCLES;
        for (size_t i = 0; i < cycles; i++) {
            void *p = malloc(sizes[k]);
            cr_assert_not_null(p);
            seen[i] = (uintptr_t)p;
            fs(p, sizes[k]);
        }
        size_t d = distinct(seen, cycles);
        cr_assert_lt(d, cycles / 4, "free_sized(%zu) seems not to free: %zu distinct "
                     "addresses in %zu cycles", sizes[k], d, cycles);
    }
    fs(NULL, 0);
}

Test(api, free_aligned_sized_frees)
{
    free_aligned_sized_fn fas =
        (free_aligned_sized_fn)dlsym(RTLD_DEFAULT, "free_aligned_sized");
    cr_assert_not_null(fas, "free_aligned_sized is not exported");
    static uintptr_t seen[CYCLES];
    size_t aligns[] = { 64, 4096, 65536 };
    for (size_t k = 0; k < 3; k++) {
        size_t cycles = aligns[k] > 4096 ? 2000 : CYCLES;
        for (size_t i = 0; i < cycles; i++) {
            void *p = aligned_alloc(aligns[k], 3 * aligns[k]);
            cr_assert_not_null(p);
            cr_assert(aligned(p, aligns[k]));
            seen[i] = (uintptr_t)p;
            fas(p, aligns[k], 3 * aligns[k]);
        }
        size_t d = distinct(seen, cycles);
        cr_assert_lt(d, cycles / 4, "free_aligned_sized(align %zu) seems not to free: "
                     "%zu distinct addresses in %zu cycles", aligns[k], d, cycles);
    }
    fas(NULL, 64, 0);
}

Test(api, cfree_frees)
{
    cfree_fn cf = (cfree_fn)dlsym(RTLD_DEFAULT, "cfree");
    cr_assert_not_null(cf, "cfree is not exported");
    static uintptr_t seen[CYCLES];
    for (size_t i = 0; i < CYCLES; i++) {
        void *p = malloc(300);
        cr_assert_not_null(p);
        seen[i] = (uintptr_t)p;
        cf(p);
    }
    size_t d = distinct(seen, CYCLES);
    cr_assert_lt(d, CYCLES / 4, "cfree seems not to free: %zu distinct addresses", d);
}

Test(api, plain_free_reuses_memory)
{
    static uintptr_t seen[CYCLES];
    for (size_t i = 0; i < CYCLES; i++) {
        void *p = malloc(300);
        cr_assert_not_null(p);
        seen[i] = (uintptr_t)p;
        free(p);
    }
    size_t d = distinct(seen, CYCLES);
    cr_assert_lt(d, CYCLES / 4, "free seems not to free: %zu distinct addresses", d);
}

/* ---- malloc_trim / mallinfo2 ----------------------------------------- */

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

Test(api, malloc_trim_returns_memory)
{
    enum { N = 64 * 1024 };
    static void *p[N];
    for (int i = 0; i < N; i++) {          /* 64 Ki x 1000 B = 62.5 MiB */
        p[i] = malloc(1000);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x33, 1000);
    }
    size_t peak = rss_bytes();
    for (int i = 0; i < N; i++)
        free(p[i]);
    int r = malloc_trim(0);
    cr_assert(r == 0 || r == 1, "malloc_trim returned %d", r);
    size_t after = rss_bytes();
    cr_assert_lt(after + 32 * MiB, peak, "RSS %zu KiB after free + malloc_trim, peak %zu KiB",
                 after / 1024, peak / 1024);
    /* The allocator still works. */
    void *q = malloc(1000);
    cr_assert_not_null(q);
    memset(q, 1, 1000);
    free(q);
}

Test(api, malloc_trim_reports_release)
{
    enum { N = 20000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(2000);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x44, 2000);
    }
    for (int i = 0; i < N; i++)
        free(p[i]);
    int r = malloc_trim(0);
    (void)r;  /* 0 is allowed if the memory was already released on free */
    cr_assert(r == 0 || r == 1);
    cr_assert_eq(malloc_trim(0) | 1, 1);
}

Test(api, mallinfo2_counts_live_bytes)
{
    struct mallinfo2 before = mallinfo2();
    enum { N = 2000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(1000);
        cr_assert_not_null(p[i]);
    }
    struct mallinfo2 mid = mallinfo2();
    size_t inuse_b = before.uordblks + before.hblkhd;
    size_t inuse_m = mid.uordblks + mid.hblkhd;
    cr_assert_geq(inuse_m, inuse_b + (size_t)N * 1000,
                  "mallinfo2 in-use %zu -> %zu after %d x 1000 B", inuse_b, inuse_m, N);
    cr_assert_geq(mid.arena + mid.hblkhd, mid.uordblks,
                  "arena %zu + hblkhd %zu < uordblks %zu", mid.arena, mid.hblkhd,
                  mid.uordblks);
    for (int i = 0; i < N; i++)
        free(p[i]);
    struct mallinfo2 after = mallinfo2();
    cr_assert_lt(after.uordblks + after.hblkhd, inuse_m,
                 "mallinfo2 in-use did not drop after free");
}

Test(api, mallinfo2_counts_large_blocks)
{
    struct mallinfo2 before = mallinfo2();
    void *p = malloc(40 * MiB);
    cr_assert_not_null(p);
    struct mallinfo2 mid = mallinfo2();
    cr_assert_geq(mid.uordblks + mid.hblkhd, before.uordblks + before.hblkhd + 40 * MiB,
                  "a 40 MiB block is not counted in uordblks + hblkhd");
    free(p);
}

/* ---- it really is slabdefrag ------------------------------------------ */

#ifndef TEST_NO_SLABDEFRAG
Test(api, malloc_is_slabdefrag_symbol)
{
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info info;
    cr_assert_not_null(m);
    cr_assert(dladdr(m, &info) != 0);
    cr_assert_not_null(info.dli_fname);
    cr_assert(strstr(info.dli_fname, "slabdefrag") != NULL,
              "malloc resolves to %s, not libslabdefrag", info.dli_fname);
}

Test(api, malloc_family_symbols_are_slabdefrag)
{
    static const char *const names[] = {
        "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "malloc_usable_size",
        "free_sized", "free_aligned_sized", "cfree", "malloc_trim", "mallinfo2",
        "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
        "__libc_memalign",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        cr_assert_not_null(f, "%s is not resolvable", names[i]);
        Dl_info info;
        cr_assert(dladdr(f, &info) != 0 && info.dli_fname != NULL, "dladdr(%s)", names[i]);
        cr_assert(strstr(info.dli_fname, "slabdefrag") != NULL,
                  "%s resolves to %s, not libslabdefrag", names[i], info.dli_fname);
    }
}

Test(api, malloc_64_cache_exists)
{
    sd_cache *c = sd_cache_find("malloc-64");
    cr_assert_not_null(c, "sd_cache_find(\"malloc-64\") returned NULL");
    struct sd_cache_info info;
    cr_assert_eq(sd_cache_get_info(c, &info), 0);
    cr_assert_str_eq(info.name, "malloc-64");
    cr_assert_eq(info.object_size, 64);
}

Test(api, malloc_64_blocks_counted_in_cache)
{
    sd_cache *c = sd_cache_find("malloc-64");
    cr_assert_not_null(c);
    struct sd_cache_info a, b;
    cr_assert_eq(sd_cache_get_info(c, &a), 0);
    enum { N = 8192 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(60);
        cr_assert_not_null(p[i]);
    }
    cr_assert_eq(sd_cache_get_info(c, &b), 0);
    cr_assert_geq(b.objects_inuse, a.objects_inuse + N / 2,
                  "malloc-64 objects_inuse %zu -> %zu after %d malloc(60)",
                  a.objects_inuse, b.objects_inuse, N);
    cr_assert_gt(b.slabs, a.slabs);
    for (int i = 0; i < N; i++)
        free(p[i]);
}

Test(api, stats_print_lists_malloc_64)
{
    void *keep = malloc(64);
    char path[] = "/tmp/sd_stats_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    int r = sd_stats_print(fd);
    cr_assert_eq(r, 0, "sd_stats_print = %d", r);
    off_t len = lseek(fd, 0, SEEK_END);
    cr_assert_gt(len, 0, "sd_stats_print wrote nothing");
    char *buf = calloc(1, (size_t)len + 1);
    cr_assert_eq(pread(fd, buf, (size_t)len, 0), len);
    cr_assert(strstr(buf, "malloc-64") != NULL, "no malloc-64 in:\n%s", buf);
    cr_assert(strchr(buf, '\n') != NULL);
    free(buf);
    close(fd);
    free(keep);
}

Test(api, stats_print_bad_fd)
{
    int r = sd_stats_print(-1);
    cr_assert_lt(r, 0, "sd_stats_print(-1) = %d, want -errno", r);
}
#endif
