/*
 * core/segment.c - segments of equal slots, and the segment map.
 *
 * Locking: one mutex per kind guards its segment list and every segment's
 * slot bitmap.  It is a leaf lock: taken with no other allocator lock held
 * (slabs are created and released outside cache and slab locks), so the
 * fork handler may take it first.
 */
#include "segment.h"

#include <errno.h>
#include <string.h>

#include "heapfile.h"
#include "os.h"

/* A bit per 4 MiB of the 47-bit address space: 4 MiB of .bss, of which
 * only the pages covering our segments are ever touched. */
uint64_t segment_map[SEGMENT_MAP_WORDS];

struct seg_kind {
    sd_mutex lock;
    struct sd_list segs;        /* segments with free slots first */
    size_t nsegs;
    size_t used;                /* slots holding slabs */
};

static struct seg_kind kinds[SEG_NKINDS] = {
    { SD_MUTEX_INIT, { &kinds[0].segs, &kinds[0].segs }, 0, 0 },
    { SD_MUTEX_INIT, { &kinds[1].segs, &kinds[1].segs }, 0, 0 },
    { SD_MUTEX_INIT, { &kinds[2].segs, &kinds[2].segs }, 0, 0 },
    { SD_MUTEX_INIT, { &kinds[3].segs, &kinds[3].segs }, 0, 0 },
    { SD_MUTEX_INIT, { &kinds[4].segs, &kinds[4].segs }, 0, 0 },
};

static struct segment *segment_new(unsigned kind)
{
    void *mem;
    if (heapfile_segment_map(&mem) &&      /* meshing: remappable memory */
        os_map_aligned(SD_SEGMENT_SIZE, SD_SEGMENT_SIZE, &mem))
        return NULL;
    if (os_guard(mem, SEG_GUARD))
        return NULL;                    /* out of mappings: ENOMEM */
    struct segment *seg = segment_at((uintptr_t)mem);
    unsigned shift = seg_kind_shift(kind);
    unsigned nslots = (unsigned)(SD_SEGMENT_SIZE >> shift);
    size_t hdr = SEG_GUARD + sizeof(struct segment) + nslots * sizeof(struct slab);
    seg->magic = SEGMENT_MAGIC;
    seg->kind = (uint8_t)kind;
    seg->slot_shift = (uint8_t)shift;
    seg->nslots = (uint16_t)nslots;
    seg->first = (uint16_t)((hdr + (1UL << shift) - 1) >> shift);
    seg->nfree = (uint16_t)(nslots - seg->first);
    seg->hint = seg->first;
    for (unsigned i = 0; i < seg->first; i++)
        seg->used[i >> 6] |= 1ULL << (i & 63);
    uintptr_t bit = (uintptr_t)mem >> SD_SEGMENT_SHIFT;
    __atomic_fetch_or(&segment_map[bit >> 6], 1ULL << (bit & 63),
                      __ATOMIC_RELEASE);
    return seg;
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

struct slab *segment_slab_alloc(unsigned kind)
{
    struct seg_kind *k = &kinds[kind];
    sd_mutex_lock(&k->lock);
    struct segment *seg = NULL;
    if (!list_empty(&k->segs)) {
        seg = list_entry(k->segs.next, struct segment, link);
        if (!seg->nfree)
            seg = NULL;
    }
    if (!seg) {
        seg = segment_new(kind);
        if (!seg) {
            sd_mutex_unlock(&k->lock);
            errno = ENOMEM;
            return NULL;
        }
        list_add_head(&k->segs, &seg->link);
        k->nsegs++;
    }
    int i = slot_find(seg);
    SD_ASSERT(i >= 0);
    seg->used[i >> 6] |= 1ULL << (i & 63);
    seg->hint = (uint16_t)(i + 1 < seg->nslots ? i + 1 : seg->first);
    if (--seg->nfree == 0) {
        list_del(&seg->link);
        list_add_tail(&k->segs, &seg->link);
    }
    k->used++;
    struct slab *s = &seg->slabs[i];
    /* Not the lock: a stale sd_vacate() may be spinning on it. */
    memset((char *)s + sizeof s->lock, 0, sizeof *s - sizeof s->lock);
    s->fbin = SD_BIN_NONE;          /* no frees through per-CPU stacks yet */
    s->kind = (uint8_t)kind;
    s->start = (char *)seg - SEG_GUARD + ((size_t)i << seg->slot_shift);
    list_init(&s->link);
    sd_mutex_unlock(&k->lock);
    return s;
}

size_t segment_slab_free(struct slab *s)
{
    struct segment *seg = segment_at((uintptr_t)s & ~(SD_SEGMENT_SIZE - 1));
    struct seg_kind *k = &kinds[seg->kind];
    size_t bytes = 1UL << seg->slot_shift;
    heapfile_purge(s->start, bytes);
    unsigned i = (unsigned)(s - seg->slabs);
    sd_mutex_lock(&k->lock);
    slab_set_state(s, SLAB_UNUSED);
    s->cache = NULL;
    seg->used[i >> 6] &= ~(1ULL << (i & 63));
    if (seg->nfree++ == 0) {
        list_del(&seg->link);
        list_add_head(&k->segs, &seg->link);
    }
    if (i < seg->hint)
        seg->hint = (uint16_t)i;
    k->used--;
    sd_mutex_unlock(&k->lock);
    return bytes;
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
        m += __atomic_load_n(&kinds[kind].nsegs, __ATOMIC_RELAXED) * SD_SEGMENT_SIZE;
        u += __atomic_load_n(&kinds[kind].used, __ATOMIC_RELAXED);
    }
    if (mapped) *mapped = m;
    if (slots_used) *slots_used = u;
}

void segment_lock_all(void)
{
    for (unsigned kind = 0; kind < SEG_NKINDS; kind++)
        sd_mutex_lock(&kinds[kind].lock);
}

void segment_unlock_all(int child)
{
    for (unsigned kind = SEG_NKINDS; kind-- > 0;) {
        if (child)
            sd_mutex_reset_child(&kinds[kind].lock);
        else
            sd_mutex_unlock(&kinds[kind].lock);
    }
}
