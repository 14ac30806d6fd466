/*
 * tests/test_libc.c - the libc names of the malloc family, in a program
 * whose whole malloc is slabdefrag (linked with libslabdefrag.so): the
 * malloc contract (malloc_contract.c) run against them, and what only the
 * libc face has: valloc, pvalloc, free_sized, free_aligned_sized, cfree,
 * mallinfo2, the exported symbols, and sd_* seen from such a program.
 *
 * Functions that glibc 2.36 headers lack (free_sized, free_aligned_sized,
 * cfree) are resolved with dlsym so the file also builds against plain
 * glibc for a sanity run:
 *   gcc -O2 -fno-builtin -DTEST_NO_SLABDEFRAG tests/test_libc.c \
 *       tests/malloc_contract.c -o /tmp/t -lcriterion -ldl
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

#include "malloc_contract.h"

/* The malloc contract (malloc_contract.c) runs against the libc names. */
static size_t libc_usable_size(void *p) { return malloc_usable_size(p); }
static int libc_malloc_trim(size_t pad) { return malloc_trim(pad); }
MALLOC_FAMILY(, aligned_alloc, libc_usable_size, libc_malloc_trim);

/* ---- page-aligned ----------------------------------------------------- */

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

/* The frees under test, each called as release(p, size, align). */
static cfree_fn cf;
static free_sized_fn fs;
static free_aligned_sized_fn fas;
static void by_free(void *p, size_t size, size_t align) { free(p); }
static void by_cfree(void *p, size_t size, size_t align) { cf(p); }
static void by_free_sized(void *p, size_t size, size_t align) { fs(p, size); }
static void by_free_aligned_sized(void *p, size_t size, size_t align) { fas(p, align, size); }

/* The distinct addresses of `cycles` (at most CYCLES) cycles of malloc(size),
 * or aligned_alloc(align, size) if align, each block freed by release. */
static size_t cycle_addresses(size_t cycles, size_t size, size_t align,
                              void (*release)(void *p, size_t size, size_t align))
{
    static uintptr_t seen[CYCLES];
    for (size_t i = 0; i < cycles; i++) {
        void *p = align ? aligned_alloc(align, size) : malloc(size);
        cr_assert_not_null(p);
        cr_assert(!align || aligned(p, align));
        seen[i] = (uintptr_t)p;
        release(p, size, align);
    }
    return distinct(seen, cycles);
}

Test(api, free_sized_frees)
{
    fs = (free_sized_fn)dlsym(RTLD_DEFAULT, "free_sized");
    cr_assert_not_null(fs, "free_sized is not exported");
    size_t sizes[] = { 24, 500, 9000, 200000 };
    for (size_t k = 0; k < 4; k++) {
        size_t cycles = sizes[k] > 100000 ? 2000 : CYCLES;
        size_t d = cycle_addresses(cycles, sizes[k], 0, by_free_sized);
        cr_assert_lt(d, cycles / 4, "free_sized(%zu) seems not to free: %zu distinct "
                     "addresses in %zu cycles", sizes[k], d, cycles);
    }
    fs(NULL, 0);
}

Test(api, free_aligned_sized_frees)
{
    fas = (free_aligned_sized_fn)dlsym(RTLD_DEFAULT, "free_aligned_sized");
    cr_assert_not_null(fas, "free_aligned_sized is not exported");
    size_t aligns[] = { 64, 4096, 65536 };
    for (size_t k = 0; k < 3; k++) {
        size_t cycles = aligns[k] > 4096 ? 2000 : CYCLES;
        size_t d = cycle_addresses(cycles, 3 * aligns[k], aligns[k], by_free_aligned_sized);
        cr_assert_lt(d, cycles / 4, "free_aligned_sized(align %zu) seems not to free: "
                     "%zu distinct addresses in %zu cycles", aligns[k], d, cycles);
    }
    fas(NULL, 64, 0);
}

Test(api, cfree_frees)
{
    cf = (cfree_fn)dlsym(RTLD_DEFAULT, "cfree");
    cr_assert_not_null(cf, "cfree is not exported");
    size_t d = cycle_addresses(CYCLES, 300, 0, by_cfree);
    cr_assert_lt(d, CYCLES / 4, "cfree seems not to free: %zu distinct addresses", d);
}

Test(api, plain_free_reuses_memory)
{
    size_t d = cycle_addresses(CYCLES, 300, 0, by_free);
    cr_assert_lt(d, CYCLES / 4, "free seems not to free: %zu distinct addresses", d);
}

/* ---- mallinfo2 --------------------------------------------------------- */

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

