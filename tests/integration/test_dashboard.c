/*
 * The dashboard: its routes and headers (in process, no browser), the
 * "model_version" / "model_metrics" members of GET /v1/rounds/{id}, and the
 * page in a real browser: headless Chromium against a coordinator that ran
 * a short simulated job (test_dashboard_job.c), in the public and in the
 * token-protected status mode. The page must run without a script error,
 * show the REST API's numbers (read from data-k / data-v attributes of the
 * dumped DOM), draw the expected number of points in each chart, and a
 * screenshot is kept under the build directory (tests/integration/artifacts/).
 *
 * Chromium is required: without it the browser tests fail and say how to
 * install it. SL_CHROMIUM names another binary; SL_DASH_HOLD=<seconds>
 * keeps the public job's coordinator up for a look by hand.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <sys/stat.h>

#include "../support/sl_test.h"
#include "starling/common.h"
#include "test_dashboard.h"

/* ---- the page and its files, no browser --------------------------------------------- */

static char *source_file(const char *rel)
{
    char path[700];
    void *data = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", SL_SOURCE_DIR, rel);
    if (sl_fs_read_file(path, 1 << 22, &data, &len) != SL_OK || data == NULL)
        fail_msg("cannot read %s", path);
    return (char *)data;
}

/* Nothing but the page's own origin in the source file @rel: the only "://" allowed is the
 * SVG namespace. */
static void assert_no_external(const char *rel)
{
    char path[700];
    void *data = NULL;
    size_t len = 0, at = 0;
    snprintf(path, sizeof path, "%s/%s", SL_SOURCE_DIR, rel);
    if (sl_fs_read_file(path, 1 << 22, &data, &len) != SL_OK || data == NULL)
        fail_msg("cannot read %s", path);
    for (const char *text = data; at + 3 <= len; at++) {
        if (memcmp(text + at, "://", 3) != 0)
            continue;
        if (at < 4 || len - (at - 4) < 26 ||
            memcmp(text + at - 4, "http://www.w3.org/2000/svg", 26) != 0)
            fail_msg("%s refers to another origin: \"%.40s\"", rel, text + (at > 8 ? at - 8 : at));
    }
    free(data);
}

static void test_routes(void **state)
{
    td_job j;
    ah_resp r;
    char value[512], path[96];
    const char *auth[] = {"Authorization: Bearer " AH_ADMIN};
    static const char *const assets[] = {"api/dashboard/index.html", "api/dashboard/app.js",
                                         "api/dashboard/charts.js", "api/dashboard/style.css"};
    (void)state;
    td_job_run(&j, "dash_routes", 0);

    /* the page is public and holds no data without the token */
    ah_get(&j.f, "/", NULL, 0, &r);
    assert_int_equal(r.status, 200);
    assert_true(ah_header(&r, "Content-Type", value, sizeof value));
    assert_string_equal(value, "text/html; charset=utf-8");
    assert_true(ah_header(&r, "Content-Security-Policy", value, sizeof value));
    assert_non_null(strstr(value, "default-src 'none'"));
    assert_non_null(strstr(value, "connect-src 'self'"));
    assert_non_null(strstr(r.body, "src=\"/dashboard/app.js\""));
    assert_null(strstr(r.body, "<table><tr>")); /* the server-rendered snapshot */
    assert_null(strstr(r.body, "dash-demo"));
    assert_null(strstr(r.body, "://"));
    ah_resp_free(&r);
    /* with the token, the status tables for clients without JavaScript */
    ah_get(&j.f, "/", auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "<td>dash-demo</td>"));
    assert_non_null(strstr(r.body, "abandoned"));
    assert_non_null(strstr(r.body, "data-chart=\"acc-round\""));
    ah_resp_free(&r);

    /* the files, byte for byte as in the source tree, revalidated with ETag */
    for (int i = 1; i < 4; i++) {
        char *want = source_file(assets[i]), etag[96], inm[120];
        const char *hdr[] = {inm};
        snprintf(path, sizeof path, "/dashboard/%s", strrchr(assets[i], '/') + 1);
        ah_get(&j.f, path, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.len, strlen(want));
        assert_memory_equal(r.body, want, r.len);
        assert_true(ah_header(&r, "Content-Type", value, sizeof value));
        assert_string_equal(value,
                            i < 3 ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8");
        assert_true(ah_header(&r, "X-Content-Type-Options", value, sizeof value));
        assert_true(ah_header(&r, "ETag", etag, sizeof etag));
        ah_resp_free(&r);
        snprintf(inm, sizeof inm, "If-None-Match: W/\"x\", %s", etag);
        ah_get(&j.f, path, hdr, 1, &r);
        assert_int_equal(r.status, 304);
        assert_int_equal(r.len, 0);
        ah_resp_free(&r);
        free(want);
    }
    for (int i = 0; i < 4; i++)
        assert_no_external(assets[i]);
    ah_get(&j.f, "/dashboard/nope.js", NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    ah_get(&j.f, "/dashboard/..%2fapi", NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    ah_get(&j.f, "/dashboard/", NULL, 0, &r);
    ah_expect_problem(&r, 404, "not-found");
    ah_resp_free(&r);
    {
        char url[128];
        snprintf(url, sizeof url, "%s/", j.f.base);
        ah_http("POST", url, NULL, 0, "{}", 2, &r);
        ah_expect_problem(&r, 405, "method-not-allowed");
        ah_resp_free(&r);
        ah_http("HEAD", url, NULL, 0, NULL, 0, &r);
        assert_int_equal(r.status, 200);
        ah_resp_free(&r);
    }

    /* the version each round made, and the evaluator's metrics of it */
    for (int i = 0; i < j.nrounds; i++) {
        char *body;
        cJSON *doc;
        const cJSON *mv, *mm;
        snprintf(path, sizeof path, "/v1/rounds/%lld", (long long)j.round_ids[i]);
        body = td_get(&j, path);
        doc = cJSON_Parse(body);
        mv = cJSON_GetObjectItemCaseSensitive(doc, "model_version");
        mm = cJSON_GetObjectItemCaseSensitive(doc, "model_metrics");
        if (i < TD_CLOSED) {
            assert_true(cJSON_IsNumber(mv));
            assert_int_equal((int64_t)mv->valuedouble, i + 2); /* round 1 made version 2 */
            if (i == 2) {
                assert_true(cJSON_IsNull(mm));
            } else {
                assert_true(cJSON_IsObject(mm));
                assert_true(fabs(cJSON_GetObjectItem(mm, "accuracy")->valuedouble -
                                 (0.42 + 0.1 * (i + 1))) < 1e-9);
                assert_int_equal((int)cJSON_GetObjectItem(mm, "samples")->valuedouble, 1000);
            }
        } else {
            assert_true(cJSON_IsNull(mv)); /* abandoned, or still open */
            assert_true(cJSON_IsNull(mm));
        }
        cJSON_Delete(doc);
        free(body);
    }
    /* the task keeps the last 2 versions (retain_last): the rounds above still give the
     * metrics of versions 2 and 3, whose bytes are retired; their bytes are not found, as a
     * model or as a delta's base */
    {
        static const struct {
            const char *query;
            long status;
        } gets[] = {{"2", 404}, {"3", 404},        {"1", 200},       {"4", 200},
                    {"5", 200}, {"5&base=3", 404}, {"5&base=4", 200}};
        for (size_t g = 0; g < sizeof gets / sizeof gets[0]; g++) {
            char q[16];
            snprintf(q, sizeof q, "%s", gets[g].query);
            q[strcspn(q, "&")] = '\0';
            snprintf(path, sizeof path, "/v1/models/%s?task=%lld%s", q, (long long)j.task,
                     strchr(gets[g].query, '&') ? strchr(gets[g].query, '&') : "");
            ah_admin(&j.f, "GET", path, NULL, 0, &r);
            if (r.status != gets[g].status)
                fail_msg("GET %s: %ld, expected %ld", path, r.status, gets[g].status);
            ah_resp_free(&r);
        }
    }
    ah_get(&j.f, "/metrics", auth, 1, &r);
    assert_non_null(strstr(r.body, "route=\"/dashboard/{file}\",status=\"304\"} 3"));
    ah_resp_free(&r);

    /* the device list: paged, token-protected, bad pages refused */
    ah_get(&j.f, "/v1/devices?limit=2&offset=1", auth, 1, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(ah_json_int(r.body, "total"), TD_DEVICES);
    assert_int_equal(ah_json_int(r.body, "offset"), 1);
    assert_non_null(strstr(r.body, "\"device_id\":2,"));
    assert_null(strstr(r.body, "\"device_id\":1,"));
    assert_int_equal(ah_json_int(r.body, "next_after"), 3); /* device 4 follows */
    ah_resp_free(&r);
    /* keyset pages: after a device id, next_after to the end, where it is absent */
    {
        int64_t after = 0, seen = 0, pages = 0;
        for (;;) {
            char url[64];
            snprintf(url, sizeof url, "/v1/devices?limit=3&after=%lld", (long long)after);
            ah_get(&j.f, url, auth, 1, &r);
            assert_int_equal(r.status, 200);
            assert_int_equal(ah_json_int(r.body, "after"), after);
            assert_null(strstr(r.body, "\"total\""));
            assert_null(strstr(r.body, "\"offset\""));
            for (int64_t id = after + 1; id <= after + 3 && id <= TD_DEVICES; id++) {
                char want[48];
                snprintf(want, sizeof want, "\"device_id\":%lld,", (long long)id);
                assert_non_null(strstr(r.body, want));
                seen++;
            }
            pages++;
            if (strstr(r.body, "\"next_after\"") == NULL) {
                ah_resp_free(&r);
                break;
            }
            after = ah_json_int(r.body, "next_after");
            assert_int_equal(after, 3 * pages);
            ah_resp_free(&r);
        }
        assert_int_equal(seen, TD_DEVICES);
        assert_int_equal(pages, (TD_DEVICES + 2) / 3);
    }
    ah_get(&j.f, "/v1/devices?limit=4&after=0", auth, 1, &r); /* exactly the fleet: no more */
    assert_int_equal(r.status, 200);
    assert_null(strstr(r.body, "\"next_after\""));
    ah_resp_free(&r);
    ah_get(&j.f, "/v1/devices?after=4", auth, 1, &r); /* past the last: an empty page */
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"devices\":[]"));
    ah_resp_free(&r);
    ah_get(&j.f, "/v1/devices?after=1&offset=2", auth, 1, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    ah_get(&j.f, "/v1/devices?after=-1", auth, 1, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    ah_get(&j.f, "/v1/devices", NULL, 0, &r);
    ah_expect_problem(&r, 401, "unauthorized");
    ah_resp_free(&r);
    ah_get(&j.f, "/v1/devices?limit=0", auth, 1, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);
    ah_get(&j.f, "/v1/devices?offset=x", auth, 1, &r);
    ah_expect_problem(&r, 400, "bad-request");
    ah_resp_free(&r);

    /* a backup: made, then read whole and in a range, with its digest as ETag */
    {
        char url[160], href[96], sha[80], etag[96], want[100];
        const char *range[] = {auth[0], "Range: bytes=0-99"};
        size_t total;
        ah_admin(&j.f, "POST", "/v1/backups", "", 0, &r);
        assert_int_equal(r.status, 201);
        assert_true(ah_json_str(r.body, "href", href, sizeof href));
        assert_true(ah_json_str(r.body, "sha256", sha, sizeof sha));
        total = (size_t)ah_json_int(r.body, "bytes");
        ah_resp_free(&r);
        ah_get(&j.f, href, auth, 1, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.len, total);
        assert_memory_equal(r.body, "SQLite format 3", 16);
        assert_true(ah_header(&r, "ETag", etag, sizeof etag));
        snprintf(want, sizeof want, "\"%s\"", sha);
        assert_string_equal(etag, want);
        ah_resp_free(&r);
        ah_get(&j.f, href, range, 2, &r);
        assert_int_equal(r.status, 206);
        assert_int_equal(r.len, 100);
        assert_true(ah_header(&r, "Content-Range", value, sizeof value));
        snprintf(want, sizeof want, "bytes 0-99/%zu", total);
        assert_string_equal(value, want);
        ah_resp_free(&r);
        ah_get(&j.f, href, NULL, 0, &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
        ah_get(&j.f, "/v1/backups/nope", auth, 1, &r);
        ah_expect_problem(&r, 404, "not-found");
        ah_resp_free(&r);
        snprintf(url, sizeof url, "%s/v1/backups", j.f.base);
        ah_http("POST", url, NULL, 0, "", 0, &r);
        ah_expect_problem(&r, 401, "unauthorized");
        ah_resp_free(&r);
    }
    td_job_close(&j);
}

/* ---- the page in Chromium ------------------------------------------------------------ */

static char chromium[512];

static int find_chromium(void)
{
    const char *given = getenv("SL_CHROMIUM"), *path = getenv("PATH");
    static const char *const names[] = {"chromium", "chromium-browser", "google-chrome"};
    if (given != NULL && given[0] != '\0') {
        snprintf(chromium, sizeof chromium, "%s", given);
        return access(chromium, X_OK) == 0;
    }
    for (int n = 0; n < 3; n++)
        for (const char *p = path ? path : "/usr/bin"; p != NULL && *p != '\0';) {
            const char *end = strchr(p, ':');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            snprintf(chromium, sizeof chromium, "%.*s/%s", (int)len, p, names[n]);
            if (access(chromium, X_OK) == 0)
                return 1;
            p = end ? end + 1 : NULL;
        }
    return 0;
}

static void need_chromium(void)
{
    if (!find_chromium())
        fail_msg("Chromium is not installed, and the dashboard test needs a real browser: "
                 "apt-get install chromium (Debian), or set SL_CHROMIUM to its binary");
}

/* Run headless Chromium on @url: --dump-dom (or --screenshot=@shot); the DOM
 * and the browser's log (malloc'd). Fails on a script error in the log. */
static char *browse(const char *url, const char *shot, char **log)
{
    char profile[512], budget[] = "--virtual-time-budget=6000", shot_arg[700], *dom = NULL;
    char profile_arg[600];
    char *argv[20];
    int n = 0, code;
    sl_test_mkdtemp(profile, sizeof profile, "td_chromium");
    snprintf(profile_arg, sizeof profile_arg, "--user-data-dir=%s", profile);
    argv[n++] = chromium;
    argv[n++] = "--headless";
    argv[n++] = "--no-sandbox";
    argv[n++] = "--disable-gpu";
    argv[n++] = "--disable-dev-shm-usage";
    argv[n++] = "--disable-background-networking";
    argv[n++] = "--disable-component-update";
    argv[n++] = "--disable-sync";
    argv[n++] = "--no-first-run";
    argv[n++] = "--enable-logging=stderr";
    argv[n++] = "--v=0";
    argv[n++] = profile_arg;
    argv[n++] = budget;
    if (shot != NULL) {
        snprintf(shot_arg, sizeof shot_arg, "--screenshot=%s", shot);
        argv[n++] = shot_arg;
        argv[n++] = "--window-size=1280,1600";
        argv[n++] = "--hide-scrollbars";
    } else {
        argv[n++] = "--dump-dom";
    }
    argv[n++] = (char *)url;
    argv[n] = NULL;
    code = td_run(argv, NULL, 90, &dom, log);
    sl_test_rmtree(profile);
    if (code != 0)
        fail_msg("chromium exited with %d:\n%s", code, *log);
    /* the page writes nothing to the console: any line there is a script error, a
     * refused (CSP) or failed load, or a complaint of the browser about the page */
    for (const char *line = *log; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        const char *hit = strstr(line, ":CONSOLE");
        if (hit == NULL || (end != NULL && hit > end))
            hit = strstr(line, "Uncaught");
        if (hit != NULL && (end == NULL || hit < end))
            fail_msg("the page wrote to the console: %.*s", len, line);
        line = end ? end + 1 : NULL;
    }
    return dom;
}

/* data-v of the element whose data-k is @key, or NULL (static buffer). */
static const char *dom_v(const char *dom, const char *key)
{
    static char out[256];
    char pat[160];
    const char *at, *open, *close, *v;
    snprintf(pat, sizeof pat, "data-k=\"%s\"", key);
    at = strstr(dom, pat);
    if (at == NULL)
        return NULL;
    for (open = at; open > dom && *open != '<'; open--) {
    }
    close = strchr(at, '>');
    for (v = strstr(open, "data-v=\""); v != NULL && v < close; v = NULL) {
        size_t n = strcspn(v + 8, "\"");
        if (n >= sizeof out)
            n = sizeof out - 1;
        memcpy(out, v + 8, n);
        out[n] = '\0';
        return out;
    }
    return NULL;
}

/* The page shows @want (a JSON number or null) under @key. */
static void expect_num(const char *dom, const char *key, const cJSON *want)
{
    const char *got = dom_v(dom, key);
    if (got == NULL)
        fail_msg("the page has no %s", key);
    if (want == NULL || cJSON_IsNull(want)) {
        if (strcmp(got, "null") != 0)
            fail_msg("%s: the page shows %s, the API null", key, got);
        return;
    }
    if (!cJSON_IsNumber(want))
        fail_msg("%s: the API's value is not a number", key);
    if (fabs(strtod(got, NULL) - want->valuedouble) > 1e-9 * fmax(1.0, fabs(want->valuedouble)))
        fail_msg("%s: the page shows %s, the API %.17g", key, got, want->valuedouble);
}

static void expect_str(const char *dom, const char *key, const char *want)
{
    const char *got = dom_v(dom, key);
    if (got == NULL || strcmp(got, want) != 0)
        fail_msg("%s: the page shows %s, the API %s", key, got ? got : "nothing", want);
}

/* Marks of series @series in the chart @chart. */
static int chart_points(const char *dom, const char *chart, const char *series)
{
    char pat[96];
    const char *start, *end;
    int n = 0;
    snprintf(pat, sizeof pat, "data-chart=\"%s\"", chart);
    start = strstr(dom, pat);
    if (start == NULL)
        fail_msg("no chart %s", chart);
    end = strstr(start, "</svg>");
    snprintf(pat, sizeof pat, "data-series=\"%s\"", series);
    for (const char *p = strstr(start, pat); p != NULL && p < end; p = strstr(p + 1, pat))
        n++;
    return n;
}

/* Everything the page shows against the API, and the charts' points. */
static void check_page(td_job *j, const char *dom)
{
    char *status_text = td_get(j, "/v1/status"), key[96], path[96];
    cJSON *status = cJSON_Parse(status_text);
    const cJSON *task = cJSON_GetArrayItem(cJSON_GetObjectItem(status, "tasks"), 0);
    const cJSON *cur = cJSON_GetObjectItem(task, "round");
    static const char *const fields[] = {"selected",
                                         "reported",
                                         "dropped",
                                         "late",
                                         "rejected",
                                         "quorum",
                                         "bytes_up",
                                         "bytes_down",
                                         "checked_in",
                                         "model_version",
                                         "compression_vs_dense"};
    static const char *const cur_fields[] = {"round_no", "selected", "checked_in", "downloading",
                                             "training", "reported", "dropped",    "late",
                                             "rejected", "target",   "quorum"};
    int evaluated = 0, device_acc = 0, reported = 0, selected = 0;
    double bytes_up = 0;
    assert_non_null(strstr(dom, "data-ready=\"1\""));
    assert_non_null(strstr(dom, "data-state=\"live\""));
    assert_non_null(strstr(dom, "data-errors=\"0\""));
    assert_non_null(strstr(dom, "data-fetch-errors=\"0\""));
    assert_null(strstr(dom, "data-polls=\"0\""));
    assert_null(strstr(dom, "data-polls=\"1\"")); /* it polled again, without reloading */
    expect_num(dom, "task.task_id", cJSON_GetObjectItem(task, "task_id"));
    expect_num(dom, "task.model_version", cJSON_GetObjectItem(task, "model_version"));
    assert_int_equal((int)cJSON_GetObjectItem(task, "model_version")->valuedouble, TD_CLOSED + 1);
    expect_str(dom, "task.name", "dash-demo");
    expect_str(dom, "task.aggregator", cJSON_GetObjectItem(task, "aggregator")->valuestring);
    for (int i = 0; i < j->nrounds; i++) {
        char *text;
        cJSON *r;
        const cJSON *m;
        int no;
        snprintf(path, sizeof path, "/v1/rounds/%lld", (long long)j->round_ids[i]);
        text = td_get(j, path);
        r = cJSON_Parse(text);
        no = (int)cJSON_GetObjectItem(r, "round_no")->valuedouble;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            snprintf(key, sizeof key, "round.%d.%s", no, fields[f]);
            expect_num(dom, key, cJSON_GetObjectItem(r, fields[f]));
        }
        snprintf(key, sizeof key, "round.%d.state", no);
        expect_str(dom, key, cJSON_GetObjectItem(r, "state")->valuestring);
        m = cJSON_GetObjectItem(r, "model_metrics");
        snprintf(key, sizeof key, "round.%d.test_accuracy", no);
        expect_num(dom, key, cJSON_IsObject(m) ? cJSON_GetObjectItem(m, "accuracy") : NULL);
        if (cJSON_IsObject(m)) {
            snprintf(key, sizeof key, "model.%d.accuracy",
                     (int)cJSON_GetObjectItem(r, "model_version")->valuedouble);
            expect_num(dom, key, cJSON_GetObjectItem(m, "accuracy"));
        }
        if (cJSON_GetObjectItem(cur, "round_id")->valuedouble == (double)j->round_ids[i]) {
            for (size_t f = 0; f < sizeof cur_fields / sizeof cur_fields[0]; f++) {
                snprintf(key, sizeof key, "cur.%s", cur_fields[f]);
                expect_num(dom, key, cJSON_GetObjectItem(r, cur_fields[f]));
            }
            /* the job left one device training and one downloading: not a 0 = 0 match */
            assert_int_equal((int)cJSON_GetObjectItem(r, "training")->valuedouble, 1);
            assert_int_equal((int)cJSON_GetObjectItem(r, "downloading")->valuedouble, 1);
        }
        evaluated += cJSON_IsObject(m);
        device_acc += cJSON_IsNumber(cJSON_GetObjectItem(r, "mean_accuracy"));
        reported += cJSON_GetObjectItem(r, "reported")->valuedouble > 0;
        selected += cJSON_GetObjectItem(r, "selected")->valuedouble > 0;
        bytes_up += cJSON_GetObjectItem(r, "bytes_up")->valuedouble;
        cJSON_Delete(r);
        free(text);
    }
    /* the job made these, so the comparisons above were not vacuous */
    assert_int_equal(evaluated, j->evaluated);
    assert_int_equal(evaluated, TD_CLOSED - 1);
    assert_int_equal(device_acc, 1);
    expect_str(dom, "cur.state", "training");
    {
        cJSON *sum = cJSON_CreateNumber(bytes_up);
        expect_num(dom, "task.bytes_up", sum);
        cJSON_Delete(sum);
    }
    {
        /* the devices table against GET /v1/devices, every column */
        static const char *const dev_fields[] = {"enrolled_at_ms", "last_seen_ms", "participations",
                                                 "reported",       "rejected",     "late"};
        char *text = td_get(j, "/v1/devices?limit=50");
        cJSON *list = cJSON_Parse(text);
        const cJSON *dev;
        int n = 0, reports = 0;
        cJSON_ArrayForEach(dev, cJSON_GetObjectItem(list, "devices"))
        {
            long long id = (long long)cJSON_GetObjectItem(dev, "device_id")->valuedouble;
            for (size_t f = 0; f < sizeof dev_fields / sizeof dev_fields[0]; f++) {
                snprintf(key, sizeof key, "device.%lld.%s", id, dev_fields[f]);
                expect_num(dom, key, cJSON_GetObjectItem(dev, dev_fields[f]));
            }
            snprintf(key, sizeof key, "device.%lld.state", id);
            expect_str(dom, key, cJSON_GetObjectItem(dev, "state")->valuestring);
            reports += (int)cJSON_GetObjectItem(dev, "reported")->valuedouble;
            n++;
        }
        assert_int_equal(n, TD_DEVICES);
        assert_true(reports > 0);
        cJSON_Delete(list);
        free(text);
    }
    /* charts: one mark per round and series, one per evaluated version */
    assert_int_equal(chart_points(dom, "acc-round", "evaluator"), evaluated);
    assert_int_equal(chart_points(dom, "acc-round", "devices"), device_acc);
    assert_int_equal(chart_points(dom, "acc-bytes", "evaluator"), evaluated);
    assert_int_equal(chart_points(dom, "participation", "reported"), j->nrounds);
    assert_int_equal(chart_points(dom, "participation", "dropped"), j->nrounds);
    assert_int_equal(chart_points(dom, "participation", "late"), j->nrounds);
    assert_int_equal(chart_points(dom, "bytes", "bytes_up"), j->nrounds);
    assert_int_equal(chart_points(dom, "bytes", "bytes_down"), j->nrounds);
    assert_int_equal(chart_points(dom, "bytes", "dense_up"), reported);
    assert_int_equal(chart_points(dom, "bytes", "dense_down"), selected);
    cJSON_Delete(status);
    free(status_text);
}

static void test_browser_public(void **state)
{
    td_job j;
    char url[128], shot[700], *dom, *log;
    const char *hold = getenv("SL_DASH_HOLD");
    struct stat sb;
    (void)state;
    need_chromium();
    td_job_run(&j, "dash_public", 1);
    snprintf(url, sizeof url, "%s/", j.f.base);
    if (hold != NULL && hold[0] != '\0') {
        fprintf(stderr, "dashboard at %s for %s s\n", url, hold);
        sleep((unsigned)strtoul(hold, NULL, 10));
    }
    dom = browse(url, NULL, &log);
    check_page(&j, dom);
    free(dom);
    free(log);
    /* the picture, kept as a test artifact */
    mkdir(SL_ARTIFACT_DIR, 0755);
    snprintf(shot, sizeof shot, "%s/dashboard.png", SL_ARTIFACT_DIR);
    unlink(shot);
    dom = browse(url, shot, &log);
    assert_int_equal(stat(shot, &sb), 0);
    assert_true(sb.st_size > 20000);
    {
        char *png = NULL;
        size_t len = 0;
        assert_int_equal(sl_fs_read_file(shot, 1 << 26, (void **)&png, &len), SL_OK);
        assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
        free(png);
    }
    fprintf(stderr, "screenshot: %s\n", shot);
    free(dom);
    free(log);
    /* a second task: a picker appears; the running first task stays shown */
    ah_create_task(&j.f, "{\"config\":{\"name\":\"second\",\"target\":2},"
                         "\"layout\":\"w 4 8\\nb 4\\n\",\"model\":\"%s\"}");
    dom = browse(url, NULL, &log);
    assert_non_null(strstr(dom, "<option value=\"2\">2 \xc2\xb7 second</option>"));
    assert_null(strstr(dom, "id=\"task-pick\" hidden"));
    check_page(&j, dom);
    free(dom);
    free(log);
    td_job_close(&j);
}

static void test_browser_token(void **state)
{
    td_job j;
    char url[200], *dom, *log;
    (void)state;
    need_chromium();
    td_job_run(&j, "dash_token", 0);
    /* without the token: the page asks for it, shows no data, and has no error */
    snprintf(url, sizeof url, "%s/", j.f.base);
    dom = browse(url, NULL, &log);
    assert_non_null(strstr(dom, "data-state=\"need-token\""));
    assert_non_null(strstr(dom, "data-errors=\"0\""));
    assert_null(strstr(dom, "dash-demo"));
    free(dom);
    free(log);
    /* a wrong token is refused, then the right one (from the address) works */
    snprintf(url, sizeof url, "%s/#token=wrong", j.f.base);
    dom = browse(url, NULL, &log);
    assert_non_null(strstr(dom, "data-state=\"need-token\""));
    assert_non_null(strstr(dom, "The token was refused."));
    free(dom);
    free(log);
    snprintf(url, sizeof url, "%s/#token=" AH_ADMIN, j.f.base);
    dom = browse(url, NULL, &log);
    check_page(&j, dom);
    assert_null(strstr(dom, AH_ADMIN)); /* not left in the page or its address */
    free(dom);
    free(log);
    td_job_close(&j);
}

/* Every JSON answer of these tests against api/openapi.yaml (python3-yaml). */
static void test_openapi(void **state)
{
    char *argv[] = {"python3", SL_SOURCE_DIR "/tests/integration/check_openapi.py",
                    SL_SOURCE_DIR "/api/openapi.yaml", (char *)ah_records_file(), NULL};
    char *out = NULL, *err = NULL;
    int code;
    (void)state;
    code = td_run(argv, NULL, 60, &out, &err);
    if (code == 77 || code == 127) {
        fprintf(stderr, "check_openapi.py skipped (python3-yaml missing)\n");
    } else if (code != 0) {
        fail_msg("openapi check failed:\n%s%s", out, err);
    }
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_browser_public),
        cmocka_unit_test(test_browser_token),
        cmocka_unit_test(test_openapi),
    };
    const char *base = getenv("SL_TEST_TMPDIR");
    char records[600];
    int failed;
    snprintf(records, sizeof records, "%s/dashboard_records.%d.jsonl",
             base && base[0] ? base : "/tmp", (int)getpid());
    ah_record_to(records);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    failed = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    if (!failed)
        unlink(records);
    else
        fprintf(stderr, "records kept in %s\n", records);
    return failed;
}
