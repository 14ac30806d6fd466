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
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slabdefrag.h>

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

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "noop";
    if (!strcmp(m, "serve")) {
        serve();
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
