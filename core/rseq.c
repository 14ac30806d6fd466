/*
 * core/rseq.c - is rseq usable, and the membarrier fence (see rseq.h).
 *
 * glibc 2.35+ registers an rseq area for every thread it starts and says
 * where it is through __rseq_offset and __rseq_size; both are weak here,
 * so an older glibc simply means "no rseq".  A size of 0 means glibc did
 * not register (GLIBC_TUNABLES=glibc.pthread.rseq=0, a kernel without
 * rseq, Valgrind, a seccomp filter that refuses it).  The drains of other
 * CPUs' caches need membarrier's rseq fence (Linux 5.10+), registered
 * once for the process.
 */
#define _GNU_SOURCE
#include "rseq.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "os.h"

long sd_rseq_offset;

extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

int rseq_thread_ok(void)
{
#if SD_HAVE_RSEQ
    return __atomic_load_n(&rseq_self()->cpu_id, __ATOMIC_RELAXED) >= 0;
#else
    return 0;
#endif
}

int rseq_setup(void)
{
#if SD_HAVE_RSEQ
    if (!&__rseq_size || !&__rseq_offset || __rseq_size < 20)
        return 0;
    sd_rseq_offset = (long)__rseq_offset;
    if (!rseq_thread_ok())
        return 0;
    int cmds = os_membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ))
        return 0;
    return os_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ) == 0;
#else
    return 0;
#endif
}

int rseq_fence(void)
{
    int r = os_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ);
    return r < 0 ? r : 0;
}

void rseq_after_fork_child(void)
{
    /* A new mm: make sure the fence is registered for it too. */
    os_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ);
}
