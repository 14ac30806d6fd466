/*
 * classes/malloc.c - the malloc family on the size-class caches, with
 * glibc's semantics (see mallocfam.h).
 */
#include "mallocfam.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "large.h"
#include "lock.h"
#include "os.h"
#include "sample.h"
#include "segment.h"

#define MAX_REQUEST ((size_t)PTRDIFF_MAX)

/* The fast path: a table or bit lookup for the class, then pop this
 * CPU's stack (or, per thread, the thread's private freelist, inside the
 * gate of classes/tcache.h); one unlikely branch to a slow path. */
static inline void *malloc_small(size_t n)
{
    unsigned cls = sizeclass_of(n);
    char *base = sd_tc.pcpu;
#if SD_HAVE_RSEQ
    /* The pop inline here, so that the cache's address is only computed
     * on the paths that need it (the slow ones). */
    if (likely(base)) {
        void *p = pcpu_pop(base, rseq_self(), cls);
        if (unlikely(!p))
            return pcpu_alloc_slow(&sd_malloc_caches[cls]);
        pcpu_tsan_acquire(p);
        /* The free tag (core/slab.h): the second word, as the malloc
         * classes keep their free pointer at 0 (debug ones never come off
         * a stack). */
        ((uintptr_t *)p)[1] = 0;
        return p;
    }
#endif
    return cache_alloc_thread(&sd_malloc_caches[cls], &sd_tc.bins[cls]);
}

static __attribute__((noinline)) void *malloc_large(size_t n, size_t align, int zero)
{
    tcache_check_get("malloc");
    if (n > MAX_REQUEST) {
        errno = ENOMEM;
        return NULL;
    }
    int saved = errno;              /* untouched on success, as glibc */
    large_decay();
    void *p = large_alloc(n, align, zero);
    if (p)
        errno = saved;
    return p;
}

/* Allocations that crossed a sample point (classes/sample.h). */
static __attribute__((noinline, cold)) void *malloc_sampled(size_t n, int zero)
{
    int saved = errno;
    int how = sample_check(n);
    void *p;
    if (n <= SD_MAX_SMALL) {
        p = malloc_small(n);
        if (p && zero)
            memset(p, 0, n);
    } else {
        p = malloc_large(n, 0, zero);
    }
    if (how)
        sample_taken(p, n, how);
    if (p)
        errno = saved;
    return p;
}

/* Frees of objects that may be sampled: the sample goes first. */
static __attribute__((noinline, cold)) void free_sampled(struct slab *s, void *p)
{
    int saved = errno;
    if (s) {
        sample_slab_freed(s, p);
        cache_free_fast(s, p, "free");
    } else {
        sample_freed(p);
        free_not_slab(p, "free");
    }
    errno = saved;
}

/* ----------------------------------------------------------------
 * The entry points, in two versions each (mallocfam.h, sdm_entry): plain
 * ones with no profiling check at all, and those profiling switches to. */

static void *malloc_plain(size_t n)
{
    if (likely(n <= SD_MAX_SMALL))
        return malloc_small(n);
    return malloc_large(n, 0, 0);
}

/* While profiling is on: one counter decrement and a branch more. */
static void *malloc_counted(size_t n)
{
    if (unlikely(sample_due(n)))
        return malloc_sampled(n, 0);
    if (likely(n <= SD_MAX_SMALL))
        return malloc_small(n);
    return malloc_large(n, 0, 0);
}

static void free_plain(void *p)
{
    if (unlikely(!p))
        return;
    /* The free tag's line (classes/alloc.h reads and writes it): a block
     * freed long after its last use is a cache miss, which then overlaps
     * the slab lookup instead of following it.  A prefetch never faults,
     * whatever p is. */
    __builtin_prefetch((char *)p + 8, 1);
    struct slab *s = segment_slab_of(p);
    if (likely(s)) {
        cache_free_fast(s, p, "free");
        return;
    }
    free_not_slab(p, "free");
}

/* While samples may live: the slab's sample word (one load from the line
 * free reads anyway) and a branch more. */
static void free_checked(void *p)
{
    if (unlikely(!p))
        return;
    struct slab *s = segment_slab_of(p);
    if (likely(s)) {
        if (unlikely(sample_slab_marked(s)))
            return free_sampled(s, p);
        cache_free_fast(s, p, "free");
        return;
    }
    if (unlikely(__atomic_load_n(&sd_sample_large, __ATOMIC_RELAXED)))
        return free_sampled(NULL, p);
    free_not_slab(p, "free");
}

static inline void *calloc_body(size_t n, size_t size, int counted)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (counted && unlikely(sample_due(total)))
        return malloc_sampled(total, 1);
    if (likely(total <= SD_MAX_SMALL)) {
        void *p = malloc_small(total);
        if (p)
            memset(p, 0, total);
        return p;
    }
    return malloc_large(total, 0, 1);
}

static void *calloc_plain(size_t n, size_t size) { return calloc_body(n, size, 0); }
static void *calloc_counted(size_t n, size_t size) { return calloc_body(n, size, 1); }

SD_HIDDEN struct sdm_entry sdm_entry = {
    .malloc = malloc_plain,
    .calloc = calloc_plain,
    .free = free_plain,
};

/* What the table says: the last sdm_entry_switch, and whether a deferred
 * call waits (sdm_entry_defer).  Under entry_lock, a leaf lock (the free
 * path's nudge takes it with a slab lock held). */
static sd_mutex entry_lock = SD_MUTEX_INIT;
static int entry_sampling, entry_checking;
static void (*entry_deferred)(void);

static void free_deferring(void *p);
static void *malloc_deferring(size_t n);

static void entry_apply_locked(void)
{
    int defer = entry_deferred != NULL;
    int sampling = entry_sampling, checking = entry_checking || sampling;
    __atomic_store_n(&sdm_entry.free, defer ? free_deferring : checking ? free_checked
                                            : free_plain, __ATOMIC_SEQ_CST);
    __atomic_store_n(&sdm_entry.malloc, defer ? malloc_deferring : sampling ? malloc_counted
                                              : malloc_plain, __ATOMIC_SEQ_CST);
    __atomic_store_n(&sdm_entry.calloc, sampling ? calloc_counted : calloc_plain,
                     __ATOMIC_SEQ_CST);
}

void sdm_entry_switch(int sampling, int checking)
{
    sd_mutex_lock(&entry_lock);
    entry_sampling = sampling;
    entry_checking = checking;
    entry_apply_locked();
    sd_mutex_unlock(&entry_lock);
}

void sdm_entry_defer(void (*fn)(void))
{
    sd_mutex_lock(&entry_lock);
    if (entry_deferred != fn) {
        __atomic_store_n(&entry_deferred, fn, __ATOMIC_RELEASE);
        entry_apply_locked();
    }
    sd_mutex_unlock(&entry_lock);
}

void sdm_entry_fork(enum sd_fork_phase phase)
{
    if (phase == SD_FORK_PREPARE)
        sd_mutex_lock(&entry_lock);
    else if (phase == SD_FORK_PARENT)
        sd_mutex_unlock(&entry_lock);
    else
        sd_mutex_reset_child(&entry_lock);
}

/* After the call: if the program's caller is outside the runtime's code,
 * take the deferred call, put the plain entries back, and make it (errno
 * kept: the call may start a thread). */
static __attribute__((noinline)) void entry_run_deferred(const void *from)
{
    if (!__atomic_load_n(&entry_deferred, __ATOMIC_ACQUIRE) || os_in_runtime_text(from))
        return;                     /* the load first: the range walk only while one waits */
    sd_mutex_lock(&entry_lock);
    void (*fn)(void) = entry_deferred;
    entry_deferred = NULL;
    entry_apply_locked();
    sd_mutex_unlock(&entry_lock);
    if (fn) {
        int saved = errno;
        fn();
        errno = saved;
    }
}

/* The deferring entries are reached by the tail jump of preload/
 * override.c, so their return address is the program's call site. */
static void free_deferring(void *p)
{
    const void *from = __builtin_return_address(0);
    free_checked(p);
    entry_run_deferred(from);
}

static void *malloc_deferring(size_t n)
{
    const void *from = __builtin_return_address(0);
    void *p = __atomic_load_n(&entry_sampling, __ATOMIC_RELAXED) ? malloc_counted(n)
                                                                : malloc_plain(n);
    entry_run_deferred(from);
    return p;
}

#define ENTRY(f) __atomic_load_n(&sdm_entry.f, __ATOMIC_ACQUIRE)

void *sdm_malloc(size_t n) { return ENTRY(malloc)(n); }
void sdm_free(void *p) { ENTRY(free)(p); }
void *sdm_calloc(size_t n, size_t size) { return ENTRY(calloc)(n, size); }

/* Usable bytes of p, reporting `call` for a pointer that is not ours. */
static size_t usable_checked(const void *p, const char *call)
{
    struct slab *s = segment_slab_of(p);
    if (s) {
        unsigned st = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
        if ((!slab_state_live(st) && st != SLAB_MESHED) || !slab_contains(s, p))
            report_invalid(call, p);
        return s->cache->object_size < s->size &&
               (!s->cache->is_malloc || s->cache->debug)   /* debug: red zone */
                   ? s->cache->object_size : s->size;
    }
    size_t n = large_usable(p);
    if (!n)
        report_invalid(call, p);
    return n;
}

size_t sdm_usable_size(const void *p)
{
    if (!p)
        return 0;
    return usable_checked(p, "malloc_usable_size");
}

void *sdm_realloc(void *p, size_t n)
{
    tcache_check_get("realloc");        /* even when it would stay put */
    if (!p)
        return sdm_malloc(n);
    if (n == 0) {
        sdm_free(p);
        return NULL;
    }
    size_t have = usable_checked(p, "realloc");
    struct slab *s = segment_slab_of(p);
    if (s) {
        /* Stay put when the new size rounds to the same class. */
        if (n <= have && (have <= 256 ? n + 16 > have : n > have - have / 8))
            return p;
    } else if (n > SD_MAX_SMALL) {
        tcache_check_get("realloc");
        if (n > MAX_REQUEST) {
            errno = ENOMEM;
            return NULL;
        }
        if (((uintptr_t)p & (SD_PAGE_SIZE - 1)) == 0) {
            int saved = errno;
            void *q = large_realloc(p, n);
            if (q)
                errno = saved;
            if (q && unlikely(__atomic_load_n(&sd_sample_large, __ATOMIC_RELAXED)))
                sd_sample_ops->moved(p, q, n);
            return q;
        }
    }
    void *q = sdm_malloc(n);
    if (!q)
        return NULL;
    memcpy(q, p, have < n ? have : n);
    sdm_free(p);
    return q;
}

void *sdm_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return sdm_realloc(p, total);
}

void *sdm_memalign(size_t align, size_t n)
{
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    if (align <= SD_MIN_ALIGN)
        return sdm_malloc(n);
    int how = sample_due(n) ? sample_check(n) : SAMPLE_NONE;
    void *p = NULL;
    int cls = n <= SD_MAX_SMALL ? sizeclass_aligned(n < align ? align : n, align) : -1;
    if (cls >= 0)
        p = cache_alloc_fast(&sd_malloc_caches[cls], &sd_tc.bins[cls]);
    else                    /* large, or no class of that alignment */
        p = malloc_large(n, align, 0);
    if (unlikely(how))
        sample_taken(p, n, how);
    return p;
}

int sdm_posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    /* As glibc: EINVAL leaves errno alone (above); ENOMEM comes with
     * errno ENOMEM, which the allocation set; success leaves it alone. */
    int saved = errno;
    void *p = sdm_memalign(align, n);
    if (!p) {
        errno = ENOMEM;
        return ENOMEM;
    }
    errno = saved;
    *out = p;
    return 0;
}

int sdm_trim(void)
{
    cache_init();               /* a trim may come before any allocation */
    size_t bytes = large_trim();
    tcache_flush_self();
    tcache_reclaim(1);
    pcpu_drain(NULL);
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (c) {
            bytes += cache_release_empty(c, 1);
            cache_fold_returns(c);
        }
    }
    bytes += cache_settle_slots(1, 0);
    return bytes > 0;
}
