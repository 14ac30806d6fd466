/*
 * classes/sample.c - the countdown's slow side and the profiler's plug
 * (see sample.h; the profiler is hooks/prof.c).
 */
#include "sample.h"

SD_HIDDEN const struct sample_ops *sd_sample_ops;
SD_HIDDEN unsigned long sd_sample_large;

int sample_check(size_t n)
{
    const struct sample_ops *ops = __atomic_load_n(&sd_sample_ops, __ATOMIC_ACQUIRE);
    if (!ops) {                         /* before the profiler's constructor */
        sd_sample_left = SAMPLE_RECHECK;
        return SAMPLE_NONE;
    }
    return ops->check(n);
}

void sample_taken(void *p, size_t n, int how)
{
    if (p)
        sd_sample_ops->taken(p, n, how);
}

void sample_fork(enum sd_fork_phase phase)
{
    const struct sample_ops *ops = __atomic_load_n(&sd_sample_ops, __ATOMIC_ACQUIRE);
    if (ops)
        ops->fork(phase);
}
