/*
 * bench/manythreads.c - memory held by many threads that each keep a few
 * small blocks and then sit idle (any allocator, plain C).
 *
 *   manythreads [-t THREADS] [-n BLOCKS] [-k KEEP] [-m MIN] [-M MAX]
 *               [-S STACK_KB] [-H HOLD_SECONDS] [-s SEED]
 *
 * The main thread reads its VmRSS (the baseline), then starts THREADS
 * threads (default 64; scripts/compare runs 2, 64, 256 and 1024) with
 * STACK_KB KiB stacks (default 64, so 1024 threads cost little stack).
 * Each thread:
 *   1. mallocs BLOCKS (default 4000) blocks of random sizes, uniform in
 *      MIN..MAX bytes (default 16..515, at least 16), and writes every
 *      byte of each;
 *   2. frees, in allocation order, every block whose index is not a
 *      multiple of KEEP (default 16): indices 1..15, 17..31, ... go, so
 *      it keeps exactly 1 block in KEEP (250 of 4000), index 0, 16, 32...
 *      The survivors are chained through their own first 16 bytes (no
 *      extra memory), and the pointer array (mmap, not malloc) is
 *      unmapped;
 *   3. parks on a condition variable.
 * When every thread is parked (and after HOLD_SECONDS more, default 0),
 * the main thread reads VmRSS and VmHWM and prints the figures below.
 * Then it releases the threads, which check and free their survivors and
 * exit.  The sizes depend only on the seed and the thread's number.
 *
 * What it measures: what the allocator keeps per thread (thread caches,
 * per-thread heaps, arenas, partly used slabs or pages) when each thread
 * has a little live data and is idle.  Nothing is subtracted from the
 * first ratio: RSS includes the thread stacks, the program and the
 * allocator's own metadata.
 *
 * Output: a human line on stdout; on stderr `threads=`, `baseline_rss_kb=`
 * (main, before any thread), `parked_rss_kb=` (VmRSS with every thread
 * parked), `live_bytes=` (requested bytes of the survivors, summed;
 * `live_mib=` the same in MiB), `live_blocks=`, `rss_per_live=` (parked
 * RSS / live bytes, raw),
 * `heap_rss_per_live=` ((parked RSS - baseline RSS) / live bytes),
 * `time_s=` (start of the first thread until all are parked),
 * `final_rss_kb=` (= parked_rss_kb: scripts/compare's "final" column is
 * the RSS while parked), `peak_rss_kb=` (VmHWM while parked).
 */
#include "benchutil.h"

#include <sys/mman.h>

struct held { struct held *next; size_t n; };   /* a survivor's first 16 B */

struct thr {
    pthread_t tid;
    int id;
    size_t live_bytes;
    long live_blocks;
    struct held *list;
};

static long nblocks = 4000, keep = 16;
static size_t min_sz = 16, max_sz = 515;
static uint64_t seed = 42;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_parked = PTHREAD_COND_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static int nthreads, parked, go;

static void *work(void *argp)
{
    struct thr *t = argp;
    bu_rng r;
    bu_seed(&r, seed + 7919 * (uint64_t)t->id);
    size_t asz = (size_t)nblocks * sizeof(char *);
    char **p = mmap(NULL, asz, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        bu_die("manythreads", "mmap failed");
    for (long i = 0; i < nblocks; i++) {
        size_t n = bu_range(&r, min_sz, max_sz);
        if (!(p[i] = malloc(n)))
            bu_die("manythreads", "malloc failed");
        memset(p[i], (int)(n & 0xff), n);
        ((struct held *)p[i])->n = n;
    }
    for (long i = 0; i < nblocks; i++) {
        struct held *h = (struct held *)p[i];
        if (i % keep) {
            free(h);
            continue;
        }
        h->next = t->list;
        t->list = h;
        t->live_bytes += h->n;
        t->live_blocks++;
    }
    munmap(p, asz);

    pthread_mutex_lock(&mu);
    if (++parked == nthreads)
        pthread_cond_signal(&all_parked);
    while (!go)
        pthread_cond_wait(&go_cv, &mu);
    pthread_mutex_unlock(&mu);

    while (t->list) {
        struct held *h = t->list;
        t->list = h->next;
        if (h->n > sizeof *h && ((char *)h)[h->n - 1] != (char)h->n)
            bu_die("manythreads", "a held block was overwritten (allocator bug?)");
        free(h);
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: manythreads [-t THREADS] [-n BLOCKS] [-k KEEP] [-m MIN] "
            "[-M MAX] [-S STACK_KB] [-H HOLD_SECONDS] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = 64;
    long stack_kb = 64;
    double hold = 0;
    int c;
    while ((c = getopt(argc, argv, "t:n:k:m:M:S:H:s:h")) != -1) {
        switch (c) {
        case 't': threads = atoi(optarg); break;
        case 'n': nblocks = atol(optarg); break;
        case 'k': keep = atol(optarg); break;
        case 'm': min_sz = (size_t)atol(optarg); break;
        case 'M': max_sz = (size_t)atol(optarg); break;
        case 'S': stack_kb = atol(optarg); break;
        case 'H': hold = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (threads < 1 || nblocks < 1 || keep < 1 || min_sz < sizeof(struct held) ||
        max_sz < min_sz || stack_kb < 16 || hold < 0)
        usage();

    nthreads = threads;
    struct thr *t = calloc((size_t)threads, sizeof *t);
    if (!t)
        bu_die("manythreads", "out of memory");
    long baseline = proc_status_kb("VmRSS");
    bu_event("start");
    double t0 = bu_now();
    for (int i = 0; i < threads; i++) {
        t[i].id = i;
        bu_thread("manythreads", &t[i].tid, (size_t)stack_kb, work, &t[i]);
    }
    pthread_mutex_lock(&mu);
    while (parked < threads)
        pthread_cond_wait(&all_parked, &mu);
    pthread_mutex_unlock(&mu);
    double sec = bu_now() - t0;
    bu_event("parked");
    bu_sleep(hold);

    long rss = proc_status_kb("VmRSS"), hwm = proc_status_kb("VmHWM");
    size_t live = 0;
    long blocks = 0;
    for (int i = 0; i < threads; i++) {
        live += t[i].live_bytes;
        blocks += t[i].live_blocks;
    }
    double ratio = live ? rss * 1024.0 / (double)live : 0;
    double heap_ratio = live ? (rss - baseline) * 1024.0 / (double)live : 0;
    printf("manythreads: %d threads parked, %ld blocks / %.2f MiB live; RSS %.1f MiB "
           "(%.2fx live), %.1f MiB above the baseline of %.1f MiB (%.2fx live)\n",
           threads, blocks, live / 1048576.0, rss / 1024.0, ratio,
           (rss - baseline) / 1024.0, baseline / 1024.0, heap_ratio);
    bu_kv_long("threads", threads);
    bu_kv_long("baseline_rss_kb", baseline);
    bu_kv_long("parked_rss_kb", rss);
    bu_kv_long("live_bytes", (long long)live);
    fprintf(stderr, "live_mib=%.2f\n", live / 1048576.0);
    bu_kv_long("live_blocks", blocks);
    bu_kv_double("rss_per_live", ratio);
    bu_kv_double("heap_rss_per_live", heap_ratio);
    bu_kv_double("time_s", sec);
    bu_kv_long("final_rss_kb", rss);
    bu_kv_long("peak_rss_kb", hwm);
    bu_event("exit");
    fflush(stderr);

    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&go_cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i].tid, NULL);
    free(t);
    return 0;
}
