/*
 * core/options.c - the options table and its parser.  getenv appears
 * nowhere else; nothing here allocates (it runs inside the first malloc).
 *
 * A bad value (unparsable, out of range) or an unknown SLABDEFRAG_ name is
 * reported in one line naming the variable and what it accepts; the
 * process goes on with the default.
 */
#include "options.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fmt.h"
#include "os.h"

extern char **environ;

enum opt_type { OPT_UINT, OPT_BOOL, OPT_STATS, OPT_DEBUG, OPT_BARRIER, OPT_BACKGROUND,
                OPT_PROF, OPT_PREFIX, OPT_ORDER };

/* The options, one line each: SLABDEFRAG_<name>, its field of sd_opt, how
 * its value is read, its default, and its range (OPT_UINT, OPT_ORDER; for
 * OPT_PROF the interval's). */
#define SD_OPTIONS(X)                                                          \
    /* name             field               type            default min  max */ \
    X(DECAY_MS,           decay_ms,           OPT_UINT,       1000,   0, 600000) \
    X(RETAIN_EMPTY,       retain_empty,       OPT_UINT,       1,      0, 1024)   \
    X(MIN_PARTIAL,        min_partial,        OPT_UINT,       2,      0, 1000)   \
    X(SHRINK_INTERVAL_MS, shrink_interval_ms, OPT_UINT,       1000,  10, 3600000) \
    X(PASS_BUDGET_MS,     pass_budget_ms,     OPT_UINT,       5,      1, 10000)  \
    X(RSS_LIMIT_MB,       rss_limit_mb,       OPT_UINT,       0,      0, 1u << 30) \
    /* 0|1|auto */                                                             \
    X(BACKGROUND,         background,         OPT_BACKGROUND, SD_BG_AUTO, 0, 2)  \
    X(PSI,                psi,                OPT_BOOL,       1,      0, 1)      \
    X(STATS,              stats,              OPT_STATS,      SD_STATS_OFF, 0, 2) \
    X(CONTROL,            control,            OPT_BOOL,       0,      0, 1)      \
    /* a line on stderr per background pass that released memory */           \
    X(PASS_EVENTS,        pass_events,        OPT_BOOL,       0,      0, 1)      \
    /* per-CPU caches on rseq (classes/pcpu.c); 0 forces per-thread ones */   \
    X(PERCPU,             percpu,             OPT_BOOL,       1,      0, 1)      \
    X(HARDEN,             harden,             OPT_BOOL,       1,      0, 1)      \
    X(PERCPU_KB,          percpu_kb,          OPT_UINT,       2048,  64, 65536)  \
    X(THREAD_KB,          thread_kb,          OPT_UINT,       1024,  64, 65536)  \
    /* free pages inside sparse slabs of big classes (classes/cache.c) */     \
    X(PAGE_PURGE,         page_purge,         OPT_BOOL,       1,      0, 1)      \
    X(DEBUG,              debug,              OPT_DEBUG,      0,      0, 0)      \
    /* meshing (classes/mesh.c): off by default, a fork copies the heap */    \
    X(MESH,               mesh,               OPT_BOOL,       0,      0, 1)      \
    X(MESH_MAX_MAPS,      mesh_max_maps,      OPT_UINT,       0,      0, 1u << 30) \
    X(MESH_PAGE_SLABS,    mesh_page_slabs,    OPT_UINT,       16,     0, 1u << 20) \
    /* MESH_ORDER_* */                                                         \
    X(MESH_SHUFFLE,       mesh_shuffle,       OPT_ORDER,      1,      0, 3)      \
    /* auto|uffd|mprotect */                                                   \
    X(MESH_BARRIER,       mesh_barrier,       OPT_BARRIER,    SD_BARRIER_AUTO, 0, 2) \
    /* heap profiler (hooks/prof.c): 0/off, 1/on, or the mean interval in     \
     * bytes (on); the profile at exit goes to <PROF_PREFIX>.<pid>.heap */    \
    X(PROF,               prof,               OPT_PROF,       0,     64, 1u << 30)

struct sd_options sd_opt = {
#define X(name, field, type, def, min, max) .field = def,
    SD_OPTIONS(X)
#undef X
    .prof_interval = 512 << 10,     /* SLABDEFRAG_PROF's default interval */
    .prof_prefix = "sdprof",        /* SLABDEFRAG_PROF_PREFIX (below) */
};

/* SLABDEFRAG_MESH_SHUFFLE's words, by MESH_ORDER_* value (the numbers
 * work too). */
static const char *const order_names[] = { "address", "adapt", "permute", "rotate" };

static const struct option {
    const char   *name;        /* after SLABDEFRAG_ */
    enum opt_type type;
    uint32_t     *value;
    uint32_t      min, max;
} table[] = {
#define X(name, field, type, def, min, max) { #name, type, &sd_opt.field, min, max },
    SD_OPTIONS(X)
#undef X
    /* a string: sd_opt.prof_prefix */
    { "PROF_PREFIX", OPT_PREFIX, NULL, 0, 0 },
};

static int parse_uint(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return -1;
    }
    if (v < min)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_debug(const char *s)
{
    uint32_t bits = 0;
    const char *p = s;
    for (; *p && *p != ','; p++) {
        switch (*p) {
        case 'F': bits |= SD_DEBUG_F; break;
        case 'Z': bits |= SD_DEBUG_Z; break;
        case 'P': bits |= SD_DEBUG_P; break;
        case 'U': bits |= SD_DEBUG_U; break;
        case 'T': bits |= SD_DEBUG_T; break;
        case '-': break;
        default: return -1;
        }
    }
    if (p == s)
        bits = SD_DEBUG_F | SD_DEBUG_Z | SD_DEBUG_P | SD_DEBUG_U;
    size_t n = *p ? strlen(p + 1) : 0;
    if (n >= sizeof sd_opt.debug_caches)
        return -1;
    if (n)
        memcpy(sd_opt.debug_caches, p + 1, n + 1);
    sd_opt.debug = bits;
    return 0;
}

static void apply(const char *name, const char *val)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct option *o = &table[i];
        if (strcmp(o->name, name))
            continue;
        int bad = 0;
        switch (o->type) {
        case OPT_UINT:
            if (parse_uint(val, o->min, o->max, o->value)) {
                sd_warn("SLABDEFRAG_%s=%s: expected a whole number from %u to %u; "
                        "using %u", name, val, o->min, o->max, *o->value);
            }
            return;
        case OPT_BOOL:
            if (!strcmp(val, "1") || !strcmp(val, "yes") || !strcmp(val, "on"))
                *o->value = 1;
            else if (!strcmp(val, "0") || !strcmp(val, "no") || !strcmp(val, "off"))
                *o->value = 0;
            else
                bad = 1;
            if (bad)
                sd_warn("SLABDEFRAG_%s=%s: expected 0 or 1; using %u", name, val,
                        *o->value);
            return;
        case OPT_STATS:
            if (!strcmp(val, "0") || !strcmp(val, "off"))
                *o->value = SD_STATS_OFF;
            else if (!strcmp(val, "1") || !strcmp(val, "text"))
                *o->value = SD_STATS_TEXT;
            else if (!strcmp(val, "json"))
                *o->value = SD_STATS_JSON;
            else
                sd_warn("SLABDEFRAG_STATS=%s: expected 0, 1 or json; using 0", val);
            return;
        case OPT_BARRIER:
            if (!strcmp(val, "auto"))
                *o->value = SD_BARRIER_AUTO;
            else if (!strcmp(val, "uffd") || !strcmp(val, "userfaultfd"))
                *o->value = SD_BARRIER_UFFD;
            else if (!strcmp(val, "mprotect"))
                *o->value = SD_BARRIER_MPROTECT;
            else
                sd_warn("SLABDEFRAG_%s=%s: expected auto, uffd or mprotect; using auto",
                        name, val);
            return;
        case OPT_BACKGROUND:
            if (!strcmp(val, "auto"))
                *o->value = SD_BG_AUTO;
            else if (!strcmp(val, "1") || !strcmp(val, "yes") || !strcmp(val, "on"))
                *o->value = SD_BG_ON;
            else if (!strcmp(val, "0") || !strcmp(val, "no") || !strcmp(val, "off"))
                *o->value = SD_BG_OFF;
            else
                sd_warn("SLABDEFRAG_%s=%s: expected 0, 1 or auto; using auto", name, val);
            return;
        case OPT_PROF:
            if (!strcmp(val, "0") || !strcmp(val, "off") || !strcmp(val, "no")) {
                sd_opt.prof = 0;
            } else if (!strcmp(val, "1") || !strcmp(val, "on") || !strcmp(val, "yes")) {
                sd_opt.prof = 1;
            } else if (!parse_uint(val, o->min, o->max, &sd_opt.prof_interval)) {
                sd_opt.prof = 1;
            } else {
                sd_warn("SLABDEFRAG_PROF=%s: expected 0, 1 or a mean sampling "
                        "interval in bytes from %u to %u; profiling off", val,
                        o->min, o->max);
                sd_opt.prof = 0;
            }
            return;
        case OPT_ORDER:
            for (uint32_t v = 0; v < sizeof order_names / sizeof order_names[0]; v++)
                if (!strcmp(val, order_names[v])) {
                    *o->value = v;
                    return;
                }
            if (parse_uint(val, o->min, o->max, o->value))
                sd_warn("SLABDEFRAG_%s=%s: expected address, adapt, permute or rotate "
                        "(or 0 to 3); using %s", name, val, order_names[*o->value]);
            return;
        case OPT_PREFIX:
            if (!*val || strlen(val) >= sizeof sd_opt.prof_prefix)
                sd_warn("SLABDEFRAG_PROF_PREFIX=%s: expected a path prefix of 1 to "
                        "%zu bytes; using %s", val, sizeof sd_opt.prof_prefix - 1,
                        sd_opt.prof_prefix);
            else
                memcpy(sd_opt.prof_prefix, val, strlen(val) + 1);
            return;
        case OPT_DEBUG:
            if (parse_debug(val))
                sd_warn("SLABDEFRAG_DEBUG=%s: expected letters from FZPUT, "
                        "optionally followed by ,cache[,cache...]; debugging off", val);
            return;
        }
    }
    sd_warn("SLABDEFRAG_%s: unknown option (see docs/options.md)", name);
}

static void parse_one(const char *kv)
{
    static const char prefix[] = "SLABDEFRAG_";
    if (strncmp(kv, prefix, sizeof prefix - 1))
        return;
    const char *name = kv + sizeof prefix - 1;
    const char *eq = strchr(name, '=');
    if (!eq)
        return;
    char key[64];
    size_t n = (size_t)(eq - name);
    if (n >= sizeof key)
        n = sizeof key - 1;
    memcpy(key, name, n);
    key[n] = 0;
    apply(key, eq + 1);
}

/* Before libc has set environ (the very first malloc may come from the
 * dynamic linker), read the kernel's copy. */
static void parse_proc_environ(void)
{
    static char buf[32768];
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 &&
           (r = os_read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    os_close(fd);
    buf[len] = 0;
    for (size_t i = 0; i < len; i += strlen(buf + i) + 1)
        parse_one(buf + i);
}

void options_init(void)
{
    static int done;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    if (environ) {
        for (char **e = environ; *e; e++)
            parse_one(*e);
    } else {
        parse_proc_environ();
    }
}

int options_debug_wants(const char *name)
{
    if (!sd_opt.debug)
        return 0;
    const char *l = sd_opt.debug_caches;
    if (!*l)
        return 1;
    size_t n = strlen(name);
    while (*l) {
        const char *c = strchr(l, ',');
        size_t m = c ? (size_t)(c - l) : strlen(l);
        if (m == n && !strncmp(l, name, n))
            return 1;
        l += m + (c ? 1 : 0);
    }
    return 0;
}
