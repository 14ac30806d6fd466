/*
 * hooks/profreport.c - the heap profiler's reports: the sites table with
 * each site's share of the sparse slabs, the gperftools heap profile,
 * folded stacks, and the files written at exit.
 *
 * Pinning.  A slab is sparse when it is PARTIAL and at most a quarter of
 * its objects are in use (the shrink's rule); its bytes (less pages
 * already given back) are what its live objects keep from the OS.  Each
 * live object holds an equal share, bytes / inuse.  A live sample on a
 * sparse slab stands for `weight` objects of its site (unsampled live
 * objects scaled, hooks/prof.c), so its site is charged
 *     weight * bytes / inuse
 * and summed over all samples this estimates, without bias, the bytes of
 * sparse slabs that each site's objects pin.  A meshed alias's objects
 * count on their host.  The report also says how many sparse slabs there
 * were and how many had no sampled object (the estimate's coverage).
 *
 * Reports run on the control thread, at exit, or from a test; each holds
 * one shard lock at a time, and walks the slabs with none of them.
 */
#define _GNU_SOURCE
#include "prof.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "fmt.h"
#include "options.h"
#include "out.h"
#include "os.h"
#include "proftab.h"
#include "sample.h"
#include "segment.h"
#include "slab.h"

/* "12.3 MiB" style, into buf. */
static const char *human(char *buf, size_t size, double v)
{
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    unsigned long t = (unsigned long)(v * 10 + 0.5);
    if (u == 0)
        sd_fmt(buf, size, "%lu B", (unsigned long)(v + 0.5));
    else
        sd_fmt(buf, size, "%lu.%lu %s", t / 10, t % 10, unit[u]);
    return buf;
}

/* ---------------------------------------------------------------- */
/* The estimate: per stack, and the sparse slabs                     */

struct site_est {
    double   live_bytes, live_objs, pinned;
};

struct report {
    struct site_est site[PROF_STACKS];      /* by stack id */
    uint32_t order[PROF_STACKS];
    uint32_t nsites;
    unsigned long samples, sparse_slabs, sparse_unsampled, slabs;
    double   sparse_bytes, live_bytes, pinned;
    /* sparse slabs holding a sample: open addressing */
    const struct slab *set[1 << 16];
};

/* The set's home slot of s (descriptors are 128 bytes apart). */
static uint32_t set_hash(const struct slab *s)
{
    uintptr_t a = (uintptr_t)s;
    return (uint32_t)((a >> 7) ^ ((a >> SD_SEGMENT_SHIFT) * 0x9e37u)) & 0xffff;
}

static void set_add(struct report *r, const struct slab *s)
{
    uint32_t i = set_hash(s);
    for (uint32_t k = 0; k < (1u << 16); k++, i = (i + 1) & 0xffff) {
        if (r->set[i] == s)
            return;
        if (!r->set[i]) {
            r->set[i] = s;
            return;
        }
    }
}

static int set_has(const struct report *r, const struct slab *s)
{
    uint32_t i = set_hash(s);
    for (uint32_t k = 0; k < (1u << 16); k++, i = (i + 1) & 0xffff) {
        if (r->set[i] == s)
            return 1;
        if (!r->set[i])
            return 0;
    }
    return 0;
}

/* Bytes a slab keeps from the OS. */
static double slab_resident(const struct slab *s)
{
    return (double)(seg_kind_bytes(s->kind) -
                    (size_t)__builtin_popcountll(slab_purged(s)) * 4096);
}

/* s sparse (racy reads: a statistic)? */
static int slab_sparse(const struct slab *s)
{
    unsigned st = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
    uint32_t inuse = __atomic_load_n(&s->inuse, __ATOMIC_RELAXED);
    return st == SLAB_PARTIAL && inuse && (uint64_t)inuse * 4 <= s->capacity;
}

static void count_sparse(struct slab *s, void *arg)
{
    struct report *r = arg;
    r->slabs++;
    if (!slab_sparse(s))
        return;
    r->sparse_slabs++;
    r->sparse_bytes += slab_resident(s);
    if (!set_has(r, s))
        r->sparse_unsampled++;
}

static void estimate(struct report *r)
{
    struct prof_tables *t = prof_tab;
    for (int i = 0; i < PROF_SHARDS; i++) {
        struct prof_shard *sh = &t->shard[i];
        sd_mutex_lock(&sh->lock);
        for (uint32_t j = 0; j < PROF_SHARD_SLOTS; j++) {
            const struct prof_sample *smp = &sh->slot[j];
            if (!smp->addr)
                continue;
            struct site_est *e = &r->site[smp->stack];
            r->samples++;
            e->live_bytes += (double)smp->size * smp->weight;
            e->live_objs += smp->weight;
            struct slab *s = segment_slab_of((void *)smp->addr);
            if (s && __atomic_load_n(&s->state, __ATOMIC_RELAXED) == SLAB_MESHED)
                s = __atomic_load_n(&s->mesh_host, __ATOMIC_RELAXED);
            if (s && slab_sparse(s)) {
                uint32_t inuse = __atomic_load_n(&s->inuse, __ATOMIC_RELAXED);
                e->pinned += smp->weight * slab_resident(s) / inuse;
                set_add(r, s);
            }
        }
        sd_mutex_unlock(&sh->lock);
    }
    segment_for_each_slab(count_sparse, r, 0);
    for (uint32_t i = 0; i < PROF_STACKS; i++) {
        struct site_est *e = &r->site[i];
        if (e->live_objs > 0 || e->pinned > 0) {
            r->order[r->nsites++] = i;
            r->live_bytes += e->live_bytes;
            r->pinned += e->pinned;
        }
    }
}

static double key_of(const struct report *r, uint32_t id, enum prof_sort sort)
{
    return sort == PROF_SORT_PINNED ? r->site[id].pinned : r->site[id].live_bytes;
}

/* Largest first (shell sort: no libc qsort, which may allocate). */
static void sort_sites(struct report *r, enum prof_sort sort)
{
    uint32_t n = r->nsites;
    for (uint32_t gap = n / 2; gap; gap /= 2)
        for (uint32_t i = gap; i < n; i++) {
            uint32_t v = r->order[i], j = i;
            double k = key_of(r, v, sort);
            while (j >= gap && key_of(r, r->order[j - gap], sort) < k) {
                r->order[j] = r->order[j - gap];
                j -= gap;
            }
            r->order[j] = v;
        }
}

/* Run fn with a fresh estimate, in a scratch mapping of its own (reports
 * may run at once: each takes the shard locks one at a time). */
static void with_report(void (*fn)(struct report *r, void *arg), void *arg)
{
    void *m;
    size_t size = (sizeof(struct report) + 4095) & ~(size_t)4095;
    if (os_map_sparse(size, &m) == 0) {
        estimate(m);
        fn(m, arg);
        os_unmap(m, size);
    }
}

/* ---------------------------------------------------------------- */
/* Text reports                                                      */

static const char *cache_name(uint32_t id)
{
    if (id == PROF_CACHE_LARGE)
        return "(large)";
    if (id == PROF_CACHE_MIXED)
        return "(several)";
    if (id >= SD_MAX_CACHES)
        return "?";
    struct sd_cache *c = __atomic_load_n(&sd_caches[id], __ATOMIC_ACQUIRE);
    return c ? c->name : "?";
}

static void put_frame(struct out *w, uintptr_t ip)
{
    const char *n = prof_name_of(ip);
    if (*n == '?')
        out_fmt(w, "0x%lx", (unsigned long)ip);
    else
        out_str(w, n);
}

static void status_line(struct out *w)
{
    unsigned long live = 0;
    struct prof_tables *t = prof_tab;
    if (t)
        for (int i = 0; i < PROF_SHARDS; i++)
            live += __atomic_load_n(&t->shard[i].used, __ATOMIC_RELAXED);
    out_fmt(w, "profiling %s, mean interval %lu bytes; %lu live samples of at most "
            "%lu, %lu dropped (table full), %u of %u stacks%s\n",
            __atomic_load_n(&prof_on, __ATOMIC_RELAXED) ? "on" : "off",
            (unsigned long)prof_interval, live,
            (unsigned long)PROF_SHARDS * PROF_SHARD_MAX,
            __atomic_load_n(&prof_dropped, __ATOMIC_RELAXED),
            t ? t->nstacks : 0, (unsigned)PROF_STACKS_MAX,
            __atomic_load_n(&prof_stack_overflow, __ATOMIC_RELAXED)
                ? " (stack table full: some samples on \"(other stacks)\")" : "");
}

void prof_print_status(int fd)
{
    struct out w = { .fd = fd };
    status_line(&w);
    out_flush(&w);
}

struct sites_arg {
    struct out *w;
    enum prof_sort sort;
    unsigned max;
    size_t lines;               /* folded: lines written */
};

static void sites_print(struct report *r, void *arg)
{
    struct sites_arg *a = arg;
    struct out *w = a->w;
    char b1[32], b2[32], b3[32];
    sort_sites(r, a->sort);
    out_fmt(w, "sparse slabs (at most 1/4 full): %lu of %lu slabs, %s; %lu without "
            "a sampled object\n", r->sparse_slabs, r->slabs,
            human(b1, sizeof b1, r->sparse_bytes), r->sparse_unsampled);
    out_fmt(w, "estimated live %s in %u sites; pinned by them %s\n",
            human(b2, sizeof b2, r->live_bytes), r->nsites,
            human(b3, sizeof b3, r->pinned));
    out_fmt(w, "%12s %12s %12s  %-18s %s\n", "live_bytes", "live_objs",
            "pinned_bytes", "cache", "site (innermost first)");
    for (uint32_t i = 0; i < r->nsites && i < a->max; i++) {
        uint32_t id = r->order[i];
        const struct site_est *e = &r->site[id];
        const struct prof_stack *st = &prof_tab->stack[id];
        out_fmt(w, "%12lu %12lu %12lu  %-18s ", (unsigned long)(e->live_bytes + 0.5),
                (unsigned long)(e->live_objs + 0.5), (unsigned long)(e->pinned + 0.5),
                cache_name(st->cache));
        if (id == 0)
            out_str(w, "(other stacks: stack table full)");
        for (uint32_t f = 0; f < st->nframes && f < 6; f++) {
            if (f)
                out_str(w, " < ");
            put_frame(w, st->frame[f]);
        }
        out_str(w, "\n");
    }
}

void prof_print_sites(int fd, enum prof_sort sort, unsigned max)
{
    struct out w = { .fd = fd };
    status_line(&w);
    if (prof_tab) {
        struct sites_arg a = { &w, sort, max ? max : 20, 0 };
        with_report(sites_print, &a);
    }
    out_flush(&w);
}

/* ---------------------------------------------------------------- */
/* Profiles for other tools                                          */

static void folded_print(struct report *r, void *arg)
{
    struct sites_arg *a = arg;
    for (uint32_t i = 0; i < r->nsites; i++) {
        uint32_t id = r->order[i];
        double v = key_of(r, id, a->sort);
        if (v < 0.5)
            continue;
        const struct prof_stack *st = &prof_tab->stack[id];
        if (id == 0)
            out_str(a->w, "(other stacks)");
        for (uint32_t f = st->nframes; f-- > 0;) {
            put_frame(a->w, st->frame[f]);
            if (f)
                out_str(a->w, ";");
        }
        out_fmt(a->w, " %lu\n", (unsigned long)(v + 0.5));
        a->lines++;
    }
}

size_t prof_write_folded(int fd, enum prof_sort what)
{
    struct out w = { .fd = fd };
    struct sites_arg a = { &w, what, 0, 0 };
    if (prof_tab)
        with_report(folded_print, &a);
    out_flush(&w);
    return a.lines;
}

void prof_write_heap(int fd)
{
    struct out w = { .fd = fd };
    struct prof_tables *t = prof_tab;
    uint64_t ln = 0, lb = 0, an = 0, ab = 0;
    if (t)
        for (uint32_t i = 1; i < PROF_STACKS; i++) {
            const struct prof_stack *st = &t->stack[i];
            if (!__atomic_load_n(&st->hash, __ATOMIC_ACQUIRE))
                continue;
            ln += st->live_n;
            lb += st->live_bytes;
            an += st->alloc_n;
            ab += st->alloc_bytes;
        }
    /* gperftools' HeapProfileTable: raw sampled counts; the reader
     * unsamples them with the interval after heap_v2/. */
    out_fmt(&w, "heap profile: %6lu: %8lu [%6lu: %8lu] @ heap_v2/%lu\n",
            (unsigned long)ln, (unsigned long)lb, (unsigned long)an,
            (unsigned long)ab, (unsigned long)prof_interval);
    if (t)
        for (uint32_t i = 1; i < PROF_STACKS; i++) {
            const struct prof_stack *st = &t->stack[i];
            if (!__atomic_load_n(&st->hash, __ATOMIC_ACQUIRE) || !st->nframes ||
                !st->alloc_n)
                continue;
            out_fmt(&w, "%6lu: %8lu [%6lu: %8lu] @",
                    (unsigned long)st->live_n, (unsigned long)st->live_bytes,
                    (unsigned long)st->alloc_n, (unsigned long)st->alloc_bytes);
            for (uint32_t f = 0; f < st->nframes; f++)
                out_fmt(&w, " 0x%016lx", (unsigned long)st->frame[f]);
            out_str(&w, "\n");
        }
    out_str(&w, "\nMAPPED_LIBRARIES:\n");
    out_flush(&w);
    int mfd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (mfd >= 0) {
        ssize_t r;
        while (!w.err && (r = os_read(mfd, w.buf, sizeof w.buf)) > 0) {
            w.n = (size_t)r;
            out_flush(&w);
        }
        os_close(mfd);
    }
}

static int open_out(const char *suffix, char *path, size_t size)
{
    sd_fmt(path, size, "%s.%d.%s", sd_opt.prof_prefix, (int)getpid(), suffix);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        sd_warn("SLABDEFRAG_PROF: cannot write %s (errno %d)", path, errno);
    return fd;
}

void prof_write_final(void)
{
    if (!prof_tab)
        return;
    char heap[256], folded[256], sites[256];
    int fd = open_out("heap", heap, sizeof heap);
    if (fd < 0)
        return;
    prof_write_heap(fd);
    os_close(fd);
    if ((fd = open_out("pinned.folded", folded, sizeof folded)) < 0)
        return;
    prof_write_folded(fd, PROF_SORT_PINNED);
    os_close(fd);
    if ((fd = open_out("sites", sites, sizeof sites)) < 0)
        return;
    prof_print_sites(fd, PROF_SORT_PINNED, 50);
    os_close(fd);
    sd_dprintf(2, "slabdefrag: heap profile in %s, pinned bytes as folded stacks in "
               "%s, sites in %s\n", heap, folded, sites);
}
