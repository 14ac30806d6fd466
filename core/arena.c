/*
 * core/arena.c - the memfd arena: the one shared file every segment is
 * carved from when meshing is on, and the mappings of its ranges (a
 * segment, a mesh alias, a hole punch).  See arena.h.  "Arena" here is
 * that file, not a jemalloc or glibc arena (per-thread heaps); the
 * extent arenas of core/extent.c are the latter kind.  Only core/os.c
 * maps; this file decides what goes where.  The write barrier, the
 * program's signal calls and the fork copy are barrier.c, sigchain.c and
 * forkcopy.c.
 */
#define _GNU_SOURCE
#include "arena.h"

#include <errno.h>
#include <unistd.h>

#include "barrier.h"
#include "options.h"
#include "os.h"
#include "types.h"
#include "uffd.h"

uintptr_t arena_base;
int arena_fd = -1;
static size_t arena_next;               /* bytes handed out (atomic) */

size_t arena_used(void)
{
    size_t n = __atomic_load_n(&arena_next, __ATOMIC_ACQUIRE);
    return n < ARENA_SIZE ? n : ARENA_SIZE;
}

int arena_init(void)
{
    static int done;
    if (done)
        return arena_base ? 0 : EINVAL;
    done = 1;
    void *base;
    int fd, err = os_reserve_aligned(ARENA_SIZE, SD_SEGMENT_SIZE, &base);
    if (err)
        return err;
    if ((err = os_memfd(ARENA_SIZE, &fd))) {
        os_unmap(base, ARENA_SIZE);
        return err;
    }
    if ((err = sigchain_install())) {
        close(fd);
        os_unmap(base, ARENA_SIZE);
        return err;
    }
    arena_fd = fd;
    /* The barrier of a mesh: userfaultfd where permitted (auto, uffd). */
    if (sd_opt.mesh_barrier != SD_BARRIER_MPROTECT) {
        int e = uffd_open();
        if (e && sd_opt.mesh_barrier == SD_BARRIER_UFFD)
            sd_warn("SLABDEFRAG_MESH_BARRIER=uffd: userfaultfd is not available "
                    "(errno %d); using mprotect", e);
    }
    __atomic_store_n(&sigchain_handler_on, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&arena_base, (uintptr_t)base, __ATOMIC_RELEASE);
    return 0;
}

int arena_segment_map(void **out)
{
    if (!arena_base)
        return ENOMEM;
    size_t off = __atomic_fetch_add(&arena_next, SD_SEGMENT_SIZE, __ATOMIC_ACQ_REL);
    if (off + SD_SEGMENT_SIZE > ARENA_SIZE)
        return ENOMEM;
    void *p = (void *)(arena_base + off);
    int err = os_map_shared_fixed(p, SD_SEGMENT_SIZE, arena_fd, off);
    if (err)
        return err;                     /* the hole stays unused */
    if (uffd_ready())
        uffd_register(p, SD_SEGMENT_SIZE);      /* for the uffd barrier */
    *out = p;
    return 0;
}

void arena_purge(void *p, size_t size)
{
    if (arena_contains(p))
        os_punch_hole(arena_fd, (uintptr_t)p - arena_base, size);
    else
        os_purge(p, size);
}

/* A remap of the range under the uffd barrier replaces its VMA: the
 * release must wake its waiters rather than un-protect (core/uffd.h). */
/* A remap of the range under the uffd barrier replaces its VMA: the
 * release must wake its waiters rather than un-protect (core/uffd.h). */
static void note_remap(void *dst)
{
    if (barrier_mine && barrier_uffd && (uintptr_t)dst == barrier_lo)
        barrier_remapped = 1;
}

int arena_alias(void *dst, const void *src, size_t size)
{
    note_remap(dst);
    return os_map_shared_fixed(dst, size, arena_fd, (uintptr_t)src - arena_base);
}

int arena_unalias(void *dst, size_t size)
{
    note_remap(dst);
    int err = os_map_shared_fixed(dst, size, arena_fd, (uintptr_t)dst - arena_base);
    if (!err && uffd_ready() && !(barrier_mine && barrier_uffd))
        uffd_register(dst, size);       /* merges with its registered neighbours */
    return err;
}

int arena_mapped(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    return arena_base && a >= arena_base && len <= arena_used() &&
           a - arena_base <= arena_used() - len;
}
