/*
 * bench/throughput.c - malloc/free throughput, plain C, any allocator.
 *
 *   throughput [-t THREADS] [-n ITERS] [-s SEED]
 *
 * Three phases, each timed separately:
 *   st  one thread keeps 4096 live blocks and replaces a random one per
 *       step (free + malloc of a random small size, first and last byte
 *       written), ITERS steps;
 *   mt  THREADS threads do the same, each with its own blocks (ITERS steps
 *       each);
 *   xt  cross-thread: THREADS/2 producer threads (at least one) malloc
 *       blocks and hand them in batches of 256 to a paired consumer thread,
 *       which frees them (every free is a remote free), ITERS blocks per
 *       producer.  At most 64 batches are in flight per pair.
 * Sizes: 60% 8..64 B, 30% 65..256 B, 10% 257..1024 B.
 *
 * What it measures and what it does not: allocator fast/slow paths and
 * cross-thread free handling, with a little memory traffic.  It does not
 * measure fragmentation (see frag.c).  ops = malloc + free calls.  On this
 * 2-CPU class of machine the multi-thread numbers are noisy; compare them
 * side by side in one run rather than across runs.
 *
 * Output: a human summary on stdout; `st_ops_per_s=`, `mt_ops_per_s=`,
 * `xt_ops_per_s=`, `ops_per_s=` (all phases together), `final_rss_kb=` on
 * stderr for scripts/compare.
 */
#include "benchutil.h"

#include <pthread.h>
#include <unistd.h>

#define LIVE 4096
#define BATCH 256
#define MAX_INFLIGHT 64

static long iters = 2000000;
static uint64_t seed = 42;

static size_t pick_size(bu_rng *r)
{
    unsigned p = (unsigned)(bu_next(r) % 100);
    if (p < 60)
        return bu_range(r, 8, 64);
    if (p < 90)
        return bu_range(r, 65, 256);
    return bu_range(r, 257, 1024);
}

static void touch(char *p, size_t n)
{
    p[0] = (char)n;
    p[n - 1] = (char)n;
}

/* ---- st / mt: local replace loop ---- */

struct local_arg { uint64_t seed; long iters; unsigned long sink; };

static void *local_loop(void *argp)
{
    struct local_arg *a = argp;
    bu_rng r;
    bu_seed(&r, a->seed);
    char **slot = calloc(LIVE, sizeof *slot);
    if (!slot)
        bu_die("throughput", "out of memory");
    for (int i = 0; i < LIVE; i++) {
        size_t n = pick_size(&r);
        slot[i] = malloc(n);
        if (!slot[i])
            bu_die("throughput", "malloc failed");
        touch(slot[i], n);
    }
    unsigned long sink = 0;
    for (long i = 0; i < a->iters; i++) {
        unsigned k = (unsigned)(bu_next(&r) % LIVE);
        sink += (unsigned char)slot[k][0];
        free(slot[k]);
        size_t n = pick_size(&r);
        slot[k] = malloc(n);
        if (!slot[k])
            bu_die("throughput", "malloc failed");
        touch(slot[k], n);
    }
    for (int i = 0; i < LIVE; i++)
        free(slot[i]);
    free(slot);
    a->sink = sink;
    return NULL;
}

/* ---- xt: producer/consumer pairs ---- */

struct batch { struct batch *next; int n; void *p[BATCH]; };

struct pair {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct batch *head, *tail;
    int inflight;
    int done;
    uint64_t seed;
    long iters;
    unsigned long sink;
};

static void *producer(void *argp)
{
    struct pair *q = argp;
    bu_rng r;
    bu_seed(&r, q->seed);
    long made = 0;
    while (made < q->iters) {
        struct batch *b = malloc(sizeof *b);
        if (!b)
            bu_die("throughput", "malloc failed");
        b->next = NULL;
        b->n = 0;
        while (b->n < BATCH && made < q->iters) {
            size_t n = pick_size(&r);
            char *p = malloc(n);
            if (!p)
                bu_die("throughput", "malloc failed");
            touch(p, n);
            b->p[b->n++] = p;
            made++;
        }
        pthread_mutex_lock(&q->mu);
        while (q->inflight >= MAX_INFLIGHT)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->tail)
            q->tail->next = b;
        else
            q->head = b;
        q->tail = b;
        q->inflight++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    pthread_mutex_lock(&q->mu);
    q->done = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void *consumer(void *argp)
{
    struct pair *q = argp;
    unsigned long sink = 0;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (!q->head && !q->done)
            pthread_cond_wait(&q->cv, &q->mu);
        struct batch *b = q->head;
        if (!b) {
            pthread_mutex_unlock(&q->mu);
            break;
        }
        q->head = b->next;
        if (!q->head)
            q->tail = NULL;
        q->inflight--;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        for (int i = 0; i < b->n; i++) {
            sink += (unsigned char)((char *)b->p[i])[0];
            free(b->p[i]);
        }
        free(b);
    }
    q->sink = sink;
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: throughput [-t THREADS] [-n ITERS] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int threads = 2;
    int c;
    while ((c = getopt(argc, argv, "t:n:s:h")) != -1) {
        switch (c) {
        case 't': threads = atoi(optarg); break;
        case 'n': iters = atol(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (threads < 1 || iters < 1)
        usage();
    bu_event("start");

    /* st */
    struct local_arg la = { seed, iters, 0 };
    double t0 = bu_now();
    local_loop(&la);
    double st = bu_now() - t0;
    double st_ops = 2.0 * (double)iters / st;
    bu_event("st_done");

    /* mt */
    pthread_t *tid = calloc((size_t)threads * 2, sizeof *tid);
    struct local_arg *las = calloc((size_t)threads, sizeof *las);
    if (!tid || !las)
        bu_die("throughput", "out of memory");
    t0 = bu_now();
    for (int i = 0; i < threads; i++) {
        las[i] = (struct local_arg){ seed + 1000 + (uint64_t)i, iters, 0 };
        if (pthread_create(&tid[i], NULL, local_loop, &las[i]))
            bu_die("throughput", "pthread_create failed");
    }
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    double mt = bu_now() - t0;
    double mt_ops = 2.0 * (double)iters * threads / mt;
    bu_event("mt_done");

    /* xt */
    int pairs = threads / 2 > 0 ? threads / 2 : 1;
    struct pair *pq = calloc((size_t)pairs, sizeof *pq);
    if (!pq)
        bu_die("throughput", "out of memory");
    t0 = bu_now();
    for (int i = 0; i < pairs; i++) {
        pthread_mutex_init(&pq[i].mu, NULL);
        pthread_cond_init(&pq[i].cv, NULL);
        pq[i].seed = seed + 2000 + (uint64_t)i;
        pq[i].iters = iters;
        if (pthread_create(&tid[2 * i], NULL, producer, &pq[i]) ||
            pthread_create(&tid[2 * i + 1], NULL, consumer, &pq[i]))
            bu_die("throughput", "pthread_create failed");
    }
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(tid[i], NULL);
    double xt = bu_now() - t0;
    double xt_ops = 2.0 * (double)iters * pairs / xt;
    bu_event("xt_done");

    double all_ops = 2.0 * (double)iters * (1 + threads + pairs) / (st + mt + xt);
    printf("throughput: st %.3g ops/s (%.2fs), mt x%d %.3g ops/s (%.2fs), "
           "xt %d pair(s) %.3g ops/s (%.2fs)\n",
           st_ops, st, threads, mt_ops, mt, pairs, xt_ops, xt);
    bu_kv_double("st_ops_per_s", st_ops);
    bu_kv_double("mt_ops_per_s", mt_ops);
    bu_kv_double("xt_ops_per_s", xt_ops);
    bu_kv_double("ops_per_s", all_ops);
    bu_kv_long("sink", (long long)((la.sink + las[0].sink + pq[0].sink) & 1));
    free(pq);
    free(las);
    free(tid);
    bu_final();
    return 0;
}
