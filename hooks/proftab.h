/*
 * hooks/proftab.h - the profiler's tables, shared by hooks/prof.c (which
 * fills them) and hooks/profreport.c (which reads them).  All of them live
 * in one anonymous mapping made when profiling first starts; nothing here
 * calls malloc.
 *
 * Locks, in the order fork's prepare takes them, before any allocator
 * lock (none of them is ever taken with an allocator lock held, and no
 * allocator lock but the entry table's leaf, entry_lock of
 * classes/malloc.c, is taken with one of them held):
 *   start_lock      mapping the tables, switching on and off, and the
 *                   entry table (sdm_entry_switch); a free that drops the
 *                   last reference (prof_refs) with profiling off only
 *                   tries it, after its shard lock is released
 *   shard[i].lock   the samples whose address hashes to shard i; writers
 *                   hold it and make shard[i].seq odd while they change
 *                   the slots (a seqlock): a free looks its object up
 *                   without the lock, and takes it only to remove a
 *                   sample it found (or after a few torn reads)
 *   stacks_lock     inserting into the stack table (entries never leave)
 *   names_lock      inserting into the name table
 * The last three are leaves: nothing is taken while one is held.
 * A stack's counters are atomics, updated under the lock of the sample's
 * shard.
 *
 * Invariants: a live sample's object is allocated (its free removes the
 * sample, under the shard lock, before the object goes back), so a report
 * that holds the shard lock may read the object's slab.
 *   s->sampled & 0xffff == live samples on slab s (unless saturated),
 *   and each has its filter bit set in s->sampled >> 16
 *   sd_sample_large    == live samples of large blocks
 */
#ifndef SD_HOOKS_PROFTAB_H
#define SD_HOOKS_PROFTAB_H

#include <stdint.h>

#include "lock.h"

#define PROF_SHARDS        64
#define PROF_SHARD_SLOTS   2048     /* open addressing, at most 3/4 used */
#define PROF_SHARD_MAX     (PROF_SHARD_SLOTS / 4 * 3)
#define PROF_STACKS        8192     /* unique backtraces (id 0: overflow) */
#define PROF_STACKS_MAX    (PROF_STACKS / 4 * 3)
#define PROF_FRAMES        32       /* frames kept, innermost first */
#define PROF_NAMES         16384    /* symbolised return addresses */
#define PROF_NAME_BYTES    (1 << 20)
#define PROF_DEFAULT_INTERVAL (512u << 10)

struct prof_sample {
    uintptr_t addr;             /* 0: empty slot */
    uint64_t  size;             /* bytes asked for */
    uint32_t  stack;            /* stack id */
    float     weight;           /* objects it stands for: 1 / (1 - e^(-size/R)) */
};

struct prof_shard {
    sd_mutex  lock;
    uint32_t  seq;              /* odd while a writer (holding lock) changes
                                   slot[]: a free's lookup reads without the
                                   lock and retries if it changed */
    uint32_t  used;             /* live samples */
    struct prof_sample slot[PROF_SHARD_SLOTS];
} __attribute__((aligned(64)));

struct prof_stack {
    uint64_t  hash;             /* 0: empty slot */
    uint32_t  nframes;
    uint32_t  cache;            /* cache id of its samples; PROF_CACHE_* */
    uintptr_t frame[PROF_FRAMES];
    /* raw sample counts (atomic): live now, and ever taken */
    uint64_t  live_n, live_bytes, alloc_n, alloc_bytes;
};
#define PROF_CACHE_NONE   0xffffffffu   /* no sample yet */
#define PROF_CACHE_LARGE  0xfffffffeu   /* large blocks */
#define PROF_CACHE_MIXED  0xfffffffdu   /* samples in several caches */

struct prof_name {
    uintptr_t ip;               /* 0: empty slot */
    uint32_t  off;              /* into names_text */
};

struct prof_tables {
    struct prof_shard shard[PROF_SHARDS];
    sd_mutex  stacks_lock;
    uint32_t  nstacks;
    struct prof_stack stack[PROF_STACKS];
    sd_mutex  names_lock;
    uint32_t  nnames, text_used;
    struct prof_name name[PROF_NAMES];
    char      text[PROF_NAME_BYTES];
};

/* The profiler's state (hooks/prof.c). */
extern SD_HIDDEN struct prof_tables *prof_tab;      /* NULL until started */
extern SD_HIDDEN int prof_on;                       /* taking new samples */
extern SD_HIDDEN uint64_t prof_interval;            /* R, bytes */
extern SD_HIDDEN unsigned long prof_dropped;        /* samples: table full */
extern SD_HIDDEN unsigned long prof_stack_overflow; /* samples on stack 0 */
extern SD_HIDDEN unsigned long prof_names_dropped;  /* names not stored */

/* The name of return address ip ("?" if unknown; static storage). */
const char *prof_name_of(uintptr_t ip);
/* 1 - e^(-x), accurate for small x (hooks/prof.c). */
double prof_one_minus_exp(double x);

#endif
