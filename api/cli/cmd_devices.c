/*
 * cmd_devices.c - `starling devices`: a page of the enrolled devices with
 * what each did (GET /v1/devices): when it enrolled and was last seen, the
 * rounds it was selected for, its acknowledged updates, rejections and late
 * reports, and the tasks it refuses with its reason (a model over its limits, or
 * "no usable data: ...").
 */
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "starling/common.h"

static int devices_usage(FILE *out)
{
    fprintf(out, "usage: starling devices [options]\n"
                 "       starling devices sessions ID       a device's live sessions\n"
                 "       starling devices revoke ID [--session S]   revoke them (or one)\n"
                 "       starling devices disable ID | enable ID   refuse it (and its sessions)\n"
                 "A page of the enrolled devices, in id order (GET /v1/devices), with what each\n"
                 "refuses; a device's sessions (GET / DELETE /v1/devices/{id}/sessions).\n"
                 "  --limit N        devices (default 50, at most 1000)\n"
                 "  --offset N       skip the first N\n"
                 "  --after ID       the devices after device ID (each page as fast wherever\n"
                 "                   it is in the fleet; the footer names the next page's ID)\n"
                 "  --all            every device (after --after ID, if given), page after\n"
                 "                   page of --limit (default 1000); with --json, one device\n"
                 "                   per line (JSON Lines)\n"
                 "  --json           the API's JSON (DeviceList of api/openapi.yaml) as "
                 "is\n" SL__CLI_CONN_HELP "  --help           this text\n"
                 "exit status: 0 ok, 1 error, 2 usage\n");
    return out == stdout ? SL__CLI_OK : SL__CLI_USAGE;
}

static void print_header(int colour)
{
    const char *bold = colour ? "\033[1m" : "", *off = colour ? "\033[0m" : "";
    printf("%s%8s  %-20s  %-12s %7s %8s %8s %5s  %s%s\n", bold, "DEVICE", "ENROLLED", "LAST SEEN",
           "ROUNDS", "REPORTED", "REJECTED", "LATE", "STATE", off);
}

/* The rows of a page's devices; returns how many. */
static int print_rows(const cJSON *list)
{
    const cJSON *d, *r;
    int64_t now = sl_clock_wall_ns(NULL) / 1000000;
    int n = 0;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(list, "devices"))
    {
        char enrolled[40], seen[40];
        int64_t last = (int64_t)sl__cli_num(d, "last_seen_ms", 0);
        sl__cli_time((int64_t)sl__cli_num(d, "enrolled_at_ms", 0), enrolled, sizeof enrolled);
        if (last > 0 && now >= last) {
            char ago[32];
            sl__cli_duration(now - last, ago, sizeof ago);
            snprintf(seen, sizeof seen, "%s ago", ago);
        } else {
            sl__cli_time(last, seen, sizeof seen);
        }
        printf("%8.0f  %-20s  %-12s %7.0f %8.0f %8.0f %5.0f  %s\n", sl__cli_num(d, "device_id", 0),
               enrolled, seen, sl__cli_num(d, "participations", 0), sl__cli_num(d, "reported", 0),
               sl__cli_num(d, "rejected", 0), sl__cli_num(d, "late", 0), sl__cli_str(d, "state"));
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(d, "refusals"))
        {
            printf("%8s  refuses task %.0f: %s\n", "", sl__cli_num(r, "task_id", 0),
                   sl__cli_str(r, "reason"));
        }
        n++;
    }
    return n;
}

static void print_devices(const cJSON *list, int colour)
{
    int n;
    print_header(colour);
    n = print_rows(list);
    if (cJSON_GetObjectItemCaseSensitive(list, "total") != NULL)
        printf("%d of %.0f devices (from %.0f)", n, sl__cli_num(list, "total", 0),
               sl__cli_num(list, "offset", 0) + (n > 0));
    else
        printf("%d device%s after device %.0f", n, n == 1 ? "" : "s",
               sl__cli_num(list, "after", 0));
    if (cJSON_GetObjectItemCaseSensitive(list, "next_after") != NULL)
        printf("; next page: --after %.0f\n", sl__cli_num(list, "next_after", 0));
    else
        printf("; the last page\n");
}

static void print_sessions(const cJSON *doc)
{
    const cJSON *s;
    int n = 0;
    printf("%-32s  %5s  %-20s  %-20s  %s\n", "SESSION", "EPOCH", "ISSUED", "EXPIRES", "REVOKED");
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(doc, "sessions"))
    {
        char issued[40], expires[40], revoked[40] = "-";
        sl__cli_time((int64_t)sl__cli_num(s, "issued_at_ms", 0), issued, sizeof issued);
        sl__cli_time((int64_t)sl__cli_num(s, "expires_at_ms", 0), expires, sizeof expires);
        if (sl__cli_num(s, "revoked_at_ms", 0) > 0)
            sl__cli_time((int64_t)sl__cli_num(s, "revoked_at_ms", 0), revoked, sizeof revoked);
        printf("%-32s  %5.0f  %-20s  %-20s  %s\n", sl__cli_str(s, "session_id"),
               sl__cli_num(s, "epoch", 0), issued, expires, revoked);
        n++;
    }
    printf("%d live session%s of device %.0f\n", n, n == 1 ? "" : "s",
           sl__cli_num(doc, "device_id", 0));
}

/* `starling devices sessions ID`, `revoke ID [--session S]`, `disable ID`, `enable ID`. */
static int sessions_cmd(int argc, char **argv)
{
    const char *action = argv[1];
    int revoke = strcmp(action, "revoke") == 0;
    int toggle = strcmp(action, "disable") == 0 || strcmp(action, "enable") == 0;
    sl__cli c = {"devices", NULL, NULL, NULL, 0, NULL};
    const char *session = NULL;
    int64_t id = 0;
    char path[160];
    cJSON *doc = NULL;
    int rc;
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (revoke && (o = sl__cli_opt(argc, argv, &i, "--session", &v)) != 0) {
            if (o < 0 || strlen(v) != 32 || strspn(v, "0123456789abcdef") != 32)
                return sl__cli_usage_error(&c, "--session takes a session id (32 hex digits)");
            session = v;
        } else if (id == 0 && argv[i][0] >= '0' && argv[i][0] <= '9') {
            if (sl__cli_int(&c, "the device id", argv[i], 1, INT64_MAX, &id) != 0)
                return SL__CLI_USAGE;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (id == 0)
        return sl__cli_usage_error(&c, "which device? starling devices %s ID", action);
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    if (toggle)
        snprintf(path, sizeof path, "/v1/devices/%lld/%s", (long long)id, action);
    else
        snprintf(path, sizeof path, "/v1/devices/%lld/sessions%s%s", (long long)id,
                 session ? "?session=" : "", session ? session : "");
    rc = sl__cli_call(&c,
                      toggle   ? "POST"
                      : revoke ? "DELETE"
                               : "GET",
                      path, toggle ? "" : NULL, &doc, NULL);
    if (rc == 0 && toggle)
        printf("device %lld: %s (%.0f session%s revoked)\n", (long long)id,
               sl__cli_str(doc, "state"), sl__cli_num(doc, "sessions_revoked", 0),
               sl__cli_num(doc, "sessions_revoked", 0) == 1 ? "" : "s");
    else if (rc == 0 && revoke)
        printf("device %lld: %.0f session%s revoked (refused at their next request)\n",
               (long long)id, sl__cli_num(doc, "revoked", 0),
               sl__cli_num(doc, "revoked", 0) == 1 ? "" : "s");
    else if (rc == 0)
        print_sessions(doc);
    cJSON_Delete(doc);
    sl__cli_close(&c);
    return rc;
}

/* --all: keyset pages from @after to the last, as a table or JSON Lines. */
static int all_devices(sl__cli *c, int64_t after, int64_t limit, int json)
{
    int64_t count = 0;
    if (!json)
        print_header(sl__cli_colour(stdout));
    for (;;) {
        char path[96];
        cJSON *list = NULL, *next;
        const cJSON *d;
        int rc;
        snprintf(path, sizeof path, "/v1/devices?limit=%lld&after=%lld", (long long)limit,
                 (long long)after);
        if ((rc = sl__cli_call(c, "GET", path, NULL, &list, NULL)) != 0)
            return rc;
        if (json) {
            cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(list, "devices"))
            {
                char *line = cJSON_PrintUnformatted(d);
                if (line == NULL) {
                    cJSON_Delete(list);
                    fprintf(stderr, "starling devices: out of memory\n");
                    return SL__CLI_ERROR;
                }
                puts(line);
                free(line);
                count++;
            }
        } else {
            count += print_rows(list);
        }
        next = cJSON_GetObjectItemCaseSensitive(list, "next_after");
        if (next == NULL) {
            cJSON_Delete(list);
            break;
        }
        if (!cJSON_IsNumber(next) || next->valuedouble <= (double)after) {
            cJSON_Delete(list);
            fprintf(stderr,
                    "starling devices: the server's next page does not move on (after "
                    "%lld)\n",
                    (long long)after);
            return SL__CLI_ERROR;
        }
        after = (int64_t)next->valuedouble;
        cJSON_Delete(list);
    }
    if (!json)
        printf("%lld device%s\n", (long long)count, count == 1 ? "" : "s");
    return 0;
}

int sl__cli_devices(int argc, char **argv)
{
    sl__cli c = {"devices", NULL, NULL, NULL, 0, NULL};
    int64_t limit = -1, offset = 0, after = -1;
    int json = 0, all = 0, rc;
    char path[96];
    cJSON *list = NULL;
    sl_client_response raw;
    if (argc > 1 && (strcmp(argv[1], "sessions") == 0 || strcmp(argv[1], "revoke") == 0 ||
                     strcmp(argv[1], "disable") == 0 || strcmp(argv[1], "enable") == 0))
        return sessions_cmd(argc, argv);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int o = sl__cli_conn_opt(&c, argc, argv, &i);
        if (o < 0)
            return SL__CLI_USAGE;
        if (o > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return devices_usage(stdout);
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--all") == 0) {
            all = 1;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--limit", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--limit", v, 1, 1000, &limit) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--offset", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--offset", v, 0, UINT32_MAX, &offset) != 0)
                return SL__CLI_USAGE;
        } else if ((o = sl__cli_opt(argc, argv, &i, "--after", &v)) != 0) {
            if (o < 0 || sl__cli_int(&c, "--after", v, 0, INT64_MAX, &after) != 0)
                return SL__CLI_USAGE;
        } else {
            return sl__cli_usage_error(&c, "unknown argument \"%s\"", argv[i]);
        }
    }
    if (after >= 0 && offset > 0)
        return sl__cli_usage_error(&c, "--after and --offset cannot be combined");
    if (all && offset > 0)
        return sl__cli_usage_error(&c, "--all pages after device ids: --offset does not apply");
    if (limit < 0)
        limit = all ? 1000 : 50;
    if (sl__cli_connect(&c) != 0)
        return SL__CLI_ERROR;
    if (all) {
        rc = all_devices(&c, after > 0 ? after : 0, limit, json);
        sl__cli_close(&c);
        return rc;
    }
    if (after >= 0)
        snprintf(path, sizeof path, "/v1/devices?limit=%lld&after=%lld", (long long)limit,
                 (long long)after);
    else
        snprintf(path, sizeof path, "/v1/devices?limit=%lld&offset=%lld", (long long)limit,
                 (long long)offset);
    rc = sl__cli_call(&c, "GET", path, NULL, json ? NULL : &list, json ? &raw : NULL);
    if (rc == 0 && json) {
        fwrite(raw.body, 1, raw.body_len, stdout);
        fputc('\n', stdout);
        sl_client_response_free(&raw);
    } else if (rc == 0) {
        print_devices(list, sl__cli_colour(stdout));
    }
    cJSON_Delete(list);
    sl__cli_close(&c);
    return rc;
}
