/*
 * tests/defrag/defrag_test.c - helpers and the get()/kick() callbacks the
 * defrag tests share (see defrag_test.h).
 */
#include "defrag_test.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

struct sd_cache_info dt_info(const sd_cache *s)
{
    struct sd_cache_info info;
    memset(&info, 0, sizeof(info));
    int rc = sd_cache_get_info(s, &info);
    cr_assert_eq(rc, 0, "sd_cache_get_info failed: %d", rc);
    return info;
}

uint64_t dt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int dt_run_child(void (*fn)(void *), void *arg, char *buf, size_t size)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    for (;;) {
        char tmp[512];
        ssize_t n = read(fds[0], tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n && len + 1 < size; i++)
            buf[len++] = tmp[i];
    }
    buf[len] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

/* ------------------------------------------------------- test objects */

static uint64_t tobj_sum(const struct tobj *o)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    const unsigned char *p = (const unsigned char *)o->payload;
    for (size_t i = 0; i < sizeof(o->payload); i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ ((uint64_t)o->idx << 32) ^ o->gen;
}

void tobj_fill(struct tobj *o, uint32_t idx, uint32_t gen)
{
    o->magic = TOBJ_MAGIC;
    o->idx = idx;
    o->flags = 0;
    o->pins = 0;
    o->gen = gen;
    uint64_t st = ((uint64_t)idx << 32) ^ gen;
    for (int i = 0; i < 12; i++)
        o->payload[i] = dt_rand(&st);
    o->csum = tobj_sum(o);
}

int tobj_ok(const struct tobj *o, uint32_t idx)
{
    if (o->magic != TOBJ_MAGIC || o->idx != idx || o->csum != tobj_sum(o))
        return 0;
    uint64_t st = ((uint64_t)idx << 32) ^ o->gen;
    for (int i = 0; i < 12; i++)
        if (o->payload[i] != dt_rand(&st))
            return 0;
    return 1;
}

pthread_mutex_t dt_lock = PTHREAD_MUTEX_INITIALIZER;
struct tobj **dt_slots;
size_t dt_nslots;
static uint32_t dt_gen;

void dt_slots_init(size_t n)
{
    dt_slots = calloc(n, sizeof(*dt_slots));
    cr_assert_not_null(dt_slots);
    dt_nslots = n;
}

struct tobj *dt_alloc_slot(sd_cache *s, size_t i)
{
    struct tobj *o = sd_cache_alloc(s);
    cr_assert_not_null(o, "sd_cache_alloc failed: %s", strerror(errno));
    tobj_fill(o, (uint32_t)i, __atomic_add_fetch(&dt_gen, 1, __ATOMIC_RELAXED));
    pthread_mutex_lock(&dt_lock);
    dt_slots[i] = o;
    o->flags |= TOBJ_VALID;
    pthread_mutex_unlock(&dt_lock);
    return o;
}

void dt_free_slot(sd_cache *s, size_t i)
{
    int do_free = 0;
    pthread_mutex_lock(&dt_lock);
    struct tobj *o = dt_slots[i];
    if (o) {
        dt_slots[i] = NULL;
        o->flags &= ~TOBJ_VALID;
        do_free = o->pins == 0;
    }
    pthread_mutex_unlock(&dt_lock);
    if (do_free)
        sd_cache_free(s, o);
}

size_t dt_live(void)
{
    size_t n = 0;
    pthread_mutex_lock(&dt_lock);
    for (size_t i = 0; i < dt_nslots; i++)
        n += dt_slots[i] != NULL;
    pthread_mutex_unlock(&dt_lock);
    return n;
}

int dt_percpu(void)
{
    int fd = memfd_create("dt-stats", 0);
    if (fd < 0)
        return 0;
    sd_stats_print(fd);
    static char buf[1 << 16];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return strstr(buf, "Caches: per-CPU") != NULL;
}

/* ----------------------------------------------------------- callbacks */

volatile int dt_get_mode, dt_kick_mode;
void *dt_get_private;
void *dt_misuse_ptr;
size_t dt_misuse_size = 40;
int dt_get_calls, dt_kick_calls;
int dt_get_nr, dt_kick_nr;
void *dt_get_objs_in[DT_REC_MAX];
void *dt_get_objs_out[DT_REC_MAX];
void *dt_kick_objs[DT_REC_MAX];
void *dt_kick_private;
int dt_get_bad, dt_get_unordered;
unsigned long dt_moved, dt_freed_by_kick;
size_t dt_buddy_half;

static void *dt_get(sd_cache *s, int nr, void **objs)
{
    switch (dt_get_mode) {
    case GET_CALL_MALLOC: {
        void *volatile p = malloc(dt_misuse_size);
        (void)p;
        break;
    }
    case GET_CALL_CALLOC: {
        void *volatile p = calloc(1, dt_misuse_size);
        (void)p;
        break;
    }
    case GET_CALL_REALLOC: {
        void *volatile p = realloc(dt_misuse_ptr, dt_misuse_size + 8);
        (void)p;
        break;
    }
    case GET_CALL_FREE_MALLOC: {
        void *volatile p = malloc(dt_misuse_size);   /* not folded away */
        free(p);
        break;
    }
    case GET_CALL_CACHE_ALLOC: {
        void *volatile p = sd_cache_alloc(s);
        (void)p;
        break;
    }
    case GET_CALL_FREE:
        free(dt_misuse_ptr);
        break;
    case GET_CALL_CACHE_FREE:
        sd_cache_free(s, dt_misuse_ptr);
        break;
    default:
        break;
    }
    pthread_mutex_lock(&dt_lock);
    dt_get_calls++;
    dt_get_nr = nr;
    uintptr_t prev = 0;
    for (int i = 0; i < nr; i++) {
        struct tobj *o = objs[i];
        if (i < DT_REC_MAX)
            dt_get_objs_in[i] = o;
        if (i > 0 && prev >= (uintptr_t)o)
            dt_get_unordered++;
        prev = (uintptr_t)o;
        if (!o) {                       /* never NULL on the way in */
            dt_get_bad++;
            continue;
        }
        if (!(o->flags & TOBJ_VALID)) {
            /* Being constructed or torn down by another thread. */
            objs[i] = NULL;
            continue;
        }
        if (o->magic != TOBJ_MAGIC || o->idx >= dt_nslots ||
            dt_slots[o->idx] != o) {
            dt_get_bad++;
            objs[i] = NULL;
            continue;
        }
        if (dt_get_mode == GET_NULL_ODD && (i & 1)) {
            objs[i] = NULL;
            continue;
        }
        o->pins++;
    }
    for (int i = 0; i < nr && i < DT_REC_MAX; i++)
        dt_get_objs_out[i] = objs[i];
    pthread_mutex_unlock(&dt_lock);
    return dt_get_private;
}

/* Drop our pin; free the object if it was deleted meanwhile (the delete
 * left the free to us) or if `reclaim` and it is still registered. */
static void dt_unpin(sd_cache *s, struct tobj *o, int reclaim)
{
    int do_free;
    pthread_mutex_lock(&dt_lock);
    if (reclaim && (o->flags & TOBJ_VALID)) {
        dt_slots[o->idx] = NULL;
        o->flags &= ~TOBJ_VALID;
    }
    do_free = --o->pins == 0 && !(o->flags & TOBJ_VALID);
    if (do_free)
        dt_freed_by_kick++;
    pthread_mutex_unlock(&dt_lock);
    if (do_free)
        sd_cache_free(s, o);
}

static void dt_move(sd_cache *s, struct tobj *o)
{
    struct tobj *n = sd_cache_alloc(s);
    int free_old, free_new = 0;
    pthread_mutex_lock(&dt_lock);
    if (n && (o->flags & TOBJ_VALID)) {
        memcpy(n, o, sizeof(*n));
        n->pins = 0;
        dt_slots[o->idx] = n;
        o->flags &= ~TOBJ_VALID;
        dt_moved++;
    } else if (n) {
        free_new = 1;
    }
    free_old = --o->pins == 0 && !(o->flags & TOBJ_VALID);
    pthread_mutex_unlock(&dt_lock);
    if (free_new)
        sd_cache_free(s, n);
    if (free_old)
        sd_cache_free(s, o);
}

static void dt_kick(sd_cache *s, int nr, void **objs, void *private_data)
{
    pthread_mutex_lock(&dt_lock);
    dt_kick_calls++;
    dt_kick_nr = nr;
    dt_kick_private = private_data;
    for (int i = 0; i < nr && i < DT_REC_MAX; i++)
        dt_kick_objs[i] = objs[i];
    pthread_mutex_unlock(&dt_lock);
    for (int i = 0; i < nr; i++) {
        struct tobj *o = objs[i];
        if (!o)
            continue;
        switch (dt_kick_mode) {
        case KICK_FREE_ALL:
            dt_unpin(s, o, 1);
            break;
        case KICK_FREE_NONE:
            dt_unpin(s, o, 0);
            break;
        case KICK_FREE_HALF:
            dt_unpin(s, o, (i & 1) == 0);
            break;
        case KICK_MOVE:
            dt_move(s, o);
            break;
        case KICK_FREE_BUDDY: {
            size_t i2 = o->idx;         /* read while we hold the pin */
            dt_unpin(s, o, 1);
            if (dt_buddy_half)
                dt_free_slot(s, i2 < dt_buddy_half ? i2 + dt_buddy_half
                                                   : i2 - dt_buddy_half);
            break;
        }
        }
    }
}

const struct sd_cache_ops dt_ops = { .get = dt_get, .kick = dt_kick };

sd_cache *dt_cache(const char *name, int with_ops)
{
    sd_cache *s = sd_cache_create(name, sizeof(struct tobj), 0,
                                  with_ops ? 0 : SD_NO_MERGE, NULL,
                                  with_ops ? &dt_ops : NULL);
    cr_assert_not_null(s, "sd_cache_create(%s): %s", name, strerror(errno));
    return s;
}

size_t dt_fill_slabs(sd_cache *s, size_t nslabs_extra)
{
    struct sd_cache_info info = dt_info(s);
    size_t per = info.objects_per_slab;
    cr_assert_gt(per, 3, "objects_per_slab %zu too small for the test", per);
    size_t total = per * (1 + nslabs_extra) + per / 2;
    dt_slots_init(total);
    for (size_t i = 0; i < total; i++)
        dt_alloc_slot(s, i);
    /* Slab 0 is objects 0..per-1: they must lie within one slab. */
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < per; i++) {
        uintptr_t a = (uintptr_t)dt_slots[i];
        lo = a < lo ? a : lo;
        hi = a > hi ? a : hi;
    }
    cr_assert_lt(hi - lo, info.slab_size,
                 "the first %zu objects of a fresh cache span %zu bytes, "
                 "more than one slab (%zu)", per, (size_t)(hi - lo),
                 info.slab_size);
    return per;
}

void dt_thin_slab0(sd_cache *s, size_t per, int (*keep)(size_t i))
{
    for (size_t i = 0; i < per; i++)
        if (!keep(i))
            dt_free_slot(s, i);
}
