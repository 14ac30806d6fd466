/*
 * core/segment.c - segments of equal slots, and the segment map.
 *
 * Locking: one mutex per kind guards its segment list and every segment's
 * slot bitmaps (used, dirty, stale; not filed, which is atomic) and
 * counts.  It is a leaf lock: taken with no
 * other allocator lock held (slabs are created and released outside cache
 * and slab locks), so the fork handler may take it first.  It is never
 * held across a system call that frees memory: a purge takes its slots
 * (used bit set) under the lock, drops it for the madvise or removal
 * calls, and gives them back under it.
 *
 * Slot states (bits used, dirty, stale of the slot; and filed, which only
 * says what a meshing segment's slot maps: "Anonymous segments"):
 *   0 0 0  free, its pages purged (or never touched): reads back zero
 *   1 0 0  holds a slab (from segment_slab_alloc to segment_slab_free)
 *   0 1 0  free and dirty: released, pages still resident ("Dirty slots")
 *   1 1 0  taken, the lock dropped: being purged (segment_purge_dirty) or
 *          mapped back (segment_restore_aliases); a fork child, where the
 *          thread doing it is gone, makes it free and dirty (the child
 *          has copied it into memory of its own, segment_child_refile)
 *   1 0 1  a stale alias: released, still mapped onto its mesh host's
 *          pages ("Stale aliases"); its descriptor is UNUSED
 * Slots from nslots to the end of the 4 MiB ("Address space") are not
 * mapped: bits 0 0 0, descriptors zero, never handed out or walked, not
 * found by segment_slab_of; another mapping may hold them (then grow 0).
 * nslots only grows, under the kind lock, with a relaxed store that
 * segment_slab_of reads unlocked.
 *
 * Dirty slots.  A released slot is not purged at once: it stays dirty, a
 * new slab of the kind takes a dirty slot first (no page faults, no
 * purge), and the dirty slots are purged later in runs of adjacent slots,
 * PURGE_RUNS runs to one process_madvise(2) call (os_purge_batch), whose
 * one TLB flush serves every range.  Without meshing at most
 * DIRTY_ANON_MAX bytes wait: past it the releasing thread purges them
 * all.  With meshing more may wait (DIRTY_SHIFT of the slab memory in
 * use, at least DIRTY_FLOOR), as the purge of a filed slot is a removal
 * of its own with a flush of its own; they go when a kind has had dirty
 * slots for the decay (segment_purge_dirty(0), from the decay tick and
 * the shrinker's passes) and at once on every explicit shrink or trim.
 *
 * Anonymous segments.  With meshing on, every segment is private
 * anonymous memory as without it (seg->anon says its slots may be filed),
 * and only a slot that hosts a mesh is "filed": its bytes copied into a
 * shared anonymous object of its own, moved over the slot (heapfile_file,
 * under the host's write barrier; classes/mesh.c), so that an alias can
 * map the same pages.  A filed slot stays filed while its slab lives (a
 * host, or a slab taken from its dirty slot again); its purge frees the
 * object's pages and maps anonymous memory back over it
 * (heapfile_unfile).  A released alias maps anonymous memory back too.
 * Bits per slot in seg->filed, set and cleared atomically (a mesh files
 * its host under the slab locks, not this lock); a slot is filed only
 * while it holds a slab or is taken or dirty.  A fork protects and copies
 * only what may be shared: filed slots, aliases, stale aliases and the
 * slots a purge or restore had taken (segment_protect_shared,
 * segment_child_refile); the rest is the child's copy-on-write.
 *
 * Small slabs.  The 4 and 8 KiB slabs of meshing's big malloc classes
 * (classes/mesh.c) are cut, for each class, from a segment of its own, in
 * address order (segment_slab_alloc's `own`; a dirty slot of any segment
 * of the kind still comes first), and a fresh one that starts a 16 KiB
 * run of its segment, the rest of the run free and clean, faults the
 * whole run in with one call (os_populate): the class's next slabs are
 * the rest of that run: one call instead of four faults (each a trip
 * through the hypervisor on a virtual machine), and a class's slabs next
 * to each other as one big slab's pages, which a program walking its
 * objects reads as fast as one big slab.  At
 * most three slots a class are faulted in ahead of use; they read back
 * zero, as free slots do, and are not purged until used and released.
 *
 * Stale aliases.  When a mesh host empties, each of its aliases must map
 * anonymous zero memory again before its slot can hold a slab: an mmap
 * and a userfaultfd registration, each changing the page tables and
 * taking mmap_lock for writing, thousands of them when a program tears
 * its heap down.  So the alias's slot stays taken
 * (segment_slab_free_alias) and is mapped back later, in runs of adjacent
 * slots, one mmap and one registration per run (segment_restore_aliases:
 * the shrinker's thread, the decay tick, every explicit shrink).  Until
 * then nothing reads or writes the range: the slot holds no slab, and
 * its descriptor is UNUSED (a free of a pointer into it is reported as
 * invalid, as for any free slot).
 */
#include "segment.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "extent.h"
#include "heapfile.h"
#include "options.h"
#include "os.h"

/* The segment map: a bit per 4 MiB of [2^46, 2^47), the upper half of the
 * user address space, where Linux's default layout maps (top-down from
 * below the stack): 2 MiB of .bss, which an address-space limit counts.
 * A segment the kernel puts below 2^46 (the legacy layout, `ulimit -s
 * unlimited`) is unmapped and placed as under a limit (segment_place). */
uint64_t segment_map[SEGMENT_MAP_WORDS];

static int in_map(uintptr_t a)
{
    return a >> SEGMENT_MAP_LO_SHIFT == 1;
}

/* The bound on dirty bytes past which the thread releasing a slot purges
 * them all itself: DIRTY_SHIFT of the slab bytes in use, at least
 * DIRTY_FLOOR; four times that while a thread purges them every few ms
 * (segment_dirty_purger: the shrinker's), so that the program's threads
 * leave the purges to it unless they release faster than it purges.
 * Without meshing,
 * DIRTY_ANON_MAX: a batch, never more held back. */
#define DIRTY_FLOOR (16UL << 20)
#define DIRTY_ANON_MAX (512UL << 10)
#define DIRTY_SHIFT 4
#define PURGE_RUNS  64           /* runs taken per lock hold (OS_BATCH_MAX) */
#define SMALL_RUN   16384        /* small slabs are faulted in by runs: "Small slabs" */

struct seg_kind {
    sd_mutex lock;
    struct sd_list segs;        /* segments with free slots first */
    size_t nsegs;
    size_t used;                /* slots holding slabs */
    size_t ndirty;              /* free dirty slots */
    uint64_t dirty_since;       /* ns when ndirty last left 0 */
    size_t nstale;              /* stale aliases */
    size_t mapped;              /* bytes of its segments mapped */
    size_t ngrow;               /* segments that may grow ("Address space") */
};

#define KIND_INIT(i) { SD_MUTEX_INIT, { &kinds[i].segs, &kinds[i].segs }, 0, 0, 0, 0, 0, 0, 0 }
static struct seg_kind kinds[SEG_NKINDS] = {
    KIND_INIT(0), KIND_INIT(1), KIND_INIT(2), KIND_INIT(3), KIND_INIT(4),
};

static size_t used_bytes;       /* slab bytes in slots that hold slabs */
static size_t dirty_bytes;      /* bytes of free dirty slots */
static size_t stale_slots;      /* stale aliases, every kind */
static size_t purged_runs, purged_slots, reused_slots;  /* statistics */
static void (*purger)(void);    /* wakes the thread that purges dirty
                                   slots and restores stale aliases */

static void seg_nfree_add(struct seg_kind *k, struct segment *seg, int n);

/* ---------------------------------------------------------------- */
/* Address space                                                     */

/* An address-space limit (RLIMIT_AS) counts every page mapped, touched or
 * not: a segment mapped whole costs 4 MiB when it holds a few slabs, for
 * each kind in use (with meshing, each big class's own segment too).  So
 * while a limit is set (os_as_limited, as for chunks), a new segment maps
 * its header and first slot rounded up to GROW_STEP, and grows at its end
 * (GROW_STEP, or one slot) with MAP_FIXED_NOREPLACE when its slots are all
 * taken (segment_room_locked); it stays 4 MiB aligned for the map.  The
 * rest of its 4 MiB is a gap any mapping may take: then the segment grows
 * no more (grow 0).  The kernel maps at the top of the highest gap that
 * fits, often the 64 MiB of a chunk past its mapped end, which segments
 * there keep from growing (each new chunk costs a 1.16 MiB header): so a
 * new segment goes right below the lowest one (the first at PLACE_TOP),
 * below any chunk's 64 MiB in the way, and where the kernel chooses once
 * PLACE_TRIES spots are taken.  Without a limit, segments are mapped
 * whole where the kernel chooses. */
#define GROW_STEP (256UL << 10)
#define PLACE_TRIES 16
#define PLACE_TOP   (3UL << 45)         /* the first segment placed */
#define PLACE_FLOOR (1UL << SEGMENT_MAP_LO_SHIFT)  /* "The segment map" */

static uintptr_t seg_low;       /* the lowest segment's address (placement) */

/* Map `size` bytes for a new segment under an address-space limit, or
 * where the kernel's choice is out of the segment map, 4 MiB aligned
 * ("Address space", "The segment map").  0 or ENOMEM. */
static int segment_place(size_t size, void **out)
{
    uintptr_t h = __atomic_load_n(&seg_low, __ATOMIC_RELAXED);
    if (!h)
        h = PLACE_TOP;
    for (unsigned t = 0; h >= PLACE_FLOOR + SD_SEGMENT_SIZE && t < PLACE_TRIES; t++) {
        h -= SD_SEGMENT_SIZE;
        uintptr_t c = h >> XCHUNK_SHIFT;
        if (__atomic_load_n(&xchunk_map[c >> 6], __ATOMIC_RELAXED) >> (c & 63) & 1) {
            h = c << XCHUNK_SHIFT;      /* below that chunk's 64 MiB */
            continue;
        }
        int err = os_map_at((void *)h, size);
        if (!err) {
            *out = (void *)h;
            return 0;
        }
        if (err != EEXIST)
            return ENOMEM;
    }
    if (os_map_aligned(size, SD_SEGMENT_SIZE, out))
        return ENOMEM;
    if (in_map((uintptr_t)*out))
        return 0;
    os_unmap(*out, size);
    return ENOMEM;
}

static size_t round_step(size_t bytes)
{
    return (bytes + GROW_STEP - 1) & ~(GROW_STEP - 1);
}

static struct segment *segment_new(struct seg_kind *k, unsigned kind)
{
    unsigned shift = seg_kind_shift(kind);
    unsigned cap = (unsigned)(SD_SEGMENT_SIZE >> shift);
    size_t hdr = SEG_GUARD + sizeof(struct segment) + cap * sizeof(struct slab) +
                 cap * segment_rmap_words(shift) * sizeof(uint64_t);
    unsigned first = (unsigned)((hdr + (1UL << shift) - 1) >> shift);
    size_t size = SD_SEGMENT_SIZE;
    int limited = os_as_limited();
    if (limited) {
        size = round_step((size_t)(first + 1) << shift);
        if (size > SD_SEGMENT_SIZE)
            size = SD_SEGMENT_SIZE;
    }
    void *mem;
    if (limited) {
        if (segment_place(size, &mem))
            return NULL;
    } else {
        if (os_map_aligned(size, SD_SEGMENT_SIZE, &mem))
            return NULL;
        if (!in_map((uintptr_t)mem)) {          /* "The segment map" */
            os_unmap(mem, size);
            if (segment_place(size, &mem))
                return NULL;
        }
    }
    if (os_guard(mem, SEG_GUARD)) {
        os_unmap(mem, size);
        return NULL;                    /* out of mappings: ENOMEM */
    }
    struct segment *seg = segment_at((uintptr_t)mem);
    unsigned nslots = (unsigned)(size >> shift);
    seg->magic = SEGMENT_MAGIC;
    seg->kind = (uint8_t)kind;
    seg->slot_shift = (uint8_t)shift;
    seg->nslots = (uint16_t)nslots;
    seg->first = (uint16_t)first;
    seg->nfree = (uint16_t)(nslots - first);
    seg->hint = seg->first;
    seg->anon = (uint8_t)heapfile_on;     /* its slots may be filed */
    seg->grow = nslots < cap;
    for (unsigned i = 0; i < first; i++)
        seg->used[i >> 6] |= 1ULL << (i & 63);
    k->ngrow += seg->grow;
    uintptr_t low = __atomic_load_n(&seg_low, __ATOMIC_RELAXED);
    while ((!low || (uintptr_t)mem < low) &&
           !__atomic_compare_exchange_n(&seg_low, &low, (uintptr_t)mem, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    __atomic_store_n(&k->mapped, k->mapped + size, __ATOMIC_RELAXED);
    uintptr_t bit = ((uintptr_t)mem >> SD_SEGMENT_SHIFT) - SEGMENT_MAP_BITS;
    __atomic_fetch_or(&segment_map[bit >> 6], 1ULL << (bit & 63),
                      __ATOMIC_RELEASE);
    return seg;
}

/* Map more of seg at its end, GROW_STEP or else one slot (the kind's lock
 * held): 0; ENOMEM, nothing fits (the limit); EEXIST, another mapping is
 * there, and seg grows no more.  The new slots are free and zero. */
static int segment_grow_locked(struct seg_kind *k, struct segment *seg)
{
    SD_ASSERT(sd_mutex_held(&k->lock) && seg->grow);
    unsigned shift = seg->slot_shift;
    size_t end = (size_t)seg->nslots << shift;
    size_t tries[2] = { GROW_STEP, 1UL << shift };
    int err = ENOMEM;
    for (int t = 0; t < 2; t++) {
        size_t g = tries[t];
        if (g > SD_SEGMENT_SIZE - end)
            g = SD_SEGMENT_SIZE - end;
        if (t && g >= tries[0])
            break;                      /* the same as the first try */
        err = os_map_at((char *)seg - SEG_GUARD + end, g);
        if (!err) {
            unsigned n = (unsigned)(g >> shift);
            __atomic_store_n(&seg->nslots, (uint16_t)(seg->nslots + n), __ATOMIC_RELAXED);
            __atomic_store_n(&k->mapped, k->mapped + g, __ATOMIC_RELAXED);
            if (end + g == SD_SEGMENT_SIZE) {
                seg->grow = 0;
                k->ngrow--;
            }
            seg_nfree_add(k, seg, (int)n);
            return 0;
        }
    }
    if (err == EEXIST) {
        seg->grow = 0;
        k->ngrow--;
    }
    return err;
}

/* A kind's ndirty and nstale, written under its lock and read without it
 * (the purge's and restore's quick checks): relaxed atomic stores.
 * Returns the old value. */
static inline size_t count_add(size_t *c, long d)
{
    size_t old = *c;
    __atomic_store_n(c, old + (size_t)d, __ATOMIC_RELAXED);
    return old;
}

static inline int bit_get(const uint64_t *m, unsigned i)
{
    return (int)(m[i >> 6] >> (i & 63) & 1);
}
static inline void bit_set(uint64_t *m, unsigned i) { m[i >> 6] |= 1ULL << (i & 63); }
static inline void bit_clear(uint64_t *m, unsigned i) { m[i >> 6] &= ~(1ULL << (i & 63)); }

/* The filed bits change outside the kind lock too (a mesh files its
 * host under the slab locks): under filed_lock (a leaf, never held across
 * a system call), read atomically.  Each filed slot is a mapping of its
 * own (its own shared object): filed_slots counts them, for the mapping
 * budget. */
static sd_spin filed_lock = SD_SPIN_INIT;
static size_t filed_slots;
static inline int filed_get(const struct segment *seg, unsigned i)
{
    return (int)(__atomic_load_n(&seg->filed[i >> 6], __ATOMIC_RELAXED) >> (i & 63) & 1);
}
static void filed_set(struct segment *seg, unsigned i, int on)
{
    uint64_t bit = 1ULL << (i & 63);
    sd_spin_lock(&filed_lock);
    if (!(seg->filed[i >> 6] & bit) != !on) {
        if (on)
            __atomic_fetch_or(&seg->filed[i >> 6], bit, __ATOMIC_RELAXED);
        else
            __atomic_fetch_and(&seg->filed[i >> 6], ~bit, __ATOMIC_RELAXED);
        __atomic_store_n(&filed_slots, filed_slots + (on ? 1 : (size_t)-1), __ATOMIC_RELAXED);
    }
    sd_spin_unlock(&filed_lock);
}

static struct segment *segment_of_slab(const struct slab *s)
{
    return segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
}

int segment_slab_filed(const struct slab *s)
{
    const struct segment *seg = segment_of_slab(s);
    return !seg->anon || filed_get(seg, (unsigned)(s - seg->slabs));
}

void segment_slab_set_filed(struct slab *s, int on)
{
    struct segment *seg = segment_of_slab(s);
    if (seg->anon)
        filed_set(seg, (unsigned)(s - seg->slabs), on);
}

int segment_addr_filed(const void *p)
{
    const struct segment *seg = segment_at((uintptr_t)p & ~(SD_SEGMENT_SIZE - 1));
    return !seg->anon ||
           filed_get(seg, (unsigned)(((uintptr_t)p & (SD_SEGMENT_SIZE - 1)) >> seg->slot_shift));
}

size_t segment_filed_slots(void)
{
    return __atomic_load_n(&filed_slots, __ATOMIC_RELAXED);
}

/* A segment gaining its first free slot goes to the head of the list, one
 * losing its last to the tail: allocation looks at the head only. */
static void seg_nfree_add(struct seg_kind *k, struct segment *seg, int n)
{
    unsigned was = seg->nfree;
    seg->nfree = (uint16_t)(seg->nfree + n);
    if (!was && seg->nfree) {
        list_del(&seg->link);
        list_add_head(&k->segs, &seg->link);
    } else if (was && !seg->nfree) {
        list_del(&seg->link);
        list_add_tail(&k->segs, &seg->link);
    }
}

/* A free dirty slot of the kind, or -1 (*segp set to its segment). */
static int dirty_find(struct seg_kind *k, struct segment **segp)
{
    if (!k->ndirty)
        return -1;
    for (struct sd_list *l = k->segs.next; l != &k->segs; l = l->next) {
        struct segment *seg = list_entry(l, struct segment, link);
        if (!seg->nfree)
            break;                      /* the full ones are at the tail */
        if (!seg->ndirty)
            continue;
        for (unsigned w = 0; w < (seg->nslots + 63u) / 64; w++) {
            uint64_t m = seg->dirty[w] & ~seg->used[w];
            if (m) {
                *segp = seg;
                return (int)(w * 64 + (unsigned)__builtin_ctzll(m));
            }
        }
    }
    return -1;
}

static int slot_find(struct segment *seg)
{
    for (unsigned i = seg->hint; i < seg->nslots; i++)
        if (!(seg->used[i >> 6] >> (i & 63) & 1))
            return (int)i;
    for (unsigned i = seg->first; i < seg->hint; i++)
        if (!(seg->used[i >> 6] >> (i & 63) & 1))
            return (int)i;
    return -1;
}

/* A segment of the kind with a free slot when the one looked at (the
 * list's head, or *own) has none (the lock held): one grown at its end
 * ("Address space"; *own, or any), else a new one (then *own); NULL if
 * neither can be mapped. */
static struct segment *segment_room_locked(struct seg_kind *k, unsigned kind,
                                           struct segment **own)
{
    struct segment *seg;
    if (k->ngrow) {
        if (own) {
            seg = *own;
            int err = seg && seg->grow ? segment_grow_locked(k, seg) : EEXIST;
            if (!err)
                return seg;
            if (err == ENOMEM)
                return NULL;
        } else {
            for (struct sd_list *l = k->segs.next; l != &k->segs; l = l->next) {
                seg = list_entry(l, struct segment, link);
                int err = seg->grow ? segment_grow_locked(k, seg) : EEXIST;
                if (!err)
                    return seg;
                if (err == ENOMEM)
                    return NULL;
            }
        }
    }
    seg = segment_new(k, kind);
    if (!seg)
        return NULL;
    list_add_head(&k->segs, &seg->link);
    k->nsegs++;
    if (own)
        *own = seg;
    return seg;
}

struct slab *segment_slab_alloc(unsigned kind, int *dirty, struct segment **own)
{
    size_t populate = 0;
    struct seg_kind *k = &kinds[kind];
    sd_mutex_lock(&k->lock);
    struct segment *seg = NULL;
    int i = dirty_find(k, &seg);
    *dirty = i >= 0;
    if (i >= 0) {
        bit_clear(seg->dirty, (unsigned)i);
        seg->ndirty--;
        count_add(&k->ndirty, -1);
        __atomic_fetch_sub(&dirty_bytes, 1UL << seg->slot_shift, __ATOMIC_RELAXED);
        __atomic_fetch_add(&reused_slots, 1, __ATOMIC_RELAXED);
    } else {
        if (own)                        /* "Small slabs" */
            seg = *own;
        else if (!list_empty(&k->segs))
            seg = list_entry(k->segs.next, struct segment, link);
        if (!seg || !seg->nfree) {
            seg = segment_room_locked(k, kind, own);
            if (!seg) {
                sd_mutex_unlock(&k->lock);
                errno = ENOMEM;
                return NULL;
            }
        }
        i = slot_find(seg);
        SD_ASSERT(i >= 0 && !bit_get(seg->dirty, (unsigned)i));   /* none dirty: dirty_find */
        seg->hint = (uint16_t)(i + 1 < seg->nslots ? i + 1 : seg->first);
        /* A small slab at the start of a run whose other slots are free
         * and clean (not taken, so no alias or host maps them): fault the
         * whole run in. */
        unsigned n = (unsigned)(SMALL_RUN >> seg->slot_shift);
        if (own && !((unsigned)i & (n - 1)) && (unsigned)i + n <= seg->nslots) {
            populate = (size_t)SMALL_RUN;
            for (unsigned j = (unsigned)i + 1; j < (unsigned)i + n; j++)
                if (bit_get(seg->used, j) || bit_get(seg->dirty, j))
                    populate = 0;
        }
    }
    bit_set(seg->used, (unsigned)i);
    seg_nfree_add(k, seg, -1);
    k->used++;
    __atomic_fetch_add(&used_bytes, 1UL << seg->slot_shift, __ATOMIC_RELAXED);
    struct slab *s = &seg->slabs[i];
    /* Not the lock: a stale sd_vacate() may be spinning on it. */
    memset((char *)s + sizeof s->lock, 0, sizeof *s - sizeof s->lock);
    s->fbin = SD_BIN_NONE;          /* no frees through per-CPU stacks yet */
    s->kind = (uint8_t)kind;
    s->start = (char *)seg - SEG_GUARD + ((size_t)i << seg->slot_shift);
    list_init(&s->link);
    sd_mutex_unlock(&k->lock);
    if (populate)
        os_populate(s->start, populate);
    return s;
}

static size_t dirty_cap(void)
{
    if (!heapfile_on)
        return DIRTY_ANON_MAX;
    size_t cap = __atomic_load_n(&used_bytes, __ATOMIC_RELAXED) >> DIRTY_SHIFT;
    if (cap < DIRTY_FLOOR)
        cap = DIRTY_FLOOR;
    return __atomic_load_n(&purger, __ATOMIC_RELAXED) ? 4 * cap : cap;
}

void segment_dirty_purger(void (*wake)(void))
{
    __atomic_store_n(&purger, wake, __ATOMIC_RELEASE);
}

/* The first dirty slot or stale alias after none: wake the purger, whose
 * sleep may be a whole shrink interval. */
static void purger_wake(void)
{
    void (*wake)(void) = __atomic_load_n(&purger, __ATOMIC_ACQUIRE);
    if (wake)
        wake();
}

size_t segment_slab_free(struct slab *s, int zero)
{
    struct segment *seg = segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
    struct seg_kind *k = &kinds[seg->kind];
    size_t bytes = 1UL << seg->slot_shift;
    unsigned i = (unsigned)(s - seg->slabs);
    sd_mutex_lock(&k->lock);
    slab_set_state(s, SLAB_UNUSED);
    s->cache = NULL;
    bit_clear(seg->used, i);
    seg_nfree_add(k, seg, 1);
    if (i < seg->hint)
        seg->hint = (uint16_t)i;
    k->used--;
    __atomic_fetch_sub(&used_bytes, bytes, __ATOMIC_RELAXED);
    size_t dirty = 0;
    if (!zero) {                        /* purged later: "Dirty slots" */
        bit_set(seg->dirty, i);
        seg->ndirty++;
        if (!count_add(&k->ndirty, 1))
            k->dirty_since = os_now_ns();
        dirty = __atomic_add_fetch(&dirty_bytes, bytes, __ATOMIC_RELAXED);
    }
    sd_mutex_unlock(&k->lock);
    if (dirty > dirty_cap())
        segment_purge_dirty(1, 0);
    else if (dirty == bytes && heapfile_on)
        purger_wake();
    return bytes;
}

/* A run of adjacent slots of one segment (purges and restores). */
struct run {
    struct segment *seg;
    unsigned first, n;
};

/* How many slots from i on have their bit set in `want`, and clear in
 * `taken` if given. */
static unsigned run_len(const struct segment *seg, unsigned i, const uint64_t *want,
                        const uint64_t *taken)
{
    unsigned n = 0;
    while (i + n < seg->nslots && bit_get(want, i + n) && !(taken && bit_get(taken, i + n)))
        n++;
    return n;
}

void segment_slab_free_alias(struct slab *s)
{
    struct segment *seg = segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
    struct seg_kind *k = &kinds[seg->kind];
    unsigned i = (unsigned)(s - seg->slabs);
    sd_mutex_lock(&k->lock);
    slab_set_state(s, SLAB_UNUSED);
    s->cache = NULL;
    bit_set(seg->stale, i);             /* the used bit stays: taken */
    seg->nstale++;
    count_add(&k->nstale, 1);
    k->used--;
    __atomic_fetch_sub(&used_bytes, 1UL << seg->slot_shift, __ATOMIC_RELAXED);
    size_t stale = __atomic_add_fetch(&stale_slots, 1, __ATOMIC_RELAXED);
    sd_mutex_unlock(&k->lock);
    if (stale == 1)
        purger_wake();
}

size_t segment_stale_aliases(void)
{
    return __atomic_load_n(&stale_slots, __ATOMIC_RELAXED);
}

size_t segment_restore_aliases(uint64_t deadline)
{
    size_t total = 0;
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++) {
        struct seg_kind *k = &kinds[kind];
        if (!__atomic_load_n(&k->nstale, __ATOMIC_RELAXED))
            continue;
        struct run runs[PURGE_RUNS];
        for (;;) {
            unsigned nr = 0;
            sd_mutex_lock(&k->lock);
            for (struct sd_list *l = k->segs.next; l != &k->segs && nr < PURGE_RUNS; l = l->next) {
                struct segment *seg = list_entry(l, struct segment, link);
                for (unsigned i = seg->first; seg->nstale && i < seg->nslots && nr < PURGE_RUNS; i++) {
                    unsigned n = run_len(seg, i, seg->stale, NULL);
                    if (!n)
                        continue;
                    for (unsigned j = i; j < i + n; j++) {
                        bit_clear(seg->stale, j);       /* still used: taken */
                        bit_set(seg->dirty, j);         /* (for a fork child) */
                    }
                    seg->nstale = (uint16_t)(seg->nstale - n);
                    count_add(&k->nstale, -(long)n);
                    __atomic_fetch_sub(&stale_slots, n, __ATOMIC_RELAXED);
                    runs[nr++] = (struct run){ seg, i, n };
                    i += n;
                }
            }
            sd_mutex_unlock(&k->lock);
            if (!nr)
                break;
            unsigned ok = 0;
            for (; ok < nr; ok++) {
                if (deadline && ok && os_now_ns() > deadline)
                    break;                      /* out of time: later */
                struct run *r = &runs[ok];
                char *p = (char *)r->seg - SEG_GUARD + ((size_t)r->first << r->seg->slot_shift);
                size_t b = (size_t)r->n << r->seg->slot_shift;
                if (heapfile_unalias_anon(p, b))
                    break;                      /* out of mappings: later */
                for (unsigned i = r->first; i < r->first + r->n; i++)
                    filed_set(r->seg, i, 0);    /* (filed by a fork child's copy) */
            }
            sd_mutex_lock(&k->lock);
            for (unsigned j = 0; j < nr; j++) {
                struct segment *seg = runs[j].seg;
                for (unsigned i = runs[j].first; i < runs[j].first + runs[j].n; i++) {
                    bit_clear(seg->dirty, i);
                    if (j < ok)
                        bit_clear(seg->used, i);        /* free and zero */
                    else
                        bit_set(seg->stale, i);         /* stale again */
                }
                if (j < ok) {
                    seg_nfree_add(k, seg, (int)runs[j].n);
                    if (runs[j].first < seg->hint)
                        seg->hint = (uint16_t)runs[j].first;
                    total += runs[j].n;
                } else {
                    seg->nstale = (uint16_t)(seg->nstale + runs[j].n);
                    count_add(&k->nstale, (long)runs[j].n);
                    __atomic_fetch_add(&stale_slots, runs[j].n, __ATOMIC_RELAXED);
                }
            }
            sd_mutex_unlock(&k->lock);
            if (ok < nr)
                break;
        }
    }
    return total;
}

/* ---------------------------------------------------------------- */
/* Dirty slots: the purge                                            */

/* Take up to PURGE_RUNS runs of adjacent free dirty slots of kind k (the
 * lock held): used bits set, so nothing allocates them while they are
 * purged; they leave the dirty bytes now (a fork child puts back the
 * ones it finds taken). */
static unsigned runs_take(struct seg_kind *k, struct run *runs)
{
    unsigned nr = 0;
    for (struct sd_list *l = k->segs.next; l != &k->segs && nr < PURGE_RUNS;) {
        struct segment *seg = list_entry(l, struct segment, link);
        l = l->next;                    /* seg may move to the tail */
        if (!seg->nfree)
            break;
        for (unsigned i = seg->first; seg->ndirty && i < seg->nslots && nr < PURGE_RUNS; i++) {
            unsigned n = run_len(seg, i, seg->dirty, seg->used);
            if (!n)
                continue;
            for (unsigned j = i; j < i + n; j++)
                bit_set(seg->used, j);
            seg->ndirty = (uint16_t)(seg->ndirty - n);
            count_add(&k->ndirty, -(long)n);
            seg_nfree_add(k, seg, -(int)n);
            __atomic_fetch_sub(&dirty_bytes, (size_t)n << seg->slot_shift, __ATOMIC_RELAXED);
            runs[nr++] = (struct run){ seg, i, n };
            i += n;
        }
    }
    if (!k->ndirty)
        k->dirty_since = 0;
    return nr;
}

static char *slot_addr(const struct segment *seg, unsigned i)
{
    return (char *)seg - SEG_GUARD + ((size_t)i << seg->slot_shift);
}

/* Ranges of anonymous memory for one os_purge_batch. */
struct anon_batch {
    struct os_range r[OS_BATCH_MAX];
    unsigned n;
};

/* Purge slots [first, first+n) of an anonymous segment, taken: the
 * unfiled ones join the batch, each run of filed ones goes back to
 * anonymous memory (heapfile_unfile: its shared pages freed, then an
 * mmap; still filed, its pages freed, if the mmap fails). */
static void purge_anon_run(struct segment *seg, unsigned first, unsigned n,
                           struct anon_batch *ab)
{
    for (unsigned i = first, end = first + n; i < end;) {
        int filed = filed_get(seg, i);
        unsigned j = i + 1;
        while (j < end && filed_get(seg, j) == filed)
            j++;
        size_t bytes = (size_t)(j - i) << seg->slot_shift;
        if (filed) {
            if (!heapfile_unfile(slot_addr(seg, i), bytes))
                for (unsigned k = i; k < j; k++)
                    filed_set(seg, k, 0);
        } else {
            if (ab->n == OS_BATCH_MAX) {
                os_purge_batch(ab->r, ab->n);
                ab->n = 0;
            }
            ab->r[ab->n++] = (struct os_range){ slot_addr(seg, i), bytes };
        }
        i = j;
    }
}

size_t segment_purge_dirty(int all, uint64_t deadline)
{
    uint64_t now = all ? 0 : os_now_ns(), decay = (uint64_t)sd_opt.decay_ms * 1000000ull;
    size_t total = 0;
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++) {
        struct seg_kind *k = &kinds[kind];
        if (!__atomic_load_n(&k->ndirty, __ATOMIC_RELAXED))
            continue;
        struct run runs[PURGE_RUNS];
        sd_mutex_lock(&k->lock);
        if (!all && (!k->dirty_since || now - k->dirty_since < decay)) {
            sd_mutex_unlock(&k->lock);
            continue;
        }
        for (;;) {
            unsigned nr = runs_take(k, runs);
            sd_mutex_unlock(&k->lock);
            if (!nr)
                break;
            size_t bytes = 0, slots = 0;
            struct os_range ranges[PURGE_RUNS];
            struct anon_batch ab = { .n = 0 };
            unsigned nrg = 0;
            for (unsigned r = 0; r < nr; r++) {
                struct segment *seg = runs[r].seg;
                bytes += (size_t)runs[r].n << seg->slot_shift;
                slots += runs[r].n;
                if (seg->anon)
                    purge_anon_run(seg, runs[r].first, runs[r].n, &ab);
                else
                    ranges[nrg++] = (struct os_range){ slot_addr(seg, runs[r].first),
                                                       (size_t)runs[r].n << seg->slot_shift };
            }
            heapfile_purge_batch(ranges, nrg);
            os_purge_batch(ab.r, ab.n);
            __atomic_fetch_add(&purged_runs, nr, __ATOMIC_RELAXED);
            __atomic_fetch_add(&purged_slots, slots, __ATOMIC_RELAXED);
            total += bytes;
            sd_mutex_lock(&k->lock);
            for (unsigned r = 0; r < nr; r++) {
                struct segment *seg = runs[r].seg;
                for (unsigned i = runs[r].first; i < runs[r].first + runs[r].n; i++) {
                    bit_clear(seg->used, i);
                    bit_clear(seg->dirty, i);
                }
                seg_nfree_add(k, seg, (int)runs[r].n);
                if (runs[r].first < seg->hint)
                    seg->hint = (uint16_t)runs[r].first;
            }
            if (deadline && os_now_ns() > deadline) {
                sd_mutex_unlock(&k->lock);
                return total;
            }
        }
    }
    return total;
}

size_t segment_dirty_bytes(void)
{
    return __atomic_load_n(&dirty_bytes, __ATOMIC_RELAXED);
}

void segment_dirty_stats(struct segment_dirty_stats *st)
{
    st->bytes = __atomic_load_n(&dirty_bytes, __ATOMIC_RELAXED);
    st->cap = dirty_cap();
    st->purged_runs = __atomic_load_n(&purged_runs, __ATOMIC_RELAXED);
    st->purged_slots = __atomic_load_n(&purged_slots, __ATOMIC_RELAXED);
    st->reused_slots = __atomic_load_n(&reused_slots, __ATOMIC_RELAXED);
}

void segment_for_each_slab(void (*fn)(struct slab *s, void *arg), void *arg,
                           int locked)
{
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++) {
        struct seg_kind *k = &kinds[kind];
        if (!locked)
            sd_mutex_lock(&k->lock);
        for (struct sd_list *l = k->segs.next; l != &k->segs; l = l->next) {
            struct segment *seg = list_entry(l, struct segment, link);
            for (unsigned i = seg->first; i < seg->nslots; i++)
                if (seg->used[i >> 6] >> (i & 63) & 1)
                    fn(&seg->slabs[i], arg);
        }
        if (!locked)
            sd_mutex_unlock(&k->lock);
    }
}

void segment_guard_all(int locked)
{
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++) {
        struct seg_kind *k = &kinds[kind];
        if (!locked)
            sd_mutex_lock(&k->lock);
        for (struct sd_list *l = k->segs.next; l != &k->segs; l = l->next)
            os_guard((char *)list_entry(l, struct segment, link) - SEG_GUARD, SEG_GUARD);
        if (!locked)
            sd_mutex_unlock(&k->lock);
    }
}

void segment_usage(size_t *mapped, size_t *slots_used)
{
    size_t m = 0, u = 0;
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++) {
        m += __atomic_load_n(&kinds[kind].mapped, __ATOMIC_RELAXED);
        u += __atomic_load_n(&kinds[kind].used, __ATOMIC_RELAXED);
    }
    if (mapped) *mapped = m;
    if (slots_used) *slots_used = u;
}

/* Slot i of a meshing segment may map memory shared with the parent in a
 * fork child: a filed slot, a stale alias, a slot taken by a purge or
 * restore that the child will not finish (mesh aliases, MESHED, are
 * re-created on their hosts by the meshing layer). */
static int child_filed(const struct segment *seg, unsigned i)
{
    return filed_get(seg, i) || bit_get(seg->stale, i) ||
           (bit_get(seg->used, i) && bit_get(seg->dirty, i));
}

/* Shared at fork: what child_filed says, and the aliases. */
static int fork_shared(const struct segment *seg, unsigned i)
{
    return child_filed(seg, i) || seg->slabs[i].state == SLAB_MESHED;
}

/* fn over each run of adjacent slots of the meshing segments for which
 * want() holds; stops at the first error.  Kind locks held.  *runs (if
 * not NULL) counts the runs. */
static int for_each_run(int (*want)(const struct segment *, unsigned),
                        int (*fn)(void *p, size_t size), size_t *runs)
{
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++) {
        struct seg_kind *k = &kinds[kind];
        for (struct sd_list *l = k->segs.next; l != &k->segs; l = l->next) {
            struct segment *seg = list_entry(l, struct segment, link);
            if (!seg->anon)
                continue;
            for (unsigned i = seg->first; i < seg->nslots;) {
                if (!want(seg, i)) {
                    i++;
                    continue;
                }
                unsigned j = i + 1;
                while (j < seg->nslots && want(seg, j))
                    j++;
                int err = fn(slot_addr(seg, i), (size_t)(j - i) << seg->slot_shift);
                if (err)
                    return err;
                if (runs)
                    ++*runs;
                i = j;
            }
        }
    }
    return 0;
}

static int protect_ro(void *p, size_t size) { return os_protect(p, size, 0); }
static int protect_rw(void *p, size_t size) { return os_protect(p, size, 1); }

int segment_protect_shared(int writable, size_t *runs)
{
    return for_each_run(fork_shared, writable ? protect_rw : protect_ro, runs);
}

static int count_only(void *p, size_t size)
{
    (void)p, (void)size;
    return 0;
}

void segment_count_shared(size_t *runs)
{
    for_each_run(fork_shared, count_only, runs);
}

static int refile_run(void *p, size_t size)
{
    int err = heapfile_child_refile(p, size);
    if (!err) {
        struct segment *seg = segment_at((uintptr_t)p & ~(SD_SEGMENT_SIZE - 1));
        unsigned i = (unsigned)(((uintptr_t)p & (SD_SEGMENT_SIZE - 1)) >> seg->slot_shift);
        for (unsigned end = i + (unsigned)(size >> seg->slot_shift); i < end; i++)
            filed_set(seg, i, 1);
    }
    return err;
}

int segment_child_refile(void)
{
    filed_lock = (sd_spin)SD_SPIN_INIT;     /* a purge may have held it */
    return for_each_run(child_filed, refile_run, NULL);
}

static int register_segment(void *p, size_t size)
{
    heapfile_register(p, size);
    return 0;
}

static int whole(const struct segment *seg, unsigned i)
{
    (void)seg, (void)i;
    return 1;
}

void segment_register_all(void)
{
    for_each_run(whole, register_segment, NULL);
}

void segment_lock_all(void)
{
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++)
        sd_mutex_lock(&kinds[kind].lock);
}

/* A purge or a restore in another thread may have held slots (used and
 * dirty) when the fork came: in the child that thread is gone, so they
 * are free and dirty (maybe resident; the child copied them into memory
 * of its own, core/forkcopy.c, so no alias mapping is left either). */
static void child_return_taken(struct seg_kind *k)
{
    for (struct sd_list *l = k->segs.next; l != &k->segs;) {
        struct segment *seg = list_entry(l, struct segment, link);
        l = l->next;
        for (unsigned w = 0; w < (seg->nslots + 63u) / 64; w++) {
            uint64_t m = seg->used[w] & seg->dirty[w];
            if (!m)
                continue;
            unsigned n = (unsigned)__builtin_popcountll(m);
            seg->used[w] &= ~m;
            seg->ndirty = (uint16_t)(seg->ndirty + n);
            if (!k->ndirty)
                k->dirty_since = os_now_ns();
            count_add(&k->ndirty, (long)n);
            __atomic_fetch_add(&dirty_bytes, (size_t)n << seg->slot_shift, __ATOMIC_RELAXED);
            seg_nfree_add(k, seg, (int)n);
        }
    }
}

void segment_unlock_all(int child)
{
    for (unsigned kind = SEG_NKINDS; kind-- > 0;) {
        if (child) {
            child_return_taken(&kinds[kind]);
            sd_mutex_reset_child(&kinds[kind].lock);
        } else {
            sd_mutex_unlock(&kinds[kind].lock);
        }
    }
}
