/*
 * plot.h - PNG charts drawn by gnuplot (Debian `gnuplot-nox`), shared by
 * `starling bench fl --plot` and `starling report`.
 *
 * A chart is a few series of (x, y) points. sl_plot_render() writes the
 * points to <stem>.dat (one gnuplot data block per series), the commands to
 * <stem>.gp, where <stem> is the PNG's path without ".png", and runs
 * gnuplot on the script. Both files stay beside the PNG so that a reader can
 * restyle a chart by hand (`gnuplot <stem>.gp`). Nothing here is thread-safe
 * beyond what the C library gives; calls block until gnuplot exits.
 *
 * Which gnuplot: $STARLING_GNUPLOT when set (a path or a name looked up in
 * PATH), else "gnuplot" from PATH.
 */
#ifndef STARLING_BENCH_PLOT_H
#define STARLING_BENCH_PLOT_H

#include <stddef.h>

/** How a series is drawn. */
typedef enum sl_plot_style {
    SL_PLOT_LINES = 0,       /* a line through the points */
    SL_PLOT_LINESPOINTS = 1, /* a line with a mark at every point */
    SL_PLOT_DASHED = 2,      /* a dashed line (reference values: dense equivalents) */
    SL_PLOT_BOXES = 3        /* filled bars centred on x (later series drawn on top) */
} sl_plot_style;

/** One series. Points whose x or y is not finite are left out. */
typedef struct sl_plot_series {
    const char *title; /* legend text (double quotes and backslashes are replaced) */
    const double *x, *y;
    size_t n;
    sl_plot_style style;
} sl_plot_series;

/** One chart. Zero-initialise and set what you need. */
typedef struct sl_plot_chart {
    const char *png; /* output path, ending in ".png" */
    const char *title, *xlabel, *ylabel;
    int logx, logy;    /* logarithmic axes of bytes ("10 kB"; points <= 0 are left out) */
    double ymin, ymax; /* y range; both 0: automatic */
    int integer_x;     /* x counts something (rounds): whole-number tics */
    int width, height; /* pixels; 0: 960 x 600 */
    const char *key;   /* gnuplot legend position ("bottom right", ...); NULL: "top left" */
    const sl_plot_series *series;
    size_t nseries;
} sl_plot_chart;

/**
 * sl_plot_available - whether gnuplot can be run. Returns 0, or -1 with a
 * one-line reason in @err that names the Debian package to install.
 */
int sl_plot_available(char *err, size_t errcap);

/**
 * sl_plot_render - write @c->png (and its .gp and .dat beside it) and run
 * gnuplot. Returns 0, or -1 with a one-line reason in @err (gnuplot missing,
 * a file that cannot be written, gnuplot's own first error line, or a PNG
 * that did not appear). Blocks until gnuplot exits.
 */
int sl_plot_render(const sl_plot_chart *c, char *err, size_t errcap);

#endif /* STARLING_BENCH_PLOT_H */
