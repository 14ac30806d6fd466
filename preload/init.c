/*
 * preload/init.c - process life: start-up, fork, exit.
 *
 * Nothing here runs inside the first malloc: that one sets up its caches
 * lazily (classes/tcache.c).  The constructor registers the fork handlers,
 * starts the background shrinker if an option asks for it, and opens the
 * control socket; the destructor prints statistics and stops the thread.
 *
 * Fork: prepare takes every allocator lock in the documented order
 * (classes/cache.c): the cache registry, the thread registry, the segment
 * and large-block leaves, every slab lock, every cache list lock.  The
 * parent releases them; the child resets them (it runs as a new tid), gives
 * back the dead threads' active slabs, and restarts the shrinker if one ran.
 */
#include <pthread.h>
#include <unistd.h>

#include "cache.h"
#include "control.h"
#include "fmt.h"
#include "large.h"
#include "options.h"
#include "segment.h"
#include "shrinker.h"
#include "slabdefrag.h"
#include "tcache.h"

static void fork_prepare(void)
{
    sd_mutex_lock(&sd_caches_lock);
    tcache_lock_registry();
    segment_lock_all();
    large_lock_all();
    cache_lock_all();
}

static void fork_parent(void)
{
    cache_unlock_all(0);
    large_unlock_all(0);
    segment_unlock_all(0);
    tcache_unlock_registry(0);
    sd_mutex_unlock(&sd_caches_lock);
}

static void fork_child(void)
{
    sd_tc.tid = 0;                  /* a new thread id in the child */
    cache_unlock_all(1);
    large_unlock_all(1);
    segment_unlock_all(1);
    tcache_unlock_registry(1);
    sd_mutex_reset_child(&sd_caches_lock);
    tcache_after_fork_child();
    shrinker_after_fork_child();
    control_after_fork_child();
}

__attribute__((constructor(101))) static void slabdefrag_init(void)
{
    cache_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    if (sd_opt.background || sd_opt.rss_limit_mb || sd_opt.control)
        shrinker_start();
    control_init();
}

__attribute__((destructor(101))) static void slabdefrag_fini(void)
{
    if (sd_opt.stats == SD_STATS_TEXT)
        sd_stats_print(2);
    else if (sd_opt.stats == SD_STATS_JSON)
        sd_stats_print(2);          /* JSON printer: issue 4 */
    control_shutdown();
    shrinker_stop();
}
