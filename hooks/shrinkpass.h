/*
 * hooks/shrinkpass.h - the passes the background shrinker's thread runs
 * (hooks/shrinkpass.c); when it runs which is hooks/shrinker.c's loop.
 * Used by hooks/shrinker.c only, and called from the thread only.
 */
#ifndef SD_HOOKS_SHRINKPASS_H
#define SD_HOOKS_SHRINKPASS_H

#include <stddef.h>
#include <stdint.h>

#include "fmt.h"
#include "shrinker.h"

/* What the thread runs after a wake. */
enum pass_kind {
    PASS_NONE,
    PASS_INTERVAL,      /* the interval's: meshes unless frees go on (held) */
    PASS_URGENT,        /* memory pressure, the RSS limit, sd_shrink_wake:
                           every retained empty, every class meshed */
    PASS_QUIET,         /* the frees that nudged have paused: a mesh of the
                           classes that grew too */
    PASS_CATCHUP,       /* meshing had candidates left (shrink_mesh_catchup) */
    PASS_DECAY,         /* what the passes left has idled past the decay */
};

/* One bounded pass (PASS_INTERVAL, PASS_URGENT, PASS_QUIET or
 * PASS_CATCHUP): the bytes released.  `held`: meshing is held back for
 * frees that go on. */
size_t shrink_pass(enum pass_kind kind, int held);
/* A decay pass: what idled past the decay; `idle`: every released slot
 * too.  The bytes released. */
size_t shrink_decay_pass(int idle);
/* Meshing's catch-up: the rest it asks for before the next (ns);
 * *released the bytes it gave back. */
uint64_t shrink_mesh_catchup(size_t *released);
/* Map back stale aliases and punch dirty slots of meshing's arena. */
void shrink_purge_released(void);
/* A pass has ended: what the program does from now on tells whether it
 * is idle (shrink_program_idle). */
void shrink_note_program(void);
/* Has the program made no refill and no free to a slab since the last
 * pass ended? */
int shrink_program_idle(void);
/* Does a live cache have get/kick callbacks? */
int shrink_any_ops_cache(void);
/* The last mesh pass ran out of budget with candidates left. */
extern SD_HIDDEN int shrink_mesh_more;

/* hooks/shrinker.c's, for the passes. */
extern SD_HIDDEN struct shrinker_stats shrink_stats;   /* the counters */
/* Is the thread asked to leave its loop (exit waits for it)? */
int shrinker_stopping(void);

#endif
