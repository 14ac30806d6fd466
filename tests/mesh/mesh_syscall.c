/*
 * tests/mesh/mesh_syscall.c - the kernel writing into slabs being meshed
 * (SLABDEFRAG_MESH=1, under the shared library): `mesh_syscall
 * <case>`, exit 0 on success, in this process (tests/subject.h), as
 * mesh_test.c, whose fixture it shares (meshfix.h).
 *
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
 * runs both cases under mprotect and kernel under uffd too.
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

#include "../subject.h"

#include "meshjson.h"
#include "meshfix.h"

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
    check(n > 0, "%s into %p failed: %s", call, (const void *)p,
          n < 0 ? strerror(errno) : "EOF");
    for (ssize_t i = 0; i < n; i++)
        check(p[i] == stream_byte(ch->got + (uint64_t)i),
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
                check(m->msg_flags == 0, "recvmsg flags %x", m->msg_flags);
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

Scenario(syscall, .timeout = 300)
{
    int pfd[2], sfd[2];
    check(pipe(pfd) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0, "pipe");
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
    check(write(pfd[1], "x", 1) == 1 && write(sfd[1], "y", 1) == 1, "write");
    errno = 0;
    check(read(pfd[0], bad, 1) == -1 && errno == EFAULT, "read: %s", strerror(errno));
    errno = 0;
    check(readv(pfd[0], &badv, 1) == -1 && errno == EFAULT, "readv: %s", strerror(errno));
    errno = 0;
    check(recv(sfd[0], bad, 1, 0) == -1 && errno == EFAULT, "recv: %s", strerror(errno));
    errno = 0;
    check(recvmsg(sfd[0], &badm, 0) == -1 && errno == EFAULT, "recvmsg: %s",
          strerror(errno));
    check(read(pfd[0], &c, 1) == 1 && c == 'x' && recv(sfd[0], &c, 1, 0) == 1 && c == 'y',
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
            check(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
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
    check(f.meshes - f0.meshes >= rounds * 8, "too few meshes (%lu)", f.meshes - f0.meshes);
    check(sys_calls >= rounds, "the reader hardly ran (%lu calls)", sys_calls);
    /* Dozens per run, mostly at the forks (the barrier lasts while the
     * child copies the heap): none means the wrappers were not exercised. */
    check(f.retried > f0.retried, "no system call met the barrier");
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
        else check(n > 0, "read(file): %s", strerror(errno));
        break;
    case K_FREAD:                           /* stdio refills its heap buffer */
        n = (ssize_t)fread(p, 1, len, fp);
        if (n > 0)
            got_bytes(&kfile_ch, p, n, "fread");
        if (ferror(fp)) {
            check(errno == EFAULT, "fread: %s", strerror(errno));
            fault = 1;
            clearerr(fp);
        }
        break;
    case K_FGETS:
        if (fgets((char *)p, 64, ff)) {
            unsigned v = ~0u;
            check(sscanf((char *)p, "line %u", &v) == 1 && v == *line,
                  "fgets: line %u reads \"%.14s\"", *line, (char *)p);
            *line = (*line + 1) % KLINES;
        } else if (ferror(ff)) {
            check(errno == EFAULT, "fgets: %s", strerror(errno));
            fault = 1;
            clearerr(ff);
            /* glibc's fgets drops what it had read of the line before the
             * refill that failed: go on at the next whole line. */
            long pos = ftell(ff);
            check(pos >= 0, "ftell: %s", strerror(errno));
            *line = (unsigned)((pos + 13) / 14) % KLINES;
            check(fseek(ff, (long)*line * 14, SEEK_SET) == 0, "fseek: %s", strerror(errno));
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
        else check(r == 0 && st->st_size == KLINES * 14, "stat: %s", strerror(errno));
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
        check(f[0] && f[1], "fdopen/fopen");
        check(setvbuf(f[0], kept[0], _IOFBF, OBJ) == 0 &&
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
            check(fread(tmp, 1, left, f[0]) == left, "fread of the buffered rest");
            got_bytes(&kfile_ch, tmp, (ssize_t)left, "fread");
        }
        fclose(f[0]);
        fclose(f[1]);
        free_kept();
        sd_shrink_all();
    }
}

Scenario(kernel, .timeout = 300)
{
    const char *want = getenv("SLABDEFRAG_MESH_BARRIER");
    int uffd = !want || strcmp(want, "mprotect");
    int pfd[2], sfd[2], kfd[2];
    check(pipe(pfd) == 0 && pipe(kfd) == 0 &&
          socketpair(AF_UNIX, SOCK_STREAM, 0, sfd) == 0, "pipe");
    signal(SIGPIPE, SIG_IGN);
    FILE *w = fopen(kpath, "w");
    check(w, "%s: %s", kpath, strerror(errno));
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
            skip_scenario("kernel: userfaultfd is not available here: skipped");
        }
        uffd = 0;                           /* auto fell back to mprotect */
    }
    struct mesh_fig f0 = mesh_fig();
    kernel_rounds(30);
    /* A fork child meshes too, with a userfaultfd of its own. */
    pid_t pid = fork();
    if (pid == 0) {
        kernel_rounds(3);
        check(!uffd || barrier_is("uffd"), "the child lost the uffd barrier");
        for (int op = 0; op < K_OPS; op++)
            check(!uffd || !k_efault[op], "child: %s failed with EFAULT", k_name[op]);
        _exit(0);
    }
    int st;
    check(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the child failed (status %x)", st);
    struct mesh_fig f = mesh_fig();
    char *stats = stats_json();
    const char *m = json_object(stats, "mesh");
    printf("kernel: %lu meshes, barrier %s; mesh %.*s\n", f.meshes - f0.meshes,
           uffd ? "uffd" : "mprotect", m ? (int)(strchr(m, '}') - m + 1) : 0, m ? m : "");
    free(stats);
    for (int op = 0; op < K_OPS; op++)
        printf("  %-10s %8lu calls, %lu EFAULT\n", k_name[op], k_calls[op], k_efault[op]);
    check(f.meshes - f0.meshes >= 30 * 8, "too few meshes (%lu)", f.meshes - f0.meshes);
    for (int op = 0; op < K_OPS; op++) {
        check(k_calls[op] > 100, "%s hardly ran", k_name[op]);
        /* uffd: none.  mprotect: only what README lists (read and recv retry). */
        check(!k_efault[op] || (!uffd && op != K_READ && op != K_RECV),
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
