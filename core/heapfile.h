/*
 * core/heapfile.h - remappable slab memory for meshing: the shared
 * anonymous objects mesh hosts live in (core/heapfile.c), its write
 * barrier (core/writebarrier.h), the program's signal calls around the
 * barrier's handler (core/sigchain.h) and the fork copy (core/forkcopy.h).
 * This header tells the design of all four.
 *
 * With SLABDEFRAG_MESH=1 segments are private anonymous memory as without
 * it, taken from the address space as they are needed (a program that
 * limits its address space after start-up keeps what it allowed), and
 * only a slot that hosts a mesh maps shared memory: a shared anonymous
 * object of its own ("filed": its bytes copied into a new object, moved
 * over the slot; heapfile_file).  A mesh maps the host's pages a second
 * time at the source's address (mremap with an old size of 0), so the
 * source's private pages are freed by the remap itself, and a host's
 * object dies with its last mapping.  No file descriptor is involved:
 * nothing the program does to its descriptors can reach the heap.
 *
 * The write barrier: while a slab's objects are copied (a mesh) or the
 * shared slots are copied for a fork child, writes to them must wait.  A
 * mesh's barrier is one of two (SLABDEFRAG_MESH_BARRIER, the statistics
 * name the one in use):
 *  - uffd (the default where the process may use userfaultfd for kernel
 *    faults, core/uffd.h; its descriptor opened at the first mesh): the
 *    slab is write-protected through a userfaultfd; every writer, in user
 *    mode or inside a system call, sleeps in the kernel until the slab is
 *    remapped and woken.  No call fails because of a mesh.
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
 * Fork (a shared mapping would otherwise share those slots with the
 * child): prepare makes the shared slots read-only (filed slots, aliases,
 * stale aliases: nothing else, so a program's own protections, locks and
 * madvise flags on its blocks are never touched); the child copies each
 * into a new object of its own, re-creates the mesh aliases on them and
 * tells the parent through a pipe; the parent then makes them writable
 * again.  Parent threads that write to them meanwhile wait in the
 * handler.  The private slots are the child's copy-on-write as with any
 * allocator.  Every way to fork goes through this: fork, and _Fork,
 * syscall(SYS_fork) and clone without CLONE_VM through the preload
 * layer's wrappers (preload/forks.c); vfork and posix_spawn share the
 * address space with a child that only execs.
 *
 * The fork barrier is mprotect under either mesh barrier: the child must
 * inherit the protection (a write it makes before its atfork handler runs
 * must fault, not reach the parent's pages), and a userfaultfd's
 * registration is not inherited without UFFD_FEATURE_EVENT_FORK, whose
 * event the forking thread would have to wait for a reader to take.
 *
 * System calls.  Under an mprotect barrier (every fork; a mesh with the
 * mprotect barrier) the kernel does not fault on a write-protected page:
 * a read(2) into a heap buffer behind the barrier fails with EFAULT.  The
 * preload layer wraps the common receiving calls (preload/syscalls.c:
 * read, pread, readv, preadv, preadv2, recv, recvfrom, recvmsg and their
 * _FORTIFY_SOURCE forms): wbarrier_gen() before the call, and on
 * EFAULT wbarrier_wait() says whether a barrier explains it (then it
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
#include "segment.h"

extern SD_HIDDEN int heapfile_on;          /* 0 when meshing is off */

/* Install the SIGSEGV handler the barriers need (once; called from
 * mesh_init when SLABDEFRAG_MESH=1).  0 or errno (then nothing meshes). */
int heapfile_init(void);
/* Is p in one of our segments, with meshing on? */
static inline int heapfile_contains(const void *p)
{
    return heapfile_on && segment_of(p) != NULL;
}
/* Does [p, p+len) meet one of our segments, with meshing on? */
int heapfile_overlaps(const void *p, size_t len);
/* Release the memory of [p, p+size): the pages of its shared object where
 * the slot is filed (it must not be an alias), madvise elsewhere. */
void heapfile_purge(void *p, size_t size);
/* heapfile_purge of n ranges: the anonymous ones with one TLB flush for
 * all (os_purge_batch), the shared ones one removal each. */
void heapfile_purge_batch(const struct os_range *r, unsigned n);
/* Point the virtual range [dst, dst+size) at the pages of src's range, a
 * filed slot (a mesh alias).  0 or errno; on a failure dst may be
 * unmapped (the caller checks with os_mapped). */
int heapfile_alias(void *dst, const void *src, size_t size);
/* Point an alias back at private anonymous zero memory. */
int heapfile_unalias_anon(void *dst, size_t size);
/* Make an anonymous range a filed one with the same bytes (the caller
 * holds the range's write barrier), so that it can host a mesh.  0 or
 * errno (then it is still anonymous with its bytes). */
int heapfile_file(void *p, size_t size);
/* Register a range remapped under a barrier (heapfile_file) with the
 * userfaultfd barrier, once that barrier has ended, so that a barrier
 * can write-protect it later. */
void heapfile_register(void *p, size_t size);
/* Make a filed range anonymous and zero again; errno, and the range still
 * filed with its pages freed, if it cannot. */
int heapfile_unfile(void *p, size_t size);
/* A fork child: give the shared range [p, p+size) an object of the
 * child's own with the same bytes.  0 or errno. */
int heapfile_child_refile(void *p, size_t size);

#include "writebarrier.h"
#include "forkcopy.h"
#include "sigchain.h"

#endif
