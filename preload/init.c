/*
 * preload/init.c - process life: start-up, fork, exit.
 *
 * Nothing here runs inside the first malloc: that one sets up its caches
 * lazily (classes/tcache.c).  The constructor grows the descriptor table
 * for the allocator's own descriptors (os_fd_reserve), registers the fork
 * handlers, starts the background shrinker if an option asks for it, and
 * opens the control socket; the destructor prints statistics and stops
 * the thread.
 *
 * Fork: the allocator's locks are handled by classes/fork.c (registered at
 * first use); here the child counts its one thread, restarts the shrinker
 * if one ran and re-opens its control socket.  The forks that skip
 * pthread_atfork run both (preload/forks.c).
 *
 * The program's threads are counted from the constructor on
 * (preload/lifetime.c), so that the shrinker never outlives the last one.
 */
#include <pthread.h>
#include <unistd.h>

#include "cache.h"
#include "control.h"
#include "forks.h"
#include "lifetime.h"
#include "options.h"
#include "os.h"
#include "prof.h"
#include "segment.h"
#include "shrinker.h"
#include "slabdefrag.h"
#include "stats.h"
#include "syscalls.h"

void preload_fork_child(void)
{
    lifetime_after_fork_child();
    shrinker_after_fork_child();
    control_after_fork_child();
}

/* Meshing's thread, lazily (hooks/shrinker.c, "Lazy start") where the
 * entries of preload/override.c are tail jumps - an optimised build - so
 * that the deferred entries see the program's call site, and the C
 * library's and our code were found; with the program otherwise. */
static void mesh_thread_init(void)
{
#if defined(__OPTIMIZE__)
    if (os_runtime_text_init() == 0) {
        shrinker_arm();
        return;
    }
#endif
    shrinker_start();
}

__attribute__((constructor(101))) static void slabdefrag_init(void)
{
    os_fd_reserve();                    /* while the program has one thread */
    cache_init();
    syscalls_init();
    lifetime_init();
    pthread_atfork(NULL, NULL, preload_fork_child);
    if (sd_opt.background == SD_BG_ON || sd_opt.rss_limit_mb || sd_opt.control)
        shrinker_start();
    else if (sd_opt.mesh)
        mesh_thread_init();
    control_init();
}

__attribute__((destructor(101))) static void slabdefrag_fini(void)
{
    if (sd_opt.stats == SD_STATS_TEXT)
        sd_stats_print(2);
    else if (sd_opt.stats == SD_STATS_JSON)
        stats_print(2, STATS_JSON, STATS_SORT_NONE);
    if (sd_opt.prof)
        prof_write_final();             /* jemalloc's prof_final */
    control_shutdown();
    shrinker_stop();
}
