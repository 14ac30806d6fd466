/*
 * core/segment.h - segments, slots and pointer -> slab lookup.
 *
 * A segment is 4 MiB of address space of one kind; each kind cuts it into
 * equal slots, one slab per slot.  Segments are never unmapped (a slab
 * descriptor stays readable for the life of the process, so a stale
 * pointer handed to sd_vacate() or free() is diagnosed, not a crash); the
 * memory of free slots is purged back to the OS.  Under an address-space
 * limit a segment maps only its first slots and grows at its end
 * (segment.c, "Address space"): the rest of its 4 MiB may hold other
 * mappings, which segment_slab_of does not take for slabs.
 */
#ifndef SD_CORE_SEGMENT_H
#define SD_CORE_SEGMENT_H

#include "types.h"

/* The first three kinds serve every cache (sizeclass_geometry picks among
 * them); SEG_KIND_4K and SEG_KIND_8K serve only malloc classes while
 * meshing is on: small slabs are what two sparse slabs can mesh at
 * (classes/mesh.c, mesh_geometry). */
enum { SEG_KIND_16K, SEG_KIND_64K, SEG_KIND_256K, SEG_KIND_4K, SEG_KIND_8K, SEG_NKINDS };

static inline unsigned seg_kind_shift(unsigned kind)
{
    return kind == SEG_KIND_4K ? 12 : kind == SEG_KIND_8K ? 13 : 14 + 2 * kind;
}
static inline size_t seg_kind_bytes(unsigned kind) { return 1UL << seg_kind_shift(kind); }

/* A slot of `kind` for a new slab: descriptor zeroed except start/kind;
 * memory zero, unless *dirty is set: then it is a released slab's, as it
 * was left (segment.c, "Dirty slots").  `own` (small slabs of one malloc
 * class, or NULL): the class's own segment, which a fresh slot comes from
 * (segment.c, "Small slabs").  NULL when out of memory (errno ENOMEM).
 * Takes the kind's lock; call with no other allocator lock held. */
struct slab *segment_slab_alloc(unsigned kind, int *dirty, struct segment **own);
/* Give the slab's slot back, its memory dirty until segment_purge_dirty
 * (at once past the dirty bound: segment.c, "Dirty slots"); `zero`: the
 * memory already reads back zero, nothing to purge.  The slab must be off every list
 * and unlocked; call with no other allocator lock held.  Returns the slot's
 * bytes. */
size_t segment_slab_free(struct slab *s, int zero);
/* Give a mesh alias's slot back without mapping it onto its own pages
 * yet (a stale alias: segment.c); segment_restore_aliases() does, later,
 * and returns how many it restored: all of them, or those it restored
 * before `deadline` (os_now_ns; 0: none) passed.  No allocator lock held. */
void segment_slab_free_alias(struct slab *s);
size_t segment_restore_aliases(uint64_t deadline);
size_t segment_stale_aliases(void);     /* how many wait (relaxed) */
/* Purge dirty slots in runs of adjacent ones: all of them, or (all 0) the
 * kinds that have had some for the decay; a batch of runs at a time until
 * `deadline` (os_now_ns; 0: none) passes.  Returns the bytes purged.  Call
 * with no allocator lock held. */
size_t segment_purge_dirty(int all, uint64_t deadline);
/* A thread purges the dirty slots and restores the stale aliases every few
 * ms while there are any, and `wake` (an eventfd write, nothing that
 * allocates or locks) wakes it when the first appears; NULL: no thread any
 * more.  The program's threads leave more dirty slots to such a thread
 * (segment.c). */
void segment_dirty_purger(void (*wake)(void));
/* Bytes of free dirty slots (a relaxed read). */
size_t segment_dirty_bytes(void);
struct segment_dirty_stats {
    size_t bytes, cap;                  /* dirty now, and the bound */
    size_t purged_runs, purged_slots;   /* since start: calls, slots */
    size_t reused_slots;                /* since start: taken while dirty */
};
void segment_dirty_stats(struct segment_dirty_stats *st);

/* The segment map: a bit per 4 MiB of the upper half of the user address
 * space, [2^46, 2^47), where every segment is placed (segment.c, "The
 * segment map"): 2 MiB, which an address-space limit counts. */
#define SEGMENT_MAP_LO_SHIFT (SD_VA_BITS - 1)
#define SEGMENT_MAP_BITS (1UL << (SEGMENT_MAP_LO_SHIFT - SD_SEGMENT_SHIFT))
#define SEGMENT_MAP_WORDS (SEGMENT_MAP_BITS / 64)
extern SD_HIDDEN uint64_t segment_map[SEGMENT_MAP_WORDS];

/* Is the 4 MiB holding address a one of our segments?  from0 is where
 * a map of the whole space would start (the map's address less its
 * size): word a >> 28 of it, as with such a map, and the offset folds
 * into the address's lea; the bound check is a compare more (fused with
 * its jump). */
static inline int segment_map_test(uintptr_t a)
{
    if (unlikely(a >> SEGMENT_MAP_LO_SHIFT != 1))
        return 0;
    const uint64_t *from0 = (const uint64_t *)((uintptr_t)segment_map - sizeof segment_map);
    uintptr_t i = a >> SD_SEGMENT_SHIFT;
    return (__atomic_load_n(&from0[i >> 6], __ATOMIC_RELAXED) >> (i & 63) & 1) != 0;
}

/* The first page of every segment is a guard page (PROT_NONE) and the
 * header follows it: a linear overflow out of the last slab of the
 * segment (or any mapping) below faults there before it reaches the slab
 * descriptors.  Header slots have room to spare, so no slab is lost. */
#define SEG_GUARD 4096UL                /* SD_PAGE_SIZE */

static inline struct segment *segment_at(uintptr_t base)
{
    return (struct segment *)(base + SEG_GUARD);
}

/* Return maps (core/slab.h, "Return maps"): after the slab descriptors,
 * the header holds a bitmap per slot, room for one bit per object of the
 * smallest stride (16 bytes), at most SEG_RMAP_MAX_OBJECTS. */
#define SEG_RMAP_MAX_OBJECTS 4096u
static inline unsigned segment_rmap_words(unsigned slot_shift)
{
    unsigned objs = (1u << slot_shift) / 16;
    return (objs < SEG_RMAP_MAX_OBJECTS ? objs : SEG_RMAP_MAX_OBJECTS) / 64;
}

static inline uint64_t *segment_rmap(const struct slab *s)
{
    struct segment *seg = segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
    unsigned shift = seg->slot_shift, cap = (unsigned)(SD_SEGMENT_SIZE >> shift);
    size_t slot = (size_t)(s - seg->slabs);
    return (uint64_t *)&seg->slabs[cap] + slot * segment_rmap_words(shift);
}

/* Meshing's segments (segment.c, "Anonymous segments"): 1 if the slab's
 * memory is a shared object of its own (filed: it can host a mesh), 0 if
 * it is private anonymous memory; set_filed records that a mesh filed it
 * (heapfile_file).  segment_filed_slots: how many such slots exist (a
 * mapping each, for the mapping budget). */
int segment_slab_filed(const struct slab *s);
void segment_slab_set_filed(struct slab *s, int on);
size_t segment_filed_slots(void);
/* segment_slab_filed of the slot holding p (an address in a segment). */
int segment_addr_filed(const void *p);
/* Fork (core/forkcopy.c; kind locks held).  segment_protect_shared makes
 * every slot that may map shared memory (filed slots, mesh aliases, stale
 * aliases, slots a purge or restore has taken) read-only (0) or writable
 * again (1), and nothing else; *runs (if not NULL) counts the ranges.  segment_child_refile, in the child
 * (single-threaded), gives each of those but the aliases an object of the
 * child's own with the same bytes (then filed); the meshing layer re-creates
 * the aliases.  segment_register_all registers every meshing segment with
 * the userfaultfd barrier.  0 or errno. */
int segment_protect_shared(int writable, size_t *runs);
void segment_count_shared(size_t *runs);
int segment_child_refile(void);
void segment_register_all(void);

/* Put the guard pages of every segment back (after the meshing arena was
 * remapped or unprotected whole at fork); `locked`: the caller holds the
 * kind locks. */
void segment_guard_all(int locked);

/* The segment whose 4 MiB hold p, or NULL if p is not in one of ours.  A
 * bit set (release) before any pointer into the segment is handed out.
 * Under an address-space limit p may be past the slots mapped, in another
 * mapping (segment.c, "Address space"). */
static inline struct segment *segment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (!segment_map_test(a))
        return NULL;
    return segment_at(a & ~(SD_SEGMENT_SIZE - 1));
}

/* The slab descriptor of the slot holding p, in any state, or NULL if p is
 * not in one of our segments' mapped slots (past them, under an
 * address-space limit, another mapping may hold p: a huge block, say).
 * The header slots have descriptors too, always UNUSED (zero): callers
 * check the state.  nslots sits in the cache line of slot_shift. */
static inline struct slab *segment_slab_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (!segment_map_test(a))
        return NULL;
    uintptr_t base = a & ~(SD_SEGMENT_SIZE - 1);
    struct segment *seg = segment_at(base);
    uintptr_t slot = (a - base) >> seg->slot_shift;
    if (unlikely(slot >= __atomic_load_n(&seg->nslots, __ATOMIC_RELAXED)))
        return NULL;
    return &seg->slabs[slot];
}

/* Iterate over every slab descriptor in use (for fork, stats, validation).
 * Takes each kind's lock around its walk unless `locked` says the caller
 * holds them (segment_lock_all). */
void segment_for_each_slab(void (*fn)(struct slab *s, void *arg), void *arg,
                           int locked);
/* Bytes of address space mapped for segments (their mapped slots), and
 * slots in use. */
void segment_usage(size_t *mapped, size_t *slots_used);

/* Fork support: take/release every kind lock. */
void segment_lock_all(void);
void segment_unlock_all(int child);

#endif
