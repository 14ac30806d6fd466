/*
 * hooks/stats.c - the slabinfo-style table (sd_stats_print), printed by
 * the API, at exit (SLABDEFRAG_STATS=1) and for the slabinfo CLI.
 */
#include <errno.h>
#include <string.h>

#include "cache.h"
#include "fmt.h"
#include "large.h"
#include "segment.h"
#include "shrinker.h"
#include "slabdefrag.h"

#define SD_EXPORT __attribute__((visibility("default")))

static void size_str(char *b, size_t n, size_t v)
{
    if (v >= (100UL << 20))
        sd_fmt(b, n, "%zuM", v >> 20);
    else if (v >= (100UL << 10))
        sd_fmt(b, n, "%zuK", v >> 10);
    else
        sd_fmt(b, n, "%zu", v);
}

SD_EXPORT int sd_stats_print(int fd)
{
    cache_init();
    int err = sd_dprintf(fd, "%-20s %9s %7s %8s %16s %4s %3s %3s %-4s %8s %8s %9s %8s\n",
                         "Name", "Objects", "Objsize", "Space", "Slabs/Part/Cpu",
                         "O/S", "%Fr", "%Ef", "Flg", "VacAtt", "VacOK",
                         "Kicked", "Released");
    if (err)
        return err;
    size_t tot_space = 0, tot_used = 0, tot_slabs = 0, tot_objs = 0;
    for (unsigned i = 0; i < SD_MAX_CACHES; i++) {
        struct sd_cache *c = __atomic_load_n(&sd_caches[i], __ATOMIC_ACQUIRE);
        if (!c)
            continue;
        struct cache_usage u;
        cache_usage(c, &u);
        unsigned long att = c->stat[SD_STAT_VACATE_ATTEMPTS];
        if (!u.slabs && !att && c->is_malloc)
            continue;
        size_t slab_bytes = 1UL << (14 + 2 * c->kind);
        size_t space = u.slabs * slab_bytes;
        size_t used = u.objects_inuse * c->object_size;
        char sp[16], rel[16], sps[32], flg[8];
        size_str(sp, sizeof sp, space);
        size_str(rel, sizeof rel, c->stat[SD_STAT_BYTES_RELEASED]);
        sd_fmt(sps, sizeof sps, "%zu/%zu/%zu", u.slabs, u.partial, u.active);
        int f = 0;
        if (c->refcount > 1) flg[f++] = '*';
        if (c->has_ops) flg[f++] = 'D';
        if (c->ctor) flg[f++] = 'C';
        if (c->flags & SD_HWCACHE_ALIGN) flg[f++] = 'A';
        if (c->debug) flg[f++] = 'F';
        if (c->dead) flg[f++] = 'X';
        flg[f] = 0;
        err = sd_dprintf(fd, "%-20s %9zu %7u %8s %16s %4u %3zu %3zu %-4s %8lu %8lu %9lu %8s\n",
                         c->name, u.objects_inuse, c->object_size, sp, sps,
                         c->capacity, u.slabs ? u.partial * 100 / u.slabs : 0,
                         space ? used * 100 / space : 0, flg, att,
                         c->stat[SD_STAT_VACATE_SUCCESSES],
                         c->stat[SD_STAT_OBJECTS_KICKED], rel);
        if (err)
            return err;
        if (c->aliases[0])
            sd_dprintf(fd, "%-20s aliases: %s\n", "", c->aliases);
        tot_space += space;
        tot_used += used;
        tot_slabs += u.slabs;
        tot_objs += u.objects_inuse;
    }
    size_t lblocks, lbytes, lcached;
    large_usage(&lblocks, &lbytes, &lcached);
    struct shrinker_stats st;
    shrinker_get_stats(&st);
    char a[16], b[16];
    size_str(a, sizeof a, tot_space);
    size_str(b, sizeof b, lbytes);
    err = sd_dprintf(fd, "Total: %zu objects in %zu slabs, %s slab space, %zu%% efficient; "
                     "large: %zu blocks, %s mapped\n",
                     tot_objs, tot_slabs, a, tot_space ? tot_used * 100 / tot_space : 0,
                     lblocks, b);
    if (err)
        return err;
    return sd_dprintf(fd, "Shrinker: %s, %lu passes, %lu bytes released, longest pass "
                      "%lu us, longest vacate %lu us\n",
                      st.running ? "running" : "idle", (unsigned long)st.passes,
                      (unsigned long)st.bytes_released,
                      (unsigned long)(st.longest_pass_ns / 1000),
                      (unsigned long)(st.longest_vacate_ns / 1000));
}
