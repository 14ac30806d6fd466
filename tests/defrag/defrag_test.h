/*
 * tests/defrag/defrag_test.h - helpers shared by the defrag tests.
 *
 * The tests link libslabdefrag.so, so malloc is slabdefrag's too.  Each
 * Criterion test runs in its own process; the globals here are per test.
 */
#ifndef SD_DEFRAG_TEST_H
#define SD_DEFRAG_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <slabdefrag.h>

#include "../procstatus.h"

/* ------------------------------------------------------------- general */

/* VmRSS (or another field) of /proc/self/status in kB, -1 if unknown. */
static inline long dt_rss_kb(void) { return proc_status_kb("VmRSS"); }

/* sd_cache_get_info() that fails the test on error. */
struct sd_cache_info dt_info(const sd_cache *s);

/* splitmix64 */
uint64_t dt_rand(uint64_t *state);

/* Run fn(arg) in a forked child with its stderr captured into buf (NUL
 * terminated, truncated to size).  Returns the wait status. */
int dt_run_child(void (*fn)(void *), void *arg, char *buf, size_t size);

/* --------------------------------------------------- the test object */

#define TOBJ_MAGIC 0x7e57ab1e5eedf00dULL
#define TOBJ_VALID 0x1u

/* 128 bytes: header, payload, checksum. */
struct tobj {
    uint64_t magic;
    uint32_t idx;         /* slot in dt_slots */
    uint32_t flags;       /* TOBJ_VALID */
    uint32_t pins;        /* references taken by get() */
    uint32_t gen;
    uint64_t payload[12];
    uint64_t csum;
};

void     tobj_fill(struct tobj *o, uint32_t idx, uint32_t gen);
/* 1 when magic, idx and checksum agree. */
int      tobj_ok(const struct tobj *o, uint32_t idx);

/* The registry the callbacks work on: dt_slots[i] is the live object of
 * slot i or NULL.  Guarded by dt_lock (never held across allocator calls,
 * since get() takes it with a slab lock held). */
extern pthread_mutex_t dt_lock;
extern struct tobj **dt_slots;
extern size_t dt_nslots;

void dt_slots_init(size_t n);
/* Allocate an object into slot i (which must be empty). */
struct tobj *dt_alloc_slot(sd_cache *s, size_t i);
/* Free the object of slot i (if any). */
void dt_free_slot(sd_cache *s, size_t i);
/* Live objects in the registry. */
size_t dt_live(void);
/* 1 if the allocator runs per-CPU caches (its statistics say so): no
 * thread owns a slab then, and a vacate may take any slab. */
int dt_percpu(void);

/* --------------------------------------------------- the callbacks */

enum dt_get_mode {
    GET_ALL = 0,        /* pin every object */
    GET_NULL_ODD,       /* set objs[1], objs[3], ... to NULL */
    GET_CALL_MALLOC,    /* misuse: call malloc() */
    GET_CALL_CACHE_ALLOC, /* misuse: call sd_cache_alloc() */
    GET_CALL_FREE,      /* misuse: call free() */
    GET_CALL_CACHE_FREE,  /* misuse: call sd_cache_free() */
    GET_CALL_CALLOC,    /* misuse: call calloc() */
    GET_CALL_REALLOC,   /* misuse: realloc(dt_misuse_ptr) */
    GET_CALL_FREE_MALLOC, /* misuse: free(malloc(n)), the pair a fast path
                             could serve without ever reaching a slow one */
};

enum dt_kick_mode {
    KICK_FREE_ALL = 0,  /* reclaim: unregister and free every object */
    KICK_FREE_NONE,     /* drop the references only */
    KICK_FREE_HALF,     /* free the even-indexed entries, keep the rest */
    KICK_MOVE,          /* allocate, copy, repoint, free the old one */
    KICK_FREE_BUDDY,    /* free it and its buddy (slot i +- dt_buddy_half),
                           an object on another slab */
};
extern size_t dt_buddy_half;

extern volatile int dt_get_mode, dt_kick_mode;
extern void *dt_get_private;        /* what get() returns */
extern void *dt_misuse_ptr;         /* block get() frees in GET_CALL_FREE */
extern size_t dt_misuse_size;       /* malloc/calloc size of the misuses */

/* Recorded by the callbacks (the last call; counts of all calls). */
#define DT_REC_MAX 8192
extern int dt_get_calls, dt_kick_calls;
extern int dt_get_nr, dt_kick_nr;
extern void *dt_get_objs_in[DT_REC_MAX];   /* objs as get() received them */
extern void *dt_get_objs_out[DT_REC_MAX];  /* objs as get() left them */
extern void *dt_kick_objs[DT_REC_MAX];     /* objs as kick() received them */
extern void *dt_kick_private;
extern int dt_get_bad;          /* objects get() saw that were not live */
extern int dt_get_unordered;    /* get() vectors not in address order */
extern unsigned long dt_moved, dt_freed_by_kick;

extern const struct sd_cache_ops dt_ops;

/* A fresh cache of struct tobj with dt_ops (SD_NO_MERGE unless ops). */
sd_cache *dt_cache(const char *name, int with_ops);

/* Fill the first slab of a fresh cache `s` and two more, so that slab 0 is
 * neither the thread's active slab nor empty; objects 0..per_slab-1 are in
 * slots 0..per_slab-1.  Returns objects_per_slab. */
size_t dt_fill_slabs(sd_cache *s, size_t nslabs_extra);
/* Free every object of slot range [0, per) but those with keep(i). */
void dt_thin_slab0(sd_cache *s, size_t per, int (*keep)(size_t i));

#endif
