/*
 * bench/batchfree.c - threads that allocate batches of one size at a time
 * and free most of what they hold at once, in allocation order and in
 * reverse, while some blocks go to another thread to be freed there (any
 * allocator, plain C).
 *
 *   batchfree [-t THREADS] [-H HOLD] [-n BATCHES] [-x SHARE] [-s SEED]
 *
 * Each of THREADS threads (default: twice the online CPUs) fills a buffer
 * of HOLD (default 200,000) slots with batches: a batch is a run of
 * blocks of one size, the sizes taking turns through a fixed table of
 * mostly small sizes with a few large ones (16 B in runs of 3,000 down to
 * 96 KiB in runs of 1).  When the buffer is full, a window of a fifth of
 * it stays live (it moves on each time) and everything else is freed: the
 * slots below the window in the order they were allocated, those above it
 * from the last one down.  One block in SHARE (default 64) is not kept
 * but handed to the next thread, which frees it at the start of its next
 * batch.  After BATCHES (default 60,000) batches per thread, everything
 * left is freed.  Which sizes and orders come when depends only on the
 * thread's number and the seed.
 *
 * What it measures: frees that come back in bursts far larger than any
 * thread or CPU cache (so batches go back to the slabs or pages and come
 * out again), walks over freelists that the bursts left in address order
 * or in reverse, and a steady trickle of cross-thread frees.
 *
 * Output: a human line on stdout; on stderr `time_s=`, `ops_per_s=` (an op
 * = one malloc or one free), `final_rss_kb=`, `peak_rss_kb=`.
 */
#include "benchutil.h"

static const struct { unsigned size, count; } table[] = {
    { 16, 3000 }, { 24, 1500 }, { 40, 800 }, { 64, 300 }, { 100, 150 },
    { 180, 80 }, { 300, 40 }, { 600, 12 }, { 1200, 6 }, { 3000, 3 },
    { 7000, 2 }, { 24000, 1 }, { 96000, 1 },
};
#define NTABLE (sizeof table / sizeof table[0])

static long threads, hold = 200000, batches = 60000, share = 64;
static uint64_t seed = 7;

struct inbox {
    pthread_mutex_t lock;
    char **blocks;              /* handed over, not yet freed */
    size_t n, cap;
} __attribute__((aligned(64)));

static struct inbox *inboxes;
static unsigned long ops_done[1024];

static void inbox_drain(struct inbox *b, unsigned long *ops)
{
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->n; i++) {
        bu_check("batchfree", b->blocks[i], 16);
        free(b->blocks[i]);
    }
    *ops += b->n;
    b->n = 0;
    pthread_mutex_unlock(&b->lock);
}

static void inbox_put(struct inbox *b, char *p)
{
    pthread_mutex_lock(&b->lock);
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        char **nb = realloc(b->blocks, cap * sizeof *nb);
        if (!nb)
            bu_die("batchfree", "out of memory");
        b->blocks = nb;
        b->cap = cap;
    }
    b->blocks[b->n++] = p;
    pthread_mutex_unlock(&b->lock);
}

static void *worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    struct inbox *mine = &inboxes[id], *next = &inboxes[(id + 1) % threads];
    char **buf = calloc((size_t)hold, sizeof *buf);
    if (!buf)
        bu_die("batchfree", "out of memory");
    bu_rng r;
    bu_seed(&r, seed + (uint64_t)id);
    long win = hold / 5, wlo = hold, whi = hold;  /* the live window: none yet */
    long pos = 0;
    unsigned long ops = 0, handed = 0;
    for (long b = 0; b < batches; b++) {
        inbox_drain(mine, &ops);
        unsigned k = (unsigned)((b + id) % (long)NTABLE);
        unsigned size = table[k].size;
        for (unsigned c = 0; c < table[k].count; c++) {
            if (pos == wlo)
                pos = whi;
            if (pos >= hold) {
                /* Full: keep the next window live, free the rest. */
                wlo = whi < hold ? whi : 0;
                whi = wlo + win < hold ? wlo + win : hold;
                for (long i = 0; i < wlo; i++) {
                    free(buf[i]);
                    buf[i] = NULL;
                }
                for (long i = hold - 1; i >= whi; i--) {
                    free(buf[i]);
                    buf[i] = NULL;
                }
                ops += (unsigned long)(hold - (whi - wlo));
                pos = wlo == 0 ? whi : 0;
            }
            char *p = malloc(size);
            if (!p)
                bu_die("batchfree", "malloc failed");
            ops++;
            if (share && bu_next(&r) % (uint64_t)share == 0 && threads > 1) {
                bu_tag(p, 16);
                inbox_put(next, p);
                handed++;
                continue;
            }
            p[0] = 0;
            p[size - 1] = 0;
            buf[pos++] = p;
        }
    }
    for (long i = 0; i < hold; i++)
        if (buf[i]) {
            free(buf[i]);
            ops++;
        }
    free(buf);
    ops_done[id % 1024] = ops;
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: batchfree [-t THREADS] [-H HOLD] [-n BATCHES] [-x SHARE] [-s SEED]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    threads = 2L * bu_ncpu();
    int c;
    while ((c = getopt(argc, argv, "t:H:n:x:s:h")) != -1) {
        switch (c) {
        case 't': threads = atol(optarg); break;
        case 'H': hold = atol(optarg); break;
        case 'n': batches = atol(optarg); break;
        case 'x': share = atol(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if (threads < 1 || threads > 1024 || hold < 10 || batches < 1 || share < 0)
        usage();
    inboxes = calloc((size_t)threads, sizeof *inboxes);
    pthread_t *t = malloc((size_t)threads * sizeof *t);
    if (!inboxes || !t)
        bu_die("batchfree", "out of memory");
    for (long i = 0; i < threads; i++)
        pthread_mutex_init(&inboxes[i].lock, NULL);
    bu_event("start");
    double t0 = bu_now();
    for (long i = 0; i < threads; i++)
        bu_thread("batchfree", &t[i], 0, worker, (void *)(intptr_t)i);
    for (long i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    unsigned long ops = 0;
    for (long i = 0; i < threads; i++) {
        inbox_drain(&inboxes[i], &ops);
        free(inboxes[i].blocks);
        ops += ops_done[i % 1024];
    }
    double sec = bu_now() - t0;
    free(t);
    free(inboxes);
    printf("batchfree: %ld threads x %ld batches, %ld slots each: %.2f s, %.3g ops/s\n",
           threads, batches, hold, sec, (double)ops / sec);
    bu_speed((double)ops, sec);
    bu_final();
    return 0;
}
