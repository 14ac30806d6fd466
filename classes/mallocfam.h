/*
 * classes/mallocfam.h - the malloc family on top of the size-class caches
 * (classes/malloc.c, classes/mallinfo.c).  Not malloc.h: that name is
 * the C library's, which this header includes.
 *
 * These are the allocator's own entry points; preload/ gives them their
 * libc names.  The static core (libsdcore.a, used by the unit tests) has
 * them under these names only, so a test program keeps its own malloc.
 * All follow glibc's semantics (errno ENOMEM, 16-byte alignment, ...).
 */
#ifndef SD_CLASSES_MALLOCFAM_H
#define SD_CLASSES_MALLOCFAM_H

#include <malloc.h>
#include <stddef.h>

#include "lock.h"

/* The entry points that heap profiling switches (classes/malloc.c): with
 * profiling off, plain ones with no profiling check at all; while it is
 * on, malloc and calloc count bytes down to the next sample point
 * (classes/sample.h), and while any sample lives, free checks the slab's
 * sample word.  preload/ calls through the table; sdm_malloc, sdm_calloc
 * and sdm_free do the same.  Written by sdm_entry_switch only. */
struct sdm_entry {
    void *(*malloc)(size_t size);
    void *(*calloc)(size_t n, size_t size);
    void  (*free)(void *p);
};
extern __attribute__((visibility("hidden"))) struct sdm_entry sdm_entry;

/* The switch (hooks/prof.c, under its start_lock): sampling: malloc and
 * calloc count down; checking: free looks for samples.  Sampling implies
 * checking; the caller orders the stores (checking on before sampling;
 * off only once no sample can live, hooks/prof.c). */
void   sdm_entry_switch(int sampling, int checking);
/* Make fn() (NULL: nothing) the next time malloc or free is called from
 * outside the C library, the dynamic loader and this library (core/os.h,
 * os_in_runtime_text), after that call, with no allocator lock held:
 * the entries turn to ones that check their return address until then.
 * Only for a program that has one thread (hooks/shrinker.c, "Lazy
 * start"); callable with a slab lock held (a leaf lock). */
void   sdm_entry_defer(void (*fn)(void));
/* fork (classes/fork.c): take the table's lock, release it, or reset it
 * in the child. */
void   sdm_entry_fork(enum sd_fork_phase phase);

void  *sdm_malloc(size_t size);
void  *sdm_calloc(size_t n, size_t size);
void  *sdm_realloc(void *p, size_t size);
void  *sdm_reallocarray(void *p, size_t n, size_t size);
void   sdm_free(void *p);
/* align: a power of two (any, up to 4 MiB and beyond); NULL + EINVAL
 * otherwise.  size 0 gives a minimal block. */
void  *sdm_memalign(size_t align, size_t size);
int    sdm_posix_memalign(void **out, size_t align, size_t size);
size_t sdm_usable_size(const void *p);
/* Release free memory to the OS; 1 if any was released (malloc_trim). */
int    sdm_trim(void);
/* mallinfo2(): arena = mapped slab memory, uordblks = bytes in use (slab
 * objects by their class size, plus large blocks), fordblks = the rest of
 * the slab memory, hblks/hblkhd = large blocks, keepcost = cached large
 * memory (classes/mallinfo.c). */
struct mallinfo2 sdm_mallinfo2(void);

#endif
