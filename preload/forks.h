/*
 * preload/forks.h - the forks that skip pthread_atfork (preload/forks.c),
 * and the preload layer's own fork child handler (preload/init.c) they
 * run after the allocator's.
 */
#ifndef SD_PRELOAD_FORKS_H
#define SD_PRELOAD_FORKS_H

/* In a fork child, after the allocator's handler: the thread count, the
 * shrinker and the control socket (preload/init.c). */
void preload_fork_child(void);

#endif
