/*
 * bench/forkwp.c - the kernel's side of a fork at copy-on-write cost with
 * meshed slabs (docs/meshing.md, "Fork"), measured without the allocator.
 *
 *   forkwp [-m HEAP_MIB] [-n HOSTS] [-f FORKS] [-w WRITES] [-c]
 *
 * Builds what a meshed heap looks like to the kernel: HEAP_MIB (default
 * 1024) of private anonymous memory, every page written, and HOSTS
 * (default 20000) 4 KiB shared anonymous objects, each mapped twice (a
 * host and its alias, mremap with an old size of 0), every host and alias
 * its own mapping.  The shared mappings are registered with a
 * userfaultfd in write-protect mode with UFFD_FEATURE_EVENT_FORK; a
 * monitor thread reads it and the child descriptors the fork events give
 * it.  Then, FORKS (default 5) times each:
 *
 *  plain  fork() with nothing write-protected, the child exits at once
 *         (the kernel's fork of this address space: what jemalloc pays);
 *  wp     every shared mapping write-protected (one UFFDIO_WRITEPROTECT
 *         per mapping, the worst case: no two adjacent; with -c one call
 *         for all of them, the best case), then fork();
 *         the fork event is read by the monitor before fork() returns.
 *         The child writes WRITES (default 200) hosts at random, each
 *         through its alias, and checks it reads them back through the
 *         host; the parent then writes WRITES other hosts.  A write by
 *         either is a write-protect fault the monitor resolves by moving
 *         the parent off the object ("leaving": a new object with the
 *         same bytes, mremap'd over the host and the alias) and lifting
 *         the child's protection of that host.  The child reports whether
 *         any host it had not written changed after the fork, and the
 *         parent checks that none of the child's writes reached it.
 *
 * Reported (stderr, key=value, medians over the forks): plain_fork_ms,
 * wp_ms (the protection calls), wp_fork_ms (protection and fork),
 * wp_exit_ms (fork until the child is reaped, its writes included),
 * leave_us (one parent-side resolution: copy, two remaps, wake),
 * child_fault_us and parent_fault_us (a write that faults, as the writer
 * sees it), errors (any wrong byte seen).  Needs userfaultfd for kernel
 * faults and CAP_SYS_PTRACE (EVENT_FORK); exits 77 without them.
 */
#include "benchutil.h"

#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define PAGE 4096UL
#define MAXF 32

static int ufd, cfd = -1;               /* ours; the child's (from the event) */
static char *area;                      /* host i at 2i pages, its alias at 2i+1 */
static long nhosts;
static unsigned char *left;             /* the parent has left host i */
static double leave_ns_sum;
static long leaves;
static volatile int child_gone;

static void die_errno(const char *what)
{
    fprintf(stderr, "forkwp: %s: %s\n", what, strerror(errno));
    exit(errno == EPERM || errno == EINVAL || errno == ENOSYS ? 77 : 1);
}

static void wp_range(int fd, void *p, size_t len, int on)
{
    struct uffdio_writeprotect wp = {
        .range = { (uintptr_t)p, len }, .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0 };
    if (ioctl(fd, UFFDIO_WRITEPROTECT, &wp) && fd == ufd)
        die_errno("UFFDIO_WRITEPROTECT");
}

static void reg(void *p, size_t len)
{
    struct uffdio_register r = { .range = { (uintptr_t)p, len },
                                 .mode = UFFDIO_REGISTER_MODE_WP };
    if (ioctl(ufd, UFFDIO_REGISTER, &r))
        die_errno("UFFDIO_REGISTER");
}

/* The parent leaves host i: a new object with its bytes over the host,
 * the alias re-made on it, both registered again for the next fork; then
 * the child's view of it is the child's alone. */
static void leave(long i)
{
    if (left[i])
        return;
    double t0 = bu_now();
    char *h = area + 2 * i * PAGE, *a = h + PAGE;
    char *t = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        die_errno("mmap");
    memcpy(t, h, PAGE);
    if (mremap(t, PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, h) == MAP_FAILED ||
        mremap(h, 0, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, a) == MAP_FAILED)
        die_errno("mremap");
    reg(h, 2 * PAGE);
    left[i] = 1;
    if (cfd >= 0)
        wp_range(cfd, h, 2 * PAGE, 0);  /* ESRCH: the child is gone */
    leave_ns_sum += (bu_now() - t0) * 1e9;
    leaves++;
}

static void *monitor(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = { { ufd, POLLIN, 0 }, { cfd, POLLIN, 0 } };
        if (poll(p, cfd >= 0 ? 2 : 1, -1) < 0)
            continue;
        for (int k = 0; k < 2; k++) {
            if (!(p[k].revents & POLLIN))
                continue;
            struct uffd_msg m;
            if (read(p[k].fd, &m, sizeof m) != sizeof m)
                continue;
            if (m.event == UFFD_EVENT_FORK) {
                cfd = (int)m.arg.fork.ufd;
            } else if (m.event == UFFD_EVENT_PAGEFAULT) {
                uintptr_t addr = m.arg.pagefault.address & ~(PAGE - 1);
                long i = (long)((addr - (uintptr_t)area) / PAGE / 2);
                leave(i);
                struct uffdio_range r = { (uintptr_t)area + 2 * i * PAGE, 2 * PAGE };
                ioctl(ufd, UFFDIO_WAKE, &r);  /* writers on the old mapping */
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long heap_mib = 1024, forks = 5, writes = 200;
    int one_call = 0;
    nhosts = 20000;
    int c;
    while ((c = getopt(argc, argv, "m:n:f:w:c")) != -1) {
        switch (c) {
        case 'm': heap_mib = atol(optarg); break;
        case 'n': nhosts = atol(optarg); break;
        case 'f': forks = atol(optarg); break;
        case 'w': writes = atol(optarg); break;
        case 'c': one_call = 1; break;
        default:
            fprintf(stderr, "usage: forkwp [-m HEAP_MIB] [-n HOSTS] [-f FORKS] [-w WRITES] [-c]\n");
            return 2;
        }
    }
    if (forks < 1 || forks > MAXF || nhosts < 2 * writes || writes < 0)
        bu_die("forkwp", "bad argument");

    char *heap = mmap(NULL, (size_t)heap_mib << 20, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    area = mmap(NULL, 2 * nhosts * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    left = mmap(NULL, (size_t)nhosts, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (heap == MAP_FAILED || area == MAP_FAILED || left == MAP_FAILED)
        die_errno("mmap");
    memset(heap, 1, (size_t)heap_mib << 20);
    for (long i = 0; i < nhosts; i++) {
        char *h = area + 2 * i * PAGE;
        if (mmap(h, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) == MAP_FAILED ||
            mremap(h, 0, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, h + PAGE) == MAP_FAILED)
            die_errno("mapping a host and its alias");
        memset(h, (int)(i & 0x7f), PAGE);
    }

    double plain[MAXF];
    for (long k = 0; k < forks; k++) {
        double t0 = bu_now();
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        plain[k] = (bu_now() - t0) * 1e3;
        waitpid(pid, NULL, 0);
    }

    long r = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (r < 0)
        die_errno("userfaultfd");
    ufd = (int)r;
    struct uffdio_api api = { .api = UFFD_API,
                              .features = UFFD_FEATURE_EVENT_FORK |
                                          UFFD_FEATURE_WP_HUGETLBFS_SHMEM };
    if (ioctl(ufd, UFFDIO_API, &api))
        die_errno("UFFDIO_API (EVENT_FORK needs CAP_SYS_PTRACE)");
    reg(area, 2 * nhosts * PAGE);
    pthread_t th;
    pthread_create(&th, NULL, monitor, NULL);

    double wp[MAXF], wpf[MAXF], wpe[MAXF], cf[MAXF], pf[MAXF];
    long errors = 0;
    double leave_us = 0;
    bu_rng rng;
    bu_seed(&rng, 7);
    for (long k = 0; k < forks; k++) {
        /* The hosts the child and the parent will write */
        long *cw = calloc((size_t)writes + 1, sizeof *cw), *pw = calloc((size_t)writes + 1, sizeof *pw);
        for (long j = 0; j < writes; j++) {
            cw[j] = 2 * (long)bu_range(&rng, 0, (size_t)nhosts / 2 - 1);
            pw[j] = cw[j] + 1;
        }
        int pp[2];
        if (pipe(pp))
            die_errno("pipe");
        memset(left, 0, (size_t)nhosts);
        leave_ns_sum = 0;
        leaves = 0;
        double t0 = bu_now();
        if (one_call)
            wp_range(ufd, area, 2 * nhosts * PAGE, 1);
        for (long i = 0; !one_call && i < nhosts; i++) {
            wp_range(ufd, area + 2 * i * PAGE, PAGE, 1);
            wp_range(ufd, area + (2 * i + 1) * PAGE, PAGE, 1);
        }
        double t1 = bu_now();
        pid_t pid = fork();
        if (pid == 0) {
            double c0 = bu_now();
            long bad = 0;
            for (long j = 0; j < writes; j++) {
                /* volatile: the two addresses are one byte, which C
                 * does not know */
                volatile char *h = area + 2 * cw[j] * PAGE;
                h[PAGE + 8] = (char)0xc5;           /* through the alias */
                bad += h[8] != (char)0xc5;          /* seen through the host */
            }
            double c1 = bu_now();
            bu_sleep(0.05);                         /* the parent's writes */
            for (long i = 0; i < nhosts; i++) {
                volatile char *h = area + 2 * i * PAGE;
                if (h[8] != (char)0xc5)
                    bad += h[0] != (char)(i & 0x7f) || h[8] != (char)(i & 0x7f);
            }
            double out[2] = { (double)bad, writes ? (c1 - c0) * 1e6 / (double)writes : 0 };
            _exit(write(pp[1], out, sizeof out) == sizeof out ? 0 : 1);
        }
        double t2 = bu_now();
        close(pp[1]);
        double p0 = bu_now();
        for (long j = 0; j < writes; j++)
            area[2 * pw[j] * PAGE + 8] = (char)0x3a;
        double p1 = bu_now();
        double in[2] = { 1, 0 };
        if (read(pp[0], in, sizeof in) != sizeof in)
            errors++;
        close(pp[0]);
        waitpid(pid, NULL, 0);
        double t3 = bu_now();
        for (long j = 0; j < writes; j++)
            errors += area[2 * cw[j] * PAGE + 8] == (char)0xc5;   /* the child's write */
        if (in[0] || errors)
            fprintf(stderr, "forkwp: fork %ld: %ld wrong bytes in the child, %ld so far in all\n",
                    k, (long)in[0], errors + (long)in[0]);
        errors += (long)in[0];
        wp[k] = (t1 - t0) * 1e3;
        wpf[k] = (t2 - t0) * 1e3;
        wpe[k] = (t3 - t0) * 1e3;
        cf[k] = in[1];
        pf[k] = writes ? (p1 - p0) * 1e6 / (double)writes : 0;
        /* The child is gone: lift what is left of the protection. */
        for (long i = 0; i < nhosts; i++)
            if (!left[i])
                wp_range(ufd, area + 2 * i * PAGE, 2 * PAGE, 0);
        if (cfd >= 0) {
            close(cfd);
            cfd = -1;
        }
        for (long j = 0; j < writes; j++)       /* the parent's bytes again */
            area[2 * pw[j] * PAGE + 8] = (char)(pw[j] & 0x7f);
        free(cw);
        free(pw);
        leave_us = leaves ? leave_ns_sum / (double)leaves / 1e3 : 0;
    }
    printf("forkwp: %ld MiB private, %ld hosts + aliases: plain fork %.1f ms; "
           "write-protect %.1f ms, with the fork %.1f ms, until the child exited %.1f ms; "
           "a leave %.1f us, a child write fault %.1f us, a parent one %.1f us; %ld errors\n",
           heap_mib, nhosts, bu_median(plain, forks), bu_median(wp, forks), bu_median(wpf, forks),
           bu_median(wpe, forks), leave_us, bu_median(cf, forks), bu_median(pf, forks), errors);
    bu_kv_double("plain_fork_ms", bu_median(plain, forks));
    bu_kv_double("wp_ms", bu_median(wp, forks));
    bu_kv_double("wp_fork_ms", bu_median(wpf, forks));
    bu_kv_double("wp_exit_ms", bu_median(wpe, forks));
    bu_kv_double("leave_us", leave_us);
    bu_kv_double("child_fault_us", bu_median(cf, forks));
    bu_kv_double("parent_fault_us", bu_median(pf, forks));
    bu_kv_long("errors", errors);
    return errors ? 1 : 0;
}
