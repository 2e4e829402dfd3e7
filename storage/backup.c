/* backup.c - online backup through SQLite's backup API, while the store runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_int.h"

int sl__sq_backup(sl_store *s, const char *dest_path)
{
    sqlite3 *dest = NULL;
    sqlite3_backup *b;
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
    rc = sqlite3_open_v2(tmp, &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        rc = sl__status_from_sqlite(rc);
        sqlite3_close_v2(dest);
        free(tmp);
        return rc;
    }
    if ((rc = sl__reader_get(s, &c)) != SL_OK) {
        sqlite3_close_v2(dest);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    /* from a reader connection: the copy is the snapshot of one read
     * transaction, and the writer goes on committing meanwhile (WAL) */
    b = sqlite3_backup_init(dest, "main", c->db, "main");
    if (b == NULL) {
        rc = sl__status_from_sqlite(sqlite3_errcode(dest));
    } else {
        do {
            step = sqlite3_backup_step(b, 256);
        } while (step == SQLITE_OK);
        rc = sqlite3_backup_finish(b);
        rc = step == SQLITE_DONE ? sl__status_from_sqlite(rc) : sl__status_from_sqlite(step);
    }
    sl__reader_put(s, c);
    if (rc == SL_OK) /* a standalone file: no WAL beside it */
        rc = sl__status_from_sqlite(
            sqlite3_exec(dest, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL));
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
