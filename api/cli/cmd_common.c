/*
 * cmd_common.c - what the operator commands share: option parsing, the
 * connection (client, token file), requests with problem documents turned
 * into one-line errors, and human number formats. See cli_int.h.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_int.h"
#include "starling/common.h"

#define TOKEN_MAX 4096

/* ---- options ----------------------------------------------------------------- */

int sl__cli_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "starling: %s needs a value\n", name);
        return -1;
    }
    *i += 1;
    *value = argv[*i];
    return 1;
}

int sl__cli_conn_opt(sl__cli *c, int argc, char **argv, int *i)
{
    static const char *const names[] = {"--url", "--token-file", "--ca-file"};
    const char **slots[] = {&c->url, &c->token_file, &c->ca_file};
    for (int k = 0; k < 3; k++) {
        int rc = sl__cli_opt(argc, argv, i, names[k], slots[k]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int sl__cli_usage_error(const sl__cli *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "starling %s: ", c->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(starling %s --help for the options)\n", c->cmd);
    return SL__CLI_USAGE;
}

int sl__cli_error(const sl__cli *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "starling %s: ", c->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return SL__CLI_ERROR;
}

int sl__cli_int(const sl__cli *c, const char *name, const char *text, int64_t min, int64_t max,
                int64_t *out)
{
    char *end;
    long long v;
    if (text == NULL || *text == '\0' || !(isdigit((unsigned char)*text) || *text == '-'))
        return sl__cli_usage_error(c, "%s: \"%s\" is not an integer", name, text ? text : "");
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return sl__cli_usage_error(c, "%s: \"%s\" is not an integer in [%lld, %lld]", name, text,
                                   (long long)min, (long long)max);
    *out = (int64_t)v;
    return 0;
}

/* ---- the connection ------------------------------------------------------------- */

/* The token: the file's first line without surrounding blanks. */
static int read_token(sl__cli *c, char **token)
{
    void *data = NULL;
    size_t len = 0, start = 0;
    char *text;
    int rc = sl_fs_read_file(c->token_file, TOKEN_MAX, &data, &len);
    if (rc != SL_OK)
        return sl__cli_error(c, "cannot read the token file %s: %s", c->token_file,
                             sl_strerror(rc));
    text = data;
    len = strcspn(text, "\r\n");
    while (start < len && isspace((unsigned char)text[start]))
        start++;
    while (len > start && isspace((unsigned char)text[len - 1]))
        len--;
    if (len == start) {
        free(data);
        return sl__cli_error(c, "the token file %s is empty", c->token_file);
    }
    memmove(text, text + start, len - start);
    text[len - start] = '\0';
    *token = text;
    return 0;
}

int sl__cli_connect(sl__cli *c)
{
    sl_client_options o;
    char *token = NULL;
    int rc;
    if (c->url == NULL)
        c->url = getenv("STARLING_URL");
    if (c->url == NULL || c->url[0] == '\0')
        c->url = "https://127.0.0.1:8443";
    if (c->token_file == NULL) {
        const char *env = getenv("STARLING_TOKEN_FILE");
        c->token_file = env && env[0] ? env : NULL;
    }
    if (c->token_file != NULL && read_token(c, &token) != 0)
        return SL__CLI_ERROR;
    memset(&o, 0, sizeof o);
    o.base_url = c->url;
    o.ca_file = c->ca_file;
    o.admin_token = token;
    o.user_agent = "starling-cli";
    o.connect_timeout_ms = 5000;
    o.request_timeout_ms = 60000;
    /* an operator waiting at a prompt wants a prompt answer, not 5 backoffs */
    o.max_attempts = c->max_attempts ? c->max_attempts : 2;
    o.retry_base_ms = 300;
    o.retry_cap_ms = 2000;
    o.max_response_bytes = 64u << 20;
    rc = sl_client_create(&o, &c->client);
    if (token != NULL) {
        memset(token, 0, strlen(token));
        free(token);
    }
    if (rc != SL_OK)
        return sl__cli_error(c, "cannot use the URL \"%s\": %s", c->url, sl_strerror(rc));
    return 0;
}

void sl__cli_close(sl__cli *c)
{
    sl_client_free(c->client);
    c->client = NULL;
}

/* "401 Unauthorized: <detail>" from a problem document, or the status alone. */
static int http_error(sl__cli *c, const char *method, const char *path, const sl_client_response *r)
{
    cJSON *doc = r->body ? cJSON_Parse((const char *)r->body) : NULL;
    const cJSON *detail = doc ? cJSON_GetObjectItemCaseSensitive(doc, "detail") : NULL;
    const char *hint = "";
    if (r->status == 401)
        hint = c->token_file ? " (is the token right?)" : " (pass --token-file FILE)";
    sl__cli_error(c, "%s %s: HTTP %ld%s%s%s", method, path, r->status,
                  cJSON_IsString(detail) ? ": " : "",
                  cJSON_IsString(detail) ? detail->valuestring : "", hint);
    cJSON_Delete(doc);
    return SL__CLI_ERROR;
}

int sl__cli_call(sl__cli *c, const char *method, const char *path, const char *body, cJSON **json,
                 sl_client_response *raw)
{
    sl_client_response r;
    int rc;
    memset(&r, 0, sizeof r);
    rc = sl_client_request(c->client, method, path, body, body ? strlen(body) : 0,
                           body ? "application/json" : NULL, NULL, &r);
    if (rc != SL_OK)
        return sl__cli_error(c, "cannot reach %s: %s", c->url, sl_strerror(rc));
    if (r.status < 200 || r.status > 299) {
        http_error(c, method, path, &r);
        sl_client_response_free(&r);
        return SL__CLI_ERROR;
    }
    if (json != NULL) {
        *json = NULL;
        if (r.body_len > 0) {
            *json = cJSON_ParseWithLength((const char *)r.body, r.body_len);
            if (*json == NULL) {
                sl_client_response_free(&r);
                return sl__cli_error(c, "%s %s: the answer is not JSON", method, path);
            }
        }
    }
    if (raw != NULL)
        *raw = r;
    else
        sl_client_response_free(&r);
    return 0;
}

int sl__cli_pick_task(sl__cli *c, int64_t given, int64_t *task)
{
    cJSON *st = NULL;
    const cJSON *tasks, *t;
    int n;
    if (given > 0) {
        *task = given;
        return 0;
    }
    if (sl__cli_call(c, "GET", "/v1/status", NULL, &st, NULL) != 0)
        return SL__CLI_ERROR;
    tasks = cJSON_GetObjectItemCaseSensitive(st, "tasks");
    n = cJSON_GetArraySize(tasks);
    if (n != 1) {
        if (n == 0) {
            cJSON_Delete(st);
            return sl__cli_error(c, "the coordinator has no task yet");
        }
        fprintf(stderr, "starling %s: the coordinator runs %d tasks; pick one with --task:", c->cmd,
                n);
        cJSON_ArrayForEach(t, tasks)
        {
            fprintf(stderr, " %.0f (%s)", sl__cli_num(t, "task_id", 0), sl__cli_str(t, "name"));
        }
        fputc('\n', stderr);
        cJSON_Delete(st);
        return SL__CLI_USAGE;
    }
    *task = (int64_t)sl__cli_num(cJSON_GetArrayItem(tasks, 0), "task_id", 0);
    cJSON_Delete(st);
    return 0;
}

/* ---- output -------------------------------------------------------------------------- */

int sl__cli_colour(FILE *f)
{
    const char *force = getenv("CLICOLOR_FORCE"), *no = getenv("NO_COLOR"), *term = getenv("TERM");
    if (force != NULL && force[0] != '\0' && strcmp(force, "0") != 0)
        return 1;
    if (no != NULL && no[0] != '\0')
        return 0;
    if (term != NULL && strcmp(term, "dumb") == 0)
        return 0;
    return isatty(fileno(f));
}

void sl__cli_bytes(double n, char *out, size_t cap)
{
    static const char *const units[] = {"B", "kB", "MB", "GB", "TB"};
    int i = 0;
    if (!(n >= 0)) {
        snprintf(out, cap, "-");
        return;
    }
    while (n >= 1000 && i < 4) {
        n /= 1000;
        i++;
    }
    if (i == 0)
        snprintf(out, cap, "%.0f B", n);
    else
        snprintf(out, cap, "%.*f %s", n < 10 ? 2 : n < 100 ? 1 : 0, n, units[i]);
}

void sl__cli_duration(int64_t ms, char *out, size_t cap)
{
    double s = (double)ms / 1000.0;
    if (ms < 0)
        snprintf(out, cap, "-");
    else if (s < 60)
        snprintf(out, cap, "%.1f s", s);
    else if (s < 3600)
        snprintf(out, cap, "%lld min %02lld s", (long long)(ms / 60000),
                 (long long)(ms / 1000 % 60));
    else
        snprintf(out, cap, "%lld h %02lld min", (long long)(ms / 3600000),
                 (long long)(ms / 60000 % 60));
}

void sl__cli_percent(const cJSON *v, char *out, size_t cap)
{
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
        snprintf(out, cap, "%.1f%%", 100.0 * v->valuedouble);
    else
        snprintf(out, cap, "-");
}

void sl__cli_time(int64_t ms, char *out, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || gmtime_r(&t, &tm) == NULL || strftime(out, cap, "%Y-%m-%d %H:%M:%SZ", &tm) == 0)
        snprintf(out, cap, "-");
}

double sl__cli_num(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *sl__cli_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}
