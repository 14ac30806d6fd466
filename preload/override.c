/*
 * preload/override.c - the libc face: the malloc family under its libc
 * names, the __libc_* aliases glibc programs and libraries call, and
 * nothing else.  Each is a tail call into classes/malloc.c.
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "cache.h"
#include "large.h"
#include "sdmalloc.h"
#include "os.h"
#include "segment.h"

#define SD_EXPORT __attribute__((visibility("default")))
#define ALIAS(name) __attribute__((alias(#name), visibility("default"), used))

SD_EXPORT void *malloc(size_t n) { return sdm_malloc(n); }
SD_EXPORT void free(void *p) { sdm_free(p); }
SD_EXPORT void *calloc(size_t n, size_t size) { return sdm_calloc(n, size); }
SD_EXPORT void *realloc(void *p, size_t n) { return sdm_realloc(p, n); }
SD_EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
    return sdm_reallocarray(p, n, size);
}
SD_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    return sdm_posix_memalign(out, align, n);
}
SD_EXPORT void *aligned_alloc(size_t align, size_t n) { return sdm_memalign(align, n); }
SD_EXPORT void *memalign(size_t align, size_t n) { return sdm_memalign(align, n); }
SD_EXPORT void *valloc(size_t n) { return sdm_memalign(SD_PAGE_SIZE, n); }
SD_EXPORT void *pvalloc(size_t n)
{
    size_t r = (n + SD_PAGE_SIZE - 1) & ~(SD_PAGE_SIZE - 1);
    if (r < n) {
        errno = ENOMEM;
        return NULL;
    }
    return sdm_memalign(SD_PAGE_SIZE, r ? r : SD_PAGE_SIZE);
}
SD_EXPORT size_t malloc_usable_size(void *p) { return sdm_usable_size(p); }
SD_EXPORT void free_sized(void *p, size_t n) { (void)n; sdm_free(p); }
SD_EXPORT void free_aligned_sized(void *p, size_t align, size_t n)
{
    (void)align; (void)n;
    sdm_free(p);
}
SD_EXPORT void cfree(void *p) { sdm_free(p); }
SD_EXPORT int malloc_trim(size_t pad) { (void)pad; return sdm_trim(); }

/* SIGSEGV belongs to the mesh barrier while meshing is on (core/arena.h):
 * a program's handler is chained behind ours, as Mesh does.  Every other
 * signal, and SIGSEGV with meshing off, goes straight to libc.  The signal
 * masks keep SIGSEGV unblocked while meshing is on (arena_sigmask). */
SD_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return arena_sigaction(sig, act, old);
}
SD_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    return arena_sigmask(how, set, old);
}
SD_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    int err = arena_sigmask(how, set, old);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}
SD_EXPORT int sigaltstack(const stack_t *ss, stack_t *old)
{
    return arena_sigaltstack(ss, old);
}
SD_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;           /* BSD semantics, as glibc's signal() */
    if (arena_sigaction(sig, &sa, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}

SD_EXPORT struct mallinfo2 mallinfo2(void)
{
    struct mallinfo2 mi;
    memset(&mi, 0, sizeof mi);
    size_t mapped, slots;
    segment_usage(&mapped, &slots);
    struct large_stats l;
    large_get_stats(&l);
    size_t lbytes = l.bytes, lcached = l.cached_bytes + l.dirty_bytes + l.huge_cached_bytes;
    mi.arena = mapped;
    mi.hblks = l.huge_blocks + l.extent_blocks;
    mi.hblkhd = lbytes;
    size_t inuse = 0;
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (!c)
            continue;
        struct cache_usage u;
        cache_usage(c, &u);
        inuse += u.objects_inuse * c->size;
    }
    mi.uordblks = inuse + lbytes;
    mi.fordblks = mapped > inuse ? mapped - inuse : 0;
    mi.keepcost = lcached;
    return mi;
}

SD_EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo mi;
    memset(&mi, 0, sizeof mi);
    mi.arena = (int)m2.arena;
    mi.hblks = (int)m2.hblks;
    mi.hblkhd = (int)m2.hblkhd;
    mi.uordblks = (int)m2.uordblks;
    mi.fordblks = (int)m2.fordblks;
    mi.keepcost = (int)m2.keepcost;
    return mi;
}

SD_EXPORT int mallopt(int param, int value) { (void)param; (void)value; return 1; }

void *__libc_malloc(size_t n) ALIAS(malloc);
void __libc_free(void *p) ALIAS(free);
void *__libc_calloc(size_t n, size_t s) ALIAS(calloc);
void *__libc_realloc(void *p, size_t n) ALIAS(realloc);
void *__libc_memalign(size_t a, size_t n) ALIAS(memalign);
void *__libc_valloc(size_t n) ALIAS(valloc);
void *__libc_pvalloc(size_t n) ALIAS(pvalloc);
int __posix_memalign(void **o, size_t a, size_t n) ALIAS(posix_memalign);
