/*
 * tests/mesh/meshjson.h - reading the JSON statistics in the mesh tests
 * (mesh_test.c, mesh_syscall.c, mesh_policy.c, mesh_pattern.c).  The
 * includer includes tests/subject.h (check) first.
 */
#ifndef SD_TESTS_MESHJSON_H
#define SD_TESTS_MESHJSON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "slabdefrag.h"

/* The statistics as one JSON line (sd_stats_print_json; malloc'd,
 * NUL-ended). */
static inline char *stats_json(void)
{
    int fd = memfd_create("stats", 0);
    check(fd >= 0, "memfd_create: %s", strerror(errno));
    check(sd_stats_print_json(fd) == 0, "sd_stats_print_json");
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = calloc(1, (size_t)n + 1);
    check(buf && pread(fd, buf, (size_t)n, 0) == n, "reading the statistics back");
    close(fd);
    return buf;
}

/* The JSON object that follows `"key":` in json (NULL if none). */
static inline const char *json_object(const char *json, const char *key)
{
    char k[80];
    snprintf(k, sizeof k, "\"%s\":{", key);
    const char *o = strstr(json, k);
    return o ? o + strlen(k) - 1 : NULL;
}

/* The number of member `key` of the object at obj (its first such
 * member: the per-cache objects' own come before their "counters"). */
static inline unsigned long json_num(const char *obj, const char *key)
{
    char k[80];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *v = obj ? strstr(obj, k) : NULL;
    check(v, "no \"%s\" in the JSON statistics", key);
    return strtoul(v + strlen(k), NULL, 10);
}

/* The per-cache object of cache `name` (NULL if not listed). */
static inline const char *json_cache(const char *json, const char *name)
{
    char k[96];
    snprintf(k, sizeof k, "{\"name\":\"%s\",", name);
    return strstr(json, k);
}

/* Counter `key` of cache `name` (its "counters" object); 0 while the
 * cache is not listed. */
static inline unsigned long cache_counter(const char *name, const char *key)
{
    char *json = stats_json();
    char k[96];
    const char *c = json_cache(json, name);
    if (!c) {                           /* not used yet */
        free(json);
        return 0;
    }
    c = strstr(c, "\"counters\":{");
    check(c, "no counters for %s", name);
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *v = strstr(c, k);
    check(v, "no counter %s", key);
    unsigned long n = strtoul(v + strlen(k), NULL, 10);
    free(json);
    return n;
}

#endif
