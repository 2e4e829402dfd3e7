/* log.c - leveled logfmt records handed to a sink the program chooses. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "starling/common.h"

#define SL_LOG_MSG_MAX 1024

/* The sink and its userdata are set once at start-up, before threads run. */
static sl_log_sink log_sink;
static void *log_userdata;
static const sl_clock *log_clock;
static _Atomic int log_level = SL_LOG_INFO;

void sl_log_set_sink(sl_log_sink sink, void *userdata)
{
    log_sink = sink;
    log_userdata = userdata;
}

void sl_log_set_level(sl_log_level level)
{
    atomic_store(&log_level, (int)level);
}

sl_log_level sl_log_get_level(void)
{
    return (sl_log_level)atomic_load(&log_level);
}

void sl_log_set_clock(const sl_clock *clock)
{
    log_clock = clock;
}

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

const char *sl_log_level_name(sl_log_level level)
{
    if ((unsigned)level > SL_LOG_TRACE)
        return "unknown";
    return level_names[level];
}

int sl_log_parse_level(const char *text, sl_log_level *out)
{
    if (text == NULL)
        return SL_ECONFIG_VALUE;
    for (int i = 0; i <= SL_LOG_TRACE; i++) {
        if (strcmp(text, level_names[i]) == 0) {
            *out = (sl_log_level)i;
            return SL_OK;
        }
    }
    if (strcmp(text, "warning") == 0) {
        *out = SL_LOG_WARN;
        return SL_OK;
    }
    return SL_ECONFIG_VALUE;
}

/* Append @src to @dst at *@pos, escaping it as the body of a quoted logfmt value. */
static void append_escaped(char *dst, size_t cap, size_t *pos, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    size_t p = *pos;

    for (const unsigned char *s = (const unsigned char *)src; *s != '\0'; s++) {
        char esc[6];
        size_t n;

        if (*s == '"' || *s == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*s;
            n = 2;
        } else if (*s == '\n') {
            esc[0] = '\\';
            esc[1] = 'n';
            n = 2;
        } else if (*s < 0x20 || *s == 0x7f) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[*s >> 4];
            esc[3] = hex[*s & 15];
            n = 4;
        } else {
            esc[0] = (char)*s;
            n = 1;
        }
        if (p + n + 1 >= cap)
            break;
        memcpy(dst + p, esc, n);
        p += n;
    }
    dst[p] = '\0';
    *pos = p;
}

void sl_logv(sl_log_level level, const char *component, const char *fmt, va_list ap)
{
    char msg[SL_LOG_MSG_MAX + 1];
    char line[64 + 64 + 4 * SL_LOG_MSG_MAX];
    char ts[32];
    sl_log_sink sink = log_sink;
    size_t pos;
    int n;

    if (sink == NULL || (int)level > atomic_load(&log_level))
        return;
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (sl_clock_format_utc(sl_clock_wall_ns(log_clock), ts, sizeof ts) != SL_OK)
        memcpy(ts, "invalid", 8);
    n = snprintf(line, sizeof line, "ts=%s level=%s component=", ts, sl_log_level_name(level));
    if (n < 0)
        return;
    pos = (size_t)n;
    /* component names are identifiers; anything else is still kept one token */
    for (const char *c = component ? component : "-"; *c != '\0' && pos < 100; c++)
        line[pos++] = (*c == ' ' || *c == '"' || *c == '=') ? '_' : *c;
    memcpy(line + pos, " msg=\"", 6);
    pos += 6;
    append_escaped(line, sizeof line - 1, &pos, msg);
    line[pos++] = '"';
    line[pos] = '\0';
    sink(level, line, log_userdata);
}

void sl_log(sl_log_level level, const char *component, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sl_logv(level, component, fmt, ap);
    va_end(ap);
}

void sl_log_sink_stderr(sl_log_level level, const char *line, void *userdata)
{
    (void)level;
    (void)userdata;
    fprintf(stderr, "%s\n", line);
}
