/*
 * core/fdguard.h - the allocator's own descriptors, out of the program's
 * reach (core/fdguard.c).
 *
 * The library holds a few descriptors while it needs them: the userfaultfd
 * of the mesh barrier (from the first mesh), the shrinker's eventfd and
 * pressure files (while its thread runs), the control socket and its
 * connections (SLABDEFRAG_CONTROL=1), and a pipe for the length of a fork
 * with meshing.  Each lives at a high number (OS_FD_MIN) in a variable
 * registered here.  The preload layer's wrappers of the program's
 * descriptor calls (preload/fds.c) ask fdguard_is_ours() first: a
 * descriptor of ours is not open as far as the program is concerned
 * (close, dup, fcntl on it fail with EBADF, close_range and closefrom pass
 * over it), and a number the program wants (dup2, dup3 onto it) is given
 * up after ours moves to another (fdguard_evict).  So nothing the program
 * does to its descriptors makes the library write into a file of the
 * program's, or lose a descriptor of its own.
 *
 * Users of a descriptor bracket each use with fdguard_get()/fdguard_put(),
 * which return its current number: a move waits for the uses in progress
 * (one system call each, or a mesh barrier's length for the userfaultfd),
 * and a use that starts after it sees the new number.  If no number is
 * free for the move (a descriptor table full to its limit), ours is
 * closed and its variable set to -1: its owner treats it as never opened
 * (the mesh barrier falls back to mprotect; the shrinker wakes on its
 * timer).  Leaf lock; uses nest within a thread.
 */
#ifndef SD_CORE_FDGUARD_H
#define SD_CORE_FDGUARD_H

#include "fmt.h"

/* Around the opening of descriptors of ours (no program call that
 * closes or takes numbers runs meanwhile), and inside it, fdguard_adopt:
 * move fd (just opened; < 0 passes through) to a high number, store it in
 * *slot and guard it.  Returns the new number. */
void fdguard_open_begin(void);
void fdguard_open_end(void);
int fdguard_adopt(int fd, int *slot);
/* Unguard and close *slot (if >= 0) and set it to -1. */
void fdguard_close(int *slot);
/* The descriptor in *slot for one use (-1 if none); fdguard_put ends it. */
int fdguard_get(int *slot);
void fdguard_put(void);

/* For the preload layer's wrappers. */
extern SD_HIDDEN int fdguard_count;     /* descriptors guarded now */
static inline int fdguard_any(void)
{
    return __atomic_load_n(&fdguard_count, __ATOMIC_RELAXED) != 0;
}
/* Around each program call that closes or takes a number. */
void fdguard_call_begin(void);
void fdguard_call_end(void);
/* Ours, in increasing order, at most max of them: how many. */
int fdguard_list(int *out, int max);
/* Is fd one of ours? */
int fdguard_is_ours(int fd);
/* The program is about to take number fd: if it is ours, move ours. */
void fdguard_evict(int fd);
/* Descriptors of ours moved, and lost for want of a free number. */
void fdguard_stats(unsigned long *moved, unsigned long *lost);
/* A fork child: no other thread holds the lock or a use. */
void fdguard_fork_child(void);

#endif
