/*
 * hooks/out.h - a buffered writer to a file descriptor for the reports
 * (statistics, heap profiles): no stdio, no malloc, stops at the first
 * failed write (a client that hung up).
 */
#ifndef SD_HOOKS_OUT_H
#define SD_HOOKS_OUT_H

#include <stddef.h>

struct out {
    int    fd;
    int    err;                 /* first error, -errno */
    size_t n;
    char   buf[4096];
};

void out_flush(struct out *o);
void out_put(struct out *o, const char *s, size_t len);
void out_str(struct out *o, const char *s);
/* sd_fmt's conversions (core/fmt.h); a line of at most 1023 bytes. */
void out_fmt(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
