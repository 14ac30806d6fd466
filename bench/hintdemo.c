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

int main(int argc, char **argv)
{
    long nrec = 500000;
    int del_pct = 85, defrag = 1;
    double hold = 0.5;
    uint64_t seed = 42;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-defrag") == 0) {
            defrag = 0;
            for (int j = i; j < argc - 1; j++)
                argv[j] = argv[j + 1];
            argc--;
            i--;
        }
    }
    int c;
    while ((c = getopt(argc, argv, "n:d:H:s:h")) != -1) {
        switch (c) {
        case 'n': nrec = atol(optarg); break;
        case 'd': del_pct = atoi(optarg); break;
        case 'H': hold = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: hintdemo [-n RECORDS] [-d DELETE_PERCENT] "
                            "[-H HOLD_SECONDS] [-s SEED] [--no-defrag]\n");
            return 2;
        }
    }
    if (nrec < 1 || del_pct < 0 || del_pct > 100)
        bu_die("hintdemo", "bad argument");

    int (*hint)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "sd_defrag_hint");
    void *(*drealloc)(void *) = (void *(*)(void *))dlsym(RTLD_DEFAULT, "sd_defrag_realloc");
    size_t (*shrink_all)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "sd_shrink_all");
    int have_hint = hint && drealloc;
    printf("hintdemo: sd_defrag_hint %s, sd_shrink_all %s\n",
           have_hint ? "found" : "absent", shrink_all ? "found" : "absent");
    bu_kv_long("have_hint", have_hint);
    bu_event("start");

    bu_rng rng;
    bu_seed(&rng, seed);
    size_t nb = 1;
    while (nb < (size_t)nrec)
        nb <<= 1;
    struct rec **tab = calloc(nb, sizeof *tab);
    if (!tab)
        bu_die("hintdemo", "out of memory");
    size_t live = nb * sizeof *tab;
    char key[80];
    for (long k = 0; k < nrec; k++) {
        size_t kl = make_key(key, (uint64_t)k);
        uint64_t h = hash_bytes(key, kl);
        struct rec *r = malloc(sizeof *r + kl + 1);
        size_t vl = bu_range(&rng, 8, 200);
        char *v = malloc(vl);
        if (!r || !v)
            bu_die("hintdemo", "malloc failed");
        memcpy(r->key, key, kl + 1);
        r->klen = (uint32_t)kl;
        r->hash = h;
        for (size_t i = 0; i < vl; i++)
            v[i] = (char)('A' + (h + i) % 26);
        r->val = v;
        r->vlen = (uint32_t)vl;
        size_t b = h & (nb - 1);
        r->next = tab[b];
        tab[b] = r;
        live += sizeof *r + kl + 1 + vl;
    }
    long rss_peak = bu_status_kb("VmRSS");
    bu_event("fill_done");

    /* Delete a random del_pct% of the keys (each key decided by the rng). */
    long deleted = 0;
    for (long k = 0; k < nrec; k++) {
        if ((long)(bu_next(&rng) % 100) >= del_pct)
            continue;
        size_t kl = make_key(key, (uint64_t)k);
        uint64_t h = hash_bytes(key, kl);
        struct rec **pp = &tab[h & (nb - 1)];
        while (*pp && !((*pp)->hash == h && (*pp)->klen == kl &&
                        memcmp((*pp)->key, key, kl) == 0))
            pp = &(*pp)->next;
        struct rec *r = *pp;
        if (!r)
            bu_die("hintdemo", "key vanished");
        *pp = r->next;
        live -= sizeof *r + r->klen + 1 + r->vlen;
        free(r->val);
        free(r);
        deleted++;
    }
    long rss_before = bu_status_kb("VmRSS");
    bu_event("delete_done");

    size_t count0, count1;
    uint64_t sum0 = checksum(tab, nb, &count0);
    long moved = 0, asked = 0;
    size_t shrunk = 0;
    if (have_hint && defrag) {
        for (size_t b = 0; b < nb; b++) {
            for (struct rec **pp = &tab[b]; *pp; pp = &(*pp)->next) {
                struct rec *r = *pp;
                asked += 2;
                if (hint(r)) {
                    struct rec *nr = drealloc(r);
                    if (nr != r) {
                        *pp = nr;
                        r = nr;
                        moved++;
                    }
                }
                if (hint(r->val)) {
                    char *nv = drealloc(r->val);
                    if (nv != r->val) {
                        r->val = nv;
                        moved++;
                    }
                }
            }
        }
        bu_event("defrag_done");
    }
    if (shrink_all && defrag) {
        bu_event("shrink");
        shrunk = shrink_all();
    }
    uint64_t sum1 = checksum(tab, nb, &count1);
    if (sum0 != sum1 || count0 != count1)
        bu_die("hintdemo", "table changed during the defrag pass");

    bu_sleep(hold);
    long rss_after = bu_status_kb("VmRSS");
    printf("hintdemo: %ld records, %ld deleted; RSS %.1f MiB full, %.1f MiB "
           "after delete, %.1f MiB after %s (%ld of %ld blocks moved, %zu bytes "
           "shrunk); live %.1f MiB\n",
           nrec, deleted, rss_peak / 1024.0, rss_before / 1024.0,
           rss_after / 1024.0,
           (have_hint && defrag) ? "defrag + hold" : "hold only",
           moved, asked, shrunk, live / 1048576.0);
    bu_kv_long("records", nrec);
    bu_kv_long("deleted", deleted);
    bu_kv_long("live_bytes", (long long)live);
    bu_kv_long("rss_peak_kb", rss_peak);
    bu_kv_long("rss_before_kb", rss_before);
    bu_kv_long("moved", moved);
    bu_kv_long("shrunk_bytes", (long long)shrunk);
    bu_kv_long("rss_after_kb", rss_after);
    bu_kv_double("rss_per_live", rss_after * 1024.0 / (double)live);
    bu_final();
    return 0;
}
