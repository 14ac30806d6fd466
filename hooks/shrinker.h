/*
 * hooks/shrinker.h - the background shrinker thread.
 */
#ifndef SD_HOOKS_SHRINKER_H
#define SD_HOOKS_SHRINKER_H

#include <stddef.h>
#include <stdint.h>

/* Start the thread if it is not running (never call from inside malloc;
 * nothing starts while parked or after shrinker_stop). */
void shrinker_start(void);
/* Meshing wants the thread: start it at the free path's first nudge, from
 * the program's next malloc or free, or with the program's second thread
 * (hooks/shrinker.c, "Lazy start").  At start-up. */
void shrinker_arm(void);
/* The program has just started a thread and runs `live` of them: in
 * per-thread mode, past a few per CPU, start the thread, whose passes
 * take idle threads' slabs back (tcache_reclaim).  Not from malloc. */
void shrinker_note_threads(unsigned live);
/* Wake it for an immediate pass (starting it if needed); 0 or -errno. */
int shrinker_wake(void);
/* Stop and join it (at exit; not from the thread itself). */
void shrinker_stop(void);
/* No program thread is left (preload/lifetime.c): stop the thread and join
 * it, waiting at most a pass budget plus a little, so that the program's
 * last thread ends the process; start nothing until shrinker_unpark().
 * Called from a thread's TSD destructor; never from the thread itself. */
void shrinker_park(void);
/* A program thread exists again: start the thread if it ran when parked. */
void shrinker_unpark(void);
/* The thread's start routine: preload/lifetime.c does not count a thread
 * that runs it as one of the program's. */
void *shrinker_main(void *arg);
/* Record a pass made outside the thread (sd_shrink_all). */
void shrinker_note_pass(size_t bytes);
/* Fork: the child has no shrinker thread; restart it if there was one. */
void shrinker_after_fork_child(void);

/* Hook the control socket plugs into the thread's poll loop: fd to watch
 * (or -1) and the handler run when it is readable. */
void shrinker_set_control(int *slot, void (*on_ready)(int fd));

struct shrinker_stats {
    int      running;
    int      armed;             /* not running; meshing's first nudge starts it */
    uint64_t passes;            /* background passes */
    uint64_t decay_passes;      /* decay passes that released memory */
    uint64_t mesh_catchups;     /* meshing's catch-up passes of an idle
                                   program (mesh only) */
    uint64_t mesh_held;         /* interval passes that left meshing out:
                                   the program's frees go on */
    uint64_t compute_holds;     /* wakes that put meshing off: the program
                                   computes without allocating */
    uint64_t wake_interval, wake_pressure, wake_explicit, wake_rss;
    uint64_t bytes_released;    /* by every pass, API ones included */
    uint64_t longest_pass_ns;   /* the longest background pass */
    uint64_t longest_vacate_ns; /* the longest one slab stayed frozen */
    uint64_t longest_pause_ns;  /* the longest a slab lock was held for get() */
    uint64_t last_pass_ns;      /* monotonic time of the last pass */
};
void shrinker_get_stats(struct shrinker_stats *st);

#endif
