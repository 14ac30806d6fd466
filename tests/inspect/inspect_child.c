/*
 * tests/inspect/inspect_child.c - the process the inspect tests look at.
 * Linked with libslabdefrag.so (so its malloc is ours) and -rdynamic (so
 * backtraces name its functions).
 *
 *   inspect_child noop              exit at once (options tests)
 *   inspect_child serve             typed cache "inspect_obj" with 1000
 *                                   objects; prints "ready <pid>", then runs
 *                                   commands from stdin, "ok" after each:
 *       bigfree   allocate 16 MiB in 4000-byte blocks, touch, free them
 *       corrupt   free every other object, shrink the cache, overwrite the
 *                 free pointer of a free object with garbage
 *       fork      fork; the child prints "child <pid>" and serves too
 *       exit
 *   inspect_child double|overflow|uaf|invalid|trace   provoke a debug report
 *   inspect_child idle   start a second thread; allocate 16 MiB of 64 B
 *                        blocks and a 4 MiB one, free the big one and 3 of
 *                        every 4 runs of 64 small ones (a page each),
 *                        print "before <VmRSS kB>", then make no allocator
 *                        call for up to 6 s: print "after <kB>" once RSS
 *                        fell by 8 MiB, or at the end
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slabdefrag.h>

#include "../procstatus.h"

#define NOBJ 1000

/* Exported (the project builds with -fvisibility=hidden) so that dladdr
 * can name them in the allocation and free call sites of reports. */
#define VISIBLE __attribute__((noinline, visibility("default")))
VISIBLE void *inspect_alloc(size_t n) { return malloc(n); }
VISIBLE void inspect_free(void *p) { free(p); }

/* Writes the compiler cannot drop as dead stores around free(). */
static void poke(void *p, size_t off, char v, size_t n)
{
    volatile char *q = p;
    for (size_t i = 0; i < n; i++)
        q[off + i] = v;
}

static sd_cache *cache;
static void *objs[NOBJ];

static void serve(void)
{
    cache = sd_cache_create("inspect_obj", 64, 0, SD_NO_MERGE, NULL, NULL);
    if (!cache)
        exit(10);
    for (int i = 0; i < NOBJ; i++)
        objs[i] = sd_cache_alloc(cache);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "bigfree", 7)) {
            enum { N = 4096 };
            static char *big[N];
            for (int i = 0; i < N; i++) {
                big[i] = malloc(4000);
                memset(big[i], 1, 4000);
            }
            for (int i = 0; i < N; i++)
                free(big[i]);
        } else if (!strncmp(line, "corrupt", 7)) {
            void *victim = objs[500];
            for (int i = 0; i < NOBJ; i += 2) {
                sd_cache_free(cache, objs[i]);
                objs[i] = NULL;
            }
            sd_cache_shrink(cache);         /* free objects onto slab freelists */
            *(void **)victim = (void *)0xdeadbeef0UL;   /* its free pointer */
        } else if (!strncmp(line, "fork", 4)) {
            pid_t c = fork();
            if (c == 0) {
                printf("child %d\n", (int)getpid());
                fflush(stdout);
                sleep(20);
                _exit(0);
            }
        } else if (!strncmp(line, "exit", 4)) {
            break;
        }
        printf("ok\n");
        fflush(stdout);
    }
}

/* VmRSS in kB, with no allocator call (procstatus.h). */
static long rss_kb(void)
{
    return proc_status_kb("VmRSS");
}

static void *parked(void *arg)
{
    char c;
    return read(*(int *)arg, &c, 1) < 0 ? NULL : arg;  /* until exit */
}

/* An idle program with memory to give back: see the top of the file. */
static void idle(void)
{
    enum { N = 256 * 1024, RUN = 64 };
    static void *small[N];
    static int fds[2];
    pthread_t t;
    if (pipe(fds) || pthread_create(&t, NULL, parked, &fds[0]))
        exit(11);
    printf("start\n");                 /* stdout's buffer, allocated now */
    fflush(stdout);
    char *big = malloc(4 << 20);
    if (!big)
        exit(12);
    memset(big, 1, 4 << 20);
    for (int i = 0; i < N; i++) {
        small[i] = malloc(64);
        if (!small[i])
            exit(12);
        memset(small[i], 2, 64);
    }
    free(big);
    for (int i = 0; i < N; i++)
        if ((i / RUN) % 4)
            free(small[i]);
    long before = rss_kb(), now = before;
    printf("before %ld\n", before);
    fflush(stdout);
    struct timespec tick = { 0, 100 * 1000 * 1000 };
    for (int i = 0; i < 60 && now > before - 8192; i++) {
        nanosleep(&tick, NULL);
        now = rss_kb();
    }
    printf("after %ld\n", now);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "noop";
    if (!strcmp(m, "serve")) {
        serve();
        return 0;
    }
    if (!strcmp(m, "idle")) {
        idle();
        return 0;
    }
    if (!strcmp(m, "double")) {
        char *p = inspect_alloc(64);
        inspect_free(p);
        inspect_free(p);
    } else if (!strcmp(m, "overflow")) {
        char *p = inspect_alloc(64);
        poke(p, 0, 'A', 70);
        inspect_free(p);
    } else if (!strcmp(m, "uaf")) {
        char *p = inspect_alloc(64);
        inspect_free(p);
        poke(p, 10, 'X', 1);
        char *q = inspect_alloc(64);
        inspect_free(q);
    } else if (!strcmp(m, "invalid")) {
        char *p = inspect_alloc(64);
        inspect_free(p + 8);
    } else if (!strcmp(m, "trace")) {
        char *p = inspect_alloc(64);
        inspect_free(p);
    }
    printf("done\n");
    return 0;
}
