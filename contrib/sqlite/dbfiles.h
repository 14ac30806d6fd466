/*
 * contrib/sqlite/dbfiles.h - remove a scratch database: its file, the
 * WAL and shared-memory files SQLite makes beside it, and the directory
 * that held them (sqlitebench and the tests).
 */
#ifndef SD_CONTRIB_SQLITE_DBFILES_H
#define SD_CONTRIB_SQLITE_DBFILES_H

#include <stdio.h>
#include <unistd.h>

static inline void sqlite_db_remove(const char *dbpath, const char *dir)
{
    static const char *const sfx[] = { "", "-wal", "-shm" };
    char path[4096];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", dbpath, sfx[i]);
        unlink(path);
    }
    rmdir(dir);
}

#endif
