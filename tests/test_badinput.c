/*
 * tests/test_badinput.c - invalid pointers handed to the malloc family.
 *
 * One table: each Test line names a bad call, where its pointer comes
 * from, what is called with it and the report it must give.  Each bad call
 * runs in a forked child whose stderr goes to a pipe.  The child must die
 * of SIGABRT after printing exactly one line
 *   slabdefrag: <call>(): <description> 0x<address>[ ...]
 * and the address must be the pointer the test passed.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "slabdefrag.h"

/* Called through volatile pointers so that the compiler neither warns
 * about nor folds the bad calls. */
static void (*volatile free_fn)(void *) = free;
static void *(*volatile realloc_fn)(void *, size_t) = realloc;
static size_t (*volatile usable_fn)(void *) = malloc_usable_size;
static void *(*volatile malloc_fn)(size_t) = malloc;

static void expect_message(const struct child *c, const char *needle, const void *addr)
{
    char line[1024];
    cr_assert(find_line(c, needle, line, sizeof line),
              "stderr lacks \"%s\"; stderr was:\n%s", needle, c->err);
    cr_assert(strncmp(line, "slabdefrag: ", 12) == 0,
              "message does not start the line with \"slabdefrag: \": %s", line);
    const char *after = strstr(line, needle) + strlen(needle);
    while (*after == ' ')
        after++;
    cr_assert(after[0] == '0' && after[1] == 'x',
              "no 0x address after \"%s\" in: %s", needle, line);
    char *endp;
    unsigned long long v = strtoull(after + 2, &endp, 16);
    cr_assert(endp != after + 2, "no hex digits in: %s", line);
    cr_assert_eq((uintptr_t)v, (uintptr_t)addr,
                 "message names %#llx, the pointer was %p: %s", v, addr, line);
    /* The report is exactly one line. */
    int lines = 0;
    for (const char *s = c->err; (s = strstr(s, "slabdefrag:")); s++)
        lines++;
    cr_assert_eq(lines, 1, "%d \"slabdefrag:\" lines, want one:\n%s", lines, c->err);
    cr_assert(strchr(strstr(c->err, needle), '\n') != NULL,
              "message is not terminated by a newline: %s", line);
}

/* ---- the calls a child makes ------------------------------------------ */

static void free_once(void *p) { free_fn(p); }
static void reallocate(void *p) { void *volatile q = realloc_fn(p, 100); (void)q; }
static void usable(void *p) { volatile size_t n = usable_fn(p); (void)n; }
static void free_twice(void *p) { free_fn(p); free_fn(p); }
static void free_usable(void *p)
{
    free_fn(p);
    volatile size_t n = usable_fn(p);
    (void)n;
}

/* ---- where the bad pointer comes from ---------------------------------- */

enum source {
    STACK,          /* the test's stack + offset */
    MAPPING,        /* the test's own 64 KiB mmap + offset */
    MAPPING_4M,     /* a 4 MiB-aligned address in the test's own mapping + offset:
                     * looks like a segment start to a lookup that trusts alignment */
    BLOCK,          /* malloc(size) + offset: an interior pointer, or (offset 0)
                     * the block itself for a call that frees it twice */
    SLAB_TAIL,      /* where one more object would start after the last of
                     * malloc(size)'s slab: on the object grid, past the end */
};

struct bad_call {
    enum source from;
    size_t size;                /* BLOCK: bytes malloc'd */
    size_t offset;              /* into the buffer, mapping or block */
    child_fn call;
    const char *report;         /* the one line starts with this, then 0x<pointer> */
    const char *or_report;      /* ... or with this one (NULL: no other) */
    const char *names;          /* the line also holds this (NULL: nothing else) */
};

#define FREE_BAD    "slabdefrag: free(): invalid pointer"
#define FREE_TWICE  "slabdefrag: free(): double free"
#define REALLOC_BAD "slabdefrag: realloc(): invalid pointer"
#define USABLE_BAD  "slabdefrag: malloc_usable_size(): invalid pointer"

/* Make the pointer, run the call in a child, check how it died and what it
 * said, and free what the test made. */
static void run_bad_call(struct bad_call b)
{
    char buf[256];
    memset(buf, 0, sizeof buf);
    char *base = NULL, *m = NULL;
    size_t maplen = 0;
    switch (b.from) {
    case STACK:
        base = buf;
        break;
    case MAPPING:
    case MAPPING_4M:
        maplen = b.from == MAPPING ? 1u << 16 : 12u << 20;
        m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        cr_assert_neq((void *)m, MAP_FAILED);
        base = m;
        if (b.from == MAPPING_4M) {
            base = (char *)(((uintptr_t)m + (4u << 20) - 1) & ~(uintptr_t)((4u << 20) - 1));
            memset(base, 0x5a, 1 << 16);
        }
        break;
    case BLOCK:
    case SLAB_TAIL:
        base = malloc_fn(b.size);
        cr_assert_not_null(base);
        break;
    }
    if (b.from == SLAB_TAIL) {
        char name[32];
        struct sd_cache_info in;
        snprintf(name, sizeof name, "malloc-%zu", malloc_usable_size(base));
        cr_assert_eq(sd_cache_get_info(sd_cache_find(name), &in), 0, "no cache %s", name);
        cr_assert_gt(in.slab_size, in.objects_per_slab * in.object_size,
                     "%s's slabs have no tail", name);
        uintptr_t slab = (uintptr_t)base & ~(uintptr_t)(in.slab_size - 1);
        b.offset = slab + in.objects_per_slab * in.object_size - (uintptr_t)base;
    }
    void *p = base + b.offset;
    struct child c;
    run_child(b.call, p, &c);
    if (m)
        munmap(m, maplen);
    expect_sigabrt(&c);
    const char *report = b.report;
    char line[1024];
    if (b.or_report && find_line(&c, "slabdefrag: ", line, sizeof line) &&
        !strstr(line, b.report))
        report = b.or_report;
    expect_message(&c, report, p);
    if (b.names) {
        cr_assert(find_line(&c, report, line, sizeof line), "stderr:\n%s", c.err);
        cr_assert(strstr(line, b.names) != NULL, "\"%s\" not named: %s", b.names, line);
    }
    if (b.from == BLOCK || b.from == SLAB_TAIL)
        free(base);
}

#define BAD(...) { run_bad_call((struct bad_call){ __VA_ARGS__ }); }

/* ---- the table --------------------------------------------------------- */

/*   name                                     from        size     offset  call         report */
Test(badinput, free_stack_address)            BAD(STACK,      0,          32, free_once,   FREE_BAD)
Test(badinput, free_own_mmap_region)          BAD(MAPPING,    0,           0, free_once,   FREE_BAD)
Test(badinput, free_own_mmap_segment_aligned) BAD(MAPPING_4M, 0,  16384 + 64, free_once,   FREE_BAD)
Test(badinput, free_interior_small)           BAD(BLOCK,      64,          8, free_once,   FREE_BAD)
Test(badinput, free_interior_medium)          BAD(BLOCK,      5000,     2048, free_once,   FREE_BAD)
Test(badinput, free_interior_large)           BAD(BLOCK,      1 << 20,    16, free_once,   FREE_BAD)
/* On the object grid, one past the last object of a 16 KiB slab of 448 B
 * objects (36 of them, 256 B left over): outside the slab's objects. */
Test(badinput, free_past_last_object)         BAD(SLAB_TAIL,  440,         0, free_once,   FREE_BAD)
/* Page aligned inside an extent block: not a block start. */
Test(badinput, free_extent_next_page)         BAD(BLOCK,      1 << 20,  4096, free_once,   FREE_BAD)
Test(badinput, usable_size_extent_next_page)  BAD(BLOCK,      1 << 20,  4096, usable,      USABLE_BAD)
Test(badinput, double_free_small)             BAD(BLOCK,      64,          0, free_twice,  FREE_TWICE)
Test(badinput, double_free_names_cache)       BAD(BLOCK,      64,          0, free_twice,  FREE_TWICE,
                                                  .names = "malloc-64")
/* A freed large block is no longer a block start: invalid or double. */
Test(badinput, double_free_large)             BAD(BLOCK,      1 << 20,     0, free_twice,  FREE_TWICE,
                                                  .or_report = FREE_BAD)
/* Extents: one stashed per CPU (up to 256 KiB), one that goes
 * to its arena; each double free is named as such. */
Test(badinput, double_free_extent_stashed)    BAD(BLOCK,      100 << 10,   0, free_twice,  FREE_TWICE)
Test(badinput, double_free_extent)            BAD(BLOCK,      2 << 20,     0, free_twice,  FREE_TWICE)
Test(badinput, usable_size_of_freed_extent)   BAD(BLOCK,      300 << 10,   0, free_usable, USABLE_BAD)
Test(badinput, realloc_foreign_pointer)       BAD(STACK,      0,          16, reallocate,  REALLOC_BAD)
Test(badinput, realloc_interior_pointer)      BAD(BLOCK,      64,          8, reallocate,  REALLOC_BAD)
Test(badinput, usable_size_foreign_pointer)   BAD(MAPPING,    0,           0, usable,      USABLE_BAD)
Test(badinput, usable_size_stack_pointer)     BAD(STACK,      0,           0, usable,      USABLE_BAD)

/* The harness itself: a child that does nothing wrong must not count. */
static void free_valid(void *p) { free_fn(p); }

Test(badinput, harness_valid_free_exits_cleanly)
{
    void *p = malloc_fn(64);
    struct child c;
    run_child(free_valid, p, &c);
    cr_assert(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0,
              "a valid free in the child did not exit 0; stderr:\n%s", c.err);
    cr_assert_eq(c.len, 0, "unexpected stderr: %s", c.err);
    free(p);
}
