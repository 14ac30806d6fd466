/*
 * tests/malloc_contract.c - the malloc family's contract (glibc's
 * semantics, and slabdefrag's errors): sizes and alignment, errors and
 * errno, free, realloc, calloc, trim.  Written once against `family`
 * (tests/malloc_contract.h) and built into two programs:
 *   test-core   family = sdm_* of the static core     (meson: unit-<name>)
 *   test-libc   family = the libc names of the shared  (meson: api-<name>)
 *               library, the process's own malloc
 *   build/tests/test-libc --filter 'contract/realloc_*' --verbose
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "malloc_contract.h"

void *volatile sink;

/* The allocation `call` fails: NULL, errno ENOMEM (its result goes to
 * sink, so that the compiler keeps the call). */
#define assert_enomem(call)                                                    \
    do {                                                                       \
        errno = 0;                                                             \
        void *r_ = (call);                                                     \
        sink = r_;                                                             \
        cr_assert_null(r_, "%s succeeded", #call);                             \
        cr_assert_eq(errno, ENOMEM, "%s: errno %d", #call, errno);             \
    } while (0)

/* Sizes: every size up to 4 KiB, a sweep to 64 KiB, then large ones. */
static size_t sweep_size(size_t i, int *done)
{
    static const size_t large[] = {
        64 * KiB + 1, 70000, 100 * KiB, 128 * KiB, 256 * KiB - 1, 1 * MiB,
        1 * MiB + 3, 2 * MiB + 1, 5 * MiB, 9 * MiB, 16 * MiB, 33 * MiB + 7, 64 * MiB,
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

Test(contract, malloc_alignment_16_size_sweep)
{
    int done;
    for (size_t i = 0;; i++) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        void *p = family.malloc(n);
        cr_assert_not_null(p, "malloc(%zu) returned NULL", n);
        cr_assert(aligned(p, 16), "malloc(%zu) = %p is not 16-byte aligned", n, p);
        if (n) {
            ((volatile char *)p)[0] = 1;
            ((volatile char *)p)[n - 1] = 2;
        }
        family.free(p);
    }
}

Test(contract, malloc_alignment_16_live_blocks)
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
        keep[k] = family.malloc(n);
        cr_assert_not_null(keep[k], "malloc(%zu) returned NULL", n);
        cr_assert(aligned(keep[k], 16), "malloc(%zu) = %p not 16-aligned", n, keep[k]);
        k++;
    }
    for (size_t i = 0; i < k; i++)
        family.free(keep[i]);
}

Test(contract, calloc_alignment_16_size_sweep)
{
    int done;
    for (size_t i = 0;; i += 7) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        unsigned char *p = family.calloc(1, n);
        cr_assert_not_null(p, "calloc(1, %zu) returned NULL", n);
        cr_assert(aligned(p, 16), "calloc(1, %zu) = %p not 16-aligned", n, (void *)p);
        family.free(p);
    }
}

Test(contract, realloc_alignment_16_size_sweep)
{
    int done;
    void *p = NULL;
    for (size_t i = 0;; i += 3) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        if (n == 0)
            continue;
        void *q = family.realloc(p, n);
        cr_assert_not_null(q, "realloc(%p, %zu) returned NULL", p, n);
        cr_assert(aligned(q, 16), "realloc(.., %zu) = %p not 16-aligned", n, q);
        p = q;
    }
    family.free(p);
}

Test(contract, malloc_usable_size_at_least_requested)
{
    int done;
    for (size_t i = 0;; i++) {
        size_t n = sweep_size(i, &done);
        if (done)
            break;
        unsigned char *p = family.malloc(n);
        cr_assert_not_null(p);
        size_t u = family.usable_size(p);
        cr_assert_geq(u, n, "malloc_usable_size(malloc(%zu)) = %zu", n, u);
        if (u) {   /* every usable byte is writable */
            p[u - 1] = 0x5a;
            p[0] = 0xa5;
        }
        family.free(p);
    }
}

Test(contract, malloc_usable_size_null_is_zero)
{
    cr_assert_eq(family.usable_size(NULL), 0);
}

Test(contract, malloc_zero_returns_unique_pointers)
{
    void *a = family.malloc(0), *b = family.malloc(0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b, "two live malloc(0) blocks share an address");
    family.free(a);
    family.free(b);
}

/* Every power-of-two alignment (below 16: blocks are 16-aligned anyway;
 * posix_memalign's start at sizeof(void *)), sizes around it, then one
 * block aligned past the largest extent alignment. */
static void *memalign_by(const char *fn, size_t a, size_t n)
{
    void *p = NULL;
    if (!strcmp(fn, "posix_memalign")) {
        int r = family.posix_memalign(&p, a, n);
        cr_assert_eq(r, 0, "posix_memalign(%zu, %zu) = %d", a, n, r);
    } else if (!strcmp(fn, "aligned_alloc")) {
        p = family.aligned_alloc(a, n);
    } else {
        p = family.memalign(a, n);
    }
    return p;
}

static void memalign_sweep(const char *fn)
{
    size_t first = strcmp(fn, "posix_memalign") ? 1 : sizeof(void *);
    for (size_t a = first; a <= 4 * MiB; a *= 2) {
        size_t sizes[] = { 0, 1, a / 2, a - 1, a, a + 1, 2 * a + 7, 3 * a > 5 ? 3 * a - 5 : 1 };
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            void *p = memalign_by(fn, a, n);
            cr_assert_not_null(p, "%s(%zu, %zu) returned NULL", fn, a, n);
            cr_assert(aligned(p, a < 16 ? 16 : a), "%s(%zu, %zu) = %p is misaligned", fn,
                      a, n, p);
            size_t u = family.usable_size(p);
            cr_assert_geq(u, n, "%s(%zu, %zu): usable %zu", fn, a, n, u);
            fill(p, n, (unsigned)a);
            cr_assert_eq(check(p, n, (unsigned)a), SIZE_MAX);
            family.free(p);
        }
    }
    size_t big = 16 * MiB;
    void *p = memalign_by(fn, big, 100);
    cr_assert_not_null(p, "%s(%zu, 100) returned NULL", fn, big);
    cr_assert(aligned(p, big), "%s(%zu, 100) = %p is misaligned", fn, big, p);
    family.free(p);
}

Test(contract, posix_memalign_alignment_sweep) { memalign_sweep("posix_memalign"); }
Test(contract, aligned_alloc_alignment_sweep) { memalign_sweep("aligned_alloc"); }
Test(contract, memalign_alignment_sweep) { memalign_sweep("memalign"); }

Test(contract, memalign_size_zero_every_alignment)
{
    /* glibc: a minimal block, aligned, usable and freeable. */
    for (size_t a = 16; a <= 4 * MiB; a *= 2) {
        void *p = family.memalign(a, 0);
        cr_assert_not_null(p, "memalign(%zu, 0) returned NULL", a);
        cr_assert(aligned(p, a), "memalign(%zu, 0) = %p", a, p);
        sink = (void *)family.usable_size(p);
        family.free(p);
        void *q = NULL;
        cr_assert_eq(family.posix_memalign(&q, a, 0), 0, "posix_memalign(%zu, 0)", a);
        cr_assert(aligned(q, a));
        q = family.realloc(q, 10);
        cr_assert_not_null(q, "realloc of posix_memalign(%zu, 0) block", a);
        family.free(q);
    }
}

Test(contract, memalign_small_alignments_live)
{
    /* Many live aligned blocks of one small size: each one aligned, none
     * overlapping (written patterns survive). */
    enum { N = 512 };
    static void *p[N];
    for (size_t a = 32; a <= 4096; a *= 2) {
        for (int i = 0; i < N; i++) {
            p[i] = family.memalign(a, 40);
            cr_assert_not_null(p[i]);
            cr_assert(aligned(p[i], a), "memalign(%zu, 40) = %p misaligned", a, p[i]);
            fill(p[i], 40, (unsigned)i);
        }
        for (int i = 0; i < N; i++) {
            cr_assert_eq(check(p[i], 40, (unsigned)i), SIZE_MAX,
                         "memalign(%zu) block %d overwritten", a, i);
            family.free(p[i]);
        }
    }
}

Test(contract, posix_memalign_sizeof_pointer_alignment)
{
    void *p = NULL;
    cr_assert_eq(family.posix_memalign(&p, sizeof(void *), 100), 0);
    cr_assert_not_null(p);
    cr_assert(aligned(p, sizeof(void *)));
    family.free(p);
}

/* ---- errors ---------------------------------------------------------- */

Test(contract, malloc_huge_enomem)
{
    size_t sizes[] = { SIZE_MAX / 2, SIZE_MAX / 2 + 1, SIZE_MAX - 4096, SIZE_MAX };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        errno = 0;
        void *p = family.malloc(sizes[k]);
        sink = p;
        cr_assert_null(p, "malloc(%zu) succeeded", sizes[k]);
        cr_assert_eq(errno, ENOMEM, "malloc(%zu): errno %d", sizes[k], errno);
    }
}

Test(contract, calloc_overflow_enomem)
{
    struct { size_t n, s; } c[] = {
        { SIZE_MAX, 2 }, { 2, SIZE_MAX }, { SIZE_MAX / 2 + 1, 2 },
        { (size_t)1 << 33, (size_t)1 << 33 }, { (size_t)1 << 40, (size_t)1 << 40 },
        { 65537, SIZE_MAX / 65536 },
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        errno = 0;
        void *p = family.calloc(c[k].n, c[k].s);
        sink = p;
        cr_assert_null(p, "calloc(%zu, %zu) succeeded", c[k].n, c[k].s);
        cr_assert_eq(errno, ENOMEM, "calloc(%zu, %zu): errno %d", c[k].n, c[k].s, errno);
    }
}

Test(contract, calloc_huge_enomem)
{
    assert_enomem(family.calloc(1, SIZE_MAX / 2));
}

Test(contract, reallocarray_overflow_enomem_keeps_block)
{
    char *p = family.malloc(100);
    cr_assert_not_null(p);
    fill(p, 100, 7);
    assert_enomem(family.reallocarray(p, SIZE_MAX / 4, 8));
    cr_assert_eq(check(p, 100, 7), SIZE_MAX, "block changed by failed reallocarray");
    assert_enomem(family.reallocarray(NULL, SIZE_MAX, SIZE_MAX));
    family.free(p);
}

Test(contract, reallocarray_works)
{
    int *p = family.reallocarray(NULL, 10, sizeof(int));
    cr_assert_not_null(p);
    for (int i = 0; i < 10; i++)
        p[i] = i * 3;
    p = family.reallocarray(p, 100000, sizeof(int));
    cr_assert_not_null(p);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(p[i], i * 3);
    cr_assert_geq(family.usable_size(p), 100000 * sizeof(int));
    family.free(p);
}

Test(contract, realloc_huge_enomem_keeps_block)
{
    size_t sizes[] = { 50, 5000, 200000 };
    for (size_t k = 0; k < 3; k++) {
        char *p = family.malloc(sizes[k]);
        cr_assert_not_null(p);
        fill(p, sizes[k], 9);
        errno = 0;
        void *q = family.realloc(p, SIZE_MAX / 2);
        sink = q;
        cr_assert_null(q, "realloc(%zu -> huge) succeeded", sizes[k]);
        cr_assert_eq(errno, ENOMEM);
        cr_assert_eq(check(p, sizes[k], 9), SIZE_MAX, "block of %zu changed", sizes[k]);
        family.free(p);
    }
}

Test(contract, posix_memalign_bad_alignment_einval)
{
    size_t bad[] = { 0, 1, 2, 3, 4, 12, 24, 48, 96, 4095, 4097, sizeof(void *) + 1,
                     ((size_t)1 << 20) + 8 };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        void *p = (void *)0x1234;
        int r = family.posix_memalign(&p, bad[k], 64);
        cr_assert_eq(r, EINVAL, "posix_memalign(align %zu) = %d, want EINVAL", bad[k], r);
        cr_assert_eq(p, (void *)0x1234, "posix_memalign(align %zu) touched *memptr", bad[k]);
    }
}

Test(contract, memalign_bad_alignment_einval)
{
    size_t bad[] = { 0, 3, 24, 48, 4095, 100000 };
    for (int k = 0; k < 6; k++) {
        errno = 0;
        sink = family.memalign(bad[k], 64);
        cr_assert_null(sink, "memalign(%zu) succeeded", bad[k]);
        cr_assert_eq(errno, EINVAL, "memalign(%zu): errno %d", bad[k], errno);
    }
}

Test(contract, posix_memalign_huge_enomem)
{
    size_t aligns[] = { 16, 64, 4096, 1 << 21 };
    for (size_t k = 0; k < 4; k++) {
        void *p = (void *)0x5678;
        int r = family.posix_memalign(&p, aligns[k], SIZE_MAX / 2);
        cr_assert_eq(r, ENOMEM, "posix_memalign(%zu, huge) = %d, want ENOMEM", aligns[k], r);
        cr_assert_eq(p, (void *)0x5678, "posix_memalign(%zu, huge) touched *memptr", aligns[k]);
    }
}

Test(contract, posix_memalign_success_preserves_errno)
{
    void *p;
    errno = 4321;
    cr_assert_eq(family.posix_memalign(&p, 64, 100), 0);
    cr_assert_eq(errno, 4321);
    family.free(p);
}

Test(contract, aligned_alloc_huge_enomem)
{
    assert_enomem(family.aligned_alloc(64, SIZE_MAX / 2));
}

/* ---- free ----------------------------------------------------------- */

Test(contract, free_null_is_noop)
{
    errno = 77;
    family.free(NULL);
    cr_assert_eq(errno, 77);
}

Test(contract, free_preserves_errno)
{
    size_t sizes[] = { 1, 8, 64, 500, 1000, 30000, 32768, 32769, 40000, 100000, 3 * MiB,
                       4 * MiB, 40 * MiB };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        /* Many blocks, so that some frees empty a slab or unmap. */
        enum { N = 64 };
        void *p[N];
        int n = sizes[k] > MiB ? 4 : N;
        for (int i = 0; i < n; i++) {
            p[i] = family.malloc(sizes[k]);
            cr_assert_not_null(p[i]);
            memset(p[i], 1, sizes[k] < 4096 ? sizes[k] : 4096);
        }
        for (int i = 0; i < n; i++) {
            errno = 9999;
            family.free(p[i]);
            cr_assert_eq(errno, 9999, "free() of a %zu-byte block changed errno to %d",
                         sizes[k], errno);
        }
    }
}

Test(contract, free_many_sizes_reverse_order_preserves_errno)
{
    /* Many sizes, freed in reverse order of allocation. */
    enum { N = 2000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = family.malloc((size_t)(i * 37) % 40000 + 1);
        cr_assert_not_null(p[i]);
    }
    for (int i = N - 1; i >= 0; i--) {
        errno = 31337;
        family.free(p[i]);
        cr_assert_eq(errno, 31337);
    }
}

/* ---- realloc -------------------------------------------------------- */

Test(contract, realloc_zero_frees_and_returns_null)
{
    size_t sizes[] = { 1, 100, 5000, 100000 };
    for (size_t k = 0; k < 4; k++) {
        void *p = family.malloc(sizes[k]);
        cr_assert_not_null(p);
        void *q = family.realloc(p, 0);
        cr_assert_null(q, "realloc(p of %zu, 0) = %p, want NULL (glibc frees)", sizes[k], q);
    }
}

Test(contract, realloc_null_zero_returns_valid_pointer)
{
    void *p = family.realloc(NULL, 0);
    cr_assert_not_null(p);
    cr_assert(aligned(p, 16));
    void *q = family.realloc(p, 100);
    cr_assert_not_null(q);
    memset(q, 3, 100);
    family.free(q);
}

Test(contract, realloc_null_is_malloc)
{
    char *p = family.realloc(NULL, 1000);
    cr_assert_not_null(p);
    cr_assert_geq(family.usable_size(p), 1000);
    memset(p, 0, 1000);
    family.free(p);
}

static const size_t rsizes[] = { 1, 16, 17, 100, 1000, 4096, 20000, 32768, 32769,
                                 100000, 5 * MiB };
#define NRS (sizeof rsizes / sizeof rsizes[0])

Test(contract, realloc_preserves_content_all_pairs)
{
    unsigned seed = 1;
    for (size_t i = 0; i < NRS; i++)
        for (size_t j = 0; j < NRS; j++, seed++) {
            size_t from = rsizes[i], to = rsizes[j];
            char *p = family.malloc(from);
            cr_assert_not_null(p);
            fill(p, from, seed);
            char *q = family.realloc(p, to);
            cr_assert_not_null(q, "realloc(%zu -> %zu) returned NULL", from, to);
            size_t keep = from < to ? from : to;
            size_t bad = check(q, keep, seed);
            cr_assert_eq(bad, SIZE_MAX, "realloc(%zu -> %zu): byte %zu lost", from, to, bad);
            cr_assert_geq(family.usable_size(q), to);
            memset(q, 0x77, to);     /* the whole new size is writable */
            family.free(q);
        }
}

Test(contract, realloc_grow_chain_then_shrink_chain)
{
    char *p = family.malloc(rsizes[0]);
    cr_assert_not_null(p);
    fill(p, rsizes[0], 42);
    size_t have = rsizes[0];
    for (size_t i = 1; i < NRS; i++) {
        p = family.realloc(p, rsizes[i]);
        cr_assert_not_null(p);
        size_t bad = check(p, have, 42);
        cr_assert_eq(bad, SIZE_MAX, "grow to %zu: byte %zu lost", rsizes[i], bad);
        fill(p, rsizes[i], 42);
        have = rsizes[i];
    }
    for (size_t i = NRS - 1; i-- > 0;) {
        p = family.realloc(p, rsizes[i]);
        cr_assert_not_null(p);
        size_t bad = check(p, rsizes[i], 42);
        cr_assert_eq(bad, SIZE_MAX, "shrink to %zu: byte %zu lost", rsizes[i], bad);
    }
    family.free(p);
}

Test(contract, realloc_step_by_one_byte)
{
    /* Grow 1 byte at a time through every small class boundary. */
    char *p = NULL;
    for (size_t n = 1; n <= 9000; n++) {
        p = family.realloc(p, n);
        cr_assert_not_null(p);
        p[n - 1] = (char)pat(n - 1, 5);
        if ((n & 511) == 0 || n < 300) {
            size_t bad = check(p, n, 5);
            cr_assert_eq(bad, SIZE_MAX, "at %zu bytes: byte %zu lost", n, bad);
        }
    }
    size_t bad = check(p, 9000, 5);
    cr_assert_eq(bad, SIZE_MAX);
    family.free(p);
}

Test(contract, realloc_of_aligned_block_preserves_content)
{
    void *p = NULL;
    cr_assert_eq(family.posix_memalign(&p, 4096, 3000), 0);
    fill(p, 3000, 11);
    char *q = family.realloc(p, 70000);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 3000, 11), SIZE_MAX);
    q = family.realloc(q, 20);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 20, 11), SIZE_MAX);
    family.free(q);
    cr_assert_eq(family.posix_memalign(&p, 1 << 20, 2 << 20), 0);
    fill(p, 2 << 20, 12);
    q = family.realloc(p, 3 << 20);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 2 << 20, 12), SIZE_MAX);
    family.free(q);
}

/* ---- calloc --------------------------------------------------------- */

Test(contract, calloc_zeroes_reused_memory)
{
    size_t sizes[] = { 1, 8, 16, 24, 64, 100, 256, 1000, 4096, 10000, 32768,
                       32769, 70000, 300000, 3 * MiB };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        int rounds = n > MiB ? 20 : 200;
        for (int r = 0; r < rounds; r++) {
            unsigned char *p = family.malloc(n);
            cr_assert_not_null(p);
            memset(p, 0xAA, family.usable_size(p));
            family.free(p);
            unsigned char *q = family.calloc(1, n);
            cr_assert_not_null(q);
            for (size_t i = 0; i < n; i++)
                if (q[i]) {
                    cr_assert_fail("calloc(1, %zu) round %d: byte %zu is 0x%02x",
                                   n, r, i, q[i]);
                }
            family.free(q);
        }
    }
    /* A sweep of sizes, one round each, as calloc(n, 1). */
    for (int r = 0; r < 50; r++) {
        size_t n = 100 + (size_t)r * 997;
        uint8_t *p = family.malloc(n);
        cr_assert_not_null(p);
        memset(p, 0xAA, n);
        family.free(p);
        uint8_t *q = family.calloc(n, 1);
        cr_assert_not_null(q);
        for (size_t i = 0; i < n; i++)
            if (q[i])
                cr_assert_fail("calloc(%zu, 1): byte %zu = %#x", n, i, q[i]);
        family.free(q);
    }
}

Test(contract, calloc_zeroes_after_many_live_dirty_blocks)
{
    /* Dirty a whole slab's worth, free it all, calloc it all back. */
    enum { N = 3000 };
    static unsigned char *p[N];
    size_t sizes[] = { 48, 208, 1536, 12288 };
    for (size_t k = 0; k < 4; k++) {
        for (int i = 0; i < N; i++) {
            p[i] = family.malloc(sizes[k]);
            cr_assert_not_null(p[i]);
            memset(p[i], 0xAA, sizes[k]);
        }
        for (int i = 0; i < N; i++)
            family.free(p[i]);
        for (int i = 0; i < N; i++) {
            p[i] = family.calloc(sizes[k] / 8, 8);
            cr_assert_not_null(p[i]);
            for (size_t b = 0; b < sizes[k]; b++)
                if (p[i][b])
                    cr_assert_fail("calloc block %d of %zu: byte %zu = 0x%02x",
                                   i, sizes[k], b, p[i][b]);
        }
        for (int i = 0; i < N; i++)
            family.free(p[i]);
    }
}

Test(contract, calloc_large_zeroed_after_reuse)
{
    for (int r = 0; r < 12; r++) {
        /* a stashed extent (r < 2), then extents of the arena */
        size_t n = r < 2 ? 40 * KiB + (size_t)r * 100 * KiB : 2 * MiB + (size_t)r * 4096;
        uint8_t *p = family.malloc(n);
        cr_assert_not_null(p);
        memset(p, 0xAA, n);
        family.free(p);
        uint8_t *q = family.calloc(1, n);
        cr_assert_not_null(q);
        for (size_t i = 0; i < n; i += 512)
            cr_assert_eq(q[i], 0, "large calloc byte %zu not zero", i);
        cr_assert_eq(q[n - 1], 0);
        family.free(q);
    }
}

Test(contract, calloc_zero_sizes)
{
    void *a = family.calloc(0, 10), *b = family.calloc(10, 0), *c = family.calloc(0, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_not_null(c);
    family.free(a);
    family.free(b);
    family.free(c);
}

/* ---- many blocks at once ------------------------------------------- */

Test(contract, many_alloc_free_cycles, .timeout = 120)
{
    enum { LIVE = 4096, OPS = 400000 };
    static uint8_t *live[LIVE];
    static size_t len[LIVE];
    uint64_t rs = 88172645463325252ULL;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rnd(&rs);
        unsigned k = (unsigned)(r % LIVE);
        if (live[k]) {
            size_t bad = check(live[k], len[k] < 64 ? len[k] : 64, k);
            cr_assert_eq(bad, SIZE_MAX, "op %d: slot %u (%zu B) damaged at %zu", op, k,
                         len[k], bad);
            if ((r >> 32) % 8 == 0) {
                size_t n = (r >> 40) % 3000 + 1;
                uint8_t *q = family.realloc(live[k], n);
                cr_assert_not_null(q);
                size_t keep = len[k] < n ? len[k] : n;
                keep = keep < 64 ? keep : 64;
                cr_assert_eq(check(q, keep, k), SIZE_MAX, "realloc lost data");
                live[k] = q;
                len[k] = n;
                fill(q, n < 64 ? n : 64, k);
                continue;
            }
            family.free(live[k]);
            live[k] = NULL;
        } else {
            size_t n = (r >> 20) % 100 < 95 ? (r >> 32) % 1024 + 1 : (r >> 32) % 50000 + 1;
            live[k] = family.malloc(n);
            cr_assert_not_null(live[k]);
            len[k] = n;
            fill(live[k], n < 64 ? n : 64, k);
        }
    }
    for (unsigned k = 0; k < LIVE; k++)
        if (live[k]) {
            cr_assert_eq(check(live[k], len[k] < 64 ? len[k] : 64, k), SIZE_MAX);
            family.free(live[k]);
        }
}

Test(contract, no_overlap_many_live)
{
    enum { N = 20000 };
    static uint8_t *p[N];
    for (int i = 0; i < N; i++) {
        size_t n = (size_t)(i % 97) * 11 + 1;
        p[i] = family.malloc(n);
        cr_assert_not_null(p[i]);
        fill(p[i], n, (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        size_t n = (size_t)(i % 97) * 11 + 1;
        cr_assert_eq(check(p[i], n, (unsigned)i), SIZE_MAX, "block %d overwritten", i);
        family.free(p[i]);
    }
}

/* ---- trim ----------------------------------------------------------- */

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

Test(contract, malloc_trim_returns_memory)
{
    enum { N = 64 * 1024 };
    static void *p[N];
    for (int i = 0; i < N; i++) {          /* 64 Ki x 1000 B = 62.5 MiB */
        p[i] = family.malloc(1000);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x33, 1000);
    }
    void *big = family.malloc(8 * MiB);    /* and an extent of 8 MiB */
    cr_assert_not_null(big);
    memset(big, 1, 8 * MiB);
    size_t peak = rss_bytes();
    for (int i = 0; i < N; i++)
        family.free(p[i]);
    family.free(big);
    int r = family.trim(0);
    cr_assert_eq(r, 1, "malloc_trim after freeing ~70 MiB returned %d", r);
    size_t after = rss_bytes();
    cr_assert_lt(after + 32 * MiB, peak, "RSS %zu KiB after free + malloc_trim, peak %zu KiB",
                 after / 1024, peak / 1024);
    /* The allocator still works. */
    void *q = family.malloc(1000);
    cr_assert_not_null(q);
    memset(q, 1, 1000);
    family.free(q);
}

/* malloc_trim's result says whether it released anything: 1 after frees
 * that left empty slabs and a dirty extent, 0 when called again at once
 * (nothing left), 1 again after one more extent was freed. */
Test(contract, malloc_trim_reports_release)
{
    enum { N = 20000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = family.malloc(2000);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x44, 2000);
    }
    for (int i = 0; i < N; i++)
        family.free(p[i]);
    int r = family.trim(0);
    cr_assert_eq(r, 1, "malloc_trim after freeing 20000 x 2000 B returned %d", r);
    r = family.trim(0);
    cr_assert_eq(r, 0, "malloc_trim with nothing freed since the last one returned %d", r);
    void *b = family.malloc(2 * MiB);
    cr_assert_not_null(b);
    memset(b, 0x55, 2 * MiB);
    family.free(b);
    r = family.trim(0);
    cr_assert_eq(r, 1, "malloc_trim after freeing a 2 MiB block returned %d", r);
}
