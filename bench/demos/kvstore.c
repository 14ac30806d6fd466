/*
 * bench/demos/kvstore.c - a key-value store whose kick() moves objects
 * (the reallocation path of seeds/003: "allocate a new object, copy,
 * repoint, free the old one"; new objects come from the fullest partial
 * slabs, so sparse slabs empty and full ones fill).
 *
 * Items hold key and value inline, in one of three size classes (one
 * slabdefrag cache each, all with the same get()/kick()).  A chained hash
 * table under one store mutex finds them.
 *
 *   get():  store lock; for each item: not VALID (being inserted or
 *           deleted) -> NULL; otherwise pin it (pins++).  Returns NULL.
 *   kick(): for each pinned item: allocate a replacement from the same
 *           cache (no lock held), then under the lock: if the item is still
 *           VALID copy it, repoint the hash chain at the copy, unpin and
 *           free the old item; if it was deleted meanwhile, unpin it (the
 *           last pin frees it) and give the replacement back.
 *
 * Lock rule: get() takes the store mutex with a slab lock held, so the
 * allocator is never called with the store mutex held.  A delete that
 * finds an item pinned leaves the free to the pin holder.
 *
 * Workload: insert N items (values 8..200 bytes, deterministic from the key
 * and seed), delete a random 85%, shrink every cache, then check every
 * surviving key's value and checksum and that deleted keys are gone.
 *
 *   kvstore [N] [--seed S] [--delete PCT] [--malloc]
 *
 * `kvstore-malloc` is the same source with -DUSE_MALLOC (no slabdefrag).
 */
#define _GNU_SOURCE
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

#define IT_VALID 0x1u

struct item {
    struct item *h_next;
    uint64_t     hash;
    uint64_t     csum;      /* FNV-1a of key and value */
    uint32_t     flags;
    uint32_t     pins;      /* vacate references */
    uint8_t      cls;       /* size class */
    uint8_t      keylen;
    uint16_t     vallen;
    char         data[];    /* key, then value */
};

#define NCLASSES 3
static const size_t class_size[NCLASSES] = { 96, 160, 256 };
#ifndef USE_MALLOC
static const char *const class_name[NCLASSES] = {
    "kv_item_96", "kv_item_160", "kv_item_256",
};
#endif
#define VAL_MIN 8
#define VAL_MAX 200

static struct {
    pthread_mutex_t lock;
    struct item   **table;
    size_t          mask;
    size_t          nitems;
    unsigned long   get_calls, get_objects, get_nulled;
    unsigned long   kick_calls, moved, move_raced, move_nomem;
} kv = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int use_malloc;
static uint64_t seed;                   /* the run's (--seed) */
#ifndef USE_MALLOC
static sd_cache *caches[NCLASSES];
#endif

/* ------------------------------------------------------ keys and values */

static int key_of(uint32_t id, char *buf, size_t sz)
{
    return snprintf(buf, sz, "user:%08x", id);
}

static size_t vallen_of(uint32_t id)
{
    return VAL_MIN + (size_t)(bu_mix(id, seed) % (VAL_MAX - VAL_MIN + 1));
}

static void value_of(uint32_t id, char *buf, size_t len)
{
    uint64_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0)
            w = bu_mix(id ^ ((uint64_t)i << 32), seed + 7);
        buf[i] = (char)(w >> (8 * (i % 8)));
    }
}

static int class_of(size_t total)
{
    for (int c = 0; c < NCLASSES; c++)
        if (total <= class_size[c])
            return c;
    return -1;
}

static uint64_t item_csum(const struct item *it)
{
    return bu_fnv1a(it->data, (size_t)it->keylen + it->vallen,
                      0xcbf29ce484222325ULL);
}

/* ---------------------------------------------------------------- memory */

static struct item *item_alloc(int cls)
{
#ifndef USE_MALLOC
    if (!use_malloc)
        return sd_cache_alloc(caches[cls]);
#endif
    return malloc(class_size[cls]);
}

static void item_free(struct item *it)
{
#ifndef USE_MALLOC
    if (!use_malloc) {
        sd_cache_free(caches[it->cls], it);
        return;
    }
#endif
    free(it);
}

/* --------------------------------------------------------------- store */

static struct item **chain_slot_locked(const struct item *it)
{
    struct item **pp = &kv.table[it->hash & kv.mask];
    while (*pp && *pp != it)
        pp = &(*pp)->h_next;
    return *pp ? pp : NULL;
}

static struct item *find_locked(const char *key, size_t klen, uint64_t h)
{
    for (struct item *it = kv.table[h & kv.mask]; it; it = it->h_next)
        if (it->hash == h && it->keylen == klen &&
            memcmp(it->data, key, klen) == 0)
            return it;
    return NULL;
}

static int kv_set(uint32_t id)
{
    char key[32];
    size_t klen = (size_t)key_of(id, key, sizeof(key));
    size_t vlen = vallen_of(id);
    int cls = class_of(sizeof(struct item) + klen + vlen);
    if (cls < 0)
        return -1;
    struct item *it = item_alloc(cls);
    if (!it)
        return -1;
    memset(it, 0, sizeof(*it));
    it->cls = (uint8_t)cls;
    it->keylen = (uint8_t)klen;
    it->vallen = (uint16_t)vlen;
    memcpy(it->data, key, klen);
    value_of(id, it->data + klen, vlen);
    it->csum = item_csum(it);
    it->hash = bu_fnv1a(key, klen, 0xcbf29ce484222325ULL);

    struct item *old;
    pthread_mutex_lock(&kv.lock);
    old = find_locked(key, klen, it->hash);
    if (old) {                       /* replace: unlink the old one */
        struct item **pp = chain_slot_locked(old);
        *pp = old->h_next;
        old->flags &= ~IT_VALID;
        kv.nitems--;
        if (old->pins)
            old = NULL;              /* the pin holder frees it */
    }
    struct item **b = &kv.table[it->hash & kv.mask];
    it->h_next = *b;
    *b = it;
    it->flags |= IT_VALID;
    kv.nitems++;
    pthread_mutex_unlock(&kv.lock);
    if (old)
        item_free(old);
    return 0;
}

static int kv_del(uint32_t id)
{
    char key[32];
    size_t klen = (size_t)key_of(id, key, sizeof(key));
    uint64_t h = bu_fnv1a(key, klen, 0xcbf29ce484222325ULL);
    pthread_mutex_lock(&kv.lock);
    struct item *it = find_locked(key, klen, h);
    if (!it) {
        pthread_mutex_unlock(&kv.lock);
        return -1;
    }
    struct item **pp = chain_slot_locked(it);
    *pp = it->h_next;
    it->flags &= ~IT_VALID;
    kv.nitems--;
    int do_free = it->pins == 0;
    pthread_mutex_unlock(&kv.lock);
    if (do_free)
        item_free(it);
    return 0;
}

/* 0: present with the right value; 1: absent; -1: present but wrong.
 * (pins may be non-zero: a vacate on another thread may be between its
 * get() and kick().) */
static int kv_check(uint32_t id)
{
    char key[32], val[VAL_MAX];
    size_t klen = (size_t)key_of(id, key, sizeof(key));
    size_t vlen = vallen_of(id);
    uint64_t h = bu_fnv1a(key, klen, 0xcbf29ce484222325ULL);
    int rc;
    value_of(id, val, vlen);
    pthread_mutex_lock(&kv.lock);
    struct item *it = find_locked(key, klen, h);
    if (!it)
        rc = 1;
    else if (!(it->flags & IT_VALID) || it->vallen != vlen ||
             memcmp(it->data + klen, val, vlen) != 0 ||
             it->csum != item_csum(it))
        rc = -1;
    else
        rc = 0;
    pthread_mutex_unlock(&kv.lock);
    return rc;
}

/* ------------------------------------------------- the defrag callbacks */

#ifndef USE_MALLOC
static void *item_get(sd_cache *s, int nr, void **v)
{
    (void)s;
    pthread_mutex_lock(&kv.lock);
    kv.get_calls++;
    kv.get_objects += (unsigned long)nr;
    for (int i = 0; i < nr; i++) {
        struct item *it = v[i];
        if (!(it->flags & IT_VALID)) {
            v[i] = NULL;
            kv.get_nulled++;
            continue;
        }
        it->pins++;
    }
    pthread_mutex_unlock(&kv.lock);
    return NULL;
}

static void item_kick(sd_cache *s, int nr, void **v, void *private_data)
{
    (void)private_data;
    pthread_mutex_lock(&kv.lock);
    kv.kick_calls++;
    pthread_mutex_unlock(&kv.lock);
    for (int i = 0; i < nr; i++) {
        struct item *old = v[i], *new;
        int free_old = 0, free_new = 0;
        if (!old)
            continue;
        /* Allocation first, with no lock of ours held: it comes from the
         * fullest partial slab (or the thread's active slab). */
        new = sd_cache_alloc(s);
        pthread_mutex_lock(&kv.lock);
        if (!new) {
            kv.move_nomem++;
            free_old = --old->pins == 0 && !(old->flags & IT_VALID);
        } else if (!(old->flags & IT_VALID)) {
            /* Deleted while pinned: the delete left the free to us. */
            kv.move_raced++;
            free_old = --old->pins == 0;
            free_new = 1;
        } else {
            struct item **pp = chain_slot_locked(old);
            memcpy(new, old, class_size[old->cls]);
            new->pins = 0;
            *pp = new;                   /* repoint the chain */
            old->flags &= ~IT_VALID;
            free_old = --old->pins == 0;
            kv.moved++;
        }
        pthread_mutex_unlock(&kv.lock);
        if (free_new)
            sd_cache_free(s, new);
        if (free_old)
            sd_cache_free(s, old);
    }
}

static const struct sd_cache_ops item_ops = {
    .get = item_get,
    .kick = item_kick,
};

#endif

/* ----------------------------------------------------------------- main */

static void usage(void)
{
    fprintf(stderr, "usage: kvstore [N] [--seed S] [--delete PCT]%s\n", DEMO_MALLOC_OPT);
    exit(2);
}

/* The options, and what each step measured (main prints them). */
struct run {
    struct demo_run d;          /* n, seed, nb, perm, RSS, the shrink */
    uint64_t del_pct;
    unsigned char *alive;       /* per id: not deleted */
    size_t ndel;                /* keys deleted */
    size_t live_bytes_all;      /* the live items at their class size */
};

/* --delete PCT (demo_parse's own options). */
static int own_arg(int argc, char **argv, int *i, void *arg)
{
    struct run *r = arg;
    const char *v = bu_opt(argc, argv, i, "--delete");
    if (!v)
        return 0;
    return bu_parse_u64(v, &r->del_pct) || r->del_pct > 100 ? -1 : 1;
}

static void parse_args(int argc, char **argv, struct run *r)
{
    r->del_pct = 85;
    demo_parse(argc, argv, &r->d, &use_malloc, own_arg, r, usage);
    seed = r->d.seed;
}

/* The hash table, the bookkeeping arrays and the item caches. */
static int setup(struct run *r)
{
    if (demo_setup("kvstore", &r->d, use_malloc))
        return 1;
    kv.table = calloc(r->d.nb, sizeof(*kv.table));
    kv.mask = r->d.nb - 1;
    r->alive = malloc(r->d.n);
    if (!kv.table || !r->alive) {
        fprintf(stderr, "kvstore: out of memory\n");
        return 1;
    }
#ifndef USE_MALLOC
    if (!use_malloc) {
        for (int c = 0; c < NCLASSES; c++) {
            caches[c] = sd_cache_create(class_name[c], class_size[c],
                                        0, 0, NULL,
                                        &item_ops);
            if (!caches[c]) {
                perror("kvstore: sd_cache_create");
                return 1;
            }
        }
    }
#endif
    printf("n=%llu seed=%llu delete_pct=%llu\n", (unsigned long long)r->d.n,
           (unsigned long long)seed, (unsigned long long)r->del_pct);
    return 0;
}

/* 1. Load every key. */
static int load(struct run *r)
{
    for (uint32_t id = 0; id < r->d.n; id++) {
        if (kv_set(id)) {
            fprintf(stderr, "kvstore: set %u failed\n", id);
            return 1;
        }
        r->alive[id] = 1;
    }
    r->d.rss_full = proc_status_kb("VmRSS");
    return 0;
}

/* 2. Expire a random subset; count the bytes of what stays. */
static int expire(struct run *r, bu_sm *rng)
{
    r->ndel = (size_t)(r->d.n * r->del_pct / 100);
    bu_permutation(r->d.perm, r->d.n, rng);
    for (size_t i = 0; i < r->ndel; i++) {
        if (kv_del(r->d.perm[i])) {
            fprintf(stderr, "kvstore: delete %u: not found\n", r->d.perm[i]);
            return 1;
        }
        r->alive[r->d.perm[i]] = 0;
    }
    for (uint32_t id = 0; id < r->d.n; id++) {
        if (r->alive[id]) {
            char key[32];
            size_t klen = (size_t)key_of(id, key, sizeof(key));
            r->live_bytes_all += class_size[class_of(sizeof(struct item) + klen +
                                                     vallen_of(id))];
        }
    }
    return 0;
}

/* 3. Defragment: sparse slabs are emptied by moving items (RSS around it). */
static void defragment(struct run *r)
{
    demo_shrink_rss(&r->d, caches, NCLASSES, use_malloc);
}

/* 4. Verify every key: the live ones intact, the deleted ones gone. */
static void verify_keys(struct run *r)
{
    size_t present = 0;
    for (uint32_t id = 0; id < r->d.n; id++) {
        int rc = kv_check(id);
        if (rc == 0)
            present++;
        if ((r->alive[id] && rc != 0) || (!r->alive[id] && rc != 1)) {
            if (r->d.bad++ < 5)
                fprintf(stderr, "kvstore: key %u: %s\n", id,
                        rc < 0 ? "value corrupt" :
                        rc == 1 ? "lost" : "deleted key still present");
        }
    }
    if (present != kv.nitems || present != r->d.n - r->ndel) {
        fprintf(stderr, "kvstore: %zu keys present, store counts %zu, "
                "expected %zu\n", present, kv.nitems, (size_t)(r->d.n - r->ndel));
        r->d.bad++;
    }
}

/* The figures of the load, the expiry and the shrink. */
static void report(const struct run *r)
{
    printf("inserted=%llu deleted=%zu live_items=%zu\n",
           (unsigned long long)r->d.n, r->ndel, kv.nitems);
    printf("rss_kb_full=%ld\n", r->d.rss_full);
    /* Every byte the program holds: the items (at their class size), and
     * the hash table and the two bookkeeping arrays, which are live too. */
    size_t table_bytes = r->d.nb * sizeof(*kv.table) + (size_t)r->d.n * sizeof(*r->d.perm) +
                         (size_t)r->d.n;
    printf("item_bytes=%zu table_bytes=%zu\n", r->live_bytes_all, table_bytes);
    printf("live_bytes=%zu\n", r->live_bytes_all + table_bytes);
    demo_print_rss(&r->d);
}

#ifndef USE_MALLOC
/* The shrink's counters, and the allocator's count of items against the
 * store's. */
static void report_shrink(struct run *r)
{
    demo_print_shrink(r->d.shrink_rc, &r->d.tb, &r->d.ta);
    printf("get_calls=%lu get_objects=%lu get_nulled=%lu\n",
           kv.get_calls, kv.get_objects, kv.get_nulled);
    printf("kick_calls=%lu moved=%lu move_raced=%lu move_nomem=%lu\n",
           kv.kick_calls, kv.moved, kv.move_raced, kv.move_nomem);
    r->d.bad += demo_inuse_differs("kvstore", caches, NCLASSES, &kv.lock, &kv.nitems, &r->d.ta);
    if (r->d.shrink_rc < 0) {
        fprintf(stderr, "kvstore: sd_cache_shrink: %s\n",
                strerror(-r->d.shrink_rc));
        r->d.bad++;
    }
}
#endif

int main(int argc, char **argv)
{
    struct run r = { 0 };
    parse_args(argc, argv, &r);
    bu_sm rng = { seed ^ 0x6b76ULL };
    if (setup(&r) || load(&r) || expire(&r, &rng))
        return 1;
    defragment(&r);
    verify_keys(&r);
    report(&r);
#ifndef USE_MALLOC
    if (!use_malloc)
        report_shrink(&r);
    else
#endif
        printf("shrink=none\n");
    free(r.d.perm);
    free(r.alive);
    return demo_finish(r.d.bad);
}
