/*
 * hooks/validate.c - check every slab's invariants (slabinfo -v).
 *
 * Two walks.  Per cache, under its list lock: the partial and empty lists
 * are well formed (next/prev agree, every node is a slab descriptor of this
 * cache), each slab on them is in the matching state (slab locks are only
 * tried here, as the lock order demands), and their lengths equal
 * nr_partial / nr_empty.  Then every slab in every segment, under its slab
 * lock, against the invariants of core/types.h: a valid state, a
 * registered cache, the cache's geometry, a freelist whose pointers stay
 * inside the slab on object boundaries without a cycle, inuse == capacity
 * - |freelist| - |objects on purged pages| in every state, purged pages
 * only where the freelist is not empty and never on a mesh host, owner set
 * exactly when ACTIVE or OWNED, the per-CPU route (fbin) that follows the
 * state, list membership that agrees with the state, and a mesh alias's
 * (inuse 0, no freelist, a host that is no alias).  The owner-private
 * counts (nlocal, the private list's nfree) are checked for the calling
 * thread's own slabs, which it reads inside its gate; other threads'
 * are theirs alone (classes/tcache.h).  Not checkable here: that a mesh
 * host's freelist holds only slots free in every alias (an alias records
 * no live set of its own; the mesh pass checks it when it meshes).
 */
#include "validate.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "cache.h"
#include "fmt.h"
#include "segment.h"
#include "slab.h"
#include "tcache.h"

struct vctx {
    int    fd;
    int    err;                 /* first write error, -errno */
    struct validate_result r;
};

static const char *const state_names[] = {
    [SLAB_UNUSED] = "UNUSED", [SLAB_ACTIVE] = "ACTIVE", [SLAB_OWNED] = "OWNED",
    [SLAB_PARTIAL] = "PARTIAL", [SLAB_FULL] = "FULL", [SLAB_EMPTY] = "EMPTY",
    [SLAB_FROZEN] = "FROZEN", [SLAB_RELEASING] = "RELEASING",
    [SLAB_MESHED] = "MESHED",
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

/* ---------------------------------------------------------------- */
/* One slab, under its lock: the steps of check_slab                 */

static const char *state_name(unsigned st)
{
    return st < NSTATES && state_names[st] ? state_names[st] : "invalid";
}

/* A valid state, a registered cache, the cache's geometry.  0: the slab
 * cannot be read further (reported). */
static int check_identity(struct vctx *v, struct slab *s, const char *name)
{
    struct sd_cache *c = s->cache;
    if (s->state >= NSTATES) {
        corrupt(v, name, s->start, "invalid state %u", s->state);
        return 0;
    }
    if (!c || s->bin >= SD_MAX_CACHES ||
        __atomic_load_n(&sd_caches[s->bin], __ATOMIC_ACQUIRE) != c) {
        corrupt(v, name, s->start, "cache pointer %p (id %u) is not a registered "
                "cache", (void *)c, s->bin);
        return 0;
    }
    uint32_t want = s->kind == c->kind ? c->capacity
                    : s->kind == c->page_kind ? c->page_capacity : 0;
    if (s->size != c->size || s->capacity != want || s->fpo != c->fp_off ||
        s->capacity == 0 || s->capacity > SLAB_MAX_OBJECTS) {
        corrupt(v, name, s->start, "geometry %u objects of %u bytes (free pointer "
                "at %u), the cache has %u of %u (at %u)", s->capacity, s->size,
                s->fpo, c->capacity, c->size, c->fp_off);
        return 0;
    }
    return 1;
}

/* Walk a list of free objects of s from head (the shared freelist, or an
 * owner's local or private list), marking each in map: every pointer
 * inside the slab on an object boundary, no object twice (also across
 * the lists walked into the same map).  Counts them into *n.  0 if the
 * list is broken (reported). */
static int walk_free_list(struct vctx *v, struct slab *s, const char *name,
                          const char *what, void *head, uint64_t *map, uint32_t *n)
{
    char *end = s->start + (size_t)s->capacity * s->size;
    void *before = NULL;
    uint32_t k = 0;
    for (char *p = head; p; before = p, p = slab_next_raw(s, p)) {
        if (p < s->start || p >= end) {
            if (before)         /* the word as stored, and what it decodes to */
                corrupt(v, name, s->start, "%s pointer %p (stored in free "
                        "object %p, entry %u; decodes to %p) points outside the slab",
                        what, *slab_fp(s, before), before, k, (void *)p);
            else
                corrupt(v, name, s->start, "%s head %p points outside the "
                        "slab", what, (void *)p);
            return 0;
        }
        if (!slab_contains(s, p)) {
            corrupt(v, name, s->start, "%s pointer %p after %u entries (stored "
                    "as %p) is not on an object boundary", what, (void *)p, k,
                    before ? *slab_fp(s, before) : (void *)p);
            return 0;
        }
        uint32_t i = slab_index(s, p);
        if (map[i >> 6] >> (i & 63) & 1) {
            corrupt(v, name, s->start, "%s loops or meets another free list: "
                    "object %p comes twice (after %u entries)", what, (void *)p, k);
            return 0;
        }
        map[i >> 6] |= 1ULL << (i & 63);
        k++;
    }
    *n += k;
    return 1;
}

/* The return map's objects (core/slab.h): inside the slab's capacity and
 * on no free list (map: the freelist's, which they join).  Returns how
 * many. */
static uint32_t walk_rmap(struct vctx *v, struct slab *s, const char *name, uint64_t *map)
{
    const uint64_t *r = slab_rmap(s);
    const struct segment *seg = segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
    uint32_t n = 0;
    for (unsigned w = 0; w < segment_rmap_words(seg->slot_shift); w++)
        for (uint64_t m = r[w]; m; m &= m - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(m);
            if (i >= s->capacity) {
                corrupt(v, name, s->start, "return map bit %u past capacity %u", i,
                        s->capacity);
                return n;
            }
            if (map[w] >> (i & 63) & 1)
                corrupt(v, name, s->start, "object %u both in the return map and on "
                        "the freelist", i);
            map[w] |= 1ULL << (i & 63);
            n++;
        }
    return n;
}

/* inuse == capacity - |freelist| - |return map| - |objects on purged pages|, in every
 * state (ACTIVE and OWNED too: the owner's private and local lists count
 * in inuse, and only the slab lock changes it); FULL and EMPTY agree with
 * inuse; purged pages only on a slab with free objects left on its
 * freelist, never on a mesh host. */
static void check_counts(struct vctx *v, struct slab *s, const char *name,
                         uint32_t nfree)
{
    /* nfree: the freelist's and the return map's objects. */
    uint64_t purged = slab_purged(s);
    if (purged) {
        uint32_t np = slab_purged_objects(s);
        if (np + nfree > s->capacity)
            corrupt(v, name, s->start, "%u objects on purged pages and %u on the "
                    "freelist, of %u", np, nfree, s->capacity);
        if (!nfree)
            corrupt(v, name, s->start, "purged pages but no free object on a list");
        if (s->mesh_alias)
            corrupt(v, name, s->start, "purged pages on a mesh host");
        nfree += np;
    }
    if (s->inuse != s->capacity - nfree)
        corrupt(v, name, s->start, "%s: inuse %u, but capacity %u - %u free = %u",
                state_name(s->state), s->inuse, s->capacity, nfree,
                s->capacity - nfree);
    if (s->state == SLAB_FULL && s->inuse != s->capacity)
        corrupt(v, name, s->start, "FULL with %u of %u objects in use", s->inuse,
                s->capacity);
    if (s->state == SLAB_EMPTY && s->inuse != 0)
        corrupt(v, name, s->start, "EMPTY with %u objects in use", s->inuse);
}

/* owner != 0 exactly when ACTIVE or OWNED; fbin follows the state
 * (slab_set_state).  For the calling thread's own slabs, the owner's
 * counts too: nlocal == |local_free|, an ACTIVE slab is its bin's active
 * one with nfree == |private list|, OWNED is not, and those lists hold
 * objects of the slab that are on no other list (map: the freelist's). */
static void check_owner(struct vctx *v, struct slab *s, const char *name,
                        uint64_t *map)
{
    unsigned st = s->state;
    int owned = st == SLAB_ACTIVE || st == SLAB_OWNED;
    if (owned != (s->owner != 0))
        corrupt(v, name, s->start, "state %s with owner %p", state_name(st),
                (void *)s->owner);
    int takes = owned || st == SLAB_PARTIAL || st == SLAB_FULL;
    if (s->fbin != (takes ? s->bin : SD_BIN_NONE))
        corrupt(v, name, s->start, "state %s with per-CPU route %u (bin %u)",
                state_name(st), s->fbin, s->bin);
    struct tcache *t = &sd_tc;
    if (!owned || t->state != TC_LIVE || s->owner != t->token)
        return;
    uint32_t nlocal = 0, nprivate = 0;
    if (walk_free_list(v, s, name, "local list", s->local_free, map, &nlocal) &&
        nlocal != s->nlocal)
        corrupt(v, name, s->start, "local list holds %u objects, nlocal says %u",
                nlocal, s->nlocal);
    struct tbin *b = tcache_bin_of(t, s->bin);
    if (!b) {
        corrupt(v, name, s->start, "owned by this thread, which has no bin for it");
        return;
    }
    if ((st == SLAB_ACTIVE) != (b->slab == s))
        corrupt(v, name, s->start, "state %s, and %s its owner's active slab",
                state_name(st), b->slab == s ? "is" : "is not");
    if (st == SLAB_ACTIVE &&
        walk_free_list(v, s, name, "private list", b->free, map, &nprivate) &&
        nprivate != b->nfree)
        corrupt(v, name, s->start, "private list holds %u objects, nfree says %u",
                nprivate, b->nfree);
    if (nlocal + nprivate > s->inuse)
        corrupt(v, name, s->start, "%u objects on its owner's lists, but inuse %u",
                nlocal + nprivate, s->inuse);
}

/* List membership that agrees with the state (which list: check_list). */
static void check_links(struct vctx *v, struct slab *s, const char *name)
{
    unsigned st = s->state;
    int linked = s->link.next != &s->link;
    if ((st == SLAB_ACTIVE || st == SLAB_FULL) && linked)
        corrupt(v, name, s->start, "state %s but linked on a list", state_name(st));
    if ((st == SLAB_PARTIAL || st == SLAB_EMPTY || st == SLAB_OWNED) && !linked)
        corrupt(v, name, s->start, "state %s but on no list", state_name(st));
}

/* A mesh alias: inuse 0, no freelist, a host that has no host, on no
 * list (its live objects are counted in the host). */
static void check_alias(struct vctx *v, struct slab *s, const char *name)
{
    struct slab *h = s->mesh_host;
    uint64_t none[SLAB_MAX_OBJECTS / 64] = { 0 };
    if (s->inuse || s->freelist || walk_rmap(v, s, name, none))
        corrupt(v, name, s->start, "MESHED with inuse %u and freelist %p, or a return map",
                s->inuse, s->freelist);
    if (!h)
        corrupt(v, name, s->start, "MESHED without a host");
    else if (h->state == SLAB_MESHED || h->cache != s->cache)
        corrupt(v, name, s->start, "MESHED into %p, %s", (void *)h->start,
                h->state == SLAB_MESHED ? "itself an alias"
                                        : "a slab of another cache");
    if (s->link.next != &s->link)
        corrupt(v, name, s->start, "MESHED but linked on a list");
}

static void check_slab(struct slab *s, void *arg)
{
    struct vctx *v = arg;
    sd_spin_lock(&s->lock);
    unsigned state = s->state;
    if (state == SLAB_UNUSED || state == SLAB_RELEASING) {
        sd_spin_unlock(&s->lock);       /* being set up or given back */
        return;
    }
    v->r.slabs++;
    const char *name = s->cache ? s->cache->name : "?";
    if (check_identity(v, s, name)) {
        if (state == SLAB_MESHED) {
            check_alias(v, s, name);
        } else {
            uint64_t map[SLAB_MAX_OBJECTS / 64];
            memset(map, 0, sizeof map);
            uint32_t nfree = 0;
            if (walk_free_list(v, s, name, "freelist", s->freelist, map, &nfree)) {
                nfree += walk_rmap(v, s, name, map);
                check_counts(v, s, name, nfree);
            }
            check_owner(v, s, name, map);
            check_links(v, s, name);
        }
    }
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
    /* In the gate: the shrinker leaves this thread's bins alone while
     * check_owner reads them (classes/tcache.h). */
    tcache_enter(&sd_tc);
    segment_for_each_slab(check_slab, &v, 0);
    tcache_leave(&sd_tc);
    if (!v.err)
        v.err = sd_dprintf(fd, "validate: %zu slabs in %zu caches checked, %zu "
                           "error%s\n", v.r.slabs, v.r.caches, v.r.errors,
                           v.r.errors == 1 ? "" : "s");
    if (out)
        *out = v.r;
    return v.err;
}
