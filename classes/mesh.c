/*
 * classes/mesh.c - transparent meshing of sparse malloc slabs.
 *
 * Two slabs of one malloc class whose live objects sit at disjoint slot
 * indices share one set of physical pages: the live objects of the source
 * A are copied into the target B's pages at the same offsets, A's virtual
 * range is remapped onto B's pages (core/heapfile.c) and A's own pages
 * are released by that remap.  No pointer changes: an object of A keeps
 * its A address and reads and writes through it reach B's pages.  A slab
 * lives in private anonymous memory until it is a host (core/segment.c,
 * "Anonymous segments"): a B that is not filed yet is made so first,
 * under a barrier of its own (heapfile_file: its bytes copied into a
 * shared anonymous object of its own, moved over its address), and then
 * counts a mapping like an alias against the mapping budget.
 *
 * ---------------------------------------------------------------------
 * States.  B (the host) stays an ordinary slab: PARTIAL, FULL, ACTIVE...
 * A (an alias) becomes SLAB_MESHED: on no list, inuse 0, no freelist,
 * mesh_host = B, chained on B->mesh_alias.  The host's inuse counts the
 * live objects of the host and of every alias; its freelist is rebuilt at
 * each mesh over exactly the slots free for all of them.  A free through an
 * alias address goes to the slow path (an alias has no owner), which
 * redirects it here: the object's host address B->start + (p - A->start)
 * is freed into B as any remote free.  malloc_usable_size and realloc use
 * A's geometry, which equals B's.  When the host empties it is never
 * retained: cache_slab_release() calls mesh_unmesh_host(), which gives
 * each alias's slot back as a stale alias (core/segment.c: mesh_restore
 * maps anonymous zero memory over it later, in runs), then the host's
 * pages are released as any released slab's.
 *
 * Which slabs.  Only PARTIAL slabs of malloc classes of at most
 * MESH_SMALL_MAX (2 KiB) bytes without debugging.  Larger
 * classes hold few objects per slab and little of a fragmented heap, and
 * they are where I/O buffers live - stdio's 4 KiB buffers are refilled by
 * glibc's internal read(), which the barrier cannot make retry.  Never
 * ACTIVE/OWNED slabs (a thread pops and pushes their
 * freelists without a lock) nor FROZEN by a vacate.  Candidates are taken
 * off the partial list under the list lock with trylock and FROZEN (as a
 * vacate does: nothing is allocated from them, frees still land), at most
 * MESH_BATCH at a time from the sparse tail of the list (they go back to
 * its head), of one slab size, at most 7/8 full.  A source must be at most
 * half full: two slabs can only be disjoint if one of them is (pigeonhole),
 * and the chance that two random occupancies are disjoint,
 * (1 - p^2)^capacity, falls fast with p.  A target may be fuller (see
 * target_ok).  A source must
 * not be a host itself (aliases are never chained two deep).  Greedy: the
 * sparsest source meshes into the fullest disjoint candidate; a host can
 * absorb several sources while the union stays disjoint.  A pass that
 * meshed nothing does not ask the shrinker for an early next pass.
 *
 * Locking (classes/cache.c's order): the list lock is held only to take
 * candidates (slab locks tried).  A mesh holds A's lock (waited for: A is
 * ours, FROZEN) and B's lock taken with trylock only: the fork handler
 * takes every slab lock in turn, and two slab locks are never waited for
 * at once.  mesh_lock serialises passes (one write-protected range at a
 * time) and guards each class's policy state (mesh_seen_*, mesh_backoff_*,
 * mesh_busy in struct sd_cache: "Which classes a pass meshes" below) and
 * the writes of its `shuffle` (pattern_seen; read without it, relaxed, by
 * cache_slab_new).  A
 * free through an alias takes the alias's lock, reads the host, drops it
 * and then takes the host's lock: never two slab locks.
 *
 * Writers during a mesh: A's range is write-protected before the copy and
 * replaced by a read-write mapping of B's pages after it; a write in
 * between waits until the remap is done and retries against the new
 * mapping: it lands in B's pages, at the offset it was copied to.  Nothing
 * is lost: the copy happened before the write became possible again.
 * Where it waits depends on the barrier (core/heapfile.h).  With userfaultfd
 * (the default where permitted) every writer sleeps in the kernel, system
 * calls included, and the release after the remap wakes it (core/uffd.h:
 * the remapped range is a new, unregistered mapping, so no stale
 * protection is left).  With mprotect a user-mode writer waits in
 * core/writebarrier.c's SIGSEGV handler, but the kernel does not fault: a
 * read(2) into an object of a slab being meshed fails with EFAULT during
 * the copy (Mesh has the same limit).  The preload layer retries the
 * common receiving calls - read, pread, readv, preadv, recv, recvfrom,
 * recvmsg - after waiting at the barrier (preload/syscalls.c); still
 * exposed are glibc's internal reads (stdio refilling a heap FILE buffer:
 * fread, fgets, getline) and every other call that writes into user
 * memory (stat, getsockopt, epoll_wait...).  The mesher blocks its
 * asynchronous signals while A is protected: a handler on it writing into
 * A would wait for itself.
 *
 * ---------------------------------------------------------------------
 * Proof that no in-object metadata of one alias overwrites a live object
 * of another.  Let G be a host and its aliases; they share one physical
 * page set P, and slot i of every member is the same bytes of P (equal
 * geometry: same cache, start at the slot's beginning).  Claim: at every
 * moment each slot i of P is either live in exactly one member, or free in
 * all; and only the host's freelist (or its owner's private list) links
 * free slots, using free pointers stored inside free slots only.
 *  - At a mesh, the source's live set is disjoint from the union of the
 *    group's live sets (checked under both locks, with the group's frees
 *    and allocations excluded by the locks: the source and the host are
 *    FROZEN, and aliases are only freed through the host's lock).  The
 *    copy writes only the source's live slots, which are free for all
 *    members; the host's freelist is then rebuilt over the slots free in
 *    all, so the old free pointers the copy overwrote are never followed.
 *  - An alias's own freelist is emptied at the mesh and never used again:
 *    an alias is never allocated from (MESHED, on no list, no owner) and
 *    its frees are redirected, so no free pointer is ever written through
 *    an alias.
 *  - Allocation takes a slot from the host's lists: free in all, so it
 *    becomes live in exactly one member (the host; the caller gets a host
 *    address).  A free of slot i (through any member's address) pushes it
 *    on the host's lists, writing a free pointer at byte fpo of slot i:
 *    inside the slot being freed, which was live in exactly that member and
 *    is now free in all.
 *  Hence a free pointer is only ever written inside a slot free in every
 *  member, never inside a live object.  The free pointer sits inside the
 *  object for malloc classes (fpo 0 < size), so no write leaves slot i.
 *
 * Fork: see core/heapfile.h (the child copies the shared slots and
 * re-creates the aliases from the MESHED descriptors).  The default is
 * off: with meshing on, a fork copies the meshed slabs instead of sharing
 * them copy-on-write and parks the parent's writers to them until the
 * child has copied - a cost a fork-heavy server (Redis's BGSAVE) must opt
 * into.
 */
#include "mesh.h"

#include <string.h>

#include "alloc.h"
#include "heapfile.h"
#include "options.h"
#include "os.h"
#include "pcpu.h"
#include "segment.h"
#include "slab.h"

#define MESH_BATCH 128                  /* candidates per batch */
#define MESH_SCAN  1024                 /* partial slabs looked at per batch */
#define MAP_WORDS  (SLAB_MAX_OBJECTS / 64)

static sd_mutex mesh_lock = SD_MUTEX_INIT;
static int mesh_on;
static unsigned cursor;                 /* next malloc class to mesh */
static struct mesh_stats stats;

/* Candidates of one batch and their in-use bitmaps (under mesh_lock). */
static struct slab *cand[MESH_BATCH];
static uint64_t used_map[MESH_BATCH][MAP_WORDS];
static uint32_t used_n[MESH_BATCH];

/* The fork child's hosts have objects of their own: point each alias
 * (MESHED) at its host's pages again. */
static void realias_one(struct slab *s, void *arg)
{
    int err;
    if (s->state == SLAB_MESHED && s->mesh_host &&
        (err = heapfile_alias(s->start, s->mesh_host->start, seg_kind_bytes(s->kind))))
        sd_fatal("fork: cannot re-create a mesh alias in the child (errno %d)", err);
}

static void realias_all(void)
{
    segment_for_each_slab(realias_one, NULL, 1);
}

void mesh_init(void)
{
    if (!sd_opt.mesh || mesh_on)
        return;
    int err = heapfile_init();
    if (err) {
        sd_warn("SLABDEFRAG_MESH=1: cannot install the mesh barrier's handler (errno %d); "
                "meshing off", err);
        stats.off_reason = "the SIGSEGV handler of the write barrier could not be installed";
        return;
    }
    size_t max = sd_opt.mesh_max_maps ? sd_opt.mesh_max_maps
                                      : os_max_map_count() / 2;
    stats.max_maps = max;
    stats.enabled = 1;
    forkcopy_set_realias(realias_all);
    __atomic_store_n(&mesh_on, 1, __ATOMIC_RELEASE);
}

/* Slab size.  Two slabs mesh only if no slot is live in both: with
 * occupancy p and n slots per slab that happens with probability about
 * (1 - p^2)^n.  At p = 15% (a heap after 85% of its objects went), a
 * 16 KiB slab of 32-byte objects (n = 512) essentially never meshes
 * (1e-5), a 4 KiB one (n = 128) in 5.5% of pairs, enough with 127
 * partners per batch.  And once slabs have meshed to half full, two of
 * them are rarely disjoint unless n is small: 16 KiB slabs of 576..2048
 * bytes (n = 28..8) stop meshing at 50-75% occupancy.  So a malloc
 * class gets small slabs: 4 KiB for MESH_SMALL_MIN..MESH_PAGE_MAX bytes
 * (at least 8 objects), 8 KiB up to MESH_SMALL_MAX (at least 4), both with
 * at most 1/8 left over as sizeclass_geometry asks (1408 and 1664 bytes
 * fail that and keep 16 KiB).  16-byte objects (n = 256 even in a page)
 * rarely mesh at all.
 *
 * But only once the class is big: a class's first SLABDEFRAG_MESH_PAGE_
 * SLABS slabs (default 16, i.e. 256 KiB of 16 KiB slabs) are ordinary, the
 * ones after are small (cache_slab_new).  Small slabs cost speed - more
 * slabs per thread ring, more descriptors touched, more refills - which
 * a program whose heap is a few slabs per class would pay for nothing;
 * meshing only pays where a class holds many
 * slabs, and there nearly all of them are small.  A cache may thus hold
 * two slab sizes; slabs mesh only with slabs of their own size. */
#define MESH_SMALL_MIN 32
#define MESH_PAGE_MAX  512
#define MESH_SMALL_MAX 2048

/* Placement.  A fresh slab hands its objects out in address order, so a
 * program that frees by a pattern of its allocation order (every other
 * node, all but every fourth record) leaves the same slots live in every
 * slab, and no two slabs can ever mesh.  Rotating a new slab's freelist -
 * from a random object on, in address order, wrapping around (core/
 * slab.c) - breaks that: a pattern with period p then leaves slabs whose
 * rotations differ modulo p disjoint (every other node: half the pairs;
 * all but every fourth: three in four), and a random pattern stays
 * random.  But the rotation costs a program that walks its objects in
 * allocation order (python's cyclic GC visits every container in the
 * order it was made, and takes markedly longer in rotated slabs).  In
 * address order a class's page slabs follow each other (core/segment.c,
 * "Small slabs"), so its objects in allocation order are one ascending
 * run; rotated, each slab is two runs, each starting cold for the
 * hardware prefetchers.
 *
 * So by default (SLABDEFRAG_MESH_SHUFFLE=adapt, MESH_ORDER_ADAPT) a class's
 * new slabs start in address order and turn to rotated for good when a
 * mesh batch shows a pattern (pattern_seen): its candidates hold at least
 * 4 objects per slot between them and still leave a quarter of the slots
 * unused in all.  Random frees leave about e^-4 (2%) of them unused in all
 * at that density; a pattern of period p (p - 1)/p.  The slabs made until
 * then keep their order; those made after it mesh (tests/mesh `pattern`:
 * a second batch).  SLABDEFRAG_MESH_SHUFFLE=rotate rotates from the
 * start, address never.  SLABDEFRAG_MESH_SHUFFLE=permute makes it a
 * random permutation (Fisher-Yates, as SLUB's
 * CONFIG_SLAB_FREELIST_RANDOM and Mesh's shuffle vectors), which also
 * breaks patterns no rotation does, at a price: the
 * objects a program allocates one after the other land anywhere in their
 * slab, which costs locality (python's dict and str churn fills slower
 * with the permutation than with the rotation).  Unlike
 * Mesh, frees are not shuffled: an object freed and allocated again
 * reuses its slot (LIFO), which keeps the fast path a plain list pop and
 * push; the pattern the rotation breaks is the one a fresh heap is
 * carved in. */
void mesh_geometry(struct sd_cache *c)
{
    if (!mesh_enabled() || c->debug)
        return;
    c->shuffle = sd_opt.mesh_shuffle == MESH_ORDER_ROTATE ? SLAB_ORDER_ROTATE
               : sd_opt.mesh_shuffle == MESH_ORDER_PERMUTE ? SLAB_ORDER_SHUFFLE
               : SLAB_ORDER_ADDRESS;
    if (c->size >= MESH_SMALL_MIN && c->size <= MESH_SMALL_MAX)
        c->page_purge = 0;          /* its sparse slabs mesh instead */
    if (!sd_opt.mesh_page_slabs || c->size > MESH_SMALL_MAX || c->size < MESH_SMALL_MIN)
        return;
    unsigned kind = c->size <= MESH_PAGE_MAX ? SEG_KIND_4K : SEG_KIND_8K;
    size_t bytes = seg_kind_bytes(kind);
    uint32_t cap = (uint32_t)(bytes / c->size);
    if (cap < (kind == SEG_KIND_4K ? 8u : 4u) || (bytes - (size_t)cap * c->size) * 8 > bytes)
        return;
    c->page_capacity = cap;
    c->page_kind = (uint8_t)kind;
}

int mesh_enabled(void)
{
    return __atomic_load_n(&mesh_on, __ATOMIC_ACQUIRE);
}

/* In-use bitmap of s (locked): complement of its free map.  Returns the
 * objects in use, or -1 on a corrupt freelist. */
static int used_bitmap(const struct slab *s, uint64_t *map)
{
    if (slab_free_map(s, map) < 0)
        return -1;
    unsigned words = (s->capacity + 63) / 64;
    int n = 0;
    for (unsigned w = 0; w < words; w++) {
        uint64_t valid = (w + 1) * 64 <= s->capacity ? ~0ULL
                         : (1ULL << (s->capacity & 63)) - 1;
        map[w] = ~map[w] & valid;
        n += __builtin_popcountll(map[w]);
    }
    return n;
}

static int disjoint(const uint64_t *a, const uint64_t *b, unsigned words)
{
    for (unsigned w = 0; w < words; w++)
        if (a[w] & b[w])
            return 0;
    return 1;
}

/* ---------------------------------------------------------------- */
/* One mesh                                                          */

/* b's freelist over the slots clear in `used`; returns how many. */
static uint32_t relink_free(struct slab *b, const uint64_t *used, uint32_t cap)
{
    void *last = NULL;
    uint32_t nfree = 0;
    for (uint32_t i = 0; i < cap; i++)
        if (!(used[i >> 6] >> (i & 63) & 1)) {
            slab_link(b, &last, slab_object(b, i));
            nfree++;
        }
    slab_link_end(b, last);
    slab_rmap_clear(b);                 /* all on the list now */
    return nfree;
}

/* Mesh FROZEN source a into FROZEN target b (both unlocked on entry and
 * exit).  1 meshed, 0 not (busy, no longer disjoint), -1 stop (map cap). */
static int mesh_pair(struct sd_cache *c, struct slab *a, struct slab *b,
                     uint64_t *bmap)
{
    size_t bytes = seg_kind_bytes(a->kind);
    uint32_t cap = a->capacity;             /* b's too: one kind per batch */
    uint64_t ua[MAP_WORDS], ub[MAP_WORDS];
    unsigned words = (cap + 63) / 64;
    sd_spin_lock(&a->lock);
    if (!sd_spin_trylock(&b->lock)) {
        sd_spin_unlock(&a->lock);
        return 0;
    }
    int ret = 0;
    int na = used_bitmap(a, ua), nb = used_bitmap(b, ub);
    if (a->state != SLAB_FROZEN || b->state != SLAB_FROZEN || na <= 0 ||
        nb < 0 || a->mesh_alias || !disjoint(ua, ub, words))
        goto out;
    /* An anonymous host is filed first (heapfile_file, under its own
     * barrier): a mapping of its own, like an alias. */
    int filing = !segment_slab_filed(b);
    /* Each filed slot is an object of its own: a mapping, and a split of
     * its segment's. */
    uint64_t maps = __atomic_load_n(&stats.maps, __ATOMIC_RELAXED) + 2 * segment_filed_slots();
    if (maps + (filing ? 4 : 2) > stats.max_maps) {
        __atomic_fetch_add(&stats.map_limit_hits, 1, __ATOMIC_RELAXED);
        ret = -1;
        goto out;
    }
    uint64_t t0 = os_now_ns();
    if (filing) {
        if (wbarrier_protect_begin(b->start, bytes))
            goto out;
        int err = heapfile_file(b->start, bytes);
        wbarrier_protect_end();
        if (err)
            goto out;
        heapfile_register(b->start, bytes);
        segment_slab_set_filed(b, 1);
    }
    if (wbarrier_protect_begin(a->start, bytes))
        goto out;
    for (unsigned w = 0; w < words; w++)
        for (uint64_t m = ua[w]; m; m &= m - 1) {
            size_t off = (size_t)(w * 64 + (unsigned)__builtin_ctzll(m)) * c->size;
            memcpy(b->start + off, a->start + off, c->size);
        }
    /* a's private pages go with the remap.  If it fails, a is still its
     * own (made writable again), or, if the remap unmapped it first, its
     * live objects are copied back from b into new anonymous memory. */
    int err = heapfile_alias(a->start, b->start, bytes);
    if (err && os_mapped(a->start, bytes)) {
        os_protect(a->start, bytes, 1);
    } else if (err) {
        if (heapfile_unalias_anon(a->start, bytes))
            sd_fatal("meshing: a slab's mapping is gone and cannot be made again "
                     "(errno %d)", err);
        for (unsigned w = 0; w < words; w++)
            for (uint64_t m = ua[w]; m; m &= m - 1) {
                size_t off = (size_t)(w * 64 + (unsigned)__builtin_ctzll(m)) * c->size;
                memcpy(a->start + off, b->start + off, c->size);
            }
    }
    wbarrier_protect_end();
    stat_max(&stats.longest_pause_ns, os_now_ns() - t0);
    if (err) {                  /* the copies overwrote b's free list */
        relink_free(b, ub, cap);
        goto out;
    }
    segment_slab_set_filed(a, 0);               /* it maps b's now */

    /* The host's freelist over the slots free in every member. */
    for (unsigned w = 0; w < words; w++)
        ub[w] |= ua[w];
    b->inuse = cap - relink_free(b, ub, cap);
    memcpy(bmap, ub, words * sizeof(uint64_t));
    a->inuse = 0;
    a->freelist = NULL;
    slab_rmap_clear(a);
    slab_set_state(a, SLAB_MESHED);
    a->mesh_host = b;
    a->mesh_alias = b->mesh_alias;
    b->mesh_alias = a;
    __atomic_fetch_sub(&c->nr_slabs, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats.maps, 2, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats.aliases, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats.meshes, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&stats.bytes_released, bytes, __ATOMIC_RELAXED);
    cache_stat_add(c, SD_STAT_MESHES, 1);
    cache_stat_add(c, SD_STAT_MESH_BYTES, bytes);
    ret = 1;
out:
    sd_spin_unlock(&b->lock);
    sd_spin_unlock(&a->lock);
    return ret;
}

/* ---------------------------------------------------------------- */
/* A batch of one cache                                              */

/* Occupancy thresholds.  A source must be at most half full: two slabs
 * can only be disjoint if one of them is (pigeonhole), and the sparser
 * the source the likelier a partner.  A target may be fuller, up to 7/8:
 * meshing a 15%-full source into a 60%-full host releases a slab as
 * surely as into a 30%-full one, and restricting hosts to half full
 * would leave the medium classes (8-28 objects per slab) near half full,
 * where two hosts are rarely disjoint any more. */
static int source_ok(uint32_t cap, uint32_t inuse)
{
    return inuse * 2 <= cap;
}

static int target_ok(uint32_t cap, uint32_t inuse)
{
    return inuse * 8 <= cap * 7;
}

/* Candidates of one slab size: kind and its capacity cap. */
static int batch_take(struct sd_cache *c, unsigned kind, uint32_t cap)
{
    int n = 0, seen = 0;
    sd_mutex_lock(&c->list_lock);
    /* From the tail: a shrink sorts the partial list fullest first, so the
     * sparsest slabs - the likeliest to be disjoint - are there. */
    for (struct sd_list *l = c->partial.prev, *nx; l != &c->partial && n < MESH_BATCH &&
         seen < MESH_SCAN; l = nx, seen++) {
        nx = l->prev;
        struct slab *s = list_entry(l, struct slab, link);
        if (s->kind != kind || !target_ok(cap, __atomic_load_n(&s->inuse, __ATOMIC_RELAXED)) ||
            !heapfile_contains(s->start) || !sd_spin_trylock(&s->lock))
            continue;
        if (target_ok(cap, s->inuse) && s->inuse && !slab_purged(s)) {
            cache_partial_del_locked(c, s);
            slab_set_state(s, SLAB_FROZEN);
            cand[n++] = s;
        }
        sd_spin_unlock(&s->lock);
    }
    sd_mutex_unlock(&c->list_lock);
    return n;
}

static void batch_settle(struct sd_cache *c, struct slab *s)
{
    sd_spin_lock(&s->lock);
    if (s->state == SLAB_FROZEN)
        /* To the head: the next batch sees other slabs, and allocation
         * fills the hosts and the slabs that found no partner. */
        cache_slab_settle_unlock(c, s, 0);
    else
        sd_spin_unlock(&s->lock);
}

#define PATTERN_DENSITY 4               /* live objects per slot, at least */
#define PATTERN_UNUSED 4                /* and 1/this of the slots unused */

/* Placement (above): do the n candidates of a batch, in address order,
 * leave the same slots unused?  Then the class's new slabs are rotated. */
static void pattern_seen(struct sd_cache *c, int n, uint32_t cap)
{
    if (sd_opt.mesh_shuffle != MESH_ORDER_ADAPT ||
        __atomic_load_n(&c->shuffle, __ATOMIC_RELAXED) != SLAB_ORDER_ADDRESS)
        return;
    uint64_t any[MAP_WORDS] = { 0 };
    unsigned words = (cap + 63) / 64;
    uint64_t live = 0;
    for (int i = 0; i < n; i++) {
        if (used_n[i] == UINT32_MAX)
            continue;
        live += used_n[i];
        for (unsigned w = 0; w < words; w++)
            any[w] |= used_map[i][w];
    }
    if (live < (uint64_t)cap * PATTERN_DENSITY)
        return;
    uint32_t used = 0;
    for (unsigned w = 0; w < words; w++)
        used += (uint32_t)__builtin_popcountll(any[w]);
    if ((cap - used) * PATTERN_UNUSED < cap)
        return;
    __atomic_store_n(&c->shuffle, (uint8_t)SLAB_ORDER_ROTATE, __ATOMIC_RELAXED);
    cache_stat_add(c, SD_STAT_MESH_PATTERNS, 1);
}

/* Returns -1 to stop meshing (map cap), else the meshes made; *more when
 * the batch was cut short. */
static int mesh_cache(struct sd_cache *c, unsigned kind, uint32_t cap,
                      uint64_t deadline, int *more)
{
    int n = batch_take(c, kind, cap);
    if (n < 2) {
        for (int i = 0; i < n; i++)
            batch_settle(c, cand[i]);
        return 0;
    }
    if (n == MESH_BATCH)
        *more = 1;
    for (int i = 0; i < n; i++) {
        sd_spin_lock(&cand[i]->lock);
        int k = used_bitmap(cand[i], used_map[i]);
        sd_spin_unlock(&cand[i]->lock);
        used_n[i] = k < 0 ? UINT32_MAX : (uint32_t)k;
    }
    pattern_seen(c, n, cap);
    /* Fullest first (insertion sort of at most MESH_BATCH). */
    for (int i = 1; i < n; i++) {
        struct slab *s = cand[i];
        uint32_t k = used_n[i];
        uint64_t m[MAP_WORDS];
        memcpy(m, used_map[i], sizeof m);
        int j = i;
        for (; j > 0 && used_n[j - 1] < k; j--) {
            cand[j] = cand[j - 1];
            used_n[j] = used_n[j - 1];
            memcpy(used_map[j], used_map[j - 1], sizeof m);
        }
        cand[j] = s;
        used_n[j] = k;
        memcpy(used_map[j], m, sizeof m);
    }
    unsigned words = (cap + 63) / 64;
    int made = 0, stop = 0;
    uint8_t gone[MESH_BATCH] = { 0 };
    for (int src = n - 1; src > 0 && !stop; src--) {
        if (used_n[src] == 0 || used_n[src] == UINT32_MAX || cand[src]->mesh_alias ||
            !source_ok(cap, used_n[src]))
            continue;
        for (int dst = 0; dst < n; dst++) {
            if (dst == src || gone[dst] || used_n[dst] == UINT32_MAX ||
                used_n[dst] + used_n[src] > cap ||
                !disjoint(used_map[src], used_map[dst], words))
                continue;
            int r = mesh_pair(c, cand[src], cand[dst], used_map[dst]);
            if (r < 0) {
                stop = 1;
                break;
            }
            if (r > 0) {
                gone[src] = 1;
                used_n[dst] += used_n[src];
                made++;
                break;
            }
        }
        if (deadline && os_now_ns() > deadline) {
            *more = 1;
            break;
        }
    }
    for (int i = 0; i < n; i++)
        if (!gone[i])
            batch_settle(c, cand[i]);
    return stop ? -1 : made;
}

/* ---------------------------------------------------------------- */
/* Which classes a pass meshes                                       */

/* Policy.  Meshing costs the program: each mesh write-protects a slab,
 * copies it and remaps it (TLB shootdowns, mmap_lock), and a host that
 * empties is unmeshed (another remap); a program whose survivors are
 * deleted soon after (python's churn) would undo nearly every mesh.  Two
 * rules:
 *   - busy: a class that refilled its per-CPU stacks (or threads' active
 *     slabs) MESH_BUSY_REFILLS times a second or more (over the last quarter
 *     second or more)
 *     is left alone, except by a pass that meshes every class (a nudge
 *     after a burst of frees, memory pressure, sd_shrink_all: flag
 *     MESH_GROWING): its free slots are being reused anyway;
 *   - waste: when at least MESH_WASTE_MIN meshes were made since the last
 *     check, at least MESH_WASTE_WINDOW_MS ago, and the unmeshes since then
 *     number more than half of them,
 *     meshing backs off the class for 1 s, then 2, 4... up to 60 s; a
 *     check that finds the meshes kept resets the back-off to 1 s.  Memory
 *     pressure and sd_shrink_all mesh it all the same (MESH_FORCE).
 * Both counters are the class's own statistics (meshes, unmeshes,
 * alloc_refill); the state lives in struct sd_cache, under mesh_lock. */
#define MESH_BUSY_REFILLS 200           /* refills per second */
#define MESH_BUSY_WINDOW_MS 250         /* measured over at least this */
#define MESH_WASTE_MIN 32               /* meshes before a verdict */
#define MESH_WASTE_WINDOW_MS 1000       /* and at least this long: unmeshes
                                           come after the frees, and those
                                           after the per-CPU stacks drain */
#define MESH_BACKOFF_MIN_MS 1000
#define MESH_BACKOFF_MAX_MS 60000

static int mesh_policy_skip(struct sd_cache *c, uint64_t now, int flags)
{
    SD_ASSERT(sd_mutex_held(&mesh_lock));
    /* The rate over at least MESH_BUSY_WINDOW_MS: catch-up passes come
     * every few ms, where one refill would look like hundreds a second. */
    uint64_t dt = now - c->mesh_seen_ns;
    if (dt >= MESH_BUSY_WINDOW_MS * 1000000ull) {
        unsigned long refills = cache_stat_read(c, SD_STAT_ALLOC_REFILL);
        unsigned long dr = refills - c->mesh_seen_refill;
        c->mesh_busy = c->mesh_seen_ns &&
                       (uint64_t)dr * 1000000000ull >= (uint64_t)MESH_BUSY_REFILLS * dt;
        c->mesh_seen_refill = refills;
        c->mesh_seen_ns = now;
    }
    unsigned long meshes = __atomic_load_n(&c->stat[SD_STAT_MESHES], __ATOMIC_RELAXED);
    unsigned long unmeshes = __atomic_load_n(&c->stat[SD_STAT_UNMESHES], __ATOMIC_RELAXED);
    unsigned long dm = meshes - c->mesh_seen_meshes, du = unmeshes - c->mesh_seen_unmeshes;
    if (!c->mesh_backoff_ms)
        c->mesh_backoff_ms = MESH_BACKOFF_MIN_MS;
    if (dm >= MESH_WASTE_MIN && now - c->mesh_judged_ns >= MESH_WASTE_WINDOW_MS * 1000000ull) {
        c->mesh_judged_ns = now;
        c->mesh_seen_meshes = meshes;
        c->mesh_seen_unmeshes = unmeshes;
        if (du * 2 > dm) {
            c->mesh_backoff_until = now + (uint64_t)c->mesh_backoff_ms * 1000000ull;
            if (c->mesh_backoff_ms < MESH_BACKOFF_MAX_MS)
                c->mesh_backoff_ms = c->mesh_backoff_ms * 2 < MESH_BACKOFF_MAX_MS
                                     ? c->mesh_backoff_ms * 2 : MESH_BACKOFF_MAX_MS;
            cache_stat_add(c, SD_STAT_MESH_BACKOFFS, 1);
        } else {
            c->mesh_backoff_ms = MESH_BACKOFF_MIN_MS;
        }
    }
    if (now < c->mesh_backoff_until && !(flags & MESH_FORCE)) {
        cache_stat_add(c, SD_STAT_MESH_SKIPPED_BACKOFF, 1);
        return 1;
    }
    if (!(flags & MESH_GROWING) && c->mesh_busy) {
        cache_stat_add(c, SD_STAT_MESH_SKIPPED_BUSY, 1);
        return 1;
    }
    return 0;
}

size_t mesh_pass(uint64_t deadline, int *more, int flags)
{
    int all = flags & MESH_GROWING;
    int dummy = 0;
    if (!more)
        more = &dummy;
    *more = 0;
    if (!mesh_enabled())
        return 0;
    if (!sigchain_handler_ours()) {
        stats.handler_lost = 1;             /* the program took SIGSEGV */
        return 0;
    }
    pcpu_drain(NULL);           /* occupancy without the CPUs' stacks */
    sd_mutex_lock(&mesh_lock);
    uint64_t t0 = os_now_ns();
    uint64_t before = __atomic_load_n(&stats.bytes_released, __ATOMIC_RELAXED);
    for (unsigned k = 0; k < SD_NCLASSES; k++) {
        unsigned i = (cursor + k) % SD_NCLASSES;
        struct sd_cache *c = &sd_malloc_caches[i];
        if (c->debug || c->size > MESH_SMALL_MAX ||
            __atomic_load_n(&c->nr_partial, __ATOMIC_RELAXED) < 2)
            continue;
        /* In the background, only a class that made no new slab since the
         * last pass: while it grows, its free slots are about to be reused
         * anyway, and each mesh's mprotect and remap would stall the
         * program's page faults on mmap_lock and interrupt its threads
         * with TLB shootdowns for nothing. */
        unsigned long made_new = __atomic_load_n(&c->stat[SD_STAT_SLAB_NEW], __ATOMIC_RELAXED);
        int growing = made_new != c->mesh_seen_new;
        c->mesh_seen_new = made_new;
        if (growing && !all)
            continue;
        if (mesh_policy_skip(c, os_now_ns(), flags))
            continue;
        int cmore = 0, r;
        do {
            r = mesh_cache(c, c->kind, c->capacity, deadline, &cmore);
        } while (r > 0 && cmore && !(deadline && os_now_ns() > deadline));
        if (r >= 0 && c->page_capacity)     /* its page slabs, if any */
            do {
                r = mesh_cache(c, c->page_kind, c->page_capacity, deadline, &cmore);
            } while (r > 0 && cmore && !(deadline && os_now_ns() > deadline));
        if (r < 0)
            break;                          /* the map cap: nothing more */
        if (cmore)
            *more = 1;
        if (deadline && os_now_ns() > deadline) {
            cursor = i + 1;
            *more = 1;
            break;
        }
    }
    stats.passes++;
    __atomic_fetch_add(&stats.time_ns, os_now_ns() - t0, __ATOMIC_RELAXED);
    sd_mutex_unlock(&mesh_lock);
    size_t released = __atomic_load_n(&stats.bytes_released, __ATOMIC_RELAXED) - before;
    /* Ask for an early next pass only after progress: a heap whose
     * sparse slabs no longer mesh would otherwise be rescanned every few
     * milliseconds, a good part of a CPU in an idle program. */
    if (!released)
        *more = 0;
    return released;
}

/* ---------------------------------------------------------------- */
/* Frees through an alias, and the end of a host                     */

void mesh_free(struct slab *s, void *p, const char *call)
{
    sd_spin_lock(&s->lock);
    struct slab *host = s->mesh_host;
    unsigned state = s->state;
    int ok = slab_contains(s, p);
    sd_spin_unlock(&s->lock);
    if (state != SLAB_MESHED || !host || !ok)
        report_invalid(call, p);
    /* The host cannot go away under us: it counts p until p is freed. */
    cache_free_slow(host, host->start + ((char *)p - s->start), call);
}

size_t mesh_unmesh_host(struct sd_cache *c, struct slab *s)
{
    size_t n = 0;
    sd_spin_lock(&s->lock);
    struct slab *a = s->mesh_alias;
    s->mesh_alias = NULL;
    sd_spin_unlock(&s->lock);
    while (a) {
        sd_spin_lock(&a->lock);
        struct slab *next = a->mesh_alias;
        a->mesh_alias = NULL;
        a->mesh_host = NULL;
        slab_set_state(a, SLAB_RELEASING);
        sd_spin_unlock(&a->lock);
        __atomic_fetch_sub(&stats.aliases, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&stats.unmeshes, 1, __ATOMIC_RELAXED);
        cache_stat_add(c, SD_STAT_UNMESHES, 1);
        /* Anonymous zero memory mapped back over it later, with its
         * neighbours: mesh_restore (core/segment.c, "Stale aliases"). */
        segment_slab_free_alias(a);
        n++;
        a = next;
    }
    return n;
}

size_t mesh_restore(uint64_t deadline)
{
    if (!segment_stale_aliases())
        return 0;
    size_t n = segment_restore_aliases(deadline);
    __atomic_fetch_sub(&stats.maps, 2 * n, __ATOMIC_RELAXED);
    return n;
}

void mesh_get_stats(struct mesh_stats *st)
{
    *st = stats;
    st->filed = segment_filed_slots();
    st->maps += 2 * st->filed;
    st->enabled = mesh_enabled();
    st->barrier = wbarrier_name();
    st->fault_waits = wbarrier_fault_waits();
    st->syscall_retries = wbarrier_syscall_retries();
}
