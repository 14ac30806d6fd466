/*
 * preload/lifetime.c - the program's threads, counted, so that the
 * allocator's own thread never keeps the process alive.
 *
 * glibc ends a process with exit(0) when its last thread ends (the main
 * thread having called pthread_exit), whichever thread that is, and so
 * runs the program's atexit handlers.  The background shrinker
 * (hooks/shrinker.c) is a thread too: it would be the last one forever.
 * So pthread_create and thrd_create are wrapped: a thread they start first
 * sets a pthread key (the main thread sets it in the library constructor),
 * and the key's destructor runs when the thread ends, however it ends
 * (return, pthread_exit, thrd_exit, cancellation).  `live` counts the
 * program's threads, including those being created.  When it drops to 0
 * the shrinker is parked: asked to leave its loop and joined
 * (shrinker_park).  The program's last thread then goes on to glibc's
 * exit(0), and its atexit handlers run in that thread with its signal
 * mask, exactly as without us.
 *
 * Why this way:
 *   - A TSD destructor runs in every way a thread ends, in that thread,
 *     before glibc counts it out, and costs nothing while it runs.
 *   - Joining makes the program's thread the process's last one.  Letting
 *     the shrinker return instead (and glibc's exit(0) come from it) would
 *     end the process too, but the atexit handlers would run in our
 *     thread: with every asynchronous signal blocked, or, had it unblocked
 *     them, with a moment in which it could take a signal while a program
 *     thread still lives.  The join is bounded, since the shrinker may be
 *     in a kick() that waits for this very thread (for a later destructor
 *     of it, say); past the bound the shrinker finishes on its own, takes
 *     the program's signal mask, and the exit(0) does come from it.
 *   - Counting tasks in /proc, or polling, would delay the end by an
 *     interval, and a thread cannot wait for another one's end otherwise.
 *
 * Transitions of `live` between 0 and 1 (the last thread ends; a thread
 * appears again, e.g. one a later TSD destructor starts) are acted on by
 * one thread at a time: follow_thread_count() parks or unparks the
 * shrinker until the count it acted on is the current one.  A thread
 * that arrives while another acts leaves at once, so the shrinker's own
 * kick() starting a thread never waits for the park that waits for the
 * shrinker.
 *
 * Not counted: the shrinker (its start routine is shrinker_main), and the
 * threads glibc starts itself (SIGEV_THREAD timers, mq_notify), which do
 * not go through the exported functions.  A count can thus be too low,
 * never too high: the worst an uncounted thread sees is a parked shrinker.
 *
 * Fork: the child's one thread is the forking one; it is counted, whatever
 * it was in the parent.  The static core (-Dpreload=false, the unit tests)
 * has none of this: there the test program's threads are all there is.
 */
#define _GNU_SOURCE
#include "lifetime.h"

#include <errno.h>
#include <pthread.h>
#include <threads.h>

#include "fmt.h"
#include "lock.h"
#include "mallocfam.h"
#include "shrinker.h"
#include "syscalls.h"


typedef int pthread_create_fn(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                              void *);
typedef int thrd_create_fn(thrd_t *, thrd_start_t, void *);

static unsigned live = 1;            /* program threads (main from the start) */
static unsigned settling;            /* follow_thread_count requests not acted on */
static pthread_key_t key;            /* set by each counted thread */
static int key_state;                /* 0 not yet, 1 ready, -1 failed: count nothing */
static sd_mutex key_lock = SD_MUTEX_INIT;
static pthread_create_fn *next_pthread_create;
static thrd_create_fn *next_thrd_create;

/* ---------------------------------------------------------------- */
/* The count                                                         */

/* Park or unpark the shrinker until its state matches `live`.  Requests
 * are counted in `settling`: the thread that finds it 0 acts, the others
 * leave theirs for it.  It reads the requests before the count, so a
 * request it has not seen makes it look again. */
static void follow_thread_count(void)
{
    int cs;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
    if (__atomic_fetch_add(&settling, 1, __ATOMIC_ACQ_REL) == 0) {
        unsigned seen;
        do {
            seen = __atomic_load_n(&settling, __ATOMIC_ACQUIRE);
            if (__atomic_load_n(&live, __ATOMIC_ACQUIRE))
                shrinker_unpark();
            else
                shrinker_park();
        } while (__atomic_sub_fetch(&settling, seen, __ATOMIC_ACQ_REL));
    }
    pthread_setcancelstate(cs, NULL);
}

static void thread_begins(void)
{
    if (__atomic_fetch_add(&live, 1, __ATOMIC_ACQ_REL) == 0)
        follow_thread_count();
}

/* The key's destructor (and a creation that failed). */
static void thread_ends(void *unused)
{
    if (__atomic_sub_fetch(&live, 1, __ATOMIC_ACQ_REL) == 0)
        follow_thread_count();
}

/* Create the key on first use: the library constructor, or an earlier
 * constructor of another library that starts a thread. */
static int key_ready(void)
{
    int st = __atomic_load_n(&key_state, __ATOMIC_ACQUIRE);
    if (st)
        return st > 0;
    sd_mutex_lock(&key_lock);
    if (!key_state)
        __atomic_store_n(&key_state, pthread_key_create(&key, thread_ends) ? -1 : 1,
                         __ATOMIC_RELEASE);
    sd_mutex_unlock(&key_lock);
    return key_state > 0;
}

/* Have the calling thread's end counted; 0 on failure.  The key is one of
 * the first a process creates, in the static part of glibc's table:
 * setting it does not allocate and does not fail.  If it did, a new
 * thread goes uncounted (the shrinker may park early) rather than counted
 * forever. */
static int thread_track(void)
{
    return pthread_setspecific(key, &live) == 0;
}

/* ---------------------------------------------------------------- */
/* pthread_create, thrd_create                                       */

struct start {
    void *(*fn)(void *);            /* pthread_create's, or */
    int (*c11)(void *);             /* thrd_create's */
    void *arg;
};

static void *start_pthread(void *p)
{
    struct start s = *(struct start *)p;
    sdm_free(p);
    if (!thread_track())
        thread_ends(NULL);
    return s.fn(s.arg);
}

static int start_c11(void *p)
{
    struct start s = *(struct start *)p;
    sdm_free(p);
    if (!thread_track())
        thread_ends(NULL);
    return s.c11(s.arg);
}

/* When no next definition is found (not expected: libc has both). */
static int no_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *),
                             void *arg)
{
    return EAGAIN;
}

static int no_thrd_create(thrd_t *t, thrd_start_t fn, void *arg)
{
    return thrd_error;
}

/* Resolved at the first call: a constructor that runs before ours may
 * start a thread. */
static pthread_create_fn *real_pthread_create(void)
{
    pthread_create_fn *f = __atomic_load_n(&next_pthread_create, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (pthread_create_fn *)syscalls_next_symbol("pthread_create",
                                                      (void *)no_pthread_create);
        __atomic_store_n(&next_pthread_create, f, __ATOMIC_RELEASE);
    }
    return f;
}

static thrd_create_fn *real_thrd_create(void)
{
    thrd_create_fn *f = __atomic_load_n(&next_thrd_create, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (thrd_create_fn *)syscalls_next_symbol("thrd_create", (void *)no_thrd_create);
        __atomic_store_n(&next_thrd_create, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* The thread is counted before it exists (a thread it starts at once can
 * end before pthread_create returns), and uncounted if it never will. */
SD_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr,
                             void *(*fn)(void *), void *arg)
{
    pthread_create_fn *create = real_pthread_create();
    if (fn == shrinker_main || !key_ready())
        return create(t, attr, fn, arg);
    struct start *s = sdm_malloc(sizeof *s);
    if (!s)
        return EAGAIN;
    *s = (struct start){ .fn = fn, .arg = arg };
    thread_begins();
    int err = create(t, attr, start_pthread, s);
    if (err) {
        sdm_free(s);
        thread_ends(NULL);
    } else {
        shrinker_note_threads(__atomic_load_n(&live, __ATOMIC_RELAXED));
    }
    return err;
}

SD_EXPORT int thrd_create(thrd_t *t, thrd_start_t fn, void *arg)
{
    thrd_create_fn *create = real_thrd_create();
    if (!key_ready())
        return create(t, fn, arg);
    struct start *s = sdm_malloc(sizeof *s);
    if (!s)
        return thrd_nomem;
    *s = (struct start){ .c11 = fn, .arg = arg };
    thread_begins();
    int err = create(t, start_c11, s);
    if (err != thrd_success) {
        sdm_free(s);
        thread_ends(NULL);
    } else {
        shrinker_note_threads(__atomic_load_n(&live, __ATOMIC_RELAXED));
    }
    return err;
}

/* ---------------------------------------------------------------- */
/* Start-up and fork                                                 */

void lifetime_init(void)
{
    real_pthread_create();
    real_thrd_create();
    if (key_ready())
        thread_track();             /* main, counted in `live` from the start */
}

void lifetime_after_fork_child(void)
{
    key_lock = (sd_mutex)SD_MUTEX_INIT;
    __atomic_store_n(&live, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&settling, 0, __ATOMIC_RELAXED);
    if (__atomic_load_n(&key_state, __ATOMIC_ACQUIRE) > 0)
        thread_track();
}
