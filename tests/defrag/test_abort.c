/*
 * tests/defrag/test_abort.c - usage errors that must be reported by name:
 * get() calling the allocator (abort, never a silent deadlock), and
 * sd_cache_destroy() of a cache that still has objects (report, keep the
 * memory mapped).  Each runs in a forked child whose stderr is captured.
 */
#include "defrag_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

static int keep_sparse(size_t i) { return i == 1 || i == 4 || i == 9; }

/* warm: the calling thread's caches hold objects of the misuse's size, so
 * without the guard the call would be served on the fast path; cold: a
 * size nothing used before, which takes a slow path anyway. */
struct misuse { const char *cache; int mode; int warm; };

static void child_get_misuse(void *arg)
{
    struct misuse *m = arg;
    alarm(20);                          /* a deadlock fails, not hangs */
    sd_cache *s = sd_cache_create(m->cache, sizeof(struct tobj), 0, 0, NULL,
                                  &dt_ops);
    if (!s)
        _exit(10);
    struct sd_cache_info info;
    if (sd_cache_get_info(s, &info))
        _exit(11);
    size_t per = info.objects_per_slab;
    size_t total = 3 * per;
    dt_slots = calloc(total, sizeof(*dt_slots));
    dt_nslots = total;
    for (size_t i = 0; i < total; i++) {
        struct tobj *o = sd_cache_alloc(s);
        if (!o)
            _exit(12);
        tobj_fill(o, (uint32_t)i, 1);
        o->flags |= TOBJ_VALID;
        dt_slots[i] = o;
    }
    for (size_t i = 0; i < per; i++)
        if (!keep_sparse(i))
            dt_free_slot(s, i);
    dt_misuse_size = m->warm ? 40 : 13000;
    if (m->warm) {                      /* this CPU's stack / thread's bin */
        void *w[64];
        for (int i = 0; i < 64; i++)
            w[i] = malloc(dt_misuse_size);
        for (int i = 0; i < 64; i++)
            free(w[i]);
    }
    if (m->mode == GET_CALL_FREE || m->mode == GET_CALL_REALLOC)
        dt_misuse_ptr = malloc(48);
    else if (m->mode == GET_CALL_CACHE_FREE)
        dt_misuse_ptr = dt_slots[total - 1];   /* another slab's object */
    dt_kick_mode = KICK_FREE_ALL;
    dt_get_mode = m->mode;
    int rc = sd_vacate(dt_slots[1]);
    /* Reaching here means the misuse went unnoticed. */
    fprintf(stderr, "child: sd_vacate returned %d, get() called %d times\n",
            rc, dt_get_calls);
    _exit(dt_get_calls ? 20 : 21);
}

static void check_misuse_at(const char *cache, int mode, const char *what, int warm)
{
    char err[8192];
    struct misuse m = { cache, mode, warm };
    int st = dt_run_child(child_get_misuse, &m, err, sizeof(err));
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
              "get() calling %s: child %s %d, expected SIGABRT; stderr:\n%s",
              what, WIFSIGNALED(st) ? "killed by signal" : "exited with",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), err);
    cr_expect(strstr(err, "slabdefrag:") != NULL,
              "no 'slabdefrag:' in stderr:\n%s", err);
    cr_expect(strstr(err, "get()") != NULL, "no 'get()' in stderr:\n%s", err);
    cr_expect(strstr(err, cache) != NULL, "cache name %s not in stderr:\n%s",
              cache, err);
}

static void check_misuse(const char *cache, int mode, const char *what)
{
    check_misuse_at(cache, mode, what, 1);
    check_misuse_at(cache, mode, what, 0);
}

Test(defrag, get_calling_calloc_aborts_naming_cache)
{
    check_misuse("misuse_calloc_cache", GET_CALL_CALLOC, "calloc()");
}

Test(defrag, get_calling_realloc_aborts_naming_cache)
{
    check_misuse("misuse_realloc_cache", GET_CALL_REALLOC, "realloc()");
}

Test(defrag, get_calling_free_of_malloc_aborts_naming_cache)
{
    check_misuse("misuse_free_malloc_cache", GET_CALL_FREE_MALLOC, "free(malloc())");
}

Test(defrag, get_calling_malloc_aborts_naming_cache)
{
    check_misuse("misuse_malloc_cache", GET_CALL_MALLOC, "malloc()");
}

Test(defrag, get_calling_sd_cache_alloc_aborts_naming_cache)
{
    check_misuse("misuse_cache_alloc_cache", GET_CALL_CACHE_ALLOC,
                 "sd_cache_alloc()");
}

Test(defrag, get_calling_free_aborts_naming_cache)
{
    check_misuse("misuse_free_cache", GET_CALL_FREE, "free()");
}

Test(defrag, get_calling_sd_cache_free_aborts_naming_cache)
{
    check_misuse("misuse_cache_free_cache", GET_CALL_CACHE_FREE,
                 "sd_cache_free()");
}

/* ------------------------------------------- destroy with live objects */

#define LEAK_NAME "leaky_widget_cache"

static void child_destroy_live(void *arg)
{
    (void)arg;
    alarm(20);
    sd_cache *s = sd_cache_create(LEAK_NAME, 200, 0, SD_NO_MERGE, NULL, NULL);
    if (!s)
        _exit(10);
    enum { N = 300 };
    unsigned char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = sd_cache_alloc(s);
        if (!p[i])
            _exit(11);
        memset(p[i], (i * 7) & 0xff, 200);
    }
    for (int i = 0; i < N; i += 2)             /* some freed, some live */
        sd_cache_free(s, p[i]);
    sd_cache_destroy(s);
    /* Live objects stay mapped and intact. */
    for (int i = 1; i < N; i += 2)
        for (int j = 0; j < 200; j++)
            if (p[i][j] != ((i * 7) & 0xff))
                _exit(12);
    _exit(0);
}

Test(defrag, destroy_with_live_objects_reports_and_keeps_memory)
{
    char err[8192];
    int st = dt_run_child(child_destroy_live, NULL, err, sizeof(err));
    cr_assert(WIFEXITED(st), "child killed by signal %d; stderr:\n%s",
              WIFSIGNALED(st) ? WTERMSIG(st) : 0, err);
    cr_assert_eq(WEXITSTATUS(st), 0, "child exit %d (12: live objects damaged "
                 "or unmapped); stderr:\n%s", WEXITSTATUS(st), err);
    cr_expect(strstr(err, LEAK_NAME) != NULL,
              "destroy of a cache with live objects did not name it; stderr:\n%s",
              err);
}

static void child_destroy_empty(void *arg)
{
    (void)arg;
    alarm(20);
    sd_cache *s = sd_cache_create("tidy_cache", 64, 0, SD_NO_MERGE, NULL, NULL);
    if (!s)
        _exit(10);
    void *p[100];
    for (int i = 0; i < 100; i++)
        p[i] = sd_cache_alloc(s);
    for (int i = 0; i < 100; i++)
        sd_cache_free(s, p[i]);
    sd_cache_destroy(s);
    _exit(0);
}

Test(defrag, destroy_empty_cache_is_quiet)
{
    char err[8192];
    int st = dt_run_child(child_destroy_empty, NULL, err, sizeof(err));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child status %#x; stderr:\n%s", st, err);
    cr_expect(strstr(err, "tidy_cache") == NULL,
              "destroy of an empty cache complained:\n%s", err);
}

/* ------------------------------------------ free to the wrong cache */

static void child_wrong_cache_free(void *arg)
{
    (void)arg;
    alarm(20);
    sd_cache *a = sd_cache_create("wrong_free_a", 64, 0, SD_NO_MERGE, NULL, NULL);
    sd_cache *b = sd_cache_create("wrong_free_b", 64, 0, SD_NO_MERGE, NULL, NULL);
    if (!a || !b)
        _exit(10);
    void *p = sd_cache_alloc(a);
    sd_cache_free(b, p);                /* "a pointer of another cache" */
    _exit(0);
}

Test(defrag, free_to_wrong_cache_is_reported)
{
    char err[8192];
    int st = dt_run_child(child_wrong_cache_free, NULL, err, sizeof(err));
    cr_expect(strstr(err, "slabdefrag:") != NULL,
              "sd_cache_free() with the wrong cache not reported; stderr:\n%s", err);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
              "child status %#x, expected SIGABRT; stderr:\n%s", st, err);
}
