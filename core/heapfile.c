/*
 * core/heapfile.c - the heap file: the one memfd every segment is carved
 * from when meshing is on, and the mappings of its ranges (a segment, a
 * mesh alias, a hole punch).  See heapfile.h.  Only core/os.c maps; this
 * file decides what goes where.  The write barrier, the program's signal
 * calls and the fork copy are barrier.c, sigchain.c and forkcopy.c.
 */
#define _GNU_SOURCE
#include "heapfile.h"

#include <errno.h>
#include <unistd.h>

#include "heapfile_internal.h"
#include "options.h"
#include "os.h"
#include "segment.h"
#include "types.h"
#include "uffd.h"

uintptr_t heapfile_base;
int heapfile_fd = -1;
static size_t heapfile_next;               /* bytes handed out (atomic) */

size_t heapfile_used(void)
{
    size_t n = __atomic_load_n(&heapfile_next, __ATOMIC_ACQUIRE);
    return n < HEAPFILE_SIZE ? n : HEAPFILE_SIZE;
}

int heapfile_init(void)
{
    static int done;
    if (done)
        return heapfile_base ? 0 : EINVAL;
    done = 1;
    void *base;
    int fd, err = os_reserve_aligned(HEAPFILE_SIZE, SD_SEGMENT_SIZE, &base);
    if (err)
        return err;
    if ((err = os_memfd(HEAPFILE_SIZE, &fd))) {
        os_unmap(base, HEAPFILE_SIZE);
        return err;
    }
    if ((err = sigchain_install())) {
        close(fd);
        os_unmap(base, HEAPFILE_SIZE);
        return err;
    }
    heapfile_fd = fd;
    /* The barrier of a mesh: userfaultfd where permitted (auto, uffd). */
    if (sd_opt.mesh_barrier != SD_BARRIER_MPROTECT) {
        int e = uffd_open();
        if (e && sd_opt.mesh_barrier == SD_BARRIER_UFFD)
            sd_warn("SLABDEFRAG_MESH_BARRIER=uffd: userfaultfd is not available "
                    "(errno %d); using mprotect", e);
    }
    __atomic_store_n(&sigchain_handler_on, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&heapfile_base, (uintptr_t)base, __ATOMIC_RELEASE);
    return 0;
}

int heapfile_segment_map(void **out, int anon)
{
    if (!heapfile_base)
        return ENOMEM;
    size_t off = __atomic_fetch_add(&heapfile_next, SD_SEGMENT_SIZE, __ATOMIC_ACQ_REL);
    if (off + SD_SEGMENT_SIZE > HEAPFILE_SIZE)
        return ENOMEM;
    void *p = (void *)(heapfile_base + off);
    int err = anon ? os_map_anon_fixed(p, SD_SEGMENT_SIZE)
                   : os_map_shared_fixed(p, SD_SEGMENT_SIZE, heapfile_fd, off, 0);
    if (err)
        return err;                     /* the hole stays unused */
    if (uffd_ready())
        uffd_register(p, SD_SEGMENT_SIZE);      /* for the uffd barrier */
    *out = p;
    return 0;
}

/* In the arena and mapped onto its own file pages (not an anonymous
 * segment's unfiled slot, core/segment.c). */
static int file_backed(const void *p)
{
    return heapfile_contains(p) && segment_addr_filed(p);
}

void heapfile_purge(void *p, size_t size)
{
    if (file_backed(p))
        os_punch_hole(heapfile_fd, (uintptr_t)p - heapfile_base, size);
    else
        os_purge(p, size);
}

void heapfile_purge_batch(const struct os_range *r, unsigned n)
{
    struct os_range anon[OS_BATCH_MAX];
    unsigned na = 0;
    for (unsigned i = 0; i < n; i++) {
        if (file_backed(r[i].p)) {
            os_punch_hole(heapfile_fd, (uintptr_t)r[i].p - heapfile_base, r[i].size);
            continue;
        }
        anon[na++] = r[i];
        if (na == OS_BATCH_MAX) {
            os_purge_batch(anon, na);
            na = 0;
        }
    }
    os_purge_batch(anon, na);
}

/* A remap of the range under the uffd barrier replaces its VMA: the
 * release must wake its waiters rather than un-protect (core/uffd.h). */
static void note_remap(void *dst)
{
    if (barrier_mine && barrier_uffd && (uintptr_t)dst == barrier_lo)
        barrier_remapped = 1;
}

/* Not populated: the program faults an alias's pages in as it touches
 * them.  Filled at once, each of the host's pages would count twice in
 * RSS (a page table entry each; PSS is right either way): burst's final
 * RSS with meshing went from 89 to 146 MiB. */
int heapfile_alias(void *dst, const void *src, size_t size)
{
    note_remap(dst);
    return os_map_shared_fixed(dst, size, heapfile_fd, (uintptr_t)src - heapfile_base, 0);
}

int heapfile_unalias(void *dst, size_t size)
{
    note_remap(dst);
    int err = os_map_shared_fixed(dst, size, heapfile_fd, (uintptr_t)dst - heapfile_base, 0);
    if (!err && uffd_ready() && !(barrier_mine && barrier_uffd))
        uffd_register(dst, size);       /* merges with its registered neighbours */
    return err;
}

int heapfile_unalias_anon(void *dst, size_t size)
{
    note_remap(dst);
    int err = os_map_anon_fixed(dst, size);
    if (!err && uffd_ready() && !(barrier_mine && barrier_uffd))
        uffd_register(dst, size);
    return err;
}

int heapfile_copy_out(const void *p, size_t size)
{
    return os_pwrite_all(heapfile_fd, p, size, (uintptr_t)p - heapfile_base);
}

int heapfile_file(void *p, size_t size)
{
    size_t off = (uintptr_t)p - heapfile_base;
    int err = heapfile_copy_out(p, size);
    if (err)
        return err;                     /* still anonymous, untouched */
    note_remap(p);
    /* Populated (every page was just written: no hole): the program's
     * next touch of the host does not fault, one fault of about 11 us each
     * on this project's virtual machines (python's churn: 2,000-3,000
     * fewer minor faults of 98,000). */
    if (os_map_shared_fixed(p, size, heapfile_fd, off, 1) &&
        (err = os_map_shared_fixed(p, size, heapfile_fd, off, 1)))
        sd_fatal("meshing: cannot map a slab onto the arena file (errno %d): "
                 "its objects are in the file only", err);
    return 0;
}

void heapfile_register(void *p, size_t size)
{
    if (uffd_ready())
        uffd_register(p, size);
}

int heapfile_unfile(void *p, size_t size)
{
    size_t off = (uintptr_t)p - heapfile_base;
    int err = os_map_anon_fixed(p, size);
    if (err) {                          /* it may be unmapped now: filed again */
        os_map_shared_fixed(p, size, heapfile_fd, off, 0);
        os_punch_hole(heapfile_fd, off, size);
        return err;
    }
    os_punch_hole(heapfile_fd, off, size);  /* no mapping left: no TLB flush */
    if (uffd_ready())
        uffd_register(p, size);
    return 0;
}

void heapfile_punch(void *p, size_t size)
{
    os_punch_hole(heapfile_fd, (uintptr_t)p - heapfile_base, size);
}

int heapfile_mapped(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    return heapfile_base && a >= heapfile_base && len <= heapfile_used() &&
           a - heapfile_base <= heapfile_used() - len;
}
