/* backup.c - online backup of the SQLite store while it runs: VACUUM INTO a new file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_int.h"

void (*sl__store_backup_hook)(void);

/* SQLite's progress handler during the copy: the tests' hook (0: go on). */
static int backup_progress(void *arg)
{
    (void)arg;
    if (sl__store_backup_hook != NULL)
        sl__store_backup_hook();
    return 0;
}

int sl__sq_backup(sl_store *s, const char *dest_path)
{
    sqlite3 *dest = NULL;
    sqlite3_stmt *st = NULL;
    sl__conn *c;
    char *tmp;
    size_t n;
    int rc, step;

    n = strlen(dest_path) + 16;
    tmp = malloc(n);
    if (tmp == NULL)
        return SL_ENOMEM;
    snprintf(tmp, n, "%s.partial", dest_path);
    unlink(tmp);
    if ((rc = sl__reader_get(s, &c)) != SL_OK) {
        free(tmp);
        return rc;
    }
    pthread_mutex_lock(&s->lock); /* the writer does not wait for this reader (writer.c) */
    s->backups++;
    pthread_mutex_unlock(&s->lock);
    /* one statement, so one read transaction: the copy is a snapshot whatever the writer
     * commits meanwhile (WAL), and it holds the rows, not the pages the store freed (a
     * retired model's bytes: models.c). The backup API would copy every page and, copying
     * in steps, start again after each commit of the writer: on a busy store, for ever. */
    rc = sqlite3_prepare_v2(c->db, "VACUUM INTO ?1", -1, &st, NULL);
    if (sl__store_backup_hook != NULL)
        sqlite3_progress_handler(c->db, 1000, backup_progress, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, tmp, -1, SQLITE_STATIC);
        step = sqlite3_step(st);
        rc = step == SQLITE_DONE ? SQLITE_OK : step;
    }
    sqlite3_finalize(st);
    sqlite3_progress_handler(c->db, 0, NULL, NULL);
    rc = sl__status_from_sqlite(rc);
    pthread_mutex_lock(&s->lock);
    s->backups--;
    pthread_mutex_unlock(&s->lock);
    sl__reader_put(s, c);
    if (rc == SL_OK) { /* a standalone file: no WAL beside it */
        rc = sl__status_from_sqlite(sqlite3_open_v2(tmp, &dest, SQLITE_OPEN_READWRITE, NULL));
        if (rc == SL_OK)
            rc = sl__status_from_sqlite(
                sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL));
    }
    if (sqlite3_close(dest) != SQLITE_OK && rc == SL_OK)
        rc = SL_EIO;
    if (rc == SL_OK) {
        /* the backup is durable under its final name, or absent */
        FILE *f = fopen(tmp, "rb+");
        if (f == NULL || fflush(f) != 0 || fsync(fileno(f)) != 0)
            rc = SL_EIO;
        if (f != NULL)
            fclose(f);
        if (rc == SL_OK && rename(tmp, dest_path) != 0)
            rc = SL_EIO;
    }
    if (rc != SL_OK)
        unlink(tmp);
    free(tmp);
    return rc;
}
