/*
 * The agent on a link that breaks, against an in-process coordinator:
 *
 *   - a model download killed (SIGKILL of the agent program) after its
 *     first ranges resumes after the restart from what model.partial holds
 *     (Range + If-Range), not from zero, and the model is verified;
 *   - a model.partial of another ETag (another body) is discarded: the
 *     server answers the whole body and the agent takes it;
 *   - a model.partial of the right ETag whose bytes are damaged fails the
 *     SHA-256 check at the end and is downloaded again from zero;
 *   - bytes on the wire (through a counting proxy, headers included, both
 *     directions) per transfer of a frame: <= 1.1x the frame on a clean
 *     link, <= 1.5x when 20% of the transfers (requests of a download or
 *     an upload) are cut at a random byte. Figures are printed.
 */
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../support/sl_test.h"
#include "agent_harness.h"
#include "e2e_proxy.h"

#define TASK_ONE                                                                   \
    "{\"name\":\"link\",\"target\":1,\"quorum\":1,\"over_selection\":1,"           \
    "\"selection_window_ms\":200,\"report_deadline_ms\":8000,\"values\":\"fp16\"," \
    "\"density\":0.05,\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05}"

/* The full model frame of @version as the coordinator serves it. */
static void server_model(ag_coord *c, int64_t task, int64_t version, sl_client_response *r)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/models/%lld?task=%lld", (long long)version, (long long)task);
    ag_admin(c, "GET", path, NULL, r);
    assert_int_equal(r->status, 200);
    assert_true(r->body_len > 100000);
    assert_int_equal(strlen(r->etag), 66);
}

static void assert_file_equals(const char *dir, const char *name, const void *data, size_t len)
{
    char path[800];
    void *got = NULL;
    size_t got_len = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(sl_fs_read_file(path, 1 << 30, &got, &got_len), SL_OK);
    assert_int_equal(got_len, len);
    assert_memory_equal(got, data, len);
    free(got);
}

static int file_exists(const char *dir, const char *name)
{
    char path[800];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* model.partial: "SLDL" u32 path length, path, u32 ETag length, ETag, bytes. */
static void write_partial(const char *dir, const char *path, const char *etag, const void *data,
                          size_t len)
{
    char file[800];
    uint32_t plen = (uint32_t)strlen(path), elen = (uint32_t)strlen(etag);
    size_t total = 12 + plen + elen + len;
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    memcpy(buf, "SLDL", 4);
    memcpy(buf + 4, &plen, 4);
    memcpy(buf + 8, path, plen);
    memcpy(buf + 8 + plen, &elen, 4);
    memcpy(buf + 12 + plen, etag, elen);
    memcpy(buf + 12 + plen + elen, data, len);
    mkdir(dir, 0700);
    snprintf(file, sizeof file, "%s/model.partial", dir);
    assert_int_equal(sl_fs_write_atomic(file, buf, total, 0600), SL_OK);
    free(buf);
}

/* The bytes model.partial holds (after its header), and its ETag; @bytes (may be NULL) a copy
 * of them (malloc'd). */
static size_t read_partial_bytes(const char *dir, char *etag, size_t ecap, void **bytes)
{
    char file[800];
    void *raw = NULL;
    size_t len = 0, have;
    uint32_t plen, elen;
    snprintf(file, sizeof file, "%s/model.partial", dir);
    assert_int_equal(sl_fs_read_file(file, 1 << 30, &raw, &len), SL_OK);
    assert_true(len >= 12);
    assert_memory_equal(raw, "SLDL", 4);
    memcpy(&plen, (uint8_t *)raw + 4, 4);
    assert_true(plen <= len - 12);
    memcpy(&elen, (uint8_t *)raw + 8 + plen, 4);
    assert_true(elen < ecap && elen <= len - 12 - plen);
    memcpy(etag, (uint8_t *)raw + 12 + plen, elen);
    etag[elen] = '\0';
    have = len - 12 - plen - elen;
    if (bytes != NULL) {
        *bytes = malloc(have ? have : 1);
        assert_non_null(*bytes);
        memcpy(*bytes, (uint8_t *)raw + 12 + plen + elen, have);
    }
    free(raw);
    return have;
}

typedef struct fixture {
    char dir[512], data_dir[600], state[600];
    ag_coord c;
    int64_t task;
    sl_agent_data *data;
} fixture;

/* Frames of several upload chunks: fp32 values at density 0.25 (mlp). */
#define TASK_WIRE                                                                  \
    "{\"name\":\"wire\",\"target\":1,\"quorum\":1,\"over_selection\":1,"           \
    "\"selection_window_ms\":200,\"report_deadline_ms\":8000,\"values\":\"fp32\"," \
    "\"density\":0.25,\"local_epochs\":1,\"batch\":32,\"local_lr\":0.05}"

static void fx_open_task(fixture *f, const char *name, const char *config)
{
    char err[256];
    sl_test_mkdtemp(f->dir, sizeof f->dir, name);
    snprintf(f->data_dir, sizeof f->data_dir, "%s/data", f->dir);
    snprintf(f->state, sizeof f->state, "%s/agent", f->dir);
    ag_make_data(f->data_dir, 200, 50);
    ag_coord_open(&f->c, f->dir, NULL, NULL, NULL);
    f->task = ag_create_task(&f->c, "mlp", config);
    if (sl_agent_data_load(f->data_dir, "iid", 1, 0, 1, 3, &f->data, err, sizeof err) != SL_OK)
        fail_msg("data: %s", err);
}

static void fx_open(fixture *f, const char *name)
{
    fx_open_task(f, name, TASK_ONE);
}

static void fx_close(fixture *f)
{
    ag_coord_close(&f->c);
    sl_agent_data_free(f->data);
    sl_test_rmtree(f->dir);
}

static void fx_options(const fixture *f, sl_agent_options *o, const char *url)
{
    sl_agent_options_default(o);
    o->coordinator = url ? url : f->c.url;
    o->enrolment_token = AG_ENROL;
    o->task_id = f->task;
    o->state_dir = f->state;
    o->data = f->data;
    o->retry_base_ms = 20;
    o->max_wait_ms = 1000;
    o->request_timeout_ms = 10000;
    o->seed = 11;
    o->rounds = 1;
}

/* ---- a download killed, then resumed --------------------------------------------------------- */

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

static void test_download_resumes_after_kill(void **state)
{
    fixture f;
    char task_s[32], log[700], etag[SL_CLIENT_HEADER_MAX], needle[200], *text, *p;
    sl_client_response model;
    void *raw = NULL;
    size_t len = 0, have;
    long offset;
    pid_t pid;
    ag_ack *acks;
    int found = 0;
    (void)state;
    fx_open(&f, "agent_dl_kill");
    server_model(&f.c, f.task, 1, &model);
    snprintf(task_s, sizeof task_s, "%lld", (long long)f.task);
    snprintf(log, sizeof log, "%s/agent.log", f.dir);
    {
        const char *args[] = {"--coordinator",
                              f.c.url,
                              "--task",
                              task_s,
                              "--data",
                              f.data_dir,
                              "--state-dir",
                              f.state,
                              "--enrolment-token-file",
                              f.c.enrol_file,
                              "--retry-base",
                              "20ms",
                              "--max-wait",
                              "1s",
                              "--download-chunk",
                              "16K",
                              "--once",
                              "--log-level",
                              "debug",
                              NULL};
        pid = ag_spawn_agent(args, log);
        /* killed once the first ranges of the model are on its disk */
        for (int waited = 0; !found && waited < 30000 * sl_test_time_scale(); waited += 2) {
            struct timespec ts = {0, 2000000};
            if (sl_fs_read_file(log, 1 << 24, &raw, &len) == SL_OK) {
                found = strstr(raw, "event=download ") != NULL;
                free(raw);
            }
            if (!found)
                nanosleep(&ts, NULL);
        }
        assert_true(found);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        {
            /* whole ranges, or a range torn by the kill inside its write(): what is kept is
             * the body's first bytes either way, and the second life continues from there */
            void *kept = NULL;
            have = read_partial_bytes(f.state, etag, sizeof etag, &kept);
            fprintf(stderr, "killed with %zu of %zu bytes of the model on disk\n", have,
                    model.body_len);
            assert_true(have > 0 && have < model.body_len);
            assert_memory_equal(kept, model.body, have);
            free(kept);
        }
        assert_string_equal(etag, model.etag);
        offset = file_size(log);
        pid = ag_spawn_agent(args, log);
        assert_int_equal(ag_wait(pid, 60000), 0);
    }
    /* the second life continued at the bytes kept, and its first range
     * began there (no byte of the first life's was fetched again) */
    assert_int_equal(sl_fs_read_file(log, 1 << 24, &raw, &len), SL_OK);
    text = (char *)raw + offset;
    snprintf(needle, sizeof needle, "resuming the download of /v1/models/1?task=%s at byte %zu",
             task_s, have);
    assert_non_null(strstr(text, needle));
    p = strstr(text, "event=download ");
    assert_non_null(p);
    snprintf(needle, sizeof needle, "bytes=%zu ",
             have + 16384 < model.body_len ? have + 16384 : model.body_len);
    assert_non_null(strstr(p, needle));
    assert_true(strstr(p, needle) < strchr(p, '\n'));
    free(raw);
    /* verified, cached, used: the update was accepted */
    assert_false(file_exists(f.state, "model.partial"));
    assert_file_equals(f.state, "model.frame", model.body, model.body_len);
    assert_int_equal(ag_read_acks(f.state, &acks), 1);
    free(acks);
    sl_client_response_free(&model);
    fx_close(&f);
}

/* ---- partials that do not fit -------------------------------------------------------------------
 */

typedef struct dl_log {
    uint64_t bytes[64], total[64];
    size_t n;
    unsigned accepted;
} dl_log;

static void on_download(void *ctx, const sl_agent_event *ev)
{
    dl_log *l = ctx;
    if (ev->kind == SL_AGENT_EV_DOWNLOAD && l->n < 64) {
        l->bytes[l->n] = ev->bytes;
        l->total[l->n++] = ev->total;
    }
    if (ev->kind == SL_AGENT_EV_ACCEPTED)
        l->accepted++;
}

static void run_one(fixture *f, dl_log *l, sl_agent_stats *st)
{
    sl_agent_options o;
    sl_agent *a = NULL;
    char err[256];
    fx_options(f, &o, NULL);
    o.download_chunk_bytes = 64 * 1024;
    o.on_event = on_download;
    o.event_ctx = l;
    if (sl_agent_create(&o, &a, err, sizeof err) != SL_OK)
        fail_msg("agent: %s", err);
    assert_int_equal(sl_agent_run(a), SL_OK);
    assert_int_equal(sl_agent_get_stats(a, st), SL_OK);
    sl_agent_free(a);
}

static void test_partial_of_another_body(void **state)
{
    fixture f;
    char path[128];
    uint8_t junk[5000];
    sl_client_response model;
    sl_agent_stats st;
    dl_log l;
    (void)state;
    fx_open(&f, "agent_dl_etag");
    server_model(&f.c, f.task, 1, &model);
    memset(junk, 'x', sizeof junk);
    memset(&l, 0, sizeof l);
    snprintf(path, sizeof path, "/v1/models/1?task=%lld", (long long)f.task);
    write_partial(f.state, path,
                  "\"0000000000000000000000000000000000000000000000000000000000000000\"", junk,
                  sizeof junk);
    run_one(&f, &l, &st);
    /* it tried to continue, the server sent the whole other body, it took it */
    assert_int_equal(st.download_resumes, 1);
    assert_true(l.n >= 1);
    assert_int_equal(l.bytes[0], model.body_len);
    assert_int_equal(l.total[0], model.body_len);
    assert_int_equal(l.accepted, 1);
    assert_false(file_exists(f.state, "model.partial"));
    assert_file_equals(f.state, "model.frame", model.body, model.body_len);
    sl_client_response_free(&model);
    fx_close(&f);
}

static void test_partial_damaged(void **state)
{
    fixture f;
    char path[128];
    uint8_t kept[5000];
    sl_client_response model;
    sl_agent_stats st;
    dl_log l;
    size_t restart = 0;
    (void)state;
    fx_open(&f, "agent_dl_damaged");
    server_model(&f.c, f.task, 1, &model);
    memcpy(kept, model.body, sizeof kept);
    kept[100] ^= 0x40; /* the right ETag, a wrong byte */
    memset(&l, 0, sizeof l);
    snprintf(path, sizeof path, "/v1/models/1?task=%lld", (long long)f.task);
    write_partial(f.state, path, model.etag, kept, sizeof kept);
    run_one(&f, &l, &st);
    /* continued at 5000 to the end, failed the SHA-256, started from zero */
    assert_int_equal(st.download_resumes, 1);
    assert_true(l.n >= 2);
    assert_int_equal(l.bytes[0], sizeof kept + 64 * 1024);
    for (size_t i = 1; i < l.n && restart == 0; i++)
        if (l.bytes[i] == 64 * 1024)
            restart = i;
    assert_true(restart > 0);
    assert_int_equal(l.bytes[restart - 1], model.body_len);
    assert_int_equal(l.bytes[l.n - 1], model.body_len);
    assert_int_equal(l.accepted, 1);
    assert_false(file_exists(f.state, "model.partial"));
    assert_file_equals(f.state, "model.frame", model.body, model.body_len);
    sl_client_response_free(&model);
    fx_close(&f);
}

/* ---- bytes on the wire ------------------------------------------------------------------------
 */

typedef struct wire {
    e2e_proxy *proxy;
    unsigned cut_every; /* cut one transfer in this many (0: none) */
    uint64_t rng;
    size_t chunk, dchunk;
    unsigned transfers, armed;
    int cuts; /* made by the proxy */
    /* the transfer being measured */
    unsigned long long at;
    uint64_t frame;
    /* totals: [0] downloads, [1] uploads */
    unsigned long long wire[2], frames[2];
    double worst[2];
    unsigned count[2];
} wire;

static unsigned long long wire_now(wire *w)
{
    unsigned long long up, down;
    e2e_proxy_bytes(w->proxy, &up, &down);
    return up + down;
}

/* Before each request of a transfer: cut one in cut_every at a uniform
 * byte of what it moves in direction @up (1) or down (0). */
static void maybe_cut(wire *w, int up, uint64_t expected)
{
    unsigned t = w->transfers++;
    if (w->cut_every > 0 && t % w->cut_every == w->cut_every / 2) {
        long at = 1 + (long)(sl_test_rand(&w->rng) % (expected > 1 ? expected : 1));
        if (up)
            e2e_proxy_cut_up(w->proxy, at, 1);
        else
            e2e_proxy_cut_down(w->proxy, at, 1);
        w->armed++;
    } else {
        e2e_proxy_cut_up(w->proxy, -1, 1);
        e2e_proxy_cut_down(w->proxy, -1, 1);
    }
}

static void account(wire *w, int kind, uint64_t frame)
{
    unsigned long long used = wire_now(w) - w->at;
    double ratio = frame > 0 ? (double)used / (double)frame : 0;
    e2e_proxy_cut_up(w->proxy, -1, 1);
    e2e_proxy_cut_down(w->proxy, -1, 1);
    if (frame == 0)
        return;
    w->wire[kind] += used;
    w->frames[kind] += frame;
    w->count[kind]++;
    if (ratio > w->worst[kind])
        w->worst[kind] = ratio;
}

static void on_wire(void *ctx, const sl_agent_event *ev)
{
    wire *w = ctx;
    switch (ev->kind) {
    case SL_AGENT_EV_CHECKIN:
        if (ev->value > 0) { /* selected: the download comes next */
            w->at = wire_now(w);
            maybe_cut(w, 0, w->dchunk);
        }
        break;
    case SL_AGENT_EV_DOWNLOAD:
        if (ev->bytes < ev->total)
            maybe_cut(w, 0, ev->total - ev->bytes < w->dchunk ? ev->total - ev->bytes : w->dchunk);
        break;
    case SL_AGENT_EV_MODEL:
        account(w, 0, ev->bytes);
        break;
    case SL_AGENT_EV_PREPARED:
        w->at = wire_now(w);
        w->frame = ev->bytes;
        maybe_cut(w, 1, (ev->bytes < w->chunk ? ev->bytes : w->chunk) + 700);
        break;
    case SL_AGENT_EV_PROGRESS:
        if (ev->bytes < ev->total)
            maybe_cut(w, 1,
                      (ev->total - ev->bytes < w->chunk ? ev->total - ev->bytes : w->chunk) + 700);
        break;
    case SL_AGENT_EV_ACCEPTED:
        account(w, 1, w->frame);
        break;
    default:
        break;
    }
}

static void run_wire(const char *name, unsigned cut_every, unsigned rounds, wire *w)
{
    fixture f;
    sl_agent_options o;
    sl_agent *a = NULL;
    sl_agent_stats st;
    char url[64], err[256];
    fx_open_task(&f, name, TASK_WIRE);
    memset(w, 0, sizeof *w);
    w->proxy = e2e_proxy_start((int)strtol(strrchr(f.c.url, ':') + 1, NULL, 10));
    w->cut_every = cut_every;
    w->rng = 0xC0FFEE;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", e2e_proxy_port(w->proxy));
    fx_options(&f, &o, url);
    o.rounds = rounds;
    o.on_event = on_wire;
    o.event_ctx = w;
    w->chunk = o.chunk_bytes;
    w->dchunk = o.download_chunk_bytes;
    if (sl_agent_create(&o, &a, err, sizeof err) != SL_OK)
        fail_msg("agent: %s", err);
    assert_int_equal(sl_agent_run(a), SL_OK);
    assert_int_equal(sl_agent_get_stats(a, &st), SL_OK);
    sl_agent_free(a);
    w->cuts = e2e_proxy_cuts(w->proxy);
    e2e_proxy_stop(w->proxy);
    assert_int_equal(st.accepted, rounds);
    assert_int_equal(w->count[1], rounds);
    assert_true(w->count[0] >= 1);
    fprintf(
        stderr,
        "%s (%u of %u transfers armed, %d cuts): downloads %llu wire / %llu frame bytes = %.3fx "
        "(worst %.3fx); uploads %llu / %llu = %.3fx (worst %.3fx)\n",
        name, w->armed, w->transfers, w->cuts, w->wire[0], w->frames[0],
        (double)w->wire[0] / (double)w->frames[0], w->worst[0], w->wire[1], w->frames[1],
        (double)w->wire[1] / (double)w->frames[1], w->worst[1]);
    fx_close(&f);
}

static void test_wire_bytes(void **state)
{
    wire clean, cut;
    (void)state;
    run_wire("agent_wire_clean", 0, 3, &clean);
    /* clean: every download and upload within 1.1x its frame */
    assert_true(clean.worst[0] <= 1.1);
    assert_true(clean.worst[1] <= 1.1);
    run_wire("agent_wire_cut", 5, 6, &cut);
    /* one transfer in five was cut (the proxy made the cuts) */
    assert_true(cut.armed >= 4);
    assert_true(cut.cuts >= 4);
    assert_true(cut.armed * 5 >= cut.transfers - 4);
    /* 20% of transfers cut: within 1.5x over the run */
    assert_true((double)cut.wire[0] <= 1.5 * (double)cut.frames[0]);
    assert_true((double)cut.wire[1] <= 1.5 * (double)cut.frames[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_download_resumes_after_kill),
        cmocka_unit_test(test_partial_of_another_body),
        cmocka_unit_test(test_partial_damaged),
        cmocka_unit_test(test_wire_bytes),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
