/*
 * contrib/sqlite/preload.c - libsdsqlite.so: installs the slabdefrag page
 * cache for SQLite from a constructor, so that an unmodified program run
 * with LD_PRELOAD="libslabdefrag.so libsdsqlite.so" gets it.
 *
 * The constructor runs before main(), hence before the program's first use
 * of SQLite.  It leaves everything as it is, with one line on stderr, when
 * SQLite is already initialised (another library's constructor used it)
 * or a page cache other than SQLite's own is already configured.
 *
 *   SDSQLITE_STATS=1   print the module's counters on stderr at exit
 *                      (one line, "sdsqlite: caches=... pages_created=...")
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpcache.h"
#include "sdpcache_internal.h"

static int stats_at_exit;

/* 1 if fn lies in the same shared object as sqlite3_config (SQLite's own
 * default cache, pcache1); 0 if elsewhere or unknown. */
static int in_libsqlite(void *fn)
{
    Dl_info a, b;
    if (!dladdr(fn, &a) || !dladdr((void *)sqlite3_config, &b))
        return 0;
    return a.dli_fbase == b.dli_fbase;
}

static void print_stats(void)
{
    struct sd_sqlite_pcache_stats s;
    sd_sqlite_pcache_get_stats(&s);
    fprintf(stderr, "sdsqlite: caches=%lu pages=%lu pages_created=%lu "
            "pages_recycled=%lu get_objects=%lu get_taken=%lu get_pinned=%lu "
            "get_busy=%lu get_kept=%lu kick_dropped=%lu\n",
            s.caches, s.pages, s.pages_created, s.pages_recycled,
            s.get_objects, s.get_taken, s.get_pinned, s.get_busy,
            s.get_kept, s.kick_dropped);
}

__attribute__((constructor))
static void sdsqlite_preload_init(void)
{
    const char *v = getenv("SDSQLITE_STATS");
    if (v && strcmp(v, "1") == 0)
        stats_at_exit = 1;
    else if (v && *v && strcmp(v, "0") != 0)
        fprintf(stderr, "sdsqlite: SDSQLITE_STATS=%s: expected 0 or 1\n", v);

    sqlite3_pcache_methods2 cur;
    memset(&cur, 0, sizeof(cur));
    /* (This also selects SQLite's default cache if none is configured.) */
    if (sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &cur) != SQLITE_OK) {
        fprintf(stderr, "sdsqlite: SQLite is already initialised; "
                "page cache not installed\n");
        return;
    }
    if (sdp_methods_are_ours(&cur))
        return;
    if (cur.xInit && !in_libsqlite((void *)cur.xInit)) {
        fprintf(stderr, "sdsqlite: the program configured its own page cache; "
                "page cache not installed\n");
        return;
    }
    int rc = sd_sqlite_pcache_install();
    if (rc != SQLITE_OK) {
        fprintf(stderr, "sdsqlite: sqlite3_config(SQLITE_CONFIG_PCACHE2): %s; "
                "page cache not installed\n", sqlite3_errstr(rc));
        return;
    }
    if (stats_at_exit)
        atexit(print_stats);
}
