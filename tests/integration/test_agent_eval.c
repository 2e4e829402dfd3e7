/*
 * The evaluator against a scripted server (mini_http.c): what it does with an answer to
 * HEAD /v1/models/latest that lacks X-Starling-Model-Version or the ETag (every
 * coordinator sends both; a proxy or another server might not). Such an answer is
 * SL_ECORRUPT: nothing is fetched, evaluated, posted or kept (no ETag remembered, no
 * "evaluated" file), and the loop asks again later. Beside it, the same script with both
 * headers: the evaluator asks for the versions up to the one it names (each gone here:
 * skipped), and asks next with If-None-Match, so the first two cases fail if the evaluator
 * ever used a half answer.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "../support/sl_test.h"
#include "agent_harness.h"
#include "mini_http.h"

enum { EV_NO_VERSION, EV_NO_ETAG, EV_BOTH };

typedef struct ev_script {
    int mode;
    pthread_mutex_t mu;
    int heads, model_gets, posts, other, inm; /* inm: HEADs with If-None-Match */
    char inm_value[128];
    volatile sig_atomic_t stop;
} ev_script;

static void ev_handler(void *ctx, mh_conn *conn, const mh_request *rq)
{
    ev_script *s = ctx;
    const char *inm = mh_header(rq, "If-None-Match");
    static const char problem[] = "{\"title\":\"not found\",\"status\":404}";
    pthread_mutex_lock(&s->mu);
    if (strcmp(rq->method, "HEAD") == 0 && strcmp(rq->path, "/v1/models/latest?task=1") == 0) {
        s->heads++;
        if (inm != NULL) {
            s->inm++;
            snprintf(s->inm_value, sizeof s->inm_value, "%s", inm);
        }
        if (s->mode == EV_BOTH && inm != NULL && strcmp(inm, "\"v3\"") == 0) {
            mh_respond(conn, 304, NULL, NULL, 0);
            s->stop = 1; /* the evaluator knew the version: done */
        } else if (s->mode == EV_NO_VERSION) {
            mh_respond(conn, 200, "ETag: \"v3\"\r\n", NULL, 0);
        } else if (s->mode == EV_NO_ETAG) {
            mh_respond(conn, 200, "X-Starling-Model-Version: 3\r\n", NULL, 0);
        } else {
            mh_respond(conn, 200, "ETag: \"v3\"\r\nX-Starling-Model-Version: 3\r\n", NULL, 0);
        }
        if (s->mode != EV_BOTH && s->heads >= 3)
            s->stop = 1; /* asked three times: it retries, and that is all it does */
    } else if (strncmp(rq->path, "/v1/models/", 11) == 0) {
        s->model_gets++; /* every version is gone: the evaluator skips it */
        mh_respond(conn, 404, "Content-Type: application/problem+json\r\n", problem,
                   sizeof problem - 1);
    } else {
        if (strcmp(rq->method, "POST") == 0)
            s->posts++;
        else if (strstr(rq->path, "/model-spec") == NULL)
            s->other++;
        /* no model spec: the registry model of the options */
        mh_respond(conn, 404, "Content-Type: application/problem+json\r\n", problem,
                   sizeof problem - 1);
    }
    pthread_mutex_unlock(&s->mu);
}

static void run_evaluator(int mode, ev_script *s, const char *dir, const sl_agent_data *data)
{
    char url[64], state[600], path[700], err[256];
    sl_agent_options o;
    struct stat st;
    mh_server *srv;
    int rc;
    memset(s, 0, sizeof *s);
    s->mode = mode;
    pthread_mutex_init(&s->mu, NULL);
    srv = mh_start(ev_handler, s, NULL);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", mh_port(srv));
    snprintf(state, sizeof state, "%s/eval-%d", dir, mode);
    sl_agent_options_default(&o);
    o.coordinator = url;
    o.admin_token = AG_ADMIN;
    o.task_id = 1;
    o.state_dir = state;
    o.model = "mlp";
    o.data = data;
    o.retry_base_ms = 10;
    o.max_attempts = 1;
    o.max_wait_ms = 200;
    o.eval_interval_ms = 20;
    o.request_timeout_ms = 10000;
    o.stop = &s->stop;
    rc = sl_agent_evaluate(&o, err, sizeof err);
    mh_stop(srv);
    pthread_mutex_destroy(&s->mu);
    if (rc != SL_OK)
        fail_msg("mode %d: the evaluator returned %s: %s", mode, sl_strerror(rc), err);
    snprintf(path, sizeof path, "%s/evaluated", state);
    if (mode == EV_BOTH) {
        /* versions 1 to 3 asked for (each gone: skipped, nothing evaluated), then the
         * version known: If-None-Match with the ETag it kept */
        assert_int_equal(s->model_gets, 3);
        assert_int_not_equal(stat(path, &st), 0);
        assert_true(s->inm >= 1);
        assert_string_equal(s->inm_value, "\"v3\"");
    } else {
        assert_int_equal(s->heads, 3);
        assert_int_equal(s->model_gets, 0); /* nothing fetched */
        assert_int_equal(s->inm, 0);        /* no ETag kept from a half answer */
        assert_int_not_equal(stat(path, &st), 0);
    }
    assert_int_equal(s->posts, 0);
    assert_int_equal(s->other, 0);
}

void test_evaluator_half_answers(void **state)
{
    char dir[512], data_dir[600], err[256];
    sl_agent_data *data = NULL;
    ev_script s;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_eval");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    ag_make_data(data_dir, 50, 20);
    assert_int_equal(sl_agent_data_load(data_dir, NULL, 1, 0, 1, 1, &data, err, sizeof err), SL_OK);
    run_evaluator(EV_NO_VERSION, &s, dir, data);
    run_evaluator(EV_NO_ETAG, &s, dir, data);
    run_evaluator(EV_BOTH, &s, dir, data);
    sl_agent_data_free(data);
    sl_test_rmtree(dir);
}
