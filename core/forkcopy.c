/*
 * core/forkcopy.c - fork with meshing: the parent's shared slots are
 * write-protected across the fork, the child copies each into an object
 * of its own and re-creates the mesh aliases, and the parent waits for
 * that copy before it writes to them again (see heapfile.h, "Fork").
 */
#define _GNU_SOURCE
#include "heapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "fdguard.h"
#include "heapfile_internal.h"
#include "os.h"
#include "types.h"
#include "segment.h"
#include "uffd.h"

int forkcopy_active;                    /* the shared slots are read-only */
int forkcopy_protected;                 /* ... and we made it so */
static int forkcopy_shared;             /* this fork has shared slots */
pid_t forkcopy_pid;                     /* the parent's pid during a fork */
uint32_t forkcopy_tid;                  /* the forking thread */
static uintptr_t step_page;             /* a page let through for one
                                           instruction (forkcopy_step) */
static struct sigaction step_old;       /* SIGTRAP's action meanwhile */
static int step_unblocked;              /* SIGTRAP was blocked: block again */
static int fork_pipe[2] = { -1, -1 };
static int child_done;
static void (*child_realias)(void);     /* forkcopy_set_realias */

void forkcopy_set_realias(void (*realias)(void))
{
    child_realias = realias;
}

/* glibc's fork() writes malloc'd memory of its own after the prepare
 * handlers and before the fork system call: the NSS database state's lock
 * (__nss_database_fork_prepare_parent).  The forking thread must not wait
 * for a fork it is itself holding up.  So its write goes through: the
 * page is made writable for exactly one instruction (the trap flag), and
 * the trap after it protects the page again, still before the fork, so
 * no write after the fork ever reaches the child's copy.  x86-64 only;
 * elsewhere such a write waits forever. */
#if defined(__x86_64__)
static void forkcopy_step_done(int sig, siginfo_t *si, void *ucv)
{
    ucontext_t *uc = ucv;
    if (step_page && os_gettid() == forkcopy_tid) {
        os_protect((void *)step_page, SD_PAGE_SIZE, 0);
        step_page = 0;
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100L;
        if (step_unblocked)
            sigaddset(&uc->uc_sigmask, SIGTRAP);
        __sigaction(SIGTRAP, &step_old, NULL);
        return;
    }
    __sigaction(SIGTRAP, &step_old, NULL);  /* not ours: theirs again */
}

int forkcopy_step(uintptr_t a, void *ucv)
{
    ucontext_t *uc = ucv;
    if (!forkcopy_protected || step_page || getpid() != forkcopy_pid || os_gettid() != forkcopy_tid)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forkcopy_step_done;
    sa.sa_flags = SA_SIGINFO;
    sigfillset(&sa.sa_mask);
    if (__sigaction(SIGTRAP, &sa, &step_old))
        return 0;
    step_unblocked = sigismember(&uc->uc_sigmask, SIGTRAP) == 1;
    sigdelset(&uc->uc_sigmask, SIGTRAP);
    step_page = a & ~(SD_PAGE_SIZE - 1);
    os_protect((void *)step_page, SD_PAGE_SIZE, 1);
    uc->uc_mcontext.gregs[REG_EFL] |= 0x100L;   /* trap after one instruction */
    return 1;
}
#else
int forkcopy_step(uintptr_t a, void *ucv) { return 0; }
#endif

void forkcopy_prepare(void)
{
    if (!heapfile_on)
        return;
    forkcopy_pid = getpid();
    forkcopy_tid = os_gettid();
    child_done = 0;
    /* Nothing shared (nothing meshed yet, or no more): a fork as without
     * meshing, no barrier and no wait for the child. */
    size_t runs = 0;
    forkcopy_shared = 0;
    segment_count_shared(&runs);
    if (!runs)
        return;
    forkcopy_shared = 1;
    int p[2];
    fdguard_open_begin();
    if (pipe2(p, O_CLOEXEC))
        p[0] = p[1] = -1;
    fdguard_adopt(p[0], &fork_pipe[0]);
    fdguard_adopt(p[1], &fork_pipe[1]);
    fdguard_open_end();
    __atomic_fetch_add(&wbarrier_generation, 1, __ATOMIC_ACQ_REL);
    wbarrier_mine = 1;
    __atomic_store_n(&forkcopy_active, 1, __ATOMIC_RELEASE);
    /* Without our handler a writer would crash: then copy unprotected
     * (the child may see writes the parent's other threads make while it
     * copies). */
    forkcopy_protected = sigchain_handler_ours() && fork_pipe[0] >= 0 &&
                         segment_protect_shared(0, NULL) == 0;
}

void forkcopy_parent(void)
{
    if (!heapfile_on || !forkcopy_shared)
        return;
    fdguard_close(&fork_pipe[1]);
    int fd = fdguard_get(&fork_pipe[0]);
    char c;
    while (fd >= 0 && os_read(fd, &c, 1) < 0 && errno == EINTR)
        ;                               /* EOF if the fork failed */
    fdguard_put();
    fdguard_close(&fork_pipe[0]);
    segment_protect_shared(1, NULL);    /* (all of it, if a part failed) */
    __atomic_fetch_add(&wbarrier_generation, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&forkcopy_active, 0, __ATOMIC_RELEASE);
    wbarrier_mine = 0;
}

/* Runs once in the child: from the atfork handler, or from the SIGSEGV
 * handler if the child wrote to a shared slot first.  Single-threaded. */
void forkcopy_child_copy(void)
{
    if (child_done)
        return;
    child_done = 1;
    fdguard_fork_child();               /* (maybe before the atfork handler) */
    if (forkcopy_shared) {
        int err = segment_child_refile();
        if (err)
            sd_fatal("fork: cannot give the child its own copy of the meshed "
                     "slabs (errno %d)", err);
        if (child_realias)
            child_realias();
    }
    uffd_fork_child();                  /* the inherited one is the parent's */
    if (uffd_ready())
        segment_register_all();         /* the new mappings */
    if (!forkcopy_shared)
        return;
    char c = 1;
    if (fork_pipe[1] >= 0 && write(fork_pipe[1], &c, 1) < 0) { /* the parent sees EOF */ }
    fdguard_close(&fork_pipe[1]);
    fdguard_close(&fork_pipe[0]);
    __atomic_store_n(&forkcopy_active, 0, __ATOMIC_RELEASE);
    wbarrier_mine = 0;
}

void forkcopy_child(void)
{
    if (heapfile_on)
        forkcopy_child_copy();
}
