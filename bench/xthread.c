/*
 * bench/xthread.c - blocks allocated in one thread and freed in another:
 * producer/consumer pairs passing batches of pointers (any allocator,
 * plain C).
 *
 *   xthread [-p PAIRS] [-n BLOCKS] [-b BATCH] [-q QUEUE] [-m MIN] [-M MAX]
 *           [-s SEED]
 *
 * PAIRS (default: half the online CPUs, at least 1) producer/consumer
 * pairs.  Each producer mallocs BLOCKS (default 5,000,000) blocks of random
 * sizes, uniform in MIN..MAX bytes (default 16..512), tags them, and puts
 * them in batches of BATCH (default 1000) pointers on its pair's queue;
 * the consumer takes a batch, checks and frees every block in it.  So
 * every free is of a block another (live) thread allocated: the
 * allocator's remote-free path, and how fast the producer's memory comes
 * back to it.  The queue is a ring of QUEUE (default 8) batch buffers
 * allocated up front (outside the clock), so the only allocator calls are
 * the blocks' malloc and free; a producer that finds the ring full waits
 * (mutex and condition variable), and so does a consumer that finds it
 * empty.  At most QUEUE x BATCH blocks of a pair are in flight.
 *
 * The clock runs from the start of the threads to the last consumer's end.
 *
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = one malloc or one free: 2 per block, summed over the pairs),
 * `final_rss_kb=`, `peak_rss_kb=`.
 */
#include "benchutil.h"

struct pair {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void ***ring;             /* QUEUE buffers of BATCH pointers */
    int *fill;                /* pointers in each buffer */
    long head, tail;          /* batches produced / consumed */
    uint64_t seed;
    pthread_t prod, cons;
};

static long blocks = 5000000;
static int batch = 1000, queue = 8;
static size_t min_sz = 16, max_sz = 512;

static void *producer(void *argp)
{
    struct pair *q = argp;
    bu_rng r;
    bu_seed(&r, q->seed);
    for (long made = 0; made < blocks; ) {
        pthread_mutex_lock(&q->mu);
        while (q->head - q->tail >= queue)
            pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
        int slot = (int)(q->head % queue), n = 0;
        void **b = q->ring[slot];
        for (; n < batch && made < blocks; n++, made++) {
            size_t sz = bu_range(&r, min_sz, max_sz);
            char *p = malloc(sz);
            if (!p)
                bu_die("xthread", "malloc failed");
            bu_tag(p, sz);
            b[n] = p;
        }
        q->fill[slot] = n;
        pthread_mutex_lock(&q->mu);
        q->head++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    return NULL;
}

static void *consumer(void *argp)
{
    struct pair *q = argp;
    long nbatches = (blocks + batch - 1) / batch;
    /* The producer's sizes are not passed along: the consumer re-derives
     * them from the same seed, so it can check every block's tag. */
    bu_rng r;
    bu_seed(&r, q->seed);
    for (long k = 0; k < nbatches; k++) {
        pthread_mutex_lock(&q->mu);
        while (q->head == q->tail)
            pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
        int slot = (int)(q->tail % queue);
        void **b = q->ring[slot];
        for (int i = 0; i < q->fill[slot]; i++) {
            bu_check("xthread", b[i], bu_range(&r, min_sz, max_sz));
            free(b[i]);
        }
        pthread_mutex_lock(&q->mu);
        q->tail++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: xthread [-p PAIRS] [-n BLOCKS] [-b BATCH] [-q QUEUE] "
            "[-m MIN] [-M MAX] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int pairs = bu_ncpu() / 2 > 0 ? bu_ncpu() / 2 : 1;
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "p:n:b:q:m:M:s:h")) != -1) {
        switch (c) {
        case 'p': pairs = atoi(optarg); break;
        case 'n': blocks = atol(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'q': queue = atoi(optarg); break;
        case 'm': min_sz = (size_t)atol(optarg); break;
        case 'M': max_sz = (size_t)atol(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (pairs < 1 || blocks < 1 || batch < 1 || queue < 1 || min_sz < 1 ||
        max_sz < min_sz)
        usage();

    struct pair *pq = calloc((size_t)pairs, sizeof *pq);
    if (!pq)
        bu_die("xthread", "out of memory");
    for (int i = 0; i < pairs; i++) {
        pthread_mutex_init(&pq[i].mu, NULL);
        pthread_cond_init(&pq[i].cv, NULL);
        pq[i].seed = seed + 1000 * (uint64_t)i;
        pq[i].ring = calloc((size_t)queue, sizeof *pq[i].ring);
        pq[i].fill = calloc((size_t)queue, sizeof *pq[i].fill);
        if (!pq[i].ring || !pq[i].fill)
            bu_die("xthread", "out of memory");
        for (int k = 0; k < queue; k++)
            if (!(pq[i].ring[k] = malloc((size_t)batch * sizeof(void *))))
                bu_die("xthread", "out of memory");
    }
    bu_event("start");
    double t0 = bu_now();
    for (int i = 0; i < pairs; i++) {
        bu_thread("xthread", &pq[i].prod, 0, producer, &pq[i]);
        bu_thread("xthread", &pq[i].cons, 0, consumer, &pq[i]);
    }
    for (int i = 0; i < pairs; i++) {
        pthread_join(pq[i].prod, NULL);
        pthread_join(pq[i].cons, NULL);
    }
    double sec = bu_now() - t0;
    double ops = 2.0 * (double)blocks * pairs;
    printf("xthread: %d pair(s) x %ld blocks of %zu..%zu B in batches of %d "
           "(ring of %d): %.2f s, %.3g ops/s\n",
           pairs, blocks, min_sz, max_sz, batch, queue, sec, ops / sec);
    bu_speed(ops, sec);
    for (int i = 0; i < pairs; i++) {
        for (int k = 0; k < queue; k++)
            free(pq[i].ring[k]);
        free(pq[i].ring);
        free(pq[i].fill);
    }
    free(pq);
    bu_final();
    return 0;
}
