/*
 * classes/debug.c - SLABDEFRAG_DEBUG: sanity checks (F), red zones (Z),
 * poisoning (P), call-site tracking (U) and tracing (T) for the caches it
 * names, and their reports.  Layout: classes/debug.h; the backtraces are
 * classes/backtrace.c's.
 *
 * Every report starts with one line
 *   slabdefrag: <error> in cache <name>: object <addr> (offset <n> in slab <addr>)
 * then details, the backtrace of the current call and, with U, those of
 * the object's allocation and last free.  Errors that would corrupt the
 * heap (double free, invalid free, corrupt freelist) abort; damage that is
 * repaired (red zone, poison) is reported and the program goes on, as SLUB.
 *
 * Backtraces (reports, U tracks) are only taken once the library
 * constructor has run (the first mallocs come before libc is up).
 */
#define _GNU_SOURCE
#include "debug.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "backtrace.h"
#include "fmt.h"
#include "options.h"
#include "os.h"
#include "segment.h"
#include "sizeclass.h"
#include "slab.h"
#include "tcache.h"

#define RZ_BYTES     16u          /* minimum red zone */
#define RZ_BYTE      0xcc
#define POISON_FREE  0x6b
#define POISON_END   0xa5
#define DEBUG_LIVE   0x11ce11ce11ce11ceULL
#define DEBUG_FREE   0xf4eef4eef4eef4eeULL
#define TRACK_FRAMES 8

struct debug_track {
    void    *frames[TRACK_FRAMES];  /* return addresses, innermost first */
    uint32_t tid;                   /* thread that allocated / freed */
    uint32_t nframes;
    uint64_t when_ns;               /* os_now_ns() */
};


/* ---------------------------------------------------------------- */
/* Geometry                                                          */

static uint32_t round8(uint32_t v) { return (v + 7u) & ~7u; }

void debug_geometry(struct sd_cache *c)
{
    uint32_t meta = round8(c->object_size) + (c->debug & SD_DEBUG_Z ? RZ_BYTES : 0);
    uint32_t end = meta + 24 +
        (c->debug & SD_DEBUG_U ? 2 * (uint32_t)sizeof(struct debug_track) : 0);
    uint32_t align = c->align;
    if (c->id < SD_NCLASSES) {
        /* memalign() picks a class by the alignment its size implies. */
        uint32_t low = c->size & (0u - c->size);
        if (low > 4096)
            low = 4096;
        if (low > align)
            align = low;
    }
    if (end < c->size)
        end = c->size;
    c->size = (end + align - 1) & ~(align - 1);
    c->fp_off = (uint16_t)meta;
    unsigned kind;
    sizeclass_geometry(c->size, &kind, &c->capacity);
    c->kind = (uint8_t)kind;
}

static uint64_t *state_word(const struct sd_cache *c, void *p)
{
    return (uint64_t *)((char *)p + c->fp_off + 16);
}

static struct debug_track *tracks(const struct sd_cache *c, void *p)
{
    return (struct debug_track *)((char *)p + c->fp_off + 24);
}

/* ---------------------------------------------------------------- */
/* Call-site tracks (U)                                              */

static void track_record(struct debug_track *t)
{
    t->tid = sd_self_tid();
    t->when_ns = os_now_ns();
    t->nframes = (uint32_t)backtrace_record(t->frames, TRACK_FRAMES);
}

static void track_print(const char *what, const struct debug_track *t)
{
    if (!t->when_ns) {
        sd_dprintf(2, "  %s: none recorded\n", what);
        return;
    }
    uint64_t now = os_now_ns();
    sd_dprintf(2, "  %s by thread %u, %lu ms ago:\n", what, t->tid,
               (unsigned long)((now - t->when_ns) / 1000000));
    if (!t->nframes)
        sd_dprintf(2, "    (no call site: recorded before start-up)\n");
    for (uint32_t i = 0; i < t->nframes && i < TRACK_FRAMES; i++)
        backtrace_print_frame(2, "    ", (int)i, t->frames[i]);
}

static void fatal_hook(void)
{
    sd_dprintf(2, "  backtrace:\n");
    backtrace_print(2, "    ");
}

__attribute__((constructor(102))) static void debug_init(void)
{
    options_init();
    if (sd_opt.debug)
        sd_fatal_hook = fatal_hook;
}

/* ---------------------------------------------------------------- */
/* Reports                                                           */

static void report_head(const char *error, const struct sd_cache *c,
                        const struct slab *s, const void *obj)
{
    sd_warn("%s in cache %s: object %p (offset %zu in slab %p)", error, c->name,
            obj, (size_t)((const char *)obj - s->start), (void *)s->start);
}

static void dump_bytes(const unsigned char *b, size_t n, size_t base)
{
    for (size_t i = 0; i < n; i += 16) {
        char line[80];
        size_t len = sd_fmt(line, sizeof line, "    +%04zx:", base + i);
        for (size_t j = i; j < n && j < i + 16; j++)
            len += sd_fmt(line + len, sizeof line - len, " %02x", b[j]);
        sd_dprintf(2, "%s\n", line);
    }
}

struct debug_snapshot {
    struct debug_track alloc, free;
    int have_tracks;
};

static void snapshot(const struct sd_cache *c, void *obj, struct debug_snapshot *sn)
{
    sn->have_tracks = !!(c->debug & SD_DEBUG_U);
    if (sn->have_tracks) {
        memcpy(&sn->alloc, &tracks(c, obj)[0], sizeof sn->alloc);
        memcpy(&sn->free, &tracks(c, obj)[1], sizeof sn->free);
    }
}

static void report_tail(const struct debug_snapshot *sn)
{
    sd_dprintf(2, "  backtrace:\n");
    backtrace_print(2, "    ");
    if (sn && sn->have_tracks) {
        track_print("allocated", &sn->alloc);
        track_print("last freed", &sn->free);
    }
}

static void __attribute__((noreturn)) report_abort(void)
{
    os_abort();
}

/* ---------------------------------------------------------------- */
/* Checks (object owned by the caller or slab locked)                */

/* First red-zone byte that is not RZ_BYTE, or -1. */
static int redzone_bad(const struct sd_cache *c, const unsigned char *obj)
{
    for (uint32_t i = c->object_size; i < c->fp_off; i++)
        if (obj[i] != RZ_BYTE)
            return (int)(i - c->object_size);
    return -1;
}

static int poisons(const struct sd_cache *c)
{
    return (c->debug & SD_DEBUG_P) && !c->ctor;
}

static void poison(const struct sd_cache *c, unsigned char *obj)
{
    if (c->object_size == 0)
        return;
    memset(obj, POISON_FREE, c->object_size - 1);
    obj[c->object_size - 1] = POISON_END;
}

/* First byte of a freed object that is not its poison, or -1. */
static int poison_bad(const struct sd_cache *c, const unsigned char *obj)
{
    uint32_t n = c->object_size;
    for (uint32_t i = 0; i + 1 < n; i++)
        if (obj[i] != POISON_FREE)
            return (int)i;
    if (n && obj[n - 1] != POISON_END)
        return (int)n - 1;
    return -1;
}

struct damage {
    int           at;              /* first bad byte (in region), -1 none */
    uint32_t      base;            /* region offset in the object */
    uint32_t      len;             /* bytes copied */
    unsigned char bytes[64];
};

static void damage_copy(struct damage *d, const unsigned char *obj, uint32_t from,
                        uint32_t to, int at)
{
    d->at = at;
    if (at < 0)
        return;
    uint32_t start = from + (uint32_t)at;
    start = start > from + 16 ? (start - 16) & ~15u : from;
    if (start < from)
        start = from;
    d->base = start;
    d->len = to - start < sizeof d->bytes ? to - start : (uint32_t)sizeof d->bytes;
    memcpy(d->bytes, obj + start, d->len);
}

static void trace_line(const char *op, const struct sd_cache *c, const void *p)
{
    sd_dprintf(2, "slabdefrag: TRACE %s %s %p (thread %u)\n", op, c->name, p,
               sd_self_tid());
}

/* ---------------------------------------------------------------- */
/* Allocation                                                        */

void *debug_alloc(struct sd_cache *c)
{
    tcache_check_get(c->is_malloc ? "malloc" : "sd_cache_alloc");
    struct debug_track tr;
    if (c->debug & SD_DEBUG_U)
        track_record(&tr);
    unsigned char *p = cache_alloc_direct(c, NULL, 0);
    if (!p)
        return NULL;
    struct slab *s = segment_slab_of(p);
    if (!s || s->cache != c || !slab_contains(s, p)) {
        sd_fatal("freelist corruption in cache %s: an allocation returned %p, "
                 "which is not an object of the cache", c->name, (void *)p);
    }
    struct damage rz = { .at = -1 }, po = { .at = -1 };
    struct debug_snapshot sn;
    int twice = 0, corrupt = 0;
    uint64_t map[SLAB_MAX_OBJECTS / 64];

    sd_spin_lock(&s->lock);
    uint64_t st = *state_word(c, p);
    snapshot(c, p, &sn);
    if ((c->debug & SD_DEBUG_F) && slab_free_map(s, map) < 0)
        corrupt = 1;
    if ((c->debug & SD_DEBUG_F) && st == DEBUG_LIVE)
        twice = 1;
    if (st == DEBUG_FREE && poisons(c))
        damage_copy(&po, p, 0, c->object_size, poison_bad(c, p));
    if (st != 0 && (c->debug & SD_DEBUG_Z))
        damage_copy(&rz, p, c->object_size, c->fp_off, redzone_bad(c, p));
    if (c->debug & SD_DEBUG_Z)
        memset(p + c->object_size, RZ_BYTE, c->fp_off - c->object_size);
    if (c->debug & SD_DEBUG_U)
        tracks(c, p)[0] = tr;
    *state_word(c, p) = DEBUG_LIVE;
    sd_spin_unlock(&s->lock);

    if (corrupt) {
        report_head("freelist corruption", c, s, p);
        sd_dprintf(2, "  the freelist of the slab points outside it, off an "
                      "object boundary, or loops\n");
        report_tail(NULL);
        report_abort();
    }
    if (twice) {
        report_head("object handed out twice", c, s, p);
        sd_dprintf(2, "  the object was on the freelist while allocated "
                      "(freelist corruption)\n");
        report_tail(&sn);
        report_abort();
    }
    if (po.at >= 0) {
        report_head("use after free", c, s, p);
        sd_dprintf(2, "  the object was written after it was freed: first "
                      "changed byte at offset %d (poison 0x6b, last byte 0xa5):\n",
                   po.at);
        dump_bytes(po.bytes, po.len, po.base);
        report_tail(&sn);
    }
    if (rz.at >= 0) {
        report_head("red zone overwritten", c, s, p);
        sd_dprintf(2, "  while free, the %u bytes after the object were "
                      "written from byte %d on (red zone 0xcc):\n",
                   c->fp_off - c->object_size, rz.at);
        dump_bytes(rz.bytes, rz.len, rz.base);
        report_tail(&sn);
    }
    if (c->debug & SD_DEBUG_T)
        trace_line("alloc", c, p);
    return p;
}

/* ---------------------------------------------------------------- */
/* Free                                                              */

void debug_free(struct sd_cache *c, struct slab *s, void *ptr, const char *call)
{
    unsigned char *p = ptr;
    struct debug_track tr;
    if (c->debug & SD_DEBUG_U)
        track_record(&tr);
    uint64_t map[SLAB_MAX_OBJECTS / 64];
    struct damage rz = { .at = -1 };
    struct debug_snapshot sn;

    sd_spin_lock(&s->lock);
    unsigned state = s->state;
    if (s->cache != c || (!slab_state_live(state) && state != SLAB_EMPTY)) {
        sd_spin_unlock(&s->lock);
        sd_fatal("%s(): invalid pointer %p (its slab no longer belongs to "
                 "cache %s)", call, ptr, c->name);
    }
    uintptr_t off = (uintptr_t)(p - (unsigned char *)s->start);
    if (off >= (uintptr_t)s->capacity * s->size) {
        sd_spin_unlock(&s->lock);
        sd_fatal("%s(): invalid pointer %p (past the last object of a slab of "
                 "cache %s)", call, ptr, c->name);
    }
    if (!slab_contains(s, p)) {
        unsigned char *obj = slab_object(s, slab_index(s, p));
        sd_spin_unlock(&s->lock);
        report_head("invalid free", c, s, obj);
        sd_dprintf(2, "  %s(%p): the pointer is %zu bytes into the object, not "
                      "its start\n", call, ptr, (size_t)(p - obj));
        report_tail(NULL);
        report_abort();
    }
    if (slab_free_map(s, map) < 0) {
        sd_spin_unlock(&s->lock);
        report_head("freelist corruption", c, s, p);
        sd_dprintf(2, "  %s(): the freelist of the slab points outside it, off "
                      "an object boundary, or loops\n", call);
        report_tail(NULL);
        report_abort();
    }
    uint32_t i = slab_index(s, p);
    snapshot(c, p, &sn);
    if (map[i >> 6] >> (i & 63) & 1) {
        sd_spin_unlock(&s->lock);
        report_head("double free", c, s, p);
        sd_dprintf(2, "  %s() of an object that is already free\n", call);
        report_tail(&sn);
        report_abort();
    }
    if (c->debug & SD_DEBUG_Z) {
        if (*state_word(c, p) == DEBUG_LIVE)
            damage_copy(&rz, p, c->object_size, c->fp_off, redzone_bad(c, p));
        memset(p + c->object_size, RZ_BYTE, c->fp_off - c->object_size);
    }
    if (c->debug & SD_DEBUG_U)
        tracks(c, p)[1] = tr;
    if (poisons(c))
        poison(c, p);
    *state_word(c, p) = DEBUG_FREE;
    slab_set_next(s, p, s->freelist);
    s->freelist = p;
    __atomic_store_n(&s->inuse, s->inuse - 1, __ATOMIC_RELAXED);
    int release = cache_slab_freed_locked(c, s, 1);
    sd_spin_unlock(&s->lock);
    if (release)
        cache_slab_release(c, s);

    if (rz.at >= 0) {
        report_head("red zone overwritten", c, s, p);
        sd_dprintf(2, "  %s(): the red zone (the %u bytes after the %u-byte "
                      "object) was overwritten from its byte %d on:\n",
                   call, c->fp_off - c->object_size, c->object_size, rz.at);
        dump_bytes(rz.bytes, rz.len, rz.base);
        report_tail(&sn);
    }
    if (c->debug & SD_DEBUG_T)
        trace_line("free", c, p);
}
