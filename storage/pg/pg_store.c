/*
 * pg_store.c - the PostgreSQL backend: opening the store (one connection at
 * once, the schema migrated), closing it, and its table of operations
 * (backend.h), at the top of the backend's layers (pg_int.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pg_int.h"

int sl__pg_migrate(PGconn *c, char *err, size_t cap); /* pg_schema.c */

/* ---- open and close ------------------------------------------------------ */

static void pg_close(sl_store *s)
{
    sl__pg *p = (sl__pg *)(void *)s;
    for (uint32_t i = 0; i < p->nconns; i++)
        PQfinish(p->conns[i].conn);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->free_c);
    free(p->conns);
    free(p->conninfo);
    free(p);
}

static const sl__store_ops pg_ops;

int sl__pg_open(const sl_store_options *o, sl_store **out, char *err, size_t errcap)
{
    sl__pg *p = calloc(1, sizeof *p);
    int rc;
    if (p == NULL)
        return SL_ENOMEM;
    p->base.ops = &pg_ops;
    p->opt = *o;
    p->conninfo = strdup(o->path);
    p->nconns = o->readers + 4; /* readers and writers share the pool */
    p->conns = calloc(p->nconns, sizeof *p->conns);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->free_c, NULL);
    if (p->conninfo == NULL || p->conns == NULL) {
        pg_close((sl_store *)(void *)p);
        return SL_ENOMEM;
    }
    p->opt.path = p->conninfo;
    /* one connection now: a wrong URI or a server that is down is an error at open */
    p->conns[0].conn = sl__pg_connect(p->conninfo, err, errcap);
    if (p->conns[0].conn == NULL) {
        pg_close((sl_store *)(void *)p);
        return SL_EIO;
    }
    rc = sl__pg_migrate(p->conns[0].conn, err, errcap);
    if (rc != SL_OK) {
        pg_close((sl_store *)(void *)p);
        return rc;
    }
    *out = (sl_store *)(void *)p;
    return SL_OK;
}

int sl__pg_backup(sl_store *s, const char *dest_path)
{
    (void)s;
    (void)dest_path;
    /* PostgreSQL has its own tools: pg_dump, or base backups with WAL archiving */
    return SL_EUNSUPPORTED;
}

static const sl__store_ops pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .schema_version = sl__pg_schema_version,
    .enrol_device = sl__pg_enrol_device,
    .set_device_disabled = sl__pg_set_device_disabled,
    .get_device = sl__pg_get_device,
    .touch_device = sl__pg_touch_device,
    .create_task_docs = sl__pg_create_task_docs,
    .get_task = sl__pg_get_task,
    .list_tasks = sl__pg_list_tasks,
    .set_refusal = sl__pg_set_refusal,
    .list_refusals = sl__pg_list_refusals,
    .put_eval = sl__pg_put_eval,
    .round_eval = sl__pg_round_eval,
    .last_eval = sl__pg_last_eval,
    .audit = sl__pg_audit,
    .count_audit = sl__pg_count_audit,
    .probe_write = sl__pg_probe_write,
    .count_devices = sl__pg_count_devices,
    .list_devices = sl__pg_list_devices,
    .list_reporters = sl__pg_list_reporters,
    .put_model = sl__pg_put_model,
    .get_model = sl__pg_get_model,
    .set_model_metrics = sl__pg_set_model_metrics,
    .retain_models = sl__pg_retain_models,
    .retain_updates = sl__pg_retain_updates,
    .create_round = sl__pg_create_round,
    .update_round = sl__pg_update_round,
    .get_round = sl__pg_get_round,
    .list_rounds = sl__pg_list_rounds,
    .unfinished_rounds = sl__pg_unfinished_rounds,
    .close_round = sl__pg_close_round,
    .set_participant = sl__pg_set_participant,
    .mark_participant = sl__pg_mark_participant,
    .select_participants = sl__pg_select_participants,
    .list_participants = sl__pg_list_participants,
    .put_update = sl__pg_put_update,
    .get_receipt = sl__pg_get_receipt,
    .count_updates = sl__pg_count_updates,
    .foreach_update = sl__pg_foreach_update,
    .create_upload = sl__pg_create_upload,
    .get_upload = sl__pg_get_upload,
    .append_upload = sl__pg_append_upload,
    .read_upload = sl__pg_read_upload,
    .finish_upload = sl__pg_finish_upload,
    .delete_upload = sl__pg_delete_upload,
    .expire_uploads = sl__pg_expire_uploads,
    .session_secret = sl__pg_session_secret,
    .session_secret_of = sl__pg_session_secret_of,
    .put_session = sl__pg_put_session,
    .list_sessions = sl__pg_list_sessions,
    .revoke_sessions = sl__pg_revoke_sessions,
    .backup = sl__pg_backup,
    .lead = sl__pg_lead,
    .leader = sl__pg_leader,
    .resign = sl__pg_resign,
    .put_checkin = sl__pg_put_checkin,
    .put_pace = sl__pg_put_pace,
    .report_delays = sl__pg_report_delays,
    .device_history = sl__pg_device_history,
    .device_rounds = sl__pg_device_rounds,
    .get_pace = sl__pg_get_pace,
    .list_steps = sl__pg_list_steps,
    .list_checkins = sl__pg_list_checkins,
    .put_partial = sl__pg_put_partial,
    .foreach_partial = sl__pg_foreach_partial,
    .device_history_of = sl__pg_device_history_of,
    .get_paces = sl__pg_get_paces,
    .put_downloads = sl__pg_put_downloads,
    .foreach_downloads = sl__pg_foreach_downloads,
};
