/*
 * classes/cache.c - caches, their slab lists, and the slab state machine.
 *
 * ---------------------------------------------------------------------
 * Two modes, chosen once at start-up (classes/pcpu.h):
 *   per-CPU     every CPU caches a stack of free objects per cache; the
 *               fast paths push and pop it in restartable sequences, with
 *               no lock; slabs are never owned by a thread (no ACTIVE or
 *               OWNED slab exists); stacks refill from and drain to the
 *               slabs in batches, under the locks below.
 *   per-thread  (no rseq, or SLABDEFRAG_PERCPU=0) each thread owns an
 *               active slab and a ring per cache (classes/tcache.h).
 *
 * Lock order (outer first).  A thread holding one of these only waits
 * for locks below it; "tried" means a trylock that gives up, which may
 * go against the order.
 *
 *   0. reclaim_lock (sd_mutex, per-thread mode, classes/tcache.c)  held
 *                              by whoever takes idle threads' active slabs
 *                              and rings (the gate of classes/tcache.h);
 *                              under it: the registry, then slab, list and
 *                              segment locks as below.  A thread revoked
 *                              meanwhile waits for it at its outermost
 *                              allocator entry, holding nothing - or in the
 *                              get() guard, holding only a frozen slab's
 *                              lock, which a reclaim never takes.
 *      pcpu_lock (sd_mutex)    set-up of per-CPU headers, and drains of
 *                              other CPUs' stacks (lock every header, one
 *                              membarrier fence, return the objects).  A
 *                              drain returns objects under the locks
 *                              below; cache_usage holds it across its walk
 *                              of the segments.  Nothing takes pcpu_lock
 *                              while holding another allocator lock.
 *      mesh_lock (classes/mesh.c) serialises mesh passes; taken with no
 *                              other allocator lock held (see below).
 *   1. sd_caches_lock (sd_mutex, this file)  the cache registry
 *                              sd_caches[]: set-up (cache_init, classes/
 *                              cachesetup.c, which also decides the
 *                              per-CPU mode and sets meshing up under
 *                              it), typed cache creation,
 *                              merging and destruction.  Held across an
 *                              allocation: cache_create allocates the new
 *                              struct sd_cache (sdm_malloc from the API)
 *                              with it held, so every lock below may be
 *                              taken under it.  fork takes it right after
 *                              reclaim_lock and pcpu_lock.
 *   2. segment kind locks      a kind's segments and their free slots.
 *      (core/segment.c)        Taken with no slab or list lock held (slabs
 *                              are created and released unlocked).  Three
 *                              walkers hold them across a walk of every
 *                              slab (segment_for_each_slab) and take slab
 *                              locks under them: cache_usage (slab lock),
 *                              the validator (slab lock; hooks/validate.c)
 *                              and the fork child's adoption of dead
 *                              threads' slabs (slab lock, then list lock;
 *                              classes/fork.c).  fork's prepare also takes
 *                              every slab lock under them (locked walk).
 *   3. slab->lock (sd_spin)    a slab's shared freelist, return map
 *                              (core/slab.h), inuse, state, owner and
 *                              purged pages.  Held for a few
 *                              instructions; across a get() callback only
 *                              while vacating; across the madvise of a
 *                              sparse slab's free pages (and, with
 *                              meshing, the nudge of the shrinker: a
 *                              clock read and at most one eventfd write,
 *                              or while the thread is only armed,
 *                              sdm_entry_defer under entry_lock) on the
 *                              free path, and in the
 *                              shrinker's purge of small classes (its
 *                              slabs picked under the list lock, which is
 *                              dropped before each slab lock); see "Pages
 *                              of sparse slabs" below.
 *   4. cache->list_lock        the cache's partial and empty lists (and
 *                              partial_gen, bumped at each change of the
 *                              partial list, and sorted_sig: the shrinker
 *                              skips re-sorting a list that did not
 *                              change, hooks/vacate.c).  Taken
 *                              inside a slab lock when a free moves a slab
 *                              between lists.  While holding it, slab locks
 *                              are only ever *tried* (partial refill,
 *                              shrink, the validator's list walk), never
 *                              waited for.
 *   5. leaves: the huge-block  taken with no other allocator lock held,
 *      lock, the extent arena  and nothing is taken under them (an arena
 *      locks, the extent stash lock and a stash lock are never held
 *      locks, the thread       together: core/extent.c, core/large.c; the
 *      registry                registry is walked under reclaim_lock or
 *                              alone, and fork takes it before the
 *                              segment locks only because nothing waits
 *                              under it).
 *      transfer cache locks    (sd_spin, classes/xfer.h) one per malloc
 *                              class: held for a copy of pointers in or out
 *                              of its array, with no other allocator lock
 *                              held and none taken under it (a flush copies
 *                              the objects out, then returns them to the
 *                              slabs after unlocking); fork takes them all
 *                              right after pcpu_lock.
 *      entry_lock              (sd_mutex, classes/malloc.c) the entry
 *                              table's switches (profiling, the deferred
 *                              start of hooks/shrinker.c): taken under a
 *                              slab lock by the free path's nudge, nothing
 *                              under it; fork takes it after every list
 *                              lock.
 *
 * mesh_lock (classes/mesh.c) serialises mesh passes and is taken with no
 * other allocator lock held; under it a pass takes list locks and slab
 * locks as above, and while it holds one slab's lock it only *tries* a
 * second.  No other path ever holds two slab locks.
 *
 * Locks of the hooks layer, all taken with no allocator lock held:
 * the heap profiler's table locks (start_lock, then a shard lock, then
 * the stack or name table lock: hooks/proftab.h) take no allocator lock
 * under them but entry_lock (start_lock switches the entry table), and
 * fork takes them before any allocator lock; the
 * shrinker's `lock` guards its thread's life, is held across no pass,
 * and is above every allocator lock (the thread's creation under
 * it allocates; the free path's nudge never takes it: hooks/shrinker.c).
 *
 * Owner-private state takes no lock: a thread's private list, its slabs'
 * local lists and nlocal, and its ring.  Another thread touches them only
 * through the gate (classes/tcache.h): after a membarrier fence has shown
 * the owner outside the allocator, with the owner held out until done.  Only the shared freelist is read
 * without the lock, by the owner deciding which ring slab to lock (a
 * relaxed peek; the remote free stores it relaxed under the lock).  A
 * fork child therefore never trusts another thread's tbin: it finds that
 * thread's slabs by owner (classes/fork.c).
 *
 * The fork handler (classes/fork.c) first blocks the thread's
 * asynchronous signals, then takes the heap profiler's table locks
 * (hooks/proftab.h), then reclaim_lock and pcpu_lock, and with pcpu_lock
 * every transfer cache's lock (no reclaim and no drain is half done in
 * the child; the stacks themselves are consistent at every instant, each
 * sequence committing with one store), then sd_caches_lock, the thread
 * registry, the segment kind locks and the large-block leaves (nobody
 * holding one waits for a slab or list lock), then every slab lock
 * (nobody holding a slab lock waits for a segment lock or a leaf), then
 * every list lock (holders of a list lock only try slab locks), and last
 * entry_lock; with meshing it then write-protects the shared slots
 * (core/forkcopy.c).  Parent and child restore the signal mask after
 * their last unlock: a fork from a signal handler that interrupts a fork
 * cannot run while this thread holds them (classes/fork.c, "Signals").
 * The shrinker's lock is not taken: its child handler starts afresh.
 *
 * Frees in per-CPU mode never touch the slab: any thread pushes onto its
 * CPU's stack, and only a full stack's batch goes back to the slabs,
 * taking each slab's lock once per run of its objects.  A slab's fbin
 * (core/types.h) routes the frees of a FROZEN, MESHED or EMPTY slab to
 * the locked path instead, so a vacate's get() still holds every free of
 * its slab, and a drain with a fence (pcpu_drain) after freezing empties
 * the stacks of the slab's objects before get() sees it.
 *
 * The free tag (core/slab.h) is a word of the object, not slab state: the
 * freeing thread writes it while the object is still its own (before the
 * push that hands it on, or on its own slab's local list, or under the
 * slab lock); the thread that takes the object for the program clears it.
 * Slabs of caches with get() whose objects hold their free pointer carry
 * none (tagged 0): get() may read any word of the objects it is handed,
 * one just taken from a stack included, and finds them as the program
 * left them.  A free that finds it set
 * (cache_free_tagged) drains the stacks like a vacate (pcpu_quiesce) or
 * reclaims idle threads, then looks under the slab lock.
 *
 * Cross-thread frees in per-thread mode take the slab lock rather than a
 * lock-free remote list: a free that empties or un-fills a slab must move
 * it between lists under the list lock anyway, the lock is per slab so
 * contention stays local, and holding it is what lets get() promise that
 * "frees of objects on this slab wait until get() returns" (patch 02/10).
 *
 * ---------------------------------------------------------------------
 * Slab states (slab->state; changed only under the slab lock, and for
 * list moves also under the list lock)
 *
 *   state      on list      owner   allocations from it
 *   ACTIVE     none         thread  owner's private list, lock-free
 *   OWNED      owner's ring thread  none until it is ACTIVE again; the
 *                                   owner frees into local_free, lock-free
 *                                   (SLUB's per-cpu partial slabs)
 *   PARTIAL    partial      0       refill takes it (becomes ACTIVE); a
 *                                   sparse one may have purged pages
 *                                   (s->purged), which come back when its
 *                                   freelist runs dry, and, in a small
 *                                   class, SLAB_PURGE_SEEN (the shrinker
 *                                   looked since its last free)
 *   FULL       none         0       none; a free makes it PARTIAL
 *   EMPTY      empty        0       reused before a new slab; released
 *                                   after the decay or on shrink
 *   FROZEN     none         0       none: being vacated; frees still land
 *   RELEASING  none         0       none: going back to the segment
 *   MESHED     none         0       none: an alias whose objects live in
 *                                   its host's pages (classes/mesh.c);
 *                                   frees are redirected to the host
 *
 * Transitions (each under the slab lock; those onto or off a list also
 * under the list lock):
 *
 *   new slab      -> ACTIVE     a thread's refill found no partial slab
 *                 -> PARTIAL    a direct allocation (no thread cache, a
 *                               debug cache, sd_defrag_realloc's fill
 *                               slab), or a per-CPU refill that left free
 *                               objects
 *                 -> FULL       a per-CPU refill that took them all
 *   ACTIVE        -> OWNED      full, or the owner refills from a ring
 *                               slab with more of its own frees
 *                 -> FULL / PARTIAL / EMPTY / RELEASING
 *                               flushed: thread exit, tcache_flush_self
 *                               (shrink, malloc_trim, sd_cache_destroy),
 *                               a reclaim of an idle thread's bins, a fork
 *                               child adopting a dead thread's slabs
 *   OWNED         -> ACTIVE     its own or others' frees refill the owner
 *                 -> FULL / PARTIAL / EMPTY / RELEASING
 *                               the ring overflows, or flushed as ACTIVE
 *   PARTIAL       -> ACTIVE     a thread's refill (cache_partial_take)
 *                 -> FULL       a direct or per-CPU refill took the rest
 *                 -> EMPTY or RELEASING  last free (RELEASING if it has
 *                               purged pages, or enough are kept)
 *                 -> FROZEN     vacate, or a mesh candidate
 *   FULL          -> PARTIAL    a free (or a per-CPU batch of frees)
 *                 -> EMPTY / RELEASING  a batch that frees every object
 *                 -> FROZEN     vacate
 *   EMPTY         -> ACTIVE     a thread's refill reuses a retained slab
 *                 -> PARTIAL / FULL  a direct or per-CPU refill reuses it
 *                 -> RELEASING  decay, shrink, or the cache's destruction
 *   FROZEN        -> RELEASING  vacated (nothing left in use)
 *                 -> PARTIAL / FULL / EMPTY  vacate gave up or left objects
 *                 -> PARTIAL / EMPTY / RELEASING  a mesh candidate that
 *                               found no partner
 *                 -> MESHED     a mesh candidate whose objects moved into
 *                               its partner's pages (an alias)
 *   MESHED        -> RELEASING  its host is released (mesh_unmesh_host)
 *   RELEASING     -> (slot free) segment_slab_free
 *
 * In per-CPU mode no slab is ACTIVE or OWNED; objects on a CPU's stack,
 * and those a refill holds (feeding), count in inuse.  A host
 * (mesh_alias != NULL) is never kept EMPTY.
 * ---------------------------------------------------------------------
 */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "debug.h"
#include "fmt.h"
#include "heapfile.h"
#include "large.h"
#include "mesh.h"
#include "options.h"
#include "os.h"
#include "pcpu.h"
#include "segment.h"
#include "slab.h"
#include "tcache.h"

struct sd_cache sd_malloc_caches[SD_NCLASSES];
struct sd_cache *sd_caches[SD_MAX_CACHES];
sd_mutex sd_caches_lock = SD_MUTEX_INIT;

const char *const sd_stat_names[SD_NSTATS] = {
#define X(id, name, doc) name,
    SD_CACHE_STATS(X)
#undef X
};

/* ---------------------------------------------------------------- */
/* Typed caches: creation and merging (SLUB's find_mergeable)        */

static int mergeable(const struct sd_cache *c, uint32_t size, uint32_t align,
                     unsigned long flags)
{
    if (c->dead || c->ctor || c->has_ops || (c->flags & SD_NO_MERGE))
        return 0;
    if (c->size != size || c->align % align)
        return 0;
    return (c->flags & SD_CACHE_FLAGS) == (flags & SD_CACHE_FLAGS);
}

static void alias_add(struct sd_cache *c, const char *name)
{
    size_t have = strlen(c->aliases), n = strlen(name);
    if (have + n + 2 >= sizeof c->aliases)
        return;
    if (have)
        c->aliases[have++] = ',';
    memcpy(c->aliases + have, name, n + 1);
}

struct sd_cache *cache_create(const char *name, size_t size, size_t align,
                              unsigned long flags, void (*ctor)(void *),
                              const struct sd_cache_ops *ops,
                              void *(*alloc_struct)(size_t))
{
    cache_init();
    if (!align)
        align = SD_MIN_ALIGN;
    if (flags & SD_HWCACHE_ALIGN && align < 64)
        align = 64;
    if (align < SD_MIN_ALIGN)
        align = SD_MIN_ALIGN;
    /* With a ctor, a free object must stay constructed (SLUB puts the free
     * pointer past the object then): the stride gets a word for it, and
     * one for the free tag (core/slab.h). */
    size_t fp_off = ctor ? (size + sizeof(void *) - 1) & ~(sizeof(void *) - 1) : 0;
    size_t need = ctor ? fp_off + 2 * sizeof(void *) : size;
    uint32_t stride = (uint32_t)((need + align - 1) & ~(align - 1));
    int merge = !ctor && !ops && !(flags & SD_NO_MERGE);

    sd_mutex_lock(&sd_caches_lock);
    if (merge) {
        for (unsigned i = SD_NCLASSES; i < SD_MAX_CACHES; i++) {
            struct sd_cache *c = sd_caches[i];
            if (c && mergeable(c, stride, (uint32_t)align, flags) &&
                !options_debug_wants(name)) {
                c->refcount++;
                alias_add(c, name);
                sd_mutex_unlock(&sd_caches_lock);
                return c;
            }
        }
    }
    unsigned id = SD_NCLASSES;
    while (id < SD_MAX_CACHES && sd_caches[id])
        id++;
    if (id == SD_MAX_CACHES) {
        sd_mutex_unlock(&sd_caches_lock);
        errno = ENOMEM;
        return NULL;
    }
    struct sd_cache *c = alloc_struct(sizeof *c);
    if (!c) {
        sd_mutex_unlock(&sd_caches_lock);
        errno = ENOMEM;
        return NULL;
    }
    memset(c, 0, sizeof *c);
    cache_setup(c, (uint16_t)id, name, (uint32_t)size, stride, (uint32_t)align);
    c->flags = flags;
    c->ctor = ctor;
    if (!c->debug)                      /* debug_geometry placed it */
        c->fp_off = (uint16_t)fp_off;
    if (ops) {
        c->ops = *ops;
        c->has_ops = 1;
    }
    c->tagged = c->fp_off != 0 || !c->has_ops;
    __atomic_store_n(&sd_caches[id], c, __ATOMIC_RELEASE);
    sd_mutex_unlock(&sd_caches_lock);
    return c;
}

/* ---------------------------------------------------------------- */
/* Slabs                                                             */

static void empty_want_note(struct sd_cache *c);

struct slab *cache_slab_new(struct sd_cache *c)
{
    unsigned kind = c->kind;
    uint32_t cap = c->capacity;
    if (c->page_capacity &&
        __atomic_load_n(&c->nr_slabs, __ATOMIC_RELAXED) >= sd_opt.mesh_page_slabs) {
        kind = c->page_kind;                /* meshing a big class: mesh.c */
        cap = c->page_capacity;
    }
    int dirty;
    struct slab *s = segment_slab_alloc(kind, &dirty, kind != c->kind ? &c->page_seg : NULL);
    if (unlikely(!s)) {
        /* no room for a segment under RLIMIT_AS: large blocks' spare room */
        if (!large_release_address_space())
            return NULL;
        s = segment_slab_alloc(kind, &dirty, kind != c->kind ? &c->page_seg : NULL);
        if (!s)
            return NULL;
    }
    if (dirty && c->debug)                  /* its state words start at 0 */
        memset(s->start, 0, seg_kind_bytes(kind));
    uint64_t seed = 0;
    unsigned order = __atomic_load_n(&c->shuffle, __ATOMIC_RELAXED);  /* mesh.c sets it */
    if (order) {                            /* a seed per slab */
        static uint64_t slabs_made;
        seed = ((uintptr_t)s->start ^ os_now_ns()) +
               __atomic_add_fetch(&slabs_made, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ULL;
    }
    slab_format(s, c->size, cap, c->fp_off, c->ctor, order, seed);
    s->tagged = c->tagged;
    s->cache = c;
    s->bin = c->id;
    slab_set_state(s, SLAB_UNUSED);     /* fbin: none until it is allocated from */
    __atomic_fetch_add(&c->nr_slabs, 1, __ATOMIC_RELAXED);
    cache_stat_add(c, SD_STAT_SLAB_NEW, 1);
    empty_want_note(c);
    return s;
}

size_t cache_slab_release(struct sd_cache *c, struct slab *s)
{
    SD_ASSERT(s->state == SLAB_RELEASING);
    __atomic_fetch_sub(&c->nr_slabs, 1, __ATOMIC_RELAXED);
    if (unlikely(s->mesh_alias))        /* a mesh host: free its aliases */
        mesh_unmesh_host(c, s);
    size_t bytes = segment_slab_free(s, 0);
    cache_stat_add(c, SD_STAT_SLAB_RELEASED, 1);
    cache_stat_add(c, SD_STAT_BYTES_RELEASED, bytes);
    return bytes;
}

void cache_partial_add_locked(struct sd_cache *c, struct slab *s, int tail)
{
    SD_ASSERT(sd_mutex_held(&c->list_lock));
    slab_set_state(s, SLAB_PARTIAL);
    if (tail)
        list_add_tail(&c->partial, &s->link);
    else
        list_add_head(&c->partial, &s->link);
    cnt_add(&c->nr_partial, 1);
    c->partial_gen++;
}

void cache_partial_del_locked(struct sd_cache *c, struct slab *s)
{
    SD_ASSERT(sd_mutex_held(&c->list_lock) && s->state == SLAB_PARTIAL);
    list_del(&s->link);
    cnt_add(&c->nr_partial, -1);
    c->partial_gen++;
    if (c->defrag_fill == s)
        c->defrag_fill = NULL;
}

/* Empty slabs: keep them or hand them back.  A cache keeps up to
 * retain_empty empty slabs, an eighth of its slabs, or empty_want if that
 * is more; kept ones go back once they have stayed unused for the decay
 * (cache_release_empty), the newest are reused first.  empty_want is the
 * hysteresis: each slab the cache had to create within the decay after
 * this bound released one adds one (cache_slab_new), up to half its
 * slabs or EMPTY_WANT_FLOOR, and a decay without such a release halves
 * it.  While it is not 0 the cache is churning, and a free into a big
 * class leaves the purge of its sparse slabs' pages to the decay pass
 * (a slab with purged pages is released when it empties, never kept: it
 * would have to fault them back in to be reused).  Without it, a
 * cache whose slabs cycle between threads faster than an eighth of them
 * could absorb would create, format (faulting every page in) and release
 * a slab per cycle, and a producer/consumer program would spend most of
 * its CPU time in the kernel.  A
 * cache that only grows, or only shrinks, keeps its eighth. */
#define EMPTY_WANT_MAX 4096
#define EMPTY_WANT_FLOOR 64

static int empty_add_locked(struct sd_cache *c, struct slab *s)
{
    SD_ASSERT(sd_mutex_held(&c->list_lock));
    size_t n = __atomic_load_n(&c->nr_slabs, __ATOMIC_RELAXED);
    size_t keep = n / 8, want = __atomic_load_n(&c->empty_want, __ATOMIC_RELAXED);
    if (want > n / 2 && want > EMPTY_WANT_FLOOR)
        want = n / 2 > EMPTY_WANT_FLOOR ? n / 2 : EMPTY_WANT_FLOOR;
    if (keep < want)
        keep = want;
    if (keep < sd_opt.retain_empty)
        keep = sd_opt.retain_empty;
    if (c->dead || s->mesh_alias) {
        slab_set_state(s, SLAB_RELEASING);
        return 1;
    }
    uint64_t now = os_now_ns();
    if (c->nr_empty < keep && !slab_purged(s)) {
        slab_set_state(s, SLAB_EMPTY);
        s->empty_since = now;
        list_add_head(&c->empty, &s->link);
        cnt_add(&c->nr_empty, 1);
        return 0;
    }
    __atomic_store_n(&c->empty_released_ns, now, __ATOMIC_RELAXED);
    slab_set_state(s, SLAB_RELEASING);
    return 1;
}

static inline int cache_churning(const struct sd_cache *c)
{
    return __atomic_load_n(&c->empty_want, __ATOMIC_RELAXED) != 0;
}

/* A new slab was needed (no partial or empty one): if the bound above
 * released one within the decay, want one more kept (no lock: a lost
 * update only delays the growth by one). */
static void empty_want_note(struct sd_cache *c)
{
    uint64_t rel = __atomic_load_n(&c->empty_released_ns, __ATOMIC_RELAXED);
    uint32_t want = __atomic_load_n(&c->empty_want, __ATOMIC_RELAXED);
    if (rel && os_now_ns() - rel < (uint64_t)sd_opt.decay_ms * 1000000ull &&
        want < EMPTY_WANT_MAX)
        __atomic_store_n(&c->empty_want, want + 1, __ATOMIC_RELAXED);
}

int cache_slab_settle_locked(struct sd_cache *c, struct slab *s, int tail)
{
    SD_ASSERT(sd_spin_held(&s->lock));
    __atomic_store_n(&s->owner, 0, __ATOMIC_RELAXED);
    if (s->inuse == s->capacity) {
        slab_set_state(s, SLAB_FULL);
        return 0;
    }
    int release = 0;
    sd_mutex_lock(&c->list_lock);
    if (s->inuse == 0)
        release = empty_add_locked(c, s);
    else
        cache_partial_add_locked(c, s, tail);
    sd_mutex_unlock(&c->list_lock);
    return release;
}

size_t cache_slab_settle_unlock(struct sd_cache *c, struct slab *s, int tail)
{
    int release = cache_slab_settle_locked(c, s, tail);
    sd_spin_unlock(&s->lock);
    return release ? cache_slab_release(c, s) : 0;
}

/* ---------------------------------------------------------------- */
/* Pages of sparse slabs                                             */
/*
 * A slab of a big class holds few objects per 4 KiB page, so when most of
 * a heap dies at random, many pages of its sparse slabs hold no live
 * object while the slab itself still does (1408 B in 16 KiB slabs: 11
 * objects, about 3 per page).  A slab of a small class holds many objects
 * per page, and when its survivors are clustered (objects allocated
 * together die together: a cache server deletes whole runs of keys), its other
 * pages are free too (80 B in 16 KiB slabs: 204 objects, 51 per page,
 * often one run of keys alive in a slab that spans seven).  Those pages
 * go back to the OS while the slab lives.  In a big class (PURGE_EACH_FREE),
 * when a free leaves a PARTIAL slab at most a quarter in use, unless the
 * cache is churning (cache_churning, "Empty slabs" above: then, as in
 * every class, from the decay pass); in a small
 * one (PURGE_IN_PASSES), whose slab holds up to 1,024 objects to walk,
 * from the shrinker's decay pass (cache_purge_sparse: a slab that stayed
 * sparse at the tail of the partial list; done on each free, it would
 * purge pages that a producer/consumer program's next batch faults back
 * in),
 * the pages every object of which is free are purged (heapfile_purge, under
 * the slab lock: a free of the slab waits for the madvise) and their
 * objects leave the freelist, since it lives inside free objects and the
 * purged pages read back as zero.  s->purged records the pages (core/types.h:
 * the objects on them are free but on no list and not in inuse).  They
 * come back, zero, only when the slab's freelist runs dry
 * (cache_slab_unpurge_locked from the allocation paths): allocation takes
 * the fullest slabs at the head of the partial list, and a slab that
 * frees make sparse moves to its tail, so a purged slab is the last one
 * allocated from.  A purge keeps at least one object on the freelist (a
 * PARTIAL slab always has one); a slab with purged pages that empties is
 * released, never retained.  Malloc classes in slabs above one page, not
 * debugged, and,
 * with meshing, not the classes that mesh (their sparse slabs mesh
 * instead: a mesh needs every free slot on a list).  Off with
 * SLABDEFRAG_PAGE_PURGE=0.
 */
static void slab_purge_pages_locked(struct sd_cache *c, struct slab *s)
{
    SD_ASSERT(sd_spin_held(&s->lock) && s->state == SLAB_PARTIAL);
    uint64_t map[SLAB_MAX_OBJECTS / 64];
    if (s->mesh_alias || slab_free_map(s, map) < 0)
        return;                     /* a mesh host; a corrupt list: validation's */
    uint64_t pages = slab_free_pages(s, map) & ~s->purged;
    if (!pages)
        return;
    if (!slab_unlink_pages(s, pages)) {
        /* Every free object is on those pages (its live objects fill
         * whole pages): keep the first one's, for the freelist. */
        slab_rmap_fold(s);
        pages &= ~slab_object_pages(s, s->freelist);
        if (!pages || !slab_unlink_pages(s, pages))
            return;
    }
    s->purged |= pages;
    unsigned n = 0, nr = 0;
    struct os_range runs[32];       /* 64 pages: at most 32 runs */
    while (pages) {                 /* one range per run of pages */
        unsigned first = (unsigned)__builtin_ctzll(pages);
        unsigned len = (unsigned)__builtin_ctzll(~(pages >> first));
        runs[nr++] = (struct os_range){ s->start + ((size_t)first << SLAB_PAGE_SHIFT),
                                        (size_t)len << SLAB_PAGE_SHIFT };
        pages &= len >= 64 ? 0 : ~(((1ULL << len) - 1) << first);
        n += len;
    }
    heapfile_purge_batch(runs, nr); /* one TLB flush for them all */
    cache_stat_add(c, SD_STAT_PAGES_PURGED, n);
    cache_stat_add(c, SD_STAT_BYTES_RELEASED, (size_t)n << SLAB_PAGE_SHIFT);
}

/* The decay pass's purge (every class that purges pages: a big class
 * that churned left its sparse slabs to it): from the tail of each partial
 * list, where the sparse slabs are (allocation takes the head), the slabs
 * not purged yet, no further than the first slab that is not sparse or
 * PURGE_WALK steps, until `deadline`.  They are picked PURGE_BATCH at a
 * time under the list lock and purged under their own lock, one at a time
 * (the lock order is slab, then list), so that no allocation of the class
 * waits for a madvise.  A slab looked at is marked SLAB_PURGE_SEEN and
 * skipped until a free clears the mark (cache_slab_freed_locked): each
 * pass walks past the sparse slabs whose objects sit on every page.
 * Called with no allocator lock held. */
#define PURGE_BATCH 64
#define PURGE_WALK 16384

static unsigned purge_pick(struct sd_cache *c, struct slab **pick)
{
    unsigned n = 0, steps = 0;
    sd_mutex_lock(&c->list_lock);
    for (struct sd_list *l = c->partial.prev; l != &c->partial && n < PURGE_BATCH &&
         steps < PURGE_WALK; l = l->prev, steps++) {
        struct slab *s = list_entry(l, struct slab, link);
        if (__atomic_load_n(&s->inuse, __ATOMIC_RELAXED) * 4 > s->capacity)
            break;
        if (!(__atomic_load_n(&s->purged, __ATOMIC_RELAXED) & SLAB_PURGE_SEEN))
            pick[n++] = s;
    }
    sd_mutex_unlock(&c->list_lock);
    return n;
}

size_t cache_purge_sparse(uint64_t deadline)
{
    size_t pages = 0;
    for (unsigned i = 0; i < SD_NCLASSES; i++) {
        struct sd_cache *c = &sd_malloc_caches[i];
        if (c->page_purge == PURGE_NONE)
            continue;
        unsigned long before = cache_stat_read(c, SD_STAT_PAGES_PURGED);
        struct slab *pick[PURGE_BATCH];
        unsigned n;
        int late = 0;
        while (!late && (n = purge_pick(c, pick)) != 0) {
            for (unsigned k = 0; k < n; k++) {
                struct slab *s = pick[k];
                sd_spin_lock(&s->lock);
                /* It may have been taken, filled, released and reused since. */
                if (s->cache == c && s->state == SLAB_PARTIAL && s->inuse &&
                    s->inuse * 4 <= s->capacity && c->defrag_fill != s &&
                    !(s->purged & SLAB_PURGE_SEEN)) {
                    slab_purge_pages_locked(c, s);
                    s->purged |= SLAB_PURGE_SEEN;
                }
                sd_spin_unlock(&s->lock);
            }
            late = os_now_ns() > deadline;
        }
        pages += cache_stat_read(c, SD_STAT_PAGES_PURGED) - before;
        if (late)
            break;
    }
    return pages << SLAB_PAGE_SHIFT;
}

uint32_t cache_slab_unpurge_locked(struct sd_cache *c, struct slab *s)
{
    SD_ASSERT(sd_spin_held(&s->lock));
    uint64_t pages = slab_purged(s);
    if (!pages)
        return 0;
    cache_stat_add(c, SD_STAT_PAGES_REFILLED, (unsigned long)__builtin_popcountll(pages));
    return slab_unpurge(s);
}

/* A slab of c turned sparse.  With meshing, a burst of them (a program
 * freed much of its heap) wakes the shrinker for a mesh pass at once
 * instead of at its next interval: a nudge per MESH_NUDGE_SPARSE sparse
 * slabs, whoever frees (hooks/shrinker.c: an eventfd write, or a clock
 * read while its thread watches, or its lazy start). */
#define MESH_NUDGE_SPARSE 64
void (*cache_sparse_nudge)(unsigned long sparse, unsigned long slabs);

static void cache_note_sparse(struct sd_cache *c)
{
    unsigned long n = __atomic_add_fetch(&c->stat[SD_STAT_SLAB_SPARSE], 1, __ATOMIC_RELAXED);
    void (*nudge)(unsigned long, unsigned long) =
        __atomic_load_n(&cache_sparse_nudge, __ATOMIC_ACQUIRE);
    if (nudge && n % MESH_NUDGE_SPARSE == 0 && c->is_malloc && mesh_enabled())
        nudge(n, __atomic_load_n(&c->nr_slabs, __ATOMIC_RELAXED));
}

/* The free path's list moves, called with the slab locked after `freed`
 * objects went onto its freelist.  Returns 1 if the caller must release
 * it.  A partial slab that these frees made sparse (at most a quarter in
 * use) moves to the tail of the partial list: allocation takes the head,
 * so the sparse slabs drain instead of being refilled. */
int cache_slab_freed_locked(struct sd_cache *c, struct slab *s, uint32_t freed)
{
    SD_ASSERT(sd_spin_held(&s->lock));
    if (s->state == SLAB_PARTIAL && unlikely(s->purged & SLAB_PURGE_SEEN))
        s->purged &= ~SLAB_PURGE_SEEN;  /* the decay pass looks again */
    if (s->state == SLAB_FULL) {
        /* One batch can take a slab from full to sparse (a per-CPU drain
         * returns a run of its objects at once). */
        int sparse = s->inuse && s->inuse * 4 <= s->capacity;
        int release = cache_slab_settle_locked(c, s, sparse);
        if (sparse && !release && s->state == SLAB_PARTIAL) {
            cache_note_sparse(c);
            if (c->page_purge == PURGE_EACH_FREE && !cache_churning(c))
                slab_purge_pages_locked(c, s);
        }
        return release;
    }
    if (s->state != SLAB_PARTIAL)
        return 0;
    if (s->inuse) {
        if (s->inuse * 4 > s->capacity)
            return 0;
        if ((s->inuse + freed) * 4 > s->capacity && c->defrag_fill != s) {
            sd_mutex_lock(&c->list_lock);
            list_del(&s->link);
            list_add_tail(&c->partial, &s->link);
            c->partial_gen++;
            sd_mutex_unlock(&c->list_lock);
            cache_note_sparse(c);
        }
        if (c->page_purge == PURGE_EACH_FREE && !cache_churning(c))
            slab_purge_pages_locked(c, s);
        return 0;
    }
    sd_mutex_lock(&c->list_lock);
    cache_partial_del_locked(c, s);
    int release = empty_add_locked(c, s);
    sd_mutex_unlock(&c->list_lock);
    return release;
}

struct slab *cache_partial_take(struct sd_cache *c)
{
    if (!__atomic_load_n(&c->nr_partial, __ATOMIC_RELAXED) &&
        !__atomic_load_n(&c->nr_empty, __ATOMIC_RELAXED))
        return NULL;
    struct slab *got = NULL;
    sd_mutex_lock(&c->list_lock);
    for (struct sd_list *l = c->partial.next; l != &c->partial; l = l->next) {
        struct slab *s = list_entry(l, struct slab, link);
        if (sd_spin_trylock(&s->lock)) {
            cache_partial_del_locked(c, s);
            cache_slab_unpurge_locked(c, s);    /* its whole freelist is taken */
            got = s;
            break;
        }
    }
    if (!got)
        got = cache_empty_take_locked(c);
    sd_mutex_unlock(&c->list_lock);
    return got;
}

struct slab *cache_empty_take_locked(struct sd_cache *c)
{
    for (struct sd_list *l = c->empty.next; l != &c->empty; l = l->next) {
        struct slab *s = list_entry(l, struct slab, link);
        if (sd_spin_trylock(&s->lock)) {
            list_del(&s->link);
            cnt_add(&c->nr_empty, -1);
            s->purged = 0;      /* clears the union's empty_since: a live slab has no purged pages */
            return s;
        }
    }
    return NULL;
}

void cache_fold_returns(struct sd_cache *c)
{
    sd_mutex_lock(&c->list_lock);
    struct sd_list *lists[2] = { &c->partial, &c->empty };
    for (int k = 0; k < 2; k++)
        for (struct sd_list *l = lists[k]->next; l != lists[k]; l = l->next) {
            struct slab *s = list_entry(l, struct slab, link);
            /* Tried: a vacate holds a slab's lock across get(), which may
             * wait for a lock our caller holds. */
            if (!sd_spin_trylock(&s->lock))
                continue;
            slab_rmap_fold(s);
            sd_spin_unlock(&s->lock);
        }
    sd_mutex_unlock(&c->list_lock);
}

size_t cache_release_empty(struct sd_cache *c, int all)
{
    if (!__atomic_load_n(&c->nr_empty, __ATOMIC_RELAXED))
        return 0;
    uint64_t now = os_now_ns(), decay = (uint64_t)sd_opt.decay_ms * 1000000ull;
    struct sd_list doomed;
    list_init(&doomed);
    sd_mutex_lock(&c->list_lock);
    if (all || now - __atomic_load_n(&c->empty_released_ns, __ATOMIC_RELAXED) >= decay)
        __atomic_store_n(&c->empty_want, all ? 0 : c->empty_want / 2, __ATOMIC_RELAXED);
    for (struct sd_list *l = c->empty.prev, *p; l != &c->empty; l = p) {
        p = l->prev;
        struct slab *s = list_entry(l, struct slab, link);
        if (!all && now - s->empty_since < decay)
            break;                          /* newer ones sit nearer the head */
        if (!sd_spin_trylock(&s->lock))
            continue;
        list_del(&s->link);
        cnt_add(&c->nr_empty, -1);
        slab_set_state(s, SLAB_RELEASING);
        sd_spin_unlock(&s->lock);
        list_add_head(&doomed, &s->link);
    }
    sd_mutex_unlock(&c->list_lock);
    size_t bytes = 0;
    while (!list_empty(&doomed)) {
        struct slab *s = list_entry(doomed.next, struct slab, link);
        list_del(&s->link);
        bytes += cache_slab_release(c, s);
    }
    return bytes;
}

/* Retained empty slabs past the decay, in every malloc class: a class's
 * own empties were only released when another of its slabs emptied, so
 * after a burst of frees a class nobody freed into again would keep up
 * to an eighth of its slabs for good.  Called with no allocator lock
 * held. */
size_t cache_release_decayed(void)
{
    size_t bytes = 0;
    for (unsigned i = 0; i < SD_NCLASSES; i++)
        if (__atomic_load_n(&sd_malloc_caches[i].nr_empty, __ATOMIC_RELAXED))
            bytes += cache_release_empty(&sd_malloc_caches[i], 0);
    return bytes;
}

/* The decay from the allocation slow path, at most every DECAY_TICK_MS:
 * the slabs above, and the big blocks' free extents and cached mappings
 * (which malloc_large decays too, but a program may stop making big
 * blocks), and meshing's released slots for at most a pass budget (a
 * teardown's stale aliases can take tens of ms to map back).  An idle
 * program makes no slow-path call; the shrinker's interval passes decay
 * for it (hooks/shrinker.c). */
#define DECAY_TICK_MS 100

void cache_decay_tick(void)
{
    static uint64_t next;
    uint64_t now = os_now_ns(), due = __atomic_load_n(&next, __ATOMIC_RELAXED);
    if (now < due || !__atomic_compare_exchange_n(&next, &due, now + DECAY_TICK_MS * 1000000ull,
                                                  0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    cache_release_decayed();
    cache_settle_slots(0, now + (uint64_t)sd_opt.pass_budget_ms * 1000000ull);
    large_decay();
}

size_t cache_settle_slots(int all, uint64_t deadline)
{
    mesh_restore(deadline);
    return segment_purge_dirty(all, deadline);
}

/* ---------------------------------------------------------------- */
/* Fork                                                              */

static void slab_lock_one(struct slab *s, void *arg) { sd_spin_lock(&s->lock); }
static void slab_unlock_one(struct slab *s, void *arg)
{
    /* Not sd_spin_unlock: the holder was the forking thread (another tid
     * in the child); but wake the sleepers the parent's threads left. */
    uint32_t was = __atomic_exchange_n(&s->lock.holder, 0, __ATOMIC_RELEASE);
    if (was & SD_SPIN_WAITERS)
        sd_spin_wake(&s->lock);
}

void cache_lock_all(void)
{
    segment_for_each_slab(slab_lock_one, NULL, 1);
    for (unsigned i = 0; i < SD_MAX_CACHES; i++)
        if (sd_caches[i])
            sd_mutex_lock(&sd_caches[i]->list_lock);
}

void cache_unlock_all(int child)
{
    for (unsigned i = SD_MAX_CACHES; i-- > 0;)
        if (sd_caches[i]) {
            if (child)
                sd_mutex_reset_child(&sd_caches[i]->list_lock);
            else
                sd_mutex_unlock(&sd_caches[i]->list_lock);
        }
    segment_for_each_slab(slab_unlock_one, NULL, 1);
}
