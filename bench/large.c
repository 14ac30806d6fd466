/*
 * bench/large.c - blocks above 32 KiB, any allocator, plain C.
 *
 *   large touch [-n BLOCKS] [-m MIN] [-M MAX]
 *       allocate BLOCKS (default 100,000) blocks of MIN..MAX bytes
 *       (default 40..46 KiB), write a byte in each of their pages, free
 *       them all.  The clock covers all three.
 *   large maps [-n BLOCKS] [-m MIN] [-M MAX]
 *       allocate 2 x BLOCKS (default 150,000) blocks of MIN..MAX bytes
 *       (default 40..120 KiB), write their first byte, free every other
 *       one, and count the lines of /proc/self/maps with BLOCKS live; then
 *       check that pthread_create, mmap and dlopen still work.
 *   large mixed [-t THREADS] [-w LIVE] [-n STEPS] [-m MIN] [-M MAX]
 *       each thread keeps LIVE (default 256) slots and makes STEPS
 *       (default 40,000) random steps: a slot's block is, one time in
 *       four, grown with realloc by 1.25..2x (up to 2 x MAX), else freed
 *       and replaced by a new one of MIN..MAX bytes (default 32 KiB..4 MiB,
 *       log-uniform: as many blocks of 32..64 KiB as of 2..4 MiB); every
 *       new or grown block has a byte written in each of its pages.
 *   [-s SEED] for every mode.
 *
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = a malloc, a free or a realloc), `maps=` (lines of /proc/self/maps with
 * every block live; maps mode: after the frees), `maps_end=` (after the
 * final frees), `final_rss_kb=`, `peak_rss_kb=`; maps mode also
 * `threads_ok=`, `mmap_ok=`, `dlopen_ok=` (1 or 0).
 */
#include "benchutil.h"

#include <dlfcn.h>
#include <math.h>
#include <sys/mman.h>

static long count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -1;
    long n = 0;
    int c;
    while ((c = getc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

static void touch(char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (char)i;
    p[n - 1] = 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: large touch|maps|mixed [-t THREADS] [-w LIVE] [-n N] "
            "[-m MIN] [-M MAX] [-s SEED]\n");
    exit(2);
}

static long opt_n = -1, opt_live = 256;
static size_t opt_min, opt_max;
static uint64_t opt_seed = 42;

/* ---- touch ---- */

static void run_touch(void)
{
    long n = opt_n < 0 ? 100000 : opt_n;
    size_t lo = opt_min ? opt_min : 40 << 10, hi = opt_max ? opt_max : 46 << 10;
    char **p = malloc((size_t)n * sizeof *p);
    bu_rng r;
    bu_seed(&r, opt_seed);
    double t0 = bu_now();
    for (long i = 0; i < n; i++) {
        size_t sz = bu_range(&r, lo, hi);
        p[i] = malloc(sz);
        if (!p[i])
            bu_die("large", "out of memory");
        touch(p[i], sz);
    }
    double t1 = bu_now();
    long maps = count_maps();               /* not timed */
    double t2 = bu_now();
    for (long i = 0; i < n; i++)
        free(p[i]);
    double t = (t1 - t0) + (bu_now() - t2);
    printf("touch: %ld blocks of %zu..%zu B: %.3f s, %ld mappings live\n", n, lo, hi, t, maps);
    bu_kv_double("time_s", t);
    bu_kv_double("ops_per_s", 2.0 * n / t);
    bu_kv_long("maps", maps);
    bu_kv_long("maps_end", count_maps());
    free(p);
}

/* ---- maps ---- */

static void *thread_fn(void *a) { return a; }

static void run_maps(void)
{
    long n = opt_n < 0 ? 150000 : opt_n;
    size_t lo = opt_min ? opt_min : 40 << 10, hi = opt_max ? opt_max : 120 << 10;
    char **p = malloc((size_t)2 * n * sizeof *p);
    bu_rng r;
    bu_seed(&r, opt_seed);
    double t0 = bu_now();
    for (long i = 0; i < 2 * n; i++) {
        p[i] = malloc(bu_range(&r, lo, hi));
        if (!p[i])
            bu_die("large", "out of memory");
        p[i][0] = 1;
    }
    for (long i = 0; i < 2 * n; i += 2)
        free(p[i]);
    double t = bu_now() - t0;
    long maps = count_maps();
    pthread_t th;
    int threads_ok = pthread_create(&th, NULL, thread_fn, NULL) == 0;
    if (threads_ok)
        pthread_join(th, NULL);
    void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int mmap_ok = m != MAP_FAILED;
    if (mmap_ok)
        munmap(m, 1 << 20);
    void *dl = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    int dlopen_ok = dl != NULL;
    if (dl)
        dlclose(dl);
    printf("maps: %ld live blocks of %zu..%zu B (as many freed between): %ld mappings, "
           "pthread_create %s, mmap %s, dlopen %s; %.3f s\n", n, lo, hi, maps,
           threads_ok ? "ok" : "FAILED", mmap_ok ? "ok" : "FAILED",
           dlopen_ok ? "ok" : "FAILED", t);
    bu_kv_double("time_s", t);
    bu_kv_double("ops_per_s", 3.0 * n / t);
    bu_kv_long("maps", maps);
    bu_kv_long("threads_ok", threads_ok);
    bu_kv_long("mmap_ok", mmap_ok);
    bu_kv_long("dlopen_ok", dlopen_ok);
    for (long i = 1; i < 2 * n; i += 2)
        free(p[i]);
    bu_kv_long("maps_end", count_maps());
    free(p);
}

/* ---- mixed ---- */

struct worker {
    pthread_t th;
    uint64_t seed;
    long ops;
    long maps;
};

static pthread_barrier_t live_barrier;
static int nthreads = 1;

static size_t log_uniform(bu_rng *r, size_t lo, size_t hi)
{
    double u = (double)(bu_next(r) >> 11) / 9007199254740992.0;
    return (size_t)((double)lo * exp(u * log((double)hi / (double)lo)));
}

static void *mixed_worker(void *arg)
{
    struct worker *w = arg;
    long steps = opt_n < 0 ? 40000 : opt_n;
    size_t lo = opt_min ? opt_min : 32 << 10, hi = opt_max ? opt_max : 4 << 20;
    bu_rng r;
    bu_seed(&r, w->seed);
    char **p = calloc((size_t)opt_live, sizeof *p);
    size_t *sz = calloc((size_t)opt_live, sizeof *sz);
    long ops = 0;
    for (long s = 0; s < steps; s++) {
        long i = (long)(bu_next(&r) % (uint64_t)opt_live);
        if (p[i] && bu_next(&r) % 4 == 0 && sz[i] < 2 * hi) {
            size_t n = sz[i] + sz[i] / 4 + bu_range(&r, 0, 3 * sz[i] / 4);
            char *q = realloc(p[i], n);
            if (!q)
                bu_die("large", "out of memory");
            if (q[0] != (char)0 || q[sz[i] - 1] != 1)
                bu_die("large", "realloc lost the contents");
            touch(q + sz[i], n - sz[i]);
            p[i] = q;
            sz[i] = n;
            ops++;
            continue;
        }
        if (p[i]) {
            free(p[i]);
            ops++;
        }
        sz[i] = log_uniform(&r, lo, hi);
        p[i] = malloc(sz[i]);
        if (!p[i])
            bu_die("large", "out of memory");
        touch(p[i], sz[i]);
        ops++;
    }
    pthread_barrier_wait(&live_barrier);        /* every thread's heap live */
    if (w->seed == opt_seed)
        w->maps = count_maps();
    pthread_barrier_wait(&live_barrier);
    for (long i = 0; i < opt_live; i++)
        if (p[i]) {
            free(p[i]);
            ops++;
        }
    free(p);
    free(sz);
    w->ops = ops;
    return NULL;
}

static void run_mixed(void)
{
    struct worker w[64];
    if (nthreads < 1 || nthreads > 64)
        usage();
    pthread_barrier_init(&live_barrier, NULL, (unsigned)nthreads);
    double t0 = bu_now();
    for (int i = 0; i < nthreads; i++) {
        w[i].seed = opt_seed + (uint64_t)i;
        w[i].maps = 0;
        if (pthread_create(&w[i].th, NULL, mixed_worker, &w[i]))
            bu_die("large", "pthread_create failed");
    }
    long ops = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].th, NULL);
        ops += w[i].ops;
    }
    double t = bu_now() - t0;
    printf("mixed: %d thread(s) x %ld slots, %.3f s, %ld ops, %ld mappings live\n",
           nthreads, opt_live, t, ops, w[0].maps);
    bu_kv_double("time_s", t);
    bu_kv_double("ops_per_s", (double)ops / t);
    bu_kv_long("maps", w[0].maps);
    bu_kv_long("maps_end", count_maps());
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *mode = argv[1];
    optind = 2;
    int c;
    while ((c = getopt(argc, argv, "t:w:n:m:M:s:h")) != -1) {
        switch (c) {
        case 't': nthreads = atoi(optarg); break;
        case 'w': opt_live = atol(optarg); break;
        case 'n': opt_n = atol(optarg); break;
        case 'm': opt_min = (size_t)atol(optarg); break;
        case 'M': opt_max = (size_t)atol(optarg); break;
        case 's': opt_seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (opt_live < 1 || (opt_max && opt_max < opt_min))
        usage();
    bu_event("start");
    if (!strcmp(mode, "touch"))
        run_touch();
    else if (!strcmp(mode, "maps"))
        run_maps();
    else if (!strcmp(mode, "mixed"))
        run_mixed();
    else
        usage();
    bu_final();
    return 0;
}
