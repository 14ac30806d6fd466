/*
 * core/rseq.h - restartable sequences: the per-CPU array primitives.
 *
 * A per-CPU cache is a region of PCPU_REGION bytes per possible CPU:
 *
 *   +0         struct pcpu_hdr[SD_MAX_CACHES + 1]   one per cache id; the
 *              last one (PCPU_BIN_NONE) is never set up, so every push or
 *              pop through it fails
 *   +16 KiB    per-CPU statistics (classes/pcpu.c)
 *   +64 KiB    void *slots[65536]: each cache id owns the same range
 *              [begin, begin + cap) on every CPU
 *
 * A header holds cur, the top of the stack of cached objects:
 *   begin <= cur <= end;  objects cached = cur - begin
 * Pop succeeds iff cur > begin, push iff cur < end.  So an all-zero header
 * (not set up yet) fails both ways, and so does a locked one: begin =
 * 0xffff, end = 0, written as one 32-bit store by a drainer (pcpu.c),
 * which then fences the CPUs with membarrier(..._EXPEDITED_RSEQ) so that
 * no sequence that read the old bounds can commit any more.  cap keeps
 * end - begin across a lock.  Sequences only ever store cur (16 bits), so
 * a racing commit can never undo a lock.
 *
 * Each primitive is one restartable sequence: it reads the CPU number the
 * kernel keeps in the thread's rseq area, reads its header's bounds and
 * then its cur (HDR_LOAD), does its loads and its stores to free slots,
 * and commits with one 16-bit store of cur.  Preemption,
 * migration or a signal before the commit restarts it from the top (the
 * abort handler jumps back), so it never works on a CPU it is not on.
 * Only x86-64 has them; elsewhere the allocator runs per thread.
 */
#ifndef SD_CORE_RSEQ_H
#define SD_CORE_RSEQ_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

#define PCPU_REGION_SHIFT 20                  /* 1 MiB of address space */
#define PCPU_REGION       (1UL << PCPU_REGION_SHIFT)
#define PCPU_STATS_OFF    (16u << 10)
#define PCPU_SLOTS_OFF    (64u << 10)
#define PCPU_MAX_SLOTS    65535u              /* indices are 16 bits */

struct pcpu_hdr {
    uint16_t begin;             /* first slot of this cache id */
    uint16_t end;               /* begin + cap; 0 while locked */
    uint16_t cur;               /* top of stack: next free slot */
    uint16_t cap;               /* slots (end - begin when unlocked) */
};
_Static_assert(sizeof(struct pcpu_hdr) == 8, "pcpu_hdr is one word");

#define PCPU_LOCKED_BOUNDS 0x0000ffffu        /* begin 0xffff, end 0 */

/* The first fields of the kernel's struct rseq (linux/rseq.h). */
struct rseq_area {
    uint32_t cpu_id_start;      /* always a valid CPU while registered */
    int32_t  cpu_id;            /* -1 unregistered, -2 registration failed */
    uint64_t rseq_cs;           /* the current critical section, or 0 */
};

#define RSEQ_SIG 0x53053053     /* glibc's signature for x86 */

#if defined(__x86_64__)
#define SD_HAVE_RSEQ 1

/* Offset of the rseq area from the thread pointer (glibc's __rseq_offset,
 * copied at start-up). */
extern __attribute__((visibility("hidden"))) long sd_rseq_offset;

static inline struct rseq_area *rseq_self(void)
{
    return (struct rseq_area *)((char *)__builtin_thread_pointer() + sd_rseq_offset);
}

/* The descriptor of a critical section, its signature and abort handler
 * (which restarts it: the kernel cleared rseq_cs before jumping there). */
#define RSEQ_SECTIONS(n)                                                    \
    ".pushsection __rseq_cs, \"aw\"\n\t"                                    \
    ".balign 32\n"                                                          \
    ".Lsd_cs" n ":\n\t"                                                     \
    ".long 0, 0\n\t"                                                        \
    ".quad .Lsd_start" n ", .Lsd_commit" n " - .Lsd_start" n ", .Lsd_abort" n "\n\t" \
    ".popsection\n\t"                                                       \
    ".pushsection __rseq_failure, \"ax\"\n\t"                               \
    ".byte 0x0f, 0xb9, 0x3d\n\t"        /* ud1 <sig>(%rip), %edi */         \
    ".long 0x53053053\n"                                                    \
    ".Lsd_abort" n ":\n\t"                                                  \
    "jmp .Lsd_retry" n "\n\t"                                               \
    ".popsection\n"

#define RSEQ_ENTER(n, rs)                                                   \
    ".Lsd_retry" n ":\n\t"                                                  \
    "leaq .Lsd_cs" n "(%%rip), %%rax\n\t"                                   \
    "movq %%rax, 8(%[" rs "])\n"                                            \
    ".Lsd_start" n ":\n\t"                                                  \
    "movl (%[" rs "]), %%eax\n\t"       /* cpu_id_start */                  \
    "shlq $20, %%rax\n\t"                                                   \
    "addq %[base], %%rax\n\t"           /* this CPU's region */

/* Every sequence reads its header's bounds (begin in the low 16 bits of
 * t, end in the next 16) with one 32-bit load, then cur with a 16-bit
 * load.  Two loads, in this order: x86 keeps loads in program order, and
 * a drainer resets cur before it restores the bounds, so a sequence that
 * sees the restored bounds sees the reset cur.  Not one 64-bit load: the
 * previous sequence's 16-bit commit of cur is usually still in the store
 * buffer, and a load wider than a buffered store it overlaps cannot take
 * its value from there: it would wait for the store to reach the cache,
 * on every pop or push that follows another. */
#define HDR_LOAD(h, t, c)                                                   \
    "movl (%[" h "]), %k[" t "]\n\t"                                       \
    "movzwl 4(%[" h "]), %k[" c "]\n\t"

/* Pop one object of cache id from this CPU; NULL if none (empty, locked
 * or not set up).  Three loads, one store, no atomic.
 *
 * The fast pop and push are asm goto: once inlined, their failure cases
 * jump straight to the caller's slow path, with no status to test.  They
 * say __volatile__ although asm goto is meant to be volatile anyway: GCC
 * 12 deletes an asm goto whose outputs are unused (the push's are all
 * scratch registers) unless told. */
static inline void *pcpu_pop(char *base, struct rseq_area *rs, size_t id)
{
    void *p;
    uintptr_t h, cur, t;
    __asm__ __volatile__ goto(
        RSEQ_SECTIONS("%=")
        RSEQ_ENTER("%=", "rs")
        "leaq (%%rax,%[id],8), %[h]\n\t"
        HDR_LOAD("h", "t", "cur")
        "movzwl %w[t], %k[t]\n\t"          /* begin */
        "cmpl %k[t], %k[cur]\n\t"
        "jbe %l[empty]\n\t"
        "subl $1, %k[cur]\n\t"
        "movq 65536(%%rax,%[cur],8), %[p]\n\t"
        "movw %w[cur], 4(%[h])\n"           /* commit */
        ".Lsd_commit%=:\n"
        : [p] "=&r"(p), [h] "=&r"(h), [cur] "=&r"(cur), [t] "=&r"(t)
        : [rs] "r"(rs), [base] "r"(base), [id] "r"(id)
        : "rax", "memory", "cc"
        : empty);
    if (!p)
        __builtin_unreachable();    /* a stack never holds NULL */
    return p;
empty:
    return NULL;
}

/* Push object p of slab `slab` onto this CPU's stack of the cache id the
 * slab routes frees to (its fbin, read inside the sequence,
 * so that a drainer's fence covers a slab whose routing it changed).
 * Returns 0 pushed; 1 full, locked, not set up or routed nowhere; 2 p is
 * the object on top already (a double free). */
static inline int pcpu_push(char *base, struct rseq_area *rs, const struct slab *slab,
                            void *p)
{
    uintptr_t h, cur, t, e;
    __asm__ __volatile__ goto(
        RSEQ_SECTIONS("%=")
        RSEQ_ENTER("%=", "rs")
        "movzwl %c[boff](%[slab]), %k[h]\n\t"
        "leaq (%%rax,%[h],8), %[h]\n\t"
        HDR_LOAD("h", "t", "cur")
        "movl %k[t], %k[e]\n\t"
        "shrl $16, %k[e]\n\t"              /* end */
        "cmpl %k[e], %k[cur]\n\t"
        "jae %l[full]\n\t"
        "movzwl %w[t], %k[t]\n\t"          /* begin */
        "cmpl %k[t], %k[cur]\n\t"
        "jbe .Lsd_put%=\n\t"
        "cmpq %[p], 65528(%%rax,%[cur],8)\n\t"
        "je %l[dup]\n"
        ".Lsd_put%=:\n\t"
        "movq %[p], 65536(%%rax,%[cur],8)\n\t"
        "addl $1, %k[cur]\n\t"
        "movw %w[cur], 4(%[h])\n"           /* commit */
        ".Lsd_commit%=:\n"
        : [h] "=&r"(h), [cur] "=&r"(cur), [t] "=&r"(t), [e] "=&r"(e)
        : [rs] "r"(rs), [base] "r"(base), [slab] "r"(slab), [boff] "i"(offsetof(struct slab, fbin)),
          [p] "r"(p)
        : "rax", "memory", "cc"
        : full, dup);
    return 0;
full:
    return 1;
dup:
    return 2;
}

/* The batch sequences (pcpu_pop_n, pcpu_push_n): their start, up to the
 * header of cache id loaded, and their operands - h, cur, k, i, t scratch,
 * vec the caller's array v of n objects. */
#define RSEQ_BATCH_ENTER                                                    \
    RSEQ_SECTIONS("%=")                                                     \
    RSEQ_ENTER("%=", "rs")                                                  \
    "leaq (%%rax,%[id],8), %[h]\n\t"                                        \
    HDR_LOAD("h", "t", "cur")
#define RSEQ_BATCH_OPERANDS(v)                                              \
    : [h] "=&r"(h), [cur] "=&r"(cur), [k] "=&r"(k), [i] "=&r"(i), [t] "=&r"(t) \
    : [rs] "r"(rs), [base] "r"(base), [id] "r"(id), [vec] "r"(v),         \
      [n] "r"((uintptr_t)n)                                                 \
    : "rax", "memory", "cc"

/* Pop up to n (>= 1) objects of cache id into out[]; returns how many. */
static inline unsigned pcpu_pop_n(char *base, struct rseq_area *rs, size_t id,
                                  void **out, unsigned n)
{
    uintptr_t h, cur, k, i, t;
    __asm__ __volatile__(
        RSEQ_BATCH_ENTER
        "movzwl %w[t], %k[t]\n\t"          /* begin */
        "xorl %k[k], %k[k]\n\t"
        "cmpl %k[t], %k[cur]\n\t"
        "jbe .Lsd_commit%=\n\t"            /* nothing: no store at all */
        "movl %k[cur], %k[k]\n\t"
        "subl %k[t], %k[k]\n\t"            /* k = cur - begin */
        "cmpl %k[n], %k[k]\n\t"
        "cmoval %k[n], %k[k]\n\t"          /* k = min(k, n) */
        "subl %k[k], %k[cur]\n\t"          /* new top */
        "xorl %k[i], %k[i]\n"
        ".Lsd_copy%=:\n\t"
        "leaq (%[cur],%[i]), %[t]\n\t"
        "movq 65536(%%rax,%[t],8), %[t]\n\t"
        "movq %[t], (%[vec],%[i],8)\n\t"
        "addq $1, %[i]\n\t"
        "cmpq %[k], %[i]\n\t"
        "jb .Lsd_copy%=\n\t"
        "movw %w[cur], 4(%[h])\n"           /* commit */
        ".Lsd_commit%=:\n"
        RSEQ_BATCH_OPERANDS(out));
    return (unsigned)k;
}

/* Push up to n (>= 1) objects of in[] (all of cache id); returns how many
 * went on (from in[0] up). */
static inline unsigned pcpu_push_n(char *base, struct rseq_area *rs, size_t id,
                                   void *const *in, unsigned n)
{
    uintptr_t h, cur, k, i, t;
    __asm__ __volatile__(
        RSEQ_BATCH_ENTER
        "movl %k[t], %k[k]\n\t"
        "shrl $16, %k[k]\n\t"              /* end */
        "cmpl %k[k], %k[cur]\n\t"
        "jae .Lsd_none%=\n\t"
        "subl %k[cur], %k[k]\n\t"          /* room = end - cur */
        "cmpl %k[n], %k[k]\n\t"
        "cmoval %k[n], %k[k]\n\t"
        "xorl %k[i], %k[i]\n"
        ".Lsd_copy%=:\n\t"
        "movq (%[vec],%[i],8), %[t]\n\t"
        "addq %[cur], %[i]\n\t"
        "movq %[t], 65536(%%rax,%[i],8)\n\t"
        "subq %[cur], %[i]\n\t"
        "addq $1, %[i]\n\t"
        "cmpq %[k], %[i]\n\t"
        "jb .Lsd_copy%=\n\t"
        "addl %k[k], %k[cur]\n\t"
        "movw %w[cur], 4(%[h])\n"           /* commit */
        ".Lsd_commit%=:\n\t"
        "jmp .Lsd_done%=\n"
        ".Lsd_none%=:\n\t"
        "xorl %k[k], %k[k]\n"
        ".Lsd_done%=:\n"
        RSEQ_BATCH_OPERANDS(in));
    return (unsigned)k;
}
#else
#define SD_HAVE_RSEQ 0
#endif

/* Is rseq usable here: the architecture, glibc registering it (2.35+, not
 * disabled by GLIBC_TUNABLES=glibc.pthread.rseq=0, not under Valgrind),
 * and membarrier's rseq fence registered for the process?  Sets
 * sd_rseq_offset.  Called once, single-threaded or under a lock. */
int rseq_setup(void);
/* This thread has a registered rseq area. */
int rseq_thread_ok(void);
/* Restart every critical section running now on any CPU of the process
 * (membarrier MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ); 0 or -errno. */
int rseq_fence(void);
/* In a fork child: register the fence again. */
void rseq_after_fork_child(void);

#endif
