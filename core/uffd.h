/*
 * core/uffd.h - the userfaultfd write barrier of the mesh arena.
 *
 * With mprotect a write-protected page faults in user mode (our SIGSEGV
 * handler parks the writer) but makes the kernel fail a system call with
 * EFAULT.  userfaultfd's write-protect mode (UFFDIO_REGISTER_MODE_WP,
 * UFFDIO_WRITEPROTECT) instead blocks every writer in the kernel, from
 * user or kernel mode alike, until the range is un-protected.  The arena
 * (core/heapfile.c) decides which barrier a mesh uses; this file only opens
 * the descriptor and protects and releases one range.
 *
 * Availability: the userfaultfd(2) system call without UFFD_USER_MODE_ONLY
 * (kernel faults must be handled too) needs CAP_SYS_PTRACE or
 * vm.unprivileged_userfaultfd=1; failing that, /dev/userfaultfd
 * (USERFAULTFD_IOC_NEW) if the process may open it.  Write protection of
 * shared memory (a mesh host is shared anonymous memory) needs
 * UFFD_FEATURE_WP_HUGETLBFS_SHMEM (Linux 5.19).  Anything missing:
 * uffd_open() fails and the arena keeps the mprotect barrier.
 *
 * No thread can wait forever:
 *  - Only UFFDIO_REGISTER_MODE_WP is registered (no MISSING or MINOR), and
 *    no non-cooperative event is requested: a fault blocks only on a PTE
 *    this process write-protected, and fork, mremap, munmap never wait
 *    for a reader.
 *  - The faulting threads sleep on the descriptor's wait queues whether or
 *    not their messages were read.  uffd_release() wakes them: either it
 *    clears the protection (UFFDIO_WRITEPROTECT mode 0, which wakes the
 *    range), or, when the range was remapped meanwhile (a mesh maps the
 *    host's pages over the source: a new VMA, not registered, whose PTEs
 *    carry no write-protect bit), UFFDIO_WAKE wakes the range and the
 *    faults retry against the new mapping.  A fault is queued under the
 *    mmap (or VMA) lock that the remap takes for writing, so it is either
 *    queued before the remap (and woken after it) or sees the new mapping.
 *  - Messages are drained (read, non-blocking) only to count the writers
 *    that waited; an unread message never keeps a thread asleep.
 *  - Fork: without UFFD_FEATURE_EVENT_FORK the child's VMAs lose the
 *    registration and the PTEs copied for them lose the write-protect bit
 *    (the arena's shared VMAs are not even copied: the child faults its
 *    pages in afresh).  The descriptor the child inherits still belongs to
 *    the parent's mm - an ioctl through it would protect the parent's
 *    pages - so the child drops it (uffd_fork_child) and opens its own
 *    when it first meshes; uffd_protect() also checks the pid, for
 *    children made without the atfork handlers.
 *  - The program cannot close or take our descriptor (core/fdguard.h): a
 *    dup2 onto its number moves it, never while a range is protected
 *    through it.
 */
#ifndef SD_CORE_UFFD_H
#define SD_CORE_UFFD_H

#include <stddef.h>

/* Open the descriptor and negotiate the features (once per process; from
 * heapfile_init).  0 or errno (EPERM: not permitted; EINVAL/ENOSYS: the
 * kernel lacks write protection of shared memory). */
int uffd_open(void);
/* Is the descriptor open (in this process)? */
int uffd_ready(void);
/* Register [p, p+size) (page aligned, arena mappings) for write
 * protection: a new segment, a restored alias.  0 or errno (harmless:
 * uffd_protect registers what it finds unregistered).  Registering once
 * per mapping rather than at each protect saves a system call that takes
 * the mmap lock for writing; the price is that read faults in registered
 * mappings do not fault around. */
int uffd_register(void *p, size_t size);
/* Write-protect [p, p+size) (page aligned): registered or not (then it is
 * registered first).  0 or errno (then nothing is protected, the
 * descriptor is closed and the caller uses mprotect). */
int uffd_protect(void *p, size_t size);
/* End the protection of the range uffd_protect() took and wake every
 * writer waiting on it.  remapped: the range was mapped anew meanwhile
 * (no longer registered).  Returns the writers that faulted (drained
 * messages).  0 or errno in *err. */
unsigned long uffd_release(void *p, size_t size, int remapped, int *err);
/* In a fork child: forget the parent's descriptor. */
void uffd_fork_child(void);
/* Close the descriptor after a failure: the arena uses mprotect. */
void uffd_close(void);

#endif
