/*
 * core/heapfile_internal.h - state shared by the four files behind
 * heapfile.h, and by no other file: the heap file (heapfile.c), its write
 * barrier (writebarrier.c), the program's signal calls around our handler
 * (sigchain.c) and the fork copy (forkcopy.c).
 */
#ifndef SD_CORE_HEAPFILE_INTERNAL_H
#define SD_CORE_HEAPFILE_INTERNAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fmt.h"

/* glibc's sigaction, below the exported one the preload layer wraps. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* writebarrier.c: a mesh's protected range and the generations (writebarrier.c
 * says how they move); the handler and the waits. */
extern SD_HIDDEN uintptr_t wbarrier_lo, wbarrier_hi;
extern SD_HIDDEN unsigned wbarrier_prot_gen;
extern SD_HIDDEN unsigned wbarrier_generation;
extern SD_HIDDEN int wbarrier_uffd, wbarrier_remapped;
extern SD_HIDDEN __thread int wbarrier_mine;     /* this thread raised one */
void wbarrier_segv(int sig, siginfo_t *si, void *uc);

/* sigchain.c: our handler's installation and the program's handler. */
extern SD_HIDDEN int sigchain_handler_on;
int sigchain_install(void);                     /* 0 or errno */
void sigchain_call(int sig, siginfo_t *si, void *uc);

/* forkcopy.c: the fork barrier's state while a fork is under way. */
extern SD_HIDDEN int forkcopy_active, forkcopy_protected;
extern SD_HIDDEN pid_t forkcopy_pid;
extern SD_HIDDEN uint32_t forkcopy_tid;
/* Let the forking thread's own write through (1), or not (0). */
int forkcopy_step(uintptr_t a, void *uc);
/* The child's copy of the arena (once; single-threaded). */
void forkcopy_child_copy(void);

#endif
