/*
 * tests/test_badinput.c - invalid pointers handed to the malloc family.
 *
 * Each bad call runs in a forked child whose stderr goes to a pipe.  The
 * child must die of SIGABRT after printing exactly one line
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

/* ---- children ---------------------------------------------------------- */

static void do_free(void *p) { free_fn(p); }
static void do_realloc(void *p) { void *volatile q = realloc_fn(p, 100); (void)q; }
static void do_usable(void *p) { volatile size_t n = usable_fn(p); (void)n; }
static void do_double_free(void *p) { free_fn(p); free_fn(p); }

/* ---- tests ------------------------------------------------------------- */

Test(api, badinput_free_stack_address)
{
    char buf[256];
    memset(buf, 0, sizeof buf);
    void *p = buf + 32;
    struct child c;
    run_child(do_free, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): invalid pointer", p);
}

Test(api, badinput_free_own_mmap_region)
{
    void *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    struct child c;
    run_child(do_free, m, &c);
    munmap(m, 1 << 16);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): invalid pointer", m);
}

Test(api, badinput_free_own_mmap_segment_aligned)
{
    /* A 4 MiB-aligned address in the test's own mapping: looks like a
     * segment start to a lookup that trusts alignment. */
    size_t len = 12u << 20;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq((void *)m, MAP_FAILED);
    char *a = (char *)(((uintptr_t)m + (4u << 20) - 1) & ~(uintptr_t)((4u << 20) - 1));
    memset(a, 0x5a, 1 << 16);
    void *p = a + 16384 + 64;
    struct child c;
    run_child(do_free, p, &c);
    munmap(m, len);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): invalid pointer", p);
}

Test(api, badinput_free_interior_small)
{
    char *b = malloc_fn(64);
    cr_assert_not_null(b);
    void *p = b + 8;
    struct child c;
    run_child(do_free, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): invalid pointer", p);
    free(b);
}

Test(api, badinput_free_interior_large)
{
    char *b = malloc_fn(1 << 20);
    cr_assert_not_null(b);
    void *p = b + 16;
    struct child c;
    run_child(do_free, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): invalid pointer", p);
    free(b);
}

Test(api, badinput_free_interior_medium)
{
    char *b = malloc_fn(5000);
    cr_assert_not_null(b);
    void *p = b + 2048;
    struct child c;
    run_child(do_free, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): invalid pointer", p);
    free(b);
}

Test(api, badinput_double_free_small)
{
    void *p = malloc_fn(64);
    cr_assert_not_null(p);
    struct child c;
    run_child(do_double_free, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: free(): double free", p);
    free(p);
}

Test(api, badinput_double_free_names_cache)
{
    void *p = malloc_fn(64);
    cr_assert_not_null(p);
    struct child c;
    run_child(do_double_free, p, &c);
    expect_sigabrt(&c);
    char line[1024];
    cr_assert(find_line(&c, "double free", line, sizeof line), "stderr:\n%s", c.err);
    cr_assert(strstr(line, "malloc-64") != NULL, "cache not named: %s", line);
    free(p);
}

Test(api, badinput_double_free_large)
{
    /* A freed large block is no longer a block start: invalid or double. */
    void *p = malloc_fn(1 << 20);
    cr_assert_not_null(p);
    struct child c;
    run_child(do_double_free, p, &c);
    expect_sigabrt(&c);
    char line[1024];
    cr_assert(find_line(&c, "slabdefrag: free(): ", line, sizeof line),
              "stderr:\n%s", c.err);
    const char *needle = strstr(line, "double free") ? "slabdefrag: free(): double free"
                                                     : "slabdefrag: free(): invalid pointer";
    expect_message(&c, needle, p);
}

/* Extents (issue 12).  fn(p) in a child must abort with `msg` and p. */
static void expect_abort(child_fn fn, void *p, const char *msg)
{
    struct child c;
    run_child(fn, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, msg, p);
}

/* One stashed per CPU (up to 256 KiB), one that goes to its arena: each
 * double free is named as such. */
static void double_free_large_exact(size_t n)
{
    void *p = malloc_fn(n);
    cr_assert_not_null(p);
    expect_abort(do_double_free, p, "slabdefrag: free(): double free");
    free(p);
}

Test(api, badinput_double_free_extent_stashed)
{
    double_free_large_exact(100 << 10);
}

Test(api, badinput_double_free_extent)
{
    double_free_large_exact(2 << 20);
}

Test(api, badinput_free_extent_next_page)
{
    /* Page aligned inside a block: not a block start. */
    char *b = malloc_fn(1 << 20);
    cr_assert_not_null(b);
    expect_abort(do_free, b + 4096, "slabdefrag: free(): invalid pointer");
    expect_abort(do_usable, b + 4096, "slabdefrag: malloc_usable_size(): invalid pointer");
    free(b);
}

static void do_free_then_usable(void *p)
{
    free_fn(p);
    volatile size_t n = usable_fn(p);
    (void)n;
}

Test(api, badinput_usable_size_of_freed_extent)
{
    void *p = malloc_fn(300 << 10);
    cr_assert_not_null(p);
    expect_abort(do_free_then_usable, p, "slabdefrag: malloc_usable_size(): invalid pointer");
    free(p);
}

Test(api, badinput_realloc_foreign_pointer)
{
    char buf[128];
    memset(buf, 0, sizeof buf);
    void *p = buf + 16;
    struct child c;
    run_child(do_realloc, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: realloc(): invalid pointer", p);
}

Test(api, badinput_realloc_interior_pointer)
{
    char *b = malloc_fn(64);
    cr_assert_not_null(b);
    void *p = b + 8;
    struct child c;
    run_child(do_realloc, p, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: realloc(): invalid pointer", p);
    free(b);
}

Test(api, badinput_usable_size_foreign_pointer)
{
    void *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    struct child c;
    run_child(do_usable, m, &c);
    munmap(m, 1 << 16);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: malloc_usable_size(): invalid pointer", m);
}

Test(api, badinput_usable_size_stack_pointer)
{
    char buf[64];
    memset(buf, 0, sizeof buf);
    struct child c;
    run_child(do_usable, buf, &c);
    expect_sigabrt(&c);
    expect_message(&c, "slabdefrag: malloc_usable_size(): invalid pointer", buf);
}

/* The harness itself: a child that does nothing wrong must not count. */
static void do_nothing(void *p) { free_fn(p); }

Test(api, badinput_harness_valid_free_exits_cleanly)
{
    void *p = malloc_fn(64);
    struct child c;
    run_child(do_nothing, p, &c);
    cr_assert(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0,
              "a valid free in the child did not exit 0; stderr:\n%s", c.err);
    cr_assert_eq(c.len, 0, "unexpected stderr: %s", c.err);
    free(p);
}
