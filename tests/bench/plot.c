/*
 * plot.c - gnuplot scripts and data files, and running gnuplot (see plot.h).
 */
#include "plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define PLOT_PATH_MAX 4096

static int fail(char *err, size_t errcap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t errcap, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL && errcap > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The gnuplot program: $STARLING_GNUPLOT or "gnuplot", resolved against PATH into @out. */
static int find_gnuplot(char *out, size_t cap)
{
    const char *name = getenv("STARLING_GNUPLOT"), *path;
    if (name == NULL || name[0] == '\0')
        name = "gnuplot";
    if (strchr(name, '/') != NULL) {
        snprintf(out, cap, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    path = getenv("PATH");
    if (path == NULL || path[0] == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path != '\0') {
        size_t len = strcspn(path, ":");
        if (len > 0 && (size_t)snprintf(out, cap, "%.*s/%s", (int)len, path, name) < cap &&
            access(out, X_OK) == 0)
            return 0;
        path += len;
        if (*path == ':')
            path++;
    }
    return -1;
}

int sl_plot_available(char *err, size_t errcap)
{
    char prog[PLOT_PATH_MAX];
    if (find_gnuplot(prog, sizeof prog) == 0)
        return 0;
    return fail(err, errcap,
                "gnuplot is not installed (Debian: apt-get install gnuplot-nox, or "
                "deploy/install-deps.sh); %s",
                getenv("STARLING_GNUPLOT") != NULL ? "STARLING_GNUPLOT names no program"
                                                   : "no gnuplot in PATH");
}

/* A gnuplot double-quoted literal (the terminal is noenhanced: no markup): quotes,
 * backslashes and control characters become harmless. */
static void quote_text(FILE *f, const char *text)
{
    fputc('"', f);
    for (const char *p = text ? text : ""; *p != '\0'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\')
            fputc('\'', f);
        else if (ch < 0x20)
            fputc(' ', f);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static int point_ok(const sl_plot_chart *c, double x, double y)
{
    if (!isfinite(x) || !isfinite(y))
        return 0;
    if ((c->logx && x <= 0) || (c->logy && y <= 0))
        return 0;
    return 1;
}

static size_t valid_points(const sl_plot_chart *c, const sl_plot_series *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += (size_t)point_ok(c, s->x[i], s->y[i]);
    return n;
}

static int write_data(const sl_plot_chart *c, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    for (size_t k = 0; k < c->nseries; k++) {
        const sl_plot_series *s = &c->series[k];
        if (valid_points(c, s) == 0)
            continue; /* no block: the script skips it too */
        fprintf(f, "# %s\n", s->title ? s->title : "");
        for (size_t i = 0; i < s->n; i++)
            if (point_ok(c, s->x[i], s->y[i]))
                fprintf(f, "%.10g %.10g\n", s->x[i], s->y[i]);
        fputs("\n\n", f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

static const char *style_of(sl_plot_style st)
{
    switch (st) {
    case SL_PLOT_LINESPOINTS:
        return "with linespoints lw 2 pt 7 ps 0.7";
    case SL_PLOT_DASHED:
        return "with lines lw 2 dt 2";
    case SL_PLOT_BOXES:
        return "with boxes";
    case SL_PLOT_LINES:
    default:
        return "with lines lw 2";
    }
}

static int write_script(const sl_plot_chart *c, const char *path, const char *dat)
{
    FILE *f = fopen(path, "w");
    size_t block = 0, drawn = 0;
    if (f == NULL)
        return -1;
    fprintf(f, "# written by starling (tests/bench/plot.c); run: gnuplot %s\n", path);
    fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'sans,11'\n",
            c->width > 0 ? c->width : 960, c->height > 0 ? c->height : 600);
    fprintf(f, "set output '%s'\n", c->png);
    fputs("set title ", f);
    quote_text(f, c->title);
    fputs("\nset xlabel ", f);
    quote_text(f, c->xlabel);
    fputs("\nset ylabel ", f);
    quote_text(f, c->ylabel);
    fprintf(f, "\nset grid\nset key %s box opaque\n", c->key ? c->key : "top left");
    fputs("set style fill solid 0.85 border -1\nset boxwidth 0.8\n", f);
    if (c->logx)
        fputs("set logscale x\nset format x '%.0s %cB'\n", f);
    if (c->logy)
        fputs("set logscale y\nset format y '%.0s %cB'\n", f);
    if (c->integer_x) {
        double hi = 0;
        for (size_t k = 0; k < c->nseries; k++)
            for (size_t i = 0; i < c->series[k].n; i++)
                if (point_ok(c, c->series[k].x[i], c->series[k].y[i]) && c->series[k].x[i] > hi)
                    hi = c->series[k].x[i];
        fputs(hi <= 25 ? "set xtics 1\n" : "set format x '%.0f'\n", f);
    }
    if (c->ymin != 0 || c->ymax != 0)
        fprintf(f, "set yrange [%g:%g]\n", c->ymin, c->ymax);
    for (size_t k = 0; k < c->nseries; k++) {
        const sl_plot_series *s = &c->series[k];
        if (valid_points(c, s) == 0)
            continue;
        fputs(drawn == 0 ? "plot " : ", \\\n     ", f);
        fprintf(f, "'%s' index %zu using 1:2 %s title ", dat, block, style_of(s->style));
        quote_text(f, s->title);
        block++;
        drawn++;
    }
    if (drawn == 0) /* an empty chart that says so */
        fputs("set label 'no data' at graph 0.5,0.5 center\nset xrange [0:1]\n"
              "set yrange [0:1]\nunset logscale\nplot 2 notitle",
              f);
    fputc('\n', f);
    return fclose(f) == 0 ? 0 : -1;
}

/* The first line of @path (gnuplot's complaint) into @out. */
static void first_line(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(out, (int)cap, f) != NULL) {
        out[strcspn(out, "\n")] = '\0';
        if (out[strspn(out, " \t^")] != '\0')
            break; /* gnuplot prints the offending line, then a caret line, then the error */
    }
    fclose(f);
}

int sl_plot_render(const sl_plot_chart *c, char *err, size_t errcap)
{
    char prog[PLOT_PATH_MAX], stem[PLOT_PATH_MAX], gp[PLOT_PATH_MAX + 8], dat[PLOT_PATH_MAX + 8];
    char log[PLOT_PATH_MAX + 16], why[512];
    char *argv[3];
    posix_spawn_file_actions_t fa;
    struct stat st;
    size_t len;
    pid_t pid;
    int status = 0, rc;

    if (c == NULL || c->png == NULL || (c->nseries > 0 && c->series == NULL))
        return fail(err, errcap, "plot: no chart");
    len = strlen(c->png);
    if (len < 5 || len >= sizeof stem || strcmp(c->png + len - 4, ".png") != 0)
        return fail(err, errcap, "plot: %s: the file name must end in .png", c->png);
    if (strchr(c->png, '\'') != NULL || strchr(c->png, '\n') != NULL)
        return fail(err, errcap, "plot: %s: quotes and line breaks are not supported in the path",
                    c->png);
    if (sl_plot_available(err, errcap) != 0 || find_gnuplot(prog, sizeof prog) != 0)
        return -1;
    snprintf(stem, sizeof stem, "%.*s", (int)(len - 4), c->png);
    snprintf(gp, sizeof gp, "%s.gp", stem);
    snprintf(dat, sizeof dat, "%s.dat", stem);
    snprintf(log, sizeof log, "%s.gnuplot.log", stem);
    if (write_data(c, dat) != 0 || write_script(c, gp, dat) != 0)
        return fail(err, errcap, "plot: cannot write %s: %s", gp, strerror(errno));
    remove(c->png); /* a stale PNG must not pass for a new one */

    if (posix_spawn_file_actions_init(&fa) != 0)
        return fail(err, errcap, "plot: out of memory");
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    argv[0] = prog;
    argv[1] = gp;
    argv[2] = NULL;
    rc = posix_spawn(&pid, prog, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return fail(err, errcap, "plot: cannot run %s: %s", prog, strerror(rc));
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return fail(err, errcap, "plot: waiting for gnuplot: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        first_line(log, why, sizeof why);
        return fail(err, errcap, "plot: gnuplot failed on %s: %s", gp,
                    why[0] ? why : "(no message)");
    }
    if (stat(c->png, &st) != 0 || st.st_size == 0)
        return fail(err, errcap, "plot: gnuplot wrote no %s (see %s)", c->png, log);
    remove(log);
    return 0;
}
