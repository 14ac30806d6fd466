/*
 * contrib/sqlite/sdpcache.h - SQLite's page cache on slabdefrag typed caches.
 *
 * A sqlite3_pcache_methods2 module whose pages live in slabdefrag caches
 * (one per page size plus SQLite's extra bytes) with get()/kick(), so that
 * slabdefrag's shrinker can empty sparse slabs of page memory by dropping
 * the unpinned (clean) pages on them, as SQLite lets any page cache do.
 *
 * Linked use: call sd_sqlite_pcache_install() before sqlite3_initialize()
 * (or before the first sqlite3_open*(), which initialises SQLite):
 *
 *     #include "sdpcache.h"
 *     int main(void) {
 *         if (sd_sqlite_pcache_install() != SQLITE_OK) return 1;
 *         sqlite3 *db;
 *         sqlite3_open("app.db", &db);    ...
 *
 * Preloaded use: LD_PRELOAD="libslabdefrag.so libsdsqlite.so" program.
 * See docs/sqlite.md.
 */
#ifndef SDPCACHE_H
#define SDPCACHE_H

#include <sqlite3.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Register the module with sqlite3_config(SQLITE_CONFIG_PCACHE2).
 * SQLITE_OK, or SQLite's code: SQLITE_MISUSE once SQLite is initialised. */
int sd_sqlite_pcache_install(void);

/* What the module has done since the process started. */
struct sd_sqlite_pcache_stats {
    unsigned long caches;          /* SQLite cache instances alive */
    unsigned long pages;           /* pages held now, pinned or not */
    unsigned long pages_created;   /* pages allocated, ever */
    unsigned long pages_recycled;  /* LRU pages reused for another key */
    unsigned long get_objects;     /* objects get() was offered */
    unsigned long get_taken;       /* unpinned pages get() took */
    unsigned long get_pinned;      /* pinned pages get() left */
    unsigned long get_busy;        /* pages left: their cache was locked */
    unsigned long get_kept;        /* pages left: their cache may not drop */
    unsigned long kick_dropped;    /* taken pages kick() freed */
};

/* Fill *out (never fails). */
void sd_sqlite_pcache_get_stats(struct sd_sqlite_pcache_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* SDPCACHE_H */
