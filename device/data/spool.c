/*
 * spool.c - samples an application appends to an SQLite table (spool.h).
 *
 * One read-only connection and two statements, prepared at open:
 *   SELECT rowid, "label", "f1", ... FROM "t" WHERE rowid > ?1 ORDER BY rowid LIMIT ?2
 *   SELECT count(*) FROM "t" WHERE rowid > ?1
 * Each call steps one of them to the end and resets it before returning: its
 * read transaction (a SHARED lock in rollback mode, a snapshot in WAL mode)
 * lasts only the call, so one call sees one committed state and the agent
 * holds up none of the application's commits or checkpoints between calls.
 * Names are quoted as SQL identifiers, so a column called "order" or holding
 * a quote is read, not executed.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "data_int.h"
#include "starling/spool.h"

#define BUSY_DEFAULT_MS 5000
#define EXACT_INT       ((int64_t)1 << 24) /* integers float32 holds exactly */

struct sl_spool {
    sqlite3 *db;
    sqlite3_stmt *rows, *count;
    char path[256];  /* for messages (cut) */
    char table[128]; /* for messages (cut) */
    char **columns;  /* the label, then the features or the blob (as the options named them) */
    size_t ncolumns;
    size_t nfeatures;
    int blob;
    int64_t busy_ms;
    int refused;
    int64_t refused_rowid;
};

/* An SQLite status as ours. */
static int sql_status(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return SL_EBUSY;
    case SQLITE_NOMEM:
        return SL_ENOMEM;
    case SQLITE_NOTADB:
        return SL_EMAGIC;
    case SQLITE_CORRUPT:
        return SL_ECORRUPT;
    default:
        return SL_EIO;
    }
}

/* The reason for a failed SQLite call on @s. */
static int sql_fail(const sl_spool *s, int rc, char *err, size_t errcap)
{
    int st = sql_status(rc);
    if (st == SL_EBUSY)
        return sl__data_errf(err, errcap, st, "%s: locked by a writer for more than %lld ms",
                             s->path, (long long)s->busy_ms);
    if (st == SL_EMAGIC)
        return sl__data_errf(err, errcap, st, "%s: not an SQLite database", s->path);
    return sl__data_errf(err, errcap, st, "%s: %s", s->path, sqlite3_errmsg(s->db));
}

/* Append @name to @sql (at *@used, room @cap) as a quoted identifier: "a""b". */
static void put_ident(char *sql, size_t *used, const char *name)
{
    size_t u = *used;
    sql[u++] = '"';
    for (const char *p = name; *p; p++) {
        if (*p == '"')
            sql[u++] = '"';
        sql[u++] = *p;
    }
    sql[u++] = '"';
    sql[u] = '\0';
    *used = u;
}

static void put_text(char *sql, size_t *used, const char *text)
{
    size_t len = strlen(text);
    memcpy(sql + *used, text, len + 1);
    *used += len;
}

/* "a, b, c" from the first column of @sql's rows (with @bind bound to ?1), cut to @cap. */
static int list_names(sl_spool *s, const char *sql, const char *bind, char *out, size_t cap)
{
    sqlite3_stmt *st;
    size_t used = 0;
    int rc;
    out[0] = '\0';
    if ((rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL)) != SQLITE_OK)
        return rc;
    if (bind != NULL)
        sqlite3_bind_text(st, 1, bind, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && used + 1 < cap) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int w = snprintf(out + used, cap - used, "%s'%s'", used ? ", " : "", name ? name : "");
        if (w < 0)
            break;
        used += (size_t)w;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The table's columns: SL_OK and *@found 0 when there is no such table. */
static int find_columns(sl_spool *s, const char *table, char ***names, size_t *count, char *err,
                        size_t errcap)
{
    sqlite3_stmt *st;
    char **list = NULL;
    size_t n = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT name FROM pragma_table_info(?1)", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, err, errcap);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        char **grown = realloc(list, (n + 1) * sizeof *list);
        if (grown == NULL || name == NULL || (grown[n] = strdup(name)) == NULL) {
            list = grown != NULL ? grown : list;
            rc = SQLITE_NOMEM;
            break;
        }
        list = grown;
        n++;
    }
    if (rc != SQLITE_DONE)
        rc = sql_fail(s, rc, err, errcap);
    else
        rc = SL_OK;
    sqlite3_finalize(st);
    if (rc != SL_OK) {
        for (size_t i = 0; i < n; i++)
            free(list[i]);
        free(list);
        return rc;
    }
    *names = list;
    *count = n;
    return SL_OK;
}

static int has_name(char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (sqlite3_stricmp(names[i], name) == 0)
            return 1;
    return 0;
}

static int check_options(const sl_spool_options *o, char *err, size_t errcap)
{
    if (o == NULL || o->label == NULL || o->label[0] == '\0')
        return sl__data_errf(err, errcap, SL_EINVAL, "spool: no label column");
    if ((o->features == NULL) == (o->blob == NULL))
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "spool: name either feature columns or one blob column");
    if (o->nfeatures == 0 || o->nfeatures > SL_SPOOL_MAX_FEATURES)
        return sl__data_errf(err, errcap, SL_EINVAL, "spool: %zu features (1 to %zu)", o->nfeatures,
                             SL_SPOOL_MAX_FEATURES);
    if (o->blob != NULL && o->blob[0] == '\0')
        return sl__data_errf(err, errcap, SL_EINVAL, "spool: an empty blob column name");
    if (o->busy_timeout_ms < 0)
        return sl__data_errf(err, errcap, SL_EINVAL, "spool: a negative busy timeout");
    for (size_t i = 0; o->features != NULL && i < o->nfeatures; i++) {
        const char *f = o->features[i];
        if (f == NULL || f[0] == '\0')
            return sl__data_errf(err, errcap, SL_EINVAL, "spool: feature %zu has no name", i);
        if (sqlite3_stricmp(f, o->label) == 0)
            return sl__data_errf(err, errcap, SL_EDUPLICATE,
                                 "spool: column '%s' is both the label and a feature", f);
        for (size_t j = 0; j < i; j++)
            if (sqlite3_stricmp(f, o->features[j]) == 0)
                return sl__data_errf(err, errcap, SL_EDUPLICATE,
                                     "spool: feature column '%s' named twice", f);
    }
    if (o->blob != NULL && sqlite3_stricmp(o->blob, o->label) == 0)
        return sl__data_errf(err, errcap, SL_EDUPLICATE,
                             "spool: column '%s' is both the label and the blob", o->blob);
    return SL_OK;
}

/* Prepare both statements (@rowid: a name for the rowid that no column takes). */
static int prepare(sl_spool *s, const char *table, const char *rowid, char *err, size_t errcap)
{
    size_t cap = 128 + 3 * (strlen(table) + 2 * strlen(rowid)), used = 0;
    char *sql;
    int rc;
    for (size_t i = 0; i < s->ncolumns; i++)
        cap += 2 * strlen(s->columns[i]) + 4;
    if ((sql = malloc(cap)) == NULL)
        return SL_ENOMEM;
    /* the table must have rowids: not a view, not WITHOUT ROWID */
    put_text(sql, &used, "SELECT ");
    put_text(sql, &used, rowid);
    put_text(sql, &used, " FROM ");
    put_ident(sql, &used, table);
    rc = sqlite3_prepare_v2(s->db, sql, -1, &s->rows, NULL);
    sqlite3_finalize(s->rows);
    s->rows = NULL;
    if (rc != SQLITE_OK) {
        free(sql);
        if (sql_status(rc) != SL_EIO)
            return sql_fail(s, rc, err, errcap);
        return sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                             "%s: table '%s' has no rowid (a view, or WITHOUT ROWID)", s->path,
                             s->table);
    }
    used = 0;
    put_text(sql, &used, "SELECT ");
    put_text(sql, &used, rowid);
    for (size_t i = 0; i < s->ncolumns; i++) {
        put_text(sql, &used, ", ");
        put_ident(sql, &used, s->columns[i]);
    }
    put_text(sql, &used, " FROM ");
    put_ident(sql, &used, table);
    put_text(sql, &used, " WHERE ");
    put_text(sql, &used, rowid);
    put_text(sql, &used, " > ?1 ORDER BY ");
    put_text(sql, &used, rowid);
    put_text(sql, &used, " LIMIT ?2");
    rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->rows, NULL);
    if (rc == SQLITE_OK) {
        used = 0;
        put_text(sql, &used, "SELECT count(*) FROM ");
        put_ident(sql, &used, table);
        put_text(sql, &used, " WHERE ");
        put_text(sql, &used, rowid);
        put_text(sql, &used, " > ?1");
        rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->count, NULL);
    }
    free(sql);
    return rc == SQLITE_OK ? SL_OK : sql_fail(s, rc, err, errcap);
}

/* The table, its columns, the statements: everything sl_spool_open() checks once open. */
static int resolve(sl_spool *s, const char *table, char *err, size_t errcap)
{
    static const char *const rowids[] = {"rowid", "_rowid_", "oid"};
    char **have = NULL, list[512];
    const char *rowid = NULL;
    size_t nhave = 0;
    int rc = find_columns(s, table, &have, &nhave, err, errcap);
    if (rc != SL_OK)
        return rc;
    if (nhave == 0) {
        rc = list_names(s,
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                        "'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                        NULL, list, sizeof list);
        if (rc != SQLITE_OK)
            return sql_fail(s, rc, err, errcap);
        return sl__data_errf(err, errcap, SL_ENOENT, "%s: no table '%s' (the database has: %s)",
                             s->path, s->table, list[0] ? list : "no tables");
    }
    /* a view's rowid is not its rows' own (SQLite gives a view's rowid no meaning) */
    if ((rc = list_names(s,
                         "SELECT name FROM sqlite_master WHERE type = 'view' AND name = ?1 "
                         "COLLATE NOCASE",
                         table, list, sizeof list)) != SQLITE_OK)
        rc = sql_fail(s, rc, err, errcap);
    else if (list[0] != '\0')
        rc = sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                           "%s: '%s' is a view (read a table: rows are followed by rowid)", s->path,
                           s->table);
    for (size_t i = 0; i < s->ncolumns && rc == SL_OK; i++) {
        size_t used = 0;
        if (has_name(have, nhave, s->columns[i]))
            continue;
        for (size_t k = 0; k < nhave && used + 1 < sizeof list; k++) {
            int w = snprintf(list + used, sizeof list - used, "%s'%s'", k ? ", " : "", have[k]);
            used += w > 0 ? (size_t)w : 0;
        }
        rc = sl__data_errf(err, errcap, SL_ENOENT, "%s: table '%s' has no column '%s' (it has: %s)",
                           s->path, s->table, s->columns[i], list);
    }
    for (size_t i = 0; i < sizeof rowids / sizeof rowids[0] && rowid == NULL; i++)
        if (!has_name(have, nhave, rowids[i]))
            rowid = rowids[i];
    for (size_t i = 0; i < nhave; i++)
        free(have[i]);
    free(have);
    if (rc != SL_OK)
        return rc;
    if (rowid == NULL)
        return sl__data_errf(err, errcap, SL_EUNSUPPORTED,
                             "%s: table '%s' has columns named rowid, _rowid_ and oid: its "
                             "rowids cannot be named",
                             s->path, s->table);
    return prepare(s, table, rowid, err, errcap);
}

int sl_spool_open(const char *path, const sl_spool_options *o, sl_spool **out, char *err,
                  size_t errcap)
{
    const char *table;
    struct stat st;
    sl_spool *s;
    int rc;
    if (path == NULL || out == NULL)
        return SL_EINVAL;
    if ((rc = check_options(o, err, errcap)) != SL_OK)
        return rc;
    table = o->table != NULL && o->table[0] != '\0' ? o->table : "samples";
    if (stat(path, &st) != 0)
        return sl__data_errf(err, errcap, SL_ENOENT, "%s: no such file", path);
    if (!S_ISREG(st.st_mode))
        return sl__data_errf(err, errcap, SL_EINVAL, "%s: not a regular file", path);
    if (st.st_size == 0)
        return sl__data_errf(err, errcap, SL_ETRUNCATED,
                             "%s: an empty file (the application has not written the database "
                             "yet)",
                             path);
    if ((s = calloc(1, sizeof *s)) == NULL)
        return SL_ENOMEM;
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->table, sizeof s->table, "%s", table);
    s->blob = o->blob != NULL;
    s->nfeatures = o->nfeatures;
    s->busy_ms = o->busy_timeout_ms > 0 ? o->busy_timeout_ms : BUSY_DEFAULT_MS;
    s->ncolumns = 1 + (s->blob ? 1 : o->nfeatures);
    if ((s->columns = calloc(s->ncolumns, sizeof *s->columns)) == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < s->ncolumns; i++) {
        const char *name = i == 0 ? o->label : s->blob ? o->blob : o->features[i - 1];
        if ((s->columns[i] = strdup(name)) == NULL) {
            rc = SL_ENOMEM;
            goto fail;
        }
    }
    rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        rc = s->db != NULL ? sql_fail(s, rc, err, errcap) : SL_ENOMEM;
        goto fail;
    }
    sqlite3_busy_timeout(s->db, s->busy_ms > INT_MAX ? INT_MAX : (int)s->busy_ms);
    if ((rc = resolve(s, table, err, errcap)) != SL_OK)
        goto fail;
    *out = s;
    return SL_OK;
fail:
    sl_spool_close(s);
    return rc;
}

void sl_spool_close(sl_spool *s)
{
    if (s == NULL)
        return;
    sqlite3_finalize(s->rows);
    sqlite3_finalize(s->count);
    sqlite3_close(s->db);
    for (size_t i = 0; s->columns != NULL && i < s->ncolumns; i++)
        free(s->columns[i]);
    free(s->columns);
    free(s);
}

size_t sl_spool_features(const sl_spool *s)
{
    return s->nfeatures;
}

int sl_spool_refused(const sl_spool *s, int64_t *rowid)
{
    if (s == NULL || rowid == NULL)
        return SL_EINVAL;
    if (!s->refused)
        return SL_ENOENT;
    *rowid = s->refused_rowid;
    return SL_OK;
}

/* A double as a float32, or why not. */
static const char *to_float(double d, float *out)
{
    if (!isfinite(d))
        return "not a finite number";
    if (fabs(d) > 3.4028234663852886e38)
        return "beyond float32's range";
    *out = (float)d;
    return NULL;
}

/* TEXT holding a decimal number ("2.5", " -1e3 "), or why not. */
static const char *text_number(const char *t, int len, float *out)
{
    char buf[64], *end;
    int a = 0, b = len;
    while (a < b && (t[a] == ' ' || t[a] == '\t'))
        a++;
    while (b > a && (t[b - 1] == ' ' || t[b - 1] == '\t'))
        b--;
    if (b == a || b - a >= (int)sizeof buf)
        return "text that is not a number";
    for (int i = a; i < b; i++)
        if (strchr("0123456789+-.eE", t[i]) == NULL || t[i] == '\0')
            return "text that is not a number";
    memcpy(buf, t + a, (size_t)(b - a));
    buf[b - a] = '\0';
    {
        double d = strtod(buf, &end);
        if (end != buf + (b - a))
            return "text that is not a number";
        return to_float(d, out);
    }
}

/* Column @col of the current row as a float, or why not. */
static const char *number(sqlite3_stmt *st, int col, float *out)
{
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL:
        return "NULL";
    case SQLITE_INTEGER: {
        sqlite3_int64 v = sqlite3_column_int64(st, col);
        if (v > EXACT_INT || v < -EXACT_INT)
            return "an integer beyond 2^24 (not exact in float32)";
        *out = (float)v;
        return NULL;
    }
    case SQLITE_FLOAT:
        return to_float(sqlite3_column_double(st, col), out);
    case SQLITE_TEXT: {
        const char *t = (const char *)sqlite3_column_text(st, col);
        return t == NULL ? "NULL" : text_number(t, sqlite3_column_bytes(st, col), out);
    }
    default:
        return "a BLOB, not a number";
    }
}

/* The blob column @col: exactly @n finite little-endian float32 values, or why not (@why). */
static const char *blob_values(sqlite3_stmt *st, int col, size_t n, float *out, char *why,
                               size_t cap)
{
    const uint8_t *b;
    size_t len;
    int type = sqlite3_column_type(st, col);
    if (type != SQLITE_BLOB)
        return type == SQLITE_NULL ? "NULL" : "not a BLOB";
    b = sqlite3_column_blob(st, col);
    len = (size_t)sqlite3_column_bytes(st, col);
    if (len != 4 * n || (b == NULL && n > 0)) {
        snprintf(why, cap, "a BLOB of %zu bytes where %zu float32 take %zu", len, n, 4 * n);
        return why;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                     (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f)) {
            snprintf(why, cap, "value %zu is not a finite number", i);
            return why;
        }
        out[i] = f;
    }
    return NULL;
}

int sl_spool_read(sl_spool *s, int64_t after, float *x, float *y, size_t max, size_t *n,
                  int64_t *last, char *err, size_t errcap)
{
    size_t got = 0;
    int64_t at = after;
    int rc;
    if (s == NULL || n == NULL || last == NULL || (max > 0 && (x == NULL || y == NULL)))
        return SL_EINVAL;
    s->refused = 0;
    if (max == 0) {
        *n = 0;
        *last = after;
        return SL_OK;
    }
    sqlite3_bind_int64(s->rows, 1, after);
    sqlite3_bind_int64(s->rows, 2, max > (size_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)max);
    while ((rc = sqlite3_step(s->rows)) == SQLITE_ROW) {
        float *row = x + got * s->nfeatures;
        const char *why = NULL;
        char whybuf[96];
        size_t col = 1;
        at = sqlite3_column_int64(s->rows, 0);
        why = number(s->rows, 1, &y[got]);
        if (why == NULL && s->blob) {
            col = 2;
            why = blob_values(s->rows, 2, s->nfeatures, row, whybuf, sizeof whybuf);
        }
        for (size_t i = 0; why == NULL && !s->blob && i < s->nfeatures; i++) {
            col = 2 + i;
            why = number(s->rows, (int)col, &row[i]);
        }
        if (why != NULL) {
            sl__data_errf(err, errcap, SL_ECORRUPT, "%s: table '%s', rowid %lld, column '%s': %s",
                          s->path, s->table, (long long)at, s->columns[col - 1], why);
            sqlite3_reset(s->rows);
            s->refused = 1;
            s->refused_rowid = at;
            return SL_ECORRUPT;
        }
        got++;
    }
    if (rc != SQLITE_DONE) {
        rc = sql_fail(s, rc, err, errcap);
        sqlite3_reset(s->rows);
        return rc;
    }
    sqlite3_reset(s->rows);
    *n = got;
    *last = at;
    return SL_OK;
}

int sl_spool_count(sl_spool *s, int64_t after, uint64_t *count, char *err, size_t errcap)
{
    int rc;
    if (s == NULL || count == NULL)
        return SL_EINVAL;
    sqlite3_bind_int64(s->count, 1, after);
    rc = sqlite3_step(s->count);
    if (rc != SQLITE_ROW) {
        rc = sql_fail(s, rc, err, errcap);
        sqlite3_reset(s->count);
        return rc;
    }
    *count = (uint64_t)sqlite3_column_int64(s->count, 0);
    sqlite3_reset(s->count);
    return SL_OK;
}
