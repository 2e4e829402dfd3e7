/*
 * data_int.h - internals shared by the files of device/data (not installed).
 */
#ifndef STARLING_DATA_INT_H
#define STARLING_DATA_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/*
 * sl__data_errf - write a one-line reason into @err (cut to @cap, always
 * NUL-terminated when @cap > 0). @err may be NULL. Returns @status so error
 * paths can read `return sl__data_errf(err, cap, SL_EINVAL, "...")`.
 */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int
sl__data_errf(char *err, size_t cap, int status, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL || cap == 0)
        return status;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return status;
}

/*
 * Fault injection for tests: a table of hooks the sources call at points
 * where the outside world can change under them. Every member may be NULL.
 *
 * after_decode - a folder source (images:, wav:) decoded the sample file at
 *     @path and is about to check that the file did not change while it was
 *     read; a test changes the file here.
 */
typedef struct sl__source_hooks {
    void (*after_decode)(const char *path, void *arg);
    void *arg;
} sl__source_hooks;

/*
 * sl__source_set_hooks - use @hooks (borrowed; NULL: none) from now on, in
 * every source of the process. For tests only: set it before the sources it
 * affects are read, from the thread that reads them.
 */
void sl__source_set_hooks(const sl__source_hooks *hooks);

#endif /* STARLING_DATA_INT_H */
