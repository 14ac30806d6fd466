/*
 * core/arena.h - remappable slab memory for meshing (issue 6): the memfd
 * arena (core/arena.c), its write barrier (core/barrier.c), the program's
 * signal calls around the barrier's handler (core/sigchain.c) and the
 * fork copy (core/forkcopy.c).  "Arena" is the one shared file, not a
 * jemalloc or glibc arena (those are core/extent.c's kind).
 *
 * With SLABDEFRAG_MESH=1 every segment is carved out of one memfd mapped
 * MAP_SHARED: the segment at address base + off is file offset off, so a
 * slab's physical pages can be shared by two virtual ranges (a mesh) and
 * released with a hole punch.  Without the option nothing here is used
 * and segments are private anonymous memory as before.
 *
 * The arena also owns the write barrier meshing and fork need: while a
 * slab's objects are copied (a mesh) or the heap is copied for a fork
 * child, writes to it must wait.  A mesh's barrier is one of two
 * (SLABDEFRAG_MESH_BARRIER, the statistics name the one in use):
 *  - uffd (the default where the process may use userfaultfd for kernel
 *    faults, core/uffd.h): the slab is write-protected through a
 *    userfaultfd; every writer, in user mode or inside a system call,
 *    sleeps in the kernel until the slab is remapped and woken.  No call
 *    fails because of a mesh.
 *  - mprotect (elsewhere, or when forced): the slab is made read-only, and
 *    a SIGSEGV handler parks a faulting user-mode writer until the range
 *    is writable again; the write then retries.  The kernel does not wait:
 *    see "System calls" below.
 * Faults that are not ours go to the program's handler: the preload layer
 * routes sigaction(SIGSEGV) here (arena_sigaction), so a program that
 * installs its own handler is chained behind ours, as Mesh does.  A
 * program that replaces it behind libc's back is detected
 * (arena_handler_ours) and meshing stops.
 *
 * Fork (a shared mapping would otherwise share the heap with the child):
 * prepare makes the arena read-only; the child copies the arena's data
 * into a fresh memfd, maps it over the same addresses, re-creates the mesh
 * aliases and tells the parent through a pipe; the parent then makes its
 * arena writable again.  Parent threads that write meanwhile wait in the
 * handler.  Cost: a fork copies the live heap (no copy-on-write sharing).
 *
 * The fork barrier is mprotect under either mesh barrier: the child must
 * inherit the protection (a write it makes before its atfork handler runs
 * must fault, not reach the parent's file), and a userfaultfd's
 * registration is not inherited without UFFD_FEATURE_EVENT_FORK, whose
 * event the forking thread would have to wait for a reader to take.
 *
 * System calls.  Under an mprotect barrier (every fork; a mesh with the
 * mprotect barrier) the kernel does not fault on a write-protected page:
 * a read(2) into a heap buffer behind the barrier fails with EFAULT.  The
 * preload layer wraps the common receiving calls (preload/syscalls.c:
 * read, pread, readv, preadv, preadv2, recv, recvfrom, recvmsg and their
 * _FORTIFY_SOURCE forms): arena_barrier_gen() before the call, and on
 * EFAULT arena_barrier_wait() says whether a barrier explains it (then it
 * has waited, and the call is retried) or the fault is the program's
 * (returned as it is).  Not covered: glibc's internal calls, which do not
 * go through the exported symbols (stdio refilling a FILE buffer - fread,
 * fgets, getline - when the buffer is a heap block of at most 2 KiB:
 * one given with setvbuf, or stdio's own on a terminal, whose st_blksize
 * is 1 KiB; on files, pipes and sockets it is 4 KiB, a class that is
 * never meshed), and every other call that writes into
 * user memory (stat, fstat, getsockopt, accept's address, epoll_wait,
 * poll, recvmmsg, io_uring...).  Files, pipes and stream sockets keep the
 * data when the copy faults, so the retry gets it; datagram sockets,
 * eventfd, timerfd, signalfd, inotify and terminals have already dequeued
 * it: the retry waits for the next one (the program would have lost it
 * with the EFAULT anyway).  A uffd mesh barrier moves no generation: the
 * wrappers never wait for it.
 */
#ifndef SD_CORE_ARENA_H
#define SD_CORE_ARENA_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "fmt.h"

#define ARENA_SIZE (64UL << 30)         /* address space and file size */

extern SD_HIDDEN uintptr_t arena_base;  /* 0 when meshing is off */

/* Create the arena and install the SIGSEGV handler (once; called from
 * cache_init when SLABDEFRAG_MESH=1, before any segment exists).
 * 0 or errno (then segments stay anonymous and nothing meshes). */
int arena_init(void);
static inline int arena_contains(const void *p)
{
    return arena_base && (uintptr_t)p - arena_base < ARENA_SIZE;
}
/* A new 4 MiB segment from the arena into *out; ENOMEM when the arena is
 * exhausted (the caller maps anonymous memory instead).  Called under a
 * segment kind lock. */
int arena_segment_map(void **out);
/* Release the memory of [p, p+size): a hole punch inside the arena (the
 * range must not be an alias), madvise outside it. */
void arena_purge(void *p, size_t size);
/* Point the virtual range [dst, dst+size) at the pages of src's range
 * (a mesh alias); arena_unalias points it back at its own file offset. */
int arena_alias(void *dst, const void *src, size_t size);
int arena_unalias(void *dst, size_t size);
/* Write-protect [p, p+size) while its contents are copied; writers wait
 * until arena_protect_end() (after the range was remapped read-write):
 * in the kernel with the userfaultfd barrier, in the SIGSEGV handler with
 * mprotect.  The calling thread's asynchronous signals are blocked in
 * between.  One protected range at a time (the caller serialises). */
int arena_protect_begin(void *p, size_t size);
void arena_protect_end(void);
/* The barrier a mesh uses now: "uffd", "mprotect" (or "none": no arena). */
const char *arena_barrier_name(void);
/* Is our SIGSEGV handler still the installed one? */
int arena_handler_ours(void);
/* sigaction() as the preload layer exports it: SIGSEGV, while our handler
 * is installed, records the program's handler as the one we chain to. */
int arena_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* pthread_sigmask() as the preload layer exports it (glibc's semantics:
 * its two internal signals are never blocked), except that while meshing
 * is on SIGSEGV is never blocked either: a write fault in a thread that
 * blocks it would kill the process instead of waiting at the barrier
 * (threads of libraries such as nanomsg block every signal).  Blocking a
 * synchronous SIGSEGV has no other effect than that.  0 or errno. */
int arena_sigmask(int how, const sigset_t *set, sigset_t *old);
/* sigaltstack() as the preload layer exports it.  A signal stack inside
 * the arena (python's faulthandler mallocs its own) would be read-only
 * whenever a fork or a mesh protects it, and the kernel, unable to push
 * our handler's frame there, would kill the thread that faulted.  Such a
 * stack is replaced by a private mapping of the same size for as long as
 * it is registered; queries report the program's own.  0, or -1 and
 * errno, as sigaltstack(). */
int arena_sigaltstack(const stack_t *ss, stack_t *old);
/* Writers that waited in the handler (faults absorbed). */
unsigned long arena_fault_waits(void);

/* A system call that writes into user memory, under the barrier (the
 * preload layer; any thread, also a signal handler; no allocation).
 * gen = arena_barrier_gen() before the call; if the call fails with EFAULT,
 * arena_barrier_wait(buf, len, gen) returns 1 when [buf, buf+len) meets the
 * arena and a barrier that may have covered it was up at some moment since
 * gen was read - it has waited until none is: retry the call (reading the
 * generation again) - and 0 otherwise: a genuine EFAULT, to be returned as
 * it is.  Never waits with meshing off, nor in the thread that raised the
 * barrier (a signal handler interrupting the mesher or the forking thread:
 * it would wait for itself).  errno is preserved.
 * arena_barrier_wait_any() is the same when the buffers are not known (an
 * iovec array the caller must not read: it may be the bad pointer): any
 * barrier since gen counts. */
unsigned arena_barrier_gen(void);
int arena_barrier_wait(const void *buf, size_t len, unsigned gen);
int arena_barrier_wait_any(unsigned gen);
/* Is [p, p+len) inside the arena's mapped part (so user space may read it,
 * and a write there waits at the barrier instead of failing)? */
int arena_mapped(const void *p, size_t len);
/* System calls arena_barrier_wait() told to retry. */
unsigned long arena_syscall_retries(void);

/* Fork, called by classes/fork.c with every allocator lock held.  The
 * child re-creates the mesh aliases on its new file through the function
 * the meshing layer registers (classes/mesh.c), which alone knows which
 * slabs are aliases; it runs single-threaded, possibly from the SIGSEGV
 * handler, and may call arena_alias() only. */
void arena_set_fork_realias(void (*realias)(void));
void arena_fork_prepare(void);
void arena_fork_parent(void);
void arena_fork_child(void);

#endif
