/* progress.c - a progress bar on a terminal, plain lines otherwise; see progress.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"

void sl_progress_bytes(uint64_t n, char *out, size_t cap)
{
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%llu B", (unsigned long long)n);
    else
        snprintf(out, cap, "%.*f %s", v < 10 ? 2 : v < 100 ? 1 : 0, v, units[u]);
}

static void amount(const sl_progress *p, uint64_t n, char *out, size_t cap)
{
    if (p->bytes)
        sl_progress_bytes(n, out, cap);
    else
        snprintf(out, cap, "%llu", (unsigned long long)n);
}

void sl_progress_start(sl_progress *p, FILE *out, const char *label, uint64_t total, int bytes,
                       int tty)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->bytes = bytes;
    p->total = total;
    p->shown = -1;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    if (tty < 0) {
        const char *term = getenv("TERM");
        tty = isatty(fileno(out)) && !(term != NULL && strcmp(term, "dumb") == 0);
    }
    p->tty = tty;
    if (!p->tty)
        p->shown = 0;
}

static void draw(sl_progress *p, uint64_t done, int percent, const char *note)
{
    char bar[SL_PROGRESS_WIDTH + 1], have[32], whole[32], line[256];
    size_t fill = 0;
    int n;
    if (p->total > 0)
        fill = (size_t)(done >= p->total ? SL_PROGRESS_WIDTH : done * SL_PROGRESS_WIDTH / p->total);
    for (size_t i = 0; i < SL_PROGRESS_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[SL_PROGRESS_WIDTH] = '\0';
    amount(p, done, have, sizeof have);
    amount(p, p->total, whole, sizeof whole);
    if (p->total > 0)
        n = snprintf(line, sizeof line, "%s [%s] %3d%% %s / %s%s%s", p->label, bar, percent, have,
                     whole, note ? " " : "", note ? note : "");
    else
        n = snprintf(line, sizeof line, "%s %s%s%s", p->label, have, note ? " " : "",
                     note ? note : "");
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = (int)sizeof line - 1;
    /* pad over a longer previous line */
    fprintf(p->out, "\r%s%*s", line, p->drawn > (size_t)n ? (int)(p->drawn - (size_t)n) : 0, "");
    fflush(p->out);
    p->drawn = (size_t)n;
}

void sl_progress_update(sl_progress *p, uint64_t done, const char *note)
{
    int percent;
    if (p->out == NULL)
        return;
    percent = p->total > 0 ? (int)(done >= p->total ? 100 : done * 100 / p->total) : -1;
    if (p->tty) {
        /* redrawn when the percent moves (unknown totals: every call, the amount moves) */
        if (percent >= 0 && percent == p->shown)
            return;
        draw(p, done, percent, note);
        p->shown = percent;
        return;
    }
    /* plain: a line at each quarter crossed (25, 50, 75); the end is the caller's */
    while (percent >= 0 && p->shown < 3 && percent >= 25 * (p->shown + 1) && percent < 100) {
        char have[32], whole[32];
        p->shown++;
        amount(p, done, have, sizeof have);
        amount(p, p->total, whole, sizeof whole);
        fprintf(p->out, "%s: %d%% (%s of %s)\n", p->label, 25 * p->shown, have, whole);
        fflush(p->out);
    }
}

void sl_progress_end(sl_progress *p)
{
    if (p->out == NULL)
        return;
    if (p->tty && p->drawn > 0) {
        fprintf(p->out, "\r%*s\r", (int)p->drawn, "");
        fflush(p->out);
    }
    p->drawn = 0;
}
