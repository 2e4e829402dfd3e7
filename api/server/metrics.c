/*
 * metrics.c - counters and histograms of the server, the Prometheus text
 * exposition (format 0.0.4) at GET /metrics, and the health checks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

/* Upper bounds of the latency buckets in seconds; +Inf is implied. */
static const double bounds[SL__HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                0.1,   0.25,   0.5,   1,    2.5,   10};

int sl__metrics_init(sl__metrics *m, const char *(*route_label)(int route), int nroutes)
{
    memset(m, 0, sizeof *m);
    m->route_label = route_label;
    m->nroutes = nroutes;
    atomic_init(&m->uploads_in_flight, 0);
    return pthread_mutex_init(&m->lock, NULL) == 0 ? SL_OK : SL_ENOMEM;
}

void sl__metrics_free(sl__metrics *m)
{
    pthread_mutex_destroy(&m->lock);
}

static void observe(sl__hist *h, double seconds)
{
    for (int i = 0; i < SL__HIST_BUCKETS; i++)
        if (seconds <= bounds[i]) {
            h->bucket[i]++;
            break;
        }
    h->count++;
    h->sum += seconds;
}

void sl__metrics_request(sl__metrics *m, int route, int status, int64_t dur_ns, size_t in,
                         size_t out)
{
    sl__route_stats *r;
    int slot = -1;
    if (route < 0 || route >= SL__MAX_ROUTES)
        route = SL__MAX_ROUTES;
    r = &m->routes[route];
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < SL__MAX_STATUSES && slot < 0; i++)
        if (r->status[i] == status || r->status[i] == 0)
            slot = i;
    if (slot < 0)
        slot = SL__MAX_STATUSES - 1; /* more distinct statuses than slots: lump into the last */
    r->status[slot] = r->status[slot] ? r->status[slot] : status;
    r->count[slot]++;
    observe(&r->latency, (double)dur_ns / 1e9);
    m->bytes_in += in;
    m->bytes_out += out;
    pthread_mutex_unlock(&m->lock);
}

void sl__metrics_store_write(sl__metrics *m, int64_t dur_ns)
{
    pthread_mutex_lock(&m->lock);
    observe(&m->store_write, (double)dur_ns / 1e9);
    pthread_mutex_unlock(&m->lock);
}

void sl__metrics_count(sl__metrics *m, uint64_t *counter, uint64_t by)
{
    pthread_mutex_lock(&m->lock);
    *counter += by;
    pthread_mutex_unlock(&m->lock);
}

static void hist_text(sl__text *b, const char *name, const char *labels, const sl__hist *h)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i < SL__HIST_BUCKETS; i++) {
        cum += h->bucket[i];
        sl__text_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i],
                        (unsigned long long)cum);
    }
    sl__text_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                    (unsigned long long)h->count);
    sl__text_printf(b, "%s_sum%s%s%s %.9f\n", name, labels[0] ? "{" : "", labels,
                    labels[0] ? "}" : "", h->sum);
    sl__text_printf(b, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
                    labels[0] ? "}" : "", (unsigned long long)h->count);
}

static void head(sl__text *b, const char *name, const char *type, const char *help)
{
    sl__text_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef struct state_count {
    uint64_t by_state[5];
} state_count;

static int count_round(void *ctx, const sl_round_record *r)
{
    state_count *c = ctx;
    if ((unsigned)r->state < 5)
        c->by_state[r->state]++;
    return 0;
}

typedef struct task_ids {
    int64_t ids[256];
    size_t n;
} task_ids;

static int add_task(void *ctx, int64_t id)
{
    task_ids *t = ctx;
    if (t->n == sizeof t->ids / sizeof t->ids[0])
        return 1; /* the exposition lists the first 256 tasks */
    t->ids[t->n++] = id;
    return 0;
}

/* The newest federated evaluation of each task: the selected devices' figures of a round's
 * base model on their held-out samples, sample-weighted (only the metrics it has). */
static void fed_eval_text(sl_server *s, sl__text *b, const task_ids *t)
{
    static const char *const names[4] = {"loss", "accuracy", "mae", "rmse"};
    sl_store_eval_sum ev[256];
    int64_t round[256];
    for (size_t i = 0; i < t->n; i++)
        if (sl_store_last_eval(s->store, t->ids[i], &round[i], &ev[i]) != SL_OK)
            round[i] = 0;
    head(b, "starling_federated_eval_samples", "gauge",
         "Held-out samples the devices evaluated the newest evaluated round's base model on.");
    for (size_t i = 0; i < t->n; i++)
        if (round[i] > 0)
            sl__text_printf(
                b, "starling_federated_eval_samples{task=\"%lld\",round=\"%lld\"} %llu\n",
                (long long)t->ids[i], (long long)round[i], (unsigned long long)ev[i].samples);
    for (int m = 0; m < 4; m++) {
        char name[64];
        snprintf(name, sizeof name, "starling_federated_eval_%s", names[m]);
        head(b, name, "gauge",
             "The devices' sample-weighted figure of the newest evaluated round's base model.");
        for (size_t i = 0; i < t->n; i++) {
            double v = m == 0   ? ev[i].loss
                       : m == 1 ? ev[i].accuracy
                       : m == 2 ? ev[i].mae
                                : ev[i].rmse;
            if (round[i] > 0 && isfinite(v))
                sl__text_printf(b, "%s{task=\"%lld\",round=\"%lld\"} %.9g\n", name,
                                (long long)t->ids[i], (long long)round[i], v);
        }
    }
}

/* Rounds by state and model versions, read from the store and the engine. */
static void rounds_text(sl_server *s, sl__text *b)
{
    task_ids *t = calloc(1, sizeof *t);
    if (t == NULL)
        return;
    sl_store_list_tasks(s->store, add_task, t);
    head(b, "starling_rounds", "gauge",
         "Rounds of each task by state (the newest 10000 rounds per task).");
    for (size_t i = 0; i < t->n; i++) {
        state_count c;
        memset(&c, 0, sizeof c);
        sl_store_list_rounds(s->store, t->ids[i], 0, 10000, count_round, &c);
        for (int st = 0; st < 5; st++)
            sl__text_printf(b, "starling_rounds{task=\"%lld\",state=\"%s\"} %llu\n",
                            (long long)t->ids[i], sl__round_state_name((sl_round_state)st),
                            (unsigned long long)c.by_state[st]);
    }
    head(b, "starling_model_version", "gauge", "The latest model version of each task.");
    for (size_t i = 0; i < t->n; i++) {
        sl_task_status ts;
        if (sl_engine_task_status(s->engine, t->ids[i], &ts) == SL_OK)
            sl__text_printf(b, "starling_model_version{task=\"%lld\"} %lld\n", (long long)t->ids[i],
                            (long long)ts.model_version);
    }
    fed_eval_text(s, b, t);
    free(t);
}

void sl__h_metrics(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl__text b = {NULL, 0, 0, 0};
    sl__metrics *m = &s->metrics;
    sl__metrics *snap = malloc(sizeof *snap);
    char labels[128];
    int nroutes = m->nroutes;
    (void)p;
    if (snap == NULL) {
        sl__problem_status(rs, rq, SL_ENOMEM, "metrics");
        return;
    }
    pthread_mutex_lock(&m->lock);
    memcpy(snap->routes, m->routes, sizeof m->routes);
    snap->bytes_in = m->bytes_in;
    snap->bytes_out = m->bytes_out;
    snap->uploads_created = m->uploads_created;
    snap->uploads_completed = m->uploads_completed;
    snap->uploads_split = m->uploads_split;
    snap->upload_bytes = m->upload_bytes;
    memcpy(snap->rejected, m->rejected, sizeof m->rejected);
    snap->auth_failures = m->auth_failures;
    snap->rate_limited = m->rate_limited;
    snap->store_write = m->store_write;
    pthread_mutex_unlock(&m->lock);

    head(&b, "starling_http_requests_total", "counter", "HTTP requests by route and status.");
    for (int r = 0; r <= SL__MAX_ROUTES; r++) {
        const char *label = r == SL__MAX_ROUTES ? "unmatched" : m->route_label(r);
        if (r >= nroutes && r != SL__MAX_ROUTES)
            continue;
        for (int i = 0; i < SL__MAX_STATUSES && snap->routes[r].status[i] != 0; i++)
            sl__text_printf(&b, "starling_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                            label, snap->routes[r].status[i],
                            (unsigned long long)snap->routes[r].count[i]);
    }
    head(&b, "starling_http_request_duration_seconds", "histogram",
         "Time from the first byte of a request to its answer, by route.");
    for (int r = 0; r <= SL__MAX_ROUTES; r++) {
        if ((r >= nroutes && r != SL__MAX_ROUTES) || snap->routes[r].latency.count == 0)
            continue;
        snprintf(labels, sizeof labels, "route=\"%s\"",
                 r == SL__MAX_ROUTES ? "unmatched" : m->route_label(r));
        hist_text(&b, "starling_http_request_duration_seconds", labels, &snap->routes[r].latency);
    }
    head(&b, "starling_http_received_bytes_total", "counter", "Request body bytes received.");
    sl__text_printf(&b, "starling_http_received_bytes_total %llu\n",
                    (unsigned long long)snap->bytes_in);
    head(&b, "starling_http_sent_bytes_total", "counter", "Response body bytes sent.");
    sl__text_printf(&b, "starling_http_sent_bytes_total %llu\n",
                    (unsigned long long)snap->bytes_out);
    head(&b, "starling_uploads_in_progress", "gauge", "Upload PATCH requests being handled.");
    sl__text_printf(&b, "starling_uploads_in_progress %ld\n",
                    (long)atomic_load(&m->uploads_in_flight));
    head(&b, "starling_uploads_created_total", "counter", "Upload sessions created.");
    sl__text_printf(&b, "starling_uploads_created_total %llu\n",
                    (unsigned long long)snap->uploads_created);
    head(&b, "starling_uploads_completed_total", "counter", "Uploads accepted by the engine.");
    sl__text_printf(&b, "starling_uploads_completed_total %llu\n",
                    (unsigned long long)snap->uploads_completed);
    head(&b, "starling_uploads_split_total", "counter",
         "Uploads accepted whose positions were coded against the device's last download.");
    sl__text_printf(&b, "starling_uploads_split_total %llu\n",
                    (unsigned long long)snap->uploads_split);
    head(&b, "starling_upload_bytes_total", "counter", "Upload bytes made durable.");
    sl__text_printf(&b, "starling_upload_bytes_total %llu\n",
                    (unsigned long long)snap->upload_bytes);
    head(&b, "starling_updates_rejected_total", "counter", "Completed uploads refused, by reason.");
    for (int r = 1; r < SL_REJECT_REASONS; r++)
        sl__text_printf(&b, "starling_updates_rejected_total{reason=\"%s\"} %llu\n",
                        sl_reject_reason_name((sl_reject_reason)r),
                        (unsigned long long)snap->rejected[r]);
    sl__text_printf(&b, "starling_updates_rejected_total{reason=\"digest_mismatch\"} %llu\n",
                    (unsigned long long)snap->rejected[15]);
    head(&b, "starling_auth_failures_total", "counter", "Requests refused with 401.");
    sl__text_printf(&b, "starling_auth_failures_total %llu\n",
                    (unsigned long long)snap->auth_failures);
    head(&b, "starling_rate_limited_total", "counter", "Device requests refused with 429.");
    sl__text_printf(&b, "starling_rate_limited_total %llu\n",
                    (unsigned long long)snap->rate_limited);
    head(&b, "starling_store_write_seconds", "histogram",
         "Durable store writes on the request path (upload appends, accepts), commit included.");
    hist_text(&b, "starling_store_write_seconds", "", &snap->store_write);
    pthread_mutex_lock(&s->cache_lock);
    head(&b, "starling_model_cache_bytes", "gauge", "Bytes of encoded models held in memory.");
    sl__text_printf(&b, "starling_model_cache_bytes %zu\n", s->cache_bytes);
    pthread_mutex_unlock(&s->cache_lock);
    head(&b, "starling_model_versions_retired_total", "counter",
         "Model versions whose bytes retention retired (tasks with retain_last).");
    sl__text_printf(&b, "starling_model_versions_retired_total %llu\n",
                    (unsigned long long)sl_engine_models_retired(s->engine));
    head(&b, "starling_updates_retired_total", "counter",
         "Stored updates whose bytes retention retired once their round was over (tasks with "
         "retain_last).");
    sl__text_printf(&b, "starling_updates_retired_total %llu\n",
                    (unsigned long long)sl_engine_updates_retired(s->engine));
    {
        int leader = 0;
        uint64_t epoch = 0, promotions = 0;
        (void)sl_engine_role(s->engine, &leader, &epoch, &promotions);
        head(
            &b, "starling_replica_leader", "gauge",
            "1 when this coordinator runs round transitions (it leads its replicas, or has none).");
        sl__text_printf(&b, "starling_replica_leader %d\n", leader);
        head(
            &b, "starling_replica_epoch", "gauge",
            "The fencing epoch this replica leads with (0: it does not lead, or has no replicas).");
        sl__text_printf(&b, "starling_replica_epoch %llu\n",
                        (unsigned long long)(leader ? epoch : 0));
        head(&b, "starling_replica_promotions_total", "counter",
             "Times this replica became the leader.");
        sl__text_printf(&b, "starling_replica_promotions_total %llu\n",
                        (unsigned long long)promotions);
    }
    pthread_mutex_lock(&s->retire_lock);
    head(&b, "starling_tls_reloads_total", "counter",
         "TLS certificates reloaded (SIGHUP, or the files changed).");
    sl__text_printf(&b, "starling_tls_reloads_total %llu\n", (unsigned long long)s->tls_reloads);
    head(&b, "starling_tls_previous_certificates", "gauge",
         "Replaced certificates still serving the connections opened before their reload.");
    sl__text_printf(&b, "starling_tls_previous_certificates %zu\n", s->nretired);
    if (s->cert_not_after > 0) {
        head(&b, "starling_tls_certificate_expiry_timestamp_seconds", "gauge",
             "When the served TLS certificate expires (its notAfter), in Unix seconds.");
        sl__text_printf(&b, "starling_tls_certificate_expiry_timestamp_seconds %lld\n",
                        (long long)s->cert_not_after);
    }
    pthread_mutex_unlock(&s->retire_lock);
    head(&b, "starling_http_requests_in_flight", "gauge", "Requests being handled.");
    sl__text_printf(&b, "starling_http_requests_in_flight %ld\n", (long)atomic_load(&s->inflight));
    rounds_text(s, &b);
    free(snap);
    if (b.failed) {
        sl__text_free(&b);
        sl__problem_status(rs, rq, SL_ENOMEM, "metrics");
        return;
    }
    sl__resp_bytes(rs, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
}

void sl__h_healthz(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    (void)s;
    (void)rq;
    (void)p;
    sl__resp_copy(rs, 200, "text/plain; charset=utf-8", "ok\n", 3);
}

void sl__h_readyz(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    /* real write transactions: expired upload sessions go, and a probe
     * write proves the database takes durable writes now */
    int rc = sl_store_expire_uploads(s->store, NULL);
    if (rc == SL_OK) /* expiry may have had nothing to write: a probe always reaches the disk */
        rc = sl_store_probe_write(s->store);
    (void)p;
    if (rc != SL_OK) {
        sl__problem(rs, rq, 503, "unavailable", NULL, "storage is not writable: %s",
                    sl_strerror(rc));
        sl__resp_header(rs, "Retry-After", "5");
        return;
    }
    {
        char body[64];
        int leader = 1, n;
        uint64_t epoch = 0;
        (void)sl_engine_role(s->engine, &leader, &epoch, NULL);
        if (leader && epoch == 0)
            n = snprintf(body, sizeof body, "ready\n");
        else if (leader)
            n = snprintf(body, sizeof body, "ready: leader, epoch %llu\n",
                         (unsigned long long)epoch);
        else
            n = snprintf(body, sizeof body, "ready: follower\n");
        sl__resp_copy(rs, 200, "text/plain; charset=utf-8", body, (size_t)n);
        sl__resp_header(rs, "X-Starling-Role", !leader ? "follower" : epoch ? "leader" : "single");
    }
}
