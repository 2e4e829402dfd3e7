/* clock.c - the system clock, a manual clock for tests, UTC formatting. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "starling/common.h"

static int64_t system_monotonic_ns(void *ctx)
{
    struct timespec ts;
    (void)ctx;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t system_wall_ns(void *ctx)
{
    struct timespec ts;
    (void)ctx;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const sl_clock system_clock = {system_monotonic_ns, system_wall_ns, NULL};

const sl_clock *sl_clock_system(void)
{
    return &system_clock;
}

int64_t sl_clock_monotonic_ns(const sl_clock *clock)
{
    if (clock == NULL)
        clock = &system_clock;
    return clock->monotonic_ns(clock->ctx);
}

int64_t sl_clock_wall_ns(const sl_clock *clock)
{
    if (clock == NULL)
        clock = &system_clock;
    return clock->wall_ns(clock->ctx);
}

static int64_t manual_monotonic_ns(void *ctx)
{
    return ((const sl_clock_manual *)ctx)->monotonic_ns;
}

static int64_t manual_wall_ns(void *ctx)
{
    return ((const sl_clock_manual *)ctx)->wall_ns;
}

void sl_clock_manual_init(sl_clock_manual *m, int64_t monotonic_ns, int64_t wall_ns)
{
    m->clock.monotonic_ns = manual_monotonic_ns;
    m->clock.wall_ns = manual_wall_ns;
    m->clock.ctx = m;
    m->monotonic_ns = monotonic_ns;
    m->wall_ns = wall_ns;
}

int sl_clock_manual_advance(sl_clock_manual *m, int64_t delta_ns)
{
    if (delta_ns < 0)
        return SL_EINVAL;
    m->monotonic_ns += delta_ns;
    m->wall_ns += delta_ns;
    return SL_OK;
}

int sl_clock_format_utc(int64_t wall_ns, char *out, size_t cap)
{
    char buf[64];
    struct tm tm;
    int64_t sec = wall_ns / 1000000000;
    int64_t ms = (wall_ns % 1000000000) / 1000000;
    time_t t;
    int n;

    if (ms < 0) { /* floor division for times before the epoch */
        sec -= 1;
        ms += 1000;
    }
    t = (time_t)sec;
    if (gmtime_r(&t, &tm) == NULL)
        return SL_EINVAL;
    n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
    if (n < 0 || (size_t)n + 1 > cap)
        return SL_EINVAL;
    for (int i = 0; i <= n; i++)
        out[i] = buf[i];
    return SL_OK;
}
