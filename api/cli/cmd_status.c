/*
 * cmd_status.c - `starling status` (each task, its current round with a
 * quorum bar and the time to its deadline, and a table of recent rounds;
 * --watch redraws it) and `starling rounds` (a page of a task's rounds as a
 * table, or the API's JSON with --json).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_int.h"
#include "starling/common.h"

#define BAR_WIDTH 30

/* ANSI styles, empty when colour is off */
typedef struct style {
    const char *bold, *dim, *green, *yellow, *red, *cyan, *off;
} style;

static style make_style(int colour)
{
    style s = {"", "", "", "", "", "", ""};
    if (colour) {
        s.bold = "\033[1m";
        s.dim = "\033[2m";
        s.green = "\033[32m";
        s.yellow = "\033[33m";
        s.red = "\033[31m";
        s.cyan = "\033[36m";
        s.off = "\033[0m";
    }
    return s;
}

static const char *state_colour(const style *s, const char *state)
{
    if (strcmp(state, "closed") == 0)
        return s->green;
    if (strcmp(state, "abandoned") == 0)
        return s->red;
    return s->cyan;
}

#define NUM(o, k) ((long long)sl__cli_num((o), (k), 0))

/* ---- starling status --------------------------------------------------------------- */

static int status_usage(FILE *out)
{
    fprintf(out,
            "usage: starling status [options]\n"
            "Each task of the coordinator: its model version, the round in progress (counters,\n"
            "a bar of reports against the target with the quorum, time to the deadline) and\n"
            "a table of its recent rounds. Colour on a terminal (NO_COLOR=1: none).\n"
            "  --task N         only task N\n"
            "  --limit N        recent rounds per task (default 10, at most 100)\n"
            "  --watch          redraw until interrupted (Ctrl-C)\n"
            "  --interval S     seconds between redraws with --watch (default 2)\n"
            "  --count N        with --watch: stop after N redraws\n" SL__CLI_CONN_HELP
            "  --help           this text\n"
            "exit status: 0 ok, 1 error (coordinator unreachable, HTTP error), 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static void print_current(FILE *out, const style *s, const cJSON *task, const cJSON *round,
                          int64_t now_ms)
{
    const char *state = sl__cli_str(round, "state");
    long long reported = NUM(round, "reported"), target = NUM(round, "target");
    long long quorum = NUM(round, "quorum");
    int fill = target > 0 ? (int)(BAR_WIDTH * (reported > target ? target : reported) / target) : 0;
    int mark = target > 0 ? (int)(BAR_WIDTH * (quorum > target ? target : quorum) / target) : 0;
    char bar[BAR_WIDTH + 2], when[48];
    int64_t deadline = 0;
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    if (mark > 0 && mark <= BAR_WIDTH && mark > fill)
        bar[mark - 1] = '|'; /* the quorum, while not reached */
    bar[BAR_WIDTH] = '\0';
    fprintf(out, "  round %lld  %s%-10s%s selected %lld  checked in %lld  reported %lld/%lld  ",
            NUM(round, "round_no"), state_colour(s, state), state, s->off, NUM(round, "selected"),
            NUM(task, "checked_in"), reported, target);
    fprintf(out, "quorum %lld  dropped %lld  late %lld  rejected %lld\n", quorum,
            NUM(round, "dropped"), NUM(round, "late"), NUM(round, "rejected"));
    if (strcmp(state, "selecting") == 0)
        deadline = (int64_t)sl__cli_num(round, "select_deadline_ms", 0);
    else if (strcmp(state, "training") == 0)
        deadline = (int64_t)sl__cli_num(round, "report_deadline_ms", 0);
    if (deadline > 0) {
        sl__cli_duration(deadline > now_ms ? deadline - now_ms : 0, when, sizeof when);
        fprintf(out, "  [%s%s%s] %lld/%lld  %s in %s\n", reported >= quorum ? s->green : s->yellow,
                bar, s->off, reported, target,
                state[0] == 's' ? "selection closes" : "report deadline", when);
    } else {
        sl__cli_time((int64_t)sl__cli_num(round, "closed_at_ms", 0), when, sizeof when);
        fprintf(out, "  [%s%s%s] %lld/%lld  ended %s\n", reported >= quorum ? s->green : s->red,
                bar, s->off, reported, target, when);
    }
}

/* The table of recent rounds, with each round's statistics (test accuracy). */
static int print_recent(sl__cli *c, FILE *out, const style *s, int64_t task, int64_t limit,
                        int64_t now_ms)
{
    char path[96];
    cJSON *list = NULL;
    const cJSON *r;
    snprintf(path, sizeof path, "/v1/rounds?task=%lld&limit=%lld", (long long)task,
             (long long)limit);
    if (sl__cli_call(c, "GET", path, NULL, &list, NULL) != 0)
        return SL__CLI_ERROR;
    fprintf(out, "  %s%5s  %-10s %-9s %4s %8s %5s %5s %4s %10s %10s %9s %9s %10s%s\n", s->bold,
            "ROUND", "STATE", "MODEL", "SEL", "REP/TGT", "DROP", "LATE", "REJ", "UP", "DOWN",
            "VS DENSE", "TEST ACC", "DURATION", s->off);
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(list, "rounds"))
    {
        cJSON *st = NULL;
        const cJSON *row = r;
        const char *state;
        char model[32], rep[24], up[24], down[24], ratio[24], acc[24], dur[32];
        int64_t opened, closed;
        snprintf(path, sizeof path, "/v1/rounds/%lld", NUM(r, "round_id"));
        if (sl__cli_call(c, "GET", path, NULL, &st, NULL) == 0 && st != NULL)
            row = st; /* live counters for the open round, plus the statistics */
        state = sl__cli_str(row, "state");
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "model_version")))
            snprintf(model, sizeof model, "v%lld>v%lld", NUM(row, "base_version"),
                     NUM(row, "model_version"));
        else
            snprintf(model, sizeof model, "v%lld", NUM(row, "base_version"));
        snprintf(rep, sizeof rep, "%lld/%lld", NUM(row, "reported"), NUM(row, "target"));
        sl__cli_bytes(sl__cli_num(row, "bytes_up", -1), up, sizeof up);
        sl__cli_bytes(sl__cli_num(row, "bytes_down", -1), down, sizeof down);
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(row, "compression_vs_dense")))
            snprintf(ratio, sizeof ratio, "%.1fx", sl__cli_num(row, "compression_vs_dense", 0));
        else
            snprintf(ratio, sizeof ratio, "-");
        sl__cli_percent(cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(row, "model_metrics"), "accuracy"),
                        acc, sizeof acc);
        opened = (int64_t)sl__cli_num(row, "opened_at_ms", 0);
        closed = (int64_t)sl__cli_num(row, "closed_at_ms", 0);
        sl__cli_duration((closed > 0 ? closed : now_ms) - opened, dur, sizeof dur);
        fprintf(out, "  %5lld  %s%-10s%s %-9s %4lld %8s %5lld %5lld %4lld %10s %10s %9s %9s %10s\n",
                NUM(row, "round_no"), state_colour(s, state), state, s->off, model,
                NUM(row, "selected"), rep, NUM(row, "dropped"), NUM(row, "late"),
                NUM(row, "rejected"), up, down, ratio, acc, dur);
        cJSON_Delete(st);
    }
    cJSON_Delete(list);
    return 0;
}

static int print_status(sl__cli *c, FILE *out, int64_t only, int64_t limit, int colour)
{
    style s = make_style(colour);
    cJSON *doc = NULL;
    const cJSON *t;
    int64_t now_ms;
    int shown = 0, rc = 0;
    if (sl__cli_call(c, "GET", "/v1/status", NULL, &doc, NULL) != 0)
        return SL__CLI_ERROR;
    now_ms = (int64_t)sl__cli_num(cJSON_GetObjectItemCaseSensitive(doc, "server"), "time_ms", 0);
    fprintf(out, "%sStarling coordinator%s %s  %s(%d task%s)%s\n", s.bold, s.off, c->url, s.dim,
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "tasks")),
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "tasks")) == 1 ? "" : "s",
            s.off);
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(doc, "tasks"))
    {
        int64_t id = (int64_t)sl__cli_num(t, "task_id", 0);
        const cJSON *round = cJSON_GetObjectItemCaseSensitive(t, "round");
        int finished = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "finished"));
        int open = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "round_open"));
        if (only > 0 && id != only)
            continue;
        shown++;
        fprintf(out, "\n%sTask %lld \"%s\"%s  %s  model v%lld  %s%s%s", s.bold, (long long)id,
                sl__cli_str(t, "name"), s.off, sl__cli_str(t, "aggregator"),
                NUM(t, "model_version"),
                finished ? s.green
                : open   ? s.cyan
                         : s.dim,
                finished ? "finished"
                : open   ? "running"
                         : "waiting",
                s.off);
        if (NUM(t, "retain_last") > 0) /* retention: the bytes of older versions are retired */
            fprintf(out, "  %skeeps the last %lld version%s%s", s.dim, NUM(t, "retain_last"),
                    NUM(t, "retain_last") == 1 ? "" : "s", s.off);
        fputc('\n', out);
        if (cJSON_IsObject(round))
            print_current(out, &s, t, round, now_ms);
        else
            fprintf(out, "  no round yet\n");
        if (limit > 0 && print_recent(c, out, &s, id, limit, now_ms) != 0)
            rc = SL__CLI_ERROR;
    }
    if (only > 0 && shown == 0) {
        cJSON_Delete(doc);
        return sl__cli_error(c, "no task %lld", (long long)only);
    }
    if (shown == 0)
        fprintf(out, "\nNo task yet: starling task create task.json\n");
    cJSON_Delete(doc);
    return rc;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int watch(sl__cli *c, int64_t only, int64_t limit, int64_t interval_s, int64_t count)
{
    int colour = sl__cli_colour(stdout), tty = colour || isatty(fileno(stdout)), rc = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (int64_t n = 0; !interrupted && (count <= 0 || n < count); n++) {
        char *frame = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&frame, &len);
        if (mem == NULL)
            return sl__cli_error(c, "out of memory");
        /* drawn off screen, then shown at once: no flicker, no half frames */
        rc = print_status(c, mem, only, limit, colour);
        fclose(mem);
        if (tty)
            fputs("\033[H\033[2J", stdout);
        else if (n > 0)
            fputc('\n', stdout);
        fwrite(frame, 1, len, stdout);
        free(frame);
        if (tty) {
            char now[40];
            sl__cli_time((int64_t)time(NULL) * 1000, now, sizeof now);
            printf("\n%s; every %llds, Ctrl-C to stop\n", now, (long long)interval_s);
        }
        fflush(stdout);
        if (count > 0 && n + 1 >= count)
            break;
        for (int64_t waited = 0; waited < interval_s * 10 && !interrupted; waited++) {
            struct timespec ts = {0, 100000000L};
            nanosleep(&ts, NULL);
        }
    }
    return interrupted ? SL__CLI_OK : rc;
}

int sl__cli_status(int argc, char **argv)
{
    sl__cli c = {"status", NULL, NULL, NULL, 0, NULL};
    int64_t only = 0, limit = 10, interval = 2, count = 0;
    int watching = 0, rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return status_usage(stdout);
        if (strcmp(argv[i], "--watch") == 0) {
            watching = 1;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--task", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--task", v, 1, INT64_MAX, &only) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--limit", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--limit", v, 0, 100, &limit) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--interval", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--interval", v, 1, 3600, &interval) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--count", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--count", v, 1, INT64_MAX, &count) != 0)
                return SL__CLI_USAGE;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (count > 0 && !watching)
        return sl__cli_usage_error(&c, "--count goes with --watch");
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    if (watching)
        rc = watch(&c, only, limit, interval, count);
    else
        rc = print_status(&c, stdout, only, limit, sl__cli_colour(stdout));
    sl__cli_close(&c);
    return rc;
}

/* ---- starling rounds ---------------------------------------------------------------- */

static int rounds_usage(FILE *out)
{
    fprintf(out, "usage: starling rounds [options]\n"
                 "A page of a task's rounds, newest first (GET /v1/rounds).\n"
                 "  --task N         the task (default: the only one)\n"
                 "  --limit N        rounds (default 20, at most 1000)\n"
                 "  --offset N       skip the newest N\n"
                 "  --json           the API's JSON (RoundList of api/openapi.yaml) as "
                 "is\n" SL__CLI_CONN_HELP "  --help           this text\n"
                 "exit status: 0 ok, 1 error, 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static void print_rounds(sl__cli *c, const cJSON *list, int colour)
{
    style s = make_style(colour);
    const cJSON *item;
    printf("%s%5s  %-10s %5s %4s %8s %6s %5s %5s %4s %10s %10s  %-20s %10s  %s%s\n", s.bold,
           "ROUND", "STATE", "BASE", "SEL", "REP/TGT", "QUORUM", "DROP", "LATE", "REJ", "UP",
           "DOWN", "OPENED", "DURATION", "NOTE", s.off);
    cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(list, "rounds"))
    {
        cJSON *live = NULL;
        const cJSON *r = item;
        const char *state = sl__cli_str(r, "state");
        char rep[24], up[24], down[24], opened[40], dur[32];
        if (strcmp(state, "closed") != 0 && strcmp(state, "abandoned") != 0) {
            /* the list has the stored record; the round's own answer has the live counters */
            char path[64];
            snprintf(path, sizeof path, "/v1/rounds/%lld", NUM(r, "round_id"));
            if (sl__cli_call(c, "GET", path, NULL, &live, NULL) == 0 && live != NULL)
                r = live;
            state = sl__cli_str(r, "state");
        }
        int64_t t0 = (int64_t)sl__cli_num(r, "opened_at_ms", 0);
        int64_t t1 = (int64_t)sl__cli_num(r, "closed_at_ms", 0);
        snprintf(rep, sizeof rep, "%lld/%lld", NUM(r, "reported"), NUM(r, "target"));
        sl__cli_bytes(sl__cli_num(r, "bytes_up", -1), up, sizeof up);
        sl__cli_bytes(sl__cli_num(r, "bytes_down", -1), down, sizeof down);
        sl__cli_time(t0, opened, sizeof opened);
        if (t1 > 0)
            sl__cli_duration(t1 - t0, dur, sizeof dur);
        else
            snprintf(dur, sizeof dur, "open");
        printf("%5lld  %s%-10s%s %5lld %4lld %8s %6lld %5lld %5lld %4lld %10s %10s  %-20s %10s  "
               "%s\n",
               NUM(r, "round_no"), state_colour(&s, state), state, s.off, NUM(r, "base_version"),
               NUM(r, "selected"), rep, NUM(r, "quorum"), NUM(r, "dropped"), NUM(r, "late"),
               NUM(r, "rejected"), up, down, opened, dur, sl__cli_str(r, "error"));
        cJSON_Delete(live);
    }
}

int sl__cli_rounds(int argc, char **argv)
{
    sl__cli c = {"rounds", NULL, NULL, NULL, 0, NULL};
    int64_t task = 0, limit = 20, offset = 0;
    int json = 0, rc;
    char path[128];
    sl_client_response raw;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return rounds_usage(stdout);
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--task", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--task", v, 1, INT64_MAX, &task) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--limit", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--limit", v, 1, 1000, &limit) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--offset", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--offset", v, 0, UINT32_MAX, &offset) != 0)
                return SL__CLI_USAGE;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    rc = sl__cli_pick_task(&c, task, &task);
    if (rc == 0) {
        cJSON *list = NULL;
        snprintf(path, sizeof path, "/v1/rounds?task=%lld&limit=%lld&offset=%lld", (long long)task,
                 (long long)limit, (long long)offset);
        rc = sl__cli_call(&c, "GET", path, NULL, json ? NULL : &list, json ? &raw : NULL);
        if (rc == 0 && json) {
            fwrite(raw.body, 1, raw.body_len, stdout);
            fputc('\n', stdout);
            sl_client_response_free(&raw);
        } else if (rc == 0) {
            print_rounds(&c, list, sl__cli_colour(stdout));
        }
        cJSON_Delete(list);
    }
    sl__cli_close(&c);
    return rc;
}
