/*
 * preload/override.c - the libc face: the malloc family under its libc
 * names, the __libc_* aliases glibc programs and libraries call, and
 * nothing else.  Each is a tail call into classes/malloc.c, malloc,
 * calloc and the frees through the table sdm_entry (mallinfo2:
 * classes/mallinfo.c).  The signal calls are preload/signals.c.
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <string.h>

#include "fmt.h"
#include "mallocfam.h"
#include "os.h"

#define ALIAS(name) __attribute__((alias(#name), visibility("default"), used))

/* malloc, calloc and the frees: one indirect jump through sdm_entry,
 * which heap profiling switches (classes/mallocfam.h).  A volatile read,
 * not an atomic one, so that it stays one `jmp *sdm_entry(%rip)` (an
 * atomic load becomes a load and a jump: one instruction more per call,
 * 0.7% of bench/throughput); the words are aligned pointers written with
 * atomic stores, and a read of one is atomic on every target we build. */
#define ENTRY(f) (*(__typeof__(sdm_entry.f) volatile *)&sdm_entry.f)

SD_EXPORT void *malloc(size_t n) { return ENTRY(malloc)(n); }
SD_EXPORT void free(void *p) { ENTRY(free)(p); }
SD_EXPORT void *calloc(size_t n, size_t size) { return ENTRY(calloc)(n, size); }
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
SD_EXPORT void free_sized(void *p, size_t n) { (void)n; ENTRY(free)(p); }
SD_EXPORT void free_aligned_sized(void *p, size_t align, size_t n)
{
    (void)align; (void)n;
    ENTRY(free)(p);
}
SD_EXPORT void cfree(void *p) { ENTRY(free)(p); }
SD_EXPORT int malloc_trim(size_t pad) { (void)pad; return sdm_trim(); }

SD_EXPORT struct mallinfo2 mallinfo2(void) { return sdm_mallinfo2(); }

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
