/*
 * bench/fork.c - what a fork costs with a big fragmented heap:
 * the parent's fork(), the time until the child has exited, and the
 * child's private memory after it writes a few blocks.
 *
 *   fork [-m HEAP_MIB] [-f FORKS] [-w WRITE_PERMILLE] [-S SETTLE_MAX_S] [-s SEED]
 *
 * 1. Allocate blocks of 64..512 B (uniform) until HEAP_MIB (default 1024)
 *    of them are allocated, every byte written; free a random half.
 * 2. If the allocator is slabdefrag with meshing on (sd_stats_print_json
 *    found with dlsym, its "mesh" object enabled), wake its shrinker and
 *    wait until the mesh count has not moved for 1.5 s (and at least 3 s
 *    if nothing meshed yet), at most SETTLE_MAX_S (default 60) seconds.
 *    Other allocators wait for nothing.
 * 3. FORKS (default 5) forks whose child exits at once: the parent's
 *    fork() call, and from before it until waitpid has reaped the child.
 * 4. FORKS forks whose child writes WRITE_PERMILLE/1000 (default 10, 1%)
 *    of the live blocks, chosen at random, every byte of each, and sends
 *    its /proc/self/smaps_rollup figures before and after the writes
 *    through a pipe.
 *
 * Reported on stderr (key=value), medians over the forks unless named
 * max: fork_ms, fork_max_ms, exit_ms (step 3); child_dirty_kb (the
 * child's Private_Dirty after its writes), child_dirty0_kb (right after
 * the fork, before them), child_pss_shmem_kb (its Pss_Shmem after them:
 * shared memory only it maps, e.g. a copy of meshed pages that it maps
 * at two addresses, counts there and not in Private_Dirty), write_exit_ms
 * (step 4, from before fork until reaped); live_mib, blocks, settle_s,
 * meshes, filed (from the statistics; 0 elsewhere).  Events: heap_built,
 * settled.  Bookkeeping is mmap()ed, off the measured heap; the child
 * neither allocates nor uses stdio.
 */
#include "benchutil.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define MAX_FORKS 64

static int (*stats_json)(int fd);       /* sd_stats_print_json, if preloaded */

/* A number in the statistics' JSON: member `key` of the "mesh" object.
 * -1 if there are no statistics, or meshing is off. */
static long mesh_stat(const char *key)
{
    static char buf[1 << 20];           /* the JSON line, one at a time */
    if (!stats_json)
        return -1;
    int fd = memfd_create("stats", 0);
    if (fd < 0)
        return -1;
    long v = -1;
    if (stats_json(fd) == 0) {
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        char *m = strstr(buf, "\"mesh\":{\"enabled\":true");
        char k[64];
        snprintf(k, sizeof k, "\"%s\":", key);
        char *p = m ? strstr(m, k) : NULL;
        if (p)
            v = strtol(p + strlen(k), NULL, 10);
    }
    close(fd);
    return v;
}

/* Step 2: seconds waited for the meshes to settle (0 without meshing). */
static double settle(double max_s)
{
    if (mesh_stat("meshes") < 0)
        return 0;
    int (*wake)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sd_shrink_wake");
    double t0 = bu_now(), moved = t0;
    long last = mesh_stat("meshes");
    while (bu_now() - t0 < max_s) {
        if (wake)
            wake();
        bu_sleep(0.2);
        long m = mesh_stat("meshes");
        double now = bu_now();
        if (m != last) {
            last = m;
            moved = now;
        } else if (now - moved >= 1.5 && (m > 0 || now - t0 >= 3.0)) {
            break;
        }
    }
    return bu_now() - t0;
}

/* Field `key` (kB) of /proc/self/smaps_rollup, read without allocating. */
static long rollup_kb(const char *key)
{
    static char buf[4096];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    size_t l = strlen(key);
    for (char *p = buf; (p = strstr(p, key)); p += l)
        if ((p == buf || p[-1] == '\n') && p[l] == ':')
            return strtol(p + l + 1, NULL, 10);
    return -1;
}

static double reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            bu_die("fork", "waitpid failed");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        bu_die("fork", "a child failed");
    return bu_now();
}

int main(int argc, char **argv)
{
    long heap_mib = 1024, forks = 5, permille = 10;
    double settle_max = 60;
    uint64_t seed = 42;
    int c;
    while ((c = getopt(argc, argv, "m:f:w:S:s:h")) != -1) {
        switch (c) {
        case 'm': heap_mib = atol(optarg); break;
        case 'f': forks = atol(optarg); break;
        case 'w': permille = atol(optarg); break;
        case 'S': settle_max = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        default:
            fprintf(stderr, "usage: fork [-m HEAP_MIB] [-f FORKS] [-w WRITE_PERMILLE] "
                    "[-S SETTLE_MAX_S] [-s SEED]\n");
            return 2;
        }
    }
    if (heap_mib <= 0 || forks <= 0 || forks > MAX_FORKS || permille < 0 || permille > 1000)
        bu_die("fork", "bad argument");
    stats_json = (int (*)(int))dlsym(RTLD_DEFAULT, "sd_stats_print_json");
    bu_rng r;
    bu_seed(&r, seed);

    /* 1. The heap: at most target / 64 blocks. */
    size_t target = (size_t)heap_mib << 20, cap = target / 64 + 1;
    char **ptr = mmap(NULL, cap * sizeof *ptr, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uint16_t *len = mmap(NULL, cap * sizeof *len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ptr == MAP_FAILED || len == MAP_FAILED)
        bu_die("fork", "mmap failed");
    size_t n = 0, total = 0;
    while (total < target && n < cap) {
        size_t sz = bu_range(&r, 64, 512);
        if (!(ptr[n] = malloc(sz)))
            bu_die("fork", "malloc failed");
        memset(ptr[n], (int)(n & 0xff), sz);
        len[n++] = (uint16_t)sz;
        total += sz;
    }
    size_t live = 0, nlive = 0;
    for (size_t i = 0; i < n; i++) {
        if (bu_next(&r) & 1) {
            free(ptr[i]);
            ptr[i] = NULL;
        } else {
            live += len[i];
            nlive++;
        }
    }
    bu_event("heap_built");

    /* 2. Let meshing act. */
    double settle_s = settle(settle_max);
    bu_event("settled");
    long meshes = mesh_stat("meshes"), filed = mesh_stat("filed");

    /* 3. Forks whose child exits at once. */
    double fork_ms[MAX_FORKS], exit_ms[MAX_FORKS], fork_max = 0;
    for (long k = 0; k < forks; k++) {
        double t0 = bu_now();
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        double t1 = bu_now();
        if (pid < 0)
            bu_die("fork", "fork failed");
        double t2 = reap(pid);
        fork_ms[k] = (t1 - t0) * 1e3;
        exit_ms[k] = (t2 - t0) * 1e3;
        if (fork_ms[k] > fork_max)
            fork_max = fork_ms[k];
    }

    /* 4. Forks whose child writes some blocks. */
    double dirty[MAX_FORKS], dirty0[MAX_FORKS], shmem[MAX_FORKS], wexit[MAX_FORKS];
    for (long k = 0; k < forks; k++) {
        int p[2];
        if (pipe(p))
            bu_die("fork", "pipe failed");
        uint64_t cseed = bu_next(&r);
        double t0 = bu_now();
        pid_t pid = fork();
        if (pid == 0) {
            long out[3];
            out[0] = rollup_kb("Private_Dirty");
            bu_rng cr;
            bu_seed(&cr, cseed);
            for (size_t i = 0; i < n; i++)
                if (ptr[i] && bu_next(&cr) % 1000 < (uint64_t)permille)
                    memset(ptr[i], 0x5a, len[i]);
            out[1] = rollup_kb("Private_Dirty");
            out[2] = rollup_kb("Pss_Shmem");
            _exit(write(p[1], out, sizeof out) == (ssize_t)sizeof out ? 0 : 1);
        }
        if (pid < 0)
            bu_die("fork", "fork failed");
        close(p[1]);
        long in[3] = { -1, -1, -1 };
        if (read(p[0], in, sizeof in) != (ssize_t)sizeof in)
            bu_die("fork", "no figures from the child");
        close(p[0]);
        wexit[k] = (reap(pid) - t0) * 1e3;
        dirty0[k] = (double)in[0];
        dirty[k] = (double)in[1];
        shmem[k] = (double)in[2];
    }

    /* The heap is still intact: every live block has its byte pattern. */
    for (size_t i = 0; i < n; i++)
        if (ptr[i] && (ptr[i][0] != (char)(i & 0xff) || ptr[i][len[i] - 1] != (char)(i & 0xff)))
            bu_die("fork", "a block changed in the parent");

    printf("fork: %zu blocks, %.1f MiB live, settle %.1f s, meshes %ld; fork %.1f ms "
           "(max %.1f), child exited after %.1f ms; child Private_Dirty %.0f kB after "
           "writing %ld permille of the blocks\n",
           n, live / 1048576.0, settle_s, meshes, bu_median(fork_ms, forks), fork_max,
           bu_median(exit_ms, forks), bu_median(dirty, forks), permille);
    bu_kv_long("blocks", (long long)nlive);
    bu_kv_double("live_mib", live / 1048576.0);
    bu_kv_double("settle_s", settle_s);
    bu_kv_long("meshes", meshes < 0 ? 0 : meshes);
    bu_kv_long("filed", filed < 0 ? 0 : filed);
    bu_kv_double("fork_ms", bu_median(fork_ms, forks));
    bu_kv_double("fork_max_ms", fork_max);
    bu_kv_double("exit_ms", bu_median(exit_ms, forks));
    bu_kv_double("write_exit_ms", bu_median(wexit, forks));
    bu_kv_double("child_dirty0_kb", bu_median(dirty0, forks));
    bu_kv_double("child_dirty_kb", bu_median(dirty, forks));
    bu_kv_double("child_pss_shmem_kb", bu_median(shmem, forks));
    bu_final();
    return 0;
}
