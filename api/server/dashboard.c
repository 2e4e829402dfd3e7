/*
 * dashboard.c - the operator dashboard: GET / (index.html) and
 * GET /dashboard/{file} (app.js, charts.js, style.css), compiled into the server from
 * api/dashboard/ at build time (api/dashboard/embed.cmake writes
 * dashboard_assets.c); and the server-rendered status page inside it.
 *
 * The page and its script hold no data: they are public, so an operator of
 * a token-protected coordinator can load them and type the token in, and
 * app.js reads the REST API with it. A request that may read the status
 * (the admin token, or --public-status) also gets the server-rendered status
 * tables inside the page, for clients without JavaScript; app.js removes
 * them. A Content-Security-Policy keeps the page to its own origin: no CDN,
 * no inline script, no fetch elsewhere.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

#define PAGE_ROUNDS 10 /* rounds of each task on the status page */

/* dashboard_assets.c (generated): each file's bytes, NUL-terminated, and length */
extern const unsigned char sl__dash_index_html[], sl__dash_app_js[], sl__dash_charts_js[],
    sl__dash_style_css[];
extern const size_t sl__dash_index_html_len, sl__dash_app_js_len, sl__dash_charts_js_len,
    sl__dash_style_css_len;

#define SNAPSHOT_MARK "<!--SL_SNAPSHOT-->"

static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                          "form-action 'self'; frame-ancestors 'none'";

typedef struct dash_file {
    const char *name;
    const char *ctype;
    const unsigned char *bytes;
    const size_t *len;
} dash_file;

static const dash_file files[] = {
    {"app.js", "text/javascript; charset=utf-8", sl__dash_app_js, &sl__dash_app_js_len},
    {"charts.js", "text/javascript; charset=utf-8", sl__dash_charts_js, &sl__dash_charts_js_len},
    {"style.css", "text/css; charset=utf-8", sl__dash_style_css, &sl__dash_style_css_len},
};

static void common_headers(sl__resp *rs)
{
    sl__resp_header(rs, "X-Content-Type-Options", "nosniff");
    sl__resp_header(rs, "Referrer-Policy", "no-referrer");
}

/* The <body> content of the server-rendered status page, appended to @b. */
static void append_snapshot(sl_server *s, sl__req *rq, const sl__params *p, sl__text *b)
{
    sl__resp legacy;
    const char *start, *end;
    sl__resp_init(&legacy);
    sl__h_dashboard(s, rq, p, &legacy);
    if (legacy.status == 200 && legacy.body != NULL) {
        /* the renderer writes one <body> and one </body>; anything else: leave it out */
        start = strstr(legacy.body, "<body>");
        end = start ? strstr(start, "</body>") : NULL;
        if (end != NULL && (size_t)(end - legacy.body) <= legacy.len) {
            start += 6;
            sl__text_put(b, start, (size_t)(end - start));
        }
    }
    sl__resp_reset(&legacy);
}

void sl__dash_index(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    const char *page = (const char *)sl__dash_index_html;
    const char *mark = strstr(page, SNAPSHOT_MARK);
    sl__text b = {NULL, 0, 0, 0};
    if (mark == NULL) {
        sl__text_put(&b, page, sl__dash_index_html_len);
    } else {
        sl__text_put(&b, page, (size_t)(mark - page));
        /* the status itself only for those allowed to read it */
        if (s->opt.public_status || sl__has_admin(s, rq))
            append_snapshot(s, rq, p, &b);
        mark += strlen(SNAPSHOT_MARK);
        sl__text_put(&b, mark, sl__dash_index_html_len - (size_t)(mark - page));
    }
    if (b.failed || b.data == NULL) {
        sl__text_free(&b);
        sl__problem_status(rs, rq, SL_ENOMEM, "rendering the dashboard");
        return;
    }
    sl__resp_bytes(rs, 200, "text/html; charset=utf-8", b.data, b.len);
    sl__resp_header(rs, "Content-Security-Policy", "%s", csp);
    sl__resp_header(rs, "Cache-Control", "no-store");
    common_headers(rs);
}

/* 1 when an If-None-Match list holds @etag (or is "*"). */
static int etag_listed(const char *inm, const char *etag)
{
    size_t n = strlen(etag);
    for (const char *q = inm; (q = strstr(q, etag)) != NULL; q += n)
        if ((q == inm || q[-1] == ' ' || q[-1] == ',') &&
            (q[n] == '\0' || q[n] == ',' || q[n] == ' '))
            return 1;
    return strcmp(inm, "*") == 0;
}

void sl__dash_file(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    const dash_file *f = NULL;
    const char *inm;
    uint8_t sha[32];
    char hex[65];
    (void)s;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (strcmp(p->seg[0], files[i].name) == 0)
            f = &files[i];
    if (f == NULL) {
        sl__problem(rs, rq, 404, "not-found", NULL, "no dashboard file %s", p->seg[0]);
        return;
    }
    /* a strong validator: the browser revalidates (no-cache) and gets 304 */
    sl_sha256(f->bytes, *f->len, sha);
    sl_hex(sha, 16, hex);
    sl__resp_header(rs, "ETag", "\"%s\"", hex);
    sl__resp_header(rs, "Cache-Control", "no-cache");
    common_headers(rs);
    inm = sl__req_header(rq, "If-None-Match");
    if (inm != NULL) {
        char quoted[70];
        snprintf(quoted, sizeof quoted, "\"%s\"", hex);
        if (etag_listed(inm, quoted)) {
            sl__resp_bytes(rs, 304, "", NULL, 0);
            return;
        }
    }
    sl__resp_copy(rs, 200, f->ctype, f->bytes, *f->len);
}

/* ---- the status page ------------------------------------------------------------ */

static void utc(sl__text *b, int64_t ms)
{
    char text[32];
    if (ms <= 0 || sl_clock_format_utc(ms * 1000000, text, sizeof text) != SL_OK) {
        sl__text_puts(b, "-");
        return;
    }
    sl__text_puts(b, text);
}

typedef struct page_ctx {
    sl__text *b;
} page_ctx;

static int page_round(void *ctx, const sl_round_record *r)
{
    sl__text *b = ((page_ctx *)ctx)->b;
    sl__text_printf(b,
                    "<tr><td>%lld</td><td>%s</td><td>%lld</td><td>%u / %u</td><td>%u</td>"
                    "<td>%u</td><td>%u</td><td>%u</td><td>%lld</td><td>",
                    (long long)r->round_no, sl__round_state_name(r->state),
                    (long long)r->base_version, r->reported, r->target, r->selected, r->late,
                    r->rejected, r->dropped, (long long)r->bytes_up);
    utc(b, r->opened_at_ms);
    sl__text_puts(b, "</td><td>");
    utc(b, r->closed_at_ms);
    sl__text_puts(b, "</td><td>");
    sl__text_html(b, r->error);
    sl__text_puts(b, "</td></tr>\n");
    return 0;
}

void sl__h_dashboard(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl__text b = {NULL, 0, 0, 0};
    sl_task_status *st = NULL;
    size_t n = 0;
    int rc = sl__all_status(s, &st, &n);
    (void)p;
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "listing tasks");
        return;
    }
    sl__text_puts(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                      "<meta http-equiv=\"refresh\" content=\"5\">"
                      "<title>Starling coordinator</title><style>"
                      "body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
                      "table{border-collapse:collapse;margin-bottom:1.5em}"
                      "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}"
                      "th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}"
                      "</style></head><body>\n<h1>Starling coordinator</h1>\n<p>Now: ");
    utc(&b, sl__wall_ms(s));
    sl__text_printf(&b,
                    " &middot; %zu task(s) &middot; refreshes every 5 s &middot; "
                    "<a href=\"/v1/status\">JSON</a> &middot; <a href=\"/metrics\">metrics</a>"
                    "</p>\n",
                    n);
    sl__text_puts(&b, "<h2>Tasks</h2>\n<table><tr><th>Task</th><th>Name</th><th>Model version</th>"
                      "<th>Round</th><th>State</th><th>Checked in</th><th>Selected</th>"
                      "<th>Reported / target</th><th>Quorum</th><th>Report deadline</th>"
                      "<th>Aggregator</th></tr>\n");
    for (size_t i = 0; i < n; i++) {
        const sl_round_record *r = &st[i].round;
        sl__text_printf(&b, "<tr><td>%lld</td><td>", (long long)st[i].task_id);
        sl__text_html(&b, st[i].cfg.name);
        sl__text_printf(&b,
                        "</td><td>%lld</td><td>%lld</td><td>%s</td><td>%u</td><td>%u</td>"
                        "<td>%u / %u</td><td>%u</td><td>",
                        (long long)st[i].model_version, (long long)r->round_no,
                        st[i].finished ? "finished" : sl__round_state_name(r->state),
                        st[i].checked_in, r->selected, r->reported, r->target, r->quorum);
        utc(&b, st[i].round_open ? r->report_deadline_ms : 0);
        sl__text_printf(&b, "</td><td>%s</td></tr>\n", sl_aggregator_name(st[i].cfg.aggregator));
    }
    sl__text_puts(&b, "</table>\n");
    for (size_t i = 0; i < n; i++) {
        page_ctx ctx = {&b};
        sl__text_printf(&b, "<h2>Task %lld: recent rounds</h2>\n", (long long)st[i].task_id);
        sl__text_puts(&b, "<table><tr><th>Round</th><th>State</th><th>Base version</th>"
                          "<th>Reported / target</th><th>Selected</th><th>Late</th>"
                          "<th>Rejected</th><th>Dropped</th><th>Bytes up</th><th>Opened</th>"
                          "<th>Closed</th><th>Note</th></tr>\n");
        rc = sl_store_list_rounds(s->store, st[i].task_id, 0, PAGE_ROUNDS, page_round, &ctx);
        if (rc != SL_OK)
            sl__text_printf(&b, "<tr><td colspan=\"12\">rounds unavailable: %s</td></tr>\n",
                            sl_strerror(rc));
        sl__text_puts(&b, "</table>\n");
    }
    if (n == 0)
        sl__text_puts(&b, "<p>No task yet: create one with POST /v1/tasks.</p>\n");
    sl__text_puts(&b, "</body></html>\n");
    free(st);
    if (b.failed) {
        sl__text_free(&b);
        sl__problem_status(rs, rq, SL_ENOMEM, "rendering the page");
        return;
    }
    sl__resp_bytes(rs, 200, "text/html; charset=utf-8", b.data, b.len);
    sl__resp_header(rs, "Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'");
}
