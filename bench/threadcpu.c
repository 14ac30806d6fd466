/*
 * bench/threadcpu.c - a preloadable helper for scripts/pyphases: at exit
 * (a destructor, so after the program's own teardown) it prints the CPU
 * time of the thread that runs exit - the program's main thread - apart
 * from the process's, which also counts the allocator's background
 * thread:
 *
 *   threadcpu main_user=U main_sys=S proc_user=U proc_sys=S
 *
 * on stderr.  LD_PRELOAD it after the allocator under test.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>

static double secs(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; }

__attribute__((destructor)) static void threadcpu_report(void)
{
    struct rusage t, p;
    if (getrusage(RUSAGE_THREAD, &t) || getrusage(RUSAGE_SELF, &p))
        return;
    fprintf(stderr, "threadcpu main_user=%.3f main_sys=%.3f proc_user=%.3f proc_sys=%.3f\n",
            secs(t.ru_utime), secs(t.ru_stime), secs(p.ru_utime), secs(p.ru_stime));
}
