/*
 * contrib/sqlite/bench.c - sqlitebench, the `sqlite` workload of
 * scripts/compare: SQLite with several connections and large caches fills
 * a database, reads it hard, then closes most connections, deletes most
 * rows and idles.  RSS after the idle against the bytes SQLite still
 * caches shows whether the page memory went back.
 *
 *   sqlitebench [-c CONNS] [-n ROWS] [-r READS] [--cache-mb MB] [--idle S]
 *               [--module LIB] [--rss-limit-mb MB]
 *
 *   -c           connections, one reader thread each (default 4)
 *   -n           rows of 40..600 bytes (default 150000)
 *   -r           point reads per connection in the read phase (default 200000)
 *   --cache-mb   PRAGMA cache_size of each connection, MiB (default 64)
 *   --idle       seconds of idling at the end (default 8)
 *   --module     dlopen this libsdsqlite.so first: its constructor installs
 *                the slabdefrag page cache (run under libslabdefrag.so)
 *   --rss-limit-mb  re-run itself with SLABDEFRAG_RSS_LIMIT_MB=MB
 *
 * Phases: fill (one transaction per 1000 rows, connections in turn), read
 * (every connection's thread does random point reads and a range scan per
 * 1000), close all connections but one, delete 90% of the rows, read the
 * rest once, idle.  Prints key=value lines on stderr (benchutil.h):
 * fill_s, fill_rows_per_s, read_s, read_per_s, delete_s, time_s (fill
 * + read + delete), fill_cpu_s, read_cpu_s and delete_cpu_s (CPU time of
 * each phase, all threads: steadier than wall time on a loaded machine),
 * cache_used_bytes and live_bytes (what the remaining
 * connection caches after the idle), rss_kb_* per phase, and
 * rss_per_live (RSS at the end of the idle, the connection still open,
 * over live_bytes).  Exits non-zero
 * on an SQL error or a wrong row.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../../bench/benchutil.h"
#include "dbfiles.h"

static const char *prog = "sqlitebench";
static int nconn = 4;
static uint64_t nrows = 150000, nreads = 200000, cache_mb = 64;
static double idle_s = 8;
static char dbpath[256];

/* CPU seconds (user + system) the process has used, all threads. */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void die_db(sqlite3 *db, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", prog, what, db ? sqlite3_errmsg(db) : "error");
    exit(1);
}

static void exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        die_db(db, sql);
}

static sqlite3 *open_conn(void)
{
    sqlite3 *db = NULL;
    char sql[64];
    if (sqlite3_open(dbpath, &db) != SQLITE_OK)
        die_db(db, "open");
    sqlite3_busy_timeout(db, 30000);
    snprintf(sql, sizeof(sql), "PRAGMA cache_size=-%llu",
             (unsigned long long)cache_mb * 1024);
    exec(db, sql);
    return db;
}

static size_t row_len(uint64_t id)
{
    return 40 + (size_t)(bu_mix(id, 3) % 561);
}

static void row_fill(unsigned char *buf, uint64_t id, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(bu_mix(id, i / 8) >> (8 * (i % 8)));
}

/* Rows 1..nrows, 1000 per transaction, the connections taking turns. */
static void fill(sqlite3 **dbs)
{
    static unsigned char buf[600];
    for (uint64_t lo = 1, t = 0; lo <= nrows; lo += 1000, t++) {
        sqlite3 *db = dbs[t % (uint64_t)nconn];
        sqlite3_stmt *st;
        exec(db, "BEGIN IMMEDIATE");
        if (sqlite3_prepare_v2(db, "INSERT INTO t(id, v) VALUES (?1, ?2)", -1, &st,
                               NULL) != SQLITE_OK)
            die_db(db, "prepare insert");
        for (uint64_t id = lo; id < lo + 1000 && id <= nrows; id++) {
            size_t len = row_len(id);
            row_fill(buf, id, len);
            sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
            sqlite3_bind_blob(st, 2, buf, (int)len, SQLITE_STATIC);
            if (sqlite3_step(st) != SQLITE_DONE)
                die_db(db, "insert");
            sqlite3_reset(st);
        }
        sqlite3_finalize(st);
        exec(db, "COMMIT");
    }
}

struct reader {
    pthread_t t;
    sqlite3  *db;
    uint64_t  seed, reads, bad;
    uint64_t  only_mod;      /* nonzero: ids that are multiples of it */
};

/* One point read: the row must have its length and first bytes. */
static void read_one(struct reader *r, sqlite3_stmt *st, uint64_t id)
{
    unsigned char want[16];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        const unsigned char *v = sqlite3_column_blob(st, 0);
        row_fill(want, id, sizeof(want));
        if (len != row_len(id) || memcmp(v, want, sizeof(want)) != 0)
            r->bad++;
    } else if (rc != SQLITE_DONE || !r->only_mod || id % r->only_mod == 0) {
        r->bad++;
    }
    sqlite3_reset(st);
    r->reads++;
}

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    sqlite3_stmt *st, *scan;
    bu_sm rng = { r->seed };
    if (sqlite3_prepare_v2(r->db, "SELECT v FROM t WHERE id = ?1", -1, &st, NULL) ||
        sqlite3_prepare_v2(r->db, "SELECT sum(length(v)) FROM t WHERE id BETWEEN ?1 AND ?1 + 200",
                           -1, &scan, NULL))
        die_db(r->db, "prepare read");
    uint64_t n = r->only_mod ? nrows : nreads;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t id = r->only_mod ? i + 1 : 1 + bu_sm_below(&rng, nrows);
        if (r->only_mod && id % r->only_mod)
            continue;
        read_one(r, st, id);
        if (!r->only_mod && i % 1000 == 999) {
            sqlite3_bind_int64(scan, 1, (sqlite3_int64)id);
            if (sqlite3_step(scan) != SQLITE_ROW)
                r->bad++;
            sqlite3_reset(scan);
        }
    }
    sqlite3_finalize(scan);
    sqlite3_finalize(st);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: sqlitebench [-c CONNS] [-n ROWS] [-r READS] [--cache-mb MB] "
            "[--idle S] [--module LIB] [--rss-limit-mb MB]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *module = NULL, *v;
    uint64_t u, limit = 0;
    for (int i = 1; i < argc; i++) {
        if ((v = bu_opt(argc, argv, &i, "-c"))) {
            if (bu_parse_u64(v, &u) || u == 0 || u > 64) usage();
            nconn = (int)u;
        } else if ((v = bu_opt(argc, argv, &i, "-n"))) {
            if (bu_parse_u64(v, &nrows) || nrows < 1000) usage();
        } else if ((v = bu_opt(argc, argv, &i, "-r"))) {
            if (bu_parse_u64(v, &nreads)) usage();
        } else if ((v = bu_opt(argc, argv, &i, "--cache-mb"))) {
            if (bu_parse_u64(v, &cache_mb) || cache_mb == 0 || cache_mb > 65536) usage();
        } else if ((v = bu_opt(argc, argv, &i, "--idle"))) {
            char *end;
            idle_s = strtod(v, &end);
            if (*end || idle_s < 0) usage();
        } else if ((v = bu_opt(argc, argv, &i, "--module"))) {
            module = v;
        } else if ((v = bu_opt(argc, argv, &i, "--rss-limit-mb"))) {
            if (bu_parse_u64(v, &limit) || limit == 0) usage();
        } else {
            usage();
        }
    }
    /* The allocator reads its options before main: set it and start again. */
    if (limit && !getenv("SLABDEFRAG_RSS_LIMIT_MB")) {
        char val[32];
        snprintf(val, sizeof(val), "%llu", (unsigned long long)limit);
        setenv("SLABDEFRAG_RSS_LIMIT_MB", val, 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "%s: execv: %s\n", prog, strerror(errno));
        return 1;
    }
    if (module && !dlopen(module, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "%s: --module %s: %s\n", prog, module, dlerror());
        return 1;
    }
    char dir[] = "/tmp/sqlitebench.XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "%s: mkdtemp: %s\n", prog, strerror(errno));
        return 1;
    }
    snprintf(dbpath, sizeof(dbpath), "%s/b.db", dir);
    printf("sqlitebench: %d connections, %llu rows, %llu reads each, cache %llu MiB each, "
           "page cache %s\n", nconn, (unsigned long long)nrows, (unsigned long long)nreads,
           (unsigned long long)cache_mb, module ? module : "SQLite's own");

    sqlite3 **dbs = calloc((size_t)nconn, sizeof(*dbs));
    struct reader *rd = calloc((size_t)nconn, sizeof(*rd));
    if (!dbs || !rd)
        bu_die(prog, "out of memory");
    for (int i = 0; i < nconn; i++)
        dbs[i] = open_conn();
    exec(dbs[0], "PRAGMA journal_mode=WAL");
    exec(dbs[0], "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)");

    bu_event("fill");
    double t0 = bu_now(), c0 = cpu_now();
    fill(dbs);
    double t1 = bu_now(), c1 = cpu_now();
    bu_kv_long("rss_kb_filled", proc_status_kb("VmRSS"));

    bu_event("read");
    for (int i = 0; i < nconn; i++) {
        rd[i].db = dbs[i];
        rd[i].seed = 100 + (uint64_t)i;
        pthread_create(&rd[i].t, NULL, reader_main, &rd[i]);
    }
    uint64_t reads = 0, bad = 0;
    for (int i = 0; i < nconn; i++) {
        pthread_join(rd[i].t, NULL);
        reads += rd[i].reads;
        bad += rd[i].bad;
    }
    double t2 = bu_now(), c2 = cpu_now();
    bu_kv_long("rss_kb_read", proc_status_kb("VmRSS"));

    /* All but one connection go; 90% of the rows go. */
    bu_event("shrink");
    for (int i = 1; i < nconn; i++)
        sqlite3_close(dbs[i]);
    exec(dbs[0], "DELETE FROM t WHERE id % 10 != 0");
    exec(dbs[0], "PRAGMA wal_checkpoint(TRUNCATE)");
    struct reader last = { .db = dbs[0], .only_mod = 10 };
    reader_main(&last);
    bad += last.bad;
    double t3 = bu_now(), c3 = cpu_now();
    bu_kv_long("rss_kb_deleted", proc_status_kb("VmRSS"));

    bu_event("idle");
    bu_sleep(idle_s);
    int cur = 0, hi = 0;
    sqlite3_db_status(dbs[0], SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0);

    double fill_s = t1 - t0, read_s = t2 - t1, del_s = t3 - t2;
    bu_kv_double("fill_s", fill_s);
    bu_kv_double("fill_rows_per_s", (double)nrows / fill_s);
    bu_kv_double("read_s", read_s);
    bu_kv_double("read_per_s", (double)reads / read_s);
    bu_kv_double("delete_s", del_s);
    bu_kv_double("time_s", fill_s + read_s + del_s);
    bu_kv_double("fill_cpu_s", c1 - c0);
    bu_kv_double("read_cpu_s", c2 - c1);
    bu_kv_double("delete_cpu_s", c3 - c2);
    bu_kv_long("cache_used_bytes", cur);
    bu_kv_long("live_bytes", cur);
    long rss_idle = proc_status_kb("VmRSS");
    bu_kv_long("rss_kb_idle", rss_idle);
    if (cur > 0)
        bu_kv_double("rss_per_live", (double)rss_idle * 1024.0 / (double)cur);
    bu_kv_long("bad_rows", (long long)bad);
    sqlite3_close(dbs[0]);
    free(dbs);
    free(rd);
    sqlite_db_remove(dbpath, dir);
    if (bad) {
        fprintf(stderr, "%s: %llu wrong rows\n", prog, (unsigned long long)bad);
        return 1;
    }
    return 0;
}
