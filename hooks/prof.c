/*
 * hooks/prof.c - the sampling heap profiler's tables: taking a sample
 * (backtrace, weight), finding it again at free and when its object
 * moves, and the switch.  Reports are hooks/profreport.c; the tables and
 * their locks are described in hooks/proftab.h.
 *
 * Weight (jemalloc's prof_unbias, tcmalloc's sampler): sample points are a
 * Poisson process of mean distance R over the bytes a thread allocates, so
 * an allocation of n bytes is sampled with probability p = 1 - e^(-n/R).
 * A sample stands for w = 1/p objects and n/p bytes; summed over the live
 * samples these estimate the live objects and bytes without bias (the
 * expectation of the sum over all live objects of [sampled] * 1/p is
 * their number).  The gperftools format carries raw counts with
 * "heap_v2/R" and its readers apply the same 1/p.
 *
 * Backtraces: unw_backtrace (libunwind's fast path) for each sample, with
 * the allocator's own frames cut off (the static core's frames cannot be
 * told from the program's: then all are kept).  A backtrace seen for the
 * first time is also walked with a cursor to name its frames
 * (unw_get_proc_name reads the symbol table, static functions included;
 * dladdr otherwise); libunwind may call malloc meanwhile, which the
 * thread's in_prof flag keeps from sampling again.  libunwind's shared
 * cache of unwind rules is off (UNW_CACHE_NONE): its mutex, held by
 * another thread at fork, would hang the child.
 */
#define _GNU_SOURCE
#include "prof.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "backtrace.h"
#include "cache.h"
#include "fmt.h"
#include "mallocfam.h"
#include "options.h"
#include "os.h"
#include "proftab.h"
#include "sample.h"
#include "segment.h"

SD_HIDDEN struct prof_tables *prof_tab;
SD_HIDDEN int prof_on;
SD_HIDDEN uint64_t prof_interval = PROF_DEFAULT_INTERVAL;
SD_HIDDEN unsigned long prof_dropped, prof_stack_overflow, prof_names_dropped;

static sd_mutex start_lock = SD_MUTEX_INIT;
/* Live samples, plus operations that may insert one (a new sample between
 * its check of prof_on and its insertion, a move between taking the
 * sample out and putting it back).  free stops checking for samples
 * (sdm_entry_switch) only once prof_on and this are both 0, read in that
 * order under start_lock: a new sample counts itself before it reads
 * prof_on (seq_cst, so one of the two sees the other), and a move holds a
 * reference while its sample is out of the table. */
static unsigned long prof_refs;
static uint32_t prof_gen;               /* changes at each start: threads re-arm */

/* The kick candidates' buffers (prof_kick_begin): a few at once. */
#define KICK_BUFS 4
#define KICK_MAX  4096
struct prof_kick_buf {
    int      busy;
    uint32_t n;
    void    *cand[KICK_MAX];
    uint8_t  claimed[KICK_MAX];
};
static struct prof_kick_buf *kick_bufs;

struct prof_thread {
    uint64_t rng;               /* xorshift64* state, 0: not seeded */
    uint32_t gen;               /* prof_gen this thread's countdown is for */
    uint8_t  in_prof;           /* taking a sample (libunwind may malloc) */
    struct prof_kick *kick;     /* innermost kick of this thread, or NULL */
};
static __thread struct prof_thread pt __attribute__((tls_model("initial-exec")));

/* ---------------------------------------------------------------- */
/* Numbers                                                           */

#define LN2 0.69314718055994530942

static double ln_pos(double x)          /* x > 0, normal */
{
    union { double d; uint64_t u; } v = { x };
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & ((1ull << 52) - 1)) | (1023ull << 52);
    double m = v.d;                     /* x = m * 2^e, m in [1, 2) */
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double t = (m - 1) / (m + 1), t2 = t * t, s = 0, pw = t;
    for (int k = 1; k < 24; k += 2) {   /* ln m = 2 atanh t, |t| < 0.18 */
        s += pw / k;
        pw *= t2;
    }
    return 2 * s + e * LN2;
}

static double exp_neg(double x)         /* e^-x, x >= 0 */
{
    if (x > 700)
        return 0;
    int k = (int)(x / LN2);
    double r = x - k * LN2, term = 1, sum = 1;
    for (int i = 1; i < 22; i++) {
        term *= -r / i;
        sum += term;
    }
    union { double d; uint64_t u; } v = { sum };   /* sum in (0.5, 1] */
    v.u -= (uint64_t)k << 52;
    return v.d;
}

double prof_one_minus_exp(double x)
{
    if (x >= 0.5)
        return 1 - exp_neg(x);
    double term = x, sum = x;           /* x - x^2/2! + x^3/3! - ... */
    for (int i = 2; i < 20; i++) {
        term *= -x / i;
        sum += term;
    }
    return sum;
}

static uint64_t rng_next(void)
{
    if (!pt.rng)
        pt.rng = (os_now_ns() ^ ((uint64_t)(uintptr_t)&pt << 16) ^ os_gettid()) | 1;
    pt.rng ^= pt.rng >> 12;
    pt.rng ^= pt.rng << 25;
    pt.rng ^= pt.rng >> 27;
    return pt.rng * 0x2545f4914f6cdd1dull;
}

/* Bytes to the next sample point: exponential with mean R. */
static int64_t draw_interval(void)
{
    double u = ((double)(rng_next() >> 11) + 1) * (1.0 / 9007199254740992.0);
    double v = -ln_pos(u) * (double)__atomic_load_n(&prof_interval, __ATOMIC_RELAXED);
    if (v < 1)
        return 1;
    if (v > 9e18)
        return (int64_t)9e18;
    return (int64_t)v;
}

/* ---------------------------------------------------------------- */
/* The sample table                                                  */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static struct prof_shard *shard_of(uintptr_t a)
{
    return &prof_tab->shard[mix(a) % PROF_SHARDS];
}

static uint32_t home_slot(uintptr_t a)
{
    return (uint32_t)(mix(a) >> 40) & (PROF_SHARD_SLOTS - 1);
}

/* Slot of a in sh, or -1 (linear probing; sh locked). */
static int slot_find_locked(const struct prof_shard *sh, uintptr_t a)
{
    for (uint32_t i = home_slot(a), k = 0; k < PROF_SHARD_SLOTS;
         i = (i + 1) & (PROF_SHARD_SLOTS - 1), k++) {
        if (sh->slot[i].addr == a)
            return (int)i;
        if (!sh->slot[i].addr)
            return -1;
    }
    return -1;
}

/* Might a be in sh?  0 only if it was not, at one moment during the
 * call: the seqlock's read side, without sh's lock (proftab.h).  Slot
 * addresses are read and written atomically; the rest of a slot is not
 * read here. */
static int slot_maybe(const struct prof_shard *sh, uintptr_t a)
{
    for (int tries = 0; tries < 4; tries++) {
        uint32_t s0 = __atomic_load_n(&sh->seq, __ATOMIC_ACQUIRE);
        if (s0 & 1) {
            __builtin_ia32_pause();
            continue;
        }
        int found = 0;
        for (uint32_t i = home_slot(a), k = 0; k < PROF_SHARD_SLOTS;
             i = (i + 1) & (PROF_SHARD_SLOTS - 1), k++) {
            uintptr_t v = __atomic_load_n(&sh->slot[i].addr, __ATOMIC_RELAXED);
            if (v == a)
                found = 1;
            if (v == a || !v)
                break;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&sh->seq, __ATOMIC_RELAXED) == s0)
            return found;
    }
    return 1;                           /* torn each time: ask under the lock */
}

/* A writer's bracket around changes to sh's slots (sh locked). */
static void seq_begin_locked(struct prof_shard *sh)
{
    __atomic_store_n(&sh->seq, sh->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void seq_end_locked(struct prof_shard *sh)
{
    __atomic_store_n(&sh->seq, sh->seq + 1, __ATOMIC_RELEASE);
}

/* Slot i of sh takes *v (sh locked, inside seq_begin/end). */
static void slot_put_locked(struct prof_shard *sh, uint32_t i, const struct prof_sample *v)
{
    struct prof_sample *d = &sh->slot[i];
    d->size = v->size;
    d->stack = v->stack;
    d->weight = v->weight;
    __atomic_store_n(&d->addr, v->addr, __ATOMIC_RELAXED);
}

/* Remove slot i, shifting the probe chain back (no tombstones; sh locked,
 * inside seq_begin/end). */
static void slot_remove_locked(struct prof_shard *sh, uint32_t i)
{
    const uint32_t mask = PROF_SHARD_SLOTS - 1;
    for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (!sh->slot[j].addr)
            break;
        uint32_t h = home_slot(sh->slot[j].addr);
        /* j's entry may move to i if i lies on its probe path h..j */
        if (((j - h) & mask) >= ((j - i) & mask)) {
            slot_put_locked(sh, i, &sh->slot[j]);
            i = j;
        }
    }
    __atomic_store_n(&sh->slot[i].addr, 0, __ATOMIC_RELAXED);
    sh->used--;
}

/* Count a live sample of object p in its slab's `sampled` word (count
 * and filter, core/types.h), or as a large block.  One CAS for both
 * halves, so that a count falling to 0 clears the filter without losing
 * the bit of a sample inserted meanwhile.  At 0xffff the count saturates:
 * the word stays, and frees in the slab test the filter for good. */
static void mark(uintptr_t p, int d)
{
    struct slab *s = segment_slab_of((void *)p);
    if (!s) {
        __atomic_fetch_add(&sd_sample_large, (unsigned long)(long)d, __ATOMIC_RELAXED);
        return;
    }
    uint32_t bit = sample_bit(s, (void *)p), nv;
    uint32_t v = __atomic_load_n(&s->sampled, __ATOMIC_RELAXED);
    do {
        uint32_t n = v & 0xffff;
        if (n == 0xffff)
            return;
        if (d > 0)
            nv = (v | bit) + 1;
        else
            nv = n <= 1 ? 0 : v - 1;
    } while (!__atomic_compare_exchange_n(&s->sampled, &v, nv, 0,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static void stack_count(uint32_t id, uint64_t size, int d)
{
    struct prof_stack *st = &prof_tab->stack[id];
    __atomic_fetch_add(&st->live_n, (uint64_t)(int64_t)d, __ATOMIC_RELAXED);
    __atomic_fetch_add(&st->live_bytes, (uint64_t)((int64_t)d * (int64_t)size),
                       __ATOMIC_RELAXED);
}

/* Insert a sample; 0, or -1 when the shard is full (counted). */
static int sample_insert(const struct prof_sample *smp)
{
    struct prof_shard *sh = shard_of(smp->addr);
    sd_mutex_lock(&sh->lock);
    if (sh->used >= PROF_SHARD_MAX) {
        sd_mutex_unlock(&sh->lock);
        __atomic_fetch_add(&prof_dropped, 1, __ATOMIC_RELAXED);
        return -1;
    }
    uint32_t i = home_slot(smp->addr);
    while (sh->slot[i].addr)
        i = (i + 1) & (PROF_SHARD_SLOTS - 1);
    seq_begin_locked(sh);
    slot_put_locked(sh, i, smp);
    seq_end_locked(sh);
    sh->used++;
    __atomic_fetch_add(&prof_refs, 1, __ATOMIC_SEQ_CST);
    mark(smp->addr, 1);
    stack_count(smp->stack, smp->size, 1);
    sd_mutex_unlock(&sh->lock);
    return 0;
}

static void refs_drop(void);

/* Take p's sample out into *out; 1 if it had one. */
static int sample_take_out(uintptr_t p, struct prof_sample *out)
{
    struct prof_shard *sh = shard_of(p);
    sd_mutex_lock(&sh->lock);
    int i = slot_find_locked(sh, p);
    if (i >= 0) {
        *out = sh->slot[i];
        seq_begin_locked(sh);
        slot_remove_locked(sh, (uint32_t)i);
        seq_end_locked(sh);
        mark(p, -1);
        stack_count(out->stack, out->size, -1);
    }
    sd_mutex_unlock(&sh->lock);
    if (i >= 0)
        refs_drop();
    return i >= 0;
}

/* ---------------------------------------------------------------- */
/* When free stops checking                                          */

/* free checks for samples again only from the next prof_start: switch it
 * back to plain if profiling is off and no sample lives or may be
 * inserted (prof_refs).  From a free: try only (start_lock is first in
 * the order; a start or stop holding it settles by itself). */
static void settle_locked(void)
{
    if (!__atomic_load_n(&prof_on, __ATOMIC_SEQ_CST) &&
        !__atomic_load_n(&prof_refs, __ATOMIC_SEQ_CST))
        sdm_entry_switch(0, 0);
}

static void refs_hold(void)
{
    __atomic_fetch_add(&prof_refs, 1, __ATOMIC_SEQ_CST);
}

static void refs_drop(void)
{
    if (__atomic_sub_fetch(&prof_refs, 1, __ATOMIC_SEQ_CST) == 0 &&
        !__atomic_load_n(&prof_on, __ATOMIC_SEQ_CST) && sd_mutex_trylock(&start_lock)) {
        settle_locked();
        sd_mutex_unlock(&start_lock);
    }
}

/* ---------------------------------------------------------------- */
/* Backtraces and names                                              */

/* The stack id of frames[0..n) (inserted if new; *fresh says so). */
static uint32_t stack_intern(const uintptr_t *f, uint32_t n, int *fresh)
{
    uint64_t h = 0x9ae16a3b2f90404full ^ n;
    for (uint32_t i = 0; i < n; i++)
        h = mix(h ^ f[i]);
    h |= 1;
    *fresh = 0;
    struct prof_tables *t = prof_tab;
    uint32_t i = (uint32_t)(h >> 20) % PROF_STACKS, id = 0;
    sd_mutex_lock(&t->stacks_lock);
    for (;; i = (i + 1) % PROF_STACKS) {
        struct prof_stack *st = &t->stack[i];
        if (i == 0)
            continue;                   /* id 0: the overflow stack */
        if (st->hash == h && st->nframes == n &&
            !memcmp(st->frame, f, n * sizeof *f)) {
            id = i;
            break;
        }
        if (!st->hash) {
            if (t->nstacks >= PROF_STACKS_MAX)
                break;                  /* full: id 0 */
            memcpy(st->frame, f, n * sizeof *f);
            st->nframes = n;
            st->cache = PROF_CACHE_NONE;
            __atomic_store_n(&st->hash, h, __ATOMIC_RELEASE);
            t->nstacks++;
            *fresh = 1;
            id = i;
            break;
        }
    }
    sd_mutex_unlock(&t->stacks_lock);
    if (!id)
        __atomic_fetch_add(&prof_stack_overflow, 1, __ATOMIC_RELAXED);
    return id;
}

static int name_slot(uintptr_t ip)
{
    return (int)(mix(ip) % PROF_NAMES);
}

const char *prof_name_of(uintptr_t ip)
{
    struct prof_tables *t = prof_tab;
    for (int i = name_slot(ip), k = 0; k < PROF_NAMES; i = (i + 1) % PROF_NAMES, k++) {
        uintptr_t v = __atomic_load_n(&t->name[i].ip, __ATOMIC_ACQUIRE);
        if (v == ip)
            return t->text + t->name[i].off;
        if (!v)
            break;
    }
    return "?";
}

static void name_add(uintptr_t ip, const char *name)
{
    struct prof_tables *t = prof_tab;
    size_t len = strlen(name);
    if (len > 200)
        len = 200;
    sd_mutex_lock(&t->names_lock);
    if (t->nnames >= PROF_NAMES / 4 * 3 || t->text_used + len + 1 > PROF_NAME_BYTES) {
        sd_mutex_unlock(&t->names_lock);
        __atomic_fetch_add(&prof_names_dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    int i = name_slot(ip);
    while (t->name[i].ip && t->name[i].ip != ip)
        i = (i + 1) % PROF_NAMES;
    if (!t->name[i].ip) {
        memcpy(t->text + t->text_used, name, len);
        t->text[t->text_used + len] = 0;
        t->name[i].off = t->text_used;
        t->text_used += (uint32_t)len + 1;
        t->nnames++;
        __atomic_store_n(&t->name[i].ip, ip, __ATOMIC_RELEASE);
    }
    sd_mutex_unlock(&t->names_lock);
}

/* Name the frames of a stack seen for the first time (we are still in
 * the call that took it: walk with a cursor, which gives names). */
static void name_frames(const uintptr_t *f, uint32_t n)
{
    unw_context_t uc;
    unw_cursor_t cur;
    if (unw_getcontext(&uc) || unw_init_local(&cur, &uc))
        return;
    for (int depth = 0; depth < 128; depth++) {
        unw_word_t pc = 0, off = 0;
        unw_get_reg(&cur, UNW_REG_IP, &pc);
        if (!pc)
            break;
        for (uint32_t i = 0; i < n; i++) {
            if (f[i] != (uintptr_t)pc || *prof_name_of(pc) != '?')
                continue;
            char buf[160];
            Dl_info di;
            unw_proc_info_t pi;
            /* unw_get_proc_name names the nearest symbol below pc, which
             * for a function without one (static in a stripped library)
             * is some earlier function: keep it only if it starts the
             * function that the unwind info says holds pc. */
            int named = unw_get_proc_name(&cur, buf, sizeof buf, &off) == 0 && buf[0];
            if (named && unw_get_proc_info(&cur, &pi) == 0 && pi.start_ip &&
                pc - off != pi.start_ip)
                named = 0;
            memset(&di, 0, sizeof di);
            if (named) {
                name_add(pc, buf);
            } else if (dladdr((void *)pc, &di) && di.dli_sname) {
                name_add(pc, di.dli_sname);
            } else if (di.dli_fname) {
                const char *b = strrchr(di.dli_fname, '/');
                sd_fmt(buf, sizeof buf, "%s+0x%lx", b ? b + 1 : di.dli_fname,
                       (unsigned long)(pc - (uintptr_t)di.dli_fbase));
                name_add(pc, buf);
            }
            break;
        }
        if (unw_step(&cur) <= 0)
            break;
    }
}

/* This thread's backtrace, the allocator's frames cut: its stack id. */
static uint32_t take_backtrace(void)
{
    void *raw[PROF_FRAMES + 16];
    int n = unw_backtrace(raw, PROF_FRAMES + 16);
    int first = 0;
    while (first < n && backtrace_ours(raw[first]))
        first++;
    if (first == n)
        first = 0;                      /* all ours: the static core */
    uintptr_t f[PROF_FRAMES];
    uint32_t k = 0;
    for (int i = first; i < n && k < PROF_FRAMES; i++)
        f[k++] = (uintptr_t)raw[i];
    int fresh;
    uint32_t id = stack_intern(f, k, &fresh);
    if (fresh)
        name_frames(f, k);
    return id;
}

/* ---------------------------------------------------------------- */
/* The allocation path's calls (classes/sample.h)                    */

static int prof_check(size_t n)
{
    if (pt.kick) {                      /* every allocation of the kick */
        sd_sample_left = -1;
        return SAMPLE_KICK;
    }
    if (!__atomic_load_n(&prof_on, __ATOMIC_ACQUIRE)) {
        sd_sample_left = SAMPLE_RECHECK;
        return SAMPLE_NONE;
    }
    if (pt.in_prof) {                   /* libunwind's own malloc: skip the
                                           point, keep the process going */
        sd_sample_left = draw_interval();
        return SAMPLE_NONE;
    }
    uint32_t g = __atomic_load_n(&prof_gen, __ATOMIC_RELAXED);
    if (pt.gen != g) {
        /* Counting from a recheck (or another interval): start the
         * process at this allocation's first byte.  Memoryless, so it is
         * sampled if the first point falls within its n bytes. */
        pt.gen = g;
        int64_t d = draw_interval();
        if ((uint64_t)d > n) {
            sd_sample_left = d - (int64_t)n;
            return SAMPLE_NONE;
        }
    }
    sd_sample_left = draw_interval();
    return SAMPLE_TAKE;
}

static void kick_note(void *p)
{
    struct prof_kick *k = pt.kick;
    struct slab *s = segment_slab_of(p);
    if (!k || !k->buf || !s || __atomic_load_n(&s->cache, __ATOMIC_RELAXED) != k->cache)
        return;
    struct prof_kick_buf *b = k->buf;
    if (b->n < KICK_MAX) {
        b->claimed[b->n] = 0;
        b->cand[b->n++] = p;
    }
}

static void prof_taken(void *p, size_t n, int how)
{
    if (how == SAMPLE_KICK) {
        kick_note(p);
        return;
    }
    pt.in_prof = 1;
    struct prof_sample smp = {
        .addr = (uintptr_t)p,
        .size = n,
        .stack = take_backtrace(),
    };
    double q = prof_one_minus_exp((double)n /
                                  (double)__atomic_load_n(&prof_interval, __ATOMIC_RELAXED));
    smp.weight = (float)(q > 0 ? 1 / q : 1);
    struct prof_stack *st = &prof_tab->stack[smp.stack];
    struct slab *s = segment_slab_of(p);
    uint32_t cache = s ? s->cache->id : PROF_CACHE_LARGE;
    uint32_t was = __atomic_load_n(&st->cache, __ATOMIC_RELAXED);
    if (was != cache)
        __atomic_store_n(&st->cache, was == PROF_CACHE_NONE ? cache : PROF_CACHE_MIXED,
                         __ATOMIC_RELAXED);
    refs_hold();                        /* before reading prof_on (settle) */
    if (__atomic_load_n(&prof_on, __ATOMIC_SEQ_CST) && sample_insert(&smp) == 0) {
        __atomic_fetch_add(&st->alloc_n, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&st->alloc_bytes, n, __ATOMIC_RELAXED);
    }
    refs_drop();
    pt.in_prof = 0;
}

/* A sampled object freed inside a kick: its copy is the candidate with
 * the same bytes, else the oldest unclaimed one; NULL if none. */
static void *kick_claim(struct prof_kick *k, const void *old)
{
    struct prof_kick_buf *b = k->buf;
    size_t size = k->cache->object_size;
    int any = -1;
    for (uint32_t i = 0; i < b->n; i++) {
        if (b->claimed[i])
            continue;
        if (!memcmp(b->cand[i], old, size)) {
            b->claimed[i] = 1;
            return b->cand[i];
        }
        if (any < 0)
            any = (int)i;
    }
    if (any < 0)
        return NULL;
    b->claimed[any] = 1;
    return b->cand[any];
}

static void prof_freed(void *p)
{
    if (!prof_tab || !slot_maybe(shard_of((uintptr_t)p), (uintptr_t)p))
        return;                         /* no sample: no lock taken */
    struct prof_sample smp;
    struct prof_kick *k = pt.kick;
    if (!k || !k->buf) {
        sample_take_out((uintptr_t)p, &smp);
        return;
    }
    refs_hold();                        /* while the sample is out */
    if (sample_take_out((uintptr_t)p, &smp)) {
        struct slab *s = segment_slab_of(p);
        void *q = s && s->cache == k->cache ? kick_claim(k, p) : NULL;
        if (q) {
            smp.addr = (uintptr_t)q;
            sample_insert(&smp);
        }
    }
    refs_drop();
}

void prof_moved(void *p, void *q, size_t n)
{
    if (!prof_tab)
        return;
    struct prof_sample smp;
    refs_hold();                        /* while the sample is out */
    if (sample_take_out((uintptr_t)p, &smp)) {
        smp.addr = (uintptr_t)q;
        smp.size = n;
        sample_insert(&smp);
    }
    refs_drop();
}

int prof_kick_begin(struct prof_kick *k, const struct sd_cache *c,
                    void *const *objs, int n)
{
    if (!__atomic_load_n(&prof_tab, __ATOMIC_ACQUIRE) || n <= 0)
        return 0;
    /* The kick's allocations are moves, not new objects: none of them is
     * sampled (a moved object keeps its old sample, if it had one). */
    k->buf = NULL;
    int marked = 0;
    for (int i = 0; i < n && !marked; i++)
        if (objs[i]) {
            struct slab *s = segment_slab_of(objs[i]);
            marked = s && sample_marked(s, objs[i]);
        }
    for (int i = 0; marked && i < KICK_BUFS; i++) {
        int idle = 0;
        if (__atomic_compare_exchange_n(&kick_bufs[i].busy, &idle, 1, 0,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            k->buf = &kick_bufs[i];
            k->buf->n = 0;
            break;
        }
    }
    /* (all buffers busy: the samples this kick frees are dropped) */
    k->cache = c;
    k->prev = pt.kick;
    k->saved_left = sd_sample_left;
    pt.kick = k;
    sd_sample_left = -1;                /* every allocation: prof_check */
    return 1;
}

void prof_kick_end(struct prof_kick *k)
{
    pt.kick = k->prev;
    sd_sample_left = k->prev ? -1 : k->saved_left;
    if (k->buf)
        __atomic_store_n(&k->buf->busy, 0, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- */
/* Switch, fork, set-up                                              */

int prof_start(uint64_t interval)
{
    sd_mutex_lock(&start_lock);
    if (!prof_tab) {
        void *m;
        size_t tab = (sizeof(struct prof_tables) + 4095) & ~(size_t)4095;
        size_t kb = (KICK_BUFS * sizeof(struct prof_kick_buf) + 4095) & ~(size_t)4095;
        if (os_map_sparse(tab + kb, &m)) {
            sd_mutex_unlock(&start_lock);
            return ENOMEM;
        }
        struct prof_tables *t = m;
        for (int i = 0; i < PROF_SHARDS; i++)
            t->shard[i].lock = (sd_mutex)SD_MUTEX_INIT;
        t->stacks_lock = (sd_mutex)SD_MUTEX_INIT;
        t->names_lock = (sd_mutex)SD_MUTEX_INIT;
        t->stack[0].hash = 1;           /* the overflow stack: no frames */
        t->stack[0].cache = PROF_CACHE_MIXED;
        kick_bufs = (struct prof_kick_buf *)((char *)m + tab);
        backtrace_find_self();          /* our own code, cut from backtraces */
        /* libunwind's cache of unwind rules is one table under a mutex
         * (Debian's build has no per-thread cache: UNW_CACHE_PER_THREAD
         * falls back to it): a thread that forks while another holds it
         * leaves the child's first backtrace waiting forever.  No cache
         * takes no lock; unw_backtrace's own per-thread trace cache still
         * spares the rules for frames seen before. */
        unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_NONE);
        __atomic_store_n(&prof_tab, t, __ATOMIC_RELEASE);
    }
    if (interval)
        __atomic_store_n(&prof_interval, interval, __ATOMIC_RELAXED);
    __atomic_fetch_add(&prof_gen, 1, __ATOMIC_RELAXED);
    sdm_entry_switch(0, 1);             /* free checks before any sample */
    __atomic_store_n(&prof_on, 1, __ATOMIC_SEQ_CST);
    sdm_entry_switch(1, 1);             /* malloc and calloc count down */
    if (!pt.kick)
        sd_sample_left = 0;             /* this thread: from its next byte;
                                           others from where their counters
                                           stand (0 if they never counted,
                                           at most SAMPLE_RECHECK if only
                                           sd_cache_alloc or memalign did,
                                           else the rest of the distance
                                           drawn before a prof_stop) */
    sd_mutex_unlock(&start_lock);
    return 0;
}

void prof_stop(void)
{
    sd_mutex_lock(&start_lock);
    __atomic_store_n(&prof_on, 0, __ATOMIC_SEQ_CST);
    sdm_entry_switch(0, 1);             /* malloc and calloc: plain */
    settle_locked();                    /* free too, if no sample lives */
    sd_mutex_unlock(&start_lock);
}

static void prof_fork(enum sd_fork_phase phase)
{
    struct prof_tables *t = prof_tab;
    if (phase == SD_FORK_PREPARE)
        sd_mutex_lock(&start_lock);
    if (t) {
        for (int i = 0; i < PROF_SHARDS; i++) {
            if (phase == SD_FORK_PREPARE)
                sd_mutex_lock(&t->shard[i].lock);
            else if (phase == SD_FORK_PARENT)
                sd_mutex_unlock(&t->shard[i].lock);
            else
                sd_mutex_reset_child(&t->shard[i].lock);
        }
        if (phase == SD_FORK_PREPARE) {
            sd_mutex_lock(&t->stacks_lock);
            sd_mutex_lock(&t->names_lock);
        } else if (phase == SD_FORK_PARENT) {
            sd_mutex_unlock(&t->names_lock);
            sd_mutex_unlock(&t->stacks_lock);
        } else {
            sd_mutex_reset_child(&t->names_lock);
            sd_mutex_reset_child(&t->stacks_lock);
            /* kicks of threads that did not survive the fork */
            for (int i = 0; i < KICK_BUFS; i++) {
                int mine = 0;
                for (struct prof_kick *k = pt.kick; k; k = k->prev)
                    mine |= k->buf == &kick_bufs[i];
                if (!mine)
                    kick_bufs[i].busy = 0;
            }
        }
    }
    if (phase == SD_FORK_PARENT)
        sd_mutex_unlock(&start_lock);
    else if (phase == SD_FORK_CHILD)
        sd_mutex_reset_child(&start_lock);
}

static const struct sample_ops prof_ops = {
    .check = prof_check,
    .taken = prof_taken,
    .freed = prof_freed,
    .moved = prof_moved,
    .fork = prof_fork,
};

__attribute__((constructor(102))) static void prof_init(void)
{
    options_init();
    __atomic_store_n(&sd_sample_ops, &prof_ops, __ATOMIC_RELEASE);
    if (sd_opt.prof && prof_start(sd_opt.prof_interval))
        sd_warn("SLABDEFRAG_PROF: cannot map the profiler's tables; profiling off");
}
