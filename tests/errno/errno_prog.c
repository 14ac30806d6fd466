/*
 * tests/errno/errno_prog.c - every failing call of the malloc family, and
 * what it returns and leaves in errno; and errno across calls that
 * succeed.  Built without slabdefrag: tests/errno/errno.sh runs it plainly
 * (glibc, the reference) and under LD_PRELOAD and compares the lines.
 *
 * Each line is "<call>: <result> errno=<name>", with no address in it.
 * Before each call errno is set to 1234 (printed "kept"), so a call that
 * leaves errno alone and one that sets it are told apart.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEPT 1234

/* Through volatile pointers: the compiler neither folds nor warns. */
static void *(*volatile malloc_fn)(size_t) = malloc;
static void *(*volatile calloc_fn)(size_t, size_t) = calloc;
static void *(*volatile realloc_fn)(void *, size_t) = realloc;
static void *(*volatile reallocarray_fn)(void *, size_t, size_t) = reallocarray;
static void *(*volatile memalign_fn)(size_t, size_t) = memalign;
static void *(*volatile aligned_alloc_fn)(size_t, size_t) = aligned_alloc;
static int (*volatile posix_memalign_fn)(void **, size_t, size_t) = posix_memalign;
static void *(*volatile valloc_fn)(size_t) = valloc;
static void *(*volatile pvalloc_fn)(size_t) = pvalloc;
static size_t (*volatile usable_fn)(void *) = malloc_usable_size;
static void (*volatile free_fn)(void *) = free;

static const char *errname(int e)
{
    switch (e) {
    case KEPT:   return "kept";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case 0:      return "0";
    default:     return strerrorname_np(e) ? strerrorname_np(e) : "?";
    }
}

/* A pointer result: NULL, or "ok" (the block is freed). */
static void ptr(const char *call, void *p, int e)
{
    printf("%s: %s errno=%s\n", call, p ? "ok" : "NULL", errname(e));
    free_fn(p);
}

#define P(call)                                                             \
    do {                                                                    \
        errno = KEPT;                                                       \
        void *p_ = (call);                                                  \
        ptr(#call, p_, errno);                                              \
    } while (0)

static void posix(const char *call, size_t align, size_t n)
{
    void *p = (void *)0x1;
    errno = KEPT;
    int r = posix_memalign_fn(&p, align, n);
    int e = errno;
    printf("%s: ret=%s errno=%s memptr=%s\n", call, r ? errname(r) : "0", errname(e),
           p == (void *)0x1 ? "untouched" : "set");
    if (!r)
        free_fn(p);
}

static void failing_calls(void)
{
    const size_t big = SIZE_MAX, half = SIZE_MAX / 2 + 1, pd = PTRDIFF_MAX;
    P(malloc_fn(big));
    P(malloc_fn(pd + 1));
    P(malloc_fn(pd));
    P(malloc_fn(big - 4096));
    P(calloc_fn(half, 2));
    P(calloc_fn(2, half));
    P(calloc_fn(big, big));
    P(calloc_fn(1, big));
    P(calloc_fn(pd / 2, 4));
    P(realloc_fn(NULL, big));
    P(realloc_fn(NULL, pd + 1));
    P(reallocarray_fn(NULL, half, 2));
    P(reallocarray_fn(NULL, 1, big));
    P(memalign_fn(64, big));
    P(memalign_fn(4096, pd));
    P(memalign_fn(half, 16));
    P(memalign_fn(big, 16));
    P(aligned_alloc_fn(64, big));
    P(aligned_alloc_fn(1 << 21, pd));
    P(valloc_fn(big));
    P(valloc_fn(pd));
    P(pvalloc_fn(big));
    P(pvalloc_fn(big - 8192));
    posix("posix_memalign(0)", 0, 16);
    posix("posix_memalign(4)", 4, 16);
    posix("posix_memalign(24)", 24, 16);
    posix("posix_memalign(4095)", 4095, 16);
    posix("posix_memalign(64, SIZE_MAX)", 64, big);
    posix("posix_memalign(4096, PTRDIFF_MAX)", 4096, pd);
    posix("posix_memalign(half, 16)", half, 16);
    posix("posix_memalign(16, 100)", 16, 100);

    /* realloc of a live block: failure keeps it; size 0 frees it. */
    size_t sizes[] = { 24, 5000, 200000 };
    for (int k = 0; k < 3; k++) {
        char *b = malloc_fn(sizes[k]);
        memset(b, 7, sizes[k]);
        errno = KEPT;
        void *q = realloc_fn(b, big);
        int e = errno;
        printf("realloc(%zu -> SIZE_MAX): %s errno=%s block=%s\n", sizes[k],
               q ? "ok" : "NULL", errname(e), b[sizes[k] - 1] == 7 ? "kept" : "changed");
        errno = KEPT;
        q = reallocarray_fn(b, half, 4);
        e = errno;
        printf("reallocarray(%zu -> overflow): %s errno=%s\n", sizes[k], q ? "ok" : "NULL",
               errname(e));
        errno = KEPT;
        q = realloc_fn(b, 0);
        printf("realloc(%zu -> 0): %s errno=%s\n", sizes[k], q ? "ok" : "NULL",
               errname(errno));
        free_fn(q);
    }
    errno = KEPT;
    size_t u = usable_fn(NULL);
    printf("malloc_usable_size(NULL): %zu errno=%s\n", u, errname(errno));
}

/* Calls that succeed leave errno alone, frees included (glibc 2.33+). */
static void succeeding_calls(void)
{
    size_t sizes[] = { 0, 1, 16, 100, 1000, 20000, 32768, 40000, 300000, 3 << 20,
                       20 << 20 };
    int bad = 0;
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 11; k++) {
            size_t n = sizes[k];
            void *v[6];
            errno = KEPT;
            v[0] = malloc_fn(n);
            v[1] = calloc_fn(1, n);
            v[2] = realloc_fn(malloc_fn(8), n + 1);
            v[3] = memalign_fn(256, n);
            v[4] = aligned_alloc_fn(4096, n);
            void *q = NULL;
            posix_memalign_fn(&q, 64, n);
            v[5] = q;
            if (errno != KEPT)
                bad++, printf("allocations of %zu: errno=%s\n", n, errname(errno));
            for (int i = 0; i < 6; i++) {
                usable_fn(v[i]);
                free_fn(v[i]);
            }
            free_fn(NULL);
            if (errno != KEPT)
                bad++, printf("frees of %zu: errno=%s\n", n, errname(errno));
        }
    /* Many frees of one size: some return blocks to the OS. */
    enum { N = 20000 };
    static void *many[N];
    for (int i = 0; i < N; i++)
        many[i] = malloc_fn(i % 2 ? 48 : 2000);
    errno = KEPT;
    for (int i = 0; i < N; i++)
        free_fn(many[i]);
    malloc_trim(0);
    if (errno != KEPT)
        bad++, printf("many frees: errno=%s\n", errname(errno));
    printf("successes keep errno: %s\n", bad ? "no" : "yes");
}

/* VmSize of this process, bytes. */
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb << 10;
}

/* Out of address space (RLIMIT_AS 32 MiB above what the process has). */
static void limited(void)
{
    void *small = malloc_fn(100);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit r = { vm_size() + (32u << 20), vm_size() + (32u << 20) };
        setrlimit(RLIMIT_AS, &r);
        P(malloc_fn(64u << 20));
        P(calloc_fn(1, 64u << 20));
        P(memalign_fn(4096, 64u << 20));
        P(valloc_fn(64u << 20));
        posix("rlimit posix_memalign(64, 64M)", 64, 64u << 20);
        errno = KEPT;
        void *q = realloc_fn(small, 64u << 20);
        printf("rlimit realloc(100 -> 64M): %s errno=%s\n", q ? "ok" : "NULL",
               errname(errno));
        /* Small blocks until the limit: the one that fails says ENOMEM. */
        size_t n = 0, cap = (256u << 20) / 1024;
        void **keep = NULL;
        int e = 0;
        for (void *p = malloc_fn(1024); n < cap; p = malloc_fn(1024)) {
            if (!p) {
                e = errno;
                break;
            }
            *(void **)p = keep;
            keep = p;
            n++;
        }
        printf("rlimit 1 KiB blocks until the limit: %s errno=%s\n",
               n < cap ? "NULL" : "never", errname(e));
        while (keep) {
            void *next = *keep;
            free_fn(keep);
            keep = next;
        }
        fflush(stdout);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("rlimit child: %s\n", WIFEXITED(st) && !WEXITSTATUS(st) ? "exited" : "died");
    free_fn(small);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    failing_calls();
    succeeding_calls();
    limited();
    return 0;
}
