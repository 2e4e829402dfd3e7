/*
 * dashboard.c - the operator dashboard: GET / (index.html) and
 * GET /dashboard/{file} (app.js, charts.js, style.css), compiled into the server from
 * api/dashboard/ at build time (api/dashboard/embed.cmake writes
 * dashboard_assets.c); and the model version a round produced, with the
 * evaluator's metrics of it, for GET /v1/rounds/{id}.
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
#include <string.h>

#include "server_int.h"

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

void sl__dash_round_model(sl_server *s, const sl_round_record *r, cJSON *out)
{
    sl_model_record m;
    cJSON *metrics = NULL;
    int64_t version = r->base_version + 1;
    if (r->state != SL_ROUND_CLOSED) {
        /* only a closed round made a version (an abandoned one left the model as it was) */
        cJSON_AddNullToObject(out, "model_version");
        cJSON_AddNullToObject(out, "model_metrics");
        return;
    }
    cJSON_AddNumberToObject(out, "model_version", (double)version);
    /* a version removed by retention, or not evaluated yet, has no metrics */
    if (sl_store_get_model(s->store, r->task_id, version, &m) == SL_OK) {
        if (m.parent == r->base_version && m.metrics != NULL) {
            metrics = cJSON_Parse(m.metrics);
            /* a classifier's accuracy, or a regression's RMSE (its accuracy is null) */
            if (!cJSON_IsObject(metrics) ||
                (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, "accuracy")) &&
                 !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(metrics, "rmse")))) {
                cJSON_Delete(metrics);
                metrics = NULL;
            }
        }
        sl_store_model_free(&m);
    }
    if (metrics != NULL)
        cJSON_AddItemToObject(out, "model_metrics", metrics);
    else
        cJSON_AddNullToObject(out, "model_metrics");
}
