/*
 * hooks/validate.c - check every slab's invariants (slabinfo -v).
 *
 * Two walks.  Per cache, under its list lock: the partial and empty lists
 * are well formed (next/prev agree, every node is a slab descriptor of this
 * cache), each slab on them is in the matching state (slab locks are only
 * tried here, as the lock order demands), and their lengths equal
 * nr_partial / nr_empty.  Then every slab in every segment, under its slab
 * lock: a valid state, a registered cache, the cache's geometry, a freelist
 * whose pointers stay inside the slab on object boundaries without a cycle,
 * inuse == capacity - |freelist| (except ACTIVE and OWNED slabs, whose
 * free objects also sit on the owner's private lists), owner set exactly
 * when ACTIVE or OWNED, and
 * list membership that agrees with the state.
 */
#include "validate.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "cache.h"
#include "fmt.h"
#include "segment.h"
#include "slab.h"

struct vctx {
    int    fd;
    int    err;                 /* first write error, -errno */
    struct validate_result r;
};

static const char *const state_names[] = {
    [SLAB_UNUSED] = "UNUSED", [SLAB_ACTIVE] = "ACTIVE", [SLAB_OWNED] = "OWNED",
    [SLAB_PARTIAL] = "PARTIAL", [SLAB_FULL] = "FULL", [SLAB_EMPTY] = "EMPTY",
    [SLAB_FROZEN] = "FROZEN", [SLAB_RELEASING] = "RELEASING",
};
#define NSTATES (sizeof state_names / sizeof state_names[0])

static void corrupt(struct vctx *v, const char *cache, const void *slab,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void corrupt(struct vctx *v, const char *cache, const void *slab,
                    const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    sd_vfmt(what, sizeof what, fmt, ap);
    va_end(ap);
    v->r.errors++;
    if (!v->err)
        v->err = sd_dprintf(v->fd, "corrupt: cache %s slab %p: %s\n", cache, slab,
                            what);
}

/* The slab descriptor whose `link` is l, or NULL if l is not the link of a
 * descriptor in one of our segment headers. */
static struct slab *slab_of_link(struct sd_list *l)
{
    struct segment *seg = segment_of(l);
    if (!seg || seg->magic != SEGMENT_MAGIC)
        return NULL;
    uintptr_t base = (uintptr_t)seg->slabs + __builtin_offsetof(struct slab, link);
    uintptr_t a = (uintptr_t)l;
    if (a < base || (a - base) % sizeof(struct slab))
        return NULL;
    size_t i = (a - base) / sizeof(struct slab);
    if (i < seg->first || i >= seg->nslots)
        return NULL;
    return &seg->slabs[i];
}

static void check_list(struct vctx *v, struct sd_cache *c, struct sd_list *head,
                       size_t expect, unsigned state, const char *list)
{
    size_t n = 0, bound = expect + 1024;
    struct sd_list *prev = head;
    for (struct sd_list *l = head->next; l != head; prev = l, l = l->next) {
        struct slab *s = slab_of_link(l);
        if (!s) {
            corrupt(v, c->name, NULL, "%s list node %p is not a slab descriptor",
                    list, (void *)l);
            return;
        }
        if (l->prev != prev)
            corrupt(v, c->name, s->start, "%s list: prev pointer %p, expected %p",
                    list, (void *)l->prev, (void *)prev);
        if (s->cache != c)
            corrupt(v, c->name, s->start, "on the %s list of a cache it does "
                    "not belong to (%s)", list, s->cache ? s->cache->name : "none");
        if (sd_spin_trylock(&s->lock)) {
            if (s->state != state)
                corrupt(v, c->name, s->start, "on the %s list in state %s", list,
                        s->state < NSTATES ? state_names[s->state] : "invalid");
            sd_spin_unlock(&s->lock);
        }
        if (++n > bound) {
            corrupt(v, c->name, NULL, "%s list loops (more than %zu nodes)", list,
                    bound);
            return;
        }
    }
    if (n != expect)
        corrupt(v, c->name, NULL, "%s list holds %zu slabs, the count says %zu",
                list, n, expect);
}

static void check_slab(struct slab *s, void *arg)
{
    struct vctx *v = arg;
    sd_spin_lock(&s->lock);
    unsigned state = s->state;
    struct sd_cache *c = s->cache;
    if (state == SLAB_UNUSED || state == SLAB_RELEASING || state == SLAB_MESHED) {
        sd_spin_unlock(&s->lock);       /* being set up or given back, or a
                                           mesh alias (counted in its host) */
        return;
    }
    v->r.slabs++;
    const char *name = c ? c->name : "?";
    if (state > SLAB_RELEASING) {
        corrupt(v, name, s->start, "invalid state %u", state);
        goto out;
    }
    if (!c || s->bin >= SD_MAX_CACHES ||
        __atomic_load_n(&sd_caches[s->bin], __ATOMIC_ACQUIRE) != c) {
        corrupt(v, name, s->start, "cache pointer %p (id %u) is not a registered "
                "cache", (void *)c, s->bin);
        goto out;
    }
    uint32_t want = s->kind == c->kind ? c->capacity
                    : s->kind == c->page_kind ? c->page_capacity : 0;
    if (s->size != c->size || s->capacity != want || s->fpo != c->fp_off ||
        s->capacity == 0 || s->capacity > SLAB_MAX_OBJECTS) {
        corrupt(v, name, s->start, "geometry %u objects of %u bytes (free pointer "
                "at %u), the cache has %u of %u (at %u)", s->capacity, s->size,
                s->fpo, c->capacity, c->size, c->fp_off);
        goto out;
    }
    uint64_t map[SLAB_MAX_OBJECTS / 64];
    memset(map, 0, sizeof map);
    uint32_t nfree = 0;
    int list_ok = 1;
    char *end = s->start + (size_t)s->capacity * s->size;
    void *before = NULL;
    for (char *p = s->freelist; p; before = p, p = slab_next_raw(s, p)) {
        if (p < s->start || p >= end) {
            if (before)         /* the word as stored, and what it decodes to */
                corrupt(v, name, s->start, "freelist pointer %p (stored in free "
                        "object %p, entry %u; decodes to %p) points outside the slab",
                        *slab_fp(s, before), before, nfree, (void *)p);
            else
                corrupt(v, name, s->start, "freelist head %p points outside the "
                        "slab", (void *)p);
            list_ok = 0;
            break;
        }
        if (!slab_contains(s, p)) {
            corrupt(v, name, s->start, "freelist pointer %p after %u entries (stored "
                    "as %p) is not on an object boundary", (void *)p, nfree,
                    before ? *slab_fp(s, before) : (void *)p);
            list_ok = 0;
            break;
        }
        uint32_t i = slab_index(s, p);
        if (map[i >> 6] >> (i & 63) & 1) {
            corrupt(v, name, s->start, "freelist loops: object %p comes twice "
                    "(after %u entries)", (void *)p, nfree);
            list_ok = 0;
            break;
        }
        map[i >> 6] |= 1ULL << (i & 63);
        nfree++;
    }
    int owned = state == SLAB_ACTIVE || state == SLAB_OWNED;
    if (list_ok && slab_purged(s)) {      /* free, off the list (core/types.h) */
        uint32_t np = slab_purged_objects(s);
        if (np + nfree > s->capacity)
            corrupt(v, name, s->start, "%u objects on purged pages and %u on the "
                    "freelist, of %u", np, nfree, s->capacity);
        nfree += np;
    }
    if (list_ok && !owned && s->inuse != s->capacity - nfree)
        corrupt(v, name, s->start, "inuse %u, but capacity %u - %u free = %u",
                s->inuse, s->capacity, nfree, s->capacity - nfree);
    if (state == SLAB_FULL && s->inuse != s->capacity)
        corrupt(v, name, s->start, "FULL with %u of %u objects in use", s->inuse,
                s->capacity);
    if (state == SLAB_EMPTY && s->inuse != 0)
        corrupt(v, name, s->start, "EMPTY with %u objects in use", s->inuse);
    if (owned != (s->owner != 0))
        corrupt(v, name, s->start, "state %s with owner %p", state_names[state],
                (void *)s->owner);
    int linked = s->link.next != &s->link;
    if ((state == SLAB_ACTIVE || state == SLAB_FULL) && linked)
        corrupt(v, name, s->start, "state %s but linked on a list",
                state_names[state]);
    if ((state == SLAB_PARTIAL || state == SLAB_EMPTY || state == SLAB_OWNED) &&
        !linked)
        corrupt(v, name, s->start, "state %s but on no list", state_names[state]);
out:
    sd_spin_unlock(&s->lock);
}

int validate_all(int fd, struct validate_result *out)
{
    struct vctx v = { .fd = fd };
    cache_init();
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (!c)
            continue;
        v.r.caches++;
        sd_mutex_lock(&c->list_lock);
        check_list(&v, c, &c->partial, c->nr_partial, SLAB_PARTIAL, "partial");
        check_list(&v, c, &c->empty, c->nr_empty, SLAB_EMPTY, "empty");
        sd_mutex_unlock(&c->list_lock);
    }
    segment_for_each_slab(check_slab, &v, 0);
    if (!v.err)
        v.err = sd_dprintf(fd, "validate: %zu slabs in %zu caches checked, %zu "
                           "error%s\n", v.r.slabs, v.r.caches, v.r.errors,
                           v.r.errors == 1 ? "" : "s");
    if (out)
        *out = v.r;
    return v.err;
}
