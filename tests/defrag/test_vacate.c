/*
 * tests/defrag/test_vacate.c - sd_vacate() and the get()/kick() contract
 * (seeds/003, DESIGN.md "The get/kick contract").
 */
#include "defrag_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include <criterion/criterion.h>

/* Survivors on slab 0: a handful at scattered indices. */
static int keep_sparse(size_t i) { return i == 1 || i == 2 || i == 5 || i == 11; }
#define NKEEP 4
static const size_t kept[NKEEP] = { 1, 2, 5, 11 };

static int keep_eight(size_t i) { return i % 3 == 0 && i < 24; }   /* 8 */

/* --------------------------------------------------- returns 0 safely */

/* A fresh cache with dt_ops whose kick() does `kick`: its first slab
 * thinned to the objects keep(i) picks, two full slabs after it
 * (dt_fill_slabs, dt_thin_slab0); *per (if not NULL): objects per slab. */
static sd_cache *thinned_cache(const char *name, int kick, int (*keep)(size_t i), size_t *per)
{
    sd_cache *s = dt_cache(name, 1);
    dt_kick_mode = kick;
    size_t n = dt_fill_slabs(s, 2);
    dt_thin_slab0(s, n, keep);
    if (per)
        *per = n;
    return s;
}

Test(defrag, vacate_null_returns_0)
{
    cr_assert_eq(sd_vacate(NULL), 0);
}

Test(defrag, vacate_stack_address_returns_0)
{
    char buf[256];
    memset(buf, 1, sizeof(buf));
    cr_assert_eq(sd_vacate(buf + 100), 0);
}

Test(defrag, vacate_foreign_mmap_returns_0)
{
    size_t len = 8UL << 20;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(m, MAP_FAILED);
    memset(m, 0x5a, len);
    cr_expect_eq(sd_vacate(m), 0);
    cr_expect_eq(sd_vacate(m + len / 2 + 24), 0);
    cr_expect_eq(sd_vacate(m + len - 1), 0);
    for (size_t i = 0; i < len; i += 4096)
        cr_assert_eq(m[i], 0x5a);
    munmap(m, len);
}

Test(defrag, vacate_object_of_cache_without_ops_returns_0)
{
    sd_cache *s = dt_cache("no_ops_vacate", 0);
    size_t per = dt_fill_slabs(s, 2);
    dt_thin_slab0(s, per, keep_sparse);
    size_t inuse = dt_info(s).objects_inuse;
    cr_assert_eq(sd_vacate(dt_slots[kept[0]]), 0);
    cr_expect_eq(dt_info(s).objects_inuse, inuse);
    for (int k = 0; k < NKEEP; k++)
        cr_expect(tobj_ok(dt_slots[kept[k]], (uint32_t)kept[k]),
                  "survivor %zu damaged", kept[k]);
}

Test(defrag, vacate_own_active_slab_returns_0)
{
    sd_cache *s = dt_cache("active_vacate", 1);
    dt_kick_mode = KICK_FREE_ALL;
    dt_slots_init(8);
    for (size_t i = 0; i < 3; i++)
        dt_alloc_slot(s, i);
    if (dt_percpu()) {
        /* No slab belongs to a thread: three objects of a plain partial
         * slab (the rest on this CPU's stack, drained first) go. */
        cr_assert_eq(sd_vacate(dt_slots[1]), 1);
        cr_expect_eq(dt_get_calls, 1);
        cr_expect_eq(dt_get_nr, 3, "get() was handed %d objects", dt_get_nr);
        cr_expect_eq(dt_live(), 0);
        return;
    }
    /* Three objects of a fresh cache: the calling thread's active slab. */
    cr_assert_eq(sd_vacate(dt_slots[1]), 0);
    cr_expect_eq(dt_get_calls, 0, "get() called on the thread's active slab");
    cr_expect_eq(dt_live(), 3);
    for (size_t i = 0; i < 3; i++)
        cr_expect(dt_slots[i] && tobj_ok(dt_slots[i], (uint32_t)i));
}

/* --------------------------------------------------- returns 1: reclaim */

Test(defrag, vacate_sparse_slab_returns_1)
{
    thinned_cache("sparse_vacate", KICK_FREE_ALL, keep_sparse, NULL);
    int rc = sd_vacate(dt_slots[kept[0]]);
    cr_assert_eq(rc, 1, "sd_vacate of a slab with %d objects whose kick frees "
                 "everything returned %d", NKEEP, rc);
}

Test(defrag, vacate_success_counted_and_slab_released)
{
    sd_cache *s = thinned_cache("sparse_vacate_info", KICK_FREE_ALL, keep_sparse, NULL);
    struct sd_cache_info before = dt_info(s);
    cr_assert_eq(sd_vacate(dt_slots[kept[0]]), 1);
    struct sd_cache_info after = dt_info(s);
    cr_expect_eq(after.vacate_successes, before.vacate_successes + 1,
                 "vacate_successes %lu -> %lu", before.vacate_successes,
                 after.vacate_successes);
    cr_expect_geq(after.vacate_attempts, before.vacate_attempts + 1);
    cr_expect_eq(after.slabs, before.slabs - 1, "slabs %zu -> %zu",
                 before.slabs, after.slabs);
    cr_expect_eq(after.objects_inuse, before.objects_inuse - NKEEP);
    cr_expect_eq(after.objects_inuse, dt_live());
    cr_expect_geq(after.objects_kicked, before.objects_kicked + NKEEP);
}

Test(defrag, vacate_interior_pointer)
{
    thinned_cache("interior_vacate", KICK_FREE_ALL, keep_sparse, NULL);
    /* An address inside an object, and one inside a free object. */
    cr_assert_eq(sd_vacate((char *)dt_slots[kept[1]] + 17), 1);
}

Test(defrag, vacate_other_slabs_untouched)
{
    size_t per;
    thinned_cache("vacate_others", KICK_FREE_ALL, keep_sparse, &per);
    cr_assert_eq(sd_vacate(dt_slots[kept[0]]), 1);
    for (size_t i = per; i < dt_nslots; i++)
        cr_assert(dt_slots[i] && tobj_ok(dt_slots[i], (uint32_t)i),
                  "object %zu on another slab lost or damaged", i);
}

/* ------------------------------------------------------- the contract */

Test(defrag, get_gets_live_objects_in_address_order)
{
    size_t per;
    thinned_cache("get_order", KICK_FREE_ALL, keep_eight, &per);
    void *expect[8];
    int ne = 0;
    for (size_t i = 0; i < per; i++)
        if (keep_eight(i))
            expect[ne++] = dt_slots[i];
    /* expected set, sorted by address */
    for (int i = 0; i < ne; i++)
        for (int j = i + 1; j < ne; j++)
            if ((uintptr_t)expect[j] < (uintptr_t)expect[i]) {
                void *t = expect[i]; expect[i] = expect[j]; expect[j] = t;
            }
    sd_vacate(expect[3]);
    cr_assert_eq(dt_get_calls, 1, "get() called %d times", dt_get_calls);
    cr_expect_eq(dt_get_nr, ne, "get() got nr=%d, the slab has %d objects in use",
                 dt_get_nr, ne);
    cr_expect_eq(dt_get_unordered, 0, "get() vector not in address order");
    cr_expect_eq(dt_get_bad, 0, "get() got objects that are not allocated");
    for (int i = 0; i < ne && i < dt_get_nr; i++)
        cr_expect_eq(dt_get_objs_in[i], expect[i], "objs[%d] = %p, expected %p",
                     i, dt_get_objs_in[i], expect[i]);
}

Test(defrag, get_nulled_entries_reach_kick_as_null)
{
    dt_get_mode = GET_NULL_ODD;
    sd_cache *s = thinned_cache("get_null", KICK_FREE_ALL, keep_eight, NULL);
    int rc = sd_vacate(dt_slots[0]);
    cr_assert_eq(dt_kick_calls, 1, "kick() called %d times", dt_kick_calls);
    cr_assert_eq(dt_kick_nr, dt_get_nr);
    for (int i = 0; i < dt_kick_nr; i++)
        cr_expect_eq(dt_kick_objs[i], dt_get_objs_out[i],
                     "kick objs[%d] = %p, get() left %p", i, dt_kick_objs[i],
                     dt_get_objs_out[i]);
    for (int i = 1; i < dt_kick_nr; i += 2)
        cr_expect_null(dt_kick_objs[i]);
    /* The NULLed objects were not freed, so the slab is not empty. */
    cr_expect_eq(rc, 0);
    cr_expect_eq(dt_info(s).objects_inuse, dt_live());
}

Test(defrag, get_private_passed_to_kick)
{
    static int token;
    dt_get_private = &token;
    thinned_cache("get_private", KICK_FREE_ALL, keep_sparse, NULL);
    sd_vacate(dt_slots[kept[0]]);
    cr_assert_eq(dt_kick_calls, 1);
    cr_assert_eq(dt_kick_private, (void *)&token);
}

Test(defrag, kick_frees_nothing_returns_0)
{
    thinned_cache("kick_none", KICK_FREE_NONE, keep_sparse, NULL);
    cr_assert_eq(sd_vacate(dt_slots[kept[0]]), 0);
    cr_expect_eq(dt_kick_calls, 1, "the vacate was not attempted (kick() "
                 "called %d times)", dt_kick_calls);
}

Test(defrag, kick_frees_nothing_slab_still_usable)
{
    size_t per;
    sd_cache *s = thinned_cache("kick_none_usable", KICK_FREE_NONE, keep_sparse, &per);
    size_t inuse = dt_info(s).objects_inuse;
    sd_vacate(dt_slots[kept[0]]);
    cr_expect_eq(dt_kick_calls, 1, "the vacate was not attempted (kick() "
                 "called %d times)", dt_kick_calls);
    cr_expect_eq(dt_info(s).objects_inuse, inuse, "objects_inuse changed by a "
                 "vacate that freed nothing");
    for (int k = 0; k < NKEEP; k++)
        cr_expect(tobj_ok(dt_slots[kept[k]], (uint32_t)kept[k]));

    /* Allocate enough to reuse slab 0's free objects: all distinct from
     * the live ones, all writable, nothing else damaged. */
    size_t extra = 2 * per;
    struct tobj **more = calloc(extra, sizeof(*more));
    for (size_t i = 0; i < extra; i++) {
        more[i] = sd_cache_alloc(s);
        cr_assert_not_null(more[i]);
        for (size_t j = 0; j < dt_nslots; j++)
            cr_assert_neq(more[i], dt_slots[j], "a live object was handed out");
        tobj_fill(more[i], 0xffff0000u + (uint32_t)i, 7);
    }
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i), "object %zu damaged", i);
    for (size_t i = 0; i < extra; i++)
        cr_assert(tobj_ok(more[i], 0xffff0000u + (uint32_t)i));
    cr_expect_eq(dt_info(s).objects_inuse, inuse + extra);
    free(more);
}

Test(defrag, kick_frees_half_returns_0_nothing_lost)
{
    size_t per;
    sd_cache *s = thinned_cache("kick_half", KICK_FREE_HALF, keep_eight, &per);
    size_t inuse = dt_info(s).objects_inuse;
    int rc = sd_vacate(dt_slots[0]);
    cr_assert_eq(rc, 0, "vacate returned %d with half the objects left", rc);
    cr_expect_eq(dt_freed_by_kick, 4);
    cr_expect_eq(dt_info(s).objects_inuse, inuse - 4);
    cr_expect_eq(dt_info(s).objects_inuse, dt_live());
    for (size_t i = 0; i < dt_nslots; i++)
        if (dt_slots[i])
            cr_assert(tobj_ok(dt_slots[i], (uint32_t)i), "object %zu damaged", i);
    /* the four kick kept are still registered */
    int left = 0;
    for (size_t i = 0; i < per; i++)
        left += dt_slots[i] != NULL;
    cr_expect_eq(left, 4);
}

Test(defrag, vacate_moving_kick_returns_1_contents_intact)
{
    size_t per;
    sd_cache *s = thinned_cache("kick_move", KICK_MOVE, keep_eight, &per);
    void *old[8];
    int n = 0;
    for (size_t i = 0; i < per; i++)
        if (dt_slots[i])
            old[n++] = dt_slots[i];
    cr_assert_eq(sd_vacate(old[0]), 1);
    cr_expect_eq(dt_moved, 8);
    for (size_t i = 0; i < dt_nslots; i++) {
        if (!dt_slots[i])
            continue;
        cr_assert(tobj_ok(dt_slots[i], (uint32_t)i), "object %zu damaged", i);
        for (int k = 0; k < n; k++)
            cr_assert_neq((void *)dt_slots[i], old[k], "object %zu not moved", i);
    }
    cr_expect_eq(dt_info(s).objects_inuse, dt_live());
}

Test(defrag, vacate_twice_second_returns_0)
{
    thinned_cache("vacate_twice", KICK_FREE_ALL, keep_sparse, NULL);
    void *addr = dt_slots[kept[0]];
    cr_assert_eq(sd_vacate(addr), 1);
    /* The slab is gone: its address is no longer a slab of ours (or is a
     * new, unrelated one); either way no callback on freed objects. */
    int calls = dt_get_calls;
    cr_expect_eq(sd_vacate(addr), 0);
    cr_expect_eq(dt_get_calls, calls, "get() called for a released slab");
}

Test(defrag, vacate_address_of_free_object_in_slab)
{
    sd_cache *s = dt_cache("vacate_free_addr", 1);
    dt_kick_mode = KICK_FREE_ALL;
    size_t per = dt_fill_slabs(s, 2);
    /* keep_sparse keeps 1, 2, 5, 11: object 3 is free. */
    char *free_obj = (char *)dt_slots[3];
    dt_thin_slab0(s, per, keep_sparse);
    cr_assert_eq(sd_vacate(free_obj + 8), 1,
                 "an address inside a free object of a sparse slab");
}

/* ------------------------------- frees wait while get() runs (contract) */

static pthread_mutex_t ho_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ho_c = PTHREAD_COND_INITIALIZER;
static int ho_go, ho_freeing, ho_freed, ho_freed_in_get, ho_nr, ho_saw_victim;
static void *ho_victim;
static int ho_reached;
static sd_cache *ho_cache;

static void *ho_thread(void *arg)
{
    (void)arg;
    free(malloc(32));                   /* a normal allocator thread */
    pthread_mutex_lock(&ho_m);
    while (!ho_go)
        pthread_cond_wait(&ho_c, &ho_m);
    pthread_mutex_unlock(&ho_m);
    __atomic_store_n(&ho_freeing, 1, __ATOMIC_SEQ_CST);
    sd_cache_free(ho_cache, ho_victim);  /* an object of the slab in get() */
    __atomic_store_n(&ho_freed, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *ho_get(sd_cache *s, int nr, void **objs)
{
    pthread_mutex_lock(&ho_m);
    ho_go = 1;
    pthread_cond_signal(&ho_c);
    pthread_mutex_unlock(&ho_m);
    /* The thread is at its free (bounded: 10 s), then gets 300 ms to
     * finish it, which it must not while get() runs. */
    struct timespec ms = { 0, 1000 * 1000 };
    for (int i = 0; i < 10000 && !__atomic_load_n(&ho_freeing, __ATOMIC_SEQ_CST); i++)
        nanosleep(&ms, NULL);
    ho_reached = __atomic_load_n(&ho_freeing, __ATOMIC_SEQ_CST);
    struct timespec ts = { 0, 300 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    ho_freed_in_get = __atomic_load_n(&ho_freed, __ATOMIC_SEQ_CST);
    ho_nr = nr;
    for (int i = 0; i < nr; i++)
        if (objs[i] == ho_victim) {      /* being freed: not ours */
            ho_saw_victim = 1;
            objs[i] = NULL;
        }
    return NULL;
}

static void ho_kick(sd_cache *s, int nr, void **objs, void *priv)
{
    for (int i = 0; i < nr; i++)
        if (objs[i])
            sd_cache_free(s, objs[i]);
    /* The blocked free goes through now that get() has returned. */
    for (int i = 0; i < 5000 && !__atomic_load_n(&ho_freed, __ATOMIC_SEQ_CST); i++) {
        struct timespec ts = { 0, 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

Test(defrag, get_holds_off_concurrent_frees, .timeout = 30)
{
    static const struct sd_cache_ops ho_ops = { .get = ho_get, .kick = ho_kick };
    ho_cache = sd_cache_create("holdoff", 64, 0, 0, NULL, &ho_ops);
    cr_assert_not_null(ho_cache);
    size_t per = dt_info(ho_cache).objects_per_slab;
    size_t n = 2 * per + per / 2;
    void **p = calloc(n, sizeof(*p));
    for (size_t i = 0; i < n; i++)
        p[i] = sd_cache_alloc(ho_cache);
    for (size_t i = 0; i < per; i++)
        if (i != 1 && i != 5)
            sd_cache_free(ho_cache, p[i]);
    ho_victim = p[5];
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, ho_thread, NULL), 0);
    int rc = sd_vacate(p[1]);
    pthread_mutex_lock(&ho_m);
    int got_get = ho_go;
    ho_go = 1;                          /* release the thread if get() never ran */
    pthread_cond_signal(&ho_c);
    pthread_mutex_unlock(&ho_m);
    pthread_join(t, NULL);
    cr_assert(got_get, "get() was not called (sd_vacate returned %d)", rc);
    cr_expect_eq(ho_nr, 2, "get() got %d objects", ho_nr);
    cr_expect(ho_saw_victim, "the object being freed was not in get()'s vector");
    cr_assert(ho_reached, "the freeing thread did not reach its free within 10 s of get()");
    cr_assert_eq(ho_freed_in_get, 0,
                 "a free of an object on the slab completed while get() ran");
    cr_expect_eq(ho_freed, 1);
    cr_expect_eq(rc, 1, "both objects gone by the end of kick(), vacate %d", rc);
    cr_expect_eq(dt_info(ho_cache).objects_inuse, n - per);
    free(p);
}

/* --------------------------- a failed vacate resequences the freelist */

Test(defrag, failed_vacate_resequences_freelist)
{
    sd_cache *s = dt_cache("reseq", 1);
    dt_kick_mode = KICK_FREE_NONE;
    struct sd_cache_info info = dt_info(s);
    size_t per = info.objects_per_slab;
    size_t n = 3 * per;                   /* exactly: the active slab is full */
    dt_slots_init(n);
    for (size_t i = 0; i < n; i++)
        dt_alloc_slot(s, i);
    /* Free most of slab 0 in a scrambled order (a LIFO freelist would hand
     * them out scrambled); keep objects 0 and 7. */
    uint64_t seed = 5;
    size_t *idx = calloc(per, sizeof(*idx));
    for (size_t i = 0; i < per; i++)
        idx[i] = i;
    for (size_t i = per; i > 1; i--) {
        size_t j = dt_rand(&seed) % i;
        size_t t = idx[i - 1]; idx[i - 1] = idx[j]; idx[j] = t;
    }
    for (size_t i = 0; i < per; i++)
        if (idx[i] != 0 && idx[i] != 7)
            dt_free_slot(s, idx[i]);
    cr_assert_eq(sd_vacate(dt_slots[0]), 0);
    /* Slab 0 is the only partial slab: the next per-2 objects come from it,
     * in increasing address order. */
    size_t m = per - 2, inversions = 0;
    void **q = calloc(m, sizeof(*q));
    for (size_t i = 0; i < m; i++) {
        q[i] = sd_cache_alloc(s);
        if (i && (uintptr_t)q[i] <= (uintptr_t)q[i - 1])
            inversions++;
    }
    cr_assert_eq(inversions, 0, "%zu of %zu allocations after a failed vacate "
                 "went down in address", inversions, m);
    free(q);
    free(idx);
}

/* ----------------------------------------------------- other threads */

static pthread_mutex_t ot_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ot_c = PTHREAD_COND_INITIALIZER;
static int ot_ready, ot_done;
static sd_cache *ot_cache;
static size_t ot_count;

/* Allocate ot_count objects into slots 0.., then (optionally) wait. */
static void *ot_thread(void *arg)
{
    int wait = arg != NULL;
    for (size_t i = 0; i < ot_count; i++) {
        struct tobj *o = sd_cache_alloc(ot_cache);
        tobj_fill(o, (uint32_t)i, 1);
        pthread_mutex_lock(&dt_lock);
        dt_slots[i] = o;
        o->flags |= TOBJ_VALID;
        pthread_mutex_unlock(&dt_lock);
    }
    pthread_mutex_lock(&ot_m);
    ot_ready = 1;
    pthread_cond_broadcast(&ot_c);
    while (wait && !ot_done)
        pthread_cond_wait(&ot_c, &ot_m);
    pthread_mutex_unlock(&ot_m);
    return NULL;
}

Test(defrag, vacate_other_threads_active_slab_returns_0)
{
    ot_cache = dt_cache("other_active", 1);
    dt_kick_mode = KICK_FREE_ALL;
    dt_slots_init(8);
    ot_count = 3;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, ot_thread, (void *)1), 0);
    pthread_mutex_lock(&ot_m);
    while (!ot_ready)
        pthread_cond_wait(&ot_c, &ot_m);
    pthread_mutex_unlock(&ot_m);
    /* The thread is alive and its active slab holds the three objects. */
    int rc = sd_vacate(dt_slots[0]);
    pthread_mutex_lock(&ot_m);
    ot_done = 1;
    pthread_cond_broadcast(&ot_c);
    pthread_mutex_unlock(&ot_m);
    pthread_join(t, NULL);
    if (dt_percpu()) {                  /* no thread owns it: it goes */
        cr_expect_eq(rc, 1);
        cr_expect_eq(dt_get_nr, 3, "get() was handed %d objects", dt_get_nr);
        cr_expect_eq(dt_live(), 0);
        return;
    }
    cr_expect_eq(rc, 0, "vacated another live thread's active slab");
    cr_expect_eq(dt_get_calls, 0, "get() called on another thread's active slab");
    cr_expect_eq(dt_live(), 3);
}

Test(defrag, vacate_after_owner_thread_exit)
{
    ot_cache = dt_cache("owner_exited", 1);
    dt_kick_mode = KICK_FREE_ALL;
    size_t per = dt_info(ot_cache).objects_per_slab;
    dt_slots_init(per + 8);
    ot_count = per + 3;                  /* slab 0 full, slab 1 holds 3 */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, ot_thread, NULL), 0);
    pthread_join(t, NULL);
    /* The thread is gone: its active slab went back to the cache. */
    struct sd_cache_info before = dt_info(ot_cache);
    cr_expect_eq(before.objects_inuse, per + 3);
    int rc = sd_vacate(dt_slots[per + 1]);
    cr_assert_eq(rc, 1, "the slab of an exited thread (3 objects) was not vacated");
    cr_expect_eq(dt_info(ot_cache).objects_inuse, per);
}

/* --------------------------------------------------- big objects */

Test(defrag, vacate_big_aligned_objects)
{
    sd_cache *s = sd_cache_create("big_aligned", 3000, 4096, 0, NULL, &dt_ops);
    cr_assert_not_null(s);
    dt_kick_mode = KICK_FREE_ALL;
    struct sd_cache_info info = dt_info(s);
    size_t per = info.objects_per_slab;
    cr_assert_geq(per, 1);
    size_t n = 3 * per + 1;
    char **p = calloc(n, sizeof(*p));
    for (size_t i = 0; i < n; i++) {
        p[i] = sd_cache_alloc(s);
        cr_assert_not_null(p[i]);
        cr_assert_eq((uintptr_t)p[i] % 4096, 0, "object %p not page aligned", p[i]);
        memset(p[i], 0xab, 3000);
    }
    if (per < 2)
        return;                          /* nothing sparse to vacate */
    /* A tobj header in the first bytes, so dt_ops can track the survivor. */
    dt_slots_init(1);
    struct tobj *o = (struct tobj *)p[0];
    tobj_fill(o, 0, 9);
    o->flags |= TOBJ_VALID;
    dt_slots[0] = o;
    for (size_t i = 1; i < per; i++)
        sd_cache_free(s, p[i]);
    cr_assert_eq(sd_vacate(p[0]), 1);
    cr_expect_null(dt_slots[0]);
    for (size_t i = per; i < n; i++)
        for (size_t j = 0; j < 3000; j += 97)
            cr_assert_eq((unsigned char)p[i][j], 0xab);
    free(p);
}
