/*
 * core/thread.c - the calling thread's id, cached for the locks (see
 * thread.h).
 */
#include "thread.h"

#include "os.h"

__thread uint32_t sd_thread_tid __attribute__((tls_model("initial-exec")));

uint32_t sd_thread_tid_load(void)
{
    return sd_thread_tid = os_gettid();
}
