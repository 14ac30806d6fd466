/*
 * core/thread.h - the calling thread's id, as the locks record it.
 *
 * Every lock of core/lock.h stores its holder's tid, so that a thread
 * taking a slab lock it already holds is reported instead of deadlocking
 * and the _locked helpers can assert their lock.  The tid is cached in
 * TLS (initial-exec: one load, no call) and read once from the kernel on
 * the thread's first lock.  A fork child is a new thread: its cache is
 * cleared before the child unlocks anything (sd_thread_fork_child).
 */
#ifndef SD_CORE_THREAD_H
#define SD_CORE_THREAD_H

#include <stdint.h>

#include "fmt.h"

extern SD_HIDDEN __thread uint32_t sd_thread_tid
    __attribute__((tls_model("initial-exec")));

/* Read gettid() into the cache (cold: once per thread). */
uint32_t sd_thread_tid_load(void) __attribute__((noinline, cold));

/* The calling thread's tid, never 0. */
static inline uint32_t sd_self_tid(void)
{
    uint32_t t = sd_thread_tid;
    if (__builtin_expect(!t, 0))
        t = sd_thread_tid_load();
    return t;
}

/* In a fork child, first thing: the surviving thread has a new tid. */
static inline void sd_thread_fork_child(void)
{
    sd_thread_tid = 0;
}

#endif
