/*
 * tests/test_stress.c - the stress scenarios of tests/stress.c, each run in
 * a process of its own by a Criterion test (tests/drive.h): SUBJECT (set by
 * tests/meson.build) is the program, stress (libc names, the shared
 * library) or stress-sdm (sdm_*, the static core; the variant the
 * ThreadSanitizer build runs, where this file alone is not instrumented).
 */
#include "drive.h"

#define STRESS(name) drive(SUBJECT, #name)

Test(stress, cross_thread_frees) { STRESS(cross_thread_frees); }
Test(stress, large_blocks_cross_thread) { STRESS(large_blocks_cross_thread); }
Test(stress, producer_consumer_remote_frees) { STRESS(producer_consumer_remote_frees); }
Test(stress, producer_consumer_while_draining) { STRESS(producer_consumer_while_draining); }
Test(stress, thread_churn) { STRESS(thread_churn); }
Test(stress, thread_churn_detached_exit_with_live_blocks)
{
    STRESS(thread_churn_detached_exit_with_live_blocks);
}
Test(stress, fork_while_threads_allocate) { STRESS(fork_while_threads_allocate); }
Test(stress, fork_during_first_use) { STRESS(fork_during_first_use); }
Test(stress, parent_still_works_after_forks) { STRESS(parent_still_works_after_forks); }
Test(stress, many_threads_free_into_exited_threads)
{
    STRESS(many_threads_free_into_exited_threads);
}
Test(stress, fork_from_thread_in_hot_loop) { STRESS(fork_from_thread_in_hot_loop); }
Test(stress, reclaim_idle_threads_while_others_run)
{
    STRESS(reclaim_idle_threads_while_others_run);
}
Test(stress, reclaim_takes_parked_threads_at_second_look)
{
    STRESS(reclaim_takes_parked_threads_at_second_look);
}
