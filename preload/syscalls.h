/*
 * preload/syscalls.h - the receiving system calls (read, recv...) retried
 * across the mesh write barrier; see preload/syscalls.c and core/arena.h.
 */
#ifndef SD_PRELOAD_SYSCALLS_H
#define SD_PRELOAD_SYSCALLS_H

/* Find the next definitions (libc's) of the wrapped calls (from the
 * library constructor, after cache_init: dlsym may allocate). */
void syscalls_init(void);

#endif
