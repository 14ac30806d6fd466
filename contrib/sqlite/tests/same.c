/*
 * contrib/sqlite/tests/same.c - SQLite gives the same answers and the same
 * database file with the slabdefrag page cache as with its own.
 *
 * One workload (inserts, updates, deletes, indexes, three connections to
 * one file, a rolled-back transaction, PRAGMA cache_size down and up,
 * sqlite3_db_release_memory, VACUUM, an in-memory database) runs three
 * times in this process, with sqlite3_shutdown() between the runs:
 *   1. SQLite's own page cache (pcache1),
 *   2. the module,
 *   3. the module with sd_shrink_all() after every statement.
 * Every query result is collected as text; runs 2 and 3 must match run 1
 * byte for byte, and so must the database file.  Run 3 must have had
 * pages taken by get() and dropped by kick(), or the test proves nothing.
 *
 *   sqlite-same [DIR]      (DIR: an existing, writable directory; by
 *                           default a new one under /tmp, removed after)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slabdefrag.h>

#include "sdpcache.h"
#include "sqltest.h"

#define NROWS 20000

static const char *dir;
static unsigned long shrinks;

static void shrink_now(void)
{
    sd_shrink_all();
    shrinks++;
}

static char *path_of(const char *name)
{
    static char buf[4][512];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

static void remove_files(void)
{
    const char *names[] = { "a.db", "a.db-journal", "a.db-wal", "a.db-shm" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (unlink(path_of(names[i])) != 0 && errno != ENOENT) {
            fprintf(stderr, "sqlite-same: unlink %s: %s\n", names[i], strerror(errno));
            exit(1);
        }
}

/* NROWS rows of varying sizes, from one prepared statement, in one
 * transaction; `between` every 500 rows. */
static void fill(sqlite3 *db, void (*between)(void))
{
    sqlite3_stmt *st;
    static unsigned char blob[1200];
    st_exec(db, "BEGIN", NULL, between);
    if (sqlite3_prepare_v2(db, "INSERT INTO t(id, k, v, n) VALUES (?1, ?2, ?3, ?4)",
                           -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite-same: prepare insert: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    uint64_t seed = 42;
    for (int i = 1; i <= NROWS; i++) {
        char key[32];
        size_t len = 40 + st_rand(&seed) % 900;
        snprintf(key, sizeof(key), "key%06d", (int)((i * 7919L) % 100003));
        st_fill(blob, len, (uint64_t)i);
        sqlite3_bind_int(st, 1, i);
        sqlite3_bind_text(st, 2, key, -1, SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 3, blob, (int)len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)(st_rand(&seed) % 1000000));
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "sqlite-same: insert %d: %s\n", i, sqlite3_errmsg(db));
            exit(1);
        }
        sqlite3_reset(st);
        if (between && i % 500 == 0)
            between();
    }
    sqlite3_finalize(st);
    st_exec(db, "COMMIT", NULL, between);
}

/* The workload; every result row goes to out. */
static void workload(struct sqlbuf *out, void (*between)(void))
{
    remove_files();
    sqlite3 *a = st_open(path_of("a.db"));
    st_exec(a, "PRAGMA cache_size=200;"
               "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB, n INTEGER);"
               "CREATE INDEX t_k ON t(k);", out, between);
    fill(a, between);
    st_exec(a, "SELECT count(*), sum(n), sum(length(v)) FROM t;"
               "UPDATE t SET n = n * 3 + 1, v = substr(v, 1, 30) || v WHERE id % 7 = 0;"
               "DELETE FROM t WHERE id % 5 = 0;"
               "SELECT count(*), sum(n), total(length(v)) FROM t;", out, between);

    /* Two more connections to the same file, with other cache sizes. */
    sqlite3 *b = st_open(path_of("a.db"));
    sqlite3 *c = st_open(path_of("a.db"));
    st_exec(b, "PRAGMA cache_size=3000;"
               "SELECT k, count(*), sum(n) FROM t WHERE k < 'key01' GROUP BY substr(k, 1, 6);"
               "INSERT INTO t(k, v, n) SELECT k || 'b', v, n + 1 FROM t WHERE id % 11 = 3;"
               "SELECT count(*), max(id) FROM t;", out, between);
    /* Scattered point lookups fill c's large cache, then it shrinks to a
     * few pages: the survivors sit thinly over many slabs. */
    st_exec(c, "PRAGMA cache_size=5000;", out, between);
    for (int i = 0; i < 40; i++) {
        char q[160];
        snprintf(q, sizeof(q), "SELECT id, k, hex(substr(v, 1, 8)) FROM t "
                 "WHERE id = %d OR k = 'key%06d';", (i * 4099) % NROWS + 1,
                 (i * 313) % 100003);
        st_exec(c, q, out, between);
    }
    st_exec(c, "SELECT sum(length(v)) FROM t WHERE id % 3 = 1;"
               "PRAGMA cache_size=10;"
               "SELECT count(*) FROM t WHERE n % 2 = 0;", out, between);

    /* A transaction rolled back. */
    st_exec(a, "BEGIN;"
               "DELETE FROM t WHERE id < 3000;"
               "UPDATE t SET v = zeroblob(100) WHERE id % 2 = 0;"
               "SELECT count(*) FROM t;"
               "ROLLBACK;"
               "SELECT count(*), sum(n) FROM t;", out, between);

    /* Cache sizes down and up, memory released. */
    st_exec(a, "PRAGMA cache_size=5;"
               "SELECT count(*), sum(n) FROM t WHERE id BETWEEN 1000 AND 9000;"
               "PRAGMA cache_size=4000;"
               "SELECT k, n FROM t WHERE k BETWEEN 'key05' AND 'key0501' ORDER BY k;",
            out, between);
    sb_printf(out, "release_a=%d\n", sqlite3_db_release_memory(a) == SQLITE_OK);
    sb_printf(out, "release_b=%d\n", sqlite3_db_release_memory(b) == SQLITE_OK);
    st_exec(a, "CREATE INDEX t_n ON t(n);"
               "SELECT id, n FROM t WHERE n < 2000 ORDER BY n, id;", out, between);
    sqlite3_close(c);
    sqlite3_close(b);

    /* VACUUM, then everything. */
    st_exec(a, "DELETE FROM t WHERE id % 3 = 0;"
               "VACUUM;"
               "PRAGMA integrity_check;"
               "SELECT id, k, hex(v), n FROM t ORDER BY id;", out, between);
    sqlite3_close(a);

    /* An in-memory database (a non-purgeable cache). */
    sqlite3 *m = st_open(":memory:");
    st_exec(m, "CREATE TABLE m(x INTEGER PRIMARY KEY, y TEXT);"
               "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r "
               "WHERE i < 5000) INSERT INTO m SELECT i, printf('%0*d', 200 + i % 300, i) FROM r;"
               "DELETE FROM m WHERE x % 4 = 1;"
               "SELECT count(*), sum(length(y)), max(y) FROM m;"
               "PRAGMA cache_size=5;"
               "SELECT x, length(y) FROM m WHERE x % 97 = 0 ORDER BY x;", out, between);
    sb_printf(out, "release_m=%d\n", sqlite3_db_release_memory(m) == SQLITE_OK);
    st_exec(m, "SELECT sum(x), sum(length(y)) FROM m;", out, between);
    sqlite3_close(m);
}

static void read_file(const char *path, struct sqlbuf *b)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "sqlite-same: open %s: %s\n", path, strerror(errno));
        exit(1);
    }
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        sb_add(b, tmp, n);
    fclose(f);
}

static int compare(const char *what, const struct sqlbuf *want, const struct sqlbuf *got)
{
    if (want->len == got->len && memcmp(want->p, got->p, want->len) == 0)
        return 0;
    size_t i = 0;
    while (i < want->len && i < got->len && want->p[i] == got->p[i])
        i++;
    fprintf(stderr, "sqlite-same: %s differs at byte %zu (lengths %zu and %zu)\n",
            what, i, want->len, got->len);
    return 1;
}

int main(int argc, char **argv)
{
    char tmpdir[] = "/tmp/sdsqlite-same.XXXXXX";
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: sqlite-same [DIR]\n");
        return 2;
    }
    dir = argc == 2 ? argv[1] : mkdtemp(tmpdir);
    if (!dir) {
        fprintf(stderr, "sqlite-same: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    struct sqlbuf res[3] = { { 0 } }, file[3] = { { 0 } };
    int bad = 0;
    for (int run = 0; run < 3; run++) {
        if (run > 0) {
            int rc = sd_sqlite_pcache_install();
            if (rc != SQLITE_OK) {
                fprintf(stderr, "sqlite-same: install: %s\n", sqlite3_errstr(rc));
                return 1;
            }
        }
        struct sd_sqlite_pcache_stats s0, s1;
        sd_sqlite_pcache_get_stats(&s0);
        workload(&res[run], run == 2 ? shrink_now : NULL);
        read_file(path_of("a.db"), &file[run]);
        sd_sqlite_pcache_get_stats(&s1);
        if (sqlite3_shutdown() != SQLITE_OK) {
            fprintf(stderr, "sqlite-same: sqlite3_shutdown failed\n");
            return 1;
        }
        printf("run=%d result_bytes=%zu file_bytes=%zu pages_created=%lu "
               "pages_recycled=%lu get_objects=%lu get_taken=%lu get_pinned=%lu "
               "get_busy=%lu get_kept=%lu kick_dropped=%lu pages_left=%lu\n",
               run, res[run].len, file[run].len,
               s1.pages_created - s0.pages_created,
               s1.pages_recycled - s0.pages_recycled,
               s1.get_objects - s0.get_objects, s1.get_taken - s0.get_taken,
               s1.get_pinned - s0.get_pinned, s1.get_busy - s0.get_busy,
               s1.get_kept - s0.get_kept, s1.kick_dropped - s0.kick_dropped,
               s1.pages);
        if (run > 0 && s1.pages_created == s0.pages_created) {
            fprintf(stderr, "sqlite-same: run %d: the module made no pages\n", run);
            bad = 1;
        }
        if (s1.pages != 0) {
            fprintf(stderr, "sqlite-same: run %d: %lu pages left after close\n",
                    run, s1.pages);
            bad = 1;
        }
        if (run == 2 && (s1.get_taken == s0.get_taken ||
                         s1.kick_dropped - s0.kick_dropped != s1.get_taken - s0.get_taken)) {
            fprintf(stderr, "sqlite-same: shrinks took %lu pages and dropped %lu "
                    "(%lu shrinks): want some, and as many dropped as taken\n",
                    s1.get_taken - s0.get_taken, s1.kick_dropped - s0.kick_dropped,
                    shrinks);
            bad = 1;
        }
        if (run > 0) {
            char what[64];
            snprintf(what, sizeof(what), "run %d: query results", run);
            bad |= compare(what, &res[0], &res[run]);
            snprintf(what, sizeof(what), "run %d: database file", run);
            bad |= compare(what, &file[0], &file[run]);
        }
    }
    remove_files();
    if (argc == 1)
        rmdir(dir);
    printf("shrinks=%lu\n", shrinks);
    printf("verify=%s\n", bad ? "FAILED" : "ok");
    return bad;
}
