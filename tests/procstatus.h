/*
 * tests/procstatus.h - a field of /proc/<pid>/status ("VmRSS", "VmHWM",
 * "VmLck", "FDSize"), for the tests and for bench/ (bench/benchutil.h
 * includes it).  open and read into a stack buffer: no allocation, so it
 * can be called between a program's allocations without changing them.
 */
#ifndef SD_TESTS_PROCSTATUS_H
#define SD_TESTS_PROCSTATUS_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The number after "FIELD:" in /proc/PID/status (pid 0: this process);
 * -1 if the process or the field is not there.  FIELD without the colon. */
static inline long proc_status_field(pid_t pid, const char *field)
{
    char path[64], buf[8192];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n, len = 0;
    while (len < (ssize_t)sizeof buf - 1 &&
           (n = read(fd, buf + len, sizeof buf - 1 - (size_t)len)) > 0)
        len += n;
    close(fd);
    buf[len] = '\0';
    size_t fl = strlen(field);
    for (char *p = buf; p && *p; ) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':')
            return strtol(p + fl + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

/* A kB field of this process's status ("VmRSS", "VmHWM"); -1 if absent. */
static inline long proc_status_kb(const char *field)
{
    return proc_status_field(0, field);
}

#endif
