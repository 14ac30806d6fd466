/*
 * core/heapfile.h - remappable slab memory for meshing (issue 6): the heap
 * file, one memfd every segment is carved from (core/heapfile.c; "the
 * arena" in older text, not to be confused with jemalloc's and glibc's
 * arenas, which are per-thread heaps like core/extent.c's), its write
 * barrier (core/barrier.h), the program's signal calls around the
 * barrier's handler (core/sigchain.h) and the fork copy (core/forkcopy.h).
 * This header tells the design of all four.
 *
 * With SLABDEFRAG_MESH=1 every segment is carved out of one memfd mapped
 * MAP_SHARED: the segment at address base + off is file offset off, so a
 * slab's physical pages can be shared by two virtual ranges (a mesh) and
 * released with a hole punch.  The page slabs' segments are the
 * exception: private anonymous memory at their place in the arena, where
 * only the slots that host a mesh are mapped onto the file
 * (core/segment.c, "Anonymous segments").  Without the option nothing
 * here is used and segments are private anonymous memory as before.
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
 * routes sigaction(SIGSEGV) here (sigchain_sigaction), so a program that
 * installs its own handler is chained behind ours, as Mesh does.  A
 * program that replaces it behind libc's back is detected
 * (sigchain_handler_ours) and meshing stops.
 *
 * Fork (a shared mapping would otherwise share the heap with the child):
 * prepare makes the arena read-only; the child copies the arena's data
 * into a fresh memfd, maps it over the same addresses (the file-backed
 * ones: anonymous segments are the child's own copy already), re-creates
 * the mesh aliases and tells the parent through a pipe; the parent then makes its
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
 * _FORTIFY_SOURCE forms): barrier_gen() before the call, and on
 * EFAULT barrier_wait() says whether a barrier explains it (then it
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
#ifndef SD_CORE_HEAPFILE_H
#define SD_CORE_HEAPFILE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "fmt.h"
#include "os.h"

#define HEAPFILE_SIZE (64UL << 30)         /* address space and file size */

extern SD_HIDDEN uintptr_t heapfile_base;  /* 0 when meshing is off */

/* Create the arena and install the SIGSEGV handler (once; called from
 * cache_init when SLABDEFRAG_MESH=1, before any segment exists).
 * 0 or errno (then segments stay anonymous and nothing meshes). */
int heapfile_init(void);
static inline int heapfile_contains(const void *p)
{
    return heapfile_base && (uintptr_t)p - heapfile_base < HEAPFILE_SIZE;
}
/* A new 4 MiB segment from the arena into *out; ENOMEM when the arena is
 * exhausted (the caller maps anonymous memory instead).  Called under a
 * segment kind lock. */
int heapfile_segment_map(void **out, int anon);
/* Release the memory of [p, p+size): a hole punch where it maps its own
 * pages of the arena file (it must not be an alias), madvise elsewhere
 * (outside the arena, or an anonymous segment's unfiled slot). */
void heapfile_purge(void *p, size_t size);
/* heapfile_purge of n ranges: the anonymous ones with one TLB flush for
 * all (os_purge_batch), the arena's one punch each (a shared file page
 * written to is flushed range by range in any case). */
void heapfile_purge_batch(const struct os_range *r, unsigned n);
/* Point the virtual range [dst, dst+size) at the pages of src's range
 * (a mesh alias); heapfile_unalias points it back at its own file offset. */
int heapfile_alias(void *dst, const void *src, size_t size);
int heapfile_unalias(void *dst, size_t size);
/* Anonymous segments (anon: heapfile_segment_map maps private anonymous
 * memory at the segment's place in the arena; core/segment.c, "Anonymous
 * segments"): heapfile_unalias_anon points an alias back at anonymous
 * zero memory; heapfile_file makes an anonymous range file-backed with the
 * same bytes (copied into its own offset, then mapped there; the caller
 * holds the range's write barrier), so that it can host a mesh; and
 * heapfile_unfile makes a filed range anonymous and zero again, its file
 * pages freed (errno, and the range still filed, if it cannot).
 * heapfile_punch frees the range's own file pages whatever maps it. */
int heapfile_unalias_anon(void *dst, size_t size);
int heapfile_file(void *p, size_t size);
/* Copy the bytes of [p, p+size) into its own offset of the file, the
 * mapping left as it is.  0 or errno. */
int heapfile_copy_out(const void *p, size_t size);
/* Register a range remapped under a barrier (heapfile_file) with the
 * userfaultfd barrier, once that barrier has ended, so that a barrier
 * can write-protect it later (a filed slot may hold a mesh source one
 * day). */
void heapfile_register(void *p, size_t size);
int heapfile_unfile(void *p, size_t size);
void heapfile_punch(void *p, size_t size);
/* Is [p, p+len) inside the arena's mapped part (so user space may read it,
 * and a write there waits at the barrier instead of failing)? */
int heapfile_mapped(const void *p, size_t len);

#include "barrier.h"
#include "forkcopy.h"
#include "sigchain.h"

#endif
