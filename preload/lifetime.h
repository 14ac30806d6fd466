/*
 * preload/lifetime.h - the program's threads, counted, so that the
 * background shrinker never keeps the process alive (preload/lifetime.c).
 * Exports pthread_create and thrd_create.
 */
#ifndef SD_PRELOAD_LIFETIME_H
#define SD_PRELOAD_LIFETIME_H

/* Count the main thread, find the next pthread_create and thrd_create
 * (from the library constructor, after cache_init: dlsym may allocate). */
void lifetime_init(void);
/* In a fork child: one program thread, the forking one. */
void lifetime_after_fork_child(void);

#endif
