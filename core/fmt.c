/*
 * core/fmt.c - a small non-allocating formatter for the allocator's
 * messages (see fmt.h).
 */
#include "fmt.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "os.h"

void (*sd_fatal_hook)(void);

struct out {
    char  *buf;
    size_t size, len;
};

static void put(struct out *o, char c)
{
    if (o->len + 1 < o->size)
        o->buf[o->len] = c;
    o->len++;
}

static void put_num(struct out *o, unsigned long long v, unsigned base,
                    int neg, int width, char pad)
{
    char tmp[24];
    int n = 0;
    do {
        unsigned d = (unsigned)(v % base);
        tmp[n++] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
        v /= base;
    } while (v);
    if (neg)
        tmp[n++] = '-';
    for (int i = n; i < width; i++)
        put(o, pad);
    while (n)
        put(o, tmp[--n]);
}

size_t sd_vfmt(char *buf, size_t size, const char *fmt, va_list ap)
{
    struct out o = { buf, size, 0 };
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') {
            put(&o, *f);
            continue;
        }
        f++;
        char pad = ' ';
        int width = 0, lng = 0, left = 0;
        if (*f == '-') { left = 1; f++; }
        if (*f == '0') { pad = '0'; f++; }
        while (*f >= '0' && *f <= '9')
            width = width * 10 + (*f++ - '0');
        while (*f == 'l' || *f == 'z') { lng++; f++; }
        switch (*f) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            int n = 0;
            while (s[n]) n++;
            if (!left) for (int i = n; i < width; i++) put(&o, ' ');
            for (int i = 0; i < n; i++) put(&o, s[i]);
            if (left) for (int i = n; i < width; i++) put(&o, ' ');
            break;
        }
        case 'c':
            put(&o, (char)va_arg(ap, int));
            break;
        case 'd': case 'i': {
            long long v = lng ? va_arg(ap, long) : va_arg(ap, int);
            put_num(&o, v < 0 ? -(unsigned long long)v : (unsigned long long)v,
                    10, v < 0, width, pad);
            break;
        }
        case 'u': case 'x': {
            unsigned long long v = lng ? va_arg(ap, unsigned long)
                                       : va_arg(ap, unsigned);
            put_num(&o, v, *f == 'u' ? 10 : 16, 0, width, pad);
            break;
        }
        case 'p':
            put(&o, '0'); put(&o, 'x');
            put_num(&o, (uintptr_t)va_arg(ap, void *), 16, 0, 0, ' ');
            break;
        case '%':
            put(&o, '%');
            break;
        default:
            put(&o, '%');
            if (*f) put(&o, *f); else f--;
        }
    }
    if (size)
        buf[o.len < size ? o.len : size - 1] = '\0';
    return o.len;
}

size_t sd_fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = sd_vfmt(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sd_dprintf(int fd, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    size_t n = sd_vfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= sizeof buf) n = sizeof buf - 1;
    return write_all(fd, buf, n);
}

static void vwarn(const char *fmt, va_list ap)
{
    char buf[512];
    int saved = errno;
    size_t n = sd_fmt(buf, sizeof buf, "slabdefrag: ");
    n += sd_vfmt(buf + n, sizeof buf - n - 1, fmt, ap);
    if (n > sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    write_all(2, buf, n);
    errno = saved;
}

void sd_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

void sd_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
    if (sd_fatal_hook) {
        void (*hook)(void) = sd_fatal_hook;
        sd_fatal_hook = NULL;
        hook();
    }
    os_abort();
}
