/*
 * classes/backtrace.c - the calling thread's backtrace, for reports: the
 * fatal hook of SLABDEFRAG_DEBUG (every sd_fatal report then ends with
 * one) and debug reports and call-site tracks (classes/debug.c).
 *
 * libunwind is used only once the library constructor has run (the first
 * mallocs come before libc is up).  A thread-local flag stops libunwind's
 * own allocations from recursing.  The allocator's own leading frames are
 * skipped: those inside our executable mapping, found at start-up.
 */
#define _GNU_SOURCE
#include "backtrace.h"

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "fmt.h"

#define BT_FRAMES    32

static int backtrace_ready;         /* constructor ran: libunwind allowed */
static uintptr_t self_lo, self_hi;  /* our object's executable range */
static __thread int in_unwind;

static int ours(uintptr_t ip) { return ip >= self_lo && ip < self_hi; }

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
    uintptr_t me = (uintptr_t)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (me >= lo && me < hi) {
            self_lo = lo;
            __atomic_store_n(&self_hi, hi, __ATOMIC_RELEASE);
            return 1;
        }
    }
    return 0;
}

void backtrace_find_self(void)
{
    if (!__atomic_load_n(&self_hi, __ATOMIC_ACQUIRE))
        dl_iterate_phdr(find_self, (void *)(uintptr_t)&backtrace_find_self);
}

int backtrace_ours(const void *ip)
{
    return ours((uintptr_t)ip);
}

/* Keep frames from the first one outside the allocator (all of them if
 * every frame is ours: the static core linked into a test program). */
static int first_foreign(void *const *frames, int n)
{
    for (int i = 0; i < n; i++)
        if (!ours((uintptr_t)frames[i]))
            return i;
    return 0;
}

static void print_frame(int fd, const char *indent, int i, void *ip,
                        const char *name, unsigned long off)
{
    Dl_info di;
    const char *file = "?";
    memset(&di, 0, sizeof di);
    if (dladdr(ip, &di) && di.dli_fname) {
        file = di.dli_fname;
        for (const char *q = file; *q; q++)
            if (*q == '/')
                file = q + 1;
        if (!name && di.dli_sname) {
            name = di.dli_sname;
            off = (unsigned long)((char *)ip - (char *)di.dli_saddr);
        }
    }
    if (name)
        sd_dprintf(fd, "%s#%d %p %s+0x%lx (%s)\n", indent, i, ip, name, off, file);
    else
        sd_dprintf(fd, "%s#%d %p %s+0x%lx\n", indent, i, ip, file,
                   (unsigned long)((char *)ip - (char *)di.dli_fbase));
}

void backtrace_print(int fd, const char *indent)
{
    if (!__atomic_load_n(&backtrace_ready, __ATOMIC_ACQUIRE) || in_unwind) {
        sd_dprintf(fd, "%s(no backtrace available here)\n", indent);
        return;
    }
    in_unwind = 1;
    void *ip[BT_FRAMES];
    char names[BT_FRAMES][96];
    unsigned long offs[BT_FRAMES];
    int n = 0;
    unw_context_t uc;
    unw_cursor_t cur;
    if (unw_getcontext(&uc) == 0 && unw_init_local(&cur, &uc) == 0) {
        do {
            unw_word_t pc = 0, off = 0;
            unw_get_reg(&cur, UNW_REG_IP, &pc);
            if (!pc)
                break;
            ip[n] = (void *)pc;
            names[n][0] = 0;
            if (unw_get_proc_name(&cur, names[n], sizeof names[n], &off) != 0)
                names[n][0] = 0;
            offs[n] = (unsigned long)off;
            n++;
        } while (n < BT_FRAMES && unw_step(&cur) > 0);
    }
    int first = first_foreign(ip, n);
    for (int i = first; i < n; i++)
        print_frame(fd, indent, i - first, ip[i], names[i][0] ? names[i] : NULL,
                    offs[i]);
    if (n == 0)
        sd_dprintf(fd, "%s(unwinding failed)\n", indent);
    in_unwind = 0;
}

void backtrace_print_frame(int fd, const char *indent, int i, void *ip)
{
    print_frame(fd, indent, i, ip, NULL, 0);
}

int backtrace_record(void **frames, int max)
{
    if (!__atomic_load_n(&backtrace_ready, __ATOMIC_ACQUIRE) || in_unwind)
        return 0;
    in_unwind = 1;
    void *f[BT_FRAMES];
    int n = unw_backtrace(f, BT_FRAMES), k = 0;
    int first = n > 0 ? first_foreign(f, n) : 0;
    for (int i = first; i < n && k < max; i++)
        frames[k++] = f[i];
    in_unwind = 0;
    return k;
}

__attribute__((constructor(102))) static void backtrace_init(void)
{
    backtrace_find_self();
    __atomic_store_n(&backtrace_ready, 1, __ATOMIC_RELEASE);
}
