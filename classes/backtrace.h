/*
 * classes/backtrace.h - the calling thread's backtrace, for reports
 * (classes/backtrace.c).  Nothing here allocates through the allocator;
 * before the library constructor has run there is no backtrace.
 */
#ifndef SD_CLASSES_BACKTRACE_H
#define SD_CLASSES_BACKTRACE_H

/* Print a backtrace of the calling thread to fd (symbolised where symbols
 * exist), skipping the allocator's own leading frames. */
void backtrace_print(int fd, const char *indent);
/* Record up to max return addresses of the calling thread, innermost
 * first, the allocator's own skipped; returns how many (0 before start-up
 * or inside an unwind). */
int backtrace_record(void **frames, int max);
/* Find the allocator's own code: the executable segment of the object
 * that holds it (this library, or a test program linking the static
 * core).  Idempotent; from the constructors (dl_iterate_phdr takes the
 * loader's lock: not from inside malloc). */
void backtrace_find_self(void);
/* Is ip in that code (0 until it is found)? */
int backtrace_ours(const void *ip);
/* Print frame number i at ip as backtrace_print does. */
void backtrace_print_frame(int fd, const char *indent, int i, void *ip);

#endif
