/*
 * tests/mesh/mesh_test.c - meshing (SLABDEFRAG_MESH=1) under the shared
 * library: `mesh_test <case>`, exit 0 on success, the case in this
 * process: a subject program (tests/subject.h) that tests/mesh/test_mesh.c
 * runs, as a test framework's own SIGSEGV handling would stand between the
 * allocator's barrier and the program.  Figures come from the JSON
 * statistics (sd_stats_print_json) and the slab geometry from
 * sd_cache_get_info, never from the text table.
 *
 *   basic     two sets of slabs with disjoint occupancy mesh; every object
 *             keeps its address and contents; usable size, realloc, frees
 *             and new allocations behave; emptied hosts unmesh
 *   writer    threads write checksummed records into objects while the
 *             main thread meshes their slabs, many rounds: nothing lost
 *   fork      after meshing, parent and child write different data to the
 *             same objects: each sees its own
 *   maplimit  SLABDEFRAG_MESH_MAX_MAPS=4: at most two aliases, and the
 *             statistics say the cap stopped meshing
 *   small     random sparse 48-byte objects mesh, contents intact; the
 *             class grows past SLABDEFRAG_MESH_PAGE_SLABS (default 16)
 *             slabs, so it holds 16 KiB and 4 KiB slabs (0: 16 KiB only)
 *   slots     released slots wait dirty and are reused or punched (by the
 *             shrinker, unasked, or by sd_shrink_all), unmeshed aliases
 *             wait stale and are mapped back; no block ever shares memory
 *             with another meanwhile
 *   hint      sd_defrag_realloc moves objects out of sparse meshed groups
 *   handler   the program's own SIGSEGV handler (installed with
 *             sigaction) is chained: meshing still works and a real fault
 *             reaches the program's handler
 *   harden    a forged free pointer in a meshed slab is reported
 *
 * The system-call cases (syscall, kernel) are mesh_syscall.c; the
 * fixture both share is meshfix.h.
 *
 * The barrier is SLABDEFRAG_MESH_BARRIER (auto, uffd, mprotect): meson
 * runs the writer cases under both.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <malloc.h>
#include <unistd.h>

#include "slabdefrag.h"

#include "../subject.h"

#include "meshjson.h"

#include "meshfix.h"

Scenario(basic, .timeout = 300)
{
    make_sparse(1);
    size_t before = rss_kb();
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    size_t after = rss_kb();
    printf("basic: %u objects kept, %lu meshes, %lu aliases; RSS %zu -> %zu KiB\n",
           nkept, f.meshes, f.aliases, before, after);
    check(f.meshes >= NSLABS / 4, "only %lu meshes", f.meshes);
    /* Slabs live in private anonymous memory: each host was filed (given
     * a shared object) for its mesh (core/segment.c, "Anonymous segments"). */
    check(f.meshes == 0 || f.filed > 0, "%lu meshes, no host filed", f.meshes);
    check(f.filed <= f.aliases, "%lu hosts filed for %lu aliases", f.filed, f.aliases);
    check_kept(1, "after meshing");
    for (unsigned i = 0; i < nkept; i++)
        check(malloc_usable_size(kept[i]) == geo.stride, "usable size %zu",
              malloc_usable_size(kept[i]));
    /* Rewrite everything through the (possibly alias) addresses. */
    for (unsigned i = 0; i < nkept; i++)
        fill(kept[i], 2);
    check_kept(2, "after rewriting");
    /* Free every other object, allocate new ones, all stay intact. */
    static char *fresh[NBLOCKS];
    unsigned nfresh = 0;
    for (unsigned i = 0; i < nkept; i += 2) {
        free(kept[i]);
        kept[i] = NULL;
    }
    for (unsigned i = 0; i < nkept; i++) {
        fresh[nfresh] = malloc(OBJ);
        fill(fresh[nfresh], 3);
        nfresh++;
    }
    for (unsigned i = 1; i < nkept; i += 2)
        check(filled(kept[i], 2), "kept object %u damaged by new allocations", i);
    for (unsigned i = 0; i < nfresh; i++)
        check(filled(fresh[i], 3), "new object %u damaged", i);
    /* realloc of alias addresses: shrink in place, grow by moving. */
    for (unsigned i = 1; i < nkept; i += 2) {
        char *q = realloc(kept[i], 900);
        check(q == kept[i], "realloc to the same class moved");
        q = realloc(kept[i], 3000);
        check(q, "realloc");
        for (unsigned k = 0; k < 900; k++)
            check(q[k] == (char)(2 * 31 + k * 7 + ((uintptr_t)kept[i] >> 4)),
                  "realloc lost byte %u", k);
        free(q);
        kept[i] = NULL;
    }
    for (unsigned i = 0; i < nfresh; i++)
        free(fresh[i]);
    sd_shrink_all();
    f = mesh_fig();
    printf("basic: after freeing all: %lu unmeshed, %lu aliases; RSS %zu KiB\n",
           f.unmeshed, f.aliases, rss_kb());
    check(f.unmeshed > 0 && f.aliases == 0, "hosts did not unmesh");
    check(f.filed == 0, "%lu released hosts still file-backed after a shrink", f.filed);
    /* The slots come back: a new round meshes again. */
    make_sparse(4);
    sd_shrink_all();
    check_kept(4, "after a second round");
    free_kept();
}

/* ---- writer ---- */

#define WRITERS 4
static volatile int stop_writers;
struct wrec { unsigned long seq; unsigned long sum; };

static unsigned long sum_of(unsigned long seq, const void *p)
{
    return seq * 0x9e3779b97f4a7c15ul ^ (uintptr_t)p;
}

static void *writer(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    unsigned long *last = calloc(nkept, sizeof *last);
    unsigned long seq = 1;
    while (!__atomic_load_n(&stop_writers, __ATOMIC_ACQUIRE)) {
        for (unsigned i = id; i < nkept; i += WRITERS) {
            struct wrec *r = (struct wrec *)kept[i];
            check(r->seq == last[i] && r->sum == sum_of(last[i], r),
                  "writer %u: object %p holds seq %lu, wrote %lu", id, (void *)r,
                  r->seq, last[i]);
            r->seq = seq;
            r->sum = sum_of(seq, r);
            memset((char *)r + sizeof *r, (int)(seq & 0xff), 64);
            last[i] = seq;
        }
        seq++;
        /* Four writers on a small machine would otherwise keep the main
         * thread, whose meshes they are there to meet, off the CPUs. */
        sched_yield();
    }
    for (unsigned i = id; i < nkept; i += WRITERS) {
        struct wrec *r = (struct wrec *)kept[i];
        check(r->seq == last[i] && r->sum == sum_of(last[i], r), "final check");
        for (unsigned k = 0; last[i] && k < 64; k++)   /* written at least once */
            check(((unsigned char *)r)[sizeof *r + k] == (last[i] & 0xff), "tail");
    }
    free(last);
    return NULL;
}

/* Reset the kept records and start WRITERS threads writing them. */
static void start_writers(pthread_t *t)
{
    for (unsigned i = 0; i < nkept; i++) {
        ((struct wrec *)kept[i])->seq = 0;
        ((struct wrec *)kept[i])->sum = sum_of(0, kept[i]);
    }
    stop_writers = 0;
    for (unsigned i = 0; i < WRITERS; i++)
        pthread_create(&t[i], NULL, writer, (void *)(uintptr_t)i);
}

Scenario(writer, .timeout = 300)
{
    unsigned rounds = 40;
    unsigned long meshes = 0;
    for (unsigned round = 0; round < rounds; round++) {
        make_sparse(5);
        pthread_t t[WRITERS];
        start_writers(t);
        usleep(2000);
        sd_shrink_all();
        usleep(2000);
        __atomic_store_n(&stop_writers, 1, __ATOMIC_RELEASE);
        for (unsigned i = 0; i < WRITERS; i++)
            pthread_join(t[i], NULL);
        free_kept();
        sd_shrink_all();
    }
    struct mesh_fig f = mesh_fig();
    meshes = f.meshes;
    printf("writer: %u rounds, %lu meshes, %lu unmeshed\n", rounds, meshes, f.unmeshed);
    check(meshes >= rounds * 8, "too few meshes (%lu)", meshes);
}

/* ---- fork ---- */

Scenario(fork, .timeout = 300)
{
    struct mesh_fig f = sparse_and_meshed(6);
    int to_child[2], to_parent[2];
    check(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipe");
    pid_t pid = fork();
    check(pid >= 0, "fork");
    char c = 0;
    if (pid == 0) {
        check_kept(6, "in the child after fork");
        for (unsigned i = 0; i < nkept; i++)
            fill(kept[i], 7);
        /* The child's heap works: allocate and free through it. */
        char *x = malloc(OBJ);
        fill(x, 9);
        check(filled(x, 9), "child malloc");
        free(x);
        check(write(to_parent[1], &c, 1) == 1, "w");
        check(read(to_child[0], &c, 1) == 1, "r");
        check_kept(7, "in the child after the parent wrote");
        free_kept();
        sd_shrink_all();
        _exit(0);
    }
    check(read(to_parent[0], &c, 1) == 1, "r");
    check_kept(6, "in the parent after the child wrote");
    for (unsigned i = 0; i < nkept; i++)
        fill(kept[i], 8);
    check(write(to_child[1], &c, 1) == 1, "w");
    int st;
    check(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child failed (status %x)", st);
    check_kept(8, "in the parent at the end");
    /* A second fork with threads writing meanwhile (they wait in the
     * barrier while the child copies). */
    pthread_t t[WRITERS];
    start_writers(t);
    for (int k = 0; k < 20; k++) {
        pid = fork();
        if (pid == 0) {
            for (unsigned i = 0; i < nkept; i++) {
                /* (a record may be torn: its writer was mid-update at the
                 * fork.)  The parent's writers check every record each
                 * round: this write must not reach them. */
                struct wrec *r = (struct wrec *)kept[i];
                r->seq = 0xdead;
                r->sum = 1;
            }
            _exit(0);
        }
        check(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child %d of the threaded fork failed (status %x)", k, st);
    }
    __atomic_store_n(&stop_writers, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    free_kept();
    printf("fork: ok (%lu aliases at the fork)\n", f.aliases);
}

Scenario(maplimit, .timeout = 300)
{
    make_sparse(10);
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    printf("maplimit: %lu meshes, limit reported %lu\n", f.meshes, f.limit);
    check(f.meshes <= 2 && f.meshes >= 1, "%lu meshes with a cap of 4 maps", f.meshes);
    check(f.limit, "the cap is not reported");
    check_kept(10, "with the cap");
    free_kept();
}

static sigjmp_buf jb;
static volatile int program_handler_ran;
static void program_segv(int sig, siginfo_t *si, void *uc)
{
    program_handler_ran++;
    siglongjmp(jb, 1);
}

Scenario(handler, .timeout = 300)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = program_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    check(sigaction(SIGSEGV, &sa, &old) == 0, "sigaction");
    struct sigaction cur;
    check(sigaction(SIGSEGV, NULL, &cur) == 0 && cur.sa_sigaction == program_segv,
          "sigaction does not report the program's handler back");
    make_sparse(11);
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    check(f.meshes > 0, "no mesh with a chained handler");
    check_kept(11, "with a chained handler");
    if (sigsetjmp(jb, 1) == 0) {
        static volatile uintptr_t where = 16;   /* no mapping there */
        *(volatile int *)where = 1;
        check(0, "no fault");
    }
    check(program_handler_ran == 1, "the program's handler did not run");
    free_kept();
    printf("handler: ok\n");
}

/* ---- small: random sparse 48-byte objects (page slabs or not) ---- */

/* Average slab bytes of cache `name` (JSON: space / slabs; 0 if the cache
 * is not listed): page slabs make it less than the cache's slab size. */
static size_t avg_slab_bytes(const char *name)
{
    char *json = stats_json();
    const char *o = json_cache(json, name);
    size_t avg = 0;
    if (o && json_num(o, "slabs"))
        avg = json_num(o, "space") / json_num(o, "slabs");
    free(json);
    return avg;
}

/* The slab size of cache `name` (sd_cache_get_info). */
static size_t slab_size_of(const char *name)
{
    struct sd_cache_info in;
    sd_cache *c = sd_cache_find(name);
    check(c && sd_cache_get_info(c, &in) == 0, "no cache %s", name);
    return in.slab_size;
}

Scenario(small, .timeout = 300)
{
    enum { N = 400000 };
    static uint64_t *v[N];
    unsigned seed = 12345;
    for (unsigned i = 0; i < N; i++) {
        v[i] = malloc(40);
        check(v[i], "malloc");
        for (unsigned k = 0; k < 5; k++)
            v[i][k] = (uintptr_t)v[i] * 31 + k;
    }
    for (unsigned i = 0; i < N; i++) {
        seed = seed * 1103515245 + 12345;
        if ((seed >> 16) % 100 < 85) {
            free(v[i]);
            v[i] = NULL;
        }
    }
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    for (unsigned i = 0; i < N; i++)
        for (unsigned k = 0; v[i] && k < 5; k++)
            check(v[i][k] == (uintptr_t)v[i] * 31 + k, "object %p lost word %u",
                  (void *)v[i], k);
    size_t avg = avg_slab_bytes("malloc-48"), slab = slab_size_of("malloc-48");
    const char *ps = getenv("SLABDEFRAG_MESH_PAGE_SLABS");
    printf("small: %lu meshes, %lu aliases, malloc-48 slabs of %zu bytes on average\n",
           f.meshes, f.aliases, avg);
    check(f.meshes > 0, "no mesh among sparse 48-byte slabs");
    /* Random frees are no pattern: new slabs stay in address order
     * (classes/mesh.c, "Placement"). */
    check(cache_counter("malloc-48", "mesh_patterns") == 0,
          "random frees of malloc-48 taken for a pattern");
    /* 1170 slabs' worth: past the page-slab threshold unless it is 0. */
    if (ps && !strcmp(ps, "0"))
        check(avg == slab, "page slabs off, yet malloc-48 averages %zu-byte slabs", avg);
    else
        check(avg > 0 && avg < slab / 2, "malloc-48 averages %zu-byte slabs: no page slabs", avg);
    for (unsigned i = 0; i < N; i++)
        free(v[i]);
    sd_shrink_all();
    f = mesh_fig();
    check(f.aliases == 0, "%lu aliases left after freeing everything", f.aliases);
}

/* ---- slots: dirty slots and stale aliases (core/segment.c) ---- */

struct slot_fig { unsigned long dirty, purged, calls, reused, stale, maps; };

static struct slot_fig slot_fig(void)
{
    char *json = stats_json();
    const char *s = json_object(json, "slots"), *m = json_object(json, "mesh");
    check(s && m, "no \"slots\" or \"mesh\" object in the JSON statistics");
    struct slot_fig f = {
        .dirty = json_num(s, "dirty_bytes"), .purged = json_num(s, "purged_slots"),
        .calls = json_num(s, "purge_runs"), .reused = json_num(s, "reused_slots"),
        .stale = json_num(s, "stale_aliases"), .maps = json_num(m, "maps"),
    };
    free(json);
    return f;
}

/* n blocks of OBJ bytes, each filled by its index: a block that shared
 * memory with another (a slot handed out while stale, or twice) shows. */
static void blocks_fill(char **b, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        b[i] = malloc(OBJ);
        check(b[i], "malloc");
        fill(b[i], 100 + i);
    }
}

static void blocks_check_free(char **b, unsigned n, const char *when)
{
    for (unsigned i = 0; i < n; i++)
        check(filled(b[i], 100 + i), "block %u (%p) overwritten %s", i, (void *)b[i], when);
    for (unsigned i = 0; i < n; i++)
        free(b[i]);
}

Scenario(slots, .timeout = 300)
{
    static char *b[2 * NBLOCKS];
    /* Unmeshing leaves stale aliases: free the kept objects (every host
     * empties) and allocate twice as much at once.  Whether the shrinker
     * mapped the aliases back meanwhile or not, no new block may share
     * memory with another. */
    struct mesh_fig m = sparse_and_meshed(7);
    unsigned long maps_meshed = slot_fig().maps;
    free_kept();
    struct slot_fig s = slot_fig();
    printf("slots: %lu meshes; after the hosts emptied: %lu stale aliases, %lu maps "
           "(%lu meshed)\n", m.meshes, s.stale, s.maps, maps_meshed);
    blocks_fill(b, 2 * NBLOCKS);
    blocks_check_free(b, 2 * NBLOCKS, "after unmeshing");
    /* A background pass may hold some slots meanwhile (sd_shrink_all only
     * tries their locks): shrink again until none is left, bounded (5 s). */
    for (int i = 0; i < 500; i++) {
        sd_shrink_all();
        s = slot_fig();
        m = mesh_fig();
        if (s.stale == 0 && m.aliases == 0)
            break;
        usleep(10000);
    }
    printf("slots: after sd_shrink_all: %lu stale, %lu aliases, %lu maps, %lu dirty bytes\n",
           s.stale, m.aliases, s.maps, s.dirty);
    check(s.stale == 0 && m.aliases == 0, "%lu stale aliases, %lu aliases after sd_shrink_all",
          s.stale, m.aliases);
    check(s.maps < maps_meshed, "the maps of the aliases were not given back (%lu, %lu meshed)",
          s.maps, maps_meshed);
    check(s.dirty == 0, "%lu dirty bytes after sd_shrink_all", s.dirty);

    /* Released slots wait dirty: a round that frees every block and
     * allocates them again right away takes dirty slots back (no fault,
     * no punch), the memory still belongs to one block only. */
    unsigned long reused0 = s.reused, purged0 = s.purged;
    for (unsigned r = 0; r < 20; r++) {
        blocks_fill(b, NBLOCKS);
        blocks_check_free(b, NBLOCKS, "in a round of reuse");
    }
    blocks_fill(b, NBLOCKS);
    blocks_check_free(b, NBLOCKS, "after the rounds");
    s = slot_fig();
    printf("slots: 21 rounds of %u blocks: %lu slots reused dirty, %lu purged in %lu runs\n",
           NBLOCKS, s.reused - reused0, s.purged - purged0, s.calls);
    check(s.reused > reused0, "no released slot was reused while dirty in 21 rounds");

    /* Nobody asks: the shrinker punches what waits dirty within a few
     * ms (DIRTY_PURGE_MS); 5 s leaves room for a loaded machine. */
    size_t rss_full = rss_kb();
    unsigned waited = 0;
    while ((s = slot_fig()).dirty && waited < 5000) {
        usleep(10000);
        waited += 10;
    }
    printf("slots: %lu dirty bytes after %u ms idle; RSS %zu -> %zu KiB\n", s.dirty, waited,
           rss_full, rss_kb());
    check(s.dirty == 0, "%lu dirty bytes still after 5 s idle", s.dirty);
}

/* sd_defrag_realloc moves objects of meshed slabs too: after meshing,
 * free all but the first kept object of every 8 KiB, so that each meshed
 * group is at most a quarter full; moving every object then empties the
 * groups, and (nearly) every alias is unmeshed. */
Scenario(hint, .timeout = 300)
{
    struct mesh_fig f = sparse_and_meshed(9);
    unsigned n = 0, hinted = 0;
    for (unsigned i = 0; i < nkept; i++) {
        uintptr_t a = (uintptr_t)kept[i];
        if (slot_of(a) % 4) {
            free(kept[i]);
        } else {
            kept[n++] = kept[i];
        }
    }
    nkept = n;
    for (unsigned i = 0; i < nkept; i++) {
        hinted += sd_defrag_hint(kept[i]) != 0;
        uintptr_t old = (uintptr_t)kept[i];
        char *q = sd_defrag_realloc(kept[i]);
        check(q, "sd_defrag_realloc");
        for (unsigned k = 0; k < OBJ; k++)      /* fill()'s bytes, of the old address */
            check(q[k] == (char)(9 * 31 + k * 7 + (old >> 4)),
                  "object %u lost byte %u in the move", i, k);
        kept[i] = q;
    }
    sd_shrink_all();
    struct mesh_fig g = mesh_fig();
    printf("hint: %lu aliases before, %u of %u objects hinted, %lu aliases after\n",
           f.aliases, hinted, nkept, g.aliases);
    /* Not quite all: the last partial slabs a cache keeps anyway
     * (SLABDEFRAG_MIN_PARTIAL) are not worth emptying. */
    check(hinted * 10 >= nkept * 9, "only %u of %u objects hinted", hinted, nkept);
    check(g.aliases * 10 <= f.aliases, "%lu of %lu aliases left: objects of meshed "
          "slabs were not moved", g.aliases, f.aliases);
    free_kept();
}

/* ---- harden: a forged free pointer in a meshed slab ---- */

static char harden_global[64];

/* The free slot 7 (of a window) of an even block whose slab meshed with an
 * odd block's: a word written in one reads back in the other. */
static char *meshed_free_slot(void)
{
    for (unsigned i = 0; i < nkept; i++) {
        uintptr_t e = (uintptr_t)kept[i] & ~(uintptr_t)(geo.window - 1);
        if (odd_block(e))
            continue;
        for (unsigned j = 0; j < nkept; j++) {
            uintptr_t o = (uintptr_t)kept[j] & ~(uintptr_t)(geo.window - 1);
            if (!odd_block(o))
                continue;
            volatile uint64_t *we = (uint64_t *)(e + 7 * geo.stride + 512);
            volatile uint64_t *wo = (uint64_t *)(o + 7 * geo.stride + 512);
            uint64_t mark = 0x4d455348ull ^ ((uint64_t)i << 32) ^ j;
            *we = mark;             /* inside a free object, past its pointer */
            if (*wo == mark)
                return (char *)e + 7 * geo.stride;
        }
    }
    return NULL;
}

/* Meshing rebuilt the host's freelist (encoded).  A child writes a
 * forged pointer over a free object's next pointer through one of the
 * two addresses and allocates: it must die of SIGABRT with the
 * heap-corruption line naming the stored word, never returning it. */
Scenario(harden, .timeout = 300)
{
    sparse_and_meshed(3);
    char *victim = meshed_free_slot();
    check(victim, "no two meshed blocks found");
    int fds[2];
    check(pipe(fds) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    check(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        alarm(20);
        *(void *volatile *)victim = harden_global;
        for (int i = 0; i < 200000; i++)
            if (malloc(OBJ) == (void *)harden_global)
                _exit(3);
        _exit(0);
    }
    close(fds[1]);
    char err[4096];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof err - 1 && (n = read(fds[0], err + len, sizeof err - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    check(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child status %#x; stderr: %s", st, err);
    unsigned long long obj = 0, slab = 0, held = 0;
    char name[64];
    check(sscanf(err, "slabdefrag: heap corruption: free object 0x%llx of cache %63s "
                      "(slab 0x%llx) holds 0x%llx as its next pointer", &obj, name, &slab,
                 &held) == 4, "report: %s", err);
    check(!strcmp(name, "malloc-1024"), "cache %s", name);
    check((uintptr_t)held == (uintptr_t)harden_global, "held %#llx, forged %p", held,
          (void *)harden_global);
    check((obj & (geo.window - 1)) == ((uintptr_t)victim & (geo.window - 1)),
          "object %#llx, victim %p", obj,
          (void *)victim);
    printf("harden: forged pointer in meshed slot %p reported as object %#llx\n",
           (void *)victim, obj);
    free_kept();
}
