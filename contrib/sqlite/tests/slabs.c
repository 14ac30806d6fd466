/*
 * contrib/sqlite/tests/slabs.c - sqlite-slabs: the pages of a connection
 * that closes leave no slab behind.
 *
 * One connection fills a database; it and two others read it with a
 * fourth in lock-step (a step of each scan in turn), so that the caches
 * of the last three fill at the same time; then all but the fourth close
 * and every cache is shrunk.  The pages of the one left must still
 * be cached (a shrink may only vacate sparse slabs, and it must not have
 * found its pages spread over them), and the page caches' slabs must hold
 * little more than those pages: at most one partly filled slab per
 * slabdefrag cache beyond ceil(pages / objects per slab).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slabdefrag.h>

#include "../dbfiles.h"
#include "sdpcache.h"
#include "sqltest.h"

#define NCONN 4
#define NROWS 6000          /* rows of 1000 bytes: about 1,600 pages */

/* Slabs of every page cache of the module ("sqlite-page-SZ+EXTRA#N" for
 * the pool's caches, "...-shared" for the shared one), how many hold any,
 * and the objects on a pool cache's slab. */
static void page_slabs(int szpage, int szextra, size_t *slabs, size_t *caches,
                       size_t *per_slab)
{
    *slabs = *caches = *per_slab = 0;
    for (int i = -1; i < 256; i++) {
        char name[64];
        if (i < 0)
            snprintf(name, sizeof(name), "sqlite-page-%d+%d-shared", szpage, szextra);
        else
            snprintf(name, sizeof(name), "sqlite-page-%d+%d#%d", szpage, szextra, i);
        sd_cache *c = sd_cache_find(name);
        struct sd_cache_info info;
        if (!c || sd_cache_get_info(c, &info) != 0)
            continue;
        *slabs += info.slabs;
        if (i >= 0 || !*per_slab)       /* a pool cache's, else the shared one's */
            *per_slab = info.objects_per_slab;
        if (info.slabs)
            (*caches)++;
    }
}

int main(void)
{
    if (sd_sqlite_pcache_install() != SQLITE_OK) {
        fprintf(stderr, "sqlite-slabs: install failed\n");
        return 1;
    }
    char dir[] = "/tmp/sqlite-slabs.XXXXXX", dbpath[256];
    if (!mkdtemp(dir)) {
        perror("sqlite-slabs: mkdtemp");
        return 1;
    }
    snprintf(dbpath, sizeof(dbpath), "%s/s.db", dir);

    sqlite3 *db[NCONN];
    for (int i = 0; i < NCONN; i++) {
        db[i] = st_open(dbpath);
        st_exec(db[i], "PRAGMA cache_size=-65536", NULL, NULL);
    }
    st_exec(db[0], "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);"
                   "BEGIN", NULL, NULL);
    for (int i = 1; i <= NROWS; i++) {
        char sql[64];
        snprintf(sql, sizeof(sql), "INSERT INTO t VALUES (%d, zeroblob(1000))", i);
        st_exec(db[0], sql, NULL, NULL);
    }
    st_exec(db[0], "COMMIT", NULL, NULL);

    /* Every connection scans the table, one row each in turn. */
    sqlite3_stmt *st[NCONN];
    for (int i = 0; i < NCONN; i++)
        if (sqlite3_prepare_v2(db[i], "SELECT length(v) FROM t", -1, &st[i], NULL)) {
            fprintf(stderr, "sqlite-slabs: prepare: %s\n", sqlite3_errmsg(db[i]));
            return 1;
        }
    long rows = 0;
    for (int more = NCONN; more;) {
        more = 0;
        for (int i = 0; i < NCONN; i++) {
            if (!st[i])
                continue;
            if (sqlite3_step(st[i]) == SQLITE_ROW) {
                rows++;
                more++;
            } else {
                sqlite3_finalize(st[i]);
                st[i] = NULL;
            }
        }
    }
    struct sd_sqlite_pcache_stats open, before, after;
    sd_sqlite_pcache_get_stats(&open);
    for (int i = 0; i < NCONN - 1; i++)  /* the last one read, and stays */
        sqlite3_close(db[i]);
    sd_sqlite_pcache_get_stats(&before);
    sd_shrink_all();
    sd_shrink_all();
    sd_sqlite_pcache_get_stats(&after);

    int szextra = 0;
    for (int e = 8; e <= 1024 && !szextra; e += 8) {  /* the geometry SQLite chose */
        char name[64];
        snprintf(name, sizeof(name), "sqlite-page-4096+%d#0", e);
        if (sd_cache_find(name))
            szextra = e;
        snprintf(name, sizeof(name), "sqlite-page-4096+%d-shared", e);
        if (sd_cache_find(name))
            szextra = e;
    }
    size_t slabs, caches, per_slab;
    page_slabs(4096, szextra, &slabs, &caches, &per_slab);
    size_t need = per_slab ? (after.pages + per_slab - 1) / per_slab : 0;
    printf("pages_open=%lu ", open.pages);
    printf("rows=%ld pages_before=%lu pages_after=%lu slabs=%zu caches=%zu "
           "objects_per_slab=%zu slabs_needed=%zu\n", rows, before.pages,
           after.pages, slabs, caches, per_slab, need);

    int bad = 0;
    if (rows != (long)NCONN * NROWS || !szextra || !per_slab) {
        fprintf(stderr, "sqlite-slabs: %ld rows read, page geometry 4096+%d, "
                "%zu objects per slab\n", rows, szextra, per_slab);
        bad = 1;
    }
    if (after.pages < before.pages * 95 / 100 || before.pages < 1000) {
        fprintf(stderr, "sqlite-slabs: %lu pages cached before the shrink, %lu after: "
                "the survivor's pages were on sparse slabs\n", before.pages, after.pages);
        bad = 1;
    }
    if (slabs > need + caches) {
        fprintf(stderr, "sqlite-slabs: %zu slabs hold %lu pages (%zu needed): the "
                "closed connections' pages left slabs behind\n", slabs, after.pages, need);
        bad = 1;
    }
    sqlite3_close(db[NCONN - 1]);
    sqlite_db_remove(dbpath, dir);
    printf("verify=%s\n", bad ? "FAILED" : "ok");
    return bad;
}
