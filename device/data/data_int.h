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

#endif /* STARLING_DATA_INT_H */
