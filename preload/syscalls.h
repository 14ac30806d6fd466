/*
 * preload/syscalls.h - the receiving system calls (read, recv...) retried
 * across the mesh write barrier; see preload/syscalls.c and core/heapfile.h.
 */
#ifndef SD_PRELOAD_SYSCALLS_H
#define SD_PRELOAD_SYSCALLS_H

/* Find the next definitions (libc's) of the wrapped calls (from the
 * library constructor, after cache_init: dlsym may allocate). */
void syscalls_init(void);
/* The next definition of `name` after ours (dlsym RTLD_NEXT, else libc's
 * own), or `fallback`.  May allocate: never from inside malloc. */
void *syscalls_next_symbol(const char *name, void *fallback);

#endif
