/*
 * contrib/sqlite/tests/threads.c - four connections on four threads while
 * a fifth thread shrinks every cache all the time.
 *
 * The database (WAL mode, so readers and the writer overlap) holds rows
 * (id, payload, csum) with csum = FNV-1a of the payload.  Each worker, on
 * its own connection with its own cache size, loops: read a range of rows
 * and check every checksum, rewrite a few rows in a transaction (new
 * payload, new checksum; now and then rolled back instead), change its
 * cache size, release its memory.  The shrinker thread calls
 * sd_shrink_all() back to back.  At the end every row is checked again,
 * PRAGMA integrity_check must say ok, and get()/kick() must have dropped
 * pages (else the test proves nothing).
 *
 *   sqlite-threads [SECONDS] [--background] [--pool N]
 *
 * SECONDS defaults to 8; the database goes in a new directory under /tmp.
 * --background: no shrinking thread of ours; the allocator's background
 * shrinker (started by its own options, e.g. SLABDEFRAG_RSS_LIMIT_MB) must
 * do the vacating.  --pool N: at most N pool caches per page geometry
 * (sdp_pool_limit), so that the other connections' pages share the shared
 * cache, whose get() finds pages of several owners on one slab.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <slabdefrag.h>

#include "dbfiles.h"
#include "sdpcache.h"
#include "sdpcache_internal.h"
#include "sqltest.h"

#define NROWS   6000
#define NTHREAD 4
#define PAYMAX  900

static char dbpath[256];
static volatile int stop;
static unsigned long errors, reads, writes, rollbacks, shrinks;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static void count(unsigned long *what, unsigned long n)
{
    pthread_mutex_lock(&count_lock);
    *what += n;
    pthread_mutex_unlock(&count_lock);
}

static void fail(const char *who, const char *msg, sqlite3 *db)
{
    fprintf(stderr, "sqlite-threads: %s: %s%s%s\n", who, msg,
            db ? ": " : "", db ? sqlite3_errmsg(db) : "");
    count(&errors, 1);
}

/* Check the checksum of every row with id in [lo, hi); rows checked, or
 * -1 after an error. */
static long check_rows(sqlite3 *db, const char *who, int lo, int hi)
{
    sqlite3_stmt *st;
    long n = 0;
    if (sqlite3_prepare_v2(db, "SELECT id, p, csum FROM r WHERE id >= ?1 AND id < ?2",
                           -1, &st, NULL) != SQLITE_OK) {
        fail(who, "prepare select", db);
        return -1;
    }
    sqlite3_bind_int(st, 1, lo);
    sqlite3_bind_int(st, 2, hi);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *p = sqlite3_column_blob(st, 1);
        int len = sqlite3_column_bytes(st, 1);
        sqlite3_int64 want = sqlite3_column_int64(st, 2);
        if ((sqlite3_int64)st_fnv(p, (size_t)len) != want) {
            char msg[96];
            snprintf(msg, sizeof(msg), "row %d: checksum mismatch",
                     sqlite3_column_int(st, 0));
            fail(who, msg, NULL);
            n = -1;
            break;
        }
        n++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        fail(who, "select", db), n = -1;
    sqlite3_finalize(st);
    return n;
}

/* Give rows [lo, lo+cnt) new payloads; commit, or roll back if asked. */
static int rewrite(sqlite3 *db, const char *who, int lo, int cnt, uint64_t *seed,
                   int rollback)
{
    static __thread unsigned char buf[PAYMAX];
    sqlite3_stmt *st;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        fail(who, "begin", db);
        return -1;
    }
    if (sqlite3_prepare_v2(db, "UPDATE r SET p = ?2, csum = ?3 WHERE id = ?1",
                           -1, &st, NULL) != SQLITE_OK) {
        fail(who, "prepare update", db);
        return -1;
    }
    for (int i = 0; i < cnt; i++) {
        size_t len = 20 + st_rand(seed) % (PAYMAX - 20);
        st_fill(buf, len, st_rand(seed));
        sqlite3_bind_int(st, 1, (lo + i) % NROWS + 1);
        sqlite3_bind_blob(st, 2, buf, (int)len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)st_fnv(buf, len));
        if (sqlite3_step(st) != SQLITE_DONE) {
            fail(who, "update", db);
            break;
        }
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    if (sqlite3_exec(db, rollback ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        fail(who, rollback ? "rollback" : "commit", db);
        return -1;
    }
    return 0;
}

static void *worker(void *arg)
{
    long id = (long)arg;
    char who[16];
    snprintf(who, sizeof(who), "thread %ld", id);
    uint64_t seed = 1000 + (uint64_t)id;
    sqlite3 *db = st_open(dbpath);
    static const int sizes[] = { 20, 200, 2000, 50, 8 };
    int round = 0;
    while (!stop) {
        char sql[64];
        snprintf(sql, sizeof(sql), "PRAGMA cache_size=%d", sizes[(round + id) % 5]);
        sqlite3_exec(db, sql, NULL, NULL, NULL);
        int lo = (int)(st_rand(&seed) % NROWS);
        long n = check_rows(db, who, lo, lo + 400);
        if (n < 0)
            break;
        count(&reads, (unsigned long)n);
        int rb = st_rand(&seed) % 5 == 0;
        if (rewrite(db, who, (int)(st_rand(&seed) % NROWS), 20, &seed, rb))
            break;
        count(rb ? &rollbacks : &writes, 1);
        if (round % 7 == 3)
            sqlite3_db_release_memory(db);
        round++;
    }
    sqlite3_close(db);
    return NULL;
}

static void *shrinker(void *arg)
{
    (void)arg;
    while (!stop) {
        sd_shrink_all();
        count(&shrinks, 1);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 8;
    int background = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--background") == 0) {
            background = 1;
        } else if (strcmp(argv[i], "--pool") == 0 && i + 1 < argc) {
            sdp_pool_limit((unsigned)strtoul(argv[++i], NULL, 10));
        } else if ((seconds = strtod(argv[i], &end)) <= 0 || *end) {
            fprintf(stderr, "usage: sqlite-threads [SECONDS] [--background] [--pool N]\n");
            return 2;
        }
    }
    char dir[] = "/tmp/sdsqlite-threads.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "sqlite-threads: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    snprintf(dbpath, sizeof(dbpath), "%s/t.db", dir);
    int rc = sd_sqlite_pcache_install();
    if (rc != SQLITE_OK) {
        fprintf(stderr, "sqlite-threads: install: %s\n", sqlite3_errstr(rc));
        return 1;
    }

    sqlite3 *db = st_open(dbpath);
    st_exec(db, "PRAGMA journal_mode=WAL;"
                "CREATE TABLE r(id INTEGER PRIMARY KEY, p BLOB, csum INTEGER);",
            NULL, NULL);
    uint64_t seed = 7;
    st_exec(db, "BEGIN", NULL, NULL);
    for (int i = 1; i <= NROWS; i++) {
        char sql[64];
        snprintf(sql, sizeof(sql), "INSERT INTO r VALUES (%d, x'00', 0)", i);
        st_exec(db, sql, NULL, NULL);
    }
    st_exec(db, "COMMIT", NULL, NULL);
    if (rewrite(db, "setup", 0, NROWS, &seed, 0))
        return 1;

    pthread_t t[NTHREAD + 1];
    for (long i = 0; i < NTHREAD; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    if (!background)
        pthread_create(&t[NTHREAD], NULL, shrinker, NULL);
    struct timespec ts = { (time_t)seconds,
                           (long)((seconds - (double)(time_t)seconds) * 1e9) };
    nanosleep(&ts, NULL);
    stop = 1;
    for (int i = 0; i < NTHREAD + !background; i++)
        pthread_join(t[i], NULL);

    long n = check_rows(db, "final", 0, NROWS + 1);
    struct sqlbuf ic = { 0 };
    st_exec(db, "PRAGMA integrity_check", &ic, NULL);
    sqlite3_close(db);
    struct sd_sqlite_pcache_stats s;
    sd_sqlite_pcache_get_stats(&s);
    printf("rows_checked=%lu rows_final=%ld writes=%lu rollbacks=%lu shrinks=%lu\n",
           reads, n, writes, rollbacks, shrinks);
    printf("pages_created=%lu pages_recycled=%lu get_objects=%lu get_taken=%lu "
           "get_pinned=%lu get_busy=%lu kick_dropped=%lu pages_left=%lu\n",
           s.pages_created, s.pages_recycled, s.get_objects, s.get_taken,
           s.get_pinned, s.get_busy, s.kick_dropped, s.pages);
    int bad = errors != 0;
    if (n != NROWS) {
        fprintf(stderr, "sqlite-threads: %ld rows at the end, want %d\n", n, NROWS);
        bad = 1;
    }
    if (!ic.p || strcmp(ic.p, "ok\n") != 0) {
        fprintf(stderr, "sqlite-threads: integrity_check: %s", ic.p ? ic.p : "nothing\n");
        bad = 1;
    }
    if (s.get_taken == 0 || s.kick_dropped != s.get_taken || s.pages != 0) {
        fprintf(stderr, "sqlite-threads: get() took %lu pages, kick() dropped %lu, "
                "%lu left: want some taken, all dropped, none left\n",
                s.get_taken, s.kick_dropped, s.pages);
        bad = 1;
    }
    sqlite_db_remove(dbpath, dir);
    printf("verify=%s\n", bad ? "FAILED" : "ok");
    return bad;
}
