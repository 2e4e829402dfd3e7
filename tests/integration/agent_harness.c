/* agent_harness.c - see agent_harness.h. */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <zlib.h>

#include "../support/sl_test.h"
#include "agent_harness.h"
#include "starling/api_sign.h"
#include "starling/codec.h"
#include "starling/data.h"
#include "starling/nn.h"

static void write_text(const char *path, const char *text)
{
    assert_int_equal(sl_fs_write_atomic(path, text, strlen(text), 0600), SL_OK);
}

void ag_coord_open(ag_coord *c, const char *dir, const char *tls_cert, const char *tls_key,
                   const char *ca_for_admin)
{
    sl_store_options so;
    sl_engine_options eo;
    sl_server_options vo;
    sl_client_options co;
    char db[700], err[256];
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s/coord", dir);
    assert_int_equal(mkdir(c->dir, 0700), 0);
    snprintf(db, sizeof db, "%s/starling.db", c->dir);
    snprintf(c->admin_file, sizeof c->admin_file, "%s/admin", c->dir);
    snprintf(c->enrol_file, sizeof c->enrol_file, "%s/enrol", c->dir);
    write_text(c->admin_file, AG_ADMIN "\n");
    write_text(c->enrol_file, AG_ENROL "\n");
    sl_store_options_default(&so);
    so.path = db;
    if (sl_store_open(&so, &c->store, err, sizeof err) != SL_OK)
        fail_msg("store: %s", err);
    sl_engine_options_default(&eo);
    eo.retry_after_min_ms = 100; /* tests move fast: come back soon */
    eo.retry_after_max_ms = 1000;
    if (sl_engine_open(c->store, &eo, &c->engine, err, sizeof err) != SL_OK)
        fail_msg("engine: %s", err);
    sl_server_options_default(&vo);
    vo.listen = "127.0.0.1:0";
    vo.insecure_http = tls_cert == NULL;
    vo.tls_cert_file = tls_cert;
    vo.tls_key_file = tls_key;
    vo.admin_token = AG_ADMIN;
    vo.enrolment_token = AG_ENROL;
    vo.device_rate = 200;
    vo.device_burst = 400;
    vo.threads = 4;
    vo.tick_interval_ms = 20;
    if (sl_server_create(&vo, c->store, c->engine, &c->server, err, sizeof err) != SL_OK)
        fail_msg("server: %s", err);
    if (sl_server_start(c->server, err, sizeof err) != SL_OK)
        fail_msg("server start: %s", err);
    snprintf(c->url, sizeof c->url, "%s://127.0.0.1:%u", tls_cert ? "https" : "http",
             (unsigned)sl_server_port(c->server));
    memset(&co, 0, sizeof co);
    co.base_url = c->url;
    co.admin_token = AG_ADMIN;
    co.ca_file = ca_for_admin;
    co.max_attempts = 3;
    co.retry_base_ms = 50;
    assert_int_equal(sl_client_create(&co, &c->admin), SL_OK);
}

void ag_coord_stop_server(ag_coord *c)
{
    sl_client_free(c->admin);
    c->admin = NULL;
    sl_server_free(c->server);
    c->server = NULL;
}

void ag_coord_close(ag_coord *c)
{
    ag_coord_stop_server(c);
    sl_engine_close(c->engine);
    sl_store_close(c->store);
    memset(c, 0, sizeof *c);
}

void ag_admin(ag_coord *c, const char *method, const char *path, const char *body,
              sl_client_response *r)
{
    int rc = sl_client_request(c->admin, method, path, body, body ? strlen(body) : 0,
                               body ? "application/json" : NULL, NULL, r);
    if (rc != SL_OK)
        fail_msg("%s %s: %s", method, path, sl_strerror(rc));
}

/* POST /v1/tasks with the layout of @m, @initial as the initial model (NULL: @m's seeded
 * init) and, when @spec_text is given, the spec as the task's "model_spec". */
static int64_t create_task(ag_coord *c, sl_model *m, const float *initial, const char *spec_text,
                           const char *contract_text, const char *config_json)
{
    float *params;
    void *frame = NULL;
    size_t len = 0, need, b64cap, cap;
    char layout[8192], *b64, *body, *p;
    sl_client_response r;
    int64_t task;
    params = malloc(sl_model_params(m) * sizeof *params);
    assert_non_null(params);
    if (initial != NULL)
        memcpy(params, initial, sl_model_params(m) * sizeof *params);
    else
        assert_int_equal(sl_model_init(m, params, 42), SL_OK);
    assert_int_equal(sl_frame_encode_model(sl_model_layout(m), params, 1, 3, &frame, &len), SL_OK);
    need = sl_layout_format(sl_model_layout(m), layout, sizeof layout);
    assert_true(need < sizeof layout);
    b64cap = 4 * (len / 3 + 2) + 1;
    b64 = malloc(b64cap);
    assert_non_null(b64);
    assert_int_equal(sl_base64_encode(frame, len, b64, b64cap), SL_OK);
    cap = b64cap + 2 * sizeof layout + strlen(config_json) + (spec_text ? strlen(spec_text) : 0) +
          (contract_text ? strlen(contract_text) : 0) + 120;
    body = malloc(cap);
    assert_non_null(body);
    p = body;
    p += snprintf(p, cap, "{\"config\":%s,\"layout\":\"", config_json);
    for (const char *s = layout; *s != '\0'; s++) {
        if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else {
            *p++ = *s;
        }
    }
    p += snprintf(p, cap - (size_t)(p - body), "\",\"model\":\"%s\"", b64);
    if (spec_text != NULL)
        p += snprintf(p, cap - (size_t)(p - body), ",\"model_spec\":%s", spec_text);
    if (contract_text != NULL)
        p += snprintf(p, cap - (size_t)(p - body), ",\"data_contract\":%s", contract_text);
    snprintf(p, cap - (size_t)(p - body), "}");
    ag_admin(c, "POST", "/v1/tasks", body, &r);
    if (r.status != 201)
        fail_msg("POST /v1/tasks: %ld %s", r.status, r.body ? (char *)r.body : "");
    p = strstr((char *)r.body, "\"task_id\":");
    assert_non_null(p);
    task = strtoll(p + 10, NULL, 10);
    assert_true(task > 0);
    sl_client_response_free(&r);
    free(body);
    free(b64);
    free(frame);
    free(params);
    return task;
}

int64_t ag_create_task(ag_coord *c, const char *model_name, const char *config_json)
{
    sl_model *m = NULL;
    int64_t task;
    assert_int_equal(sl_model_create(model_name, &m), SL_OK);
    task = create_task(c, m, NULL, NULL, NULL, config_json);
    sl_model_free(m);
    return task;
}

int64_t ag_create_task_params(ag_coord *c, const char *spec_text, const float *params,
                              const char *config_json)
{
    return ag_create_task_docs(c, spec_text, params, NULL, config_json);
}

int64_t ag_create_task_docs(ag_coord *c, const char *spec_text, const float *params,
                            const char *contract_text, const char *config_json)
{
    sl_spec *spec = NULL;
    sl_model *m = NULL;
    char err[256];
    int64_t task;
    if (sl_spec_parse(spec_text, strlen(spec_text), &spec, err, sizeof err) != SL_OK)
        fail_msg("the spec does not parse: %s", err);
    if (sl_model_create_spec(spec, &m, err, sizeof err) != SL_OK)
        fail_msg("the spec does not build: %s", err);
    task = create_task(c, m, params, spec_text, contract_text, config_json);
    sl_model_free(m);
    sl_spec_free(spec);
    return task;
}

int64_t ag_create_task_spec(ag_coord *c, const char *spec_text, const char *config_json)
{
    return ag_create_task_params(c, spec_text, NULL, config_json);
}

int64_t ag_model_version(ag_coord *c, int64_t task)
{
    sl_task_status *st = malloc(sizeof *st);
    int64_t v;
    assert_non_null(st);
    assert_int_equal(sl_engine_task_status(c->engine, task, st), SL_OK);
    v = st->model_version;
    free(st);
    return v;
}

/* ---- data ------------------------------------------------------------------------------- */

static void write_idx(const char *path, const unsigned char *hdr, size_t hlen,
                      const unsigned char *body, size_t blen)
{
    gzFile f = gzopen(path, "wb1");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, hdr, (unsigned)hlen), (int)hlen);
    assert_int_equal(gzwrite(f, body, (unsigned)blen), (int)blen);
    assert_int_equal(gzclose(f), Z_OK);
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* The first @n samples of a split, from the installed data or made up. */
static void make_split(const char *dir, const char *prefix, size_t n)
{
    char src[600], dst[600];
    unsigned char hdr[16], *img = malloc(n * 784), *lab = malloc(n);
    gzFile f;
    int real = 0;
    assert_non_null(img);
    assert_non_null(lab);
    snprintf(src, sizeof src, "%s/%s-images-idx3-ubyte.gz", SL_DATA_FASHION_MNIST_DIR, prefix);
    f = gzopen(src, "rb");
    if (f != NULL) {
        real = gzread(f, hdr, 16) == 16 && gzread(f, img, (unsigned)(n * 784)) == (int)(n * 784);
        gzclose(f);
        snprintf(src, sizeof src, "%s/%s-labels-idx1-ubyte.gz", SL_DATA_FASHION_MNIST_DIR, prefix);
        f = gzopen(src, "rb");
        real = real && f != NULL && gzread(f, hdr, 8) == 8 && gzread(f, lab, (unsigned)n) == (int)n;
        if (f != NULL)
            gzclose(f);
    }
    if (!real) {
        /* ten classes of blurred stripes at class-dependent angles, plus noise */
        uint64_t rng = 12345;
        for (size_t i = 0; i < n; i++) {
            lab[i] = (unsigned char)(i % 10);
            for (size_t y = 0; y < 28; y++)
                for (size_t x = 0; x < 28; x++) {
                    int v = (int)((x * (lab[i] + 1) + y * (10 - lab[i])) % 28) * 9 +
                            (int)(sl_test_rand(&rng) % 24);
                    img[i * 784 + y * 28 + x] = (unsigned char)(v > 255 ? 255 : v);
                }
        }
    }
    hdr[0] = hdr[1] = 0;
    hdr[2] = 8;
    hdr[3] = 3;
    put32(hdr + 4, (uint32_t)n);
    put32(hdr + 8, 28);
    put32(hdr + 12, 28);
    snprintf(dst, sizeof dst, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    write_idx(dst, hdr, 16, img, n * 784);
    hdr[3] = 1;
    snprintf(dst, sizeof dst, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    write_idx(dst, hdr, 8, lab, n);
    free(img);
    free(lab);
}

void ag_make_data(const char *dir, size_t train, size_t test)
{
    mkdir(dir, 0700);
    make_split(dir, "train", train);
    make_split(dir, "t10k", test);
}

/* ---- acks --------------------------------------------------------------------------------- */

size_t ag_read_acks(const char *state_dir, ag_ack **out)
{
    char path[700];
    void *text = NULL;
    size_t len = 0, n = 0, cap = 16;
    ag_ack *acks = malloc(cap * sizeof *acks);
    assert_non_null(acks);
    snprintf(path, sizeof path, "%s/acks.log", state_dir);
    if (sl_fs_read_file(path, 64 << 20, &text, &len) != SL_OK) {
        *out = acks;
        return 0;
    }
    for (char *line = text; *line != '\0';) {
        char *eol = strchr(line, '\n'), hex[65];
        unsigned long long gen;
        long long round, update, device;
        int dup;
        if (eol == NULL)
            fail_msg("%s: a line without its newline: %s", path, line);
        *eol = '\0';
        if (sscanf(line, "gen=%llu round=%lld update=%lld device=%lld sha256=%64s dup=%d", &gen,
                   &round, &update, &device, hex, &dup) != 6)
            fail_msg("%s: bad line: %s", path, line);
        if (n == cap) {
            cap *= 2;
            acks = realloc(acks, cap * sizeof *acks);
            assert_non_null(acks);
        }
        acks[n].gen = gen;
        acks[n].round = round;
        acks[n].update = update;
        acks[n].device = device;
        acks[n].dup = dup;
        assert_int_equal(sl_unhex(hex, acks[n].sha, 32), SL_OK);
        n++;
        line = eol + 1;
    }
    free(text);
    *out = acks;
    return n;
}

int ag_pending(const char *state_dir, int64_t *round, uint8_t sha[32])
{
    char path[700], *p;
    void *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/pending/meta", state_dir);
    if (sl_fs_read_file(path, 1 << 16, &text, &len) != SL_OK)
        return 0;
    p = strstr(text, "\nround=");
    assert_non_null(p);
    *round = strtoll(p + 7, NULL, 10);
    p = strstr(text, "\nframe_sha256=");
    assert_non_null(p);
    p[14 + 64] = '\0';
    assert_int_equal(sl_unhex(p + 14, sha, 32), SL_OK);
    free(text);
    return 1;
}

int64_t ag_device_id(const char *state_dir)
{
    char path[800];
    void *text = NULL;
    size_t len = 0;
    int64_t id;
    snprintf(path, sizeof path, "%s/device.id", state_dir);
    assert_int_equal(sl_fs_read_file(path, 64, &text, &len), SL_OK);
    id = strtoll(text, NULL, 10);
    free(text);
    return id;
}

int ag_stored(ag_coord *c, int64_t round, int64_t device, const uint8_t sha[32])
{
    sl_store_receipt rec;
    return sl_store_get_receipt(c->store, round, device, sha, &rec) == SL_OK;
}

typedef struct dev_count {
    int64_t device;
    unsigned n;
} dev_count;

static int count_device(void *ctx, int64_t device_id, const void *frame, size_t len,
                        uint32_t num_samples, const uint8_t *sha256)
{
    dev_count *dc = ctx;
    (void)frame, (void)len, (void)num_samples, (void)sha256;
    if (device_id == dc->device)
        dc->n++;
    return 0;
}

size_t ag_check_acks(ag_coord *c, const ag_ack *acks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sl_store_receipt rec;
        dev_count dc = {acks[i].device, 0};
        int rc = sl_store_get_receipt(c->store, acks[i].round, acks[i].device, acks[i].sha, &rec);
        if (rc != SL_OK)
            fail_msg("ack gen %llu (round %lld, device %lld, update %lld): not stored (%s)",
                     (unsigned long long)acks[i].gen, (long long)acks[i].round,
                     (long long)acks[i].device, (long long)acks[i].update, sl_strerror(rc));
        if (rec.update_id != acks[i].update)
            fail_msg("ack of round %lld device %lld says update %lld, the store %lld",
                     (long long)acks[i].round, (long long)acks[i].device, (long long)acks[i].update,
                     (long long)rec.update_id);
        assert_int_equal(sl_store_foreach_update(c->store, acks[i].round, count_device, &dc), 0);
        if (dc.n != 1)
            fail_msg("round %lld holds %u updates of device %lld", (long long)acks[i].round, dc.n,
                     (long long)acks[i].device);
        for (size_t j = 0; j < i; j++)
            if (acks[j].round == acks[i].round && acks[j].device == acks[i].device)
                fail_msg("round %lld device %lld acknowledged twice", (long long)acks[i].round,
                         (long long)acks[i].device);
    }
    return n;
}

typedef struct round_list {
    sl_round_record r[512];
    size_t n;
} round_list;

static int collect_round(void *ctx, const sl_round_record *r)
{
    round_list *l = ctx;
    if (l->n < 512)
        l->r[l->n++] = *r;
    return 0;
}

void ag_count_task(ag_coord *c, int64_t task, uint64_t *updates, uint64_t *closed)
{
    round_list *l = calloc(1, sizeof *l);
    assert_non_null(l);
    *updates = *closed = 0;
    assert_int_equal(sl_store_list_rounds(c->store, task, 0, 512, collect_round, l), 0);
    for (size_t i = 0; i < l->n; i++) {
        uint64_t count = 0;
        assert_int_equal(sl_store_count_updates(c->store, l->r[i].id, &count), SL_OK);
        *updates += count;
        if (l->r[i].state == SL_ROUND_CLOSED || l->r[i].state == SL_ROUND_ABANDONED) {
            /* an update is counted once: the round's count is what is stored */
            if (l->r[i].reported != count)
                fail_msg("round %lld reports %u updates, %llu are stored", (long long)l->r[i].id,
                         l->r[i].reported, (unsigned long long)count);
        }
        if (l->r[i].state == SL_ROUND_CLOSED)
            (*closed)++;
    }
    free(l);
}

/* ---- processes -------------------------------------------------------------------------- */

pid_t ag_spawn_agent(const char *const *args, const char *log)
{
    char *argv[96];
    size_t n = 0;
    pid_t pid;
    argv[n++] = (char *)SL_AGENT_BIN;
    while (args[n - 1] != NULL && n < 95) {
        argv[n] = (char *)args[n - 1];
        n++;
    }
    argv[n] = NULL;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        sl_test_execv(SL_AGENT_BIN, argv);
        _exit(127);
    }
    return pid;
}

int ag_wait(pid_t pid, int ms)
{
    ms *= sl_test_time_scale();
    for (int waited = 0; waited <= ms; waited += 10) {
        int status;
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

int ag_have(const char *program)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", program);
    return system(cmd) == 0;
}
