/*
 * store.c - the store's public API (starling/store.h) over its backends
 * (backend.h): argument checks common to every backend, then the call
 * through the store's table. sl_store_open() picks the backend from the
 * path: a postgresql:// or postgres:// URI opens PostgreSQL, anything else
 * is an SQLite file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"

#define OPS(s) (((const sl__store_head *)(const void *)(s))->ops)

static int text_ok(const char *t)
{
    return t != NULL && strlen(t) < SL_STORE_MAX_TEXT;
}

static int metric_ok(double v, double hi)
{
    return isnan(v) || (isfinite(v) && v >= 0 && v <= hi);
}

int sl__model_put_valid(const sl_model_put *m)
{
    return m != NULL && m->version > 0 && m->parent >= 0 && m->frame != NULL && m->frame_len > 0 &&
           m->sha256 != NULL && (m->metrics == NULL || strlen(m->metrics) < SL_STORE_MAX_TEXT) &&
           (m->opt_state == NULL || m->opt_state_len > 0);
}

int sl__round_valid(const sl_round_record *r)
{
    return r != NULL && (unsigned)r->state <= SL_ROUND_ABANDONED && r->round_no > 0 &&
           memchr(r->error, '\0', sizeof r->error) != NULL;
}

int sl__upload_id_ok(const char *id)
{
    size_t n;
    if (id == NULL)
        return 0;
    n = strnlen(id, SL_STORE_UPLOAD_ID + 1);
    if (n == 0 || n > SL_STORE_UPLOAD_ID)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_'))
            return 0;
    }
    return 1;
}

void sl_store_options_default(sl_store_options *o)
{
    memset(o, 0, sizeof *o);
    o->check = SL_STORE_CHECK_QUICK;
    o->busy_timeout_ms = 5000;
    o->max_batch = 512;
    o->readers = 4;
    o->checkpoint_pages = 1000;
}

int sl_store_is_url(const char *path)
{
    return path != NULL &&
           (strncmp(path, "postgresql://", 13) == 0 || strncmp(path, "postgres://", 11) == 0);
}

int sl_store_open(const sl_store_options *o, sl_store **out, char *err, size_t errcap)
{
    char dummy[8];
    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    if (errcap > 0)
        err[0] = '\0';
    if (out != NULL)
        *out = NULL;
    if (o == NULL || o->path == NULL || out == NULL || o->readers == 0 || o->max_batch == 0) {
        snprintf(err, errcap, "invalid store options");
        return SL_EINVAL;
    }
    if (sl_store_is_url(o->path)) {
#ifdef SL_HAVE_PG
        return sl__pg_open(o, out, err, errcap);
#else
        snprintf(err, errcap, "this build has no PostgreSQL store (it needs libpq-dev)");
        return SL_EUNSUPPORTED;
#endif
    }
    return sl__sq_open(o, out, err, errcap);
}

void sl_store_close(sl_store *s)
{
    if (s != NULL)
        OPS(s)->close(s);
}

const char *sl_store_backend(const sl_store *s)
{
    return s != NULL ? OPS(s)->name : "";
}

int sl_store_create_task(sl_store *s, const char *name, const char *config_json,
                         const char *layout_text, int64_t *task_id)
{
    return sl_store_create_task_spec(s, name, config_json, layout_text, NULL, task_id);
}

int sl_store_create_task_spec(sl_store *s, const char *name, const char *config_json,
                              const char *layout_text, const char *model_spec, int64_t *task_id)
{
    return sl_store_create_task_docs(s, name, config_json, layout_text, model_spec, NULL, task_id);
}

void sl_store_task_free(sl_task_record *t)
{
    if (t == NULL)
        return;
    free(t->name);
    free(t->config_json);
    free(t->layout_text);
    free(t->model_spec);
    free(t->data_contract);
    t->name = t->config_json = t->layout_text = t->model_spec = t->data_contract = NULL;
}

void sl_store_model_free(sl_model_record *m)
{
    if (m == NULL)
        return;
    free(m->frame);
    free(m->metrics);
    free(m->opt_state);
    m->frame = m->opt_state = NULL;
    m->metrics = NULL;
}

int sl_store_schema_version(sl_store *s, int *version)
{
    if (s == NULL || version == NULL)
        return SL_EINVAL;
    return OPS(s)->schema_version(s, version);
}

int sl_store_enrol_device(sl_store *s, const uint8_t *key, size_t key_len, const char *capabilities,
                          int64_t *device_id)
{
    if (s == NULL || key == NULL || key_len == 0 || key_len > SL_STORE_MAX_KEY ||
        device_id == NULL || (capabilities != NULL && !text_ok(capabilities)))
        return SL_EINVAL;
    if (capabilities == NULL)
        capabilities = "{}";
    return OPS(s)->enrol_device(s, key, key_len, capabilities, device_id);
}

int sl_store_set_device_disabled(sl_store *s, int64_t device_id, int disabled)
{
    if (s == NULL || device_id < 1)
        return SL_EINVAL;
    return OPS(s)->set_device_disabled(s, device_id, disabled);
}

int sl_store_get_device(sl_store *s, int64_t device_id, sl_device_record *out)
{
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->get_device(s, device_id, out);
}

int sl_store_touch_device(sl_store *s, int64_t device_id)
{
    if (s == NULL)
        return SL_EINVAL;
    return OPS(s)->touch_device(s, device_id);
}

int sl_store_create_task_docs(sl_store *s, const char *name, const char *config_json,
                              const char *layout_text, const char *model_spec,
                              const char *data_contract, int64_t *task_id)
{
    if (s == NULL || name == NULL || name[0] == '\0' || strlen(name) > 256 || config_json == NULL ||
        layout_text == NULL || task_id == NULL || (model_spec != NULL && model_spec[0] == '\0') ||
        (data_contract != NULL && data_contract[0] == '\0'))
        return SL_EINVAL;
    return OPS(s)->create_task_docs(s, name, config_json, layout_text, model_spec, data_contract,
                                    task_id);
}

int sl_store_get_task(sl_store *s, int64_t task_id, sl_task_record *out)
{
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->get_task(s, task_id, out);
}

int sl_store_list_tasks(sl_store *s, int (*fn)(void *ctx, int64_t task_id), void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->list_tasks(s, fn, ctx);
}

int sl_store_set_refusal(sl_store *s, int64_t task_id, int64_t device_id, const char *reason)
{
    if (s == NULL || reason == NULL || strlen(reason) >= SL_STORE_MAX_TEXT)
        return SL_EINVAL;
    return OPS(s)->set_refusal(s, task_id, device_id, reason);
}

int sl_store_list_refusals(sl_store *s, int64_t task_id, int64_t device_id,
                           int (*fn)(void *ctx, int64_t task_id, int64_t device_id,
                                     const char *reason, int64_t at_ms),
                           void *ctx)
{
    if (s == NULL || fn == NULL || task_id < 0 || device_id < 0)
        return SL_EINVAL;
    return OPS(s)->list_refusals(s, task_id, device_id, fn, ctx);
}

int sl_store_put_eval(sl_store *s, int64_t round_id, int64_t device_id, const sl_store_eval *ev)
{
    if (s == NULL || ev == NULL || round_id < 1 || device_id < 1 || ev->samples == 0 ||
        !isfinite(ev->loss) || ev->loss < 0 || !metric_ok(ev->accuracy, 1) ||
        !metric_ok(ev->mae, HUGE_VAL) || !metric_ok(ev->rmse, HUGE_VAL))
        return SL_EINVAL;
    return OPS(s)->put_eval(s, round_id, device_id, ev);
}

int sl_store_round_eval(sl_store *s, int64_t round_id, sl_store_eval_sum *out)
{
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->round_eval(s, round_id, out);
}

int sl_store_last_eval(sl_store *s, int64_t task_id, int64_t *round_id, sl_store_eval_sum *out)
{
    if (s == NULL || round_id == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->last_eval(s, task_id, round_id, out);
}

int sl_store_audit(sl_store *s, const char *actor, const char *action, const char *detail)
{
    if (s == NULL || !text_ok(actor) || !text_ok(action) || (detail != NULL && !text_ok(detail)))
        return SL_EINVAL;
    if (detail == NULL)
        detail = "";
    return OPS(s)->audit(s, actor, action, detail);
}

int sl_store_count_audit(sl_store *s, uint64_t *count)
{
    if (s == NULL || count == NULL)
        return SL_EINVAL;
    return OPS(s)->count_audit(s, count);
}

int sl_store_probe_write(sl_store *s)
{
    if (s == NULL)
        return SL_EINVAL;
    return OPS(s)->probe_write(s);
}

int sl_store_count_devices(sl_store *s, uint64_t *count)
{
    if (s == NULL || count == NULL)
        return SL_EINVAL;
    return OPS(s)->count_devices(s, count);
}

int sl_store_list_devices(sl_store *s, int64_t after, uint32_t offset, uint32_t limit,
                          int (*fn)(void *ctx, const sl_device_summary *d), void *ctx)
{
    if (s == NULL || fn == NULL || after < 0)
        return SL_EINVAL;
    if (limit == 0)
        return SL_OK;
    return OPS(s)->list_devices(s, after, offset, limit, fn, ctx);
}

int sl_store_list_reporters(sl_store *s, int64_t round_id, int (*fn)(void *ctx, int64_t device_id),
                            void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->list_reporters(s, round_id, fn, ctx);
}

int sl_store_put_model(sl_store *s, const sl_model_put *m)
{
    if (s == NULL || !sl__model_put_valid(m))
        return SL_EINVAL;
    return OPS(s)->put_model(s, m);
}

int sl_store_get_model(sl_store *s, int64_t task_id, int64_t version, sl_model_record *out)
{
    if (s == NULL || out == NULL || version < 0)
        return SL_EINVAL;
    return OPS(s)->get_model(s, task_id, version, 0, out);
}

int sl_store_get_model_info(sl_store *s, int64_t task_id, int64_t version, sl_model_record *out)
{
    if (s == NULL || out == NULL || version < 0)
        return SL_EINVAL;
    return OPS(s)->get_model(s, task_id, version, 1, out);
}

int sl_store_set_model_metrics(sl_store *s, int64_t task_id, int64_t version, const char *metrics)
{
    if (s == NULL || metrics == NULL || strlen(metrics) >= SL_STORE_MAX_TEXT)
        return SL_EINVAL;
    return OPS(s)->set_model_metrics(s, task_id, version, metrics);
}

int sl_store_retain_models(sl_store *s, int64_t task_id, uint32_t keep_last, uint32_t keep_every,
                           uint32_t *retired)
{
    if (s == NULL || keep_last == 0)
        return SL_EINVAL;
    return OPS(s)->retain_models(s, task_id, keep_last, keep_every, retired);
}

int sl_store_retain_updates(sl_store *s, int64_t task_id, uint32_t keep_rounds, uint64_t *retired)
{
    if (s == NULL || keep_rounds == 0)
        return SL_EINVAL;
    return OPS(s)->retain_updates(s, task_id, keep_rounds, retired);
}

int sl_store_create_round(sl_store *s, sl_round_record *r)
{
    if (s == NULL || !sl__round_valid(r))
        return SL_EINVAL;
    return OPS(s)->create_round(s, r);
}

int sl_store_update_round(sl_store *s, const sl_round_record *r)
{
    if (s == NULL || !sl__round_valid(r))
        return SL_EINVAL;
    return OPS(s)->update_round(s, r);
}

int sl_store_get_round(sl_store *s, int64_t round_id, sl_round_record *out)
{
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->get_round(s, round_id, out);
}

int sl_store_list_rounds(sl_store *s, int64_t task_id, uint32_t offset, uint32_t limit,
                         int (*fn)(void *ctx, const sl_round_record *r), void *ctx)
{
    if (s == NULL)
        return SL_EINVAL;
    return OPS(s)->list_rounds(s, task_id, offset, limit, fn, ctx);
}

int sl_store_unfinished_rounds(sl_store *s, int (*fn)(void *ctx, const sl_round_record *r),
                               void *ctx)
{
    if (s == NULL)
        return SL_EINVAL;
    return OPS(s)->unfinished_rounds(s, fn, ctx);
}

int sl_store_close_round(sl_store *s, const sl_round_record *r, const sl_model_put *m)
{
    if (s == NULL || !sl__round_valid(r) || (m != NULL && !sl__model_put_valid(m)))
        return SL_EINVAL;
    return OPS(s)->close_round(s, r, m);
}

/* What sl_store_set_participant() and sl_store_mark_participant() take. */
static int participant_ok(const sl_store *s, sl_participant_state state, const char *reason)
{
    return s != NULL && (unsigned)state <= SL_PART_REJECTED &&
           (reason == NULL || strlen(reason) < 128);
}

int sl_store_set_participant(sl_store *s, int64_t round_id, int64_t device_id,
                             sl_participant_state state, const char *reason)
{
    if (!participant_ok(s, state, reason))
        return SL_EINVAL;
    return OPS(s)->set_participant(s, round_id, device_id, state, reason ? reason : "");
}

int sl_store_mark_participant(sl_store *s, int64_t round_id, int64_t device_id,
                              sl_participant_state state, const char *reason)
{
    if (!participant_ok(s, state, reason))
        return SL_EINVAL;
    return OPS(s)->mark_participant(s, round_id, device_id, state, reason ? reason : "");
}

int sl_store_select_participants(sl_store *s, const sl_round_record *r, const int64_t *devices,
                                 size_t n)
{
    if (s == NULL || !sl__round_valid(r) || (devices == NULL && n > 0))
        return SL_EINVAL;
    return OPS(s)->select_participants(s, r, devices, n);
}

int sl_store_list_participants(sl_store *s, int64_t round_id,
                               int (*fn)(void *ctx, const sl_participant_record *p), void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->list_participants(s, round_id, fn, ctx);
}

int sl_store_put_update(sl_store *s, const sl_update_put *u, int64_t timeout_ms,
                        sl_store_receipt *out)
{
    if (s == NULL || u == NULL || u->frame == NULL || u->frame_len == 0 ||
        u->frame_len > SL__MAX_UPLOAD || u->sha256 == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->put_update(s, u, timeout_ms, out);
}

int sl_store_get_receipt(sl_store *s, int64_t round_id, int64_t device_id, const uint8_t *sha256,
                         sl_store_receipt *out)
{
    if (s == NULL || sha256 == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->get_receipt(s, round_id, device_id, sha256, out);
}

int sl_store_count_updates(sl_store *s, int64_t round_id, uint64_t *count)
{
    if (s == NULL || count == NULL)
        return SL_EINVAL;
    return OPS(s)->count_updates(s, round_id, count);
}

int sl_store_foreach_update(sl_store *s, int64_t round_id,
                            int (*fn)(void *ctx, int64_t device_id, const void *frame, size_t len,
                                      uint32_t num_samples, const uint8_t *sha256),
                            void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->foreach_update(s, round_id, fn, ctx);
}

int sl_store_create_upload(sl_store *s, const sl_upload_record *r)
{
    if (s == NULL || r == NULL || !sl__upload_id_ok(r->id) || r->length == 0 ||
        r->length > SL__MAX_UPLOAD)
        return r != NULL && r->length > SL__MAX_UPLOAD ? SL_ETOOBIG : SL_EINVAL;
    return OPS(s)->create_upload(s, r);
}

int sl_store_get_upload(sl_store *s, const char *id, sl_upload_record *out)
{
    if (s == NULL || out == NULL || !sl__upload_id_ok(id))
        return SL_EINVAL;
    return OPS(s)->get_upload(s, id, out);
}

int sl_store_append_upload(sl_store *s, const char *id, uint64_t offset, const void *data,
                           size_t len, int64_t timeout_ms, uint64_t *new_offset)
{
    if (s == NULL || !sl__upload_id_ok(id) || (data == NULL && len > 0) || new_offset == NULL)
        return SL_EINVAL;
    if (len > SL__MAX_UPLOAD)
        return SL_ETOOBIG;
    return OPS(s)->append_upload(s, id, offset, data, len, timeout_ms, new_offset);
}

int sl_store_read_upload(sl_store *s, const char *id, void **out, size_t *len)
{
    if (s == NULL || !sl__upload_id_ok(id) || out == NULL || len == NULL)
        return SL_EINVAL;
    return OPS(s)->read_upload(s, id, out, len);
}

int sl_store_finish_upload(sl_store *s, const char *id, int64_t timeout_ms, sl_store_receipt *out)
{
    if (s == NULL || !sl__upload_id_ok(id) || out == NULL)
        return SL_EINVAL;
    return OPS(s)->finish_upload(s, id, timeout_ms, out);
}

int sl_store_delete_upload(sl_store *s, const char *id)
{
    if (s == NULL || !sl__upload_id_ok(id))
        return SL_EINVAL;
    return OPS(s)->delete_upload(s, id);
}

int sl_store_expire_uploads(sl_store *s, uint32_t *deleted)
{
    if (s == NULL)
        return SL_EINVAL;
    return OPS(s)->expire_uploads(s, deleted);
}

int sl_store_session_secret(sl_store *s, int rotate, uint32_t *epoch,
                            uint8_t secret[SL_STORE_SECRET_LEN])
{
    if (s == NULL || epoch == NULL || secret == NULL)
        return SL_EINVAL;
    return OPS(s)->session_secret(s, rotate, epoch, secret);
}

int sl_store_session_secret_of(sl_store *s, uint32_t epoch, uint8_t secret[SL_STORE_SECRET_LEN])
{
    if (s == NULL || secret == NULL)
        return SL_EINVAL;
    return OPS(s)->session_secret_of(s, epoch, secret);
}

int sl_store_put_session(sl_store *s, const sl_store_session *rec)
{
    if (s == NULL || rec == NULL || strlen(rec->id) != 32 || rec->device_id < 1 ||
        rec->expires_at_ms <= rec->issued_at_ms)
        return SL_EINVAL;
    return OPS(s)->put_session(s, rec);
}

int sl_store_list_sessions(sl_store *s, int64_t device_id, int64_t now_ms,
                           int (*fn)(void *ctx, const sl_store_session *rec), void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->list_sessions(s, device_id, now_ms, fn, ctx);
}

int sl_store_revoke_sessions(sl_store *s, int64_t device_id, const char *id, uint64_t *count)
{
    if (s == NULL || device_id < 1 || (id != NULL && strlen(id) != 32))
        return SL_EINVAL;
    return OPS(s)->revoke_sessions(s, device_id, id, count);
}

int sl_store_backup(sl_store *s, const char *dest_path)
{
    if (s == NULL || dest_path == NULL)
        return SL_EINVAL;
    return OPS(s)->backup(s, dest_path);
}

static int owner_ok(const char *owner)
{
    size_t n = owner != NULL ? strnlen(owner, SL_STORE_MAX_OWNER) : 0;
    return n > 0 && n < SL_STORE_MAX_OWNER;
}

sl__lead_action sl__lead_decide(int have_row, const char *row_owner, uint64_t row_epoch,
                                int64_t row_expires_ms, int64_t now_ms, const char *owner,
                                uint64_t fence)
{
    if (!have_row)
        return SL__LEAD_TAKE;
    if (strcmp(row_owner, owner) == 0)
        /* the holder renews; a replica restarted under the same name takes over with a new
         * epoch, which fences the old process should it still be running */
        return row_epoch == fence ? SL__LEAD_RENEW : SL__LEAD_TAKE;
    return row_expires_ms <= now_ms ? SL__LEAD_TAKE : SL__LEAD_BUSY;
}

int sl_store_lead(sl_store *s, const char *owner, int64_t lease_ms, uint64_t *epoch)
{
    if (s == NULL || !owner_ok(owner) || lease_ms <= 0 || epoch == NULL)
        return SL_EINVAL;
    return OPS(s)->lead(s, owner, lease_ms, epoch);
}

int sl_store_leader(sl_store *s, char *owner, size_t cap, uint64_t *epoch, int64_t *remaining_ms)
{
    if (s == NULL)
        return SL_EINVAL;
    return OPS(s)->leader(s, owner, cap, epoch, remaining_ms);
}

int sl_store_resign(sl_store *s, const char *owner)
{
    if (s == NULL || !owner_ok(owner))
        return SL_EINVAL;
    return OPS(s)->resign(s, owner);
}

int sl_store_migrate(const char *from_path, const char *to_uri, uint64_t *rows, char *err,
                     size_t errcap)
{
    sl_store_options o;
    sl_store *from = NULL, *to = NULL;
    char dummy[8];
    int rc;
    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    if (from_path == NULL || to_uri == NULL || sl_store_is_url(from_path) ||
        !sl_store_is_url(to_uri)) {
        snprintf(err, errcap, "migrate needs an SQLite file and a postgresql:// URI");
        return SL_EINVAL;
    }
    {
        /* a source that is not there is a mistake, not an empty store to create */
        struct stat st;
        if (stat(from_path, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(err, errcap, "no SQLite store at %s (not a file)", from_path);
            return SL_ENOENT;
        }
    }
#ifdef SL_HAVE_PG
    /* both at this build's schema version first: the same tables and columns */
    sl_store_options_default(&o);
    o.path = from_path;
    o.check = SL_STORE_CHECK_FULL;
    rc = sl_store_open(&o, &from, err, errcap);
    sl_store_close(from);
    if (rc != SL_OK)
        return rc;
    o.path = to_uri;
    rc = sl_store_open(&o, &to, err, errcap);
    if (rc == SL_OK)
        rc = sl__pg_migrate_from(from_path, to, rows, err, errcap);
    sl_store_close(to);
    return rc;
#else
    (void)o, (void)from, (void)to, (void)rc, (void)rows;
    snprintf(err, errcap, "this build has no PostgreSQL store (it needs libpq-dev)");
    return SL_EUNSUPPORTED;
#endif
}

int sl_store_put_checkin(sl_store *s, int64_t task_id, int64_t device_id)
{
    if (s == NULL || task_id < 1 || device_id < 1)
        return SL_EINVAL;
    return OPS(s)->put_checkin(s, task_id, device_id);
}

int sl_store_list_checkins(sl_store *s, int64_t task_id, int64_t since_ms,
                           int (*fn)(void *ctx, int64_t device_id, int64_t at_ms), void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->list_checkins(s, task_id, since_ms, fn, ctx);
}

int sl_store_put_partial(sl_store *s, int64_t round_id, const char *replica, const void *data,
                         size_t len, const int64_t *devices, size_t n)
{
    if (s == NULL || round_id < 1 || !owner_ok(replica) || data == NULL || len == 0 ||
        len > SL__MAX_UPLOAD || (devices == NULL && n > 0) || n > SL__MAX_UPLOAD / 8)
        return SL_EINVAL;
    return OPS(s)->put_partial(s, round_id, replica, data, len, devices, n);
}

int sl_store_foreach_partial(sl_store *s, int64_t round_id,
                             int (*fn)(void *ctx, const char *replica, const void *data, size_t len,
                                       const int64_t *devices, size_t n),
                             void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->foreach_partial(s, round_id, fn, ctx);
}

int sl_store_get_paces(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                       int (*fn)(void *ctx, int64_t device_id, const sl_store_pace *pace),
                       void *ctx)
{
    if (s == NULL || fn == NULL || (ids == NULL && n > 0))
        return SL_EINVAL;
    if (n == 0)
        return SL_OK;
    return OPS(s)->get_paces(s, task_id, ids, n, fn, ctx);
}

int sl_store_put_downloads(sl_store *s, int64_t round_id, const char *replica, uint64_t bytes,
                           const int64_t *devices, size_t n)
{
    if (s == NULL || round_id < 1 || !owner_ok(replica) || bytes > (uint64_t)INT64_MAX ||
        (devices == NULL && n > 0) || n > SL__MAX_UPLOAD / 8)
        return SL_EINVAL;
    for (size_t i = 0; i < n; i++) /* device ids: positive, strictly ascending (a set) */
        if (devices[i] < 1 || (i > 0 && devices[i] <= devices[i - 1]))
            return SL_EINVAL;
    return OPS(s)->put_downloads(s, round_id, replica, bytes, devices, n);
}

int sl_store_foreach_downloads(sl_store *s, int64_t round_id,
                               int (*fn)(void *ctx, const char *replica, uint64_t bytes,
                                         const int64_t *devices, size_t n),
                               void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->foreach_downloads(s, round_id, fn, ctx);
}

int sl_store_list_steps(sl_store *s, int64_t round_id,
                        int (*fn)(void *ctx, int64_t device_id, uint32_t local_steps), void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->list_steps(s, round_id, fn, ctx);
}

static int pace_ok(double v)
{
    return isfinite(v) && v >= 0;
}

int sl_store_put_pace(sl_store *s, int64_t task_id, int64_t device_id, const sl_store_pace *p)
{
    if (s == NULL || task_id < 1 || device_id < 1 || p == NULL || !pace_ok(p->step_ms) ||
        !pace_ok(p->up_bps) || !pace_ok(p->down_bps))
        return SL_EINVAL;
    return OPS(s)->put_pace(s, task_id, device_id, p);
}

int sl_store_get_pace(sl_store *s, int64_t task_id, int64_t device_id, sl_store_pace *out)
{
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    return OPS(s)->get_pace(s, task_id, device_id, out);
}

int sl_store_device_history(sl_store *s, int64_t task_id,
                            int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                      uint32_t reported, int64_t last_round_no),
                            void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->device_history(s, task_id, INT64_MAX, fn, ctx);
}

int sl_store_device_history_before(sl_store *s, int64_t task_id, int64_t before_round_no,
                                   int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                             uint32_t reported, int64_t last_round_no),
                                   void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->device_history(s, task_id, before_round_no, fn, ctx);
}

int sl_store_device_history_of(sl_store *s, int64_t task_id, const int64_t *ids, size_t n,
                               int (*fn)(void *ctx, int64_t device_id, uint32_t selected,
                                         uint32_t reported, int64_t last_round_no),
                               void *ctx)
{
    if (s == NULL || fn == NULL || (ids == NULL && n > 0))
        return SL_EINVAL;
    if (n == 0)
        return SL_OK;
    return OPS(s)->device_history_of(s, task_id, ids, n, fn, ctx);
}

int sl_store_device_rounds(sl_store *s, int64_t task_id, int64_t device_id, int64_t before_round_no,
                           uint32_t *out)
{
    int rc;
    if (s == NULL || out == NULL)
        return SL_EINVAL;
    *out = 0;
    rc = OPS(s)->device_rounds(s, task_id, device_id, before_round_no, out);
    if (rc != SL_OK)
        *out = 0; /* whatever a failing backend left */
    return rc;
}

int sl_store_report_delays(sl_store *s, int64_t task_id, int64_t after_round_no,
                           int (*fn)(void *ctx, int64_t delay_ms), void *ctx)
{
    if (s == NULL || fn == NULL)
        return SL_EINVAL;
    return OPS(s)->report_delays(s, task_id, after_round_no, fn, ctx);
}
