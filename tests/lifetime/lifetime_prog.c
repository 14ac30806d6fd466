/*
 * tests/lifetime/lifetime_prog.c - a program whose life ends the ways a
 * threaded program's can: `lifetime_prog <case>`.
 *
 * Built without slabdefrag: tests/lifetime/lifetime.sh runs each case once
 * under glibc and once under LD_PRELOAD=libslabdefrag.so with an option
 * that starts the background shrinker, and compares the two (exit status,
 * stdout).  The allocator's thread must change nothing: the process ends
 * when its last thread does, with status 0 and its atexit handler run.
 * With LIFETIME_CACHE=1 the program creates a typed cache with get/kick
 * (found with dlsym, so that the same binary runs under glibc), which
 * starts the shrinker too.
 *
 *   pthread-exit  main calls pthread_exit while a worker allocates; the
 *                 worker returns
 *   worker-exit   the same, the worker ends with pthread_exit
 *   detached      the same with a detached worker
 *   cancel        main cancels a sleeping worker, then calls pthread_exit
 *   many          64 short threads, each starting another, main gone first
 *   c11           thrd_create / thrd_exit
 *   slow-kick     with LIFETIME_CACHE=1: the cache's slabs are sparse
 *                 and its kick() takes 400 ms; the last thread ends while
 *                 the shrinker is in it, so the process ends when kick()
 *                 returns, from the shrinker's thread (past the bound of
 *                 its park), with the program's signal mask
 *   late-thread   main, the only thread, calls pthread_exit; a TSD
 *                 destructor of main starts a thread, which allocates and
 *                 ends the process
 *   fork          a worker forks; in the child that thread starts and joins
 *                 a thread, then returns: the child ends (status 0, its
 *                 atexit handler runs); the parent's worker waits for it
 *   exit-code     a worker calls exit(3) while main waits in pthread_join
 *   return        main returns 7 while a worker sleeps
 *   signal        a process-directed SIGUSR1 while every application
 *                 thread blocks it stays pending (no other thread may take
 *                 it), and is handled by main once main unblocks it; every
 *                 other thread of the process blocks SIGUSR1 and SIGTERM
 *                 and leaves SIGSEGV, SIGBUS, SIGFPE and SIGILL unblocked
 *   threads       the process has one thread (no shrinker was asked for)
 *
 * The atexit handler says whether it runs in a thread that blocks SIGTERM
 * (the program never does: that would be the allocator's thread).  Lines
 * on stdout are the same under glibc and slabdefrag; diagnostics go to
 * stderr.  A failed check prints "FAIL ..." and exits 1.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "slabdefrag.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, \
    __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static pid_t main_pid;

/* ---------------------------------------------------------------- */
/* Helpers                                                           */

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* One line with write(2): stdio buffers would be duplicated by fork and
 * are flushed by exit() itself, after the handler. */
static void say(const char *line)
{
    size_t n = strlen(line);
    if (write(1, line, n) != (ssize_t)n) { /* nothing to do */ }
}

/* The handler runs in the thread that ended the process: under glibc the
 * program's last one, whose mask the program chose (it never blocks
 * SIGTERM).  A thread that blocks it would be the allocator's. */
static void on_exit_handler(void)
{
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    if (sigismember(&cur, SIGTERM))
        say(getpid() == main_pid ? "atexit: parent, SIGTERM blocked\n"
                                 : "atexit: child, SIGTERM blocked\n");
    else
        say(getpid() == main_pid ? "atexit: parent\n" : "atexit: child\n");
}

/* Allocate and free a mixed heap, so that the shrinker has slabs to look
 * at (sparse ones: three of four blocks are freed). */
static void churn(unsigned seed)
{
    enum { N = 4000 };
    void **p = malloc(N * sizeof *p);
    CHECK(p, "malloc");
    for (unsigned i = 0; i < N; i++) {
        p[i] = malloc(16 + (seed + i * 37) % 700);
        CHECK(p[i], "malloc");
        memset(p[i], (int)i, 16);
    }
    for (unsigned i = 0; i < N; i++)
        if (i % 4) {
            free(p[i]);
            p[i] = NULL;
        }
    for (unsigned i = 0; i < N; i++)
        free(p[i]);
    free(p);
}

/* ---------------------------------------------------------------- */
/* A typed cache with get/kick (LIFETIME_CACHE=1, under slabdefrag)  */

struct item { long v[6]; };

static void *item_get(sd_cache *s, int nr, void **objs)
{
    for (int i = 0; i < nr; i++)
        objs[i] = NULL;                 /* hold on to every object */
    return NULL;
}

static int slow_kick;               /* the slow-kick case */
static int kick_started;
static sd_cache *item_cache;

static void item_kick(sd_cache *s, int nr, void **objs, void *priv)
{
    if (slow_kick && !__atomic_exchange_n(&kick_started, 1, __ATOMIC_ACQ_REL))
        sleep_ms(400);
}

static const struct sd_cache_ops item_ops = { item_get, item_kick };

static void maybe_cache(const char *case_)
{
    const char *e = getenv("LIFETIME_CACHE");
    if (!e || strcmp(e, "1"))
        return;
    typedef sd_cache *create_fn(const char *, size_t, size_t, unsigned long,
                                void (*)(void *), const struct sd_cache_ops *);
    typedef void *alloc_fn(sd_cache *);
    create_fn *create = (create_fn *)dlsym(RTLD_DEFAULT, "sd_cache_create");
    alloc_fn *alloc = (alloc_fn *)dlsym(RTLD_DEFAULT, "sd_cache_alloc");
    if (!create || !alloc)
        return;                         /* glibc: nothing to create */
    sd_cache *c = create("lifetime_item", sizeof(struct item), 0, 0, NULL, &item_ops);
    CHECK(c, "sd_cache_create: %s", strerror(errno));
    for (int i = 0; i < 1000; i++)
        CHECK(alloc(c), "sd_cache_alloc");     /* kept: live objects */
    item_cache = c;
    if (strcmp(case_, "slow-kick"))
        return;
    /* Sparse slabs: one object in 16 kept, for the shrink to vacate. */
    typedef void free_fn(sd_cache *, void *);
    free_fn *cfree_ = (free_fn *)dlsym(RTLD_DEFAULT, "sd_cache_free");
    CHECK(cfree_, "sd_cache_free");
    slow_kick = 1;
    enum { N = 20000 };
    static void *objs[N];
    for (int i = 0; i < N; i++)
        CHECK(objs[i] = alloc(c), "sd_cache_alloc");
    for (int i = 0; i < N; i++)
        if (i % 16)
            cfree_(c, objs[i]);
}

/* ---------------------------------------------------------------- */
/* Cases where main goes first                                       */

static void *worker_return(void *arg)
{
    sleep_ms(100);
    churn(1);
    return arg;
}

static void *worker_pthread_exit(void *arg)
{
    sleep_ms(100);
    churn(2);
    pthread_exit(arg);
}

static void *worker_sleep(void *arg)
{
    for (;;)
        sleep_ms(1000);                 /* a cancellation point */
    return arg;
}

static void start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int err = pthread_create(t, NULL, fn, arg);
    CHECK(!err, "pthread_create: %s", strerror(err));
}

/* Under slabdefrag with the cache: return once kick() has started. */
static void *worker_after_kick(void *arg)
{
    if (!item_cache)
        return worker_return(arg);      /* glibc: no shrinker, no kick */
    for (int i = 0; i < 500 && !__atomic_load_n(&kick_started, __ATOMIC_ACQUIRE); i++)
        sleep_ms(10);
    CHECK(__atomic_load_n(&kick_started, __ATOMIC_ACQUIRE),
          "the shrinker did not call kick() within 5 s");
    return arg;
}

static void case_main_exits(void *(*fn)(void *), int detach)
{
    pthread_t t;
    start(&t, fn, NULL);
    if (detach)
        CHECK(!pthread_detach(t), "pthread_detach");
    pthread_exit(NULL);
}

static void case_cancel(void)
{
    pthread_t t;
    start(&t, worker_sleep, NULL);
    sleep_ms(50);
    CHECK(!pthread_cancel(t), "pthread_cancel");
    pthread_exit(NULL);
}

static void *grandchild(void *arg)
{
    churn((unsigned)(long)arg);
    return NULL;
}

static void *child_starter(void *arg)
{
    pthread_t t;
    start(&t, grandchild, arg);
    CHECK(!pthread_detach(t), "pthread_detach");
    churn((unsigned)(long)arg + 1);
    return NULL;
}

static void case_many(void)
{
    for (long i = 0; i < 64; i++) {
        pthread_t t;
        start(&t, child_starter, (void *)i);
        CHECK(!pthread_detach(t), "pthread_detach");
    }
    pthread_exit(NULL);
}

static int c11_worker(void *arg)
{
    sleep_ms(100);
    churn(3);
    thrd_exit(0);
}

static void case_c11(void)
{
    thrd_t t;
    CHECK(thrd_create(&t, c11_worker, NULL) == thrd_success, "thrd_create");
    CHECK(thrd_detach(t) == thrd_success, "thrd_detach");
    thrd_exit(0);
}

/* A thread started while main ends, after every other thread is gone
 * (the allocator's count of threads went to 0 and back to 1). */
static pthread_key_t late_key;

static void *late_worker(void *arg)
{
    sleep_ms(50);
    churn(8);
    return arg;
}

static void late_destructor(void *v)
{
    pthread_t t;
    start(&t, late_worker, NULL);
    CHECK(!pthread_detach(t), "pthread_detach");
}

static void case_late_thread(void)
{
    CHECK(!pthread_key_create(&late_key, late_destructor), "pthread_key_create");
    CHECK(!pthread_setspecific(late_key, &late_key), "pthread_setspecific");
    pthread_exit(NULL);
}

/* ---------------------------------------------------------------- */
/* Fork from a secondary thread                                      */

static void *fork_worker(void *arg)
{
    sleep_ms(50);
    churn(4);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* The child: this thread is its only one.  Start and join a
         * thread, then return: the child must end here. */
        pthread_t t;
        start(&t, grandchild, (void *)5L);
        CHECK(!pthread_join(t, NULL), "pthread_join");
        return NULL;
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
    char line[64];
    if (WIFEXITED(st))
        snprintf(line, sizeof line, "child: exit %d\n", WEXITSTATUS(st));
    else
        snprintf(line, sizeof line, "child: signal %d\n", WTERMSIG(st));
    say(line);
    return NULL;
}

static void case_fork(void)
{
    pthread_t t;
    start(&t, fork_worker, NULL);
    pthread_exit(NULL);
}

/* ---------------------------------------------------------------- */
/* Exits that do not wait for the last thread                        */

static void *worker_exit3(void *arg)
{
    sleep_ms(100);
    churn(6);
    exit(3);
}

static void case_exit_code(void)
{
    pthread_t t;
    start(&t, worker_exit3, NULL);
    pthread_join(t, NULL);
    CHECK(0, "pthread_join returned: the worker was to exit(3)");
}

static int case_return(void)
{
    pthread_t t;
    start(&t, worker_sleep, NULL);
    churn(7);
    sleep_ms(50);
    return 7;
}

/* ---------------------------------------------------------------- */
/* Signals                                                           */

static volatile sig_atomic_t usr1_tid;

static void on_usr1(int sig)
{
    usr1_tid = (sig_atomic_t)syscall(SYS_gettid);
}

/* Bit `sig` of a /proc SigBlk mask (hex). */
static int mask_has(unsigned long long mask, int sig)
{
    return (int)(mask >> (sig - 1) & 1);
}

/* Every thread but the caller: SIGUSR1 and SIGTERM blocked, synchronous
 * signals not (a fault in a thread that blocks them kills the process,
 * and meshing waits for writers in a SIGSEGV handler).  Returns how many
 * threads were checked. */
/* Walk the threads other than self: check each one's signal mask (with
 * `strict`, a failed check ends the program; without, it only makes the
 * result -1).  Returns how many threads there are, or -1. */
static int other_threads(pid_t self, int strict)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d, "opendir /proc/self/task");
    int n = 0, bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == self)
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;                   /* gone meanwhile */
        unsigned long long blk = 0;
        int found = 0;
        while (fgets(buf, sizeof buf, f))
            if (sscanf(buf, "SigBlk: %llx", &blk) == 1)
                found = 1;
        fclose(f);
        int async_blocked = mask_has(blk, SIGUSR1) && mask_has(blk, SIGTERM) &&
                            mask_has(blk, SIGINT);
        int sync_open = !mask_has(blk, SIGSEGV) && !mask_has(blk, SIGBUS) &&
                        !mask_has(blk, SIGFPE) && !mask_has(blk, SIGILL);
        bad |= !found || !async_blocked || !sync_open;
        if (strict) {
            CHECK(found, "no SigBlk in %s", path);
            CHECK(async_blocked, "thread %d does not block SIGUSR1/SIGTERM/SIGINT (SigBlk %llx)",
                  (int)tid, blk);
            CHECK(sync_open, "thread %d blocks a synchronous signal (SigBlk %llx)", (int)tid,
                  blk);
        }
        n++;
    }
    closedir(d);
    return bad ? -1 : n;
}

static void case_signal(void)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    CHECK(!sigaction(SIGUSR1, &sa, NULL), "sigaction");
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    CHECK(!pthread_sigmask(SIG_BLOCK, &usr1, NULL), "pthread_sigmask");
    /* LIFETIME_MIN_THREADS (lifetime.sh): how many threads of the
     * allocator's own this configuration starts; wait for them and their
     * final masks (bounded: 10 s), so that those are what is checked. */
    const char *m = getenv("LIFETIME_MIN_THREADS");
    int want = m ? atoi(m) : 0;
    for (int i = 0; i < 1000 && other_threads(self, 0) < want; i++)
        sleep_ms(10);                   /* a thread starts with every signal blocked */
    int others = other_threads(self, 1);
    CHECK(others >= want, "%d other thread(s), expected at least %d", others, want);
    fprintf(stderr, "lifetime_prog: %d other thread(s) checked\n", others);
    CHECK(!kill(getpid(), SIGUSR1), "kill");
    sleep_ms(200);
    CHECK(usr1_tid == 0, "SIGUSR1 was taken by thread %d, not an application thread",
          (int)usr1_tid);
    CHECK(!pthread_sigmask(SIG_UNBLOCK, &usr1, NULL), "pthread_sigmask");
    /* A pending signal is delivered as the unblocking call returns. */
    CHECK(usr1_tid == self, "SIGUSR1 went to thread %d, not main (%d)",
          (int)usr1_tid, (int)self);
    say("SIGUSR1 handled by main\n");
}

static void case_threads(void)
{
    sleep_ms(100);
    DIR *d = opendir("/proc/self/task");
    CHECK(d, "opendir /proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    char line[32];
    snprintf(line, sizeof line, "threads: %d\n", n);
    say(line);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: lifetime_prog CASE");
    main_pid = getpid();
    CHECK(!atexit(on_exit_handler), "atexit");
    maybe_cache(argv[1]);
    const char *c = argv[1];
    if (!strcmp(c, "pthread-exit"))
        case_main_exits(worker_return, 0);
    else if (!strcmp(c, "worker-exit"))
        case_main_exits(worker_pthread_exit, 0);
    else if (!strcmp(c, "detached"))
        case_main_exits(worker_return, 1);
    else if (!strcmp(c, "cancel"))
        case_cancel();
    else if (!strcmp(c, "many"))
        case_many();
    else if (!strcmp(c, "c11"))
        case_c11();
    else if (!strcmp(c, "slow-kick"))
        case_main_exits(worker_after_kick, 0);
    else if (!strcmp(c, "late-thread"))
        case_late_thread();
    else if (!strcmp(c, "fork"))
        case_fork();
    else if (!strcmp(c, "exit-code"))
        case_exit_code();
    else if (!strcmp(c, "return"))
        return case_return();
    else if (!strcmp(c, "signal"))
        case_signal();
    else if (!strcmp(c, "threads"))
        case_threads();
    else
        CHECK(0, "unknown case %s", c);
    return 0;
}
