/*
 * core/writebarrier.h - the heap file's write barrier (core/writebarrier.c): a mesh's
 * protected range, and the waits of the system calls that meet it.
 * The design: core/heapfile.h.
 */
#ifndef SD_CORE_WRITEBARRIER_H
#define SD_CORE_WRITEBARRIER_H

#include <stddef.h>

/* Find out whether the userfaultfd barrier can be had (heapfile_init). */
void wbarrier_init(void);

/* Write-protect [p, p+size) while its contents are copied; writers wait
 * until wbarrier_protect_end() (after the range was remapped read-write):
 * in the kernel with the userfaultfd barrier, in the SIGSEGV handler with
 * mprotect.  The calling thread's asynchronous signals are blocked in
 * between.  One protected range at a time (the caller serialises). */
int wbarrier_protect_begin(void *p, size_t size);
void wbarrier_protect_end(void);
/* The barrier a mesh uses now: "uffd", "mprotect" (or "none": meshing off). */
const char *wbarrier_name(void);
/* Writers that waited in the handler (faults absorbed). */
unsigned long wbarrier_fault_waits(void);

/* A system call that writes into user memory, under the barrier (the
 * preload layer; any thread, also a signal handler; no allocation).
 * gen = wbarrier_gen() before the call; if the call fails with EFAULT,
 * wbarrier_wait(buf, len, gen) returns 1 when [buf, buf+len) meets the
 * arena and a barrier that may have covered it was up at some moment since
 * gen was read - it has waited until none is: retry the call (reading the
 * generation again) - and 0 otherwise: a genuine EFAULT, to be returned as
 * it is.  Never waits with meshing off, nor in the thread that raised the
 * barrier (a signal handler interrupting the mesher or the forking thread:
 * it would wait for itself).  errno is preserved.
 * wbarrier_wait_any() is the same when the buffers are not known (an
 * iovec array the caller must not read: it may be the bad pointer): any
 * barrier since gen counts. */
unsigned wbarrier_gen(void);
int wbarrier_wait(const void *buf, size_t len, unsigned gen);
int wbarrier_wait_any(unsigned gen);
/* System calls wbarrier_wait() told to retry. */
unsigned long wbarrier_syscall_retries(void);


#endif
