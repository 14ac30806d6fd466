/*
 * hooks/meshpace.h - when the shrinker's mesh passes come (hooks/
 * shrinker.c's thread): the free path's nudges, which the thread watches
 * without being woken by each, and the hold of a mesh pass while the
 * program computes.  Used by hooks/shrinker.c only.
 */
#ifndef SD_HOOKS_MESHPACE_H
#define SD_HOOKS_MESHPACE_H

#include <stdint.h>

/* The malloc classes' refills and frees to slabs, summed (meshpace.c). */
unsigned long program_sig(void);

/* The free path's nudge (under a slab lock): note its time; 1 if the
 * thread does not watch the nudges and must be woken. */
int nudge_note(void);
/* The thread watches the nudges (1: a nudge woke it) or not (0: a new
 * thread). */
void nudge_watch_set(int on);
/* The later of `nudged` and the latest watched nudge. */
uint64_t nudge_latest(uint64_t nudged);
/* Stop watching the nudges, the frees having paused since *nudged; 1
 * (and watching again, *nudged moved) if one came meanwhile after all. */
int nudge_unwatch(uint64_t *nudged);

/* What the program's threads did between two looks (compute_hold); the
 * thread's own, zeroed when it acts. */
struct compute_look {
    uint64_t at;                /* ns of the last look; 0: none since the
                                   last nudge */
    uint64_t others;            /* CPU ns of the process's other threads */
    unsigned long sig;          /* program_sig() */
    uint64_t since;             /* ns the hold began; 0: not holding */
};

/* The first look comes this long before the frees' quiet time is up. */
#define COMPUTE_LOOK_MS 50

/* Look at what the program's threads do: 1 if, since the last look, they
 * ran for more than a quarter of a CPU and made no refill and no free to
 * a slab. */
int compute_look(struct compute_look *l, uint64_t now);
/* After the thread's own work (a pass, a decay pass, a settle). */
void compute_rebase(struct compute_look *l);
/* Should the quiet mesh pass wait for a computing program? */
int compute_hold(struct compute_look *l, uint64_t now);

#endif
