/*
 * core/sigchain.h - the program's signal calls while the barrier's SIGSEGV
 * handler is installed (core/sigchain.c).
 * The design: core/heapfile.h.
 */
#ifndef SD_CORE_SIGCHAIN_H
#define SD_CORE_SIGCHAIN_H

#include <signal.h>

/* Is our SIGSEGV handler still the installed one? */
int sigchain_handler_ours(void);
/* sigaction() as the preload layer exports it: SIGSEGV, while our handler
 * is installed, records the program's handler as the one we chain to. */
int sigchain_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* pthread_sigmask() as the preload layer exports it (glibc's semantics:
 * its two internal signals are never blocked), except that while meshing
 * is on SIGSEGV is never blocked either: a write fault in a thread that
 * blocks it would kill the process instead of waiting at the barrier
 * (threads of libraries such as nanomsg block every signal).  Blocking a
 * synchronous SIGSEGV has no other effect than that.  0 or errno. */
int sigchain_sigmask(int how, const sigset_t *set, sigset_t *old);
/* sigaltstack() as the preload layer exports it.  A signal stack inside
 * the arena (python's faulthandler mallocs its own) would be read-only
 * whenever a fork or a mesh protects it, and the kernel, unable to push
 * our handler's frame there, would kill the thread that faulted.  Such a
 * stack is replaced by a private mapping of the same size for as long as
 * it is registered; queries report the program's own.  0, or -1 and
 * errno, as sigaltstack(). */
int sigchain_sigaltstack(const stack_t *ss, stack_t *old);

#endif
