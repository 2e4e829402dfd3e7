/*
 * progress.h - progress of long work in the `starling` program (training
 * epochs, downloads, backups): a bar redrawn in place on a terminal, plain
 * lines otherwise, so a log or a pipe gets a readable record instead of
 * carriage returns.
 *
 * On a terminal (isatty of the stream, TERM not "dumb"):
 *   "<label> [##########..........]  50% 1.2 MB / 2.4 MB <note>"  (redrawn with \r
 *   when the shown percent changes; sl_progress_end erases it)
 * Otherwise, one line per quarter crossed and none for the rest:
 *   "<label>: 25% (1.2 MB of 4.8 MB)"      (counts without units unless bytes)
 * With an unknown total (0) neither form shows a percent: the terminal shows
 * the amount so far, plain output nothing until the caller's own summary.
 *
 * Used by device/train_cmd.c and api/cli/cmd_*.c (one struct per bar). Not
 * thread-safe; writes only to the stream given to sl_progress_start.
 */
#ifndef STARLING_CLI_PROGRESS_H
#define STARLING_CLI_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#define SL_PROGRESS_WIDTH 30 /* characters of the bar */

/** One progress display. Fill with sl_progress_start(); no resources to free. */
typedef struct sl_progress {
    FILE *out;
    int tty;        /* 1: the redrawn bar; 0: plain lines */
    int bytes;      /* amounts are byte counts (shown as kB, MB, ...) */
    char label[64]; /* what is in progress: "epoch 2/10", "downloading", ... */
    uint64_t total; /* 0: unknown */
    int shown;      /* tty: the percent on screen (-1 none); plain: quarters printed */
    size_t drawn;   /* tty: characters of the line on screen */
} sl_progress;

/**
 * sl_progress_start - begin showing progress of @label towards @total
 * (0: unknown) on @out; @bytes: 1 when the amounts are bytes. @tty: 1 or 0
 * to force a form, -1 to pick it from @out (a terminal or not). Prints
 * nothing yet.
 */
void sl_progress_start(sl_progress *p, FILE *out, const char *label, uint64_t total, int bytes,
                       int tty);

/**
 * sl_progress_update - @done of the total is done; @note (NULL for none) is
 * shown after the bar on a terminal ("loss 0.4123"). Cheap when nothing
 * changes on screen: call it as often as convenient.
 */
void sl_progress_update(sl_progress *p, uint64_t done, const char *note);

/**
 * sl_progress_end - the work ended (or failed): a terminal's bar is erased
 * so the caller's summary line takes its place; plain output gets nothing.
 */
void sl_progress_end(sl_progress *p);

/** sl_progress_bytes - "512 B", "1.2 kB", "3.4 MB", ... into @out. */
void sl_progress_bytes(uint64_t n, char *out, size_t cap);

#endif /* STARLING_CLI_PROGRESS_H */
