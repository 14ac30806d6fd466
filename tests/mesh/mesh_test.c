/*
 * tests/mesh/mesh_test.c - meshing (SLABDEFRAG_MESH=1) under the shared
 * library: `mesh_test --filter mesh/<case>`, exit 0 on success.  Not
 * Criterion: the stand-in of tests/harness.h runs the case in this process
 * (a test framework's own SIGSEGV handling would stand between the
 * allocator's barrier and the program).  Figures come from the JSON
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
 *   syscall   a thread reads a known byte stream from a pipe and a socket
 *             (read, readv, recv, recvfrom, recvmsg) into objects of the
 *             slabs the main thread meshes and forks over: no call fails
 *             with EFAULT and no byte is lost or repeated
 *   kernel    a thread reads a pipe, a socket and a regular file into
 *             objects of the slabs being meshed with calls that are not
 *             retried (stdio refills into a heap FILE buffer, stat, fstat)
 *             besides read and recv: under the uffd barrier nothing fails
 *             with EFAULT, under mprotect only the calls README lists; a
 *             fork child meshes with its own userfaultfd
 *
 * The barrier is SLABDEFRAG_MESH_BARRIER (auto, uffd, mprotect): meson
 * runs the writer cases under both.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
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

#define HARNESS_IN_PROCESS 1
#include "../harness.h"

#define CHECK(c, ...) cr_assert(c, __VA_ARGS__)
#include "meshjson.h"

#define OBJ     1000              /* a block of malloc-1024 */
#define NSLABS  256               /* (meshes expected: NSLABS / 4 at least) */
#define NBLOCKS (NSLABS * 16)     /* blocks make_sparse allocates */

/* ---- figures: the JSON statistics and the API ---- */

struct mesh_fig { unsigned long meshes, unmeshed, aliases, limit, retried, filed; };

/* The "mesh" object of the JSON statistics. */
static struct mesh_fig mesh_fig(void)
{
    char *json = stats_json();
    const char *m = json_object(json, "mesh");
    CHECK(m, "no \"mesh\" object in the JSON statistics");
    struct mesh_fig f = {
        .meshes = json_num(m, "meshes"),
        .unmeshed = json_num(m, "unmeshes"),
        .aliases = json_num(m, "aliases"),
        .limit = json_num(m, "map_limit_hits") != 0,
        .retried = json_num(m, "syscall_retries"),
        .filed = json_num(m, "filed"),
    };
    free(json);
    return f;
}

/* The geometry of malloc-1024, the class of the OBJ-byte blocks, from the
 * JSON statistics and sd_cache_get_info:
 *   stride  bytes from one block to the next
 *   slab    bytes of the slabs it gets past the first few: the page slabs
 *           of meshing (SLABDEFRAG_MESH_PAGE_SLABS) if it has them
 *   window  8 blocks: make_sparse keeps slots 0..2 or 4..6 of each window,
 *           harden writes into slot 7
 *   block   the parity unit of make_sparse: two windows, or a slab if larger */
static struct { size_t stride, slab, window, block; } geo;

static void load_geometry(void)
{
    if (geo.stride)
        return;
    struct sd_cache_info in;
    sd_cache *c = sd_cache_find("malloc-1024");
    CHECK(c && sd_cache_get_info(c, &in) == 0, "no cache malloc-1024");
    char *json = stats_json();
    const char *o = json_cache(json, "malloc-1024");
    CHECK(o, "malloc-1024 is not in the JSON statistics");
    geo.stride = json_num(o, "stride");
    geo.slab = json_num(o, "page_slab_size");
    if (!geo.slab)
        geo.slab = in.slab_size;
    free(json);
    geo.window = 8 * geo.stride;
    geo.block = geo.slab > 2 * geo.window ? geo.slab : 2 * geo.window;
    CHECK(geo.stride >= OBJ && (geo.window & (geo.window - 1)) == 0 &&
          (geo.block & (geo.block - 1)) == 0 && geo.slab % geo.window == 0,
          "malloc-1024: stride %zu, %zu-byte slabs: not whole windows of 8 blocks, "
          "make_sparse cannot make slabs of disjoint occupancy", geo.stride, geo.slab);
    printf("malloc-1024: stride %zu, slabs of %zu bytes; windows of %zu, parity blocks "
           "of %zu\n", geo.stride, geo.slab, geo.window, geo.block);
}

static size_t rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtoul(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* Objects kept after the sparse free, and their fill value. */
static char *kept[NBLOCKS];
static unsigned nkept;

static void fill(char *p, unsigned seed)
{
    for (unsigned i = 0; i < OBJ; i++)
        p[i] = (char)(seed * 31 + i * 7 + ((uintptr_t)p >> 4));
}

static int filled(const char *p, unsigned seed)
{
    for (unsigned i = 0; i < OBJ; i++)
        if (p[i] != (char)(seed * 31 + i * 7 + ((uintptr_t)p >> 4)))
            return 0;
    return 1;
}

/* The slot of address a in its window, and whether its parity block is
 * an odd one (geo). */
static unsigned slot_of(uintptr_t a) { return (unsigned)((a & (geo.window - 1)) / geo.stride); }
static int odd_block(uintptr_t a) { return (a / geo.block) & 1; }

/* Allocate NBLOCKS blocks and keep, in each window of 8 blocks, 3 objects
 * at slots that depend on the parity of the block of memory they lie in
 * (even blocks 0..2, odd ones 4..6 of every window): a slab is whole
 * windows inside one parity block, so any slab of an even block is
 * disjoint from any slab of an odd one.  Everything else is freed. */
static void make_sparse(unsigned seed)
{
    static char *all[NBLOCKS];
    nkept = 0;
    for (unsigned i = 0; i < NBLOCKS; i++) {
        all[i] = malloc(OBJ);
        CHECK(all[i], "malloc");
    }
    load_geometry();                /* (a cache is listed once it has slabs) */
    for (unsigned i = 0; i < NBLOCKS; i++) {
        uintptr_t a = (uintptr_t)all[i];
        unsigned slot = slot_of(a);
        unsigned base = odd_block(a) ? 4 : 0;
        if (slot >= base && slot < base + 3) {
            kept[nkept++] = all[i];
            fill(all[i], seed);
        } else {
            free(all[i]);
        }
    }
}

/* make_sparse, then mesh (sd_shrink_all): some slabs must have meshed. */
static struct mesh_fig sparse_and_meshed(unsigned seed)
{
    make_sparse(seed);
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    CHECK(f.aliases > 0, "nothing meshed");
    return f;
}

static void check_kept(unsigned seed, const char *when)
{
    for (unsigned i = 0; i < nkept; i++)
        CHECK(filled(kept[i], seed), "object %u (%p) lost its contents %s", i,
              (void *)kept[i], when);
}

static void free_kept(void)
{
    for (unsigned i = 0; i < nkept; i++)
        free(kept[i]);
    nkept = 0;
}

Test(mesh, basic, .timeout = 300)
{
    make_sparse(1);
    size_t before = rss_kb();
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    size_t after = rss_kb();
    printf("basic: %u objects kept, %lu meshes, %lu aliases; RSS %zu -> %zu KiB\n",
           nkept, f.meshes, f.aliases, before, after);
    CHECK(f.meshes >= NSLABS / 4, "only %lu meshes", f.meshes);
    /* Page slabs live in anonymous segments: each host was made
     * file-backed for its mesh (core/segment.c, "Anonymous segments"). */
    const char *anon = getenv("SLABDEFRAG_MESH_ANON");
    int page_slabs = geo.slab <= 8192 && !(anon && *anon == '0');
    CHECK(!page_slabs || f.filed > 0, "%lu meshes of page slabs, no host filed", f.meshes);
    CHECK(f.filed <= f.aliases, "%lu hosts filed for %lu aliases", f.filed, f.aliases);
    check_kept(1, "after meshing");
    for (unsigned i = 0; i < nkept; i++)
        CHECK(malloc_usable_size(kept[i]) == geo.stride, "usable size %zu",
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
        CHECK(filled(kept[i], 2), "kept object %u damaged by new allocations", i);
    for (unsigned i = 0; i < nfresh; i++)
        CHECK(filled(fresh[i], 3), "new object %u damaged", i);
    /* realloc of alias addresses: shrink in place, grow by moving. */
    for (unsigned i = 1; i < nkept; i += 2) {
        char *q = realloc(kept[i], 900);
        CHECK(q == kept[i], "realloc to the same class moved");
        q = realloc(kept[i], 3000);
        CHECK(q, "realloc");
        for (unsigned k = 0; k < 900; k++)
            CHECK(q[k] == (char)(2 * 31 + k * 7 + ((uintptr_t)kept[i] >> 4)),
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
    CHECK(f.unmeshed > 0 && f.aliases == 0, "hosts did not unmesh");
    CHECK(f.filed == 0, "%lu released hosts still file-backed after a shrink", f.filed);
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
            CHECK(r->seq == last[i] && r->sum == sum_of(last[i], r),
                  "writer %u: object %p holds seq %lu, wrote %lu", id, (void *)r,
                  r->seq, last[i]);
            r->seq = seq;
            r->sum = sum_of(seq, r);
            memset((char *)r + sizeof *r, (int)(seq & 0xff), 64);
            last[i] = seq;
        }
        seq++;
    }
    for (unsigned i = id; i < nkept; i += WRITERS) {
        struct wrec *r = (struct wrec *)kept[i];
        CHECK(r->seq == last[i] && r->sum == sum_of(last[i], r), "final check");
        for (unsigned k = 0; last[i] && k < 64; k++)   /* written at least once */
            CHECK(((unsigned char *)r)[sizeof *r + k] == (last[i] & 0xff), "tail");
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

Test(mesh, writer, .timeout = 300)
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
    CHECK(meshes >= rounds * 8, "too few meshes (%lu)", meshes);
}

/* ---- fork ---- */

Test(mesh, fork, .timeout = 300)
{
    struct mesh_fig f = sparse_and_meshed(6);
    int to_child[2], to_parent[2];
    CHECK(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    char c = 0;
    if (pid == 0) {
        check_kept(6, "in the child after fork");
        for (unsigned i = 0; i < nkept; i++)
            fill(kept[i], 7);
        /* The child's heap works: allocate and free through it. */
        char *x = malloc(OBJ);
        fill(x, 9);
        CHECK(filled(x, 9), "child malloc");
        free(x);
        CHECK(write(to_parent[1], &c, 1) == 1, "w");
        CHECK(read(to_child[0], &c, 1) == 1, "r");
        check_kept(7, "in the child after the parent wrote");
        free_kept();
        sd_shrink_all();
        _exit(0);
    }
    CHECK(read(to_parent[0], &c, 1) == 1, "r");
    check_kept(6, "in the parent after the child wrote");
    for (unsigned i = 0; i < nkept; i++)
        fill(kept[i], 8);
    CHECK(write(to_child[1], &c, 1) == 1, "w");
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
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
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child %d of the threaded fork failed (status %x)", k, st);
    }
    __atomic_store_n(&stop_writers, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    free_kept();
    printf("fork: ok (%lu aliases at the fork)\n", f.aliases);
}

Test(mesh, maplimit, .timeout = 300)
{
    make_sparse(10);
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    printf("maplimit: %lu meshes, limit reported %lu\n", f.meshes, f.limit);
    CHECK(f.meshes <= 2 && f.meshes >= 1, "%lu meshes with a cap of 4 maps", f.meshes);
    CHECK(f.limit, "the cap is not reported");
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

Test(mesh, handler, .timeout = 300)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = program_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGSEGV, &sa, &old) == 0, "sigaction");
    struct sigaction cur;
    CHECK(sigaction(SIGSEGV, NULL, &cur) == 0 && cur.sa_sigaction == program_segv,
          "sigaction does not report the program's handler back");
    make_sparse(11);
    sd_shrink_all();
    struct mesh_fig f = mesh_fig();
    CHECK(f.meshes > 0, "no mesh with a chained handler");
    check_kept(11, "with a chained handler");
    if (sigsetjmp(jb, 1) == 0) {
        static volatile uintptr_t where = 16;   /* no mapping there */
        *(volatile int *)where = 1;
        CHECK(0, "no fault");
    }
    CHECK(program_handler_ran == 1, "the program's handler did not run");
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
    CHECK(c && sd_cache_get_info(c, &in) == 0, "no cache %s", name);
    return in.slab_size;
}

Test(mesh, small, .timeout = 300)
{
    enum { N = 400000 };
    static uint64_t *v[N];
    unsigned seed = 12345;
    for (unsigned i = 0; i < N; i++) {
        v[i] = malloc(40);
        CHECK(v[i], "malloc");
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
            CHECK(v[i][k] == (uintptr_t)v[i] * 31 + k, "object %p lost word %u",
                  (void *)v[i], k);
    size_t avg = avg_slab_bytes("malloc-48"), slab = slab_size_of("malloc-48");
    const char *ps = getenv("SLABDEFRAG_MESH_PAGE_SLABS");
    printf("small: %lu meshes, %lu aliases, malloc-48 slabs of %zu bytes on average\n",
           f.meshes, f.aliases, avg);
    CHECK(f.meshes > 0, "no mesh among sparse 48-byte slabs");
    /* Random frees are no pattern: new slabs stay in address order
     * (classes/mesh.c, "Placement"). */
    CHECK(cache_counter("malloc-48", "mesh_patterns") == 0,
          "random frees of malloc-48 taken for a pattern");
    /* 1170 slabs' worth: past the page-slab threshold unless it is 0. */
    if (ps && !strcmp(ps, "0"))
        CHECK(avg == slab, "page slabs off, yet malloc-48 averages %zu-byte slabs", avg);
    else
        CHECK(avg > 0 && avg < slab / 2, "malloc-48 averages %zu-byte slabs: no page slabs", avg);
    for (unsigned i = 0; i < N; i++)
        free(v[i]);
    sd_shrink_all();
    f = mesh_fig();
    CHECK(f.aliases == 0, "%lu aliases left after freeing everything", f.aliases);
}

/* ---- syscall: the kernel writes into slabs being meshed ---- */

/* Byte k of the stream each feeder writes (no short period: a lost or
 * repeated chunk shows). */
static unsigned char stream_byte(uint64_t k)
{
    return (unsigned char)(k ^ (k >> 8) ^ (k >> 16) ^ (k >> 24));
}

struct chan {
    int rd, wr;                 /* pipe or socketpair ends */
    uint64_t fed;               /* bytes written (feeder) */
    uint64_t got;               /* bytes read and checked (reader) */
};
static struct chan pipe_ch, sock_ch;
static volatile int stop_reader;
static unsigned long sys_calls;

static void *feeder(void *arg)
{
    struct chan *ch = arg;
    unsigned char buf[4096];
    for (;;) {
        for (unsigned i = 0; i < sizeof buf; i++)
            buf[i] = stream_byte(ch->fed + i);
        ssize_t n = write(ch->wr, buf, sizeof buf);
        if (n <= 0)
            return NULL;        /* the reader's end closed: the test is over */
        ch->fed += (uint64_t)n;
    }
}

static void got_bytes(struct chan *ch, const unsigned char *p, ssize_t n,
                      const char *call)
{
    CHECK(n > 0, "%s into %p failed: %s", call, (const void *)p,
          n < 0 ? strerror(errno) : "EOF");
    for (ssize_t i = 0; i < n; i++)
        CHECK(p[i] == stream_byte(ch->got + (uint64_t)i),
              "%s: byte %llu of the stream is wrong", call,
              (unsigned long long)(ch->got + (uint64_t)i));
    ch->got += (uint64_t)n;
}

/* Reads into kept objects, turn by turn with every wrapped call.  The
 * data lands at offset 64 of objects of 1000 bytes; chunks of 1..512. */
static void *sys_reader(void *arg)
{
    unsigned long calls = 0;
    unsigned seed = 777;
    while (!__atomic_load_n(&stop_reader, __ATOMIC_ACQUIRE)) {
        for (unsigned i = 0; i < nkept; i++, calls++) {
            unsigned char *p = (unsigned char *)kept[i] + 64;
            seed = seed * 1103515245 + 12345;
            size_t len = 1 + (seed >> 16) % 512;
            ssize_t n;
            switch (calls % 5) {
            case 0:
                n = read(pipe_ch.rd, p, len);
                got_bytes(&pipe_ch, p, n, "read");
                break;
            case 1: {
                struct iovec v[2] = { { p, len / 2 }, { p + len / 2, len - len / 2 } };
                n = readv(pipe_ch.rd, v, 2);
                got_bytes(&pipe_ch, p, n, "readv");
                break;
            }
            case 2:
                n = recv(sock_ch.rd, p, len, 0);
                got_bytes(&sock_ch, p, n, "recv");
                break;
            case 3: {
                /* The address buffer is a heap object too. */
                struct sockaddr *sa = (struct sockaddr *)((char *)kept[i] + 600);
                socklen_t sl = 128;
                n = recvfrom(sock_ch.rd, p, len, 0, sa, &sl);
                got_bytes(&sock_ch, p, n, "recvfrom");
                break;
            }
            default: {
                /* So are the message header and the iovec. */
                struct msghdr *m = (struct msghdr *)((char *)kept[i] + 600);
                struct iovec *v = (struct iovec *)(m + 1);
                memset(m, 0, sizeof *m);
                v->iov_base = p;
                v->iov_len = len;
                m->msg_iov = v;
                m->msg_iovlen = 1;
                n = recvmsg(sock_ch.rd, m, 0);
                got_bytes(&sock_ch, p, n, "recvmsg");
                CHECK(m->msg_flags == 0, "recvmsg flags %x", m->msg_flags);
                break;
            }
            }
            if (__atomic_load_n(&stop_reader, __ATOMIC_ACQUIRE))
                break;
        }
    }
    __atomic_fetch_add(&sys_calls, calls, __ATOMIC_RELAXED);
    return NULL;
}

Test(mesh, syscall, .timeout = 300)
{
    int pfd[2], sfd[2];
    CHECK(pipe(pfd) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0, "pipe");
    signal(SIGPIPE, SIG_IGN);
    pipe_ch = (struct chan){ pfd[0], pfd[1], 0, 0 };
    sock_ch = (struct chan){ sfd[0], sfd[1], 0, 0 };
    /* A genuine EFAULT (no barrier) reaches the program, and the byte
     * stays in the pipe or socket. */
    static void *volatile bad_address = (void *)16;
    void *bad = bad_address;
    struct iovec badv = { bad, 1 };
    struct msghdr badm = { .msg_iov = &badv, .msg_iovlen = 1 };
    char c;
    CHECK(write(pfd[1], "x", 1) == 1 && write(sfd[1], "y", 1) == 1, "write");
    errno = 0;
    CHECK(read(pfd[0], bad, 1) == -1 && errno == EFAULT, "read: %s", strerror(errno));
    errno = 0;
    CHECK(readv(pfd[0], &badv, 1) == -1 && errno == EFAULT, "readv: %s", strerror(errno));
    errno = 0;
    CHECK(recv(sfd[0], bad, 1, 0) == -1 && errno == EFAULT, "recv: %s", strerror(errno));
    errno = 0;
    CHECK(recvmsg(sfd[0], &badm, 0) == -1 && errno == EFAULT, "recvmsg: %s",
          strerror(errno));
    CHECK(read(pfd[0], &c, 1) == 1 && c == 'x' && recv(sfd[0], &c, 1, 0) == 1 && c == 'y',
          "the bytes did not stay");
    pthread_t fp, fs;
    pthread_create(&fp, NULL, feeder, &pipe_ch);
    pthread_create(&fs, NULL, feeder, &sock_ch);
    unsigned rounds = 30;
    struct mesh_fig f0 = mesh_fig();
    for (unsigned round = 0; round < rounds; round++) {
        make_sparse(12);
        pthread_t r;
        stop_reader = 0;
        pthread_create(&r, NULL, sys_reader, NULL);
        usleep(1000);
        sd_shrink_all();                /* meshes under the reader */
        for (int k = 0; k < 3; k++) {   /* the fork barrier: the whole arena */
            int st;
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
                  WEXITSTATUS(st) == 0, "fork child failed");
        }
        __atomic_store_n(&stop_reader, 1, __ATOMIC_RELEASE);
        pthread_join(r, NULL);
        free_kept();
        sd_shrink_all();
    }
    close(pipe_ch.rd);
    close(sock_ch.rd);
    pthread_join(fp, NULL);
    pthread_join(fs, NULL);
    close(pipe_ch.wr);
    close(sock_ch.wr);
    struct mesh_fig f = mesh_fig();
    printf("syscall: %u rounds, %lu calls, %llu + %llu bytes checked, %lu meshes, "
           "%lu system calls retried\n", rounds, sys_calls,
           (unsigned long long)pipe_ch.got, (unsigned long long)sock_ch.got,
           f.meshes - f0.meshes, f.retried - f0.retried);
    CHECK(f.meshes - f0.meshes >= rounds * 8, "too few meshes (%lu)", f.meshes - f0.meshes);
    CHECK(sys_calls >= rounds, "the reader hardly ran (%lu calls)", sys_calls);
    /* Dozens per run, mostly at the forks (the barrier lasts while the
     * child copies the heap): none means the wrappers were not exercised. */
    CHECK(f.retried > f0.retried, "no system call met the barrier");
}

/* ---- kernel: system calls that are not wrapped, under each barrier ---- */

enum { K_READ, K_RECV, K_FILE, K_FREAD, K_FGETS, K_STAT, K_FSTAT, K_OPS };
static const char *const k_name[K_OPS] = { "read", "recv", "read(file)", "fread",
                                           "fgets", "stat", "fstat" };
static unsigned long k_calls[K_OPS], k_efault[K_OPS];
static struct chan kfile_ch;      /* kfile_ch.got: stdio pipe stream */
static int kfile_fd;
static const char kpath[] = "/tmp/slabdefrag-mesh-kernel.txt";
#define KLINES 2000                         /* "line %08u\n": 14 bytes each */

/* One call of op into heap object p (inside a slab that may be meshing);
 * EFAULT is counted, any other failure is fatal. */
static void k_call(int op, unsigned char *p, size_t len, FILE *fp, FILE *ff,
                   unsigned *line)
{
    ssize_t n = 0;
    int fault = 0;
    k_calls[op]++;
    switch (op) {
    case K_READ:
        if ((n = read(pipe_ch.rd, p, len)) < 0 && errno == EFAULT) fault = 1;
        else got_bytes(&pipe_ch, p, n, "read");
        break;
    case K_RECV:
        if ((n = recv(sock_ch.rd, p, len, 0)) < 0 && errno == EFAULT) fault = 1;
        else got_bytes(&sock_ch, p, n, "recv");
        break;
    case K_FILE:                            /* the file is KLINES lines: 0 is EOF */
        if ((n = read(kfile_fd, p, len)) < 0 && errno == EFAULT) fault = 1;
        else if (n == 0) lseek(kfile_fd, 0, SEEK_SET);
        else CHECK(n > 0, "read(file): %s", strerror(errno));
        break;
    case K_FREAD:                           /* stdio refills its heap buffer */
        n = (ssize_t)fread(p, 1, len, fp);
        if (n > 0)
            got_bytes(&kfile_ch, p, n, "fread");
        if (ferror(fp)) {
            CHECK(errno == EFAULT, "fread: %s", strerror(errno));
            fault = 1;
            clearerr(fp);
        }
        break;
    case K_FGETS:
        if (fgets((char *)p, 64, ff)) {
            unsigned v = ~0u;
            CHECK(sscanf((char *)p, "line %u", &v) == 1 && v == *line,
                  "fgets: line %u reads \"%.14s\"", *line, (char *)p);
            *line = (*line + 1) % KLINES;
        } else if (ferror(ff)) {
            CHECK(errno == EFAULT, "fgets: %s", strerror(errno));
            fault = 1;
            clearerr(ff);
            /* glibc's fgets drops what it had read of the line before the
             * refill that failed: go on at the next whole line. */
            long pos = ftell(ff);
            CHECK(pos >= 0, "ftell: %s", strerror(errno));
            *line = (unsigned)((pos + 13) / 14) % KLINES;
            CHECK(fseek(ff, (long)*line * 14, SEEK_SET) == 0, "fseek: %s", strerror(errno));
        } else {                            /* EOF */
            rewind(ff);
            *line = 0;
        }
        break;
    case K_STAT:
    case K_FSTAT: {
        struct stat *st = (struct stat *)p;
        int r = op == K_STAT ? stat(kpath, st) : fstat(kfile_fd, st);
        if (r && errno == EFAULT) fault = 1;
        else CHECK(r == 0 && st->st_size == KLINES * 14, "stat: %s", strerror(errno));
        break;
    }
    }
    if (fault)
        k_efault[op]++;
}

static void *k_reader(void *arg)
{
    FILE **f = arg;                         /* the stdio pipe and the file */
    unsigned seed = 4242, line = 0;
    unsigned long calls = 0;
    while (!__atomic_load_n(&stop_reader, __ATOMIC_ACQUIRE))
        for (unsigned i = 2; i < nkept && !__atomic_load_n(&stop_reader, __ATOMIC_ACQUIRE);
             i++, calls++) {
            seed = seed * 1103515245 + 12345;
            k_call((int)(calls % K_OPS), (unsigned char *)kept[i] + 64,
                   1 + (seed >> 16) % 512, f[0], f[1], &line);
        }
    return NULL;
}

static int barrier_is(const char *name)
{
    char *json = stats_json();
    const char *m = json_object(json, "mesh");
    char want[48];
    snprintf(want, sizeof want, "\"barrier\":\"%s\"", name);
    int r = m && strstr(m, want);
    free(json);
    return r;
}

/* Rounds of meshing under a thread that reads a pipe, a socket and a
 * regular file into heap objects (read, recv, fread and fgets through
 * FILEs whose buffers are heap objects, stat and fstat into a heap struct
 * stat).  With the uffd barrier no call may fail; with mprotect only the
 * calls README lists (stdio refills, stat...).  No fork here: a fork's
 * barrier is mprotect under either (core/heapfile.h). */
static void kernel_rounds(unsigned rounds)
{
    for (unsigned round = 0; round < rounds; round++) {
        make_sparse(13);
        /* The FILE buffers are kept objects of this round's sparse slabs. */
        int dfd = dup(kfile_ch.rd);
        FILE *f[2] = { fdopen(dfd, "r"), fopen(kpath, "r") };
        CHECK(f[0] && f[1], "fdopen/fopen");
        CHECK(setvbuf(f[0], kept[0], _IOFBF, OBJ) == 0 &&
              setvbuf(f[1], kept[1], _IOFBF, OBJ) == 0, "setvbuf");
        pthread_t r;
        stop_reader = 0;
        pthread_create(&r, NULL, k_reader, f);
        usleep(1000);
        sd_shrink_all();                    /* meshes under the reader */
        __atomic_store_n(&stop_reader, 1, __ATOMIC_RELEASE);
        pthread_join(r, NULL);
        /* What the stream holds in its buffer belongs to the checked stream. */
        size_t left = (size_t)(f[0]->_IO_read_end - f[0]->_IO_read_ptr);
        if (left) {
            unsigned char tmp[OBJ];
            CHECK(fread(tmp, 1, left, f[0]) == left, "fread of the buffered rest");
            got_bytes(&kfile_ch, tmp, (ssize_t)left, "fread");
        }
        fclose(f[0]);
        fclose(f[1]);
        free_kept();
        sd_shrink_all();
    }
}

Test(mesh, kernel, .timeout = 300)
{
    const char *want = getenv("SLABDEFRAG_MESH_BARRIER");
    int uffd = !want || strcmp(want, "mprotect");
    int pfd[2], sfd[2], kfd[2];
    CHECK(pipe(pfd) == 0 && pipe(kfd) == 0 &&
          socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0, "pipe");
    signal(SIGPIPE, SIG_IGN);
    FILE *w = fopen(kpath, "w");
    CHECK(w, "%s: %s", kpath, strerror(errno));
    for (unsigned i = 0; i < KLINES; i++)
        fprintf(w, "line %08u\n", i);
    fclose(w);
    kfile_fd = open(kpath, O_RDONLY);
    pipe_ch = (struct chan){ pfd[0], pfd[1], 0, 0 };
    sock_ch = (struct chan){ sfd[0], sfd[1], 0, 0 };
    kfile_ch = (struct chan){ kfd[0], kfd[1], 0, 0 };
    pthread_t fe[3];
    pthread_create(&fe[0], NULL, feeder, &pipe_ch);
    pthread_create(&fe[1], NULL, feeder, &sock_ch);
    pthread_create(&fe[2], NULL, feeder, &kfile_ch);
    make_sparse(1);
    free_kept();
    if (uffd && !barrier_is("uffd")) {
        if (want && !strcmp(want, "uffd")) {
            cr_skip_test("kernel: userfaultfd is not available here: skipped");
        }
        uffd = 0;                           /* auto fell back to mprotect */
    }
    struct mesh_fig f0 = mesh_fig();
    kernel_rounds(30);
    /* A fork child meshes too, with a userfaultfd of its own. */
    pid_t pid = fork();
    if (pid == 0) {
        kernel_rounds(3);
        CHECK(!uffd || barrier_is("uffd"), "the child lost the uffd barrier");
        for (int op = 0; op < K_OPS; op++)
            CHECK(!uffd || !k_efault[op], "child: %s failed with EFAULT", k_name[op]);
        _exit(0);
    }
    int st;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the child failed (status %x)", st);
    struct mesh_fig f = mesh_fig();
    char *stats = stats_json();
    const char *m = json_object(stats, "mesh");
    printf("kernel: %lu meshes, barrier %s; mesh %.*s\n", f.meshes - f0.meshes,
           uffd ? "uffd" : "mprotect", m ? (int)(strchr(m, '}') - m + 1) : 0, m ? m : "");
    free(stats);
    for (int op = 0; op < K_OPS; op++)
        printf("  %-10s %8lu calls, %lu EFAULT\n", k_name[op], k_calls[op], k_efault[op]);
    CHECK(f.meshes - f0.meshes >= 30 * 8, "too few meshes (%lu)", f.meshes - f0.meshes);
    for (int op = 0; op < K_OPS; op++) {
        CHECK(k_calls[op] > 100, "%s hardly ran", k_name[op]);
        /* uffd: none.  mprotect: only what README lists (read and recv retry). */
        CHECK(!k_efault[op] || (!uffd && op != K_READ && op != K_RECV),
              "%s failed with EFAULT under the %s barrier", k_name[op],
              uffd ? "uffd" : "mprotect");
    }
    close(pipe_ch.rd);
    close(sock_ch.rd);
    close(kfile_ch.rd);
    for (int i = 0; i < 3; i++)
        pthread_join(fe[i], NULL);
    unlink(kpath);
}

/* ---- slots: dirty slots and stale aliases (core/segment.c) ---- */

struct slot_fig { unsigned long dirty, purged, calls, reused, stale, maps; };

static struct slot_fig slot_fig(void)
{
    char *json = stats_json();
    const char *s = json_object(json, "slots"), *m = json_object(json, "mesh");
    CHECK(s && m, "no \"slots\" or \"mesh\" object in the JSON statistics");
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
        CHECK(b[i], "malloc");
        fill(b[i], 100 + i);
    }
}

static void blocks_check_free(char **b, unsigned n, const char *when)
{
    for (unsigned i = 0; i < n; i++)
        CHECK(filled(b[i], 100 + i), "block %u (%p) overwritten %s", i, (void *)b[i], when);
    for (unsigned i = 0; i < n; i++)
        free(b[i]);
}

Test(mesh, slots, .timeout = 300)
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
    sd_shrink_all();
    s = slot_fig();
    m = mesh_fig();
    printf("slots: after sd_shrink_all: %lu stale, %lu aliases, %lu maps, %lu dirty bytes\n",
           s.stale, m.aliases, s.maps, s.dirty);
    CHECK(s.stale == 0 && m.aliases == 0, "%lu stale aliases, %lu aliases after sd_shrink_all",
          s.stale, m.aliases);
    CHECK(s.maps < maps_meshed, "the maps of the aliases were not given back (%lu, %lu meshed)",
          s.maps, maps_meshed);
    CHECK(s.dirty == 0, "%lu dirty bytes after sd_shrink_all", s.dirty);

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
    CHECK(s.reused > reused0, "no released slot was reused while dirty in 21 rounds");

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
    CHECK(s.dirty == 0, "%lu dirty bytes still after 5 s idle", s.dirty);
}

/* sd_defrag_realloc moves objects of meshed slabs too: after meshing,
 * free all but the first kept object of every 8 KiB, so that each meshed
 * group is at most a quarter full; moving every object then empties the
 * groups, and (nearly) every alias is unmeshed. */
Test(mesh, hint, .timeout = 300)
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
        CHECK(q, "sd_defrag_realloc");
        for (unsigned k = 0; k < OBJ; k++)      /* fill()'s bytes, of the old address */
            CHECK(q[k] == (char)(9 * 31 + k * 7 + (old >> 4)),
                  "object %u lost byte %u in the move", i, k);
        kept[i] = q;
    }
    sd_shrink_all();
    struct mesh_fig g = mesh_fig();
    printf("hint: %lu aliases before, %u of %u objects hinted, %lu aliases after\n",
           f.aliases, hinted, nkept, g.aliases);
    /* Not quite all: the last partial slabs a cache keeps anyway
     * (SLABDEFRAG_MIN_PARTIAL) are not worth emptying. */
    CHECK(hinted * 10 >= nkept * 9, "only %u of %u objects hinted", hinted, nkept);
    CHECK(g.aliases * 10 <= f.aliases, "%lu of %lu aliases left: objects of meshed "
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
Test(mesh, harden, .timeout = 300)
{
    sparse_and_meshed(3);
    char *victim = meshed_free_slot();
    CHECK(victim, "no two meshed blocks found");
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
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
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child status %#x; stderr: %s", st, err);
    unsigned long long obj = 0, slab = 0, held = 0;
    char name[64];
    CHECK(sscanf(err, "slabdefrag: heap corruption: free object 0x%llx of cache %63s "
                      "(slab 0x%llx) holds 0x%llx as its next pointer", &obj, name, &slab,
                 &held) == 4, "report: %s", err);
    CHECK(!strcmp(name, "malloc-1024"), "cache %s", name);
    CHECK((uintptr_t)held == (uintptr_t)harden_global, "held %#llx, forged %p", held,
          (void *)harden_global);
    CHECK((obj & (geo.window - 1)) == ((uintptr_t)victim & (geo.window - 1)),
          "object %#llx, victim %p", obj,
          (void *)victim);
    printf("harden: forged pointer in meshed slot %p reported as object %#llx\n",
           (void *)victim, obj);
    free_kept();
}
