/*
 * bench/larson.c - Larson's server simulation (Larson & Krishnan, ISMM
 * 1998), our own fixed-work version: any allocator, plain C.
 *
 *   larson [-t THREADS] [-S SLOTS] [-r ROUNDS] [-n STEPS] [-m MIN] [-M MAX]
 *          [-s SEED]
 *
 * THREADS lineages (default: the number of online CPUs) run at once.  Each
 * owns an array of SLOTS (default 10000) blocks, filled by the main thread
 * before the clock starts.  A lineage runs ROUNDS (default 250) rounds, each
 * in a new thread: the round's thread does STEPS (default 20000) random
 * replacements (pick a random slot, check and free its block, malloc a new
 * one of a random size, uniform in MIN..MAX bytes, default 16..1024, and
 * tag it), then exits, and the lineage's driver thread starts the next
 * round's thread on the same array.  So the blocks a thread frees were
 * mostly allocated by threads that are gone: with STEPS = 2 x SLOTS about
 * 43% of the frees (1 - e^-2 of the slots, once each, out of 2 x SLOTS
 * frees) are of blocks another thread allocated, and their slabs or
 * thread caches were orphaned when that thread exited.
 *
 * The work is fixed (THREADS x ROUNDS x STEPS replacements, the same
 * sequence under every allocator for a seed), unlike the original, which
 * counts what it gets done in a fixed time.  The clock covers the rounds
 * (thread creation included), not the initial fill or the final frees.
 *
 * Output: a human line on stdout; on stderr `time_s=` (the rounds),
 * `ops_per_s=` (an op = one malloc or one free: 2 per step),
 * `remote_free_pct=` (the share of frees of blocks a different thread
 * allocated), `final_rss_kb=`, `peak_rss_kb=`.
 */
#include "benchutil.h"

struct slot { char *p; unsigned n; int gen; };

struct lineage {
    int id, rounds;
    struct slot *slot;
    bu_rng rng;              /* carried from round to round */
    long remote, frees;      /* written by one round's thread at a time */
    int gen;                 /* the current round, a global thread number */
};

static int nslots = 10000;
static long steps = 20000;
static size_t min_sz = 16, max_sz = 1024;

static void *round_thread(void *argp)
{
    struct lineage *L = argp;
    bu_rng r = L->rng;
    long remote = 0;
    for (long i = 0; i < steps; i++) {
        struct slot *s = &L->slot[bu_next(&r) % (uint64_t)nslots];
        bu_check("larson", s->p, s->n);
        remote += s->gen != L->gen;
        free(s->p);
        size_t n = bu_range(&r, min_sz, max_sz);
        s->p = malloc(n);
        if (!s->p)
            bu_die("larson", "malloc failed");
        bu_tag(s->p, n);
        s->n = (unsigned)n;
        s->gen = L->gen;
    }
    L->rng = r;
    L->remote += remote;
    L->frees += steps;
    return NULL;
}

/* One per lineage: runs its rounds one after another, each in a fresh
 * thread (the hand-off of the whole array to a new thread). */
static void *driver(void *argp)
{
    struct lineage *L = argp;
    for (int k = 0; k < L->rounds; k++) {
        pthread_t t;
        L->gen = 1 + L->id * L->rounds + k;     /* unique per thread */
        bu_thread("larson", &t, 256, round_thread, L);
        pthread_join(t, NULL);
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: larson [-t THREADS] [-S SLOTS] [-r ROUNDS] [-n STEPS] "
            "[-m MIN] [-M MAX] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = bu_ncpu(), rounds = 250;
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "t:S:r:n:m:M:s:h")) != -1) {
        switch (c) {
        case 't': threads = atoi(optarg); break;
        case 'S': nslots = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'n': steps = atol(optarg); break;
        case 'm': min_sz = (size_t)atol(optarg); break;
        case 'M': max_sz = (size_t)atol(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (threads < 1 || nslots < 1 || rounds < 1 || steps < 1 || min_sz < 1 ||
        max_sz < min_sz)
        usage();

    struct lineage *L = calloc((size_t)threads, sizeof *L);
    pthread_t *drv = calloc((size_t)threads, sizeof *drv);
    if (!L || !drv)
        bu_die("larson", "out of memory");
    for (int i = 0; i < threads; i++) {
        L[i].id = i;
        L[i].rounds = rounds;
        bu_seed(&L[i].rng, seed + (uint64_t)i);
        L[i].slot = calloc((size_t)nslots, sizeof *L[i].slot);
        if (!L[i].slot)
            bu_die("larson", "out of memory");
        for (int k = 0; k < nslots; k++) {      /* gen 0: the main thread */
            size_t n = bu_range(&L[i].rng, min_sz, max_sz);
            L[i].slot[k].p = malloc(n);
            if (!L[i].slot[k].p)
                bu_die("larson", "malloc failed");
            bu_tag(L[i].slot[k].p, n);
            L[i].slot[k].n = (unsigned)n;
        }
    }
    bu_event("start");
    double t0 = bu_now();
    for (int i = 0; i < threads; i++)
        bu_thread("larson", &drv[i], 64, driver, &L[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(drv[i], NULL);
    double sec = bu_now() - t0;
    bu_event("rounds_done");

    long remote = 0, frees = 0;
    for (int i = 0; i < threads; i++) {
        remote += L[i].remote;
        frees += L[i].frees;
        for (int k = 0; k < nslots; k++) {
            bu_check("larson", L[i].slot[k].p, L[i].slot[k].n);
            free(L[i].slot[k].p);
        }
        free(L[i].slot);
    }
    double ops = 2.0 * (double)frees;
    printf("larson: %d lineage(s) x %d rounds x %ld steps, %d slots of %zu..%zu B: "
           "%.2f s, %.3g ops/s, %.1f%% of frees remote\n",
           threads, rounds, steps, nslots, min_sz, max_sz, sec, ops / sec,
           100.0 * (double)remote / (double)frees);
    bu_speed(ops, sec);
    bu_kv_double("remote_free_pct", 100.0 * (double)remote / (double)frees);
    free(drv);
    free(L);
    bu_final();
    return 0;
}
