/*
 * A device's own data through the task's data contract, with the real
 * coordinator and the starling-agent program:
 *  - a task carries a contract; the agent fetches it (checked against the
 *    check-in's SHA-256, cached), reads its CSV file through it
 *    (standardised, class names), trains on the samples it does not hold out
 *    and reports its federated evaluation of the base model on those it
 *    does: the round's evaluation aggregates it;
 *  - bad data (a class outside the task's, a value that is not a number, a
 *    missing column) and too few samples are refused with the reason: the
 *    agent exits 5, the coordinator records "no usable data: ..." per
 *    device, and nothing is uploaded;
 *  - a CSV file that grows while the agent runs: the next participation
 *    trains on the new rows too (its update weighs more samples), and a row
 *    still being written is not read;
 *  - the store of samples stays under --data_memory with a file ten times
 *    larger (the newest kept).
 */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../support/sl_test.h"
#include "agent_harness.h"

#define TASK(name)                                                                            \
    "{\"name\":\"" name "\",\"target\":1,\"quorum\":1,\"over_selection\":1,"                  \
    "\"selection_window_ms\":300,\"report_deadline_ms\":20000,\"values\":\"fp32\","           \
    "\"density\":1,\"local_epochs\":2,\"batch\":16,\"local_lr\":0.05,\"local_momentum\":0.9," \
    "\"min_samples\":1}"

/* 4 features -> 16 -> 3 classes */
static const char SPEC[] =
    "{\"starling_model\":1,\"name\":\"flowers\","
    "\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],"
    "\"params\":[{\"name\":\"l1.weight\",\"shape\":[16,4]},{\"name\":\"l1.bias\",\"shape\":[16]},"
    "{\"name\":\"l2.weight\",\"shape\":[3,16]},{\"name\":\"l2.bias\",\"shape\":[3]}],"
    "\"nodes\":[{\"op\":\"Gemm\",\"inputs\":[\"x\",\"l1.weight\",\"l1.bias\"],\"outputs\":[\"h\"]},"
    "{\"op\":\"Relu\",\"inputs\":[\"h\"],\"outputs\":[\"a\"]},"
    "{\"op\":\"Gemm\",\"inputs\":[\"a\",\"l2.weight\",\"l2.bias\"],\"outputs\":[\"logits\"]}],"
    "\"output\":\"logits\",\"loss\":{\"op\":\"cross_entropy\"},\"metrics\":[\"accuracy\"]}";

static const char CONTRACT[] =
    "{\"contract\":1,\"input\":{\"features\":[\"petal\",\"sepal\",\"stem\",\"leaf\"]},"
    "\"label\":{\"kind\":\"class\",\"column\":\"species\","
    "\"classes\":[\"setosa\",\"versicolor\",\"virginica\"]},"
    "\"preprocess\":{\"standardize\":{\"mean\":[1,2,3,4],\"std\":[2,2,2,2]}},"
    "\"min_samples\":20,\"evaluation\":{\"share\":0.25}}";

static const char *const NAMES[3] = {"setosa", "versicolor", "virginica"};

/* @n rows of three separable classes (columns in another order than the contract's). */
static void write_rows(FILE *f, int from, int n)
{
    for (int i = from; i < from + n; i++) {
        int k = i % 3;
        double u = (double)((i * 7919) % 101) / 101.0 - 0.5;
        fprintf(f, "%d,%g,%s,%g,%g,%g\n", i, 4 + 3 * k + u, NAMES[k], 1 + k + u * 0.5, 2 - k + u,
                3 + 0.5 * k - u);
    }
}

static void write_csv(const char *path, int n)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("time,leaf,species,petal,sepal,stem\n", f);
    write_rows(f, 0, n);
    fclose(f);
}

static int run_agent(const ag_coord *c, int64_t task, const char *data, const char *state,
                     const char *log, const char *const *extra, int wait)
{
    const char *args[48];
    char task_s[32];
    size_t n = 0;
    pid_t pid;
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    {
        const char *base[] = {"--coordinator", c->url,         "--task",
                              task_s,          "--data",       data,
                              "--state-dir",   state,          "--enrolment-token",
                              AG_ENROL,        "--retry-base", "20ms",
                              "--max-wait",    "1s",           "--log-level",
                              "info"};
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
            args[n++] = base[i];
    }
    for (size_t i = 0; extra[i] != NULL && n + 1 < sizeof args / sizeof args[0]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    pid = ag_spawn_agent(args, log);
    return wait ? ag_wait(pid, 120000) : (int)pid;
}

static void dump(const char *log)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "tail -25 %s >&2", log);
    (void)!system(cmd);
}

static char *slurp(const char *path)
{
    void *text = NULL;
    size_t len;
    if (sl_fs_read_file(path, 1 << 22, &text, &len) != SL_OK)
        fail_msg("cannot read %s", path);
    return text;
}

/* The num_samples of every update of @task, in upload order, into @out (at most @cap). */
static size_t update_samples(const ag_coord *c, int64_t task, int64_t device, int64_t *out,
                             size_t cap)
{
    char db[600];
    sqlite3 *h;
    sqlite3_stmt *st;
    size_t n = 0;
    snprintf(db, sizeof db, "%s/starling.db", c->dir);
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT u.num_samples FROM updates u JOIN rounds r ON "
                                        "r.id = u.round_id WHERE r.task_id = ?1 AND "
                                        "u.device_id = ?2 ORDER BY u.id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, task);
    sqlite3_bind_int64(st, 2, device);
    while (sqlite3_step(st) == SQLITE_ROW && n < cap)
        out[n++] = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static char *get_json(ag_coord *c, const char *path)
{
    sl_client_response r;
    char *body;
    ag_admin(c, "GET", path, NULL, &r);
    if (r.status != 200)
        fail_msg("GET %s: %ld", path, r.status);
    body = strdup((const char *)r.body);
    sl_client_response_free(&r);
    return body;
}

/* The device of @state lists a refusal of @task that says @words. */
static void expect_refusal(ag_coord *c, const char *state, int64_t task, const char *words)
{
    char path[64], want[64], *body;
    snprintf(path, sizeof path, "/v1/devices/%lld", (long long)ag_device_id(state));
    body = get_json(c, path);
    snprintf(want, sizeof want, "{\"task_id\":%lld,\"reason\":\"", (long long)task);
    if (strstr(body, want) == NULL || strstr(body, words) == NULL)
        fail_msg("device %s: no refusal of task %lld saying \"%s\": %s", state, (long long)task,
                 words, body);
    free(body);
}

/* The agent of @state refuses its data of @task with @words (exit 5), uploads nothing, and the
 * coordinator lists the reason. */
static void refused(ag_coord *c, int64_t task, const char *src, const char *state, const char *log,
                    const char *words)
{
    const char *extra[] = {"--once", NULL};
    uint64_t before, after, closed;
    char *text;
    int code;
    ag_count_task(c, task, &before, &closed);
    remove(log);
    code = run_agent(c, task, src, state, log, extra, 1);
    if (code != 5) {
        dump(log);
        fail_msg("%s: the agent exited %d, not 5 (refused)", src, code);
    }
    text = slurp(log);
    if (strstr(text, words) == NULL)
        fail_msg("%s: the log does not say \"%s\": %s", src, words, text);
    free(text);
    expect_refusal(c, state, task, words);
    ag_count_task(c, task, &after, &closed);
    assert_int_equal(after, before);
}

static void test_contract_csv(void **state)
{
    char dir[512], csv[600], src[700], dev[600], log[600], path[700], *body, *p;
    ag_coord c;
    int64_t task, samples[4];
    uint64_t updates, closed;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_data");
    snprintf(csv, sizeof csv, "%s/flowers.csv", dir);
    snprintf(dev, sizeof dev, "%s/dev", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    write_csv(csv, 120);
    snprintf(src, sizeof src, "csv:%s?timestamp=time", csv);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_docs(&c, SPEC, NULL, CONTRACT, TASK("flowers"));
    {
        /* the task serves its contract as stored, with its SHA-256 as the ETag */
        snprintf(path, sizeof path, "/v1/tasks/%lld/data-contract", (long long)task);
        body = get_json(&c, path);
        assert_non_null(strstr(body, "\"evaluation\":{\"share\":0.25}"));
        free(body);
    }
    {
        const char *extra[] = {"--once", NULL};
        int code = run_agent(&c, task, src, dev, log, extra, 1);
        if (code != 0) {
            dump(log);
            fail_msg("starling-agent on %s exited %d", src, code);
        }
    }
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 1);
    {
        /* trained on the samples not held out: 120 rows, about a quarter held out */
        size_t n = update_samples(&c, task, ag_device_id(dev), samples, 4);
        assert_int_equal(n, 1);
        if (samples[0] < 70 || samples[0] > 110)
            fail_msg("the update weighs %lld samples of 120 (a quarter held out)",
                     (long long)samples[0]);
        /* the round's federated evaluation: this device, on the rest */
        snprintf(path, sizeof path, "/v1/rounds/%lld", (long long)1); /* the task's first round */
        body = get_json(&c, path);
        p = strstr(body, "\"evaluation\":{\"devices\":1,\"samples\":");
        if (p == NULL)
            fail_msg("no federated evaluation in the round: %s", body);
        assert_int_equal(
            strtoll(p + strlen("\"evaluation\":{\"devices\":1,\"samples\":"), NULL, 10),
            120 - samples[0]);
        assert_non_null(strstr(p, "\"accuracy\":"));
        free(body);
    }
    {
        /* the status and the metrics name the newest federated evaluation */
        sl_client_response r;
        body = get_json(&c, "/v1/status");
        p = strstr(body, "\"evaluation\":{\"devices\":1,");
        if (p == NULL || strstr(p, "\"round_id\":1") == NULL)
            fail_msg("no federated evaluation in the status: %s", body);
        free(body);
        ag_admin(&c, "GET", "/metrics", NULL, &r);
        assert_int_equal(r.status, 200);
        if (strstr((const char *)r.body,
                   "starling_federated_eval_accuracy{task=\"1\",round=\"1\"} ") == NULL)
            fail_msg("no federated evaluation in /metrics");
        sl_client_response_free(&r);
    }
    {
        /* the contract is cached, byte for byte what the coordinator serves */
        char *cached;
        snprintf(path, sizeof path, "%s/data_contract.json", dev);
        cached = slurp(path);
        assert_string_equal(cached, CONTRACT);
        free(cached);
    }
    sl_test_rmtree(dir);
    ag_coord_close(&c);
}

static int count_task(void *ctx, int64_t id)
{
    (void)id;
    ++*(int64_t *)ctx;
    return 0;
}

/* A contract that is not valid is refused when the task is created: 422 naming the member,
 * nothing stored; a data_contract that is not an object: 400. */
static void test_bad_contract_task(void **state)
{
    char dir[512], body[1024];
    sl_client_response r;
    ag_coord c;
    int64_t before = 0, after = 0;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_bad_contract");
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    ag_create_task_docs(&c, SPEC, NULL, CONTRACT, TASK("good"));
    assert_int_equal(sl_store_list_tasks(c.store, count_task, &before), 0);
    snprintf(body, sizeof body,
             "{\"config\":{\"name\":\"bad\",\"target\":1},\"layout\":\"w 1\",\"model\":\"AAAA\","
             "\"data_contract\":%s}",
             "{\"input\":{\"features\":[\"a\"]},\"label\":{\"kind\":\"colour\"}}");
    ag_admin(&c, "POST", "/v1/tasks", body, &r);
    /* the contract is checked before the initial model is decoded */
    if (r.status != 422 || strstr((const char *)r.body, "\"reason\":\"data_contract\"") == NULL ||
        strstr((const char *)r.body, "label.kind") == NULL)
        fail_msg("a bad contract: %ld %s", r.status, (const char *)r.body);
    sl_client_response_free(&r);
    assert_int_equal(sl_store_list_tasks(c.store, count_task, &after), 0);
    assert_int_equal(after, before);
    snprintf(body, sizeof body,
             "{\"config\":{\"name\":\"x\",\"target\":1},\"layout\":\"w 1\","
             "\"model\":\"AAAA\",\"data_contract\":[1]}");
    ag_admin(&c, "POST", "/v1/tasks", body, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr((const char *)r.body, "data_contract"));
    sl_client_response_free(&r);
    sl_test_rmtree(dir);
    ag_coord_close(&c);
}

static void test_bad_data_refused(void **state)
{
    char dir[512], csv[600], src[1400], dev[600], log[600];
    ag_coord c;
    int64_t task;
    FILE *f;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_bad_data");
    snprintf(csv, sizeof csv, "%s/flowers.csv", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_docs(&c, SPEC, NULL, CONTRACT, TASK("bad"));
    snprintf(src, sizeof src, "csv:%s", csv);
    /* a class outside the task's */
    write_csv(csv, 60);
    f = fopen(csv, "a");
    assert_non_null(f);
    fputs("60,1,rose,2,3,4\n", f);
    fclose(f);
    snprintf(dev, sizeof dev, "%s/dev1", dir);
    refused(&c, task, src, dev, log, "no usable data: ");
    refused(&c, task, src, dev, log, "line 62, column 3 (species): unknown class name");
    /* a value that is not a number */
    write_csv(csv, 60);
    f = fopen(csv, "a");
    assert_non_null(f);
    fputs("60,1,setosa,2,x3,4\n", f);
    fclose(f);
    snprintf(dev, sizeof dev, "%s/dev2", dir);
    refused(&c, task, src, dev, log, "line 62, column 5 (sepal): not a number");
    /* a column the contract names and the file lacks */
    f = fopen(csv, "w");
    assert_non_null(f);
    fputs("time,leaf,species,petal,sepal\n1,2,setosa,3,4\n", f);
    fclose(f);
    snprintf(dev, sizeof dev, "%s/dev3", dir);
    refused(&c, task, src, dev, log, "stem");
    /* too few samples for the task's min_samples (20) */
    write_csv(csv, 12);
    snprintf(dev, sizeof dev, "%s/dev4", dir);
    refused(&c, task, src, dev, log, "too few samples: ");
    /* a source the contract's input does not fit (npy: needs x and y arrays) */
    snprintf(src, sizeof src, "npy:%.300s/none.npy?y=%.300s/none_y.npy", dir, dir);
    snprintf(dev, sizeof dev, "%s/dev5", dir);
    refused(&c, task, src, dev, log, "none.npy");
    {
        /* every refusal is listed with its device: GET /v1/devices and `starling devices` */
        char cmd[3000], out[700], line[1024];
        int seen = 0;
        char *body = get_json(&c, "/v1/devices?limit=10");
        if (strstr(body, "\"refusals\":[{\"task_id\":1,\"reason\":\"no usable data: ") == NULL ||
            strstr(body, "too few samples: ") == NULL)
            fail_msg("the device list does not show the refusals: %s", body);
        free(body);
        snprintf(out, sizeof out, "%s/devices.txt", dir);
        snprintf(cmd, sizeof cmd, "%s devices --url %s --token-file %s > %s 2>&1", SL_STARLING_BIN,
                 c.url, c.admin_file, out);
        assert_int_equal(system(cmd), 0);
        f = fopen(out, "r");
        assert_non_null(f);
        while (fgets(line, sizeof line, f) != NULL)
            seen += strstr(line, "refuses task 1: no usable data: ") != NULL;
        fclose(f);
        assert_int_equal(seen, 4);
    }
    sl_test_rmtree(dir);
    ag_coord_close(&c);
}

static void put_file(const char *path, const void *bytes, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, len, fp), len);
    fclose(fp);
}

/* A .npy file of @rows x 4 float32 values (v, v+1, ...), one of them NaN when @nan. */
static void write_npy(const char *path, int rows, int nan)
{
    char hdr[128];
    float *v = malloc((size_t)rows * 4 * sizeof *v);
    FILE *fp = fopen(path, "wb");
    int len = snprintf(hdr + 10, sizeof hdr - 10,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 4), }", rows);
    assert_non_null(fp);
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    while ((10 + len + 1) % 64 != 0)
        hdr[10 + len++] = ' ';
    hdr[10 + len++] = '\n';
    hdr[8] = (char)(len & 0xff);
    hdr[9] = (char)(len >> 8);
    for (int i = 0; i < rows * 4; i++)
        v[i] = (float)i;
    if (nan)
        v[rows * 2 + 1] = NAN;
    assert_int_equal(fwrite(hdr, 1, (size_t)(10 + len), fp), (size_t)(10 + len));
    assert_int_equal(fwrite(v, sizeof *v, (size_t)rows * 4, fp), (size_t)rows * 4);
    fclose(fp);
    free(v);
}

/* Images, audio and arrays the task's contract cannot use: refused, nothing uploaded. */
static void test_bad_media_refused(void **state)
{
    char dir[512], src[1400], dev[600], log[600], path[900];
    static const char img_contract[] =
        "{\"input\":{\"shape\":[4]},\"label\":{\"kind\":\"class\","
        "\"classes\":[\"setosa\",\"versicolor\",\"virginica\"]},"
        "\"preprocess\":{\"image\":{\"width\":2,\"height\":2,\"channels\":1}}}";
    static const char wav_contract[] =
        "{\"input\":{\"shape\":[4]},\"label\":{\"kind\":\"class\","
        "\"classes\":[\"setosa\",\"versicolor\",\"virginica\"]},"
        "\"preprocess\":{\"audio\":{\"n_fft\":64,\"hop\":32,\"n_mels\":2,\"frames\":2}}}";
    static const char npy_u8_contract[] =
        "{\"input\":{\"shape\":[4],\"dtype\":\"uint8\"},\"label\":{\"kind\":\"class\","
        "\"classes\":3}}";
    static const char npy_contract[] =
        "{\"input\":{\"shape\":[4]},\"label\":{\"kind\":\"class\",\"classes\":3}}";
    ag_coord c;
    int64_t task;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_bad_media");
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    {
        /* a corrupt PNG among the class folders */
        static const unsigned char png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n',
                                            0,    0,   0,   13,  'I',  'H',  'D',  'R'};
        task = ag_create_task_docs(&c, SPEC, NULL, img_contract, TASK("images"));
        snprintf(path, sizeof path, "%s/img", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/img/versicolor", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/img/versicolor/leaf.png", dir);
        put_file(path, png, sizeof png);
        snprintf(src, sizeof src, "images:%.600s/img", dir);
        snprintf(dev, sizeof dev, "%s/dev1", dir);
        refused(&c, task, src, dev, log, "leaf.png");
    }
    {
        /* a WAV at 22050 Hz where the task wants 16 kHz */
        unsigned char wav[44 + 200];
        uint32_t rate = 22050, brate = 44100, size = 200, riff = 36 + 200;
        memset(wav, 0, sizeof wav);
        memcpy(wav, "RIFF", 4);
        memcpy(wav + 4, &riff, 4);
        memcpy(wav + 8, "WAVEfmt ", 8);
        wav[16] = 16;
        wav[20] = 1; /* PCM */
        wav[22] = 1; /* mono */
        memcpy(wav + 24, &rate, 4);
        memcpy(wav + 28, &brate, 4);
        wav[32] = 2;
        wav[34] = 16;
        memcpy(wav + 36, "data", 4);
        memcpy(wav + 40, &size, 4);
        task = ag_create_task_docs(&c, SPEC, NULL, wav_contract, TASK("audio"));
        snprintf(path, sizeof path, "%s/wav", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/wav/setosa", dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof path, "%s/wav/setosa/hello.wav", dir);
        put_file(path, wav, sizeof wav);
        snprintf(src, sizeof src, "wav:%.600s/wav", dir);
        snprintf(dev, sizeof dev, "%s/dev2", dir);
        refused(&c, task, src, dev, log, "22050 Hz; the task wants 16000 Hz");
    }
    {
        /* NumPy arrays: a NaN; then labels outside the task's classes */
        int64_t y[40];
        char ypath[900];
        task = ag_create_task_docs(&c, SPEC, NULL, npy_contract, TASK("arrays"));
        snprintf(path, sizeof path, "%s/x.npy", dir);
        snprintf(ypath, sizeof ypath, "%s/y.npy", dir);
        write_npy(path, 40, 1);
        {
            char hdr[128];
            int len = snprintf(hdr + 10, sizeof hdr - 10,
                               "{'descr': '<i8', 'fortran_order': False, 'shape': (40,), }");
            FILE *fp = fopen(ypath, "wb");
            assert_non_null(fp);
            memcpy(hdr, "\x93NUMPY\x01\x00", 8);
            while ((10 + len + 1) % 64 != 0)
                hdr[10 + len++] = ' ';
            hdr[10 + len++] = '\n';
            hdr[8] = (char)len;
            hdr[9] = 0;
            for (int i = 0; i < 40; i++)
                y[i] = i % 3;
            y[7] = 5;
            assert_int_equal(fwrite(hdr, 1, (size_t)(10 + len), fp), (size_t)(10 + len));
            assert_int_equal(fwrite(y, sizeof *y, 40, fp), 40);
            fclose(fp);
        }
        snprintf(src, sizeof src, "npy:%.400s?y=%.400s", path, ypath);
        snprintf(dev, sizeof dev, "%s/dev3", dir);
        refused(&c, task, src, dev, log, "x.npy");
        write_npy(path, 40, 0);
        snprintf(dev, sizeof dev, "%s/dev4", dir);
        refused(&c, task, src, dev, log, "outside the task's 3 classes");
        /* a wrong shape: rows of 3 values where the task's sample has 4 */
        {
            float v[40 * 3] = {0};
            char hdr[128];
            int len = snprintf(hdr + 10, sizeof hdr - 10,
                               "{'descr': '<f4', 'fortran_order': False, 'shape': (40, 3), }");
            FILE *fp = fopen(path, "wb");
            assert_non_null(fp);
            memcpy(hdr, "\x93NUMPY\x01\x00", 8);
            while ((10 + len + 1) % 64 != 0)
                hdr[10 + len++] = ' ';
            hdr[10 + len++] = '\n';
            hdr[8] = (char)len;
            hdr[9] = 0;
            assert_int_equal(fwrite(hdr, 1, (size_t)(10 + len), fp), (size_t)(10 + len));
            assert_int_equal(fwrite(v, sizeof *v, 40 * 3, fp), 40 * 3);
            fclose(fp);
        }
        snprintf(dev, sizeof dev, "%s/dev5", dir);
        refused(&c, task, src, dev, log, "x has 3 values a row; the task's sample has 4");
        /* a dtype the reader does not take (int16) */
        write_npy(path, 40, 0);
        {
            FILE *fp = fopen(path, "r+b");
            assert_non_null(fp);
            fseek(fp, 10 + 11, SEEK_SET); /* '<f4' -> '<i2' */
            fputs("<i2", fp);
            fclose(fp);
        }
        snprintf(dev, sizeof dev, "%s/dev6", dir);
        refused(&c, task, src, dev, log, "dtype '<i2'");
        /* a truncated array: the file ends before its declared data */
        write_npy(path, 40, 0);
        assert_int_equal(truncate(path, 64 + 40 * 4 * 4 - 7), 0);
        snprintf(dev, sizeof dev, "%s/dev7", dir);
        refused(&c, task, src, dev, log, "bytes where the header says");
        /* an empty file */
        put_file(path, "", 0);
        snprintf(dev, sizeof dev, "%s/dev8", dir);
        refused(&c, task, src, dev, log, "x.npy");
        /* the element type the task's contract declares (uint8 pixels, here float32 arrays) */
        write_npy(path, 40, 0);
        task = ag_create_task_docs(&c, SPEC, NULL, npy_u8_contract, TASK("arrays-u8"));
        snprintf(dev, sizeof dev, "%s/dev9", dir);
        refused(&c, task, src, dev, log,
                "x holds float32; the task's contract says input.dtype "
                "uint8");
    }
    sl_test_rmtree(dir);
    ag_coord_close(&c);
}

/* A contract the model does not fit: the device says so (the coordinator does not read
 * specs), nothing is uploaded. */
static void test_model_does_not_fit(void **state)
{
    char dir[512], csv[600], src[700], dev[600], log[600];
    static const char three[] = "{\"input\":{\"features\":[\"petal\",\"sepal\",\"stem\"]},"
                                "\"label\":{\"kind\":\"class\",\"column\":\"species\","
                                "\"classes\":[\"setosa\",\"versicolor\",\"virginica\"]}}";
    static const char four_classes[] =
        "{\"input\":{\"features\":[\"petal\",\"sepal\",\"stem\",\"leaf\"]},"
        "\"label\":{\"kind\":\"class\",\"column\":\"species\","
        "\"classes\":[\"setosa\",\"versicolor\",\"virginica\",\"rose\"]}}";
    ag_coord c;
    int64_t task;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_fit");
    snprintf(csv, sizeof csv, "%s/flowers.csv", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    write_csv(csv, 60);
    snprintf(src, sizeof src, "csv:%s", csv);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_docs(&c, SPEC, NULL, three, TASK("three"));
    snprintf(dev, sizeof dev, "%s/dev1", dir);
    refused(&c, task, src, dev, log,
            "the model takes 4 values per sample; the task's data "
            "contract makes 3");
    task = ag_create_task_docs(&c, SPEC, NULL, four_classes, TASK("four"));
    snprintf(dev, sizeof dev, "%s/dev2", dir);
    refused(&c, task, src, dev, log, "4 classes need a cross_entropy model of 4 outputs");
    sl_test_rmtree(dir);
    ag_coord_close(&c);
}

/* Wait until @device has @n updates of @task stored; their samples into @out. */
static void wait_updates(const ag_coord *c, int64_t task, int64_t device, size_t n, int64_t *out,
                         const char *log)
{
    for (int i = 0; i < 600; i++) {
        if (device > 0 && update_samples(c, task, device, out, 8) >= n)
            return;
        usleep(100 * 1000);
    }
    dump(log);
    fail_msg("device %lld: fewer than %zu updates after 60 s", (long long)device, n);
}

static void test_growth(void **state)
{
    char dir[512], csv[600], src[1400], dev[600], log[600];
    ag_coord c;
    int64_t task, samples[8], device = 0;
    pid_t pid;
    FILE *f;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_growth");
    snprintf(csv, sizeof csv, "%s/flowers.csv", dir);
    snprintf(dev, sizeof dev, "%s/dev", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    write_csv(csv, 60);
    snprintf(src, sizeof src, "csv:%s", csv);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task_docs(&c, SPEC, NULL, CONTRACT, TASK("growth"));
    {
        const char *extra[] = {"--rounds", "2", "--data_refresh", "0", NULL};
        pid = (pid_t)run_agent(&c, task, src, dev, log, extra, 0);
    }
    for (int i = 0; i < 300 && device <= 0; i++) {
        char idf[700];
        struct stat st;
        snprintf(idf, sizeof idf, "%s/device.id", dev);
        if (stat(idf, &st) == 0 && st.st_size > 0)
            device = ag_device_id(dev);
        else
            usleep(100 * 1000);
    }
    wait_updates(&c, task, device, 1, samples, log);
    /* more rows arrive, and a last one still being written (no newline yet) */
    f = fopen(csv, "a");
    assert_non_null(f);
    write_rows(f, 60, 60);
    fputs("120,1,setosa,2", f);
    fclose(f);
    if (ag_wait(pid, 120000) != 0) {
        dump(log);
        fail_msg("the agent did not finish its two rounds");
    }
    assert_int_equal(update_samples(&c, task, device, samples, 8), 2);
    /* the second participation trained on the 60 new rows too (a quarter held out), and not on
     * the half row */
    if (!(samples[1] > samples[0] + 30 && samples[1] < samples[0] + 60))
        fail_msg("updates weigh %lld then %lld samples: the 60 new rows are not in the second",
                 (long long)samples[0], (long long)samples[1]);
    sl_test_rmtree(dir);
    ag_coord_close(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contract_csv),       cmocka_unit_test(test_bad_contract_task),
        cmocka_unit_test(test_bad_data_refused),   cmocka_unit_test(test_bad_media_refused),
        cmocka_unit_test(test_model_does_not_fit), cmocka_unit_test(test_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
