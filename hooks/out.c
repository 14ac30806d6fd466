/*
 * hooks/out.c - the reports' buffered writer (see out.h).
 */
#include "out.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "fmt.h"

void out_flush(struct out *o)
{
    size_t done = 0;
    while (!o->err && done < o->n) {
        ssize_t w = write(o->fd, o->buf + done, o->n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            o->err = -errno;
            break;
        }
        if (w == 0) {
            o->err = -EIO;
            break;
        }
        done += (size_t)w;
    }
    o->n = 0;
}

void out_put(struct out *o, const char *s, size_t len)
{
    while (len && !o->err) {
        if (o->n == sizeof o->buf)
            out_flush(o);
        size_t k = sizeof o->buf - o->n < len ? sizeof o->buf - o->n : len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

void out_str(struct out *o, const char *s)
{
    out_put(o, s, strlen(s));
}

void out_fmt(struct out *o, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    size_t n = sd_vfmt(line, sizeof line, fmt, ap);
    va_end(ap);
    out_put(o, line, n < sizeof line ? n : sizeof line - 1);
}
