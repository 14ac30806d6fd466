/*
 * tests/test_doublefree.c - a double free is caught wherever the block
 * sits: on top of a CPU's stack or deep in it, in a transfer cache, on a
 * thread's lists or on its slab's freelist, freed again by the same thread
 * or by another one (glibc's tst-tcfree2 pattern: free 20 blocks, then the
 * first again).  The child must die of SIGABRT after one line
 *   slabdefrag: <call>(): double free 0x<the block>...
 * A live block whose second word holds the free tag (core/slab.h) is no
 * double free: freed without a report.  Registered per-CPU, with
 * SLABDEFRAG_PERCPU=0 and with meshing (tests/meson.build).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "slabdefrag.h"

static void (*volatile free_fn)(void *) = free;
static void *(*volatile malloc_fn)(size_t) = malloc;

#define NBLOCKS 20

/* The one report line names `call` and the block: "double free", or with
 * `or_invalid`, "invalid pointer" (an extent that was merged into a free
 * neighbour is no block start any more). */
static void expect_report(const struct child *c, const char *call, const void *p,
                          int or_invalid)
{
    char needle[64], line[1024];
    expect_sigabrt(c);
    snprintf(needle, sizeof needle, "slabdefrag: %s(): double free ", call);
    if (or_invalid && !strstr(c->err, needle))
        snprintf(needle, sizeof needle, "slabdefrag: %s(): invalid pointer ", call);
    cr_assert(find_line(c, needle, line, sizeof line), "stderr lacks \"%s\":\n%s", needle,
              c->err);
    char *endp;
    unsigned long long v = strtoull(strstr(line, needle) + strlen(needle), &endp, 16);
    cr_assert_eq((uintptr_t)v, (uintptr_t)p, "report names %#llx, the block was %p: %s", v,
                 p, line);
    int lines = 0;
    for (const char *s = c->err; (s = strstr(s, "slabdefrag:")); s++)
        lines++;
    cr_assert_eq(lines, 1, "%d report lines, want one:\n%s", lines, c->err);
}

static void expect_double_free(const struct child *c, const char *call, const void *p)
{
    expect_report(c, call, p, 0);
}

/* ---- tst-tcfree2: n blocks freed, then `later` more, then the first again */

struct pattern {
    size_t size;
    unsigned later;             /* blocks of the size freed between the two */
    void *first;                /* set by the parent before the fork */
};

static void free_again(void *arg)
{
    struct pattern *t = arg;
    void **more = malloc_fn(sizeof(void *) * (t->later + 1));
    for (unsigned i = 0; i < t->later; i++)
        more[i] = malloc_fn(t->size);
    free_fn(t->first);
    for (unsigned i = 0; i < t->later; i++)
        free_fn(more[i]);
    free_fn(t->first);
}

static void run_pattern(size_t size, unsigned later)
{
    struct pattern t = { size, later, NULL };
    void *blocks[NBLOCKS];
    for (int i = 0; i < NBLOCKS; i++)
        blocks[i] = malloc_fn(size);
    t.first = blocks[0];
    struct child c;
    run_child(free_again, &t, &c);
    expect_report(&c, "free", blocks[0], size > 32768);
    for (int i = 0; i < NBLOCKS; i++)
        free_fn(blocks[i]);
}

/* 19 frees after the first: deep in the stack, not on top.  An extent
 * past its CPU's stash of 8 is merged with its free neighbours. */
Test(doublefree, tcfree2_smallest) { run_pattern(1, NBLOCKS - 1); }
Test(doublefree, tcfree2_64) { run_pattern(64, NBLOCKS - 1); }
Test(doublefree, tcfree2_1000) { run_pattern(1000, NBLOCKS - 1); }
Test(doublefree, tcfree2_largest_class) { run_pattern(32768, NBLOCKS - 1); }
Test(doublefree, tcfree2_extent_stashed) { run_pattern(100 << 10, NBLOCKS - 1); }
Test(doublefree, tcfree2_extent) { run_pattern(2 << 20, NBLOCKS - 1); }
/* Enough frees after it that the block left the stack: a transfer cache,
 * a slab's freelist, a thread's ring. */
Test(doublefree, after_stack_overflow_16) { run_pattern(16, 3000); }
Test(doublefree, after_stack_overflow_256) { run_pattern(256, 3000); }
Test(doublefree, after_stack_overflow_8k) { run_pattern(8192, 300); }

/* ---- freed in one thread, freed again in another ----------------------- */

struct cross {
    size_t size;
    int stay;                   /* the first thread is still alive, idle */
    void *block;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int freed, done;
};

static void *first_free(void *arg)
{
    struct cross *x = arg;
    void *b[NBLOCKS];
    for (int i = 0; i < NBLOCKS; i++)
        b[i] = malloc_fn(x->size);
    x->block = b[0];
    for (int i = 0; i < NBLOCKS; i++)
        free_fn(b[i]);
    pthread_mutex_lock(&x->lock);
    x->freed = 1;
    pthread_cond_broadcast(&x->cond);
    while (x->stay && !x->done)
        pthread_cond_wait(&x->cond, &x->lock);
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

static void cross_child(void *arg)
{
    struct cross *x = arg;
    pthread_t th;
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->cond, NULL);
    pthread_create(&th, NULL, first_free, x);
    pthread_mutex_lock(&x->lock);
    while (!x->freed)
        pthread_cond_wait(&x->cond, &x->lock);
    pthread_mutex_unlock(&x->lock);
    if (!x->stay)
        pthread_join(th, NULL);
    /* The report names the block: the parent cannot know it, so say it. */
    fprintf(stderr, "block %p\n", x->block);
    free_fn(x->block);
}

static void run_cross(size_t size, int stay)
{
    struct cross x = { .size = size, .stay = stay };
    struct child c;
    run_child(cross_child, &x, &c);
    char line[256];
    cr_assert(find_line(&c, "block 0x", line, sizeof line), "stderr:\n%s", c.err);
    void *p = (void *)(uintptr_t)strtoull(line + 6, NULL, 16);
    expect_double_free(&c, "free", p);
}

Test(doublefree, cross_thread_exited_16) { run_cross(16, 0); }
Test(doublefree, cross_thread_exited_500) { run_cross(500, 0); }
Test(doublefree, cross_thread_alive_64) { run_cross(64, 1); }
Test(doublefree, cross_thread_alive_4000) { run_cross(4000, 1); }

/* ---- typed caches: a ctor's objects stay constructed ------------------- */

#define CTOR_SIZE 40
#define CTOR_BYTE 0x5c

static void ctor(void *obj) { memset(obj, CTOR_BYTE, CTOR_SIZE); }

static sd_cache *ctor_cache(void)
{
    static sd_cache *c;
    if (!c)
        c = sd_cache_create("dfree-ctor", CTOR_SIZE, 8, 0, ctor, NULL);
    cr_assert_not_null(c);
    return c;
}

static int constructed(const unsigned char *o)
{
    for (int i = 0; i < CTOR_SIZE; i++)
        if (o[i] != CTOR_BYTE)
            return 0;
    return 1;
}

static void *ctor_objs[NBLOCKS];

static void ctor_free_again(void *arg)
{
    sd_cache *c = arg;
    for (int i = 0; i < NBLOCKS; i++)
        sd_cache_free(c, ctor_objs[i]);
    sd_cache_free(c, ctor_objs[0]);
}

Test(doublefree, ctor_cache_tcfree2)
{
    sd_cache *c = ctor_cache();
    for (int i = 0; i < NBLOCKS; i++)
        ctor_objs[i] = sd_cache_alloc(c);
    struct child ch;
    run_child(ctor_free_again, c, &ch);
    expect_double_free(&ch, "sd_cache_free", ctor_objs[0]);
    for (int i = 0; i < NBLOCKS; i++)
        sd_cache_free(c, ctor_objs[i]);
}

/* Objects freed onto every kind of list come back constructed. */
Test(doublefree, ctor_state_kept_across_free)
{
    sd_cache *c = ctor_cache();
    enum { N = 3000 };
    static void *o[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            o[i] = sd_cache_alloc(c);
            cr_assert(constructed(o[i]), "object %p not constructed (round %d)", o[i],
                      round);
        }
        for (int i = 0; i < N; i++)
            sd_cache_free(c, o[i]);
    }
}

/* A cache with get() whose objects hold their free pointer carries no tag:
 * a free leaves every word but the first as the program left it, so a
 * get() handed an object just taken from a stack reads the program's
 * bytes, not the allocator's. */
static void *ops_get(sd_cache *s, int nr, void **objs)
{
    (void)s;
    for (int i = 0; i < nr; i++)
        objs[i] = NULL;
    return NULL;
}
static void ops_kick(sd_cache *s, int nr, void **objs, void *priv)
{
    (void)s; (void)nr; (void)objs; (void)priv;
}

Test(doublefree, ops_cache_free_leaves_object)
{
    static const struct sd_cache_ops ops = { ops_get, ops_kick };
    sd_cache *c = sd_cache_create("dfree-ops", 64, 8, 0, NULL, &ops);
    cr_assert_not_null(c);
    enum { N = 600 };
    static unsigned char *o[N];
    for (int i = 0; i < N; i++) {
        o[i] = sd_cache_alloc(c);
        memset(o[i], 0x3c, 64);
    }
    for (int i = 0; i < N; i++)
        sd_cache_free(c, o[i]);
    for (int i = 0; i < N; i++)                 /* read after free: a test's privilege */
        for (int k = 8; k < 64; k++)
            cr_assert_eq(((volatile unsigned char *)o[i])[k], 0x3c,
                         "byte %d of freed object %p changed", k, (void *)o[i]);
}

/* ---- no false report ----------------------------------------------------- */

/* The tag, as a freed block holds it (read after free: a test's privilege). */
static uintptr_t read_tag(size_t size)
{
    uintptr_t *p = malloc_fn(size);
    free_fn(p);
    return ((volatile uintptr_t *)p)[1];
}

static void free_live_holding_tag(void *arg)
{
    size_t size = (size_t)(uintptr_t)arg;
    uintptr_t tag = read_tag(size);
    void *keep[NBLOCKS];
    for (int i = 0; i < NBLOCKS; i++) {
        keep[i] = malloc_fn(size);
        ((uintptr_t *)keep[i])[1] = tag;        /* the program's own data */
    }
    for (int i = 0; i < NBLOCKS; i++)
        free_fn(keep[i]);
    for (int i = 0; i < NBLOCKS; i++) {         /* blocks handed out again */
        keep[i] = malloc_fn(size);
        cr_assert_neq(((uintptr_t *)keep[i])[1], tag);
    }
    for (int i = 0; i < NBLOCKS; i++)
        free_fn(keep[i]);
}

static void run_live_tag(size_t size)
{
    struct child c;
    run_child(free_live_holding_tag, (void *)(uintptr_t)size, &c);
    cr_assert(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0,
              "a live block holding the tag was reported; stderr:\n%s", c.err);
    cr_assert_eq(c.len, 0, "unexpected stderr: %s", c.err);
}

Test(doublefree, live_block_holding_tag_16) { run_live_tag(16); }
Test(doublefree, live_block_holding_tag_2000) { run_live_tag(2000); }
