/*
 * sqlite.c - the SQLite backend: opening the store (check, migrate, readers,
 * the writer thread), closing it, and its table of operations (backend.h), at
 * the top of the backend's layers (store_int.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

static int check_database(sl__conn *c, sl_store_check check, char *err, size_t errcap)
{
    sqlite3_stmt *st;
    int rc;
    if (check == SL_STORE_CHECK_NONE)
        return SL_OK;
    rc = sqlite3_prepare_v2(
        c->db, check == SL_STORE_CHECK_FULL ? "PRAGMA integrity_check" : "PRAGMA quick_check", -1,
        &st, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errcap, "cannot check the database: %s", sqlite3_errmsg(c->db));
        return sl__status_from_sqlite(rc);
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *verdict = (const char *)sqlite3_column_text(st, 0);
        if (verdict == NULL || strcmp(verdict, "ok") != 0) {
            snprintf(err, errcap, "the database failed its check: %s",
                     verdict ? verdict : "(no result)");
            sqlite3_finalize(st);
            return SL_ECORRUPT;
        }
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) {
        snprintf(err, errcap, "cannot check the database: %s", sqlite3_errstr(rc));
        return sl__status_from_sqlite(rc);
    }
    return SL_OK;
}

int sl__sq_open(const sl_store_options *o, sl_store **out, char *err, size_t errcap)
{
    char dummy[8];
    sl_store *s;
    int rc;

    if (err == NULL) {
        err = dummy;
        errcap = sizeof dummy;
    }
    if (errcap > 0)
        err[0] = '\0';
    if (o == NULL || o->path == NULL || out == NULL || o->readers == 0 || o->max_batch == 0) {
        snprintf(err, errcap, "invalid store options");
        return SL_EINVAL;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return SL_ENOMEM;
    s->base.ops = &sl__sqlite_ops;
    s->opt = *o;
    s->path = strdup(o->path);
    s->readers = calloc(o->readers, sizeof *s->readers);
    if (s->path == NULL || s->readers == NULL) {
        free(s->path);
        free(s->readers);
        free(s);
        return SL_ENOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->free_rd, NULL);
    pthread_cond_init(&s->ckpt_work, NULL);
    pthread_cond_init(&s->ckpt_idle, NULL);
    rc = sl__conn_open(s, &s->writer, 0);
    if (rc != SL_OK) {
        snprintf(err, errcap, "%s: cannot open: %s", o->path, sl_strerror(rc));
        goto fail;
    }
    rc = check_database(&s->writer, o->check, err, errcap);
    if (rc == SL_OK)
        rc = sl__migrate(&s->writer, err, errcap);
    if (rc != SL_OK)
        goto fail;
    for (uint32_t i = 0; i < o->readers; i++) {
        rc = sl__conn_open(s, &s->readers[i], 1);
        if (rc != SL_OK) {
            snprintf(err, errcap, "%s: cannot open a reader: %s", o->path, sl_strerror(rc));
            goto fail;
        }
        s->nreaders = i + 1;
    }
    rc = sl__writer_start(s);
    if (rc != SL_OK) {
        snprintf(err, errcap, "cannot start the writer thread");
        goto fail;
    }
    *out = s;
    return SL_OK;
fail:
    sl__sq_close(s);
    return rc;
}

void sl__sq_close(sl_store *s)
{
    sl__writer_stop(s);
    for (uint32_t i = 0; i < s->nreaders; i++)
        sl__conn_close(&s->readers[i]);
    if (s->writer.db != NULL)
        sqlite3_wal_checkpoint_v2(s->writer.db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    sl__conn_close(&s->writer);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->free_rd);
    pthread_cond_destroy(&s->ckpt_work);
    pthread_cond_destroy(&s->ckpt_idle);
    free(s->readers);
    free(s->path);
    free(s);
}

int sl__sq_schema_version(sl_store *s, int *version)
{
    int64_t v = 0;
    int rc;
    rc = sl__query_int64(s, "SELECT version FROM schema_version", 0, 0, &v);
    if (rc == SL_OK)
        *version = (int)v;
    return rc;
}

const sl__store_ops sl__sqlite_ops = {
    .name = "sqlite",
    .close = sl__sq_close,
    .schema_version = sl__sq_schema_version,
    .enrol_device = sl__sq_enrol_device,
    .set_device_disabled = sl__sq_set_device_disabled,
    .get_device = sl__sq_get_device,
    .touch_device = sl__sq_touch_device,
    .create_task_docs = sl__sq_create_task_docs,
    .get_task = sl__sq_get_task,
    .list_tasks = sl__sq_list_tasks,
    .set_refusal = sl__sq_set_refusal,
    .list_refusals = sl__sq_list_refusals,
    .put_eval = sl__sq_put_eval,
    .round_eval = sl__sq_round_eval,
    .last_eval = sl__sq_last_eval,
    .audit = sl__sq_audit,
    .count_audit = sl__sq_count_audit,
    .probe_write = sl__sq_probe_write,
    .count_devices = sl__sq_count_devices,
    .list_devices = sl__sq_list_devices,
    .list_reporters = sl__sq_list_reporters,
    .put_model = sl__sq_put_model,
    .get_model = sl__sq_get_model,
    .set_model_metrics = sl__sq_set_model_metrics,
    .retain_models = sl__sq_retain_models,
    .retain_updates = sl__sq_retain_updates,
    .create_round = sl__sq_create_round,
    .update_round = sl__sq_update_round,
    .get_round = sl__sq_get_round,
    .list_rounds = sl__sq_list_rounds,
    .unfinished_rounds = sl__sq_unfinished_rounds,
    .close_round = sl__sq_close_round,
    .set_participant = sl__sq_set_participant,
    .mark_participant = sl__sq_mark_participant,
    .select_participants = sl__sq_select_participants,
    .list_participants = sl__sq_list_participants,
    .put_update = sl__sq_put_update,
    .get_receipt = sl__sq_get_receipt,
    .count_updates = sl__sq_count_updates,
    .foreach_update = sl__sq_foreach_update,
    .create_upload = sl__sq_create_upload,
    .get_upload = sl__sq_get_upload,
    .append_upload = sl__sq_append_upload,
    .read_upload = sl__sq_read_upload,
    .finish_upload = sl__sq_finish_upload,
    .delete_upload = sl__sq_delete_upload,
    .expire_uploads = sl__sq_expire_uploads,
    .session_secret = sl__sq_session_secret,
    .session_secret_of = sl__sq_session_secret_of,
    .put_session = sl__sq_put_session,
    .list_sessions = sl__sq_list_sessions,
    .revoke_sessions = sl__sq_revoke_sessions,
    .backup = sl__sq_backup,
    .lead = sl__sq_lead,
    .leader = sl__sq_leader,
    .resign = sl__sq_resign,
    .put_checkin = sl__sq_put_checkin,
    .put_pace = sl__sq_put_pace,
    .report_delays = sl__sq_report_delays,
    .device_history = sl__sq_device_history,
    .device_rounds = sl__sq_device_rounds,
    .get_pace = sl__sq_get_pace,
    .list_steps = sl__sq_list_steps,
    .list_checkins = sl__sq_list_checkins,
    .put_partial = sl__sq_put_partial,
    .foreach_partial = sl__sq_foreach_partial,
    .device_history_of = sl__sq_device_history_of,
    .get_paces = sl__sq_get_paces,
    .put_downloads = sl__sq_put_downloads,
    .foreach_downloads = sl__sq_foreach_downloads,
};
