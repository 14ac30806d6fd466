/*
 * core/fmt.h - messages without malloc or stdio.
 *
 * The allocator never calls printf: it may run before libc is ready, or
 * inside a broken heap.  sd_fmt() understands %s %c %d %i %u %x %p %%, with
 * the l, z and ll length modifiers, and a field width for numbers.
 */
#ifndef SD_CORE_FMT_H
#define SD_CORE_FMT_H

#include <stdarg.h>

/* Internal globals: hidden, so the library reaches them without the GOT. */
#ifndef SD_HIDDEN
#define SD_HIDDEN __attribute__((visibility("hidden")))
#endif
/* What the shared library exports: sd_* (hooks/) and the libc names
 * (preload/).  Everything else is hidden (-fvisibility=hidden). */
#define SD_EXPORT __attribute__((visibility("default")))
#include <stddef.h>

size_t sd_vfmt(char *buf, size_t size, const char *fmt, va_list ap);
size_t sd_fmt(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Format and write to fd; returns 0 or -errno. */
int sd_dprintf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One line "slabdefrag: ..." on stderr. */
void sd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2), cold));
/* One line "slabdefrag: ..." on stderr, then abort(). */
void sd_fatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn, cold));

/* Hook run by sd_fatal() before aborting (the debug layer prints
 * backtraces through it); NULL for none. */
extern SD_HIDDEN void (*sd_fatal_hook)(void);

#endif
