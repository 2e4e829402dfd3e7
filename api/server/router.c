/*
 * router.c - the route table, method and path matching, the checks every
 * route shares (authentication, rate limits), and the access log.
 *
 * Paths are matched on the raw request target (never percent-decoded), so
 * what the router sees is exactly what a device signed. A segment written
 * "{}" in a pattern matches one non-empty segment of [A-Za-z0-9_.-]; any
 * other byte in an id makes the route not match (404).
 */
#include <stdio.h>
#include <string.h>

#include "server_int.h"

/* Who may call a route; the dispatcher checks before the handler runs. */
enum {
    AUTH_NONE = 0,   /* public */
    AUTH_DEVICE = 1, /* a signed device request */
    AUTH_ADMIN = 2,  /* the admin bearer token */
    AUTH_READ = 3,   /* public when public_status, else the admin token */
    AUTH_CUSTOM = 4  /* the handler decides */
};

typedef struct route {
    const char *method;
    const char *pattern;
    int auth;
    sl__handler handler;
    const char *label; /* for metrics: the pattern without the method */
} route;

static const route routes[] = {
    {"GET", "/healthz", AUTH_NONE, sl__h_healthz, "/healthz"},
    {"GET", "/readyz", AUTH_NONE, sl__h_readyz, "/readyz"},
    {"GET", "/metrics", AUTH_READ, sl__h_metrics, "/metrics"},
    /* the dashboard is public; it reads the API with the token (dashboard.c) */
    {"GET", "/", AUTH_CUSTOM, sl__dash_index, "/"},
    {"GET", "/dashboard/{}", AUTH_NONE, sl__dash_file, "/dashboard/{file}"},
    {"GET", "/v1/openapi.yaml", AUTH_NONE, sl__h_openapi, "/v1/openapi.yaml"},
    {"POST", "/v1/devices", AUTH_NONE, sl__h_enrol, "/v1/devices"},
    /* its own label: POST /v1/devices (enrolment) has "/v1/devices" */
    {"GET", "/v1/devices", AUTH_READ, sl__h_devices, "/v1/devices (list)"},
    {"GET", "/v1/devices/{}", AUTH_READ, sl__h_device, "/v1/devices/{id}"},
    {"POST", "/v1/checkin", AUTH_DEVICE, sl__h_checkin, "/v1/checkin"},
    {"POST", "/v1/sessions", AUTH_DEVICE, sl__h_session_create, "/v1/sessions"},
    {"POST", "/v1/sessions/rotate", AUTH_ADMIN, sl__h_sessions_rotate, "/v1/sessions/rotate"},
    {"GET", "/v1/devices/{}/sessions", AUTH_ADMIN, sl__h_sessions_list,
     "/v1/devices/{id}/sessions"},
    {"DELETE", "/v1/devices/{}/sessions", AUTH_ADMIN, sl__h_sessions_revoke,
     "/v1/devices/{id}/sessions (revoke)"},
    {"POST", "/v1/devices/{}/disable", AUTH_ADMIN, sl__h_device_disable,
     "/v1/devices/{id}/disable"},
    {"POST", "/v1/devices/{}/enable", AUTH_ADMIN, sl__h_device_enable, "/v1/devices/{id}/enable"},
    {"GET", "/v1/models/{}", AUTH_CUSTOM, sl__h_model, "/v1/models/{version}"},
    {"POST", "/v1/models/{}/metrics", AUTH_CUSTOM, sl__h_report_metrics,
     "/v1/models/{version}/metrics"},
    {"POST", "/v1/rounds/{}/uploads", AUTH_DEVICE, sl__h_upload_create,
     "/v1/rounds/{round}/uploads"},
    {"PATCH", "/v1/uploads/{}", AUTH_DEVICE, sl__h_upload_patch, "/v1/uploads/{id}"},
    {"HEAD", "/v1/uploads/{}", AUTH_DEVICE, sl__h_upload_head, "/v1/uploads/{id}"},
    {"GET", "/v1/status", AUTH_READ, sl__h_status, "/v1/status"},
    {"GET", "/v1/rounds", AUTH_READ, sl__h_rounds, "/v1/rounds"},
    {"GET", "/v1/rounds/{}", AUTH_READ, sl__h_round, "/v1/rounds/{id}"},
    {"POST", "/v1/rounds/{}/abort", AUTH_ADMIN, sl__h_abort_round, "/v1/rounds/{id}/abort"},
    {"POST", "/v1/tasks", AUTH_ADMIN, sl__h_create_task, "/v1/tasks"},
    {"GET", "/v1/tasks/{}/model-spec", AUTH_CUSTOM, sl__h_model_spec, "/v1/tasks/{id}/model-spec"},
    {"GET", "/v1/tasks/{}/data-contract", AUTH_CUSTOM, sl__h_data_contract,
     "/v1/tasks/{id}/data-contract"},
    {"POST", "/v1/backups", AUTH_ADMIN, sl__h_backup_create, "/v1/backups"},
    {"GET", "/v1/backups/{}", AUTH_ADMIN, sl__h_backup_get, "/v1/backups/{id}"},
};

#define NROUTES ((int)(sizeof routes / sizeof routes[0]))

_Static_assert(sizeof routes / sizeof routes[0] <= SL__MAX_ROUTES, "raise SL__MAX_ROUTES");

int sl__route_count(void)
{
    return NROUTES;
}

const char *sl__route_label(int r)
{
    return r >= 0 && r < NROUTES ? routes[r].label : "unmatched";
}

static int seg_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* Match @path against @pattern, capturing "{}" segments into @p. */
static int match(const char *pattern, const char *path, sl__params *p)
{
    sl__params got;
    memset(&got, 0, sizeof got);
    while (*pattern != '\0' && *path != '\0') {
        if (pattern[0] == '{' && pattern[1] == '}') {
            size_t n = 0;
            while (path[n] != '\0' && path[n] != '/') {
                if (!seg_char(path[n]) || n + 1 >= sizeof got.seg[0] ||
                    got.n >= (int)(sizeof got.seg / sizeof got.seg[0]))
                    return 0;
                n++;
            }
            if (n == 0)
                return 0;
            memcpy(got.seg[got.n], path, n);
            got.seg[got.n][n] = '\0';
            got.n++;
            path += n;
            pattern += 2;
            continue;
        }
        if (*pattern != *path)
            return 0;
        pattern++;
        path++;
    }
    if (*pattern != '\0' || *path != '\0')
        return 0;
    *p = got;
    return 1;
}

/* HEAD is answered wherever GET is (libmicrohttpd drops the body). */
static int method_ok(const route *r, const char *method)
{
    return strcmp(r->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0);
}

void sl__dispatch(sl_server *s, sl__req *rq, sl__resp *rs)
{
    char allow[96] = "";
    sl__params params;
    const route *found = NULL;
    int ok = 1;

    for (int i = 0; i < NROUTES; i++) {
        sl__params p;
        if (!match(routes[i].pattern, rq->path, &p))
            continue;
        if (method_ok(&routes[i], rq->method)) {
            found = &routes[i];
            rq->route = i;
            params = p;
            break;
        }
        /* the path exists with other methods: collect them for Allow */
        if (rq->route < 0)
            rq->route = i; /* for the metrics' route label */
        if (strstr(allow, routes[i].method) == NULL) {
            size_t n = strlen(allow);
            snprintf(allow + n, sizeof allow - n, "%s%s", n ? ", " : "", routes[i].method);
            if (strcmp(routes[i].method, "GET") == 0) {
                n = strlen(allow);
                snprintf(allow + n, sizeof allow - n, ", HEAD");
            }
        }
    }
    if (rq->too_big) {
        /* checked after matching so the metrics know the route */
        sl__problem(rs, rq, 413, "payload-too-large", NULL,
                    "the body exceeds the limit of %llu bytes",
                    (unsigned long long)s->opt.max_body);
        goto out;
    }
    if (found == NULL) {
        if (allow[0] != '\0') {
            sl__problem(rs, rq, 405, "method-not-allowed", NULL, "%s is not allowed on %s",
                        rq->method, rq->path);
            sl__resp_header(rs, "Allow", "%s", allow);
        } else {
            sl__problem(rs, rq, 404, "not-found", NULL, "no route for %s", rq->path);
        }
        goto out;
    }
    switch (found->auth) {
    case AUTH_DEVICE:
        ok = sl__auth_device(s, rq, rs);
        break;
    case AUTH_ADMIN:
        ok = sl__auth_admin(s, rq, rs);
        break;
    case AUTH_READ:
        ok = sl__auth_read(s, rq, rs);
        break;
    default:
        break;
    }
    if (ok)
        found->handler(s, rq, &params, rs);
out:
    sl__resp_header(rs, "X-Request-Id", "%s", rq->request_id);
    if (rs->status == 401 && sl__resp_get_header(rs, "WWW-Authenticate") == NULL)
        sl__resp_header(rs, "WWW-Authenticate", "%s",
                        found && found->auth == AUTH_DEVICE ? "Starling-Signature"
                                                            : "Bearer realm=\"starling\"");
    if (rs->status >= 400 || rs->status == 201 || strcmp(rq->method, "GET") != 0)
        if (sl__resp_get_header(rs, "Cache-Control") == NULL)
            sl__resp_header(rs, "Cache-Control", "no-store");
}

/* Quote a logfmt value when it needs it (the path may hold anything). */
static void logfmt_value(char *out, size_t cap, const char *v)
{
    size_t o = 0;
    int quote = *v == '\0';
    for (const char *p = v; *p != '\0'; p++)
        if (*p == ' ' || *p == '"' || *p == '=' || (unsigned char)*p < 0x20 || *p == '\\')
            quote = 1;
    if (!quote) {
        snprintf(out, cap, "%s", v);
        return;
    }
    if (cap < 3) {
        if (cap > 0)
            out[0] = '\0';
        return;
    }
    out[o++] = '"';
    for (const char *p = v; *p != '\0' && o + 4 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            out[o++] = '?';
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
}

void sl__request_done(sl_server *s, const sl__req *rq)
{
    int64_t dur = sl__mono_ns(s) - rq->start_ns;
    char path[300], method[40];
    size_t in = rq->body_len + (size_t)rq->discarded;
    sl__metrics_request(&s->metrics, rq->route, rq->status, dur, in, rq->bytes_out);
    if (sl_log_get_level() < SL_LOG_INFO)
        return;
    logfmt_value(path, sizeof path, rq->path);
    logfmt_value(method, sizeof method, rq->method);
    /* sl_log puts everything in msg="..."; inside it, the fields are logfmt pairs */
    sl_log(SL_LOG_INFO, "http",
           "method=%s path=%s status=%d bytes_in=%zu bytes_out=%zu duration_ms=%.3f "
           "request_id=%s device=%lld client=%s",
           method, path, rq->status, in, rq->bytes_out, (double)dur / 1e6, rq->request_id,
           (long long)rq->device_id, rq->client[0] ? rq->client : "-");
}
