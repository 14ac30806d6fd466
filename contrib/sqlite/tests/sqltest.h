/*
 * contrib/sqlite/tests/sqltest.h - helpers of the sqlite suite's programs:
 * a growing text buffer of query results, statements run with their rows
 * appended, a deterministic generator and FNV-1a.  Header only.
 */
#ifndef SQLTEST_H
#define SQLTEST_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

struct sqlbuf {
    char  *p;
    size_t len, cap;
};

static inline void sb_add(struct sqlbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) {
            fprintf(stderr, "sqltest: out of memory\n");
            exit(1);
        }
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static inline void sb_printf(struct sqlbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static inline uint64_t st_fnv(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static inline uint64_t st_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline void st_fill(unsigned char *buf, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0)
            seed = st_rand(&seed);
        buf[i] = (unsigned char)(seed >> (8 * (i % 8)));
    }
}

/* Run every statement of sql on db, appending each row (columns as text,
 * '|'-separated) to out when out is not NULL; after each statement call
 * between() if given.  Exits on an SQL error, naming the statement. */
static inline void st_exec(sqlite3 *db, const char *sql, struct sqlbuf *out,
                           void (*between)(void))
{
    const char *tail = sql;
    while (tail && *tail) {
        sqlite3_stmt *st = NULL;
        const char *next = NULL;
        if (sqlite3_prepare_v2(db, tail, -1, &st, &next) != SQLITE_OK) {
            fprintf(stderr, "sqltest: prepare %.60s: %s\n", tail, sqlite3_errmsg(db));
            exit(1);
        }
        if (!st) {                  /* whitespace or a comment */
            tail = next;
            continue;
        }
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if (!out)
                continue;
            int nc = sqlite3_column_count(st);
            for (int i = 0; i < nc; i++) {
                const unsigned char *t = sqlite3_column_text(st, i);
                if (i)
                    sb_add(out, "|", 1);
                if (t)
                    sb_add(out, (const char *)t, strlen((const char *)t));
                else
                    sb_add(out, "NULL", 4);
            }
            sb_add(out, "\n", 1);
        }
        if (rc != SQLITE_DONE) {
            fprintf(stderr, "sqltest: step %.60s: %s\n", tail, sqlite3_errmsg(db));
            exit(1);
        }
        sqlite3_finalize(st);
        tail = next;
        if (between)
            between();
    }
}

static inline sqlite3 *st_open(const char *path)
{
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "sqltest: open %s: %s\n", path,
                db ? sqlite3_errmsg(db) : "out of memory");
        exit(1);
    }
    sqlite3_busy_timeout(db, 10000);
    return db;
}

#endif /* SQLTEST_H */
