/*
 * The store: every entity's typed functions, idempotency, migrations, retention, backup.
 *
 * `test_store` runs every test on the SQLite backend; `test_store pg` runs the tests of the
 * store's contract (all but the SQLite file's own: group commit, checkpoints, backup, old
 * schemas, corrupt and locked files) on the PostgreSQL backend, each in a fresh database
 * of a throwaway cluster (tests/support/sl_pg.h): both backends pass the same assertions.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../support/sl_store_test.h"
#include "store_int.h"
#ifdef SL_HAVE_PG
#include <libpq-fe.h>

#include "../../support/sl_pg.h"
#endif

typedef struct fixture {
    char dir[512];
    char uri[400]; /* the PostgreSQL run's database; "" for SQLite */
    sl_store *s;
    sl_clock_manual clock;
} fixture;

static int g_pg_mode; /* the PostgreSQL run */
#ifdef SL_HAVE_PG
static sl_test_pg g_pg;

/* A fresh database of the cluster for one test, as the store's URI. */
static void new_database(fixture *f)
{
    static int n;
    char sql[64], ci[300];
    PGconn *c;
    PGresult *r;
    snprintf(ci, sizeof ci, "host=%s user=starling dbname=postgres", g_pg.dir);
    c = PQconnectdb(ci);
    snprintf(sql, sizeof sql, "CREATE DATABASE t%d", ++n);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    snprintf(f->uri, sizeof f->uri, "postgresql://starling@/t%d?host=%s", n, g_pg.dir);
}
#endif

static sl_store *open_store(fixture *f)
{
    sl_store_options o;
    char err[512];
    sl_store *s = NULL;
    if (f->uri[0] == '\0')
        return sl_test_store_open(f->dir, NULL, &f->clock.clock);
    sl_store_options_default(&o);
    o.path = f->uri;
    o.clock = &f->clock.clock;
    if (sl_store_open(&o, &s, err, sizeof err) != SL_OK)
        fprintf(stderr, "sl_store_open %s: %s\n", f->uri, err);
    return s;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    sl_test_mkdtemp(f->dir, sizeof f->dir, "store");
    sl_clock_manual_init(&f->clock, 0, 1764465820000LL * 1000000LL);
#ifdef SL_HAVE_PG
    if (g_pg_mode)
        new_database(f);
#endif
    f->s = open_store(f);
    *state = f;
    return f->s ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sl_store_close(f->s);
    sl_test_rmtree(f->dir);
    free(f);
    return 0;
}

static void reopen(fixture *f)
{
    sl_store_close(f->s);
    f->s = open_store(f);
    assert_non_null(f->s);
}

static void test_schema_and_reopen(void **state)
{
    fixture *f = *state;
    int v = 0;
    assert_int_equal(sl_store_schema_version(f->s, &v), SL_OK);
    assert_int_equal(v, SL_STORE_SCHEMA_VERSION);
    reopen(f);
    assert_int_equal(sl_store_schema_version(f->s, &v), SL_OK);
    assert_int_equal(v, SL_STORE_SCHEMA_VERSION);
}

static void test_devices(void **state)
{
    fixture *f = *state;
    uint8_t key[65] = {4, 1, 2, 3};
    int64_t id, again;
    sl_device_record d;
    assert_int_equal(sl_store_enrol_device(f->s, key, sizeof key, "{\"simd\":\"avx2\"}", &id),
                     SL_OK);
    assert_int_equal(sl_store_enrol_device(f->s, key, sizeof key, "{}", &again), SL_OK);
    assert_int_equal(id, again); /* the same key is the same device */
    assert_int_equal(sl_store_get_device(f->s, id, &d), SL_OK);
    assert_int_equal(d.key_len, sizeof key);
    assert_memory_equal(d.public_key, key, sizeof key);
    assert_string_equal(d.capabilities, "{\"simd\":\"avx2\"}");
    assert_true(d.enrolled_at_ms == 1764465820000LL);
    sl_clock_manual_advance(&f->clock, 5000000000LL);
    assert_int_equal(sl_store_touch_device(f->s, id), SL_OK);
    assert_int_equal(sl_store_get_device(f->s, id, &d), SL_OK);
    assert_true(d.last_seen_ms == 1764465825000LL);
    assert_int_equal(sl_store_get_device(f->s, id + 100, &d), SL_ENOENT);
    assert_int_equal(sl_store_touch_device(f->s, id + 100), SL_ENOENT);
    assert_int_equal(sl_store_enrol_device(f->s, key, 0, "{}", &id), SL_EINVAL);
    assert_int_equal(sl_store_enrol_device(f->s, key, SL_STORE_MAX_KEY + 1, "{}", &id), SL_EINVAL);
}

typedef struct refusals_seen {
    int n;
    int64_t task[4];
    char reason[4][64];
} refusals_seen;

static int collect_refusal(void *ctx, int64_t task_id, int64_t device_id, const char *reason,
                           int64_t at_ms)
{
    refusals_seen *r = ctx;
    assert_true(at_ms > 0 && device_id > 0);
    r->task[r->n] = task_id;
    snprintf(r->reason[r->n], sizeof r->reason[0], "%s", reason);
    r->n++;
    return 0;
}

static void test_refusals(void **state)
{
    fixture *f = *state;
    uint8_t key[65] = {4, 9, 9};
    int64_t dev, t1, t2;
    refusals_seen seen;
    char big[SL_STORE_MAX_TEXT + 1];
    assert_int_equal(sl_store_enrol_device(f->s, key, sizeof key, "{}", &dev), SL_OK);
    assert_int_equal(sl_store_create_task(f->s, "a", "{}", "w 1\n", &t1), SL_OK);
    assert_int_equal(sl_store_create_task(f->s, "b", "{}", "w 1\n", &t2), SL_OK);
    assert_int_equal(sl_store_set_refusal(f->s, t2, dev, "too big"), SL_OK);
    assert_int_equal(sl_store_set_refusal(f->s, t1, dev, "first"), SL_OK);
    assert_int_equal(sl_store_set_refusal(f->s, t1, dev, "replaced"), SL_OK);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(sl_store_list_refusals(f->s, 0, dev, collect_refusal, &seen), SL_OK);
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.task[0], t1);
    assert_string_equal(seen.reason[0], "replaced");
    assert_int_equal(seen.task[1], t2);
    assert_string_equal(seen.reason[1], "too big");
    /* an empty reason clears; bad input changes nothing */
    assert_int_equal(sl_store_set_refusal(f->s, t2, dev, ""), SL_OK);
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(sl_store_set_refusal(f->s, t1, dev, big), SL_EINVAL);
    assert_int_equal(sl_store_set_refusal(f->s, t1, dev, NULL), SL_EINVAL);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(sl_store_list_refusals(f->s, 0, dev, collect_refusal, &seen), SL_OK);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.reason[0], "replaced");
    memset(&seen, 0, sizeof seen);
    assert_int_equal(sl_store_list_refusals(f->s, t2, 0, collect_refusal, &seen), SL_OK);
    assert_int_equal(seen.n, 0);
    assert_int_equal(sl_store_list_refusals(f->s, t1, 0, collect_refusal, &seen), SL_OK);
    assert_int_equal(seen.n, 1);
    assert_int_equal(sl_store_list_refusals(f->s, -1, 0, collect_refusal, &seen), SL_EINVAL);
}

static int collect_task(void *ctx, int64_t task_id)
{
    int64_t *ids = ctx;
    ids[++ids[0]] = task_id;
    return 0;
}

static void test_tasks_and_models(void **state)
{
    fixture *f = *state;
    int64_t task, again;
    sl_task_record t;
    uint8_t frame[100], sha[32], other[32];
    sl_model_put m = {0};
    sl_model_record r;
    memset(frame, 7, sizeof frame);
    memset(sha, 1, sizeof sha);
    memset(other, 2, sizeof other);
    assert_int_equal(sl_store_create_task(f->s, "fmnist", "{\"k\":10}", "w 10\n", &task), SL_OK);
    assert_int_equal(sl_store_create_task(f->s, "fmnist", "{\"k\":10}", "w 10\n", &again), SL_OK);
    assert_int_equal(task, again);
    assert_int_equal(sl_store_create_task(f->s, "fmnist", "{\"k\":11}", "w 10\n", &again),
                     SL_ECONFLICT);
    assert_int_equal(sl_store_get_task(f->s, task, &t), SL_OK);
    assert_string_equal(t.name, "fmnist");
    {
        int64_t second, listed[4] = {0};
        assert_int_equal(sl_store_create_task(f->s, "second", "{}", "w 1\n", &second), SL_OK);
        assert_int_equal(sl_store_list_tasks(f->s, collect_task, listed), SL_OK);
        assert_int_equal(listed[0], 2);
        assert_int_equal(listed[1], task);
        assert_int_equal(listed[2], second);
    }
    assert_string_equal(t.layout_text, "w 10\n");
    assert_null(t.model_spec); /* a task without a spec */
    sl_store_task_free(&t);
    {
        /* a model spec is stored as given and is part of the task's identity */
        int64_t with, same;
        const char *spec = "{\"starling_model\": 1}";
        assert_int_equal(sl_store_create_task_spec(f->s, "spec", "{}", "w 1\n", spec, &with),
                         SL_OK);
        assert_int_equal(sl_store_create_task_spec(f->s, "spec", "{}", "w 1\n", spec, &same),
                         SL_OK);
        assert_int_equal(with, same);
        assert_int_equal(sl_store_create_task_spec(f->s, "spec", "{}", "w 1\n", "{}", &same),
                         SL_ECONFLICT);
        assert_int_equal(sl_store_create_task(f->s, "spec", "{}", "w 1\n", &same), SL_ECONFLICT);
        assert_int_equal(sl_store_create_task_spec(f->s, "x", "{}", "w 1\n", "", &same), SL_EINVAL);
        assert_int_equal(sl_store_get_task(f->s, with, &t), SL_OK);
        assert_string_equal(t.model_spec, spec);
        sl_store_task_free(&t);
    }
    m.task_id = task;
    m.version = 1;
    m.frame = frame;
    m.frame_len = sizeof frame;
    m.sha256 = sha;
    assert_int_equal(sl_store_put_model(f->s, &m), SL_OK);
    assert_int_equal(sl_store_put_model(f->s, &m), SL_OK); /* idempotent */
    m.sha256 = other;
    assert_int_equal(sl_store_put_model(f->s, &m), SL_ECONFLICT);
    m.version = 2;
    m.parent = 1;
    m.opt_state = frame;
    m.opt_state_len = 10;
    m.metrics = "{\"accuracy\":0.5}";
    assert_int_equal(sl_store_put_model(f->s, &m), SL_OK);
    assert_int_equal(sl_store_get_model(f->s, task, 0, &r), SL_OK); /* latest */
    assert_int_equal(r.version, 2);
    assert_int_equal(r.parent, 1);
    assert_int_equal(r.frame_len, sizeof frame);
    assert_memory_equal(r.sha256, other, 32);
    assert_int_equal(r.opt_state_len, 10);
    assert_string_equal(r.metrics, "{\"accuracy\":0.5}");
    sl_store_model_free(&r);
    assert_int_equal(sl_store_set_model_metrics(f->s, task, 1, "{\"accuracy\":0.1}"), SL_OK);
    assert_int_equal(sl_store_get_model(f->s, task, 1, &r), SL_OK);
    assert_string_equal(r.metrics, "{\"accuracy\":0.1}");
    assert_null(r.opt_state);
    sl_store_model_free(&r);
    assert_int_equal(sl_store_get_model(f->s, task, 3, &r), SL_ENOENT);
    assert_int_equal(sl_store_set_model_metrics(f->s, task, 3, "{}"), SL_ENOENT);
    m.task_id = task + 50; /* no such task */
    m.version = 1;
    assert_int_equal(sl_store_put_model(f->s, &m), SL_ENOENT);
}

static int collect_round(void *ctx, const sl_round_record *r)
{
    int64_t *ids = ctx;
    ids[ids[0] + 1] = r->round_no;
    ids[0]++;
    return 0;
}

/* Counts a round's participant rows, and those marked late. */
typedef struct part_tally {
    int rows, late;
} part_tally;

static int tally_part(void *ctx, const sl_participant_record *p)
{
    part_tally *t = ctx;
    t->rows++;
    t->late += p->state == SL_PART_LATE;
    return 0;
}

static void test_rounds_and_close(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3], ids[16] = {0};
    sl_round_record r, got;
    uint8_t frame[10] = {1}, sha[32] = {3};
    sl_model_put m = {0};
    sl_model_record mr;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    assert_int_equal(r.state, SL_ROUND_TRAINING);
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            sl_store_set_participant(f->s, round_id, devices[i], SL_PART_SELECTED, NULL), SL_OK);
    assert_int_equal(
        sl_store_set_participant(f->s, round_id, devices[1], SL_PART_DROPPED, "deadline"), SL_OK);
    assert_int_equal(sl_store_set_participant(f->s, round_id, 9999, SL_PART_SELECTED, NULL),
                     SL_ENOENT);
    {
        /* marking: a participant's state changes; a device that is not one stays out */
        uint8_t key[8] = {0x5a, 1, 2, 3, 4, 5, 6, 7};
        int64_t outsider;
        part_tally t = {0, 0};
        assert_int_equal(sl_store_enrol_device(f->s, key, 8, "{}", &outsider), SL_OK);
        assert_int_equal(
            sl_store_mark_participant(f->s, round_id, devices[2], SL_PART_LATE, "round closed"),
            SL_OK);
        assert_int_equal(
            sl_store_mark_participant(f->s, round_id, outsider, SL_PART_LATE, "round closed"),
            SL_ENOENT);
        assert_int_equal(sl_store_mark_participant(f->s, round_id, 9999, SL_PART_LATE, NULL),
                         SL_ENOENT);
        assert_int_equal(sl_store_mark_participant(f->s, round_id, devices[2], 99, NULL),
                         SL_EINVAL);
        assert_int_equal(sl_store_list_participants(f->s, round_id, tally_part, &t), SL_OK);
        assert_int_equal(t.rows, 3);
        assert_int_equal(t.late, 1);
        assert_int_equal(
            sl_store_set_participant(f->s, round_id, devices[2], SL_PART_SELECTED, NULL), SL_OK);
    }
    {
        /* selection in one transaction with the round: an unknown device undoes both */
        int64_t bad[2] = {devices[0], 4242};
        sl_round_record sel = r;
        sel.selected = 2;
        assert_int_equal(sl_store_select_participants(f->s, &sel, bad, 2), SL_ENOENT);
        assert_int_equal(sl_store_get_round(f->s, round_id, &got), SL_OK);
        assert_int_equal(got.selected, 0);
        assert_int_equal(sl_store_select_participants(f->s, &sel, devices, 3), SL_OK);
        assert_int_equal(sl_store_get_round(f->s, round_id, &got), SL_OK);
        assert_int_equal(got.selected, 2);
    }
    /* a second round, then list newest first and the unfinished ones */
    got = r;
    got.round_no = 2;
    assert_int_equal(sl_store_create_round(f->s, &got), SL_OK);
    assert_true(got.id != r.id);
    assert_int_equal(sl_store_list_rounds(f->s, r.task_id, 0, 10, collect_round, ids), SL_OK);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 1);
    /* closing with a new model is one transaction */
    r.state = SL_ROUND_CLOSED;
    r.reported = 2;
    r.closed_at_ms = 99;
    r.bytes_down = 123456;
    r.downloads = 3; /* the devices whose downloads bytes_down counts (schema 12) */
    m.task_id = r.task_id;
    m.version = 2;
    m.parent = 1;
    m.frame = frame;
    m.frame_len = sizeof frame;
    m.sha256 = sha;
    assert_int_equal(sl_store_close_round(f->s, &r, &m), SL_OK);
    assert_int_equal(sl_store_get_round(f->s, round_id, &got), SL_OK);
    assert_int_equal(got.state, SL_ROUND_CLOSED);
    assert_int_equal(got.reported, 2);
    assert_int_equal(got.bytes_down, 123456);
    assert_int_equal(got.downloads, 3);
    assert_int_equal(sl_store_get_model(f->s, r.task_id, 2, &mr), SL_OK);
    sl_store_model_free(&mr);
    /* a close whose round update fails leaves no model behind */
    r.id = 12345;
    m.version = 3;
    assert_int_equal(sl_store_close_round(f->s, &r, &m), SL_ENOENT);
    assert_int_equal(sl_store_get_model(f->s, r.task_id, 3, &mr), SL_ENOENT);
    ids[0] = 0;
    assert_int_equal(sl_store_unfinished_rounds(f->s, collect_round, ids), SL_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    r.state = (sl_round_state)9;
    assert_int_equal(sl_store_update_round(f->s, &r), SL_EINVAL);
}

typedef struct dev_page {
    sl_device_summary d[16];
    int n;
} dev_page;

static int collect_device(void *ctx, const sl_device_summary *d)
{
    dev_page *p = ctx;
    assert_true(p->n < 16);
    p->d[p->n++] = *d;
    return 0;
}

static int collect_id(void *ctx, int64_t id)
{
    int64_t *ids = ctx;
    ids[++ids[0]] = id;
    return 0;
}

static int stop_at_first(void *ctx, const sl_device_summary *d)
{
    (void)ctx;
    (void)d;
    return 42;
}

/* Devices with their counts, paged; the reporters of a round. */
static void test_list_devices(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[4], second, ids[8] = {0};
    uint8_t frame[64], sha[32];
    sl_store_receipt rec;
    sl_update_put u;
    sl_round_record r;
    dev_page page = {0};
    uint64_t n = 0;
    sl_test_store_fixture(f->s, &round_id, devices, 4);
    assert_int_equal(sl_store_count_devices(f->s, &n), SL_OK);
    assert_int_equal(n, 4);
    /* round 1: devices 0-2 selected; 0 and 2 report, 1 is rejected; 3 comes late */
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    assert_int_equal(sl_store_select_participants(f->s, &r, devices, 3), SL_OK);
    assert_int_equal(
        sl_store_set_participant(f->s, round_id, devices[1], SL_PART_REJECTED, "malformed"), SL_OK);
    assert_int_equal(sl_store_set_participant(f->s, round_id, devices[3], SL_PART_LATE, "closed"),
                     SL_OK);
    for (int i = 2; i >= 0; i -= 2) {
        sl_test_update_bytes((uint64_t)i, frame, sizeof frame, sha);
        u = (sl_update_put){round_id, devices[i], frame, sizeof frame, 10, sha, 0};
        assert_int_equal(sl_store_put_update(f->s, &u, 5000, &rec), SL_OK);
    }
    /* round 2: device 0 again */
    r.round_no = 2;
    assert_int_equal(sl_store_create_round(f->s, &r), SL_OK);
    second = r.id;
    assert_int_equal(sl_store_select_participants(f->s, &r, devices, 1), SL_OK);
    sl_test_update_bytes(9, frame, sizeof frame, sha);
    u = (sl_update_put){second, devices[0], frame, sizeof frame, 10, sha, 0};
    assert_int_equal(sl_store_put_update(f->s, &u, 5000, &rec), SL_OK);

    assert_int_equal(sl_store_list_devices(f->s, 0, 0, 100, collect_device, &page), SL_OK);
    assert_int_equal(page.n, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(page.d[i].id == devices[i]);
        assert_string_equal(page.d[i].state, "active");
        assert_true(page.d[i].enrolled_at_ms == 1764465820000LL);
    }
    assert_int_equal(page.d[0].participations, 2);
    assert_int_equal(page.d[0].reported, 2);
    assert_int_equal(page.d[0].rejected, 0);
    assert_int_equal(page.d[1].participations, 1);
    assert_int_equal(page.d[1].reported, 0);
    assert_int_equal(page.d[1].rejected, 1);
    assert_int_equal(page.d[2].participations, 1);
    assert_int_equal(page.d[2].reported, 1);
    assert_int_equal(page.d[3].participations, 1);
    assert_int_equal(page.d[3].late, 1);
    assert_int_equal(page.d[3].reported, 0);
    /* pages: offset and limit, past the end, limit 0 */
    page.n = 0;
    assert_int_equal(sl_store_list_devices(f->s, 0, 1, 2, collect_device, &page), SL_OK);
    assert_int_equal(page.n, 2);
    assert_true(page.d[0].id == devices[1] && page.d[1].id == devices[2]);
    assert_int_equal(page.d[0].rejected, 1); /* counts of the page's devices, not shifted */
    page.n = 0;
    assert_int_equal(sl_store_list_devices(f->s, 0, 4, 10, collect_device, &page), SL_OK);
    assert_int_equal(sl_store_list_devices(f->s, 0, 0, 0, collect_device, &page), SL_OK);
    assert_int_equal(page.n, 0);
    assert_int_equal(sl_store_list_devices(f->s, 0, 0, 10, stop_at_first, NULL), 42);
    assert_int_equal(sl_store_list_devices(f->s, 0, 0, 10, NULL, NULL), SL_EINVAL);
    /* keyset pages: the devices after an id, the same counts; after the last, none */
    page.n = 0;
    assert_int_equal(sl_store_list_devices(f->s, devices[1], 0, 2, collect_device, &page), SL_OK);
    assert_int_equal(page.n, 2);
    assert_true(page.d[0].id == devices[2] && page.d[1].id == devices[3]);
    assert_int_equal(page.d[0].reported, 1);
    assert_int_equal(page.d[1].late, 1);
    page.n = 0;
    assert_int_equal(sl_store_list_devices(f->s, devices[0], 1, 1, collect_device, &page), SL_OK);
    assert_int_equal(page.n, 1);
    assert_true(page.d[0].id == devices[2]); /* after an id, then skipping one */
    page.n = 0;
    assert_int_equal(sl_store_list_devices(f->s, devices[3], 0, 10, collect_device, &page), SL_OK);
    assert_int_equal(page.n, 0);
    assert_int_equal(sl_store_list_devices(f->s, -1, 0, 10, collect_device, &page), SL_EINVAL);
    assert_int_equal(sl_store_count_devices(f->s, NULL), SL_EINVAL);
    if (!g_pg_mode) { /* a page reads the page's devices' rows through indexes, never whole tables
                       */
        sl__conn c;
        sqlite3_stmt *st;
        char sql[1024], plan[4096] = "";
        size_t used = 0;
        assert_int_equal(sl__conn_open(f->s, &c, 1), SL_OK);
        snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", sl__list_devices_sql);
        assert_int_equal(sqlite3_prepare_v2(c.db, sql, -1, &st, NULL), SQLITE_OK);
        while (sqlite3_step(st) == SQLITE_ROW && used < sizeof plan - 200)
            used += (size_t)snprintf(plan + used, sizeof plan - used, "%s\n",
                                     (const char *)sqlite3_column_text(st, 3));
        sqlite3_finalize(st);
        sl__conn_close(&c);
        if (strstr(plan, "SEARCH devices USING INTEGER PRIMARY KEY (rowid>?)") == NULL ||
            strstr(plan, "round_participants_device") == NULL ||
            strstr(plan, "updates_device") == NULL || strstr(plan, "SCAN round_participants") ||
            strstr(plan, "SCAN updates"))
            fail_msg("the device list's plan:\n%s", plan);
    }

    assert_int_equal(sl_store_list_reporters(f->s, round_id, collect_id, ids), SL_OK);
    assert_int_equal(ids[0], 2);
    assert_true(ids[1] == devices[0] && ids[2] == devices[2]);
    ids[0] = 0;
    assert_int_equal(sl_store_list_reporters(f->s, 999, collect_id, ids), SL_OK);
    assert_int_equal(ids[0], 0);
}

static int collect_update(void *ctx, int64_t device_id, const void *frame, size_t len,
                          uint32_t num_samples, const uint8_t *sha256)
{
    int64_t *seen = ctx;
    (void)frame;
    (void)sha256;
    assert_int_equal(len, 64);
    assert_int_equal(num_samples, 100 + device_id);
    seen[++seen[0]] = device_id;
    return 0;
}

static void test_updates_idempotent(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[5], seen[8] = {0};
    uint8_t frame[64], sha[32], sha2[32];
    sl_update_put u;
    sl_store_receipt a, b;
    uint64_t count;
    sl_test_store_fixture(f->s, &round_id, devices, 5);
    /* arrive in reverse device order */
    for (int i = 4; i >= 0; i--) {
        sl_test_update_bytes((uint64_t)i, frame, sizeof frame, sha);
        u = (sl_update_put){round_id, devices[i], frame, sizeof frame, (uint32_t)(100 + devices[i]),
                            sha,      0};
        assert_int_equal(sl_store_put_update(f->s, &u, 5000, &a), SL_OK);
        assert_int_equal(a.duplicate, 0);
    }
    sl_test_update_bytes(2, frame, sizeof frame, sha);
    u = (sl_update_put){round_id, devices[2], frame, sizeof frame, (uint32_t)(100 + devices[2]),
                        sha,      0};
    sl_clock_manual_advance(&f->clock, 1000000000LL);
    assert_int_equal(sl_store_put_update(f->s, &u, 5000, &b), SL_OK);
    assert_int_equal(b.duplicate, 1); /* a retry gets the original receipt */
    assert_true(b.received_at_ms == 1764465820000LL);
    memcpy(sha2, sha, 32);
    sha2[0] ^= 1;
    u.sha256 = sha2;
    assert_int_equal(sl_store_put_update(f->s, &u, 5000, &b), SL_ECONFLICT);
    u.device_id = 777; /* unknown device */
    assert_int_equal(sl_store_put_update(f->s, &u, 5000, &b), SL_ENOENT);
    assert_int_equal(sl_store_count_updates(f->s, round_id, &count), SL_OK);
    assert_int_equal(count, 5);
    assert_int_equal(sl_store_foreach_update(f->s, round_id, collect_update, seen), SL_OK);
    assert_int_equal(seen[0], 5);
    for (int i = 1; i < 5; i++)
        assert_true(seen[i] < seen[i + 1]); /* device-id order */
}

typedef struct writer_ctx {
    sl_store *s;
    int64_t round_id, device;
    int rc;
} writer_ctx;

static void *writer_thread(void *arg)
{
    writer_ctx *w = arg;
    uint8_t frame[2048], sha[32];
    sl_store_receipt r;
    sl_update_put u;
    sl_test_update_bytes((uint64_t)w->device, frame, sizeof frame, sha);
    u = (sl_update_put){w->round_id, w->device, frame, sizeof frame, 1, sha, 0};
    w->rc = sl_store_put_update(w->s, &u, 30000, &r);
    return NULL;
}

/* Concurrent writers share commits: fewer transactions than writes. */
static void test_group_commit(void **state)
{
    fixture *f = *state;
    enum { N = 64 };
    int64_t round_id, devices[N];
    pthread_t th[N];
    writer_ctx w[N];
    uint64_t before, count;
    sl_test_store_fixture(f->s, &round_id, devices, N);
    before = f->s->commits;
    for (int i = 0; i < N; i++) {
        w[i] = (writer_ctx){f->s, round_id, devices[i], -1};
        pthread_create(&th[i], NULL, writer_thread, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].rc, SL_OK);
    }
    assert_int_equal(sl_store_count_updates(f->s, round_id, &count), SL_OK);
    assert_int_equal(count, N);
    print_message("64 concurrent updates in %llu commits\n",
                  (unsigned long long)(f->s->commits - before));
    assert_true(f->s->commits - before < N);
}

/*
 * The checkpointer: with a mark of 40 pages, 300 uploads of 40 KB (about
 * 6,000 pages: the space reserved, then the bytes) never leave more than
 * four marks and a few commits in the WAL (it is rewound, not left to
 * grow), the checkpoints ran on their own thread, and everything is still
 * there after a reopen.
 */
static void test_checkpointer(void **state)
{
    fixture *f = *state;
    enum { N = 300, CHUNK = 40000, MARK = 40 };
    sl_store_options o;
    char path[600], err[256];
    static uint8_t chunk[CHUNK];
    sl_upload_record r = {0}, got;
    static int64_t devices[N]; /* one session a device: a device keeps one a round */
    int64_t round_id;
    uint64_t off, checkpoints, most = 0;
    sl_store_close(f->s);
    sl_store_options_default(&o);
    snprintf(path, sizeof path, "%s/store.db", f->dir);
    o.path = path;
    o.clock = &f->clock.clock;
    o.checkpoint_pages = MARK;
    assert_int_equal(sl_store_open(&o, &f->s, err, sizeof err), SL_OK);
    sl_test_store_fixture(f->s, &round_id, devices, N);
    for (size_t i = 0; i < CHUNK; i++)
        chunk[i] = (uint8_t)(i * 7919u >> 3);
    r.round_id = round_id;
    r.length = CHUNK;
    r.expires_at_ms = 1764465820000LL + 60000;
    for (int i = 0; i < N; i++) {
        snprintf(r.id, sizeof r.id, "up-%d", i);
        r.device_id = devices[i];
        assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
        assert_int_equal(sl_store_append_upload(f->s, r.id, 0, chunk, CHUNK, 5000, &off), SL_OK);
        pthread_mutex_lock(&f->s->lock);
        most = f->s->ckpt_pages > most ? f->s->ckpt_pages : most;
        pthread_mutex_unlock(&f->s->lock);
    }
    pthread_mutex_lock(&f->s->lock);
    checkpoints = f->s->checkpoints;
    pthread_mutex_unlock(&f->s->lock);
    print_message("%d uploads of %d bytes: %llu checkpoints, at most %llu pages in the WAL\n", N,
                  CHUNK, (unsigned long long)checkpoints, (unsigned long long)most);
    assert_true(checkpoints > 0);
    /* a create or an append is about 11 pages: four marks and a few commits while a
     * checkpoint runs */
    assert_true(most <= 4 * MARK + 60);
    reopen(f);
    for (int i = 0; i < N; i += 37) {
        snprintf(r.id, sizeof r.id, "up-%d", i);
        assert_int_equal(sl_store_get_upload(f->s, r.id, &got), SL_OK);
        assert_int_equal(got.offset, CHUNK);
    }
}

static int steps_of(void *ctx, int64_t device_id, uint32_t local_steps)
{
    int64_t *seen = ctx;
    seen[0] = device_id;
    seen[1] = local_steps;
    return 0;
}

static void test_uploads(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[1];
    uint8_t frame[1000], sha[32];
    sl_upload_record r = {0}, got;
    sl_store_receipt receipt;
    uint64_t off, count;
    void *data;
    size_t len;
    uint32_t deleted;
    sl_test_store_fixture(f->s, &round_id, devices, 1);
    sl_test_update_bytes(9, frame, sizeof frame, sha);
    snprintf(r.id, sizeof r.id, "up-1");
    r.device_id = devices[0];
    r.round_id = round_id;
    r.length = sizeof frame;
    memcpy(r.sha256, sha, 32);
    r.num_samples = 42;
    r.local_steps = 9;
    r.expires_at_ms = 1764465820000LL + 60000;
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_EEXIST);
    assert_int_equal(sl_store_append_upload(f->s, "up-1", 0, frame, 300, 5000, &off), SL_OK);
    assert_int_equal(off, 300);
    /* the wrong offset changes nothing */
    assert_int_equal(sl_store_append_upload(f->s, "up-1", 0, frame, 300, 5000, &off), SL_ECONFLICT);
    assert_int_equal(sl_store_append_upload(f->s, "up-1", 300, frame, 701, 5000, &off), SL_ETOOBIG);
    assert_int_equal(sl_store_finish_upload(f->s, "up-1", 5000, &receipt), SL_ESTATE);
    reopen(f); /* a restart between chunks */
    assert_int_equal(sl_store_get_upload(f->s, "up-1", &got), SL_OK);
    assert_int_equal(got.offset, 300);
    assert_int_equal(sl_store_append_upload(f->s, "up-1", 300, frame + 300, 700, 5000, &off),
                     SL_OK);
    assert_int_equal(sl_store_read_upload(f->s, "up-1", &data, &len), SL_OK);
    assert_int_equal(len, sizeof frame);
    assert_memory_equal(data, frame, sizeof frame);
    free(data);
    assert_int_equal(got.local_steps, 9);
    assert_int_equal(sl_store_finish_upload(f->s, "up-1", 5000, &receipt), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "up-1", &got), SL_ENOENT);
    assert_int_equal(sl_store_count_updates(f->s, round_id, &count), SL_OK);
    assert_int_equal(count, 1);
    { /* the session's local steps went into the update */
        int64_t seen[2] = {0, 0};
        assert_int_equal(sl_store_list_steps(f->s, round_id, steps_of, seen), SL_OK);
        assert_true(seen[0] == devices[0] && seen[1] == 9);
    }
    /* expiry */
    snprintf(r.id, sizeof r.id, "up-2");
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    sl_clock_manual_advance(&f->clock, 61000000000LL);
    assert_int_equal(sl_store_get_upload(f->s, "up-2", &got), SL_ETIMEDOUT); /* not unknown */
    assert_int_equal(sl_store_expire_uploads(f->s, &deleted), SL_OK);
    assert_int_equal(deleted, 1);
    /* bad ids */
    assert_int_equal(sl_store_get_upload(f->s, "bad id", &got), SL_EINVAL);
    assert_int_equal(sl_store_get_upload(f->s, "", &got), SL_EINVAL);
}

static void test_retention(void **state)
{
    fixture *f = *state;
    int64_t task;
    uint8_t frame[4] = {1, 2, 3, 4}, sha[32] = {0};
    sl_model_put m = {0};
    sl_model_record r;
    sl_round_record open_round;
    uint32_t retired;
    assert_int_equal(sl_store_create_task(f->s, "ret", "{}", "w 1\n", &task), SL_OK);
    m.task_id = task;
    m.frame = frame;
    m.frame_len = sizeof frame;
    m.sha256 = sha;
    for (int v = 1; v <= 20; v++) {
        sha[0] = (uint8_t)v;
        m.version = v;
        m.parent = v - 1;
        m.opt_state = v == 7 ? frame : NULL;
        m.opt_state_len = v == 7 ? sizeof frame : 0;
        assert_int_equal(sl_store_put_model(f->s, &m), SL_OK);
    }
    assert_int_equal(sl_store_set_model_metrics(f->s, task, 7, "{\"accuracy\":0.5}"), SL_OK);
    /* a round not yet closed trains from version 12: kept */
    memset(&open_round, 0, sizeof open_round);
    open_round.task_id = task;
    open_round.round_no = 12;
    open_round.state = SL_ROUND_TRAINING;
    open_round.base_version = 12;
    assert_int_equal(sl_store_create_round(f->s, &open_round), SL_OK);
    /* keep the last 3 and every 5th, and version 1 */
    assert_int_equal(sl_store_retain_models(f->s, task, 3, 5, &retired), SL_OK);
    for (int v = 1; v <= 20; v++) {
        int kept = v == 1 || v >= 18 || v % 5 == 0 || v == 12;
        int rc = sl_store_get_model(f->s, task, v, &r);
        assert_int_equal(rc, kept ? SL_OK : SL_ENOENT);
        if (rc == SL_OK) {
            assert_int_equal(r.frame_len, sizeof frame);
            assert_false(r.retired);
            sl_store_model_free(&r);
        }
        /* the record stays either way, without its bytes */
        assert_int_equal(sl_store_get_model_info(f->s, task, v, &r), SL_OK);
        assert_int_equal(r.version, v);
        assert_int_equal(r.parent, v - 1);
        assert_int_equal(r.sha256[0], v);
        assert_null(r.frame);
        assert_null(r.opt_state);
        assert_int_equal(r.retired, !kept);
        assert_int_equal(r.frame_len, kept ? sizeof frame : 0);
        if (v == 7) /* retired, its evaluation kept */
            assert_string_equal(r.metrics, "{\"accuracy\":0.5}");
        sl_store_model_free(&r);
    }
    assert_int_equal(retired, 20 - 1 - 3 - 3 - 1); /* 5, 10, 15 and 20 (also last); 12 */
    /* a retired version put again with its digest: a no-op, it stays retired; another
     * digest conflicts */
    sha[0] = 7;
    m.version = 7;
    m.parent = 6;
    m.opt_state = NULL;
    m.opt_state_len = 0;
    assert_int_equal(sl_store_put_model(f->s, &m), SL_OK);
    assert_int_equal(sl_store_get_model(f->s, task, 7, &r), SL_ENOENT);
    sha[0] = 99;
    assert_int_equal(sl_store_put_model(f->s, &m), SL_ECONFLICT);
    /* again: nothing more to retire; a retired version still takes metrics */
    assert_int_equal(sl_store_retain_models(f->s, task, 3, 5, &retired), SL_OK);
    assert_int_equal(retired, 0);
    assert_int_equal(sl_store_set_model_metrics(f->s, task, 8, "{\"accuracy\":0.6}"), SL_OK);
    assert_int_equal(sl_store_get_model_info(f->s, task, 8, &r), SL_OK);
    assert_string_equal(r.metrics, "{\"accuracy\":0.6}");
    sl_store_model_free(&r);
    /* the latest, with or without its bytes */
    assert_int_equal(sl_store_get_model(f->s, task, 0, &r), SL_OK);
    assert_int_equal(r.version, 20);
    sl_store_model_free(&r);
    assert_int_equal(sl_store_get_model_info(f->s, task, 0, &r), SL_OK);
    assert_int_equal(r.version, 20);
    sl_store_model_free(&r);
    assert_int_equal(sl_store_get_model_info(f->s, task, 21, &r), SL_ENOENT);
    /* keep the last 1: everything but 1, the open round's base and 20 */
    assert_int_equal(sl_store_retain_models(f->s, task, 1, 0, &retired), SL_OK);
    assert_int_equal(retired, 5); /* 5, 10, 15, 18, 19 */
    assert_int_equal(sl_store_retain_models(f->s, task, 0, 5, &retired), SL_EINVAL);
    assert_int_equal(sl_store_get_model_info(NULL, task, 1, &r), SL_EINVAL);
    assert_int_equal(sl_store_get_model_info(f->s, task, -1, &r), SL_EINVAL);
}

typedef struct frames_seen {
    int n, empty;
    size_t bytes;
} frames_seen;

static int see_frame(void *ctx, int64_t device_id, const void *frame, size_t len,
                     uint32_t num_samples, const uint8_t *sha256)
{
    frames_seen *f = ctx;
    (void)device_id;
    (void)frame;
    (void)num_samples;
    (void)sha256;
    f->n++;
    f->empty += len == 0;
    f->bytes += len;
    return 0;
}

static int count_partial(void *ctx, const char *replica, const void *data, size_t len,
                         const int64_t *devices, size_t n)
{
    (void)replica;
    (void)data;
    (void)len;
    (void)devices;
    (void)n;
    (*(int *)ctx)++;
    return 0;
}

/* A round's frames: how many, how many without bytes, how many bytes. */
static frames_seen round_frames(sl_store *s, int64_t round_id)
{
    frames_seen f = {0, 0, 0};
    assert_int_equal(sl_store_foreach_update(s, round_id, see_frame, &f), SL_OK);
    return f;
}

/* Retention of updates: the bytes of the rounds that are over but the latest N go, with their
 * partial sums; the records stay (receipts, counts, a retry's answer); an open round keeps
 * its own; a round is retired once. */
static void test_retain_updates(void **state)
{
    fixture *f = *state;
    enum { R = 6, D = 3, LEN = 1000 };
    int64_t task, rounds[R + 1], devices[D];
    uint8_t frame[LEN], sha[32];
    uint64_t retired = 9, count;
    sl_round_record r;
    sl_store_receipt rec;
    int partials;
    assert_int_equal(sl_store_create_task(f->s, "ru", "{}", "w 1\n", &task), SL_OK);
    for (int d = 0; d < D; d++) {
        uint8_t key[2] = {0x52, (uint8_t)d};
        assert_int_equal(sl_store_enrol_device(f->s, key, sizeof key, "{}", &devices[d]), SL_OK);
    }
    /* rounds 1-5 over (3 abandoned), 6 open; each with an update of every device */
    for (int n = 1; n <= R; n++) {
        memset(&r, 0, sizeof r);
        r.task_id = task;
        r.round_no = n;
        r.base_version = n;
        r.state = SL_ROUND_TRAINING;
        r.target = D;
        r.quorum = 1;
        assert_int_equal(sl_store_create_round(f->s, &r), SL_OK);
        rounds[n] = r.id;
        for (int d = 0; d < D; d++) {
            sl_update_put u;
            sl_test_update_bytes((uint64_t)(n * D + d), frame, sizeof frame, sha);
            u = (sl_update_put){r.id, devices[d], frame, sizeof frame, 1, sha, 0};
            assert_int_equal(sl_store_put_update(f->s, &u, 30000, &rec), SL_OK);
        }
        assert_int_equal(sl_store_put_partial(f->s, r.id, "a", "sum", 3, devices, D), SL_OK);
        if (n < R) {
            r.state = n == 3 ? SL_ROUND_ABANDONED : SL_ROUND_CLOSED;
            assert_int_equal(sl_store_update_round(f->s, &r), SL_OK);
        }
    }
    /* keep the last 2 of the rounds over (4 and 5): 1, 2 and 3 go */
    assert_int_equal(sl_store_retain_updates(f->s, task, 2, &retired), SL_OK);
    assert_int_equal(retired, 3 * D);
    for (int n = 1; n <= R; n++) {
        frames_seen fs = round_frames(f->s, rounds[n]);
        int gone = n <= 3;
        assert_int_equal(fs.n, D);
        assert_int_equal(fs.empty, gone ? D : 0);
        assert_int_equal(fs.bytes, gone ? 0 : D * LEN);
        assert_int_equal(sl_store_count_updates(f->s, rounds[n], &count), SL_OK);
        assert_int_equal(count, D); /* the records stay */
        partials = 0;
        assert_int_equal(sl_store_foreach_partial(f->s, rounds[n], count_partial, &partials),
                         SL_OK);
        assert_int_equal(partials, gone ? 0 : 1);
    }
    /* a retired update's receipt, and a retry of it (its round is over): the same answer */
    sl_test_update_bytes((uint64_t)(1 * D + 0), frame, sizeof frame, sha);
    assert_int_equal(sl_store_get_receipt(f->s, rounds[1], devices[0], sha, &rec), SL_OK);
    assert_int_equal(rec.duplicate, 1);
    {
        sl_update_put u = {rounds[1], devices[0], frame, sizeof frame, 1, sha, 0};
        memset(&rec, 0, sizeof rec);
        assert_int_equal(sl_store_put_update(f->s, &u, 30000, &rec), SL_OK);
        assert_int_equal(rec.duplicate, 1);
        sha[5] ^= 1; /* another update for it: still a conflict */
        assert_int_equal(sl_store_put_update(f->s, &u, 30000, &rec), SL_ECONFLICT);
    }
    assert_int_equal(round_frames(f->s, rounds[1]).bytes, 0);
    /* again: nothing; fewer rounds over than kept: nothing */
    assert_int_equal(sl_store_retain_updates(f->s, task, 2, &retired), SL_OK);
    assert_int_equal(retired, 0);
    assert_int_equal(sl_store_retain_updates(f->s, task, 9, &retired), SL_OK);
    assert_int_equal(retired, 0);
    assert_int_equal(round_frames(f->s, rounds[4]).bytes, D * LEN);
    /* round 6 closes: 4 goes, the open round's updates never did */
    assert_int_equal(sl_store_get_round(f->s, rounds[R], &r), SL_OK);
    r.state = SL_ROUND_CLOSED;
    assert_int_equal(sl_store_update_round(f->s, &r), SL_OK);
    assert_int_equal(sl_store_retain_updates(f->s, task, 2, &retired), SL_OK);
    assert_int_equal(retired, D);
    assert_int_equal(round_frames(f->s, rounds[4]).bytes, 0);
    assert_int_equal(round_frames(f->s, rounds[5]).bytes, D * LEN);
    assert_int_equal(round_frames(f->s, rounds[6]).bytes, D * LEN);
    /* keep the last 1 */
    assert_int_equal(sl_store_retain_updates(f->s, task, 1, NULL), SL_OK);
    assert_int_equal(round_frames(f->s, rounds[5]).bytes, 0);
    assert_int_equal(round_frames(f->s, rounds[6]).bytes, D * LEN);
    /* another task's rounds are not touched */
    {
        int64_t other_round, other_dev[1];
        frames_seen fs;
        sl_store_receipt rr;
        sl_update_put u;
        sl_test_store_fixture(f->s, &other_round, other_dev, 1);
        sl_test_update_bytes(77, frame, sizeof frame, sha);
        u = (sl_update_put){other_round, other_dev[0], frame, sizeof frame, 1, sha, 0};
        assert_int_equal(sl_store_put_update(f->s, &u, 30000, &rr), SL_OK);
        assert_int_equal(sl_store_get_round(f->s, other_round, &r), SL_OK);
        r.state = SL_ROUND_CLOSED;
        assert_int_equal(sl_store_update_round(f->s, &r), SL_OK);
        assert_int_equal(sl_store_retain_updates(f->s, task, 1, &retired), SL_OK);
        assert_int_equal(retired, 0);
        fs = round_frames(f->s, other_round);
        assert_int_equal(fs.bytes, LEN);
    }
    assert_int_equal(sl_store_retain_updates(f->s, task, 0, &retired), SL_EINVAL);
    assert_int_equal(sl_store_retain_updates(NULL, task, 1, &retired), SL_EINVAL);
}

/* A backup, opened as a store with the full integrity check. */
static sl_store *open_backup(const char *path)
{
    sl_store_options o;
    sl_store *copy = NULL;
    char err[256];
    sl_store_options_default(&o);
    o.path = path;
    o.check = SL_STORE_CHECK_FULL;
    assert_int_equal(sl_store_open(&o, &copy, err, sizeof err), SL_OK);
    return copy;
}

typedef struct bg_ctx {
    sl_store *s;
    int64_t round_id;
    int64_t *devices;
    int n, failures;
} bg_ctx;

static void *background_writes(void *arg)
{
    bg_ctx *b = arg;
    uint8_t frame[4096], sha[32];
    for (int i = 0; i < b->n; i++) {
        sl_store_receipt r;
        sl_update_put u;
        sl_test_update_bytes((uint64_t)i, frame, sizeof frame, sha);
        u = (sl_update_put){b->round_id, b->devices[i], frame, sizeof frame, 1, sha, 0};
        if (sl_store_put_update(b->s, &u, 30000, &r) != SL_OK)
            b->failures++;
    }
    return NULL;
}

static void test_backup_while_writing(void **state)
{
    fixture *f = *state;
    enum { N = 200 };
    int64_t round_id, devices[N];
    char path[700];
    pthread_t th;
    bg_ctx b;
    sl_store *copy;
    uint64_t in_copy = 0, total = 0;
    sl_test_store_fixture(f->s, &round_id, devices, N);
    b = (bg_ctx){f->s, round_id, devices, N, 0};
    pthread_create(&th, NULL, background_writes, &b);
    snprintf(path, sizeof path, "%s/backup.db", f->dir);
    usleep(20000);
    assert_int_equal(sl_store_backup(f->s, path), SL_OK);
    pthread_join(th, NULL);
    assert_int_equal(b.failures, 0);
    copy = open_backup(path);
    assert_int_equal(sl_store_count_updates(copy, round_id, &in_copy), SL_OK);
    assert_int_equal(sl_store_count_updates(f->s, round_id, &total), SL_OK);
    print_message("backup holds %llu of %llu updates\n", (unsigned long long)in_copy,
                  (unsigned long long)total);
    assert_true(in_copy <= total);
    assert_int_equal(total, N);
    sl_store_close(copy);
}

/* A backup holds the rows, not the pages: after retention the retired versions' bytes are
 * not in it (the store's file keeps their freed pages for reuse), and it opens as a store
 * with every record and the kept versions' bytes. */
static void test_backup_after_retention(void **state)
{
    fixture *f = *state;
    enum { V = 24, LEN = 256 * 1024 };
    int64_t task;
    uint8_t *frame = malloc(LEN), sha[32] = {0};
    sl_model_put m = {0};
    sl_model_record r;
    uint32_t retired;
    char path[700];
    struct stat st;
    sl_store *copy;
    assert_non_null(frame);
    assert_int_equal(sl_store_create_task(f->s, "big", "{}", "w 1\n", &task), SL_OK);
    m.task_id = task;
    m.frame = frame;
    m.frame_len = LEN;
    m.sha256 = sha;
    for (int v = 1; v <= V; v++) {
        sl_test_update_bytes((uint64_t)v, frame, LEN, sha); /* incompressible */
        sha[0] = (uint8_t)v;
        m.version = v;
        m.parent = v - 1;
        assert_int_equal(sl_store_put_model(f->s, &m), SL_OK);
    }
    assert_int_equal(sl_store_retain_models(f->s, task, 2, 0, &retired), SL_OK);
    assert_int_equal(retired, V - 3); /* all but 1, V - 1 and V */
    snprintf(path, sizeof path, "%s/backup.db", f->dir);
    assert_int_equal(sl_store_backup(f->s, path), SL_OK);
    assert_int_equal(stat(path, &st), 0);
    print_message("%d versions of %d kB, %d retired: a backup of %lld kB\n", V, LEN / 1024,
                  (int)retired, (long long)st.st_size / 1024);
    /* the three kept frames and little else (the retired ones would be 21 x 256 kB more) */
    assert_true(st.st_size < 3 * LEN + 256 * 1024);
    assert_true(st.st_size > 3 * LEN);
    copy = open_backup(path);
    for (int v = 1; v <= V; v++) {
        int kept = v == 1 || v >= V - 1;
        assert_int_equal(sl_store_get_model(copy, task, v, &r), kept ? SL_OK : SL_ENOENT);
        if (kept) {
            assert_int_equal(r.frame_len, LEN);
            sl_store_model_free(&r);
        }
        assert_int_equal(sl_store_get_model_info(copy, task, v, &r), SL_OK);
        assert_int_equal(r.sha256[0], v);
        sl_store_model_free(&r);
    }
    sl_store_close(copy);
    /* refused: no path, a folder that does not exist (nothing written, the store goes on) */
    assert_int_equal(sl_store_backup(f->s, NULL), SL_EINVAL);
    snprintf(path, sizeof path, "%s/no-such-folder/backup.db", f->dir);
    assert_int_not_equal(sl_store_backup(f->s, path), SL_OK);
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(sl_store_get_model(f->s, task, V, &r), SL_OK);
    sl_store_model_free(&r);
    free(frame);
}

/* Writes until told to stop (or @n are done), one commit each. */
typedef struct stream_ctx {
    sl_store *s;
    int64_t round_id;
    int64_t *devices;
    int n, failures;
    atomic_int done, stop;
    size_t len;
} stream_ctx;

static void *stream_writes(void *arg)
{
    stream_ctx *b = arg;
    uint8_t *frame = malloc(b->len), sha[32];
    for (int i = atomic_load(&b->done); i < b->n && !atomic_load(&b->stop); i++) {
        sl_store_receipt r;
        sl_update_put u;
        sl_test_update_bytes((uint64_t)i, frame, b->len, sha);
        u = (sl_update_put){b->round_id, b->devices[i], frame, b->len, 1, sha, 0};
        if (sl_store_put_update(b->s, &u, 30000, &r) != SL_OK)
            b->failures++;
        atomic_store(&b->done, i + 1);
    }
    free(frame);
    return NULL;
}

/* The backup hook (store_int.h): the first call, with the backup's snapshot held, waits
 * until the writer has committed 60 more updates (10 s at most) and notes how many it saw. */
static stream_ctx *g_busy;
static int g_busy_seen = -1;

static void hold_snapshot(void)
{
    int from, now;
    if (g_busy == NULL || g_busy_seen >= 0)
        return;
    from = atomic_load(&g_busy->done);
    now = from;
    for (int i = 0; i < 10000 && now < from + 60; i++) {
        usleep(1000);
        now = atomic_load(&g_busy->done);
    }
    g_busy_seen = now - from;
}

/* A backup of a store of many pages while commits keep coming: the copy is one read
 * snapshot and ends while the writer still writes. Copied in steps of a few pages, a
 * backup starts again from its first page after every commit of another connection, and
 * under a steady stream of commits never ends (it ended only once the writer stopped).
 * The copy holds its snapshot while the writer commits 60 updates (the backup hook waits
 * for them), so the WAL passes four times the checkpoint mark (a mark of 4 pages here), and
 * the writer goes on committing: it does not wait for the backup's snapshot to end
 * (writer.c; waiting, it committed only until the WAL reached the mark, a few updates, then
 * one more each busy timeout of 5 s). */
static void test_backup_of_a_busy_store(void **state)
{
    fixture *f = *state;
    enum { PREFILL = 640, N = 4000 };
    int64_t round_id;
    int64_t *devices = calloc(N, sizeof *devices);
    char path[700], err[256];
    pthread_t th;
    stream_ctx b;
    sl_store *copy;
    sl_store_options o;
    uint64_t in_copy = 0, total = 0;
    int done_at_backup, done_before;
    struct timespec t0, t1;
    assert_non_null(devices);
    sl_store_close(f->s); /* reopened with a small checkpoint mark */
    sl_store_options_default(&o);
    snprintf(path, sizeof path, "%s/store.db", f->dir);
    o.path = path;
    o.clock = &f->clock.clock;
    o.checkpoint_pages = 4;
    assert_int_equal(sl_store_open(&o, &f->s, err, sizeof err), SL_OK);
    sl_test_store_fixture(f->s, &round_id, devices, N);
    /* about 40 MB: some 10,000 pages of 4 kB */
    b = (stream_ctx){f->s, round_id, devices, PREFILL, 0, 0, 0, 64 * 1024};
    stream_writes(&b);
    assert_int_equal(b.failures, 0);
    /* then small commits, one after another, until the backup is done */
    b.n = N;
    b.len = 512;
    pthread_create(&th, NULL, stream_writes, &b);
    while (atomic_load(&b.done) < PREFILL + 20)
        usleep(1000);
    snprintf(path, sizeof path, "%s/backup.db", f->dir);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    done_before = atomic_load(&b.done);
    g_busy = &b;
    g_busy_seen = -1;
    sl__store_backup_hook = hold_snapshot;
    assert_int_equal(sl_store_backup(f->s, path), SL_OK);
    sl__store_backup_hook = NULL;
    g_busy = NULL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    done_at_backup = atomic_load(&b.done);
    atomic_store(&b.stop, 1);
    pthread_join(th, NULL);
    print_message("backup in %.3f s, while %d updates were committed; it ended after %d of %d "
                  "updates, the writer stopped at %d\n",
                  (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
                  done_at_backup - done_before, done_at_backup, N, atomic_load(&b.done));
    assert_int_equal(b.failures, 0);
    assert_true(done_at_backup < N); /* the backup did not wait for the writer to stop */
    print_message("with the snapshot held, the writer committed %d updates\n", g_busy_seen);
    assert_true(g_busy_seen >= 60); /* nor the writer for the backup */
    copy = open_backup(path);
    assert_int_equal(sl_store_count_updates(copy, round_id, &in_copy), SL_OK);
    assert_int_equal(sl_store_count_updates(f->s, round_id, &total), SL_OK);
    /* a snapshot taken while the writer ran: everything before it, nothing after it */
    assert_true(in_copy >= PREFILL + 20);
    assert_true(in_copy <= (uint64_t)done_at_backup);
    assert_int_equal(total, (uint64_t)atomic_load(&b.done));
    sl_store_close(copy);
    free(devices);
}

static void test_migration_from_v1(void **state)
{
    fixture *f = *state;
    char path[600], err[256];
    sl_store_options o;
    sl_store tmp;
    sl__conn c;
    sl_store *s;
    int v = 0;
    int64_t n;
    (void)state;
    snprintf(path, sizeof path, "%s/old.db", f->dir);
    memset(&tmp, 0, sizeof tmp);
    tmp.path = path;
    tmp.opt.busy_timeout_ms = 1000;
    assert_int_equal(sl__conn_open(&tmp, &c, 0), SL_OK);
    assert_int_equal(sl__schema_create_at(&c, 1), SL_OK);
    assert_int_equal(sl__exec(&c, "INSERT INTO tasks (name, config, layout, created_at) "
                                  "VALUES ('old', '{}', 'w 1\n', 1)"),
                     SL_OK);
    sl__conn_close(&c);
    sl_store_options_default(&o);
    o.path = path;
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_OK);
    assert_int_equal(sl_store_schema_version(s, &v), SL_OK);
    assert_int_equal(v, SL_STORE_SCHEMA_VERSION);
    assert_int_equal(sl_store_audit(s, "admin", "migrated", "from 1"), SL_OK);
    assert_int_equal(sl_store_create_task(s, "old", "{}", "w 1\n", &n), SL_OK);
    assert_int_equal(n, 1); /* the v1 row survived */
    sl_store_close(s);
    /* a newer database is refused, and not touched */
    assert_int_equal(sl__conn_open(&tmp, &c, 0), SL_OK);
    assert_int_equal(sl__exec(&c, "UPDATE schema_version SET version = 99"), SL_OK);
    sl__conn_close(&c);
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_EVERSION);
    assert_non_null(strstr(err, "newer"));
}

static void test_corrupt_file(void **state)
{
    fixture *f = *state;
    char path[600], err[256];
    sl_store_options o;
    sl_store *s = NULL;
    snprintf(path, sizeof path, "%s/junk.db", f->dir);
    assert_int_equal(
        sl_fs_write_atomic(path, "this is not a database, just text...........", 44, 0644), SL_OK);
    sl_store_options_default(&o);
    o.path = path;
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_ECORRUPT);
    assert_null(s);
    assert_true(strlen(err) > 0);
}

/* Another process holds the write lock past the busy timeout: SL_EBUSY, nothing written. */
static void test_locked_database(void **state)
{
    fixture *f = *state;
    char path[600], err[256];
    sl_store_options o;
    sl_store *s;
    sqlite3 *other;
    uint64_t n = 0;
    sl_store_close(f->s);
    snprintf(path, sizeof path, "%s/store.db", f->dir);
    sl_store_options_default(&o);
    o.path = path;
    o.busy_timeout_ms = 200;
    assert_int_equal(sl_store_open(&o, &s, err, sizeof err), SL_OK);
    assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sl_store_audit(s, "admin", "blocked", NULL), SL_EBUSY);
    assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    assert_int_equal(sl_store_count_audit(s, &n), SL_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sl_store_audit(s, "admin", "unblocked", NULL), SL_OK); /* and it recovers */
    sl_store_close(s);
    f->s = sl_test_store_open(f->dir, NULL, &f->clock.clock);
}

static void test_audit(void **state)
{
    fixture *f = *state;
    uint64_t n = 0;
    assert_int_equal(sl_store_audit(f->s, "admin", "abort round", "round 3"), SL_OK);
    assert_int_equal(sl_store_audit(f->s, "admin", "create task", NULL), SL_OK);
    assert_int_equal(sl_store_count_audit(f->s, &n), SL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sl_store_audit(f->s, NULL, "x", NULL), SL_EINVAL);
}

/*
 * What a device's sessions may hold: one live session a round (a new one replaces the
 * device's older one of that round) and SL_STORE_UPLOADS_PER_DEVICE for other rounds; a
 * create beyond is SL_ELIMIT and changes nothing; expired sessions do not count, and
 * other devices are not limited by it.
 */
static void test_upload_limits(void **state)
{
    fixture *f = *state;
    enum { K = SL_STORE_UPLOADS_PER_DEVICE };
    int64_t round_id, devices[2], rounds[K + 2];
    uint8_t frame[600], sha[32];
    sl_upload_record r = {0}, got;
    sl_round_record rr;
    uint64_t off;
    int64_t now_ms = sl_clock_wall_ns(&f->clock.clock) / 1000000;
    sl_test_store_fixture(f->s, &round_id, devices, 2);
    assert_int_equal(sl_store_get_round(f->s, round_id, &rr), SL_OK);
    rounds[0] = round_id;
    for (int i = 1; i < K + 2; i++) {
        rr.id = 0;
        rr.round_no = i + 1;
        assert_int_equal(sl_store_create_round(f->s, &rr), SL_OK);
        rounds[i] = rr.id;
    }
    sl_test_update_bytes(5, frame, sizeof frame, sha);
    r.device_id = devices[0];
    r.length = sizeof frame;
    memcpy(r.sha256, sha, 32);
    r.expires_at_ms = now_ms + 60000;
    for (int i = 0; i < K; i++) { /* rounds 0 .. K-1: one each */
        snprintf(r.id, sizeof r.id, "lim-%d", i);
        r.round_id = rounds[i];
        assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    }
    assert_int_equal(sl_store_append_upload(f->s, "lim-0", 0, frame, 100, 5000, &off), SL_OK);
    /* a K+1-th round: refused, nothing made, nothing of the others touched */
    snprintf(r.id, sizeof r.id, "lim-x");
    r.round_id = rounds[K];
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_ELIMIT);
    assert_int_equal(sl_store_get_upload(f->s, "lim-x", &got), SL_ENOENT);
    for (int i = 0; i < K; i++) {
        char id[16];
        snprintf(id, sizeof id, "lim-%d", i);
        assert_int_equal(sl_store_get_upload(f->s, id, &got), SL_OK);
        assert_int_equal(got.offset, i == 0 ? 100 : 0);
    }
    /* the other device is not limited by this one's sessions */
    r.device_id = devices[1];
    snprintf(r.id, sizeof r.id, "other");
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    r.device_id = devices[0];
    /* a new session of round 0 (another update) replaces the device's older one there,
     * even at the limit: the count is of other rounds */
    snprintf(r.id, sizeof r.id, "lim-0b");
    r.round_id = rounds[0];
    r.sha256[0] ^= 1;
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "lim-0", &got), SL_ENOENT);
    assert_int_equal(sl_store_get_upload(f->s, "lim-0b", &got), SL_OK);
    assert_int_equal(got.offset, 0);
    assert_int_equal(sl_store_get_upload(f->s, "other", &got), SL_OK); /* another device's */
    /* a finished session frees its place */
    assert_int_equal(sl_store_delete_upload(f->s, "lim-1"), SL_OK);
    snprintf(r.id, sizeof r.id, "lim-x");
    r.round_id = rounds[K];
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    /* and after a restart the limit still counts the same sessions */
    reopen(f);
    snprintf(r.id, sizeof r.id, "lim-y");
    r.round_id = rounds[K + 1];
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_ELIMIT);
    /* expired sessions do not count, and a new one of their round leaves them be */
    sl_clock_manual_advance(&f->clock, 61000000000LL);
    r.expires_at_ms = now_ms + 61000 + 60000;
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    snprintf(r.id, sizeof r.id, "lim-z");
    r.round_id = rounds[2];
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "lim-2", &got), SL_ETIMEDOUT);
}

/* Deleting a session (rejected uploads) and the expired/unknown distinction. */
static void test_delete_and_expired_upload(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[2];
    uint8_t frame[4000], sha[32];
    sl_upload_record r = {0}, got;
    uint64_t off, count;
    uint32_t deleted = 99;
    void *data;
    size_t len;
    sl_test_store_fixture(f->s, &round_id, devices, 2);
    sl_test_update_bytes(3, frame, sizeof frame, sha);
    snprintf(r.id, sizeof r.id, "del-1");
    r.device_id = devices[0];
    r.round_id = round_id;
    r.length = sizeof frame;
    memcpy(r.sha256, sha, 32);
    r.num_samples = 7;
    r.expires_at_ms = 1764465820000LL + 60000;
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    assert_int_equal(sl_store_append_upload(f->s, "del-1", 0, frame, 1000, 5000, &off), SL_OK);
    /* deleted: unknown from then on, for every call, and after a restart */
    assert_int_equal(sl_store_delete_upload(f->s, "del-1"), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "del-1", &got), SL_ENOENT);
    assert_int_equal(sl_store_append_upload(f->s, "del-1", 1000, frame, 10, 5000, &off), SL_ENOENT);
    assert_int_equal(sl_store_read_upload(f->s, "del-1", &data, &len), SL_ENOENT);
    assert_int_equal(sl_store_delete_upload(f->s, "del-1"), SL_ENOENT);
    reopen(f);
    assert_int_equal(sl_store_get_upload(f->s, "del-1", &got), SL_ENOENT);
    assert_int_equal(sl_store_delete_upload(f->s, "no such id"), SL_EINVAL);
    assert_int_equal(sl_store_delete_upload(f->s, ""), SL_EINVAL);
    assert_int_equal(sl_store_delete_upload(NULL, "del-1"), SL_EINVAL);
    /* the same id can be used again: nothing of the old session is left */
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "del-1", &got), SL_OK);
    assert_int_equal(got.offset, 0);
    assert_int_equal(sl_store_delete_upload(f->s, "del-1"), SL_OK);
    assert_int_equal(sl_store_count_updates(f->s, round_id, &count), SL_OK);
    assert_int_equal(count, 0); /* deleting a session stores no update */

    /* expired: SL_ETIMEDOUT from get (output untouched), unknown to the writes */
    snprintf(r.id, sizeof r.id, "exp-1");
    r.device_id = devices[1];
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    assert_int_equal(sl_store_append_upload(f->s, "exp-1", 0, frame, 500, 5000, &off), SL_OK);
    sl_clock_manual_advance(&f->clock, 60000000000LL); /* exactly at expires_at: expired */
    memset(&got, 0x5a, sizeof got);
    assert_int_equal(sl_store_get_upload(f->s, "exp-1", &got), SL_ETIMEDOUT);
    assert_int_equal(got.offset, 0x5a5a5a5a5a5a5a5aull);
    assert_int_equal(sl_store_append_upload(f->s, "exp-1", 500, frame, 10, 5000, &off), SL_ENOENT);
    assert_int_equal(sl_store_read_upload(f->s, "exp-1", &data, &len), SL_ENOENT);
    /* the sweep releases the bytes but the session stays known as expired */
    assert_int_equal(sl_store_expire_uploads(f->s, &deleted), SL_OK);
    assert_int_equal(deleted, 1);
    assert_int_equal(sl_store_get_upload(f->s, "exp-1", &got), SL_ETIMEDOUT);
    if (!g_pg_mode) {
        /* another connection, as an operator's sqlite3 shell would see the file */
        char path[600];
        sqlite3 *other;
        sqlite3_stmt *st;
        snprintf(path, sizeof path, "%s/store.db", f->dir);
        assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(other,
                                            "SELECT length(data) FROM uploads WHERE id = 'exp-1'",
                                            -1, &st, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_step(st), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int64(st, 0), 0);
        sqlite3_finalize(st);
        sqlite3_close(other);
    }
    assert_int_equal(sl_store_expire_uploads(f->s, &deleted), SL_OK);
    assert_int_equal(deleted, 0); /* nothing more to release */
    reopen(f);
    assert_int_equal(sl_store_get_upload(f->s, "exp-1", &got), SL_ETIMEDOUT);
    /* a week later the row is purged: unknown */
    sl_clock_manual_advance(&f->clock, SL_STORE_UPLOAD_TOMBSTONE_MS * 1000000LL);
    assert_int_equal(sl_store_expire_uploads(f->s, &deleted), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "exp-1", &got), SL_ENOENT);
    /* an expired session can be deleted at once too */
    snprintf(r.id, sizeof r.id, "exp-2");
    r.expires_at_ms = sl_clock_wall_ns(&f->clock.clock) / 1000000 + 1000;
    assert_int_equal(sl_store_create_upload(f->s, &r), SL_OK);
    sl_clock_manual_advance(&f->clock, 2000000000LL);
    assert_int_equal(sl_store_get_upload(f->s, "exp-2", &got), SL_ETIMEDOUT);
    assert_int_equal(sl_store_delete_upload(f->s, "exp-2"), SL_OK);
    assert_int_equal(sl_store_get_upload(f->s, "exp-2", &got), SL_ENOENT);
}

/* Federated evaluation: one report per device and round, aggregated weighted by samples. */
static void test_evals(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3], last = -1, task;
    sl_store_eval_sum sum;
    sl_round_record r;
    sl_store_eval a = {100, 0.5, 0.8, NAN, NAN}, b = {300, 1.0, 0.6, NAN, NAN};
    sl_store_eval reg = {50, 4.0, NAN, 1.5, 2.0}, bad = a;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    task = r.task_id;
    assert_int_equal(sl_store_round_eval(f->s, round_id, &sum), SL_OK);
    assert_int_equal(sum.devices, 0);
    assert_true(isnan(sum.loss) && isnan(sum.accuracy));
    assert_int_equal(sl_store_last_eval(f->s, task, &last, &sum), SL_OK);
    assert_int_equal(last, 0);
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[0], &a), SL_OK);
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[0], &a), SL_OK); /* a retry */
    bad.loss = 0.25;
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[0], &bad), SL_ECONFLICT);
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[1], &b), SL_OK);
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[2], &reg), SL_OK);
    /* refused values change nothing */
    bad = a;
    bad.samples = 0;
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[2], &bad), SL_EINVAL);
    bad = a;
    bad.accuracy = 1.5;
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[2], &bad), SL_EINVAL);
    bad = a;
    bad.loss = INFINITY;
    assert_int_equal(sl_store_put_eval(f->s, round_id, devices[2], &bad), SL_EINVAL);
    assert_int_equal(sl_store_round_eval(f->s, round_id, &sum), SL_OK);
    assert_int_equal(sum.devices, 3);
    assert_int_equal(sum.samples, 450);
    /* each metric over the reports that have it, weighted by their samples */
    assert_true(fabs((sum.loss) - ((100 * 0.5 + 300 * 1.0 + 50 * 4.0) / 450)) < 1e-12);
    assert_true(fabs((sum.accuracy) - ((100 * 0.8 + 300 * 0.6) / 400)) < 1e-12);
    assert_true(fabs((sum.mae) - (1.5)) < 1e-12);
    assert_true(fabs((sum.rmse) - (2.0)) < 1e-12);
    assert_int_equal(sl_store_last_eval(f->s, task, &last, &sum), SL_OK);
    assert_int_equal(last, round_id);
    assert_int_equal(sum.devices, 3);
}

/* Leadership: one leader at a time, takeover after the lease, and the fence: a store
 * whose epoch was superseded changes no round, and its close stores no model. */
static void test_leadership(void **state)
{
    fixture *f = *state;
    sl_store *b = open_store(f), *b2;
    sl_round_record r;
    sl_model_put m;
    sl_model_record got;
    uint8_t digest[32] = {7};
    int64_t round_id, devices[2], left = 0;
    uint64_t epoch = 0;
    char owner[SL_STORE_MAX_OWNER];
    assert_non_null(b);
    assert_int_equal(sl_store_leader(f->s, owner, sizeof owner, &epoch, &left), SL_ENOENT);
    sl_test_store_fixture(f->s, &round_id, devices, 2);
    assert_int_equal(sl_store_lead(f->s, "a", 60000, &epoch), SL_OK);
    assert_int_equal(epoch, 1);
    assert_int_equal(sl_store_lead(b, "b", 60000, &epoch), SL_EBUSY);
    assert_int_equal(epoch, 1);
    assert_int_equal(sl_store_leader(b, owner, sizeof owner, &epoch, &left), SL_OK);
    assert_string_equal(owner, "a");
    assert_true(left > 50000 && left <= 60000);
    assert_int_equal(sl_store_lead(f->s, "a", 60000, &epoch), SL_OK); /* a renewal */
    assert_int_equal(epoch, 1);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    r.state = SL_ROUND_AGGREGATING;
    assert_int_equal(sl_store_update_round(f->s, &r), SL_OK);

    /* the lease runs out (a leader paused or cut off): another replica takes over */
    assert_int_equal(sl_store_lead(f->s, "a", 300, &epoch), SL_OK);
    if (g_pg_mode)
        usleep(400000); /* the server's clock */
    else
        sl_clock_manual_advance(&f->clock, 400000000LL);
    assert_int_equal(sl_store_lead(b, "b", 60000, &epoch), SL_OK);
    assert_int_equal(epoch, 2);

    /* the old leader wakes up: every round write of its epoch is refused, nothing changes */
    r.state = SL_ROUND_CLOSED;
    assert_int_equal(sl_store_update_round(f->s, &r), SL_EFENCED);
    memset(&m, 0, sizeof m);
    m.task_id = r.task_id;
    m.version = 2;
    m.parent = 1;
    m.frame = "model";
    m.frame_len = 5;
    m.sha256 = digest;
    assert_int_equal(sl_store_close_round(f->s, &r, &m), SL_EFENCED);
    assert_int_equal(sl_store_get_model(f->s, r.task_id, 2, &got), SL_ENOENT);
    assert_int_equal(sl_store_select_participants(f->s, &r, devices, 2), SL_EFENCED);
    {
        sl_round_record next = r;
        next.round_no = 2;
        assert_int_equal(sl_store_create_round(f->s, &next), SL_EFENCED);
    }
    assert_int_equal(sl_store_get_round(b, round_id, &r), SL_OK);
    assert_int_equal(r.state, SL_ROUND_AGGREGATING);
    assert_int_equal(sl_store_lead(f->s, "a", 60000, &epoch), SL_EBUSY);
    assert_int_equal(epoch, 2);
    /* the new leader closes the round with its model */
    r.state = SL_ROUND_CLOSED;
    assert_int_equal(sl_store_close_round(b, &r, &m), SL_OK);
    assert_int_equal(sl_store_get_model(f->s, r.task_id, 2, &got), SL_OK);
    sl_store_model_free(&got);

    /* "b" restarted (a new process of the same name) takes over at once: the old one is fenced */
    b2 = open_store(f);
    assert_non_null(b2);
    assert_int_equal(sl_store_lead(b2, "b", 60000, &epoch), SL_OK);
    assert_int_equal(epoch, 3);
    assert_int_equal(sl_store_update_round(b, &r), SL_EFENCED);
    assert_int_equal(sl_store_update_round(b2, &r), SL_OK);
    /* a clean stop hands over without waiting for the lease */
    assert_int_equal(sl_store_resign(b2, "b"), SL_OK);
    assert_int_equal(sl_store_lead(f->s, "a", 60000, &epoch), SL_OK);
    assert_int_equal(epoch, 4);
    assert_int_equal(sl_store_lead(f->s, "", 60000, &epoch), SL_EINVAL);
    assert_int_equal(sl_store_lead(f->s, "a", 0, &epoch), SL_EINVAL);
    sl_store_close(b2);
    sl_store_close(b);
}

typedef struct seen_checkins {
    int64_t ids[8], at[8];
    int n;
} seen_checkins;

static int collect_checkin(void *ctx, int64_t device_id, int64_t at_ms)
{
    seen_checkins *c = ctx;
    c->ids[c->n] = device_id;
    c->at[c->n++] = at_ms;
    return 0;
}

/* Check-ins relayed through the store: one row per device and task, the newest time. */
static void test_checkins(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3], t0 = sl_clock_wall_ns(&f->clock.clock) / 1000000;
    seen_checkins c = {0};
    sl_round_record r;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    assert_int_equal(sl_store_put_checkin(f->s, r.task_id, devices[2]), SL_OK);
    sl_clock_manual_advance(&f->clock, 5000000000LL);
    assert_int_equal(sl_store_put_checkin(f->s, r.task_id, devices[0]), SL_OK);
    assert_int_equal(sl_store_put_checkin(f->s, r.task_id, devices[2]), SL_OK); /* again: newer */
    assert_int_equal(sl_store_list_checkins(f->s, r.task_id, t0, collect_checkin, &c), SL_OK);
    assert_int_equal(c.n, 2);
    assert_true(c.ids[0] == devices[0] && c.ids[1] == devices[2]);
    assert_true(c.at[0] == t0 + 5000 && c.at[1] == t0 + 5000);
    c.n = 0;
    assert_int_equal(sl_store_list_checkins(f->s, r.task_id, t0 + 5001, collect_checkin, &c),
                     SL_OK);
    assert_int_equal(c.n, 0);
    assert_int_equal(sl_store_put_checkin(f->s, r.task_id, 999), SL_ENOENT);
    assert_int_equal(sl_store_put_checkin(f->s, 999, devices[0]), SL_ENOENT);
    assert_int_equal(sl_store_put_checkin(f->s, r.task_id, 0), SL_EINVAL);
    reopen(f);
    c.n = 0;
    assert_int_equal(sl_store_list_checkins(f->s, r.task_id, 0, collect_checkin, &c), SL_OK);
    assert_int_equal(c.n, 2);
}

typedef struct seen_partials {
    char replica[4][16];
    size_t len[4], n[4];
    int64_t devices[4][4];
    int count;
} seen_partials;

static int collect_partial(void *ctx, const char *replica, const void *data, size_t len,
                           const int64_t *devices, size_t n)
{
    seen_partials *p = ctx;
    (void)data;
    snprintf(p->replica[p->count], sizeof p->replica[0], "%s", replica);
    p->len[p->count] = len;
    p->n[p->count] = n;
    memcpy(p->devices[p->count], devices, (n < 4 ? n : 4) * sizeof *devices);
    p->count++;
    return 0;
}

/* Replicas' partial sums: one per (round, replica), replaced by the newer one, with the
 * exact devices they cover. */
static void test_partials(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3], two[2], one[1];
    seen_partials p;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    two[0] = devices[0], two[1] = devices[2], one[0] = devices[1];
    assert_int_equal(sl_store_put_partial(f->s, round_id, "b", "sum-b", 5, one, 1), SL_OK);
    assert_int_equal(sl_store_put_partial(f->s, round_id, "a", "sum-a1", 6, two, 1), SL_OK);
    assert_int_equal(sl_store_put_partial(f->s, round_id, "a", "sum-a2!", 7, two, 2), SL_OK);
    memset(&p, 0, sizeof p);
    assert_int_equal(sl_store_foreach_partial(f->s, round_id, collect_partial, &p), SL_OK);
    assert_int_equal(p.count, 2);
    assert_string_equal(p.replica[0], "a");
    assert_int_equal(p.len[0], 7);
    assert_int_equal(p.n[0], 2);
    assert_true(p.devices[0][0] == devices[0] && p.devices[0][1] == devices[2]);
    assert_string_equal(p.replica[1], "b");
    assert_int_equal(p.n[1], 1);
    assert_true(p.devices[1][0] == devices[1]);
    assert_int_equal(sl_store_put_partial(f->s, 999, "a", "x", 1, one, 1), SL_ENOENT);
    assert_int_equal(sl_store_put_partial(f->s, round_id, "", "x", 1, one, 1), SL_EINVAL);
    assert_int_equal(sl_store_put_partial(f->s, round_id, "a", NULL, 0, one, 1), SL_EINVAL);
    memset(&p, 0, sizeof p);
    assert_int_equal(sl_store_foreach_partial(f->s, round_id + 1, collect_partial, &p), SL_OK);
    assert_int_equal(p.count, 0);
}

typedef struct seen_downloads {
    char replica[4][16];
    uint64_t bytes[4];
    size_t n[4];
    int64_t devices[4][4];
    int count;
} seen_downloads;

static int collect_downloads(void *ctx, const char *replica, uint64_t bytes, const int64_t *devices,
                             size_t n)
{
    seen_downloads *d = ctx;
    snprintf(d->replica[d->count], sizeof d->replica[0], "%s", replica);
    d->bytes[d->count] = bytes;
    d->n[d->count] = n;
    memcpy(d->devices[d->count], devices, (n < 4 ? n : 4) * sizeof *devices);
    d->count++;
    return 0;
}

/* Replicas' downloads of a round: one record per (round, replica), replaced by the newer one,
 * kept across a reopen; none for another round. */
static void test_downloads(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3], two[2];
    seen_downloads d;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    two[0] = devices[0], two[1] = devices[2];
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "b", 4096, devices + 1, 1), SL_OK);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", 100, two, 1), SL_OK);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", 5000000000ull, two, 2), SL_OK);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "c", 0, NULL, 0), SL_OK);
    reopen(f);
    memset(&d, 0, sizeof d);
    assert_int_equal(sl_store_foreach_downloads(f->s, round_id, collect_downloads, &d), SL_OK);
    assert_int_equal(d.count, 3);
    assert_string_equal(d.replica[0], "a");
    assert_true(d.bytes[0] == 5000000000ull);
    assert_int_equal(d.n[0], 2);
    assert_true(d.devices[0][0] == devices[0] && d.devices[0][1] == devices[2]);
    assert_string_equal(d.replica[1], "b");
    assert_true(d.bytes[1] == 4096);
    assert_int_equal(d.n[1], 1);
    assert_true(d.devices[1][0] == devices[1]);
    assert_string_equal(d.replica[2], "c");
    assert_true(d.bytes[2] == 0);
    assert_int_equal(d.n[2], 0);
    /* bad input changes nothing */
    assert_int_equal(sl_store_put_downloads(f->s, 999, "a", 1, two, 1), SL_ENOENT);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "", 1, two, 1), SL_EINVAL);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", 1, NULL, 1), SL_EINVAL);
    assert_int_equal(sl_store_put_downloads(f->s, 0, "a", 1, two, 1), SL_EINVAL);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, NULL, 1, two, 1), SL_EINVAL);
    assert_int_equal(sl_store_foreach_downloads(f->s, round_id, NULL, &d), SL_EINVAL);
    assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", (uint64_t)INT64_MAX + 1, two, 1),
                     SL_EINVAL);
    { /* the devices are a set: out of order, repeated or not a device id */
        int64_t desc[2] = {two[1], two[0]}, dup[2] = {two[0], two[0]}, zero[2] = {0, two[0]};
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", 1, desc, 2), SL_EINVAL);
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", 1, dup, 2), SL_EINVAL);
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "a", 1, zero, 2), SL_EINVAL);
    }
    memset(&d, 0, sizeof d);
    assert_int_equal(sl_store_foreach_downloads(f->s, round_id, collect_downloads, &d), SL_OK);
    assert_int_equal(d.count, 3);
    assert_true(d.bytes[0] == 5000000000ull);
    memset(&d, 0, sizeof d);
    assert_int_equal(sl_store_foreach_downloads(f->s, round_id + 1, collect_downloads, &d), SL_OK);
    assert_int_equal(d.count, 0);
    { /* the round's own figures: untouched while it is open; a record written after its close
       * raises them to every record's sum (5,000,004,096 bytes, 3 distinct devices), never
       * lowers them, and an abandoned round settles too */
        sl_round_record rec;
        int64_t more[3];
        assert_int_equal(sl_store_get_round(f->s, round_id, &rec), SL_OK);
        assert_true(rec.state < SL_ROUND_CLOSED);
        assert_int_equal(rec.bytes_down, 0);
        assert_int_equal(rec.downloads, 0);
        rec.state = SL_ROUND_CLOSED;
        rec.bytes_down = 7;
        rec.downloads = 1;
        assert_int_equal(sl_store_update_round(f->s, &rec), SL_OK);
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "c", 0, NULL, 0), SL_OK);
        assert_int_equal(sl_store_get_round(f->s, round_id, &rec), SL_OK);
        assert_int_equal(rec.state, SL_ROUND_CLOSED);
        assert_int_equal(rec.bytes_down, 5000004096ll);
        assert_int_equal(rec.downloads, 3);
        memcpy(more, devices, sizeof more); /* "c" now served all three, 10 bytes */
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "c", 10, more, 3), SL_OK);
        assert_int_equal(sl_store_get_round(f->s, round_id, &rec), SL_OK);
        assert_int_equal(rec.bytes_down, 5000004106ll);
        assert_int_equal(rec.downloads, 3);
        rec.bytes_down = 6000000000ll;
        rec.downloads = 5;
        assert_int_equal(sl_store_update_round(f->s, &rec), SL_OK);
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "c", 10, more, 3), SL_OK);
        assert_int_equal(sl_store_get_round(f->s, round_id, &rec), SL_OK);
        assert_int_equal(rec.bytes_down, 6000000000ll);
        assert_int_equal(rec.downloads, 5);
        rec.state = SL_ROUND_ABANDONED;
        rec.bytes_down = 0;
        rec.downloads = 0;
        assert_int_equal(sl_store_update_round(f->s, &rec), SL_OK);
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "b", 4096, devices + 1, 1), SL_OK);
        assert_int_equal(sl_store_get_round(f->s, round_id, &rec), SL_OK);
        assert_int_equal(rec.bytes_down, 5000004106ll);
        assert_int_equal(rec.downloads, 3);
        /* bad input changes nothing, after the close as before */
        assert_int_equal(sl_store_put_downloads(f->s, round_id, "b", 1, NULL, 1), SL_EINVAL);
        assert_int_equal(sl_store_get_round(f->s, round_id, &rec), SL_OK);
        assert_int_equal(rec.bytes_down, 5000004106ll);
    }
}

/* A device's pace for a task: replaced by the newer one, kept across a reopen. */
typedef struct seen_paces {
    int64_t device[4];
    double step_ms[4];
    int n, stop_at;
} seen_paces;

static int collect_pace(void *ctx, int64_t device_id, const sl_store_pace *pace)
{
    seen_paces *p = ctx;
    p->device[p->n] = device_id;
    p->step_ms[p->n++] = pace->step_ms;
    return p->n == p->stop_at ? 7 : 0;
}

static void test_pace(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3], ask[4];
    sl_round_record r;
    sl_store_pace p = {12.5, 250000, 1e6, 0}, got;
    seen_paces sp;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    assert_int_equal(sl_store_get_pace(f->s, r.task_id, devices[0], &got), SL_ENOENT);
    assert_int_equal(sl_store_put_pace(f->s, r.task_id, devices[0], &p), SL_OK);
    p.step_ms = 40.25;
    assert_int_equal(sl_store_put_pace(f->s, r.task_id, devices[0], &p), SL_OK);
    reopen(f);
    assert_int_equal(sl_store_get_pace(f->s, r.task_id, devices[0], &got), SL_OK);
    assert_true(got.step_ms == 40.25 && got.up_bps == 250000 && got.down_bps == 1e6);
    assert_int_equal(got.at_ms, sl_clock_wall_ns(&f->clock.clock) / 1000000);
    p.step_ms = NAN;
    assert_int_equal(sl_store_put_pace(f->s, r.task_id, devices[0], &p), SL_EINVAL);
    p.step_ms = 1;
    assert_int_equal(sl_store_put_pace(f->s, r.task_id, 999, &p), SL_ENOENT);

    /* many at once: those with a pace, each once; the others (and unknown ids) left out */
    p.step_ms = 3.5;
    assert_int_equal(sl_store_put_pace(f->s, r.task_id, devices[2], &p), SL_OK);
    ask[0] = devices[2], ask[1] = devices[1], ask[2] = 999, ask[3] = devices[0];
    memset(&sp, 0, sizeof sp);
    assert_int_equal(sl_store_get_paces(f->s, r.task_id, ask, 4, collect_pace, &sp), SL_OK);
    assert_int_equal(sp.n, 2);
    for (int i = 0; i < 2; i++)
        assert_true((sp.device[i] == devices[0] && sp.step_ms[i] == 40.25) ||
                    (sp.device[i] == devices[2] && sp.step_ms[i] == 3.5));
    assert_true(sp.device[0] != sp.device[1]);
    memset(&sp, 0, sizeof sp);
    assert_int_equal(sl_store_get_paces(f->s, r.task_id + 1, ask, 4, collect_pace, &sp), SL_OK);
    assert_int_equal(sp.n, 0);
    memset(&sp, 0, sizeof sp);
    sp.stop_at = 1; /* the callback's answer stops the walk and comes back */
    assert_int_equal(sl_store_get_paces(f->s, r.task_id, ask, 4, collect_pace, &sp), 7);
    assert_int_equal(sp.n, 1);
    {
        /* more ids than one PostgreSQL statement takes (8,192): both found, once each */
        size_t many = 9000;
        int64_t *ids = calloc(many, sizeof *ids);
        assert_non_null(ids);
        for (size_t i = 0; i < many; i++)
            ids[i] = 1000000 + (int64_t)i;
        ids[3] = devices[0];
        ids[8500] = devices[2];
        memset(&sp, 0, sizeof sp);
        assert_int_equal(sl_store_get_paces(f->s, r.task_id, ids, many, collect_pace, &sp), SL_OK);
        assert_int_equal(sp.n, 2);
        assert_true(sp.device[0] != sp.device[1]);
        free(ids);
    }
    assert_int_equal(sl_store_get_paces(f->s, r.task_id, NULL, 1, collect_pace, &sp), SL_EINVAL);
    assert_int_equal(sl_store_get_paces(f->s, r.task_id, ask, 4, NULL, &sp), SL_EINVAL);
    assert_int_equal(sl_store_get_paces(f->s, r.task_id, ask, 0, collect_pace, &sp), SL_OK);
}

typedef struct seen_history {
    int64_t device[4], last[4];
    uint32_t selected[4], reported[4];
    int n;
} seen_history;

static int collect_history(void *ctx, int64_t device_id, uint32_t selected, uint32_t reported,
                           int64_t last_round_no)
{
    seen_history *h = ctx;
    h->device[h->n] = device_id;
    h->selected[h->n] = selected;
    h->reported[h->n] = reported;
    h->last[h->n++] = last_round_no;
    return 0;
}

static int collect_delay(void *ctx, int64_t delay_ms)
{
    int64_t *d = ctx;
    d[d[3]++] = delay_ms;
    return 0;
}

/* A task's devices' history, from its rounds, participants and updates. */
static void test_device_history(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[3];
    sl_round_record r, r2;
    seen_history h;
    uint8_t frame[64], sha[32];
    sl_store_receipt rc1;
    sl_test_store_fixture(f->s, &round_id, devices, 3);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    assert_int_equal(sl_store_select_participants(f->s, &r, devices, 2), SL_OK);
    sl_test_update_bytes(1, frame, sizeof frame, sha);
    {
        sl_update_put u = {round_id, devices[1], frame, sizeof frame, 5, sha, 0};
        assert_int_equal(sl_store_put_update(f->s, &u, 5000, &rc1), SL_OK);
    }
    r.state = SL_ROUND_CLOSED;
    assert_int_equal(sl_store_update_round(f->s, &r), SL_OK);
    r2 = r;
    r2.round_no = 2;
    r2.state = SL_ROUND_TRAINING;
    assert_int_equal(sl_store_create_round(f->s, &r2), SL_OK);
    assert_int_equal(sl_store_select_participants(f->s, &r2, devices + 1, 2), SL_OK);
    memset(&h, 0, sizeof h);
    assert_int_equal(sl_store_device_history(f->s, r.task_id, collect_history, &h), SL_OK);
    assert_int_equal(h.n, 3);
    assert_true(h.device[0] == devices[0] && h.selected[0] == 1 && h.reported[0] == 0 &&
                h.last[0] == 1);
    assert_true(h.device[1] == devices[1] && h.selected[1] == 2 && h.reported[1] == 1 &&
                h.last[1] == 2);
    assert_true(h.device[2] == devices[2] && h.selected[2] == 1 && h.reported[2] == 0 &&
                h.last[2] == 2);
    memset(&h, 0, sizeof h);
    assert_int_equal(sl_store_device_history(f->s, 999, collect_history, &h), SL_OK);
    assert_int_equal(h.n, 0);
    { /* the same rows, over the rounds before a round, and for some devices alone */
        int64_t ask[3] = {devices[2], 999999, devices[1]};
        memset(&h, 0, sizeof h);
        assert_int_equal(sl_store_device_history_before(f->s, r.task_id, 2, collect_history, &h),
                         SL_OK);
        assert_int_equal(h.n, 2); /* round 1 selected devices 0 and 1 */
        assert_true(h.device[0] == devices[0] && h.selected[0] == 1 && h.reported[0] == 0 &&
                    h.last[0] == 1);
        assert_true(h.device[1] == devices[1] && h.selected[1] == 1 && h.reported[1] == 1 &&
                    h.last[1] == 1);
        memset(&h, 0, sizeof h);
        assert_int_equal(sl_store_device_history_before(f->s, r.task_id, 1, collect_history, &h),
                         SL_OK);
        assert_int_equal(h.n, 0);
        memset(&h, 0, sizeof h);
        assert_int_equal(sl_store_device_history_of(f->s, r.task_id, ask, 3, collect_history, &h),
                         SL_OK);
        assert_int_equal(h.n, 2); /* the unknown id has no history */
        for (int i = 0; i < 2; i++) {
            if (h.device[i] == devices[1])
                assert_true(h.selected[i] == 2 && h.reported[i] == 1 && h.last[i] == 2);
            else
                assert_true(h.device[i] == devices[2] && h.selected[i] == 1 && h.reported[i] == 0 &&
                            h.last[i] == 2);
        }
        memset(&h, 0, sizeof h);
        assert_int_equal(sl_store_device_history_of(f->s, 999, ask, 3, collect_history, &h), SL_OK);
        assert_int_equal(h.n, 0);
        assert_int_equal(sl_store_device_history_of(f->s, r.task_id, NULL, 1, collect_history, &h),
                         SL_EINVAL);
        assert_int_equal(sl_store_device_history_of(f->s, r.task_id, ask, 3, NULL, &h), SL_EINVAL);
        assert_int_equal(sl_store_device_history_before(f->s, r.task_id, 2, NULL, &h), SL_EINVAL);
    }
    { /* one device's rounds before a round: what an assignment's participation says */
        uint32_t k = 99;
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[1], 1, &k), SL_OK);
        assert_int_equal(k, 0); /* its first round */
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[1], 2, &k), SL_OK);
        assert_int_equal(k, 1);
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[1], 3, &k), SL_OK);
        assert_int_equal(k, 2);
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[2], 2, &k), SL_OK);
        assert_int_equal(k, 0); /* not selected in round 1 */
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[0], 3, &k), SL_OK);
        assert_int_equal(k, 1);
        assert_int_equal(sl_store_device_rounds(f->s, 999, devices[1], 3, &k), SL_OK);
        assert_int_equal(k, 0); /* another task's rounds do not count */
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[1], 3, NULL), SL_EINVAL);
    }
    { /* the one update's delay after its round's selection deadline (0 in the fixture) */
        int64_t delays[4] = {0};
        int n = 0;
        assert_int_equal(sl_store_report_delays(f->s, r.task_id, 0, collect_delay, delays), SL_OK);
        n = (int)delays[3];
        assert_int_equal(n, 1);
        assert_int_equal(delays[0], rc1.received_at_ms);
        delays[3] = 0;
        assert_int_equal(sl_store_report_delays(f->s, r.task_id, 1, collect_delay, delays), SL_OK);
        assert_int_equal(delays[3], 0); /* rounds after the first: none */
    }
    { /* an update counts its round once, whether the round selected the device (a round's
       * participant) or not (FedBuff's buffers select no one) */
        uint32_t k = 99;
        sl_store_receipt rc2;
        sl_test_update_bytes(2, frame, sizeof frame, sha);
        sl_update_put u0 = {r2.id, devices[0], frame, sizeof frame, 5, sha, 0};
        assert_int_equal(sl_store_put_update(f->s, &u0, 6000, &rc2), SL_OK);
        sl_test_update_bytes(3, frame, sizeof frame, sha);
        sl_update_put u1 = {r2.id, devices[1], frame, sizeof frame, 5, sha, 0};
        assert_int_equal(sl_store_put_update(f->s, &u1, 6000, &rc2), SL_OK);
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[0], 2, &k), SL_OK);
        assert_int_equal(k, 1);
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[0], 3, &k), SL_OK);
        assert_int_equal(k, 2); /* round 1 selected it, round 2 took its update */
        assert_int_equal(sl_store_device_rounds(f->s, r.task_id, devices[1], 3, &k), SL_OK);
        assert_int_equal(k, 2); /* selected and reported in round 2: once */
    }
}

/* Rows that name a task, round or device the store does not have: SL_ENOENT on both
 * backends, nothing written. */
static void test_unknown_references(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[1];
    sl_round_record r;
    sl_store_eval ev = {10, 0.5, 0.75, NAN, NAN};
    sl_store_session ses;
    sl_test_store_fixture(f->s, &round_id, devices, 1);
    assert_int_equal(sl_store_get_round(f->s, round_id, &r), SL_OK);
    assert_int_equal(sl_store_set_refusal(f->s, r.task_id, 999, "too big"), SL_ENOENT);
    assert_int_equal(sl_store_set_refusal(f->s, 999, devices[0], "too big"), SL_ENOENT);
    assert_int_equal(sl_store_put_eval(f->s, round_id, 999, &ev), SL_ENOENT);
    assert_int_equal(sl_store_put_eval(f->s, 999, devices[0], &ev), SL_ENOENT);
    memset(&ses, 0, sizeof ses);
    snprintf(ses.id, sizeof ses.id, "%032d", 7);
    ses.device_id = 999;
    ses.epoch = 1;
    ses.issued_at_ms = 1;
    ses.expires_at_ms = 2;
    assert_int_equal(sl_store_put_session(f->s, &ses), SL_ENOENT);
}

static int last_session(void *ctx, const sl_store_session *rec)
{
    sl_store_session *last = ctx;
    *last = *rec;
    return 0;
}

/* Issued sessions: a retried write of the same record changes nothing, another record under
 * a recorded id is refused; listing and revoking. */
static void test_sessions(void **state)
{
    fixture *f = *state;
    int64_t round_id, devices[2];
    sl_store_session ses, other, seen;
    uint64_t n = 0;
    int64_t now = sl_clock_wall_ns(&f->clock.clock) / 1000000;
    sl_test_store_fixture(f->s, &round_id, devices, 2);
    memset(&ses, 0, sizeof ses);
    snprintf(ses.id, sizeof ses.id, "%032x", 0xabcdu);
    ses.device_id = devices[0];
    ses.epoch = 1;
    ses.issued_at_ms = now;
    ses.expires_at_ms = now + 60000;
    assert_int_equal(sl_store_put_session(f->s, &ses), SL_OK);
    assert_int_equal(sl_store_put_session(f->s, &ses), SL_OK); /* a retried write */
    other = ses;
    other.expires_at_ms = now + 90000;
    assert_int_equal(sl_store_put_session(f->s, &other), SL_ECONFLICT);
    other = ses;
    other.device_id = devices[1];
    assert_int_equal(sl_store_put_session(f->s, &other), SL_ECONFLICT);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(sl_store_list_sessions(f->s, 0, now, last_session, &seen), SL_OK);
    assert_string_equal(seen.id, ses.id);
    assert_int_equal(seen.device_id, devices[0]);
    assert_int_equal(seen.expires_at_ms, now + 60000); /* the first record, unchanged */
    assert_int_equal(seen.revoked_at_ms, 0);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(sl_store_list_sessions(f->s, devices[1], now, last_session, &seen), SL_OK);
    assert_int_equal(seen.id[0], '\0'); /* none of the other device */
    assert_int_equal(sl_store_revoke_sessions(f->s, devices[0], NULL, &n), SL_OK);
    assert_int_equal(n, 1);
    memset(&seen, 0, sizeof seen);
    assert_int_equal(sl_store_list_sessions(f->s, devices[0], now, last_session, &seen), SL_OK);
    assert_true(seen.revoked_at_ms > 0);
}

int main(int argc, char **argv)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_schema_and_reopen),
        T(test_devices),
        T(test_tasks_and_models),
        T(test_rounds_and_close),
        T(test_updates_idempotent),
        T(test_list_devices),
        T(test_group_commit),
        T(test_uploads),
        T(test_checkpointer),
        T(test_upload_limits),
        T(test_delete_and_expired_upload),
        T(test_retention),
        T(test_retain_updates),
        T(test_backup_while_writing),
        T(test_backup_of_a_busy_store),
        T(test_backup_after_retention),
        T(test_migration_from_v1),
        T(test_refusals),
        T(test_corrupt_file),
        T(test_audit),
        T(test_locked_database),
        T(test_evals),
        T(test_leadership),
        T(test_checkins),
        T(test_partials),
        T(test_downloads),
        T(test_pace),
        T(test_device_history),
        T(test_unknown_references),
        T(test_sessions),
    };
    /* the store's contract, whichever backend keeps it */
    const struct CMUnitTest contract[] = {
        T(test_schema_and_reopen),
        T(test_devices),
        T(test_tasks_and_models),
        T(test_rounds_and_close),
        T(test_updates_idempotent),
        T(test_list_devices),
        T(test_uploads),
        T(test_upload_limits),
        T(test_delete_and_expired_upload),
        T(test_retention),
        T(test_retain_updates),
        T(test_refusals),
        T(test_audit),
        T(test_evals),
        T(test_leadership),
        T(test_checkins),
        T(test_partials),
        T(test_downloads),
        T(test_pace),
        T(test_device_history),
        T(test_unknown_references),
        T(test_sessions),
    };
    if (argc > 1 && strcmp(argv[1], "pg") == 0) {
#ifdef SL_HAVE_PG
        char why[300];
        int rc;
        if (sl_test_pg_start(&g_pg, why, sizeof why) != 0) {
            fprintf(stderr, "PostgreSQL: %s\n", why);
            return 77; /* skipped, naming why */
        }
        g_pg_mode = 1;
        rc = cmocka_run_group_tests(contract, NULL, NULL);
        sl_test_pg_stop(&g_pg);
        return rc;
#else
        fprintf(stderr, "this build has no PostgreSQL store\n");
        return 77;
#endif
    }
    (void)contract;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
