/*
 * tests/test_core.c - unit tests of the static core (libsdcore.a): the
 * sd_cache_* API of include/slabdefrag.h, slab geometry, large blocks; and
 * the malloc contract (malloc_contract.c) run against the sdm_* family of
 * classes/mallocfam.h.  The program keeps glibc's malloc; only sdm_* and
 * sd_* reach slabdefrag.  This is what the ASan+UBSan build runs.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mallocfam.h"
#include "slabdefrag.h"
#include "validate.h"

#include "malloc_contract.h"
#include "procstatus.h"

/* The malloc contract (malloc_contract.c) runs against the sdm_* entry
 * points. */
static size_t sdm_usable(void *p) { return sdm_usable_size(p); }
static int sdm_trim_pad(size_t pad) { (void)pad; return sdm_trim(); }
MALLOC_FAMILY(sdm_, sdm_memalign, sdm_usable, sdm_trim_pad);

/* ---- sd_cache_* ------------------------------------------------------------ */

Test(unit, cache_create_alloc_free_destroy)
{
    sd_cache *c = sd_cache_create("unit-basic", 40, 0, 0, NULL, NULL);
    cr_assert_not_null(c, "sd_cache_create: %s", strerror(errno));
    enum { N = 5000 };
    static uint8_t *o[N];
    for (int i = 0; i < N; i++) {
        o[i] = sd_cache_alloc(c);
        cr_assert_not_null(o[i]);
        cr_assert(aligned(o[i], 16), "object %p not 16-aligned", (void *)o[i]);
        fill(o[i], 40, (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(check(o[i], 40, (unsigned)i), SIZE_MAX, "object %d overwritten", i);
        sd_cache_free(c, o[i]);
    }
    sd_cache_destroy(c);
}

Test(unit, cache_alignment_and_hwcache)
{
    size_t aligns[] = { 8, 16, 32, 64, 128, 256, 1024, 4096 };
    for (int k = 0; k < (int)(sizeof aligns / sizeof aligns[0]); k++) {
        char name[32];
        snprintf(name, sizeof name, "unit-align-%zu", aligns[k]);
        sd_cache *c = sd_cache_create(name, 24, aligns[k], 0, NULL, NULL);
        cr_assert_not_null(c, "align %zu", aligns[k]);
        void *o[64];
        for (int i = 0; i < 64; i++) {
            o[i] = sd_cache_alloc(c);
            cr_assert_not_null(o[i]);
            cr_assert(aligned(o[i], aligns[k]), "align %zu: %p", aligns[k], o[i]);
        }
        for (int i = 0; i < 64; i++)
            sd_cache_free(c, o[i]);
        sd_cache_destroy(c);
    }
    sd_cache *c = sd_cache_create("unit-hwcache", 24, 0, SD_HWCACHE_ALIGN, NULL, NULL);
    cr_assert_not_null(c);
    void *o[64];
    for (int i = 0; i < 64; i++) {
        o[i] = sd_cache_alloc(c);
        cr_assert(aligned(o[i], 64), "SD_HWCACHE_ALIGN object %p", o[i]);
    }
    for (int i = 0; i < 64; i++)
        sd_cache_free(c, o[i]);
    sd_cache_destroy(c);
}

Test(unit, cache_create_bad_arguments)
{
    struct { const char *name; size_t size, align; unsigned long flags; const char *what; } bad[] = {
        { "unit-bad", 32, 3, 0, "align 3" },
        { "unit-bad", 32, 12, 0, "align 12" },
        { "unit-bad", 32, 24, 0, "align 24" },
        { "unit-bad", 32, 48, 0, "align 48" },
        { "unit-bad", 32, 100, 0, "align 100" },
        { "unit-bad", 32, 4095, 0, "align 4095" },
        { "unit-bad", 32, 8192, 0, "align 8192" },
        { "unit-bad", 0, 0, 0, "size 0" },
        { "unit-bad", 32, 0, 0x100, "unknown flag" },
        { NULL, 32, 0, 0, "no name" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        errno = 0;
        sd_cache *c = sd_cache_create(bad[k].name, bad[k].size, bad[k].align, bad[k].flags,
                                      NULL, NULL);
        cr_assert_null(c, "sd_cache_create accepted %s", bad[k].what);
        cr_assert_eq(errno, EINVAL, "%s: errno %d, want EINVAL", bad[k].what, errno);
    }
}

static void *only_get(sd_cache *s, int nr, void **objs) { (void)s; (void)nr; (void)objs; return NULL; }
static void only_kick(sd_cache *s, int nr, void **objs, void *p) { (void)s; (void)nr; (void)objs; (void)p; }

Test(unit, cache_create_ops_need_both_callbacks)
{
    struct sd_cache_ops ops = { .get = only_get, .kick = NULL };
    errno = 0;
    sd_cache *c = sd_cache_create("unit-halfops", 32, 0, 0, NULL, &ops);
    cr_assert_null(c, "ops with get but no kick accepted");
    cr_assert_eq(errno, EINVAL);
    struct sd_cache_ops ops2 = { .get = NULL, .kick = only_kick };
    errno = 0;
    c = sd_cache_create("unit-halfops", 32, 0, 0, NULL, &ops2);
    cr_assert_null(c, "ops with kick but no get accepted");
    cr_assert_eq(errno, EINVAL);
}

static int ctor_calls;
static void ctor_magic(void *obj)
{
    __atomic_fetch_add(&ctor_calls, 1, __ATOMIC_RELAXED);
    memcpy(obj, "CTOR-MAGIC", 11);
}

Test(unit, cache_ctor_runs_on_objects)
{
    ctor_calls = 0;
    sd_cache *c = sd_cache_create("unit-ctor", 48, 0, 0, ctor_magic, NULL);
    cr_assert_not_null(c);
    enum { N = 300 };
    void *o[N];
    for (int i = 0; i < N; i++) {
        o[i] = sd_cache_alloc(c);
        cr_assert_not_null(o[i]);
        cr_assert(memcmp(o[i], "CTOR-MAGIC", 11) == 0, "object %d not constructed", i);
    }
    cr_assert_geq(ctor_calls, N);
    for (int i = 0; i < N; i++)
        sd_cache_free(c, o[i]);      /* freed in the constructed state */
    for (int i = 0; i < N; i++) {
        o[i] = sd_cache_alloc(c);
        cr_assert(memcmp(o[i], "CTOR-MAGIC", 11) == 0, "reused object %d lost its state", i);
    }
    for (int i = 0; i < N; i++)
        sd_cache_free(c, o[i]);
    sd_cache_destroy(c);
}

struct unit_obj { long a, b; char name[40]; };

Test(unit, cache_macro_and_name_copy)
{
    char name[64];
    strcpy(name, "unit-macro-name");
    sd_cache *c = sd_cache_create(name, sizeof(struct unit_obj), 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(c);
    memset(name, 'X', sizeof name - 1);      /* the name must have been copied */
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(c, &in), 0);
    cr_assert_str_eq(in.name, "unit-macro-name");
    sd_cache_destroy(c);

    sd_cache *m = SD_CACHE(unit_obj, SD_NO_MERGE);
    cr_assert_not_null(m);
    cr_assert_eq(sd_cache_get_info(m, &in), 0);
    cr_assert_str_eq(in.name, "unit_obj");
    cr_assert_eq(in.object_size, sizeof(struct unit_obj));
    struct unit_obj *o = sd_cache_alloc(m);
    cr_assert_not_null(o);
    o->a = 1;
    strcpy(o->name, "x");
    sd_cache_free(m, o);
    sd_cache_destroy(m);
}

Test(unit, cache_long_name_truncated)
{
    char name[200];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    sd_cache *c = sd_cache_create(name, 32, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(c);
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(c, &in), 0);
    cr_assert_eq(strlen(in.name), 47, "name kept %zu bytes, want 47", strlen(in.name));
    cr_assert_eq(strncmp(in.name, name, 47), 0, "the name's first 47 bytes changed");
    sd_cache_destroy(c);
}

Test(unit, cache_get_info_null)
{
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(NULL, &in), -EINVAL);
}

Test(unit, cache_find_malloc_classes)
{
    cr_assert_not_null(sd_cache_find("malloc-16"));
    cr_assert_not_null(sd_cache_find("malloc-64"));
    cr_assert_not_null(sd_cache_find("malloc-32768"));
    cr_assert_null(sd_cache_find("malloc-63"));
    cr_assert_null(sd_cache_find("no-such-cache"));
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(sd_cache_find("malloc-64"), &in), 0);
    cr_assert_eq(in.object_size, 64);
}

/* ---- slab geometry and the pages of sparse slabs -------------------------- */

static void class_geometry(const char *name, size_t slab, size_t objs)
{
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(sd_cache_find(name), &in), 0, "%s", name);
    cr_assert_eq(in.slab_size, slab, "%s: slab %zu, want %zu", name, in.slab_size, slab);
    cr_assert_eq(in.objects_per_slab, objs, "%s: %zu objects, want %zu", name,
                 in.objects_per_slab, objs);
}

Test(unit, malloc_geometry_small_slabs_for_big_classes)
{
    class_geometry("malloc-2048", 4096, 2);     /* a page of 2, as jemalloc */
    class_geometry("malloc-1024", 4096, 4);
    class_geometry("malloc-1792", 4096, 2);     /* 512 B left: 1/8 */
    class_geometry("malloc-1408", 16384, 11);   /* 4 and 8 KiB leave > 1/8 */
    class_geometry("malloc-768", 8192, 10);     /* 512..1023: 8 objects, 8 KiB up */
    class_geometry("malloc-64", 16384, 256);    /* small classes: 16 KiB up */
    class_geometry("malloc-4096", 8192, 2);
}

static int resident(const void *page)
{
    unsigned char v = 0;
    cr_assert_eq(mincore((void *)page, 4096, &v), 0, "mincore: %s", strerror(errno));
    return v & 1;
}

static size_t validate_errors(void)
{
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    struct validate_result r = { 0 };
    cr_assert_eq(validate_all(fd, &r), 0);
    close(fd);
    return r.errors;
}

/* 1408-byte blocks live 11 to a 16 KiB slab, about 3 to a page.  Keep the
 * first block of every slab and free the rest: the slab's other three
 * pages hold no live block and go back to the OS (all but the few slabs
 * whose blocks wait on a per-CPU stack or a thread's ring).  The kept
 * blocks keep their contents, the heap validates, and the pages come back
 * when they are allocated again. */
Test(unit, sparse_slab_free_pages_released_and_reused)
{
    enum { N = 4400, SZ = 1400 };
    static uint8_t *b[N], *again[N];
    for (int i = 0; i < N; i++) {
        b[i] = sdm_malloc(SZ);
        cr_assert_not_null(b[i]);
        fill(b[i], SZ, (unsigned)i);
    }
    size_t kept = 0;
    for (int i = 0; i < N; i++) {
        if (((uintptr_t)b[i] & (16 * KiB - 1)) == 0) {
            kept++;
            continue;
        }
        sdm_free(b[i]);
        b[i] = NULL;
    }
    cr_assert_geq(kept, N / 11 - 8, "%zu slabs' first blocks", kept);
    size_t gone = 0;
    for (int i = 0; i < N; i++) {
        if (!b[i])
            continue;
        if (!resident(b[i] + 3 * 4096) && !resident(b[i] + 2 * 4096))
            gone++;
        cr_assert_eq(check(b[i], SZ, (unsigned)i), SIZE_MAX, "kept block %d changed", i);
        cr_assert(resident(b[i]), "the page of a live block was released");
    }
    cr_assert_geq(gone * 10, kept * 9, "free pages released in %zu of %zu sparse slabs",
                  gone, kept);
    cr_assert_eq(validate_errors(), 0);
    for (int i = 0; i < N; i++) {
        again[i] = sdm_malloc(SZ);
        cr_assert_not_null(again[i]);
        fill(again[i], SZ, (unsigned)(N + i));
    }
    for (int i = 0; i < N; i++) {
        if (b[i])
            cr_assert_eq(check(b[i], SZ, (unsigned)i), SIZE_MAX, "kept block %d changed", i);
        cr_assert_eq(check(again[i], SZ, (unsigned)(N + i)), SIZE_MAX, "new block %d", i);
    }
    cr_assert_eq(validate_errors(), 0);
    for (int i = 0; i < N; i++) {
        sdm_free(again[i]);
        if (b[i])
            sdm_free(b[i]);
    }
    cr_assert_eq(validate_errors(), 0);
}

/* A class whose slabs all empty and fill again, round after round (a
 * batch made by one thread and freed by another): after the first rounds
 * its empty slabs are kept for the next round instead of being released
 * and made again, and
 * once the churn stops they still go back after the decay. */
static size_t class_released(const char *name, size_t *slabs)
{
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(sd_cache_find(name), &in), 0);
    *slabs = in.slabs;
    return in.bytes_released;
}

/* Empty slabs a malloc class keeps, from the JSON statistics. */
static size_t class_empty(const char *name)
{
    int fd = memfd_create("stats", 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sd_stats_print_json(fd), 0);
    off_t n = lseek(fd, 0, SEEK_END);
    static char buf[1 << 20];
    cr_assert_lt((size_t)n, sizeof buf);
    cr_assert_eq(pread(fd, buf, (size_t)n, 0), n);
    buf[n] = 0;
    close(fd);
    char key[64];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    const char *c = strstr(buf, key), *e = c ? strstr(c, "\"empty\":") : NULL;
    cr_assert_not_null(e, "no \"empty\" for %s in the statistics", name);
    return strtoul(e + 8, NULL, 10);
}

Test(unit, churning_class_keeps_its_empty_slabs_until_the_decay)
{
    enum { N = 720, SZ = 440, ROUNDS = 40 };    /* 20 slabs of malloc-448 */
    static void *b[N];
    size_t slabs, before = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (r == 4)
            before = class_released("malloc-448", &slabs);
        for (int i = 0; i < N; i++)
            cr_assert_not_null(b[i] = sdm_malloc(SZ));
        for (int i = 0; i < N; i++)
            sdm_free(b[i]);
    }
    size_t after = class_released("malloc-448", &slabs);
    /* Without the hysteresis each round released about 18 slabs (10 MiB
     * over the 36 rounds); allow two rounds' worth. */
    cr_assert_leq(after - before, 2 * 20 * 16 * KiB,
                  "%zu bytes released over %d rounds of the same churn",
                  after - before, ROUNDS - 4);
    cr_assert_geq(slabs, 10, "only %zu slabs kept", slabs);
    cr_assert_geq(class_empty("malloc-448"), 8, "the churn's empty slabs were not kept");
    /* Quiet for longer than the decay (SLABDEFRAG_DECAY_MS, 1 s): an
     * allocation slow path then gives the idle class's empty slabs back.
     * Waited for as it happens, allocations of another class (4000 blocks
     * of malloc-3072: slow paths) every 50 ms, for up to a minute. */
    static void *t[4000];
    size_t kept = class_empty("malloc-448");
    for (int waited_ms = 0; kept > 1 && waited_ms < 60000; waited_ms += 50) {
        usleep(50 * 1000);
        for (int i = 0; i < 4000; i++)
            cr_assert_not_null(t[i] = sdm_malloc(3000));
        for (int i = 0; i < 4000; i++)
            sdm_free(t[i]);
        kept = class_empty("malloc-448");
    }
    cr_assert_leq(kept, 1, "%zu empty slabs of an idle class kept a minute past the decay",
                  kept);
    cr_assert_eq(validate_errors(), 0);
}

Test(unit, cache_shrink_and_shrink_all)
{
    sd_cache *c = sd_cache_create("unit-shrink", 100, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(c);
    enum { N = 20000 };
    static void *o[N];
    for (int i = 0; i < N; i++) {
        o[i] = sd_cache_alloc(c);
        cr_assert_not_null(o[i]);
        memset(o[i], 1, 100);
    }
    for (int i = 0; i < N; i++)
        sd_cache_free(c, o[i]);
    cr_assert_eq(sd_cache_shrink(c), 0);
    struct sd_cache_info in;
    cr_assert_eq(sd_cache_get_info(c, &in), 0);
    cr_assert_eq(in.objects_inuse, 0);
    cr_assert_gt(in.bytes_released, 0, "shrink of an all-free cache released nothing");
    (void)sd_shrink_all();
    sd_cache_destroy(c);
}

Test(unit, cache_stats_print_names_cache)
{
    sd_cache *c = sd_cache_create("unit-stats-cache", 56, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(c);
    void *o = sd_cache_alloc(c);
    void *m64 = sdm_malloc(64);          /* a cache with no objects may be left out */
    cr_assert_not_null(m64);
    char path[] = "/tmp/sd_unit_stats_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    cr_assert_eq(sd_stats_print(fd), 0);
    off_t n = lseek(fd, 0, SEEK_END);
    cr_assert_gt(n, 0);
    char *buf = calloc(1, (size_t)n + 1);
    cr_assert_eq(pread(fd, buf, (size_t)n, 0), n);
    cr_assert(strstr(buf, "unit-stats-cache") != NULL, "table lacks the cache:\n%s", buf);
    cr_assert(strstr(buf, "malloc-64") != NULL, "table lacks malloc-64:\n%s", buf);
    free(buf);
    close(fd);
    sd_cache_free(c, o);
    sdm_free(m64);
    sd_cache_destroy(c);
}

Test(unit, cache_recreate_after_destroy)
{
    for (int r = 0; r < 50; r++) {
        sd_cache *c = sd_cache_create("unit-recreate", 200, 0, SD_NO_MERGE, NULL, NULL);
        cr_assert_not_null(c, "round %d: %s", r, strerror(errno));
        void *o = sd_cache_alloc(c);
        cr_assert_not_null(o);
        sd_cache_free(c, o);
        sd_cache_destroy(c);
    }
}

/* ---- large blocks: extents ------------------------------------------------ */

#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>

#include "large.h"

static long maps_lines(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    cr_assert_not_null(f);
    long n = 0;
    for (int c; (c = getc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

static size_t rss_kb(void)
{
    long kb = proc_status_kb("VmRSS");
    cr_assert_gt(kb, 0, "no VmRSS in /proc/self/status");
    return (size_t)kb;
}

static void *thread_nop(void *a) { return a; }

Test(unit, large_300k_blocks_few_mappings, .timeout = 300)
{
    /* 300,000 live blocks of 33 KiB..1 MiB (log-uniform), as many freed
     * between them: one mapping per block would pass vm.max_map_count. */
    enum { N = 300000 };
    void **p = calloc(2 * N, sizeof *p);
    cr_assert_not_null(p);
    uint64_t s = 88172645463325252ull;
    long before = maps_lines();
    for (long i = 0; i < 2 * N; i++) {
        uint64_t r = rnd(&s);
        size_t base = 33 * KiB << (r % 5);  /* about as many per doubling */
        size_t n = base + (r >> 8) % base;
        if (n > 1 * MiB)
            n = 1 * MiB;
        p[i] = sdm_malloc(n);
        cr_assert_not_null(p[i], "block %ld of %zu B", i, n);
        if (i % 64 == 0)
            *(char *)p[i] = 1;
    }
    for (long i = 0; i < 2 * N; i += 2)
        sdm_free(p[i]);
    long live = maps_lines();
    struct large_stats st;
    large_get_stats(&st);
    cr_assert_geq(st.extent_blocks, N, "extents in use %zu", st.extent_blocks);
    /* Two mappings a chunk at most: its guard page, and the rest. */
    cr_assert_lt(live - before, 2 * (long)st.chunks + 100,
                 "%ld mappings for %d live blocks (%zu chunks)", live - before, N, st.chunks);
    cr_assert_lt(live - before, 8000, "%ld mappings for %d live blocks", live - before, N);
    cr_assert_leq(st.mappings, 2 * st.chunks + 16, "mappings %zu, chunks %zu", st.mappings,
                  st.chunks);
    /* The process can still make threads, mappings and load libraries. */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, thread_nop, NULL), 0);
    pthread_join(t, NULL);
    void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    munmap(m, 1 << 20);
    void *dl = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(dl, "dlopen: %s", dlerror());
    dlclose(dl);
    for (long i = 1; i < 2 * N; i += 2)
        sdm_free(p[i]);
    free(p);
}

Test(unit, large_freed_block_reused_at_once)
{
    /* A stashed block (up to 256 KiB) and an arena's dirty extent. */
    size_t sizes[] = { 40 * KiB, 200 * KiB, 1 * MiB, 3 * MiB };
    for (unsigned k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        void *guard = sdm_malloc(sizes[k]);     /* keeps p off the top */
        void *p = sdm_malloc(sizes[k]);
        void *after = sdm_malloc(sizes[k]);
        cr_assert(p && guard && after);
        fill(p, sizes[k], 3);
        sdm_free(p);
        void *q = sdm_malloc(sizes[k]);
        cr_assert_eq(q, p, "%zu B: freed %p, got %p", sizes[k], p, q);
        sdm_free(q);
        sdm_free(guard);
        sdm_free(after);
    }
}

/* Three blocks one after another in a fresh chunk region (2 MiB: no stash). */
static void three_adjacent(void **a, size_t n)
{
    for (int tries = 0; tries < 8; tries++) {
        a[0] = sdm_malloc(n);
        a[1] = sdm_malloc(n);
        a[2] = sdm_malloc(n);
        cr_assert(a[0] && a[1] && a[2]);
        if ((char *)a[1] == (char *)a[0] + n && (char *)a[2] == (char *)a[1] + n)
            return;
        /* leak them: the next three come from further on */
    }
    cr_assert_fail("no three adjacent blocks of %zu B", n);
}

Test(unit, large_free_neighbours_coalesce)
{
    void *a[3];
    three_adjacent(a, 2 * MiB);
    void *fence = sdm_malloc(2 * MiB);
    cr_assert_not_null(fence);
    sdm_free(a[0]);
    sdm_free(a[1]);
    /* a[0] and a[1] are one free extent of 4 MiB now */
    void *big = sdm_malloc(4 * MiB);
    cr_assert_eq(big, a[0], "4 MiB at %p, the two freed 2 MiB blocks at %p", big, a[0]);
    sdm_free(big);
    sdm_free(a[2]);
    sdm_free(fence);
}

Test(unit, large_realloc_grows_and_shrinks_in_place)
{
    void *a[3];
    three_adjacent(a, 1 * MiB + 4 * KiB);   /* above the stash bound */
    char *p = a[0];
    fill(p, 1 * MiB, 7);
    sdm_free(a[1]);
    char *q = sdm_realloc(p, 2 * MiB);      /* into a[1]'s pages */
    cr_assert_eq(q, p, "grow moved %p -> %p", (void *)p, (void *)q);
    cr_assert_geq(sdm_usable_size(q), 2 * MiB);
    cr_assert_eq(check(q, 1 * MiB, 7), SIZE_MAX, "contents lost growing");
    q = sdm_realloc(p, 100 * KiB);
    cr_assert_eq(q, p, "shrink moved %p -> %p", (void *)p, (void *)q);
    cr_assert_lt(sdm_usable_size(q), 200 * KiB);
    cr_assert_eq(check(q, 100 * KiB, 7), SIZE_MAX, "contents lost shrinking");
    q = sdm_realloc(p, 2 * MiB);            /* its own tail is free again */
    cr_assert_eq(q, p, "regrow moved %p -> %p", (void *)p, (void *)q);
    cr_assert_eq(check(q, 100 * KiB, 7), SIZE_MAX);
    /* Blocked by a[2]: it moves, with the contents. */
    q = sdm_realloc(p, 4 * MiB);
    cr_assert_neq(q, p);
    cr_assert_eq(check(q, 100 * KiB, 7), SIZE_MAX, "contents lost moving");
    /* Past the extent bound (16 MiB): a huge block, then mremap. */
    q = sdm_realloc(q, 17 * MiB);
    cr_assert_not_null(q);
    cr_assert_eq(check(q, 100 * KiB, 7), SIZE_MAX);
    q = sdm_realloc(q, 40 * MiB);
    cr_assert_eq(check(q, 100 * KiB, 7), SIZE_MAX);
    sdm_free(q);
    sdm_free(a[2]);
}

Test(unit, large_alignments_come_from_extents)
{
    struct large_stats st0, st1;
    void *p[16];
    unsigned k = 0;
    large_get_stats(&st0);
    for (size_t align = 8 * KiB; align <= 2 * MiB; align *= 2) {
        size_t n = 40 * KiB + align / 3;
        p[k] = sdm_memalign(align, n);
        cr_assert_not_null(p[k]);
        cr_assert(aligned(p[k], align), "memalign(%zu) = %p", align, p[k]);
        cr_assert_geq(sdm_usable_size(p[k]), n);
        fill(p[k], n, (unsigned)k);
        k++;
    }
    large_get_stats(&st1);
    cr_assert_eq(st1.extent_blocks - st0.extent_blocks, k, "aligned blocks in extents");
    cr_assert_eq(st1.huge_blocks, st0.huge_blocks, "an aligned block became huge");
    /* Beyond LARGE_ALIGN_MAX: a huge block, still aligned. */
    void *h = sdm_memalign(8 * MiB, 100 * KiB);
    cr_assert(h && aligned(h, 8 * MiB));
    sdm_free(h);
    for (unsigned i = 0; i < k; i++) {
        cr_assert_eq(check(p[i], 40 * KiB, i), SIZE_MAX);
        sdm_free(p[i]);
    }
}

Test(unit, large_trim_purges_free_extents)
{
    enum { N = 64 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = sdm_malloc(1 * MiB);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x5a, 1 * MiB);
    }
    size_t full = rss_kb();
    for (int i = 0; i < N; i++)
        sdm_free(p[i]);
    struct large_stats st;
    large_get_stats(&st);
    size_t purged0 = st.purged_total;
    cr_assert_eq(sdm_trim(), 1, "malloc_trim released nothing");
    large_get_stats(&st);
    cr_assert_eq(st.dirty_bytes, 0, "%zu dirty bytes after trim", st.dirty_bytes);
    cr_assert_eq(st.cached_bytes, 0, "%zu stashed bytes after trim", st.cached_bytes);
    cr_assert_eq(st.extent_blocks, 0);
    cr_assert_geq(st.purged_total - purged0, 1 * MiB);
    size_t after = rss_kb();
    cr_assert_lt(after + 48 * 1024, full, "RSS %zu kB with 64 MiB live, %zu kB after trim",
                 full, after);
    /* Purged extents read back zero: calloc needs no memset, malloc is reused. */
    char *c = sdm_calloc(1, 1 * MiB);
    cr_assert_not_null(c);
    for (size_t i = 0; i < 1 * MiB; i += 512)
        cr_assert_eq(c[i], 0, "calloc byte %zu", i);
    sdm_free(c);
}

Test(unit, large_stats_fields)
{
    void *a = sdm_malloc(100 * KiB), *b = sdm_malloc(2 * MiB), *h = sdm_malloc(20 * MiB);
    cr_assert(a && b && h);
    struct large_stats st;
    large_get_stats(&st);
    cr_assert_geq(st.extent_blocks, 2);
    cr_assert_geq(st.extent_bytes, 2 * MiB + 100 * KiB);
    cr_assert_eq(st.huge_blocks, 1);
    cr_assert_geq(st.chunks, 1);
    cr_assert_eq(st.mappings, 2 * st.chunks + st.huge_blocks + st.huge_cached_maps);  /* a chunk: guard + rest */
    sdm_free(a);                            /* stashed */
    sdm_free(b);                            /* dirty */
    large_get_stats(&st);
    cr_assert_geq(st.cached_blocks, 1);
    cr_assert_geq(st.dirty_bytes, 2 * MiB);
    char buf[8192];
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(sd_stats_print(fds[1]), 0);
    close(fds[1]);
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    const char *l = strstr(buf, "Extents: ");
    cr_assert_not_null(l, "no Extents line:\n%s", buf);
    cr_assert_not_null(strstr(l, " in use ("));
    cr_assert_not_null(strstr(l, " stashed ("));
    cr_assert_not_null(strstr(l, " purged ("));
    cr_assert_not_null(strstr(l, "mappings: "));
    sdm_free(h);
}

/* A thread that allocates from an arena and frees its blocks leaves them
 * dirty or stashed; when it ends and was that arena's last thread, they
 * are all purged at once (core/large.c, as jemalloc does). */
static void *large_churn(void *arg)
{
    (void)arg;
    void *p[16];
    for (int i = 0; i < 16; i++) {
        p[i] = sdm_malloc((size_t)(40 + 60 * i) * KiB);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x33, (size_t)(40 + 60 * i) * KiB);
    }
    for (int i = 0; i < 16; i++)
        sdm_free(p[i]);
    struct large_stats st;
    large_get_stats(&st);
    cr_assert_gt(st.dirty_bytes + st.cached_bytes, 0, "nothing left dirty or stashed");
    return NULL;
}

Test(unit, large_thread_end_purges_its_arena)
{
    /* Threads take arenas in turn: if this one shares its arena with a
     * thread still bound to it (this test's main thread, say), the next
     * one does not. */
    struct large_stats st;
    for (int attempt = 0; attempt < 2; attempt++) {
        sdm_trim();
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, large_churn, NULL), 0);
        pthread_join(t, NULL);
        large_get_stats(&st);
        if (!st.dirty_bytes && !st.cached_bytes)
            return;
    }
    cr_assert_fail("after the thread ended: %zu bytes dirty, %zu stashed",
                   st.dirty_bytes, st.cached_bytes);
}

/* ---- the validator checks owned slabs too ---------------------------------- */

#include <sys/wait.h>

#include "pcpu.h"
#include "segment.h"

/* Owned slabs exist in per-thread mode only, and the mode is read at
 * start-up: in per-CPU mode the test runs itself again, alone, with
 * SLABDEFRAG_PERCPU=0, and passes if that run passes.  1: run it here. */
static int in_per_thread_mode(const char *test)
{
    void *p = sdm_malloc(1);            /* the mode is decided by now */
    sdm_free(p);
    if (!sd_pcpu_on)
        return 1;
    char filter[128];
    snprintf(filter, sizeof filter, "unit/%s", test);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* A fresh environment: Criterion's worker variables would make
         * the new process a worker of this run. */
        char *const argv[] = { "test-core", "--filter", filter, NULL };
        char *const envp[] = { "SLABDEFRAG_PERCPU=0", NULL };
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "%s with SLABDEFRAG_PERCPU=0: status %#x", test, st);
    return 0;
}

/* An ACTIVE slab of this thread, with one object on its local list. */
static struct slab *own_active_slab(sd_cache **cp, void **kept)
{
    sd_cache *c = sd_cache_create("validate-owned", 64, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(c);
    void *a = sd_cache_alloc(c), *b = sd_cache_alloc(c);
    cr_assert(a && b);
    struct slab *s = segment_slab_of(a);
    cr_assert_not_null(s);
    cr_assert_eq(s->state, SLAB_ACTIVE, "state %u, want ACTIVE", s->state);
    sd_cache_free(c, b);                /* onto the slab's local list */
    cr_assert_eq(s->nlocal, 1);
    cr_assert_eq(validate_errors(), 0);
    *cp = c;
    *kept = a;
    return s;
}

Test(unit, validate_checks_inuse_of_active_slabs)
{
    if (!in_per_thread_mode("validate_checks_inuse_of_active_slabs"))
        return;
    sd_cache *c;
    void *a;
    struct slab *s = own_active_slab(&c, &a);
    s->inuse--;                         /* one object lost from the count */
    cr_assert_eq(validate_errors(), 1);
    s->inuse++;
    cr_assert_eq(validate_errors(), 0);
    sd_cache_free(c, a);
}

Test(unit, validate_checks_owners_local_list)
{
    if (!in_per_thread_mode("validate_checks_owners_local_list"))
        return;
    sd_cache *c;
    void *a;
    struct slab *s = own_active_slab(&c, &a);
    s->nlocal++;                        /* the count disagrees with the list */
    cr_assert_eq(validate_errors(), 1);
    s->nlocal--;
    cr_assert_eq(validate_errors(), 0);
    sd_cache_free(c, a);
}

/* ---- batched purges (os_purge_batch) and dirty slots without meshing ----- */

#include "heapfile.h"
#include "os.h"

/* Ranges purged in one batch read back zero; the pages between them keep
 * their bytes; more than OS_BATCH_MAX ranges go in several calls. */
static void purge_batch_check(void)
{
    const size_t pg = SD_PAGE_SIZE;
    const unsigned n = OS_BATCH_MAX + 9;        /* two calls */
    unsigned char *m = mmap(NULL, 2 * n * pg, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    memset(m, 0xa5, 2 * n * pg);
    struct os_range r[OS_BATCH_MAX + 9];
    for (unsigned i = 0; i < n; i++)            /* every other page */
        r[i] = (struct os_range){ m + 2 * i * pg, pg };
    os_purge_batch(r, n);
    for (unsigned i = 0; i < 2 * n; i++) {
        unsigned char want = i % 2 ? 0xa5 : 0;
        cr_assert(m[i * pg] == want && m[i * pg + pg - 1] == want,
                  "page %u reads %#x, want %#x", i, m[i * pg], want);
    }
    os_purge_batch(r, 1);                       /* one range: a madvise */
    os_purge_batch(r, 0);
    munmap(m, 2 * n * pg);
}

Test(unit, purge_batch_zeroes_exactly_its_ranges)
{
    purge_batch_check();
    /* The pidfd is the parent's in a fork child: it opens its own (a
     * process_madvise on the parent's would purge the parent's pages). */
    unsigned char *shared = mmap(NULL, SD_PAGE_SIZE * 2, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(shared, MAP_FAILED);
    memset(shared, 0x5a, SD_PAGE_SIZE * 2);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        purge_batch_check();
        struct os_range r[2] = { { shared, SD_PAGE_SIZE }, { shared + SD_PAGE_SIZE, SD_PAGE_SIZE } };
        os_purge_batch(r, 2);
        _exit(shared[0] == 0 && shared[SD_PAGE_SIZE] == 0 ? 0 : 1);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %#x", st);
    cr_assert(shared[0] == 0x5a && shared[SD_PAGE_SIZE] == 0x5a,
              "the child's purge reached the parent's pages");
    munmap(shared, SD_PAGE_SIZE * 2);
}

/* Without meshing a released slot stays dirty only up to a small bound
 * (a batch for os_purge_batch), a new slab takes a dirty slot back, and a
 * trim purges them all. */
Test(unit, released_slots_stay_dirty_within_the_bound)
{
    struct segment_dirty_stats ds;
    void *first = sdm_malloc(1);        /* meshing is decided by now */
    sdm_free(first);
    if (heapfile_on)
        cr_skip_test("meshing is on (its bound is the arena's)");
    sd_cache *c = sd_cache_create("dirty-bound", 1024, 0, SD_NO_MERGE, NULL, NULL);
    cr_assert_not_null(c);
    enum { N = 4096 };                  /* 4 MiB: 256 slabs of 16 KiB */
    void **p = malloc(N * sizeof *p);
    cr_assert_not_null(p);
    for (int i = 0; i < N; i++) {
        p[i] = sd_cache_alloc(c);
        cr_assert_not_null(p[i]);
        memset(p[i], 0x77, 1024);
    }
    segment_dirty_stats(&ds);
    size_t purged0 = ds.purged_slots, reused0 = ds.reused_slots;
    for (int i = 0; i < N; i++)
        sd_cache_free(c, p[i]);
    sd_cache_shrink(c);                 /* the empties go back to their segments */
    segment_dirty_stats(&ds);
    cr_assert_leq(ds.bytes, ds.cap, "%zu dirty bytes, bound %zu", ds.bytes, ds.cap);
    cr_assert_gt(ds.purged_slots, purged0, "nothing purged past the bound");
    if (ds.bytes) {                     /* a dirty slot is taken first */
        void *q = sd_cache_alloc(c);
        cr_assert_not_null(q);
        segment_dirty_stats(&ds);
        cr_assert_gt(ds.reused_slots, reused0);
        sd_cache_free(c, q);
    }
    sd_cache_destroy(c);
    sdm_trim();
    segment_dirty_stats(&ds);
    cr_assert_eq(ds.bytes, 0, "%zu dirty bytes after a trim", ds.bytes);
    free(p);
}
