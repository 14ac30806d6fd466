/*
 * classes/xfer.c - transfer caches (xfer.h).
 */
#include "xfer.h"

#include <string.h>

#include "alloc.h"
#include "pcpu.h"
#include "sizeclass.h"

#define XFER_MAX 256u                   /* pcpu.c's CAP_MAX */

struct xfer {
    sd_spin  lock;
    uint16_t n;                         /* objects in slot[0..n) */
    uint16_t cap;                       /* 0 until first use */
    uint16_t closed;                    /* vacates under way (xfer_close) */
    void    *slot[XFER_MAX];
} __attribute__((aligned(64)));

#define XFER_STACKS 1                   /* its bound, in CPU stacks (a larger one
                                           holds more objects for no gain
                                           in a producer/consumer program) */

static struct xfer xfers[SD_NCLASSES];

static struct xfer *xfer_of(const struct sd_cache *c)
{
    return c->is_malloc && c->id < SD_NCLASSES ? &xfers[c->id] : NULL;
}

unsigned xfer_put(struct sd_cache *c, void *const *objs, unsigned n)
{
    struct xfer *x = xfer_of(c);
    if (!x)
        return 0;
    uint16_t cap = __atomic_load_n(&x->cap, __ATOMIC_RELAXED);
    if (cap && __atomic_load_n(&x->n, __ATOMIC_RELAXED) >= cap)
        return 0;                       /* full: no lock taken */
    unsigned k = 0;
    sd_spin_lock(&x->lock);
    if (!x->cap) {
        cap = (uint16_t)(XFER_STACKS * pcpu_cap(c->size));
        __atomic_store_n(&x->cap, cap > XFER_MAX ? XFER_MAX : cap, __ATOMIC_RELAXED);
    }
    if (!x->closed) {
        unsigned room = (unsigned)(x->cap - x->n);
        k = n < room ? n : room;
        memcpy(x->slot + x->n, objs, (size_t)k * sizeof *objs);
        __atomic_store_n(&x->n, (uint16_t)(x->n + k), __ATOMIC_RELAXED);
    }
    sd_spin_unlock(&x->lock);
    return k;
}

unsigned xfer_take(struct sd_cache *c, void **out, unsigned n)
{
    struct xfer *x = xfer_of(c);
    if (!x || !__atomic_load_n(&x->n, __ATOMIC_RELAXED))
        return 0;                       /* empty: no lock taken */
    unsigned k = 0;
    sd_spin_lock(&x->lock);
    if (!x->closed) {
        k = n < x->n ? n : x->n;
        uint16_t from = (uint16_t)(x->n - k);   /* the newest: warmest */
        memcpy(out, x->slot + from, (size_t)k * sizeof *out);
        __atomic_store_n(&x->n, from, __ATOMIC_RELAXED);
    }
    sd_spin_unlock(&x->lock);
    return k;
}

/* Empty x back to the slabs (the lock is a leaf: the objects are copied
 * out first, and returned with no transfer lock held). */
static void flush_one(struct xfer *x)
{
    void *buf[XFER_MAX];
    if (!__atomic_load_n(&x->n, __ATOMIC_RELAXED))
        return;
    sd_spin_lock(&x->lock);
    unsigned k = x->n;
    memcpy(buf, x->slot, (size_t)k * sizeof *buf);
    __atomic_store_n(&x->n, 0, __ATOMIC_RELAXED);
    sd_spin_unlock(&x->lock);
    if (k)
        cache_return_objects(buf, k, "free");
}

void xfer_flush(const struct sd_cache *c)
{
    if (c) {
        struct xfer *x = xfer_of(c);
        if (x)
            flush_one(x);
        return;
    }
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        flush_one(&xfers[i]);
}

void xfer_close(const struct sd_cache *c)
{
    struct xfer *x = xfer_of(c);
    if (!x)
        return;
    sd_spin_lock(&x->lock);
    x->closed++;
    sd_spin_unlock(&x->lock);
    flush_one(x);                       /* nothing can come in again */
}

void xfer_open(const struct sd_cache *c)
{
    struct xfer *x = xfer_of(c);
    if (!x)
        return;
    sd_spin_lock(&x->lock);
    x->closed--;
    sd_spin_unlock(&x->lock);
}

size_t xfer_cached(uint16_t id)
{
    return id < SD_NCLASSES && sd_malloc_caches[id].id == id
               ? __atomic_load_n(&xfers[id].n, __ATOMIC_RELAXED) : 0;
}

size_t xfer_bytes(void)
{
    size_t b = 0;
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        b += (size_t)__atomic_load_n(&xfers[i].n, __ATOMIC_RELAXED) * sizeclass_size[i];
    return b;
}

void xfer_lock_all(void)
{
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        sd_spin_lock(&xfers[i].lock);
}

void xfer_unlock_all(int child)
{
    (void)child;
    for (unsigned i = 0; i < SD_NCLASSES; i++) {
        /* As the slab locks (cache_unlock_all): in the child the holder
         * was the forking thread, under another tid; wake any sleeper. */
        uint32_t was = __atomic_exchange_n(&xfers[i].lock.holder, 0, __ATOMIC_RELEASE);
        if (was & SD_SPIN_WAITERS)
            sd_spin_wake(&xfers[i].lock);
    }
}
