/*
 * Fuzz target: arbitrary requests through the REST server's router,
 * checks and handlers, in process (sl_server_handle(): no socket).
 *
 * Input: "METHOD TARGET\n", header lines "Name: value\n" up to an empty
 * line, then the body (the rest). A first byte of '!' signs the request as
 * a real enrolled device (so mutated bodies reach the handlers behind the
 * signature check); '#' adds the admin bearer token.
 *
 * Invariants checked on every answer: a status in [100, 599]; an
 * X-Request-Id; every error (>= 400) is a problem document whose status
 * member equals the HTTP status and whose type is a stable
 * https://starling.dev/problems/ URI.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "starling/api_server.h"
#include "starling/api_sign.h"

#define ADMIN       "fuzz-admin"
#define ENROL       "fuzz-enrol"
#define LAYOUT      "w 4 8\nb 4\n"
#define MAX_HEADERS 32

static struct {
    char dir[256];
    sl_store *store;
    sl_engine *engine;
    sl_server *server;
    sl_device_key *key;
    int64_t device;
} fz;

static void teardown(void)
{
    char cmd[300];
    sl_server_free(fz.server);
    sl_engine_close(fz.engine);
    sl_store_close(fz.store);
    sl_device_key_free(fz.key);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_router: could not remove %s\n", fz.dir);
}

/* One store, engine and server for the whole run, with a task and a device. */
static void setup(void)
{
    sl_store_options so;
    sl_engine_options eo;
    sl_server_options o;
    sl_layout *layout;
    char path[300], err[256], hex[2 * SL_PUBKEY_LEN + 1], body[400];
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("SL_TEST_TMPDIR");
    uint8_t pub[SL_PUBKEY_LEN];
    float w[36];
    void *frame;
    size_t len;
    int64_t task;
    sl_server_response *resp;
    sl_server_header ct = {"Content-Type", "application/json"};

    snprintf(fz.dir, sizeof fz.dir, "%s/fuzz_router.XXXXXX", base ? base : "/tmp");
    if (mkdtemp(fz.dir) == NULL)
        abort();
    snprintf(path, sizeof path, "%s/starling.db", fz.dir);
    sl_store_options_default(&so);
    so.path = path;
    sl_engine_options_default(&eo);
    sl_server_options_default(&o);
    o.insecure_http = 1;
    o.admin_token = ADMIN;
    o.enrolment_token = ENROL;
    o.public_status = 0;
    o.device_rate = 0; /* no rate limit: every input gets the same treatment */
    o.max_body = 1 << 20;
    if (sl_store_open(&so, &fz.store, err, sizeof err) != SL_OK ||
        sl_engine_open(fz.store, &eo, &fz.engine, err, sizeof err) != SL_OK ||
        sl_server_create(&o, fz.store, fz.engine, &fz.server, err, sizeof err) != SL_OK) {
        fprintf(stderr, "fuzz_router: %s\n", err);
        abort();
    }
    for (int i = 0; i < 36; i++)
        w[i] = (float)(i % 5) * 0.25f;
    if (sl_layout_parse(LAYOUT, strlen(LAYOUT), &layout) != SL_OK ||
        sl_frame_encode_model(layout, w, 1, 3, &frame, &len) != SL_OK ||
        sl_engine_create_task(fz.engine, "{\"name\":\"fuzz\",\"target\":1}", LAYOUT, frame, len,
                              &task, err, sizeof err) != SL_OK)
        abort();
    free(frame);
    sl_layout_free(layout);
    if (sl_device_key_generate(&fz.key) != SL_OK || sl_device_key_public(fz.key, pub) != SL_OK)
        abort();
    sl_hex(pub, SL_PUBKEY_LEN, hex);
    snprintf(body, sizeof body, "{\"enrolment_token\":\"" ENROL "\",\"public_key\":\"%s\"}", hex);
    if (sl_server_handle(fz.server, "POST", "/v1/devices", &ct, 1, body, strlen(body), &resp) !=
            SL_OK ||
        sl_server_response_status(resp) != 201)
        abort();
    {
        size_t n;
        const char *text = sl_server_response_body(resp, &n);
        cJSON *doc = cJSON_ParseWithLength(text, n);
        const cJSON *id = doc ? cJSON_GetObjectItem(doc, "device_id") : NULL;
        if (!cJSON_IsNumber(id))
            abort();
        fz.device = (int64_t)id->valuedouble;
        cJSON_Delete(doc);
    }
    sl_server_response_free(resp);
    atexit(teardown);
}

/* Split the input into method, target, headers and body (in place, in a copy). */
static int parse(char *text, size_t size, char **method, char **target, sl_server_header *h,
                 size_t *nh, char **body, size_t *body_len)
{
    char *end = text + size, *p = text, *nl = memchr(p, '\n', (size_t)(end - p)), *sp;
    if (nl == NULL)
        return 0;
    *nl = '\0';
    sp = strchr(p, ' ');
    if (sp == NULL)
        return 0;
    *sp = '\0';
    *method = p;
    *target = sp + 1;
    p = nl + 1;
    *nh = 0;
    while (p < end && *p != '\n' && *nh < MAX_HEADERS) {
        char *colon;
        nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            break;
        *nl = '\0';
        colon = strchr(p, ':');
        if (colon != NULL) {
            *colon = '\0';
            h[*nh].name = p;
            h[*nh].value = colon[1] == ' ' ? colon + 2 : colon + 1;
            (*nh)++;
        }
        p = nl + 1;
    }
    if (p < end && *p == '\n')
        p++;
    *body = p;
    *body_len = (size_t)(end - p);
    return 1;
}

static void check(const sl_server_response *resp)
{
    int status = sl_server_response_status(resp);
    size_t len;
    const char *body = sl_server_response_body(resp, &len);
    const char *ctype = sl_server_response_header(resp, "Content-Type");
    if (status < 100 || status > 599 || sl_server_response_header(resp, "X-Request-Id") == NULL)
        abort();
    if (status >= 400) {
        cJSON *doc;
        const cJSON *type, *st;
        if (ctype == NULL || strcmp(ctype, "application/problem+json") != 0)
            abort();
        doc = cJSON_ParseWithLength(body, len);
        if (doc == NULL)
            abort();
        type = cJSON_GetObjectItem(doc, "type");
        st = cJSON_GetObjectItem(doc, "status");
        if (!cJSON_IsString(type) ||
            strncmp(type->valuestring, "https://starling.dev/problems/", 30) != 0 ||
            !cJSON_IsNumber(st) || st->valueint != status)
            abort();
        cJSON_Delete(doc);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_server_header h[MAX_HEADERS + 5];
    char vals[4][160];
    char *copy, *method, *target, *body;
    size_t nh = 0, body_len;
    int sign = 0, admin = 0;
    sl_server_response *resp = NULL;

    if (fz.server == NULL)
        setup();
    if (size > 0 && (data[0] == '!' || data[0] == '#')) {
        sign = data[0] == '!';
        admin = data[0] == '#';
        data++;
        size--;
    }
    copy = malloc(size + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    if (!parse(copy, size, &method, &target, h, &nh, &body, &body_len) || strlen(method) == 0) {
        free(copy);
        return 0;
    }
    if (sign) {
        uint8_t digest[32];
        char nonce[64], sig[SL_SIGNATURE_B64_MAX];
        int64_t now = sl_clock_wall_ns(NULL) / 1000000;
        sl_sha256(body_len ? (const void *)body : "", body_len, digest);
        if (sl_nonce_new(nonce, sizeof nonce) == SL_OK &&
            sl_sign_request(fz.key, method, target, now, nonce, digest, sig, sizeof sig) == SL_OK) {
            snprintf(vals[0], sizeof vals[0], "%lld", (long long)fz.device);
            snprintf(vals[1], sizeof vals[1], "%lld", (long long)now);
            snprintf(vals[2], sizeof vals[2], "%s", nonce);
            snprintf(vals[3], sizeof vals[3], "%s", sig);
            h[nh].name = SL_HDR_DEVICE;
            h[nh++].value = vals[0];
            h[nh].name = SL_HDR_TIMESTAMP;
            h[nh++].value = vals[1];
            h[nh].name = SL_HDR_NONCE;
            h[nh++].value = vals[2];
            h[nh].name = SL_HDR_SIGNATURE;
            h[nh++].value = vals[3];
        }
    }
    if (admin) {
        h[nh].name = "Authorization";
        h[nh++].value = "Bearer " ADMIN;
    }
    if (sl_server_handle(fz.server, method, target, h, nh, body_len ? body : NULL, body_len,
                         &resp) == SL_OK) {
        check(resp);
        sl_server_response_free(resp);
    }
    free(copy);
    return 0;
}
