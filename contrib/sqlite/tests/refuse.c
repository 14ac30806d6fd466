/*
 * contrib/sqlite/tests/refuse.c - libsdsqlite.so's constructor leaves a
 * program's SQLite alone when it comes too late, and says so once.
 *
 *   sqlite-refuse LIBSDSQLITE.so none|initialised|configured
 *
 *   none         load the library first: it installs itself (pages made,
 *                nothing on stderr)
 *   initialised  sqlite3_initialize() first: one line on stderr, no pages
 *   configured   a page cache of the program's own (SQLite's default,
 *                wrapped) configured first: one line, the program's cache
 *                is the one used, no pages made by the module
 * The library is loaded with dlopen(), which runs its constructor at that
 * point; its stderr is caught in a temporary file and checked.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sdpcache.h"
#include "sqltest.h"

static sqlite3_pcache_methods2 dflt;
static int own_inits;

/* The program's own page cache: SQLite's default, counted. */
static int own_init(void *arg)
{
    own_inits++;
    return dflt.xInit(arg);
}

/* dlopen the library with stderr going to a file; what it wrote. */
static void load(const char *lib, char *err, size_t errsz, void **handle)
{
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0) {
        perror("sqlite-refuse: tmpfile");
        exit(1);
    }
    fflush(stderr);
    dup2(fileno(tmp), 2);
    *handle = dlopen(lib, RTLD_NOW);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    if (!*handle) {
        fprintf(stderr, "sqlite-refuse: dlopen %s: %s\n", lib, dlerror());
        exit(1);
    }
    rewind(tmp);
    size_t n = fread(err, 1, errsz - 1, tmp);
    err[n] = 0;
    fclose(tmp);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: sqlite-refuse LIBSDSQLITE.so none|initialised|configured\n");
        return 2;
    }
    const char *lib = argv[1], *mode = argv[2];
    int want_installed = strcmp(mode, "none") == 0;
    if (strcmp(mode, "initialised") == 0) {
        sqlite3_initialize();
    } else if (strcmp(mode, "configured") == 0) {
        sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &dflt);
        sqlite3_pcache_methods2 own = dflt;
        own.xInit = own_init;
        if (sqlite3_config(SQLITE_CONFIG_PCACHE2, &own) != SQLITE_OK) {
            fprintf(stderr, "sqlite-refuse: configuring the program's cache failed\n");
            return 1;
        }
    } else if (!want_installed) {
        fprintf(stderr, "sqlite-refuse: unknown mode %s\n", mode);
        return 2;
    }

    char err[1024];
    void *h;
    load(lib, err, sizeof(err), &h);
    void (*get_stats)(struct sd_sqlite_pcache_stats *) =
        (void (*)(struct sd_sqlite_pcache_stats *))dlsym(h, "sd_sqlite_pcache_get_stats");
    if (!get_stats) {
        fprintf(stderr, "sqlite-refuse: no sd_sqlite_pcache_get_stats in %s\n", lib);
        return 1;
    }

    sqlite3 *db = st_open(":memory:");
    st_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);", NULL, NULL);
    sqlite3_close(db);
    struct sd_sqlite_pcache_stats s;
    get_stats(&s);

    int lines = 0;
    for (const char *p = err; *p; p++)
        lines += *p == '\n';
    printf("mode=%s stderr_lines=%d pages_created=%lu own_inits=%d\n", mode, lines,
           s.pages_created, own_inits);
    if (lines)
        printf("stderr: %s", err);
    int bad;
    if (want_installed)
        bad = lines != 0 || s.pages_created == 0;
    else
        bad = lines != 1 || strncmp(err, "sdsqlite: ", 10) != 0 ||
              s.pages_created != 0 ||
              (strcmp(mode, "configured") == 0 && own_inits != 1);
    printf("verify=%s\n", bad ? "FAILED" : "ok");
    return bad;
}
