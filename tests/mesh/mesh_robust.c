/*
 * tests/mesh/mesh_robust.c - what a program may do to its process must not
 * break the allocator: `mesh_robust <case>`, run with and
 * without SLABDEFRAG_MESH=1 (and by the suite's second run in the
 * per-thread mode).  With meshing each case meshes first, so that every
 * fork copies shared slots.  A subject program (tests/subject.h), for
 * mesh_test.c's reason.
 *
 *   fds       every descriptor the library holds (found in /proc/self/fd)
 *             and the numbers around 512 are taken over by dup2 and dup3
 *             onto a file of the test's, and closed by close_range, before
 *             and after meshing; then meshing, forks and purges: the file
 *             is unchanged and the heap intact
 *   closeall  closefrom(3), close_range(3, ~0U, 0) and a close loop, then a
 *             fork, from the main thread and from a worker: both heaps
 *             intact and private
 *   protect   blocks made read-only, read-exec (code run), PROT_NONE, mlock'd,
 *             MADV_DONTFORK and MADV_WIPEONFORK keep all of it across a fork,
 *             in the parent and (but mlock, never inherited) in the child
 *   rawfork   _Fork, syscall(SYS_fork), syscall(SYS_clone) and clone()
 *             without CLONE_VM give the child a private heap both ways;
 *             vfork + exec and posix_spawn work
 *
 * The address-space limits are tests/robust/aslimit.sh's, a fork from a
 * signal handler tests/robust/forksig.sh's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slabdefrag.h"

#include "../subject.h"

#include "meshjson.h"

#include "meshfix.h"

extern char **environ;
extern pid_t _Fork(void);

static int meshing(void)
{
    const char *m = getenv("SLABDEFRAG_MESH");
    return m && *m == '1';
}

/* With meshing: make_sparse and its meshes.  Without: NBLOCKS blocks,
 * every fourth kept (the geometry make_sparse needs is meshing's). */
static void sparse(unsigned seed)
{
    if (meshing()) {
        make_sparse(seed);
        sd_shrink_all();
        check(mesh_fig().aliases > 0, "nothing meshed");
        return;
    }
    nkept = 0;
    for (unsigned i = 0; i < NBLOCKS; i++) {
        char *p = malloc(OBJ);
        check(p, "malloc");
        if (i % 4 == 0) {
            kept[nkept++] = p;
            fill(p, seed);
        } else {
            free(p);
        }
    }
    sd_shrink_all();
}

static int child_ok(pid_t pid)
{
    int st;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* ---- fds ---- */

static void file_fill(int fd)
{
    char buf[4096];
    for (unsigned i = 0; i < sizeof buf; i++)
        buf[i] = (char)(i * 13);
    check(pwrite(fd, buf, sizeof buf, 0) == sizeof buf, "pwrite");
}

static void file_check(int fd, const char *when)
{
    struct stat st;
    check(fstat(fd, &st) == 0 && st.st_size == 4096, "the program's file is %lld bytes %s",
          (long long)st.st_size, when);
    char buf[4096];
    check(pread(fd, buf, sizeof buf, 0) == sizeof buf, "pread");
    for (unsigned i = 0; i < sizeof buf; i++)
        check(buf[i] == (char)(i * 13), "the program's file changed at byte %u %s", i, when);
}

/* Every descriptor the test holds still refers to its file. */
static void mine_check(const char *mine, int file, const char *when)
{
    struct stat a, b;
    check(fstat(file, &a) == 0, "fstat");
    for (int fd = 0; fd < 4096; fd++)
        if (mine[fd])
            check(fstat(fd, &b) == 0 && b.st_ino == a.st_ino && b.st_dev == a.st_dev,
                  "descriptor %d is no longer the program's file %s", fd, when);
}

/* The descriptors open now that the test did not open (in `mine`). */
static int foreign_fds(const char *mine, int *out, int max)
{
    DIR *d = opendir("/proc/self/fd");
    check(d, "opendir");
    int n = 0, dfd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            int fd = atoi(e->d_name);
            if (fd != dfd && fd > 2 && fd < 4096 && !mine[fd] && n < max)
                out[n++] = fd;
        }
    closedir(d);
    return n;
}

/* Mesh, fork (the child meshes and purges too), purge, everything checked. */
static void exercise(unsigned seed, int file)
{
    sparse(seed);
    pid_t pid = fork();
    if (pid == 0) {
        check_kept(seed, "in the child");
        free_kept();
        sparse(seed + 1);
        check_kept(seed + 1, "in the child after its meshes");
        free_kept();
        sd_shrink_all();
        _exit(0);
    }
    check(child_ok(pid), "the child failed");
    check_kept(seed, "in the parent after the fork");
    free_kept();
    sd_shrink_all();
    file_check(file, "after meshing and a fork");
}

Scenario(fds, .timeout = 120)
{
    static char mine[4096];
    char path[] = "/tmp/sd-robust-XXXXXX";
    int file = mkstemp(path);
    check(file >= 0, "mkstemp");
    unlink(path);
    file_fill(file);
    mine[file] = 1;
    /* The numbers around the library's old fixed ones, before it meshes. */
    for (int fd = 505; fd < 520; fd++) {
        check(dup2(file, fd) == fd, "dup2 onto %d: %s", fd, strerror(errno));
        mine[fd] = 1;
    }
    exercise(1, file);
    for (int round = 0; round < 3; round++) {
        int theirs[64], n = foreign_fds(mine, theirs, 64);
        printf("fds: round %d: %d descriptors of the library's\n", round, n);
        for (int i = 0; i < n; i++) {
            int fd = theirs[i];
            int r = round == 0 ? dup2(file, fd) : round == 1 ? dup3(file, fd, O_CLOEXEC)
                               : (int)close_range((unsigned)fd, (unsigned)fd, 0);
            check(r == (round < 2 ? fd : 0), "taking %d: %s", fd, strerror(errno));
            if (round < 2)
                mine[fd] = 1;
        }
        exercise(10 + 2 * round, file);
        mine_check(mine, file, "after meshing and a fork");
    }
    file_check(file, "at the end");
}

/* ---- closeall ---- */

enum { CLOSEFROM, CLOSE_RANGE, CLOSE_LOOP };

static void close_all(int how)
{
    if (how == CLOSEFROM)
        closefrom(3);
    else if (how == CLOSE_RANGE)
        check(close_range(3, ~0U, 0) == 0, "close_range: %s", strerror(errno));
    else
        for (int fd = 3; fd < 4096; fd++)
            close(fd);
}

/* Close everything, then fork with the parent and child each writing
 * their own values; a pipe is made after the close to order them. */
static void *close_and_fork(void *arg)
{
    int how = (int)(intptr_t)arg;
    close_all(how);
    int to_child[2], to_parent[2];
    check(pipe(to_child) == 0 && pipe(to_parent) == 0, "pipe");
    char c = 0;
    pid_t pid = fork();
    if (pid == 0) {
        check_kept(20, "in the child");
        for (unsigned i = 0; i < nkept; i++)
            fill(kept[i], 21);
        char *x = malloc(OBJ);
        check(x, "malloc in the child");
        free(x);
        check(write(to_parent[1], &c, 1) == 1 && read(to_child[0], &c, 1) == 1, "pipe");
        check_kept(21, "in the child after the parent wrote");
        _exit(0);
    }
    check(pid > 0, "fork: %s", strerror(errno));
    check(read(to_parent[0], &c, 1) == 1, "the child died");
    check_kept(20, "in the parent after the child wrote");
    for (unsigned i = 0; i < nkept; i++)
        fill(kept[i], 22);
    check(write(to_child[1], &c, 1) == 1, "pipe");
    check(child_ok(pid), "the child failed");
    check_kept(22, "in the parent");
    return NULL;
}

Scenario(closeall, .timeout = 120)
{
    for (int how = CLOSEFROM; how <= CLOSE_LOOP; how++)
        for (int worker = 0; worker < 2; worker++) {
            sparse(20);
            if (worker) {
                pthread_t t;
                check(pthread_create(&t, NULL, close_and_fork, (void *)(intptr_t)how) == 0,
                      "pthread_create");
                pthread_join(t, NULL);
            } else {
                close_and_fork((void *)(intptr_t)how);
            }
            free_kept();
            sparse(23);                 /* meshing still works */
            check_kept(23, "after the close and fork");
            free_kept();
            sd_shrink_all();
        }
}

/* ---- protect ---- */

/* In a child: does touching p (write 1, read 0) kill it with SIGSEGV? */
static int faults(void *p, int write)
{
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        if (write)
            *(volatile char *)p = 1;
        else
            (void)*(volatile char *)p;
        _exit(0);
    }
    int st;
    check(waitpid(pid, &st, 0) == pid, "waitpid");
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

static const unsigned char ret42[] = { 0xb8, 0x2a, 0x00, 0x00, 0x00, 0xc3 };  /* mov $42,%eax; ret */

static size_t vmlck_kb(void)
{
    long kb = proc_status_kb("VmLck");
    return kb > 0 ? (size_t)kb : 0;
}

struct blocks { char *ro, *rx, *none, *lck, *dontfork, *wipe; size_t lck_kb; };

/* What must hold of the blocks, in the parent (child 0) and a child. */
static void check_blocks(const struct blocks *b, int child, const char *when)
{
    check(b->ro[0] == 'r' && faults(b->ro, 1), "the read-only block is writable %s", when);
    check(((int (*)(void))(void *)b->rx)() == 42 && faults(b->rx, 1),
          "the read-exec block lost its code or protection %s", when);
    check(faults(b->none, 0), "the PROT_NONE block is readable %s", when);
    check(child || vmlck_kb() >= b->lck_kb, "VmLck %zu KiB < %zu %s", vmlck_kb(), b->lck_kb, when);
    check(b->wipe[0] == (child ? 0 : 'w'), "the MADV_WIPEONFORK block holds %d %s",
          b->wipe[0], when);
    check(!child || faults(b->dontfork, 0), "the MADV_DONTFORK block is in the child %s", when);
    check(child || b->dontfork[0] == 'd', "the MADV_DONTFORK block lost its bytes %s", when);
}

Scenario(protect, .timeout = 120)
{
    struct blocks b;
    char **all[] = { &b.ro, &b.rx, &b.none, &b.lck, &b.dontfork, &b.wipe };
    for (unsigned k = 0; k < sizeof all / sizeof all[0]; k++) {
        /* A page of its own: the smallest a program can protect. */
        check(posix_memalign((void **)all[k], 4096, 4096) == 0, "posix_memalign");
        memset(*all[k], 0, 4096);
    }
    b.ro[0] = 'r';
    memcpy(b.rx, ret42, sizeof ret42);
    b.dontfork[0] = 'd';
    b.wipe[0] = 'w';
    check(mprotect(b.ro, 4096, PROT_READ) == 0 && mprotect(b.rx, 4096, PROT_READ | PROT_EXEC) == 0 &&
          mprotect(b.none, 4096, PROT_NONE) == 0, "mprotect: %s", strerror(errno));
    size_t before = vmlck_kb();
    check(mlock(b.lck, 4096) == 0, "mlock: %s", strerror(errno));
    b.lck_kb = before + 4;
    check(madvise(b.dontfork, 4096, MADV_DONTFORK) == 0 &&
          madvise(b.wipe, 4096, MADV_WIPEONFORK) == 0, "madvise: %s", strerror(errno));
    check_blocks(&b, 0, "before any fork");
    for (int round = 0; round < 2; round++) {
        sparse(30 + round);
        pid_t pid = fork();
        if (pid == 0) {
            check_blocks(&b, 1, "in the child");
            check_kept(30 + round, "in the child");
            _exit(0);
        }
        check(child_ok(pid), "the child failed");
        check_blocks(&b, 0, "in the parent after a fork");
        check_kept(30 + round, "in the parent");
        free_kept();
        sd_shrink_all();
        check_blocks(&b, 0, "after a shrink");
    }
    munlock(b.lck, 4096);
    mprotect(b.ro, 4096, PROT_READ | PROT_WRITE);
    mprotect(b.rx, 4096, PROT_READ | PROT_WRITE);
    mprotect(b.none, 4096, PROT_READ | PROT_WRITE);
    madvise(b.dontfork, 4096, MADV_DOFORK);
    madvise(b.wipe, 4096, MADV_KEEPONFORK);
    for (unsigned k = 0; k < sizeof all / sizeof all[0]; k++)
        free(*all[k]);
}

/* ---- rawfork ---- */

enum { RAW_FORK, RAW_SYSCALL_FORK, RAW_SYSCALL_CLONE, RAW_CLONE, RAW_KINDS };
static const char *raw_name[] = { "_Fork", "syscall(SYS_fork)", "syscall(SYS_clone)", "clone" };
static int raw_pipe[2][2];

/* The child's side: its values, the parent's write unseen, its heap works. */
static int raw_child(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    char c = 0;
    check_kept(seed, "in the child");
    for (unsigned i = 0; i < nkept; i++)
        fill(kept[i], seed + 1);
    char *x = malloc(OBJ);
    check(x, "malloc in the child");
    free(x);
    check(write(raw_pipe[1][1], &c, 1) == 1 && read(raw_pipe[0][0], &c, 1) == 1, "pipe");
    check_kept(seed + 1, "in the child after the parent wrote");
    _exit(0);
}

static pid_t raw_fork(int kind, unsigned seed)
{
    static char stack[64 << 10] __attribute__((aligned(16)));
    pid_t pid = -1;
    switch (kind) {
    case RAW_FORK: pid = _Fork(); break;
    case RAW_SYSCALL_FORK: pid = (pid_t)syscall(SYS_fork); break;
    case RAW_SYSCALL_CLONE: pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0); break;
    case RAW_CLONE:
        return clone(raw_child, stack + sizeof stack, SIGCHLD, (void *)(uintptr_t)seed);
    }
    if (pid == 0)
        raw_child((void *)(uintptr_t)seed);
    return pid;
}

Scenario(rawfork, .timeout = 120)
{
    for (int kind = 0; kind < RAW_KINDS; kind++) {
        unsigned seed = 40 + 3 * (unsigned)kind;
        sparse(seed);
        check(pipe(raw_pipe[0]) == 0 && pipe(raw_pipe[1]) == 0, "pipe");
        char c = 0;
        pid_t pid = raw_fork(kind, seed);
        check(pid > 0, "%s: %s", raw_name[kind], strerror(errno));
        check(read(raw_pipe[1][0], &c, 1) == 1, "%s: the child died", raw_name[kind]);
        check_kept(seed, "in the parent after the child wrote");
        for (unsigned i = 0; i < nkept; i++)
            fill(kept[i], seed + 2);
        check(write(raw_pipe[0][1], &c, 1) == 1, "pipe");
        check(child_ok(pid), "%s: the child failed", raw_name[kind]);
        check_kept(seed + 2, "in the parent");
        for (int i = 0; i < 2; i++) {
            close(raw_pipe[i][0]);
            close(raw_pipe[i][1]);
        }
        free_kept();
        sd_shrink_all();
        printf("rawfork: %s: private both ways\n", raw_name[kind]);
    }
    /* The forks that share the address space with a child that execs. */
    sparse(60);
    pid_t pid = vfork();
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    check(child_ok(pid), "vfork + exec failed");
    char *argv[] = { "true", NULL };
    check(posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ) == 0 && child_ok(pid),
          "posix_spawn failed");
    check_kept(60, "after vfork and posix_spawn");
    free_kept();
}
