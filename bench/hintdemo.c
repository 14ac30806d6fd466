/*
 * bench/hintdemo.c - defragmenting plain malloc memory with the defrag hint.
 *
 *   hintdemo [-n RECORDS] [-d DELETE_PERCENT] [-H HOLD_SECONDS] [-s SEED]
 *            [--no-defrag]
 *
 * A chained hash table of RECORDS (default 500000) records, each a
 * malloc()ed struct with its key inline (41..89 B) plus a separately
 * malloc()ed value string (8..200 B).  Then a random DELETE_PERCENT%
 * (default 85) of the keys are deleted, leaving the survivors scattered.
 *
 * Under slabdefrag, the program then walks the table once and, for each
 * record and each value, asks sd_defrag_hint(ptr) whether moving it would
 * help empty a sparse slab; if so it calls sd_defrag_realloc(ptr) and
 * repoints the table's pointer to the copy (the Redis "active defrag"
 * model).  Finally it calls sd_shrink_all() to give the emptied slabs
 * back.  Both functions are looked up with dlsym(RTLD_DEFAULT, ...), so the
 * same binary, linked only with libc, runs under every allocator: where
 * they are absent (glibc, jemalloc, ...) the defrag pass is skipped and the
 * program only holds, so the figures show what each allocator does without
 * help.  --no-defrag skips the pass under slabdefrag too.
 *
 * Reported on stderr (key=value): live_bytes (requested bytes of the
 * survivors plus the bucket array), rss_peak_kb (table full),
 * rss_before_kb (after the deletes), moved (blocks moved), shrunk_bytes
 * (sd_shrink_all()'s return), rss_after_kb and final_rss_kb (after the
 * hold), rss_per_live; events delete_done, defrag_done, shrink.  The table
 * contents are checksummed before and after the pass.
 */
#include "benchutil.h"

#include <dlfcn.h>
#include <unistd.h>

struct rec {
    struct rec *next;
    uint64_t hash;
    char *val;
    uint32_t vlen;
    uint32_t klen;
    char key[];
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Key number k as text, padded to a length derived from k (8..56). */
static size_t make_key(char *buf, uint64_t k)
{
    int n = sprintf(buf, "key:%llu:", (unsigned long long)k);
    size_t want = 8 + (size_t)((k * 2654435761ULL) % 49);
    while ((size_t)n < want) {
        buf[n] = (char)('a' + (k + (uint64_t)n) % 26);
        n++;
    }
    buf[n] = '\0';
    return (size_t)n;
}

static uint64_t checksum(struct rec **tab, size_t nb, size_t *count)
{
    uint64_t sum = 0;
    size_t c = 0;
    for (size_t b = 0; b < nb; b++)
        for (struct rec *r = tab[b]; r; r = r->next) {
            sum += r->hash ^ hash_bytes(r->val, r->vlen);
            c++;
        }
    *count = c;
    return sum;
}

/* The options, the table, and what each step measured. */
struct run {
    long nrec;
    int del_pct, defrag;
    double hold;                /* seconds to wait before the last RSS */
    uint64_t seed;
    /* the extension API, found at run time (NULL without slabdefrag) */
    int (*hint)(const void *);
    void *(*drealloc)(void *);
    size_t (*shrink_all)(void);
    int have_hint;
    struct rec **tab;
    size_t nb;                  /* buckets */
    size_t live;                /* bytes the program holds */
    long deleted, moved, asked;
    size_t shrunk;
    long rss_peak, rss_before, rss_after;
};

static void parse_args(int argc, char **argv, struct run *r)
{
    r->nrec = 500000;
    r->del_pct = 85;
    r->defrag = 1;
    r->hold = 0.5;
    r->seed = 42;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-defrag") == 0) {
            r->defrag = 0;
            for (int j = i; j < argc - 1; j++)
                argv[j] = argv[j + 1];
            argc--;
            i--;
        }
    }
    int c;
    while ((c = getopt(argc, argv, "n:d:H:s:h")) != -1) {
        switch (c) {
        case 'n': r->nrec = atol(optarg); break;
        case 'd': r->del_pct = atoi(optarg); break;
        case 'H': r->hold = atof(optarg); break;
        case 's': r->seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: hintdemo [-n RECORDS] [-d DELETE_PERCENT] "
                            "[-H HOLD_SECONDS] [-s SEED] [--no-defrag]\n");
            exit(2);
        }
    }
    if (r->nrec < 1 || r->del_pct < 0 || r->del_pct > 100)
        bu_die("hintdemo", "bad argument");
}

/* sd_defrag_hint, sd_defrag_realloc and sd_shrink_all, if the process's
 * malloc is slabdefrag. */
static void find_api(struct run *r)
{
    r->hint = (int (*)(const void *))dlsym(RTLD_DEFAULT, "sd_defrag_hint");
    r->drealloc = (void *(*)(void *))dlsym(RTLD_DEFAULT, "sd_defrag_realloc");
    r->shrink_all = (size_t (*)(void))dlsym(RTLD_DEFAULT, "sd_shrink_all");
    r->have_hint = r->hint && r->drealloc;
    printf("hintdemo: sd_defrag_hint %s, sd_shrink_all %s\n",
           r->have_hint ? "found" : "absent", r->shrink_all ? "found" : "absent");
    bu_kv_long("have_hint", r->have_hint);
}

/* nrec records (a key and a value of 8..200 bytes each) in the table. */
static void fill(struct run *r, bu_rng *rng)
{
    r->nb = 1;
    while (r->nb < (size_t)r->nrec)
        r->nb <<= 1;
    r->tab = calloc(r->nb, sizeof *r->tab);
    if (!r->tab)
        bu_die("hintdemo", "out of memory");
    r->live = r->nb * sizeof *r->tab;
    char key[80];
    for (long k = 0; k < r->nrec; k++) {
        size_t kl = make_key(key, (uint64_t)k);
        uint64_t h = hash_bytes(key, kl);
        struct rec *e = malloc(sizeof *e + kl + 1);
        size_t vl = bu_range(rng, 8, 200);
        char *v = malloc(vl);
        if (!e || !v)
            bu_die("hintdemo", "malloc failed");
        memcpy(e->key, key, kl + 1);
        e->klen = (uint32_t)kl;
        e->hash = h;
        for (size_t i = 0; i < vl; i++)
            v[i] = (char)('A' + (h + i) % 26);
        e->val = v;
        e->vlen = (uint32_t)vl;
        size_t b = h & (r->nb - 1);
        e->next = r->tab[b];
        r->tab[b] = e;
        r->live += sizeof *e + kl + 1 + vl;
    }
    r->rss_peak = proc_status_kb("VmRSS");
}

/* Delete a random del_pct% of the keys (each key decided by the rng). */
static void delete_some(struct run *r, bu_rng *rng)
{
    char key[80];
    for (long k = 0; k < r->nrec; k++) {
        if ((long)(bu_next(rng) % 100) >= r->del_pct)
            continue;
        size_t kl = make_key(key, (uint64_t)k);
        uint64_t h = hash_bytes(key, kl);
        struct rec **pp = &r->tab[h & (r->nb - 1)];
        while (*pp && !((*pp)->hash == h && (*pp)->klen == kl &&
                        memcmp((*pp)->key, key, kl) == 0))
            pp = &(*pp)->next;
        struct rec *e = *pp;
        if (!e)
            bu_die("hintdemo", "key vanished");
        *pp = e->next;
        r->live -= sizeof *e + e->klen + 1 + e->vlen;
        free(e->val);
        free(e);
        r->deleted++;
    }
    r->rss_before = proc_status_kb("VmRSS");
}

/* Move every record and value the allocator hints at (sd_defrag_hint ->
 * sd_defrag_realloc), repointing the table. */
static void move_hinted(struct run *r)
{
    for (size_t b = 0; b < r->nb; b++) {
        for (struct rec **pp = &r->tab[b]; *pp; pp = &(*pp)->next) {
            struct rec *e = *pp;
            r->asked += 2;
            if (r->hint(e)) {
                struct rec *ne = r->drealloc(e);
                if (ne != e) {
                    *pp = ne;
                    e = ne;
                    r->moved++;
                }
            }
            if (r->hint(e->val)) {
                char *nv = r->drealloc(e->val);
                if (nv != e->val) {
                    e->val = nv;
                    r->moved++;
                }
            }
        }
    }
}

/* The defrag pass and the shrink, if asked for and available; the table
 * must hold the same records afterwards. */
static void defragment(struct run *r)
{
    size_t count0, count1;
    uint64_t sum0 = checksum(r->tab, r->nb, &count0);
    if (r->have_hint && r->defrag) {
        move_hinted(r);
        bu_event("defrag_done");
    }
    if (r->shrink_all && r->defrag) {
        bu_event("shrink");
        r->shrunk = r->shrink_all();
    }
    uint64_t sum1 = checksum(r->tab, r->nb, &count1);
    if (sum0 != sum1 || count0 != count1)
        bu_die("hintdemo", "table changed during the defrag pass");
}

static void report(const struct run *r)
{
    printf("hintdemo: %ld records, %ld deleted; RSS %.1f MiB full, %.1f MiB "
           "after delete, %.1f MiB after %s (%ld of %ld blocks moved, %zu bytes "
           "shrunk); live %.1f MiB\n",
           r->nrec, r->deleted, r->rss_peak / 1024.0, r->rss_before / 1024.0,
           r->rss_after / 1024.0,
           (r->have_hint && r->defrag) ? "defrag + hold" : "hold only",
           r->moved, r->asked, r->shrunk, r->live / 1048576.0);
    bu_kv_long("records", r->nrec);
    bu_kv_long("deleted", r->deleted);
    bu_kv_long("live_bytes", (long long)r->live);
    bu_kv_long("rss_peak_kb", r->rss_peak);
    bu_kv_long("rss_before_kb", r->rss_before);
    bu_kv_long("moved", r->moved);
    bu_kv_long("shrunk_bytes", (long long)r->shrunk);
    bu_kv_long("rss_after_kb", r->rss_after);
    bu_kv_double("rss_per_live", r->rss_after * 1024.0 / (double)r->live);
}

int main(int argc, char **argv)
{
    struct run r = { 0 };
    parse_args(argc, argv, &r);
    find_api(&r);
    bu_event("start");
    bu_rng rng;
    bu_seed(&rng, r.seed);
    fill(&r, &rng);
    bu_event("fill_done");
    delete_some(&r, &rng);
    bu_event("delete_done");
    defragment(&r);
    bu_sleep(r.hold);
    r.rss_after = proc_status_kb("VmRSS");
    report(&r);
    bu_final();
    return 0;
}
