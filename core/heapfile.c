/*
 * core/heapfile.c - remappable slab memory for meshing: the shared
 * anonymous objects that mesh hosts live in, and the mappings of their
 * pages (a host, an alias, a removal).  See heapfile.h.  Only core/os.c
 * maps; this file decides what goes where.  The write barrier, the
 * program's signal calls and the fork copy are writebarrier.c, sigchain.c and
 * forkcopy.c.
 */
#define _GNU_SOURCE
#include "heapfile.h"

#include <errno.h>
#include <string.h>

#include "heapfile_internal.h"
#include "options.h"
#include "os.h"
#include "segment.h"
#include "types.h"
#include "uffd.h"

int heapfile_on;

int heapfile_init(void)
{
    static int done;
    if (done)
        return heapfile_on ? 0 : EINVAL;
    done = 1;
    int err = sigchain_install();
    if (err)
        return err;
    wbarrier_init();
    __atomic_store_n(&sigchain_handler_on, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&heapfile_on, 1, __ATOMIC_RELEASE);
    return 0;
}

int heapfile_overlaps(const void *p, size_t len)
{
    if (!heapfile_on || !len)
        return 0;
    uintptr_t a = (uintptr_t)p;
    uintptr_t end = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len - 1;
    if (a >> SD_VA_BITS)
        return 0;
    if (end >> SD_VA_BITS)
        end = (1UL << SD_VA_BITS) - 1;
    /* A buffer spanning more segments than this is not a real buffer of
     * the program's; call it ours, which only costs a wait. */
    if ((end >> SD_SEGMENT_SHIFT) - (a >> SD_SEGMENT_SHIFT) > 4096)
        return 1;
    for (uintptr_t i = a >> SD_SEGMENT_SHIFT; i <= end >> SD_SEGMENT_SHIFT; i++)
        if (segment_map_test(i << SD_SEGMENT_SHIFT))
            return 1;
    return 0;
}

/* A slot that maps its own shared object (a filed slot): not an alias of
 * another, not private anonymous memory. */
static int file_backed(const void *p)
{
    return heapfile_contains(p) && segment_addr_filed(p);
}

void heapfile_purge(void *p, size_t size)
{
    if (file_backed(p))
        os_remove(p, size);
    else
        os_purge(p, size);
}

void heapfile_purge_batch(const struct os_range *r, unsigned n)
{
    struct os_range anon[OS_BATCH_MAX];
    unsigned na = 0;
    for (unsigned i = 0; i < n; i++) {
        if (file_backed(r[i].p)) {
            os_remove(r[i].p, r[i].size);
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
    if (wbarrier_mine && wbarrier_uffd && (uintptr_t)dst == wbarrier_lo)
        wbarrier_remapped = 1;
}

/* Not populated: the program faults an alias's pages in as it touches
 * them; filled at once, each of the host's pages would count twice in
 * RSS (a page table entry each). */
int heapfile_alias(void *dst, const void *src, size_t size)
{
    note_remap(dst);
    return os_alias_fixed(src, size, dst);
}

int heapfile_unalias_anon(void *dst, size_t size)
{
    note_remap(dst);
    int err = os_map_anon_fixed(dst, size);
    if (!err && uffd_ready() && !(wbarrier_mine && wbarrier_uffd))
        uffd_register(dst, size);
    return err;
}

/* A new shared object holding the bytes of [p, p+size), moved over p.
 * Populated: every page is written by the copy anyway.  If the move
 * fails after it unmapped p, the bytes go back into anonymous memory at
 * p; only if that fails too are they lost, and the process stops. */
static int refile(void *p, size_t size)
{
    void *t;
    int err = os_map_shared_anon(size, 1, &t);
    if (err)
        return err;
    memcpy(t, p, size);
    note_remap(p);
    if (!(err = os_move_fixed(t, size, p)))
        return 0;
    if (os_mapped(p, size)) {
        os_unmap(t, size);
        return err;                     /* p untouched: still its own */
    }
    if (os_map_anon_fixed(p, size))
        sd_fatal("meshing: a slab's mapping is gone and cannot be made again "
                 "(errno %d)", err);
    memcpy(p, t, size);
    os_unmap(t, size);
    return err;
}

int heapfile_file(void *p, size_t size)
{
    return refile(p, size);
}

void heapfile_register(void *p, size_t size)
{
    if (uffd_ready())
        uffd_register(p, size);
}

int heapfile_unfile(void *p, size_t size)
{
    /* Its pages are freed first: a stale alias of a former host (core/
     * segment.c) or the rest of a fork child's run may still map the
     * object, which would keep them. */
    os_remove(p, size);
    note_remap(p);
    int err = os_map_anon_fixed(p, size);
    if (err)
        return err;                     /* still filed, its pages freed */
    if (uffd_ready())
        uffd_register(p, size);
    return 0;
}

int heapfile_child_refile(void *p, size_t size)
{
    return refile(p, size);
}
