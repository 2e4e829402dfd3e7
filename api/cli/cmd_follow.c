/*
 * cmd_follow.c - `starling follow`: one line per round of a task as each
 * round ends (state, reports against selection, drop-outs, the evaluator's
 * accuracy and loss of the version it made, bytes up and the compression
 * against dense fp32 updates, bytes down), then a summary against dense
 * FedAvg for the same rounds. It polls GET /v1/rounds and
 * GET /v1/rounds/{id}; a closed round's line waits (up to --metrics-wait)
 * for the evaluator to report the new version's metrics.
 *
 * Dense FedAvg equivalents: every report would be the full fp32 model
 * (params x 4 bytes, known from a round's compression_vs_dense), and every
 * selected device would download the full model.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_int.h"
#include "starling/common.h"

#define PAGE 1000

static int follow_usage(FILE *out)
{
    fprintf(out,
            "usage: starling follow [options]\n"
            "Print one line per round of a task as each round ends, then a summary against\n"
            "dense FedAvg (full fp32 models up and down) for the same rounds.\n"
            "  --task N            the task (default: the only one)\n"
            "  --rounds R          stop after R more rounds ended (default: until the task\n"
            "                      finished, or Ctrl-C)\n"
            "  --from R            start with round number R (default 1: the whole history)\n"
            "  --metrics-wait S    seconds a closed round's line waits for the evaluator's\n"
            "                      metrics of its model version (default 10; 0: none)\n"
            "  --interval MS       polling interval in milliseconds (default 500)\n"
            "  --timeout S         give up after S seconds (default 0: never)\n" SL__CLI_CONN_HELP
            "  --help              this text\n"
            "exit status: 0 the task finished or R rounds ended; 1 error or timeout; 2 usage;\n"
            "130 interrupted (Ctrl-C, SIGTERM: the summary of the rounds so far is printed)\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

typedef struct totals {
    int64_t closed, abandoned, reported, selected, dropped, late, rejected;
    double bytes_up, bytes_down, dense_up, dense_down;
    double model_bytes; /* dense fp32 model, 0 until known */
    double final_acc, final_loss, best_acc;
    int64_t final_version;
    int64_t first_ms, last_ms;
    char compression[160]; /* the task's, from /v1/status ("" until known) */
    char aggregation[384]; /* its aggregator, server rate and mean, from /v1/status */
} totals;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
    for (int64_t slept = 0; slept < ms && !interrupted; slept += 50) {
        struct timespec ts = {0, 50000000L};
        nanosleep(&ts, NULL);
    }
}

/* The ended rounds numbered >= @from, ascending by round_no (a new array; NULL on error). */
static cJSON *ended_rounds(sl__cli *c, int64_t task, int64_t from, int *open_left)
{
    cJSON *out = cJSON_CreateArray();
    *open_left = 0;
    for (int64_t offset = 0; out != NULL; offset += PAGE) {
        char path[128];
        cJSON *page = NULL, *r;
        int n = 0, older = 0;
        snprintf(path, sizeof path, "/v1/rounds?task=%lld&limit=%d&offset=%lld", (long long)task,
                 PAGE, (long long)offset);
        if (sl__cli_call(c, "GET", path, NULL, &page, NULL) != 0) {
            cJSON_Delete(out);
            return NULL;
        }
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(page, "rounds"))
        {
            const char *state = sl__cli_str(r, "state");
            n++;
            if ((int64_t)sl__cli_num(r, "round_no", 0) < from) {
                older = 1;
                continue;
            }
            if (strcmp(state, "closed") != 0 && strcmp(state, "abandoned") != 0) {
                (*open_left)++;
                continue;
            }
            /* pages are newest first: prepend to ascend */
            cJSON_InsertItemInArray(out, 0, cJSON_Duplicate(r, 1));
        }
        cJSON_Delete(page);
        if (n < PAGE || older)
            break;
    }
    return out;
}

static void print_line(const cJSON *st, totals *t)
{
    char up[16], down[16], acc[16], loss[16], ratio[24];
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(st, "model_metrics");
    const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(st, "compression_vs_dense");
    const char *state = sl__cli_str(st, "state");
    int closed = strcmp(state, "closed") == 0;
    double bytes_up = sl__cli_num(st, "bytes_up", 0), bytes_down = sl__cli_num(st, "bytes_down", 0);
    int64_t reported = (int64_t)sl__cli_num(st, "reported", 0);
    int64_t selected = (int64_t)sl__cli_num(st, "selected", 0);

    if (cJSON_IsNumber(cmp) && reported > 0 && cmp->valuedouble > 0)
        t->model_bytes = cmp->valuedouble * bytes_up / (double)reported;
    sl__cli_bytes(bytes_up, up, sizeof up);
    sl__cli_bytes(bytes_down, down, sizeof down);
    if (cJSON_IsNumber(cmp))
        snprintf(ratio, sizeof ratio, "%.0fx", cmp->valuedouble);
    else
        snprintf(ratio, sizeof ratio, "-");
    snprintf(acc, sizeof acc, "-");
    snprintf(loss, sizeof loss, "-");
    if (cJSON_IsObject(metrics)) {
        double a = sl__cli_num(metrics, "accuracy", NAN), l = sl__cli_num(metrics, "loss", NAN);
        snprintf(acc, sizeof acc, "%.2f%%", 100.0 * a);
        snprintf(loss, sizeof loss, "%.4f", l);
        t->final_acc = a;
        t->final_loss = l;
        t->final_version = (int64_t)sl__cli_num(st, "model_version", 0);
        if (a > t->best_acc)
            t->best_acc = a;
    }
    printf("round %4lld  %-9s  reported %3lld/%-3lld  dropped %3lld  acc %7s  loss %7s  "
           "up %9s (%6s vs dense)  down %9s%s%s\n",
           (long long)sl__cli_num(st, "round_no", 0), state, (long long)reported,
           (long long)selected, (long long)sl__cli_num(st, "dropped", 0), acc, loss, up, ratio,
           down, closed ? "" : "  ", closed ? "" : sl__cli_str(st, "error"));
    fflush(stdout);
    if (closed)
        t->closed++;
    else
        t->abandoned++;
    t->reported += reported;
    t->selected += selected;
    t->dropped += (int64_t)sl__cli_num(st, "dropped", 0);
    t->late += (int64_t)sl__cli_num(st, "late", 0);
    t->rejected += (int64_t)sl__cli_num(st, "rejected", 0);
    t->bytes_up += bytes_up;
    t->bytes_down += bytes_down;
    if (t->first_ms == 0)
        t->first_ms = (int64_t)sl__cli_num(st, "opened_at_ms", 0);
    t->last_ms = (int64_t)sl__cli_num(st, "closed_at_ms", 0);
}

static void print_summary(const totals *t)
{
    char a[16], b[16];
    double dense_up = t->model_bytes * (double)t->reported;
    double dense_down = t->model_bytes * (double)t->selected;
    printf("\nsummary of %lld rounds (%lld closed, %lld abandoned) in %.0f s\n",
           (long long)(t->closed + t->abandoned), (long long)t->closed, (long long)t->abandoned,
           t->last_ms > t->first_ms ? (double)(t->last_ms - t->first_ms) / 1000.0 : 0.0);
    if (t->final_version > 0)
        printf("  %-24s %.2f%% (loss %.4f, model version %lld; best %.2f%%)\n", "final accuracy",
               100.0 * t->final_acc, t->final_loss, (long long)t->final_version,
               100.0 * t->best_acc);
    else
        printf("  %-24s - (no evaluator reported)\n", "final accuracy");
    if (t->compression[0] != '\0')
        printf("  %-24s %s\n", "compression", t->compression);
    if (t->aggregation[0] != '\0')
        printf("  %-24s %s\n", "aggregation", t->aggregation);
    printf("  %-24s %lld of %lld selected; %lld dropped, %lld late, %lld rejected\n",
           "updates accepted", (long long)t->reported, (long long)t->selected,
           (long long)t->dropped, (long long)t->late, (long long)t->rejected);
    sl__cli_bytes(t->bytes_up, a, sizeof a);
    sl__cli_bytes(dense_up, b, sizeof b);
    if (t->model_bytes > 0 && t->bytes_up > 0)
        printf("  %-24s %s; dense FedAvg: %s (%.0fx fewer)\n", "bytes up", a, b,
               dense_up / t->bytes_up);
    else
        printf("  %-24s %s\n", "bytes up", a);
    sl__cli_bytes(t->bytes_down, a, sizeof a);
    sl__cli_bytes(dense_down, b, sizeof b);
    if (t->model_bytes > 0 && t->bytes_down > 0)
        printf("  %-24s %s; dense FedAvg: %s (%.1fx fewer)\n", "bytes down", a, b,
               dense_down / t->bytes_down);
    else
        printf("  %-24s %s\n", "bytes down", a);
    fflush(stdout);
}

/* The status's "compression" object in words: "ternary values, top-k 1% over the whole model,
 * tracking error feedback". */
static void describe_compression(const cJSON *comp, char *out, size_t cap)
{
    const char *scope = sl__cli_str(comp, "topk_scope"), *fb = sl__cli_str(comp, "error_feedback");
    double density = sl__cli_num(comp, "density", 0),
           decay = sl__cli_num(comp, "residual_decay", 1);
    char extra[64] = "";
    if (!cJSON_IsObject(comp))
        return;
    if (decay < 1)
        snprintf(extra, sizeof extra, " (decay %g)", decay);
    if (density >= 1)
        snprintf(out, cap, "%s values, dense", sl__cli_str(comp, "values"));
    else
        snprintf(out, cap, "%s values, top-k %g%% %s, %s error feedback%s",
                 sl__cli_str(comp, "values"), 100.0 * density,
                 strcmp(scope, "tensor") == 0 ? "in every tensor" : "over the whole model", fb,
                 extra);
}

/* The task's aggregation in words: "fedavg, server rate 1, each coordinate's mean over its
 * senders at the first aggregate, back to the mean of all over a device's first 6 updates (times
 * the share of rounds it reports to)" (or "... first 60 local epochs in its updates"), then
 * "; what the last aggregate carried is left out after one a device missed" (sender_mean_fresh),
 * "; shorter where devices sit out rounds (share^5, at least 6 updates; at 6 nothing is left
 * out)" (sender_mean_partial: the fade's floor, where sender_mean_fresh's rule is held back),
 * "fedavg, server rate 3x 1
 * at the first aggregate, back to 1 over 8" or "fedavg, server rate 1". */
static void describe_aggregation(const cJSON *t, char *out, size_t cap)
{
    double lr = sl__cli_num(t, "server_lr", 1), ramp = sl__cli_num(t, "server_lr_ramp", 0),
           boost = sl__cli_num(t, "server_lr_boost", 1), sm = sl__cli_num(t, "sender_mean", 0),
           smr = sl__cli_num(t, "sender_mean_rounds", 0),
           sme = sl__cli_num(t, "sender_mean_epochs", 0);
    size_t n;
    if (ramp > 0)
        snprintf(out, cap, "%s, server rate %gx %g at the first aggregate, back to %g over %.0f",
                 sl__cli_str(t, "aggregator"), boost, lr, lr, ramp);
    else
        snprintf(out, cap, "%s, server rate %g", sl__cli_str(t, "aggregator"), lr);
    n = strlen(out);
    if (sm > 0 && (smr > 0 || sme > 0) && n < cap) {
        char w[32] = "";
        if (sm < 1)
            snprintf(w, sizeof w, " (weight %g)", sm);
        snprintf(out + n, cap - n,
                 ", each coordinate's mean over its senders%s at the first aggregate, back to "
                 "the mean of all over a device's first %.0f %s%s",
                 w, sme > 0 ? sme : smr, sme > 0 ? "local epochs in its updates" : "updates",
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "sender_mean_share"))
                     ? " (times the share of rounds it reports to)"
                     : "");
        n = strlen(out);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "sender_mean_fresh")) && n < cap)
            snprintf(out + n, cap - n,
                     "; what the last aggregate carried is left out after one a device missed");
        n = strlen(out);
        if (sme > 0 && sl__cli_num(t, "sender_mean_partial", 0) > 0 && n < cap)
            snprintf(out + n, cap - n,
                     "; shorter where devices sit out rounds (share^%.0f, at least 6 updates; "
                     "at 6 nothing is left out)",
                     sl__cli_num(t, "sender_mean_partial", 0));
    }
}

static int task_finished(sl__cli *c, int64_t task, int *finished, totals *tot)
{
    cJSON *st = NULL, *t;
    *finished = 0;
    if (sl__cli_call(c, "GET", "/v1/status", NULL, &st, NULL) != 0)
        return SL__CLI_ERROR;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(st, "tasks"))
    {
        if ((int64_t)sl__cli_num(t, "task_id", 0) == task) {
            *finished = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "finished"));
            describe_compression(cJSON_GetObjectItemCaseSensitive(t, "compression"),
                                 tot->compression, sizeof tot->compression);
            describe_aggregation(t, tot->aggregation, sizeof tot->aggregation);
        }
    }
    cJSON_Delete(st);
    return 0;
}

static int follow(sl__cli *c, int64_t task, int64_t from, int64_t rounds, int64_t metrics_wait_s,
                  int64_t interval_ms, int64_t timeout_s)
{
    totals t;
    int64_t next = from, ended = 0, start = now_ms(), pending_since = 0, pending_round = 0;
    int rc = 0;
    memset(&t, 0, sizeof t);
    while (!interrupted) {
        int open_left = 0, finished = 0, waiting = 0;
        cJSON *list, *r;
        if (task_finished(c, task, &finished, &t) != 0 ||
            (list = ended_rounds(c, task, next, &open_left)) == NULL) {
            rc = SL__CLI_ERROR;
            break;
        }
        cJSON_ArrayForEach(r, list)
        {
            char path[64];
            cJSON *st = NULL;
            int64_t no = (int64_t)sl__cli_num(r, "round_no", 0);
            snprintf(path, sizeof path, "/v1/rounds/%.0f", sl__cli_num(r, "round_id", 0));
            if (sl__cli_call(c, "GET", path, NULL, &st, NULL) != 0) {
                rc = SL__CLI_ERROR;
                break;
            }
            if (strcmp(sl__cli_str(st, "state"), "closed") == 0 &&
                !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(st, "model_metrics"))) {
                if (pending_round != no) {
                    pending_round = no;
                    pending_since = now_ms();
                }
                if (now_ms() - pending_since < metrics_wait_s * 1000) {
                    cJSON_Delete(st);
                    waiting = 1;
                    break; /* in order: wait for the evaluator */
                }
            }
            print_line(st, &t);
            cJSON_Delete(st);
            next = no + 1;
            if (rounds > 0 && ++ended >= rounds)
                break;
        }
        cJSON_Delete(list);
        if (rc != 0 || (rounds > 0 && ended >= rounds) || (finished && open_left == 0 && !waiting))
            break;
        if (timeout_s > 0 && now_ms() - start > timeout_s * 1000) {
            rc = sl__cli_error(c, "gave up after %lld s", (long long)timeout_s);
            break;
        }
        sleep_ms(interval_ms);
    }
    print_summary(&t);
    return rc == 0 && interrupted ? 130 : rc;
}

int sl__cli_follow(int argc, char **argv)
{
    sl__cli c = {"follow", NULL, NULL, NULL, 0, NULL};
    int64_t task = 0, rounds = 0, from = 1, wait_s = 10, interval = 500, timeout = 0;
    struct sigaction sa;
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return follow_usage(stdout);
        if ((o = sl__cli_opt(argc, argv, &i, "--task", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--task", v, 1, INT64_MAX, &task) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--rounds", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--rounds", v, 1, INT64_MAX, &rounds) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--from", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--from", v, 1, INT64_MAX, &from) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--metrics-wait", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--metrics-wait", v, 0, 86400, &wait_s) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--interval", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--interval", v, 10, 600000, &interval) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--timeout", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--timeout", v, 0, INT64_MAX / 1000, &timeout) != 0)
                return SL__CLI_USAGE;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    rc = sl__cli_pick_task(&c, task, &task);
    if (rc == 0)
        rc = follow(&c, task, from, rounds, wait_s, interval, timeout);
    sl__cli_close(&c);
    return rc;
}
