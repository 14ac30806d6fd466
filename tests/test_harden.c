/*
 * tests/test_harden.c - hardened free pointers (core/slab.h): a write
 * after free that forges a free object's next pointer is reported and the
 * forged address is never handed out.
 *
 * Each case runs in a forked child (tests/child.h).  The child fills part
 * of a slab, frees all but one object of it, and calls malloc_trim (which
 * empties the per-CPU caches, or the thread's own lists in per-thread
 * mode, onto the slab's freelist, where free objects hold their encoded
 * next pointers).  It then writes a forged pointer over the first word of
 * a freed object - the free pointer of a malloc class - and allocates
 * until the allocator walks that object.  The child must die of SIGABRT
 * after one line:
 *   slabdefrag: heap corruption: free object 0x<victim> of cache <name>
 *   (slab 0x<start>) holds 0x<forged> as its next pointer, which is not an
 *   object of its slab (a write after free?)
 * and no allocation may have returned the forged address.  Forged: a
 * global, a stack address, an object of another slab, and a misaligned
 * address inside the victim's own slab; freed by their owner thread, by
 * another thread, and after sd_vacate() resequenced the slab's freelist.
 * Both modes run these (the suite runs again with SLABDEFRAG_PERCPU=0).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child.h"
#include "slabdefrag.h"

#define OBJ 48
#define FILL 64                 /* objects of one slab: all freed but [0] */
#define VICTIM 10
#define ALLOCS 200000           /* more than any cache's partial slabs hold */

static void *(*volatile malloc_fn)(size_t) = malloc;
static void (*volatile free_fn)(void *) = free;

static char a_global[64];

enum forge { F_GLOBAL, F_STACK, F_OTHER_SLAB, F_MISALIGNED };
enum how { H_OWNER, H_REMOTE };

struct scenario {
    enum forge forge;
    enum how how;
    void *victim;               /* set by the child before it forges */
    void *forged;
};

static void *objs[FILL];

static void *free_range(void *arg)
{
    (void)arg;
    for (int i = 1; i < FILL; i++)
        free_fn(objs[i]);
    return NULL;
}

static void *forged_value(enum forge f, void *victim, void *stack)
{
    switch (f) {
    case F_GLOBAL:     return a_global;
    case F_STACK:      return stack;
    case F_OTHER_SLAB: return malloc_fn(1000);      /* malloc-1008's slab */
    case F_MISALIGNED: return (char *)victim + 8;
    }
    return NULL;
}

/* Allocate until the allocator reaches the forged object (it must abort
 * first); a return of the forged address is reported and exits 3. */
static void allocate_through(void *forged)
{
    for (int i = 0; i < ALLOCS; i++) {
        void *p = malloc_fn(OBJ);
        if (p == forged) {
            fprintf(stderr, "test: malloc returned the forged address %p\n", forged);
            _exit(3);
        }
    }
    _exit(0);                   /* never walked the victim: not hardened */
}

static void forge_child(void *arg)
{
    struct scenario *sc = arg;
    char on_stack[64];
    for (int i = 0; i < FILL; i++)
        objs[i] = malloc_fn(OBJ);
    if (sc->how == H_REMOTE) {
        pthread_t t;
        pthread_create(&t, NULL, free_range, NULL);
        pthread_join(t, NULL);
    } else {
        free_range(NULL);
    }
    malloc_trim(0);             /* every free object onto the slab's freelist */
    sc->victim = objs[VICTIM];
    sc->forged = forged_value(sc->forge, sc->victim, on_stack);
    fprintf(stderr, "test: victim %p forged %p\n", sc->victim, sc->forged);
    fflush(stderr);
    /* The write after free: the free pointer of malloc classes is word 0. */
    *(void *volatile *)sc->victim = sc->forged;
    allocate_through(sc->forged);
}

/* The one report line, checked field by field. */
static void expect_report(const struct child *c, const char *cache, const void *victim,
                          const void *forged)
{
    expect_sigabrt(c);
    char line[1024];
    cr_assert(find_line(c, "heap corruption", line, sizeof line),
              "no heap-corruption report; stderr:\n%s", c->err);
    unsigned long long obj = 0, slab = 0, held = 0;
    char name[64];
    int n = sscanf(line, "slabdefrag: heap corruption: free object 0x%llx of cache %63s "
                         "(slab 0x%llx) holds 0x%llx as its next pointer",
                   &obj, name, &slab, &held);
    cr_assert_eq(n, 4, "report not in the expected form: %s", line);
    cr_assert_str_eq(name, cache, "%s", line);
    cr_assert_eq((uintptr_t)obj, (uintptr_t)victim, "%s", line);
    cr_assert_eq((uintptr_t)held, (uintptr_t)forged, "%s", line);
    cr_assert((uintptr_t)slab <= (uintptr_t)victim &&
              (uintptr_t)victim - (uintptr_t)slab < (256u << 10),
              "slab %#llx does not hold the victim: %s", slab, line);
    cr_assert(strstr(line, ", which is not an object of its slab (a write after free?)"),
              "%s", line);
    cr_assert_null(strstr(c->err, "forged address"), "%s", c->err);
    int lines = 0;
    for (const char *s = c->err; (s = strstr(s, "slabdefrag:")); s++)
        lines++;
    cr_assert_eq(lines, 1, "%d report lines, want one:\n%s", lines, c->err);
}

/* The victim and forged addresses the child announced before the write. */
static void announced(const struct child *c, void **victim, void **forged)
{
    char line[256];
    unsigned long long v = 0, f = 0;
    cr_assert(find_line(c, "test: victim", line, sizeof line), "stderr:\n%s", c->err);
    cr_assert_eq(sscanf(line, "test: victim %llx forged %llx", &v, &f), 2, "%s", line);
    *victim = (void *)(uintptr_t)v;
    *forged = (void *)(uintptr_t)f;
}

static void run_forge(enum forge f, enum how h)
{
    struct scenario sc = { .forge = f, .how = h };
    struct child c;
    run_child(forge_child, &sc, &c);
    void *victim, *forged;
    announced(&c, &victim, &forged);
    if (f == F_GLOBAL)
        cr_assert_eq(forged, (void *)a_global);
    if (f == F_MISALIGNED)
        cr_assert_eq((char *)forged, (char *)victim + 8);
    expect_report(&c, "malloc-48", victim, forged);
}

Test(api, harden_forged_global_owner)         { run_forge(F_GLOBAL, H_OWNER); }
Test(api, harden_forged_stack_owner)          { run_forge(F_STACK, H_OWNER); }
Test(api, harden_forged_other_slab_owner)     { run_forge(F_OTHER_SLAB, H_OWNER); }
Test(api, harden_forged_misaligned_owner)     { run_forge(F_MISALIGNED, H_OWNER); }
Test(api, harden_forged_global_remote)        { run_forge(F_GLOBAL, H_REMOTE); }
Test(api, harden_forged_misaligned_remote)    { run_forge(F_MISALIGNED, H_REMOTE); }

/* ---- after a vacate ------------------------------------------------------
 * A typed cache whose get() refuses every object: sd_vacate() gives the
 * slab back untouched, its freelist resequenced into address order (and
 * re-encoded).  A forged pointer in it is caught as before. */

struct thing { void *word; char pad[56]; };

static void *refuse_get(sd_cache *c, int n, void **objs_)
{
    (void)c;
    for (int i = 0; i < n; i++)
        objs_[i] = NULL;        /* none can be moved or freed */
    return NULL;
}

static void ignore_kick(sd_cache *c, int n, void **objs_, void *priv)
{
    (void)c; (void)n; (void)objs_; (void)priv;
}

static const struct sd_cache_ops refuse_ops = { .get = refuse_get, .kick = ignore_kick };

static void vacate_child(void *arg)
{
    (void)arg;
    sd_cache *c = sd_cache_create("harden-thing", sizeof(struct thing), 0, SD_NO_MERGE,
                                  NULL, &refuse_ops);
    struct thing *t[FILL];
    for (int i = 0; i < FILL; i++)
        t[i] = sd_cache_alloc(c);
    for (int i = 1; i < FILL; i += 2)
        sd_cache_free(c, t[i]);
    sd_cache_shrink(c);         /* this thread's and the CPUs' caches back */
    sd_vacate(t[0]);            /* get() refuses: resequenced, kept */
    fprintf(stderr, "test: victim %p forged %p\n", (void *)t[VICTIM + 1], (void *)a_global);
    fflush(stderr);
    t[VICTIM + 1]->word = a_global;     /* a freed one */
    for (int i = 0; i < ALLOCS; i++)
        if (sd_cache_alloc(c) == (void *)a_global) {
            fprintf(stderr, "test: sd_cache_alloc returned the forged address\n");
            _exit(3);
        }
    _exit(0);
}

Test(api, harden_forged_after_vacate)
{
    struct child c;
    run_child(vacate_child, NULL, &c);
    void *victim, *forged;
    announced(&c, &victim, &forged);
    cr_assert_eq(forged, (void *)a_global);
    expect_report(&c, "harden-thing", victim, forged);
}

/* ---- double free on the fast path --------------------------------------
 * The object freed twice in a row by another thread is the head of the
 * list it goes to (this CPU's stack, or in per-thread mode the slab's
 * shared freelist): reported as a double free, naming the cache. */

static void *free_twice(void *p)
{
    free_fn(p);
    free_fn(p);
    return NULL;
}

static void remote_double_free_child(void *p)
{
    pthread_t t;
    pthread_create(&t, NULL, free_twice, p);
    pthread_join(t, NULL);
}

Test(api, harden_remote_double_free)
{
    void *p = malloc_fn(OBJ);
    cr_assert_not_null(p);
    struct child c;
    run_child(remote_double_free_child, p, &c);
    expect_sigabrt(&c);
    char line[1024], want[128];
    cr_assert(find_line(&c, "double free", line, sizeof line), "stderr:\n%s", c.err);
    snprintf(want, sizeof want, "slabdefrag: free(): double free %p in cache malloc-48", p);
    cr_assert_str_eq(line, want);
    free(p);
}

/* ---- guard pages before out-of-line metadata ---------------------------
 * Slab descriptors live in the header of their 4 MiB segment, page tags
 * of large blocks in the header of their 64 MiB chunk.  The first page of
 * each is a guard: a linear overflow out of the memory below faults there
 * (SIGSEGV) before it reaches a header.  The child writes to that page. */

static void write_first_page(void *region_base)
{
    *(volatile char *)region_base = 1;
}

static void expect_sigsegv(const struct child *c)
{
    char d[96];
    cr_assert(WIFSIGNALED(c->status) && WTERMSIG(c->status) == SIGSEGV,
              "child %s, want SIGSEGV; stderr:\n%s", describe(c->status, d, sizeof d),
              c->err);
}

Test(api, harden_segment_header_behind_guard_page)
{
    void *p = malloc_fn(OBJ);
    cr_assert_not_null(p);
    struct child c;
    run_child(write_first_page, (void *)((uintptr_t)p & ~(uintptr_t)((4u << 20) - 1)), &c);
    expect_sigsegv(&c);
    /* Again: after a fork, which with meshing unprotects or remaps the
     * whole arena, the parent's guard is back. */
    run_child(write_first_page, (void *)((uintptr_t)p & ~(uintptr_t)((4u << 20) - 1)), &c);
    expect_sigsegv(&c);
    free_fn(p);
}

Test(api, harden_chunk_header_behind_guard_page)
{
    void *p = malloc_fn(40 << 10);      /* a large block: an extent of a chunk */
    cr_assert_not_null(p);
    struct child c;
    run_child(write_first_page, (void *)((uintptr_t)p & ~(uintptr_t)((64u << 20) - 1)), &c);
    expect_sigsegv(&c);
    free_fn(p);
}
