/*
 * preload/forks.c - the forks that skip pthread_atfork's handlers: _Fork,
 * syscall(SYS_fork), syscall(SYS_clone) and syscall(SYS_clone3) without
 * CLONE_VM, and clone() without CLONE_VM.  Each runs the allocator's own
 * fork handlers (classes/fork.c, then init.c's child handler) around the
 * call, and none of the program's: the child gets its own copy of the
 * meshed slabs (core/heapfile.h, "Fork") and consistent allocator locks,
 * exactly as after fork().
 *
 * What is not caught: a fork made with the system call instruction
 * itself (inline assembly, or a libc other than the one we wrap).  Its
 * child shares the meshed slabs (only those: every other page is
 * copy-on-write) with the parent; docs/meshing.md says so.
 * vfork and posix_spawn share the address space with a child that only
 * execs, so they need nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "cache.h"
#include "fmt.h"
#include "forks.h"
#include "os.h"
#include "syscalls.h"

#define SD_STR2(x) #x
#define SD_STR(x) SD_STR2(x)

static void child(void)
{
    fork_raw_child();
    preload_fork_child();
}

static void parent(void)
{
    int e = errno;
    fork_raw_parent();
    errno = e;
}

/* The next definition of name, looked up at the first call (dlsym may
 * allocate: never from inside the allocator, which does not fork).  NULL,
 * errno ENOSYS, if there is none. */
static void *next_symbol(void **cache, const char *name)
{
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        if (!(f = syscalls_next_symbol(name, NULL))) {
            errno = ENOSYS;
            return NULL;
        }
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* ---------------------------------------------------------------- */
/* _Fork                                                             */

typedef pid_t fork_fn(void);

SD_EXPORT pid_t _Fork(void)
{
    static void *next;
    fork_fn *f = (fork_fn *)next_symbol(&next, "_Fork");
    if (!f)
        return -1;
    fork_raw_prepare();
    pid_t r = f();
    if (r == 0)
        child();
    else
        parent();
    return r;
}

/* ---------------------------------------------------------------- */
/* clone                                                             */

typedef int clone_fn(int (*fn)(void *), void *stack, int flags, void *arg, ...);

struct clone_call {
    int (*fn)(void *);
    void *arg;
};

/* The child of a clone without CLONE_VM runs on a copy of the parent's
 * memory, so the parent's frame (and *p in it) is there to read. */
static int clone_child(void *p)
{
    struct clone_call c = *(struct clone_call *)p;
    child();
    return c.fn(c.arg);
}

SD_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    pid_t *ptid = va_arg(ap, pid_t *);  /* (read whether passed or not, */
    void *tls = va_arg(ap, void *);     /* as glibc's own clone does) */
    pid_t *ctid = va_arg(ap, pid_t *);
    va_end(ap);
    static void *next;
    clone_fn *f = (clone_fn *)next_symbol(&next, "clone");
    if (!f)
        return -1;
    if (flags & CLONE_VM)               /* a thread, or vfork-like */
        return f(fn, stack, flags, arg, ptid, tls, ctid);
    struct clone_call c = { fn, arg };
    fork_raw_prepare();
    int r = f(clone_child, stack, flags, &c, ptid, tls, ctid);
    parent();
    return r;
}

/* ---------------------------------------------------------------- */
/* syscall                                                           */

#if defined(__x86_64__)
/* syscall() is assembly, as glibc's is: a clone with CLONE_VM and a new
 * stack returns in the child on that stack, right after the system call
 * instruction, so the path to it must have no frame.  Fork-like calls
 * (SYS_fork; SYS_clone and SYS_clone3 without CLONE_VM and without a new
 * stack) jump to syscall_fork, which has one: its child returns on a copy
 * of the parent's stack.  A clone3 argument that is not NULL is read for
 * its flags here: a wild pointer faults instead of failing with EFAULT. */
SD_HIDDEN long syscall_fork(long n, long a1, long a2, long a3, long a4, long a5, long a6);
SD_HIDDEN long syscall_fail(long r);

__asm__(".text\n"
        ".globl syscall\n"
        ".type syscall, @function\n"
        "syscall:\n"
        "    cmpq $" SD_STR(SYS_fork) ", %rdi\n"
        "    je 1f\n"
        "    cmpq $" SD_STR(SYS_clone) ", %rdi\n"
        "    jne 2f\n"
        "    testl $" SD_STR(CLONE_VM) ", %esi\n"     /* clone(flags, stack, ...) */
        "    jnz 3f\n"
        "    testq %rdx, %rdx\n"
        "    jz 1f\n"
        "    jmp 3f\n"
        "2:  cmpq $" SD_STR(SYS_clone3) ", %rdi\n"
        "    jne 3f\n"
        "    testq %rsi, %rsi\n"
        "    jz 3f\n"
        "    testl $" SD_STR(CLONE_VM) ", (%rsi)\n"   /* clone_args.flags */
        "    jnz 3f\n"
        "    cmpq $0, 40(%rsi)\n"                     /* clone_args.stack */
        "    jne 3f\n"
        "1:  jmp syscall_fork\n"
        "3:  movq %rdi, %rax\n"
        "    movq %rsi, %rdi\n"
        "    movq %rdx, %rsi\n"
        "    movq %rcx, %rdx\n"
        "    movq %r8, %r10\n"
        "    movq %r9, %r8\n"
        "    movq 8(%rsp), %r9\n"
        "    syscall\n"
        "    cmpq $-4095, %rax\n"
        "    jae 4f\n"
        "    ret\n"
        "4:  movq %rax, %rdi\n"
        "    jmp syscall_fail\n"
        ".size syscall, .-syscall\n");

long syscall_fail(long r)
{
    errno = (int)-r;
    return -1;
}

long syscall_fork(long n, long a1, long a2, long a3, long a4, long a5, long a6)
{
    fork_raw_prepare();
    long r = os_raw_syscall6(n, a1, a2, a3, a4, a5, a6);
    if (r == 0)
        child();
    else
        parent();
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
#endif
