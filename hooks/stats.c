/*
 * hooks/stats.c - the statistics printers (see stats.h): the slabinfo
 * table, its JSON form, and the report of one cache.  The per-cache
 * counters come from the one list in classes/stat.h, so a new counter
 * shows up in every printer without a change here.
 *
 * Figures are exact at a quiescent point: slab counts and objects in use
 * come from walking the slabs under their locks (cache_usage), less the
 * objects on threads' private lists and on the CPUs' stacks; nothing is
 * counted on the fast path.
 */
#include "stats.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fmt.h"
#include "out.h"
#include "large.h"
#include "mesh.h"
#include "options.h"
#include "pcpu.h"
#include "mallocfam.h"
#include "segment.h"
#include "shrinker.h"
#include "slabdefrag.h"


/* ---------------------------------------------------------------- */
/* JSON strings (the writer is hooks/out.h)                         */

/* A JSON string (names are the caller's: escape them). */
static void out_jstr(struct out *o, const char *s, size_t max)
{
    out_put(o, "\"", 1);
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = { '\\', (char)ch };
            out_put(o, e, 2);
        } else if (ch < 0x20) {
            out_fmt(o, "\\u%04x", ch);
        } else {
            out_put(o, (const char *)&ch, 1);
        }
    }
    out_put(o, "\"", 1);
}

/* ---------------------------------------------------------------- */
/* Rows                                                              */

struct row {
    struct sd_cache *c;
    struct cache_usage u;
    size_t space;               /* slab bytes */
    size_t used;                /* objects in use * object size */
};

static size_t slab_bytes(const struct sd_cache *c) { return seg_kind_bytes(c->kind); }

static int row_fill(struct row *r, struct sd_cache *c)
{
    r->c = c;
    cache_usage(c, &r->u);
    r->space = r->u.bytes;
    r->used = r->u.objects_inuse * c->object_size;
    /* Idle malloc classes are left out; typed caches always shown. */
    return r->u.slabs || !c->is_malloc ||
           __atomic_load_n(&c->stat[SD_STAT_VACATE_ATTEMPTS], __ATOMIC_RELAXED);
}

static size_t row_key(const struct row *r, enum stats_sort sort)
{
    switch (sort) {
    case STATS_SORT_SIZE:    return r->space;
    case STATS_SORT_LOSS:    return r->space - (r->used < r->space ? r->used : r->space);
    case STATS_SORT_PARTIAL: return r->u.partial;
    default:                 return 0;
    }
}

static void flags_str(const struct sd_cache *c, char *f)
{
    int n = 0;
    if (c->refcount > 1) f[n++] = '*';
    if (c->has_ops) f[n++] = 'D';
    if (c->ctor) f[n++] = 'C';
    if (c->flags & SD_HWCACHE_ALIGN) f[n++] = 'A';
    if (c->debug & SD_DEBUG_F) f[n++] = 'F';
    if (c->debug & SD_DEBUG_Z) f[n++] = 'Z';
    if (c->debug & SD_DEBUG_P) f[n++] = 'P';
    if (c->debug & SD_DEBUG_U) f[n++] = 'U';
    if (c->debug & SD_DEBUG_T) f[n++] = 'T';
    if (c->dead) f[n++] = 'X';
    f[n] = 0;
}

static const char *const stat_docs[SD_NSTATS] = {
#define X(id, name, doc) doc,
    SD_CACHE_STATS(X)
#undef X
};

static unsigned long stat_of(const struct sd_cache *c, enum sd_stat i)
{
    return cache_stat_read(c, i);
}

static void size_str(char *b, size_t n, size_t v)
{
    if (v >= (100UL << 20))
        sd_fmt(b, n, "%zuM", v >> 20);
    else if (v >= (100UL << 10))
        sd_fmt(b, n, "%zuK", v >> 10);
    else
        sd_fmt(b, n, "%zu", v);
}

static unsigned pct(size_t part, size_t whole)
{
    return whole ? (unsigned)(part * 100 / whole) : 0;
}

/* ---------------------------------------------------------------- */
/* The table                                                         */

static void text_header(struct out *o)
{
    out_fmt(o, "%-20s %9s %7s %8s %16s %4s %3s %3s %-5s %8s %8s %9s %8s\n",
            "Name", "Objects", "Objsize", "Space", "Slabs/Part/Cpu", "O/S",
            "%Fr", "%Ef", "Flg", "VacAtt", "VacOK", "Kicked", "Released");
}

static void text_row(struct out *o, const struct row *r)
{
    const struct sd_cache *c = r->c;
    char sp[16], rel[16], sps[48], flg[16];
    size_str(sp, sizeof sp, r->space);
    size_str(rel, sizeof rel, stat_of(c, SD_STAT_BYTES_RELEASED));
    sd_fmt(sps, sizeof sps, "%zu/%zu/%zu", r->u.slabs, r->u.partial, r->u.active);
    flags_str(c, flg);
    out_fmt(o, "%-20s %9zu %7u %8s %16s %4u %3u %3u %-5s %8lu %8lu %9lu %8s\n",
            c->name, r->u.objects_inuse, c->object_size, sp, sps, c->capacity,
            pct(r->u.partial, r->u.slabs), pct(r->used, r->space), flg,
            stat_of(c, SD_STAT_VACATE_ATTEMPTS), stat_of(c, SD_STAT_VACATE_SUCCESSES),
            stat_of(c, SD_STAT_OBJECTS_KICKED), rel);
    if (c->aliases[0])
        out_fmt(o, "%-20s aliases: %s\n", "", c->aliases);
}

struct totals {
    size_t objects, slabs, space, used, caches;
};

static void totals_add(struct totals *t, const struct row *r)
{
    t->objects += r->u.objects_inuse;
    t->slabs += r->u.slabs;
    t->space += r->space;
    t->used += r->used;
    t->caches++;
}

static void text_totals(struct out *o, const struct totals *t)
{
    struct large_stats l;
    large_get_stats(&l);
    struct shrinker_stats st;
    shrinker_get_stats(&st);
    char a[16], b[16], c[16], d[16], e[16], f[16];
    size_str(a, sizeof a, t->space);
    size_str(b, sizeof b, l.bytes);
    out_fmt(o, "Total: %zu objects in %zu slabs, %s slab space, %u%% efficient; "
            "large: %zu blocks, %s\n", t->objects, t->slabs, a,
            pct(t->used, t->space), l.blocks, b);
    size_str(a, sizeof a, l.extent_bytes);
    size_str(b, sizeof b, l.cached_bytes);
    size_str(c, sizeof c, l.dirty_bytes);
    size_str(d, sizeof d, l.purged_bytes);
    size_str(e, sizeof e, l.purged_total);
    size_str(f, sizeof f, l.huge_bytes);
    out_fmt(o, "Extents: %zu in use (%s), %zu stashed (%s), %zu free (%s resident), "
            "%zu purged (%s), %s purged since start; %zu huge (%s); "
            "mappings: %zu (%zu chunks of 64M, %zu huge, %zu cached)\n",
            l.extent_blocks, a, l.cached_blocks, b, l.dirty_extents, c,
            l.purged_extents, d, e, l.huge_blocks, f, l.mappings, l.chunks,
            l.huge_blocks, l.huge_cached_maps);
    struct segment_dirty_stats ds;
    segment_dirty_stats(&ds);
    size_str(a, sizeof a, ds.bytes);
    size_str(b, sizeof b, ds.cap);
    out_fmt(o, "Slots: %s dirty (bound %s), %zu slots purged in %zu runs, "
            "%zu reused dirty, %zu stale mesh aliases\n", a, b, ds.purged_slots,
            ds.purged_runs, ds.reused_slots, segment_stale_aliases());
    out_fmt(o, "Shrinker: %s, %lu passes, %lu bytes released, longest pass "
            "%lu us, longest vacate %lu us, longest get() pause %lu us, "
            "%lu decay passes, %lu mesh catch-ups\n",
            st.running ? "running" : st.armed ? "armed (meshing starts it at the first "
                                                  "frees that leave slabs sparse)" : "idle",
            (unsigned long)st.passes, (unsigned long)st.bytes_released,
            (unsigned long)(st.longest_pass_ns / 1000),
            (unsigned long)(st.longest_vacate_ns / 1000),
            (unsigned long)(st.longest_pause_ns / 1000),
            (unsigned long)st.decay_passes, (unsigned long)st.mesh_catchups);
    struct pcpu_info pc;
    pcpu_get_info(&pc);
    if (pc.on) {
        out_fmt(o, "Caches: per-CPU (rseq), %u CPUs, bound %zu KiB per CPU; cached:",
                pc.ncpu, pc.bound_bytes >> 10);
        for (unsigned cpu = 0; cpu < pc.ncpu && cpu < 64; cpu++)
            out_fmt(o, " cpu%u %zu KiB", cpu, pcpu_cpu_bytes(cpu) >> 10);
        out_fmt(o, "; transfer %zu KiB\n", pc.transfer_bytes >> 10);
    } else {
        out_fmt(o, "Caches: per-thread (%s)\n",
                sd_opt.percpu ? "rseq or membarrier unavailable" : "SLABDEFRAG_PERCPU=0");
    }
    struct mesh_stats m;
    mesh_get_stats(&m);
    if (m.enabled)
        out_fmt(o, "Mesh: %lu meshes, %lu unmeshed, %lu aliases now, %lu bytes "
                "released, %lu us spent, longest pause %lu us, %lu writers waited, "
                "%lu system calls retried, %lu hosts filed, maps %lu of %lu, barrier %s%s%s\n",
                (unsigned long)m.meshes,
                (unsigned long)m.unmeshes, (unsigned long)m.aliases,
                (unsigned long)m.bytes_released, (unsigned long)(m.time_ns / 1000),
                (unsigned long)(m.longest_pause_ns / 1000),
                (unsigned long)m.fault_waits, (unsigned long)m.syscall_retries,
                (unsigned long)m.filed, (unsigned long)m.maps, (unsigned long)m.max_maps, m.barrier,
                m.map_limit_hits ? " (map limit reached: meshing stopped)" : "",
                m.handler_lost ? " (SIGSEGV handler replaced: meshing stopped)" : "");
    else if (m.off_reason)
        out_fmt(o, "Mesh: off: %s\n", m.off_reason);
}

/* ---------------------------------------------------------------- */
/* JSON                                                              */

static void json_cache(struct out *o, const struct row *r)
{
    const struct sd_cache *c = r->c;
    char flg[16];
    flags_str(c, flg);
    out_put(o, "{\"name\":", 8);
    out_jstr(o, c->name, sizeof c->name);
    out_fmt(o, ",\"objects\":%zu,\"object_size\":%u,\"stride\":%u,\"slab_size\":%zu,"
            "\"objects_per_slab\":%u,\"page_slab_size\":%zu,\"objects_per_page_slab\":%u,"
            "\"slabs\":%zu,\"partial\":%zu,\"cpu\":%zu,"
            "\"full\":%zu,\"frozen\":%zu,\"empty\":%zu,\"space\":%zu,\"loss\":%zu,"
            "\"partial_pct\":%u,\"efficiency_pct\":%u,\"flags\":\"%s\",\"aliases\":[",
            r->u.objects_inuse, c->object_size, c->size, slab_bytes(c), c->capacity,
            c->page_capacity ? seg_kind_bytes(c->page_kind) : 0, c->page_capacity,
            r->u.slabs, r->u.partial, r->u.active, r->u.full, r->u.frozen, r->u.empty,
            r->space, row_key(r, STATS_SORT_LOSS), pct(r->u.partial, r->u.slabs),
            pct(r->used, r->space), flg);
    const char *a = c->aliases;
    for (int first = 1; *a; first = 0) {
        size_t m = 0;
        while (a[m] && a[m] != ',')
            m++;
        if (!first)
            out_put(o, ",", 1);
        out_jstr(o, a, m);
        a += m + (a[m] == ',');
    }
    out_put(o, "],\"counters\":{", 14);
    for (unsigned i = 0; i < SD_NSTATS; i++)
        out_fmt(o, "%s\"%s\":%lu", i ? "," : "", sd_stat_names[i],
                stat_of(c, (enum sd_stat)i));
    out_put(o, "}}", 2);
}

static void json_totals(struct out *o, const struct totals *t)
{
    struct large_stats l;
    large_get_stats(&l);
    struct shrinker_stats st;
    shrinker_get_stats(&st);
    out_fmt(o, "\"totals\":{\"caches\":%zu,\"objects\":%zu,\"slabs\":%zu,\"space\":%zu,"
            "\"used\":%zu,\"efficiency_pct\":%u},", t->caches, t->objects, t->slabs,
            t->space, t->used, pct(t->used, t->space));
    out_fmt(o, "\"large\":{\"blocks\":%zu,\"bytes\":%zu,\"extents_inuse\":%zu,"
            "\"extents_inuse_bytes\":%zu,\"extents_stashed\":%zu,\"extents_stashed_bytes\":%zu,"
            "\"extents_free\":%zu,\"extents_free_bytes\":%zu,\"extents_purged\":%zu,"
            "\"extents_purged_bytes\":%zu,\"purged_total_bytes\":%zu,\"chunks\":%zu,"
            "\"huge_blocks\":%zu,\"huge_bytes\":%zu,\"cached_bytes\":%zu,\"mappings\":%zu},",
            l.blocks, l.bytes, l.extent_blocks, l.extent_bytes, l.cached_blocks,
            l.cached_bytes, l.dirty_extents, l.dirty_bytes, l.purged_extents,
            l.purged_bytes, l.purged_total, l.chunks, l.huge_blocks, l.huge_bytes,
            l.huge_cached_bytes, l.mappings);
    struct segment_dirty_stats ds;
    segment_dirty_stats(&ds);
    out_fmt(o, "\"slots\":{\"dirty_bytes\":%zu,\"dirty_bound_bytes\":%zu,"
            "\"purged_slots\":%zu,\"purge_runs\":%zu,\"reused_slots\":%zu,"
            "\"stale_aliases\":%zu},", ds.bytes, ds.cap, ds.purged_slots, ds.purged_runs,
            ds.reused_slots, segment_stale_aliases());
    out_fmt(o, "\"shrinker\":{\"running\":%s,\"armed\":%s,\"passes\":%lu,\"wake_interval\":%lu,"
            "\"wake_pressure\":%lu,\"wake_explicit\":%lu,\"wake_rss\":%lu,"
            "\"bytes_released\":%lu,\"longest_pass_us\":%lu,\"longest_vacate_us\":%lu,"
            "\"longest_pause_us\":%lu,\"decay_passes\":%lu,\"mesh_catchups\":%lu,"
            "\"mesh_held\":%lu,\"compute_holds\":%lu}",
            st.running ? "true" : "false", st.armed ? "true" : "false",
            (unsigned long)st.passes,
            (unsigned long)st.wake_interval, (unsigned long)st.wake_pressure,
            (unsigned long)st.wake_explicit, (unsigned long)st.wake_rss,
            (unsigned long)st.bytes_released,
            (unsigned long)(st.longest_pass_ns / 1000),
            (unsigned long)(st.longest_vacate_ns / 1000),
            (unsigned long)(st.longest_pause_ns / 1000), (unsigned long)st.decay_passes,
            (unsigned long)st.mesh_catchups, (unsigned long)st.mesh_held,
            (unsigned long)st.compute_holds);
    struct pcpu_info pc;
    pcpu_get_info(&pc);
    out_fmt(o, ",\"cpu_caches\":{\"mode\":\"%s\",\"cpus\":%u,\"bound_bytes\":%zu,"
            "\"cached_bytes\":[", pc.on ? "per-cpu" : "per-thread", pc.ncpu,
            pc.on ? pc.bound_bytes : 0);
    for (unsigned cpu = 0; pc.on && cpu < pc.ncpu; cpu++)
        out_fmt(o, "%s%zu", cpu ? "," : "", pcpu_cpu_bytes(cpu));
    out_fmt(o, "],\"transfer_bytes\":%zu}", pc.transfer_bytes);
    struct mesh_stats m;
    mesh_get_stats(&m);
    out_fmt(o, ",\"mesh\":{\"enabled\":%s,\"meshes\":%lu,\"unmeshes\":%lu,"
            "\"aliases\":%lu,\"bytes_released\":%lu,\"time_us\":%lu,"
            "\"longest_pause_us\":%lu,\"fault_waits\":%lu,\"syscall_retries\":%lu,"
            "\"filed\":%lu,\"maps\":%lu,\"max_maps\":%lu,\"map_limit_hits\":%lu,\"handler_lost\":%s,"
            "\"barrier\":\"%s\",\"off_reason\":%s%s%s}",
            m.enabled ? "true" : "false", (unsigned long)m.meshes,
            (unsigned long)m.unmeshes, (unsigned long)m.aliases,
            (unsigned long)m.bytes_released, (unsigned long)(m.time_ns / 1000),
            (unsigned long)(m.longest_pause_ns / 1000), (unsigned long)m.fault_waits,
            (unsigned long)m.syscall_retries, (unsigned long)m.filed, (unsigned long)m.maps,
            (unsigned long)m.max_maps, (unsigned long)m.map_limit_hits, m.handler_lost ? "true" : "false", m.barrier,
            m.off_reason ? "\"" : "", m.off_reason ? m.off_reason : "null", m.off_reason ? "\"" : "");
}

/* ---------------------------------------------------------------- */
/* The printers                                                      */

static void emit(struct out *o, const struct row *r, unsigned flags, int *first)
{
    if (flags & STATS_TOTALS)
        return;
    if (flags & STATS_JSON) {
        if (!*first)
            out_put(o, ",", 1);
        json_cache(o, r);
    } else {
        text_row(o, r);
    }
    *first = 0;
}

int stats_print(int fd, unsigned flags, enum stats_sort sort)
{
    cache_init();
    struct out *o = sdm_malloc(sizeof *o);
    struct out local_small;             /* no heap: unbuffered-ish fallback */
    if (!o) {
        o = &local_small;
    }
    o->fd = fd;
    o->err = 0;
    o->n = 0;
    if (flags & STATS_JSON)
        out_fmt(o, "{\"pid\":%d,\"version\":\"%s\",\"caches\":[", (int)getpid(),
                SLABDEFRAG_VERSION);
    else if (!(flags & STATS_TOTALS))
        text_header(o);

    struct totals t;
    memset(&t, 0, sizeof t);
    int first = 1;
    struct row *rows = sort != STATS_SORT_NONE && !(flags & STATS_TOTALS)
                           ? sdm_malloc(SD_MAX_CACHES * sizeof *rows) : NULL;
    size_t n = 0;
    for (unsigned i = 0; i < SD_MAX_CACHES && !o->err; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        struct row r;
        if (!c || !row_fill(&r, c))
            continue;
        totals_add(&t, &r);
        if (rows)
            rows[n++] = r;
        else
            emit(o, &r, flags, &first);
    }
    if (rows) {
        /* Insertion sort, largest key first; ties in id order. */
        for (size_t i = 1; i < n; i++) {
            struct row x = rows[i];
            size_t k = row_key(&x, sort), j = i;
            while (j > 0 && row_key(&rows[j - 1], sort) < k) {
                rows[j] = rows[j - 1];
                j--;
            }
            rows[j] = x;
        }
        for (size_t i = 0; i < n; i++)
            emit(o, &rows[i], flags, &first);
        sdm_free(rows);
    }
    if (flags & STATS_JSON) {
        out_put(o, "],", 2);
        json_totals(o, &t);
        out_put(o, "}\n", 2);
    } else {
        text_totals(o, &t);
    }
    out_flush(o);
    int err = o->err;
    if (o != &local_small)
        sdm_free(o);
    return err;
}

int stats_print_cache(int fd, struct sd_cache *c, unsigned flags)
{
    struct out *o = sdm_malloc(sizeof *o);
    if (!o)
        return -ENOMEM;
    o->fd = fd;
    o->err = 0;
    o->n = 0;
    struct row r;
    row_fill(&r, c);
    if (flags & STATS_JSON) {
        json_cache(o, &r);
        out_put(o, "\n", 1);
    } else {
        char flg[16];
        flags_str(c, flg);
        out_fmt(o, "Cache %s\n", c->name);
        out_fmt(o, "  %-18s %u bytes (stride %u, align %u, free pointer at +%u)\n",
                "object size", c->object_size, c->size, c->align, c->fp_off);
        out_fmt(o, "  %-18s %zu bytes, %u objects, %u bytes left over\n", "slab",
                slab_bytes(c), c->capacity,
                (unsigned)(slab_bytes(c) - (size_t)c->capacity * c->size));
        out_fmt(o, "  %-18s %zu: %zu active, %zu partial, %zu full, %zu frozen, "
                "%zu empty\n", "slabs", r.u.slabs, r.u.active, r.u.partial, r.u.full,
                r.u.frozen, r.u.empty);
        out_fmt(o, "  %-18s %zu in use of %zu (%u%% of slab space used)\n",
                "objects", r.u.objects_inuse, r.u.slabs * c->capacity,
                pct(r.used, r.space));
        out_fmt(o, "  %-18s %s%s%s%s\n", "kind",
                c->is_malloc ? "malloc size class" : "typed cache",
                c->has_ops ? ", get/kick" : "", c->ctor ? ", ctor" : "",
                c->dead ? ", destroyed" : "");
        out_fmt(o, "  %-18s %s\n", "flags", flg[0] ? flg : "-");
        out_fmt(o, "  %-18s %s\n", "aliases", c->aliases[0] ? c->aliases : "-");
        out_fmt(o, "  counters:\n");
        for (unsigned i = 0; i < SD_NSTATS; i++)
            out_fmt(o, "    %-18s %12lu  %s\n", sd_stat_names[i],
                    stat_of(c, (enum sd_stat)i), stat_docs[i]);
    }
    out_flush(o);
    int err = o->err;
    sdm_free(o);
    return err;
}

SD_EXPORT int sd_stats_print(int fd)
{
    return stats_print(fd, 0, STATS_SORT_NONE);
}

SD_EXPORT int sd_stats_print_json(int fd)
{
    return stats_print(fd, STATS_JSON, STATS_SORT_NONE);
}
