/*
 * bench/demos/pathcache.c - a path-lookup cache that cooperates with slab
 * defragmentation, modelled on the dentry patch of the 2007 series
 * (seeds/004: get_dentries()/kick_dentries()).
 *
 * The cache: a hash table of path entries, an LRU list of the unused ones,
 * a reference count per entry and a PE_VALID flag (DCACHE_ENTRY_VALID: set
 * once an entry is fully constructed and hashed, cleared when its teardown
 * starts), all under one cache mutex.  Entries come from a slabdefrag cache
 * with get()/kick():
 *
 *   get():  cache lock; for each object: not VALID -> NULL; otherwise take a
 *           reference, and if the entry was in use (count > 1 now) abort:
 *           NULL every later object.  Returns the abort flag.
 *   kick(): abort -> drop the references.  Otherwise an entry whose count
 *           is ours alone is unhashed, taken off the LRU and freed; one that
 *           somebody took meanwhile makes us abort and just drop refs.
 *
 * Lock rule (what makes this deadlock free): get() runs with a slab lock
 * held and takes the cache mutex, so nothing here calls the allocator while
 * holding the cache mutex.  Entries are allocated and constructed before
 * they are hashed, and unhashed before they are freed.
 *
 * Workload: insert N paths, hold references on a few of them (in use:
 * 0.2% of N by default, i.e. 2% of what survives the prune), look
 * everything up in random order (that is the LRU order), prune 90% of the
 * entries from the LRU head (slabs become sparse), then sd_cache_shrink()
 * and report.  As in the dentry patch, one in-use entry on a slab makes
 * get() abort the whole slab (get_aborts=), so --hold decides how much the
 * shrink can give back.
 *
 *   pathcache [N] [--seed S] [--hold PCT] [--prune PCT] [--malloc]
 *
 * Built twice: `pathcache` (with slabdefrag; --malloc makes it use plain
 * malloc/free with no callbacks) and `pathcache-malloc` (-DUSE_MALLOC, no
 * slabdefrag at all: run it under LD_PRELOAD of any allocator).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef USE_MALLOC
#include <slabdefrag.h>
#endif

#include "../benchutil.h"
#include "demo.h"

#define PE_VALID   0x1u     /* constructed and hashed; not being torn down */
#define PE_ON_LRU  0x2u

#define PE_NAME_MAX 72      /* inline name, like d_iname */

struct pentry {
    struct pentry  *h_next;     /* hash chain */
    struct pentry **h_pprev;    /* &previous->h_next or &bucket */
    struct pentry  *lru_next, *lru_prev;
    uint64_t        hash;
    uint32_t        id;
    int             count;      /* references: users + vacate */
    unsigned        flags;
    uint16_t        len;
    char            name[PE_NAME_MAX];
};

struct pcache {
    pthread_mutex_t  lock;
    struct pentry  **table;
    size_t           mask;
    struct pentry    lru;       /* sentinel: lru.next is the oldest */
    size_t           nr_entries, nr_unused;
    /* statistics (under lock) */
    unsigned long    get_calls, get_objects, get_nulled, get_aborts;
    unsigned long    kick_calls, kick_freed, kick_put;
};

static struct pcache pc = { .lock = PTHREAD_MUTEX_INITIALIZER };
static int use_malloc;
#ifndef USE_MALLOC
static sd_cache *pentry_cache;
#endif

/* ---------------------------------------------------------------- memory */

static struct pentry *pentry_alloc(void)
{
#ifndef USE_MALLOC
    if (!use_malloc)
        return sd_cache_alloc(pentry_cache);
#endif
    return malloc(sizeof(struct pentry));
}

static void pentry_free(struct pentry *e)
{
#ifndef USE_MALLOC
    if (!use_malloc) {
        sd_cache_free(pentry_cache, e);
        return;
    }
#endif
    free(e);
}

/* ------------------------------------------------------ lists (locked) */

static void lru_del(struct pentry *e)
{
    if (!(e->flags & PE_ON_LRU))
        return;
    e->lru_prev->lru_next = e->lru_next;
    e->lru_next->lru_prev = e->lru_prev;
    e->lru_next = e->lru_prev = NULL;
    e->flags &= ~PE_ON_LRU;
    pc.nr_unused--;
}

static void lru_add_tail(struct pentry *e)
{
    e->lru_prev = pc.lru.lru_prev;
    e->lru_next = &pc.lru;
    pc.lru.lru_prev->lru_next = e;
    pc.lru.lru_prev = e;
    e->flags |= PE_ON_LRU;
    pc.nr_unused++;
}

static void hash_add(struct pentry *e)
{
    struct pentry **b = &pc.table[e->hash & pc.mask];
    e->h_next = *b;
    if (*b)
        (*b)->h_pprev = &e->h_next;
    *b = e;
    e->h_pprev = b;
    pc.nr_entries++;
}

static void hash_del(struct pentry *e)
{
    if (!e->h_pprev)
        return;
    *e->h_pprev = e->h_next;
    if (e->h_next)
        e->h_next->h_pprev = e->h_pprev;
    e->h_next = NULL;
    e->h_pprev = NULL;
    pc.nr_entries--;
}

/* Begin teardown of an unreferenced entry: after this nobody can find it
 * and get() will not take it.  The caller frees it after unlocking. */
static void pentry_kill_locked(struct pentry *e)
{
    e->flags &= ~PE_VALID;
    hash_del(e);
    lru_del(e);
}

/* dget_locked(): take a reference; an unused entry leaves the LRU. */
static void pentry_get_locked(struct pentry *e)
{
    if (e->count++ == 0)
        lru_del(e);
}

/* dput() under the lock: the last reference puts a live entry back on the
 * LRU (most recently used). */
static void pentry_put_locked(struct pentry *e)
{
    if (--e->count == 0 && (e->flags & PE_VALID))
        lru_add_tail(e);
}

/* ------------------------------------------------------------ the paths */

static uint64_t path_hash(const char *s, size_t n)
{
    return bu_fnv1a(s, n, 0xcbf29ce484222325ULL);
}

/* A deterministic path for entry id: four directory levels and a file. */
static int path_of(uint32_t id, char *buf, size_t sz)
{
    return snprintf(buf, sz, "/srv/d%02u/d%02u/d%03u/f%u.dat",
                    id % 37, (id / 37) % 53, (id / 1961) % 101, id);
}

static struct pentry *lookup_locked(const char *name, size_t len, uint64_t h)
{
    for (struct pentry *e = pc.table[h & pc.mask]; e; e = e->h_next)
        if (e->hash == h && e->len == len && memcmp(e->name, name, len) == 0)
            return e;
    return NULL;
}

/* Look a path up and take a reference on it (NULL: not cached). */
static struct pentry *pc_lookup(uint32_t id)
{
    char name[PE_NAME_MAX];
    int len = path_of(id, name, sizeof(name));
    uint64_t h = path_hash(name, (size_t)len);
    pthread_mutex_lock(&pc.lock);
    struct pentry *e = lookup_locked(name, (size_t)len, h);
    if (e)
        pentry_get_locked(e);
    pthread_mutex_unlock(&pc.lock);
    return e;
}

static void pc_put(struct pentry *e)
{
    pthread_mutex_lock(&pc.lock);
    pentry_put_locked(e);
    pthread_mutex_unlock(&pc.lock);
}

/* d_alloc() + d_add(): construct outside the lock, publish under it. */
static int pc_insert(uint32_t id)
{
    struct pentry *e = pentry_alloc();
    if (!e)
        return -1;
    memset(e, 0, sizeof(*e));
    int len = path_of(id, e->name, sizeof(e->name));
    e->len = (uint16_t)len;
    e->hash = path_hash(e->name, (size_t)len);
    e->id = id;
    pthread_mutex_lock(&pc.lock);
    hash_add(e);
    lru_add_tail(e);
    e->flags |= PE_VALID;
    pthread_mutex_unlock(&pc.lock);
    return 0;
}

/* prune_dcache(): evict up to `want` unused entries from the LRU head.
 * Entries are unhashed in batches under the lock and freed after it. */
static size_t pc_prune(size_t want)
{
    struct pentry *batch[256];
    size_t done = 0;
    while (done < want) {
        size_t n = 0;
        pthread_mutex_lock(&pc.lock);
        while (n < 256 && done + n < want && pc.lru.lru_next != &pc.lru) {
            struct pentry *e = pc.lru.lru_next;
            if (e->count) {             /* referenced: not ours to prune */
                lru_del(e);
                continue;
            }
            pentry_kill_locked(e);
            batch[n++] = e;
        }
        pthread_mutex_unlock(&pc.lock);
        if (!n)
            break;
        for (size_t i = 0; i < n; i++)
            pentry_free(batch[i]);
        done += n;
    }
    return done;
}

/* ------------------------------------------------- the defrag callbacks */

#ifndef USE_MALLOC
/* The slab is holding off frees: every object in v[] is allocated and
 * stays so until we return.  No allocator calls here. */
static void *pentry_get(sd_cache *s, int nr, void **v)
{
    unsigned long abort = 0;
    (void)s;
    pthread_mutex_lock(&pc.lock);
    pc.get_calls++;
    pc.get_objects += (unsigned long)nr;
    for (int i = 0; i < nr; i++) {
        struct pentry *e = v[i];
        /* Not VALID: still being constructed or already being freed. */
        if (abort || !(e->flags & PE_VALID)) {
            v[i] = NULL;
            pc.get_nulled++;
            continue;
        }
        pentry_get_locked(e);
        abort = e->count > 1;
    }
    if (abort)
        pc.get_aborts++;
    pthread_mutex_unlock(&pc.lock);
    return (void *)abort;
}

/* No allocator lock is held: free the entries nobody else uses, or just
 * drop our references. */
static void pentry_kick(sd_cache *s, int nr, void **v, void *private_data)
{
    unsigned long abort = (unsigned long)private_data;
    pthread_mutex_lock(&pc.lock);
    pc.kick_calls++;
    pthread_mutex_unlock(&pc.lock);
    for (int i = 0; i < nr; i++) {
        struct pentry *e = v[i];
        int do_free = 0;
        if (!e)
            continue;
        pthread_mutex_lock(&pc.lock);
        if (abort || e->count > 1) {
            /* In use (or became so since get()): keep it. */
            abort = 1;
            pentry_put_locked(e);
            pc.kick_put++;
        } else {
            e->count = 0;
            pentry_kill_locked(e);
            pc.kick_freed++;
            do_free = 1;
        }
        pthread_mutex_unlock(&pc.lock);
        if (do_free)
            sd_cache_free(s, e);
    }
}

static const struct sd_cache_ops pentry_ops = {
    .get = pentry_get,
    .kick = pentry_kick,
};
#endif /* !USE_MALLOC */

/* --------------------------------------------------------- verification */

/* Every hashed entry is VALID, unreferenced except by users, names its own
 * id and sits in the right bucket; counts agree with the lists. */
static int pc_verify(uint32_t *held_ids, size_t nheld, struct pentry **held)
{
    int bad = 0;
    size_t hashed = 0, on_lru = 0;
    pthread_mutex_lock(&pc.lock);
    for (size_t b = 0; b <= pc.mask; b++) {
        for (struct pentry *e = pc.table[b]; e; e = e->h_next) {
            char name[PE_NAME_MAX];
            int len = path_of(e->id, name, sizeof(name));
            hashed++;
            if (!(e->flags & PE_VALID) || (e->hash & pc.mask) != b ||
                e->len != len || memcmp(e->name, name, (size_t)len) != 0 ||
                e->count < 0) {
                if (bad++ < 5)
                    fprintf(stderr, "pathcache: corrupt entry %p id %u\n",
                            (void *)e, e->id);
            }
        }
    }
    for (struct pentry *e = pc.lru.lru_next; e != &pc.lru; e = e->lru_next) {
        on_lru++;
        if (e->count != 0 || !(e->flags & PE_ON_LRU)) {
            if (bad++ < 5)
                fprintf(stderr, "pathcache: bad LRU entry id %u count %d\n",
                        e->id, e->count);
        }
    }
    if (hashed != pc.nr_entries || on_lru != pc.nr_unused) {
        fprintf(stderr, "pathcache: counts: hashed %zu/%zu, lru %zu/%zu\n",
                hashed, pc.nr_entries, on_lru, pc.nr_unused);
        bad++;
    }
    /* What users hold must still be there, untouched. */
    for (size_t i = 0; i < nheld; i++) {
        struct pentry *e = held[i];
        if (e->id != held_ids[i] || !(e->flags & PE_VALID) || e->count < 1 ||
            !e->h_pprev) {
            if (bad++ < 5)
                fprintf(stderr, "pathcache: held entry %u lost\n", held_ids[i]);
        }
    }
    pthread_mutex_unlock(&pc.lock);
    return bad;
}

/* ----------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr,
            "usage: pathcache [N] [--seed S] [--hold PCT] [--prune PCT]%s\n",
            DEMO_MALLOC_OPT);
    exit(2);
}

/* The options, and what each step measured (main prints them). */
struct run {
    struct demo_run d;          /* n, seed, nb, perm, RSS, the shrink */
    uint64_t prune_pct;
    double hold_pct;
    size_t nheld;               /* entries users hold */
    uint32_t *held_ids;
    struct pentry **held;
    size_t pruned, live;        /* entries pruned; left before the shrink */
};

/* --hold PCT and --prune PCT (demo_parse's own options). */
static int own_arg(int argc, char **argv, int *i, void *arg)
{
    struct run *r = arg;
    const char *v;
    if ((v = bu_opt(argc, argv, i, "--hold"))) {
        char *end;
        r->hold_pct = strtod(v, &end);
        return *end || end == v || !(r->hold_pct >= 0 && r->hold_pct <= 100) ? -1 : 1;
    }
    if ((v = bu_opt(argc, argv, i, "--prune")))
        return bu_parse_u64(v, &r->prune_pct) || r->prune_pct > 100 ? -1 : 1;
    return 0;
}

static void parse_args(int argc, char **argv, struct run *r)
{
    r->prune_pct = 90;
    r->hold_pct = 0.2;
    demo_parse(argc, argv, &r->d, &use_malloc, own_arg, r, usage);
}

/* The hash table, the LRU list, the permutation and the entry cache. */
static int setup(struct run *r)
{
    if (demo_setup("pathcache", &r->d, use_malloc))
        return 1;
    pc.table = calloc(r->d.nb, sizeof(*pc.table));
    pc.mask = r->d.nb - 1;
    pc.lru.lru_next = pc.lru.lru_prev = &pc.lru;
    if (!pc.table) {
        fprintf(stderr, "pathcache: out of memory\n");
        return 1;
    }
#ifndef USE_MALLOC
    if (!use_malloc) {
        pentry_cache = SD_CACHE_OPS(pentry, 0, &pentry_ops);
        if (!pentry_cache) {
            perror("pathcache: sd_cache_create");
            return 1;
        }
    }
#endif
    printf("n=%llu seed=%llu hold_pct=%g prune_pct=%llu entry_size=%zu\n",
           (unsigned long long)r->d.n, (unsigned long long)r->d.seed,
           r->hold_pct, (unsigned long long)r->prune_pct,
           sizeof(struct pentry));
    return 0;
}

/* 1. Populate. */
static int populate(struct run *r)
{
    for (uint32_t id = 0; id < r->d.n; id++) {
        if (pc_insert(id)) {
            fprintf(stderr, "pathcache: allocation failed at %u\n", id);
            return 1;
        }
    }
    r->d.rss_full = proc_status_kb("VmRSS");
    return 0;
}

/* 2. Users hold references on a few entries (open files, cwd...). */
static int hold_some(struct run *r, bu_sm *rng)
{
    r->nheld = (size_t)((double)r->d.n * r->hold_pct / 100.0);
    r->held_ids = malloc((r->nheld + 1) * sizeof(*r->held_ids));
    r->held = malloc((r->nheld + 1) * sizeof(*r->held));
    bu_permutation(r->d.perm, r->d.n, rng);
    for (size_t i = 0; i < r->nheld; i++) {
        r->held_ids[i] = r->d.perm[i];
        r->held[i] = pc_lookup(r->d.perm[i]);
        if (!r->held[i]) {
            fprintf(stderr, "pathcache: entry %u missing\n", r->d.perm[i]);
            return 1;
        }
    }
    return 0;
}

/* 3. Random accesses: each lookup makes an entry most recently used,
 *    so the LRU order becomes a random permutation. */
static int access_all(struct run *r, bu_sm *rng)
{
    bu_permutation(r->d.perm, r->d.n, rng);
    for (size_t i = 0; i < r->d.n; i++) {
        struct pentry *e = pc_lookup(r->d.perm[i]);
        if (!e) {
            fprintf(stderr, "pathcache: entry %u missing\n", r->d.perm[i]);
            return 1;
        }
        pc_put(e);
    }
    return 0;
}

/* 4. Memory pressure: prune from the LRU head.  5. The shrink: the
 *    allocator calls back get()/kick() (RSS around it). */
static void prune_and_shrink(struct run *r)
{
    r->pruned = pc_prune((size_t)(r->d.n * r->prune_pct / 100));
    r->live = pc.nr_entries;

    demo_shrink_rss(&r->d, &pentry_cache, 1, use_malloc);
}

/* The figures of the population, the prune and the shrink. */
static void report(const struct run *r)
{
    printf("inserted=%llu held=%zu pruned=%zu\n", (unsigned long long)r->d.n,
           r->nheld, r->pruned);
    printf("rss_kb_full=%ld\n", r->d.rss_full);
    printf("live_entries_before_shrink=%zu\n", r->live);
    printf("live_entries=%zu\n", pc.nr_entries);
    /* Every byte the program holds: the entries, the hash table, and the
     * permutation and held arrays, which are live too. */
    size_t table_bytes = r->d.nb * sizeof(*pc.table) + (size_t)r->d.n * sizeof(*r->d.perm) +
                         (r->nheld + 1) * (sizeof(*r->held_ids) + sizeof(*r->held));
    printf("entry_bytes=%zu table_bytes=%zu\n",
           pc.nr_entries * sizeof(struct pentry), table_bytes);
    printf("live_bytes=%zu\n", pc.nr_entries * sizeof(struct pentry) + table_bytes);
    demo_print_rss(&r->d);
}

#ifndef USE_MALLOC
/* The shrink's counters, and the allocator's count of entries against the
 * cache's. */
static void report_shrink(struct run *r)
{
    demo_print_shrink(r->d.shrink_rc, &r->d.tb, &r->d.ta);
    printf("get_calls=%lu get_objects=%lu get_nulled=%lu get_aborts=%lu\n",
           pc.get_calls, pc.get_objects, pc.get_nulled, pc.get_aborts);
    printf("kick_calls=%lu kick_freed=%lu kick_put=%lu\n",
           pc.kick_calls, pc.kick_freed, pc.kick_put);
    r->d.bad += demo_inuse_differs("pathcache", &pentry_cache, 1, &pc.lock, &pc.nr_entries,
                                 &r->d.ta);
}
#endif

/* 6. Users let go; the cache keeps what is left. */
static void release(struct run *r)
{
    for (size_t i = 0; i < r->nheld; i++)
        pc_put(r->held[i]);
    free(r->held);
    free(r->held_ids);
    free(r->d.perm);
}

int main(int argc, char **argv)
{
    struct run r = { 0 };
    parse_args(argc, argv, &r);
    bu_sm rng = { r.d.seed };
    if (setup(&r) || populate(&r) || hold_some(&r, &rng) || access_all(&r, &rng))
        return 1;
    prune_and_shrink(&r);
    r.d.bad = pc_verify(r.held_ids, r.nheld, r.held);
    report(&r);
#ifndef USE_MALLOC
    if (!use_malloc)
        report_shrink(&r);
    else
#endif
        printf("shrink=none\n");
    release(&r);
    if (r.d.shrink_rc < 0) {
        fprintf(stderr, "pathcache: sd_cache_shrink: %s\n", strerror(-r.d.shrink_rc));
        r.d.bad++;
    }
    return demo_finish(r.d.bad);
}
