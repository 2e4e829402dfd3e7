/*
 * csv.c - the streaming CSV reader (starling/csv.h).
 *
 * The file is read with pread() at byte offsets, never through stdio, so a
 * call starts exactly after the last row it returned and sees whatever the
 * application appended since. One state machine parses a record into the row
 * buffer (fields unescaped, each NUL-terminated); a record that meets the end
 * of the file before its newline is incomplete and left for a later call.
 * The position moves only when a whole call succeeds: that is what makes a
 * call all or nothing, and a bad row stay in front of the next call.
 *
 * A replaced or removed file shows as another inode behind the path; a
 * truncated one as a size below the position, or (truncated and written
 * again) as a byte before the position that is no longer the newline which
 * ended the last row read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_int.h"
#include "starling/csv.h"

#define CSV_INBUF     ((size_t)64 << 10) /* bytes per pread() */
#define CSV_FIRST_ROW ((size_t)4 << 10)  /* first row buffer; doubles up to a row's size */
#define SLOT_SKIP     ((size_t)-1)       /* a column that is not read */
#define SLOT_LABEL    ((size_t)-2)
#define SHOW_MAX      40 /* bytes of a value or name quoted in a message */
#define LIST_MAX      400

enum { REC_ROW, REC_BLANK, REC_INCOMPLETE };

/* A name and its position, sorted by name for duplicate checks and look-ups. */
typedef struct csv_name {
    const char *name;
    size_t idx;
} csv_name;

struct sl_csv {
    char *path;
    int fd;
    dev_t dev;
    ino_t ino;
    char delim;
    sl_csv_label_kind kind;
    size_t classes;
    char **class_names; /* NULL, or @classes names (in @class_block) */
    char *class_block;
    csv_name *class_sorted; /* @class_names sorted, for the look-up of a label */
    size_t ncols;
    char **col_names; /* @ncols names (in @col_block) */
    char *col_block;
    size_t *slot; /* per column: its feature index, SLOT_LABEL or SLOT_SKIP */
    size_t nfeat;
    size_t *feat_col;    /* per feature: its column */
    float *sample;       /* one row converted: @nfeat features, then the label */
    uint64_t data_start; /* the offset after the byte order mark */
    uint64_t pos;        /* the offset after the last row read */
    uint64_t line;       /* the line number at @pos (1-based) */
    uint64_t rows;
    int changed;       /* SL_ESTATE was returned: stays so */
    unsigned char *in; /* CSV_INBUF bytes of the file from @in_off */
    uint64_t in_off;
    size_t in_len;
    char *row; /* the record being parsed: fields unescaped, NUL-terminated */
    size_t row_len, row_cap;
    size_t *field; /* start of each field in @row */
    size_t nfields, field_cap;
};

/* @s for a message: at most SHOW_MAX bytes, control bytes as '?', "..." when cut. */
static const char *show(const char *s, char out[SHOW_MAX + 4])
{
    size_t i;
    for (i = 0; s[i] != '\0' && i < SHOW_MAX; i++)
        out[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (s[i] != '\0')
        out[i++] = '.', out[i++] = '.', out[i++] = '.';
    out[i] = '\0';
    return out;
}

/* "a, b, c" for a message, cut at LIST_MAX bytes. */
static const char *list_names(char *const *names, size_t n, char out[LIST_MAX + 8])
{
    char shown[SHOW_MAX + 4];
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        int w =
            snprintf(out + len, LIST_MAX + 8 - len, "%s%s", i ? ", " : "", show(names[i], shown));
        if (w < 0 || len + (size_t)w >= LIST_MAX) {
            snprintf(out + len, LIST_MAX + 8 - len, ", ...");
            break;
        }
        len += (size_t)w;
    }
    return out;
}

static int field_err(const sl_csv *c, int status, uint64_t line, size_t col, const char *what,
                     const char *value, char *err, size_t errcap)
{
    char name[SHOW_MAX + 4], val[SHOW_MAX + 4];
    return sl__data_errf(
        err, errcap, status, "%s: line %" PRIu64 ", column %zu (%s): %s%s%s%s", c->path, line,
        col + 1, c->col_names != NULL ? show(c->col_names[col], name) : "?", what,
        value != NULL ? " '" : "", value != NULL ? show(value, val) : "", value != NULL ? "'" : "");
}

static int cmp_name(const void *a, const void *b)
{
    const csv_name *x = a, *y = b;
    int d = strcmp(x->name, y->name);
    return d != 0 ? d : (x->idx > y->idx) - (x->idx < y->idx);
}

/* @names sorted into a new array; *@dup is the first name given twice (or NULL). */
static csv_name *sort_names(char *const *names, size_t n, const csv_name **dup)
{
    csv_name *s = malloc((n ? n : 1) * sizeof *s);
    *dup = NULL;
    if (s == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        s[i] = (csv_name){names[i], i};
    qsort(s, n, sizeof *s, cmp_name);
    for (size_t i = 1; i < n && *dup == NULL; i++)
        if (strcmp(s[i - 1].name, s[i].name) == 0)
            *dup = &s[i - 1];
    return s;
}

static const csv_name *find_name(const csv_name *sorted, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = strcmp(sorted[mid].name, name);
        if (d == 0)
            return &sorted[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Copy @n strings into one block, with an array of pointers into it. */
static int copy_names(const char *const *names, size_t n, char ***ptrs, char **block)
{
    size_t total = 0, at = 0;
    for (size_t i = 0; i < n; i++)
        total += strlen(names[i]) + 1;
    *ptrs = malloc((n ? n : 1) * sizeof **ptrs);
    *block = malloc(total ? total : 1);
    if (*ptrs == NULL || *block == NULL)
        return SL_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]) + 1;
        memcpy(*block + at, names[i], len);
        (*ptrs)[i] = *block + at;
        at += len;
    }
    return SL_OK;
}

/* Spaces and tabs around a field are not part of it. */
static char *trim(char *s)
{
    size_t len;
    while (*s == ' ' || *s == '\t')
        s++;
    len = strlen(s);
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        s[--len] = '\0';
    return s;
}

/* ------------------------------------------------------------------------ */
/* Bytes and records                                                        */

/* *@b = the byte at @off, or -1 past the end of the file. */
static int byte_at(sl_csv *c, uint64_t off, int *b, char *err, size_t errcap)
{
    if (off < c->in_off || off - c->in_off >= c->in_len) {
        ssize_t got;
        do
            got = pread(c->fd, c->in, CSV_INBUF, (off_t)off);
        while (got < 0 && errno == EINTR);
        if (got < 0) {
            c->in_len = 0;
            return sl__data_errf(err, errcap, SL_EIO, "%s: read error: %s", c->path,
                                 strerror(errno));
        }
        c->in_off = off;
        c->in_len = (size_t)got;
        if (got == 0) {
            *b = -1;
            return SL_OK;
        }
    }
    *b = c->in[off - c->in_off];
    return SL_OK;
}

static int row_push(sl_csv *c, char ch, char *err, size_t errcap)
{
    if (c->row_len + 1 >= c->row_cap) {
        char *bigger = realloc(c->row, c->row_cap * 2);
        if (bigger == NULL)
            return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", c->path);
        c->row = bigger;
        c->row_cap *= 2;
    }
    c->row[c->row_len++] = ch;
    return SL_OK;
}

/* Start a field; @maxf is the most fields a record may have (0: any). */
static int field_begin(sl_csv *c, size_t maxf, uint64_t line, char *err, size_t errcap)
{
    if (maxf != 0 && c->nfields == maxf)
        return sl__data_errf(err, errcap, SL_ECOUNT,
                             "%s: line %" PRIu64 ": more than the %zu fields of a row", c->path,
                             line, maxf);
    if (c->nfields == c->field_cap) {
        size_t *bigger = realloc(c->field, c->field_cap * 2 * sizeof *bigger);
        if (bigger == NULL)
            return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", c->path);
        c->field = bigger;
        c->field_cap *= 2;
    }
    c->field[c->nfields++] = c->row_len;
    return SL_OK;
}

/*
 * Parse the record at @off (line @line) into c->row and c->field. *@kind:
 * REC_ROW, REC_BLANK (an empty line), or REC_INCOMPLETE (the file ends before
 * the record's newline). For the first two, *@end is the offset after the
 * record and *@lines the newlines it holds (more than one inside quotes).
 */
static int parse_record(sl_csv *c, uint64_t off, size_t maxf, uint64_t line, int *kind,
                        uint64_t *end, uint64_t *lines, char *err, size_t errcap)
{
    enum { F_START, F_PLAIN, F_QUOTED, F_QUOTE } st = F_START; /* F_QUOTE: '"' in quotes */
    uint64_t start = off, nl = 0;
    int b, rc, quoted = 0;

    c->row_len = 0;
    c->nfields = 0;
    if ((rc = field_begin(c, maxf, line, err, errcap)) != SL_OK)
        return rc;
    for (;;) {
        if (off - start >= SL_CSV_MAX_ROW)
            return sl__data_errf(err, errcap, SL_ETOOBIG,
                                 "%s: line %" PRIu64 ": a row longer than %zu bytes", c->path, line,
                                 SL_CSV_MAX_ROW);
        if ((rc = byte_at(c, off, &b, err, errcap)) != SL_OK)
            return rc;
        if (b < 0) {
            *kind = REC_INCOMPLETE;
            return SL_OK;
        }
        off++;
        if (b == 0)
            return sl__data_errf(err, errcap, SL_ESYNTAX,
                                 "%s: line %" PRIu64 ", column %zu: a NUL byte", c->path, line + nl,
                                 c->nfields);
        if (st == F_QUOTED) {
            if (b == '"')
                st = F_QUOTE;
            else if ((rc = row_push(c, (char)b, err, errcap)) != SL_OK)
                return rc;
            nl += b == '\n';
            continue;
        }
        if (b == '"' && st != F_PLAIN) {
            if (st == F_QUOTE && (rc = row_push(c, '"', err, errcap)) != SL_OK)
                return rc;
            st = F_QUOTED;
            quoted = 1;
            continue;
        }
        if (b == '"')
            return sl__data_errf(err, errcap, SL_ESYNTAX,
                                 "%s: line %" PRIu64 ", column %zu: a quote inside an unquoted "
                                 "field (quote the whole field)",
                                 c->path, line + nl, c->nfields);
        if (b == c->delim) {
            if ((rc = row_push(c, '\0', err, errcap)) != SL_OK ||
                (rc = field_begin(c, maxf, line + nl, err, errcap)) != SL_OK)
                return rc;
            st = F_START;
            continue;
        }
        if (b == '\r') {
            int next;
            if ((rc = byte_at(c, off, &next, err, errcap)) != SL_OK)
                return rc;
            if (next < 0) {
                *kind = REC_INCOMPLETE;
                return SL_OK;
            }
            if (next == '\n') {
                off++;
                b = '\n';
            }
        }
        if (b == '\n') {
            if ((rc = row_push(c, '\0', err, errcap)) != SL_OK)
                return rc;
            *kind = c->nfields == 1 && c->row_len == 1 && !quoted ? REC_BLANK : REC_ROW;
            *end = off;
            *lines = nl + 1;
            return SL_OK;
        }
        if (st == F_QUOTE)
            return sl__data_errf(err, errcap, SL_ESYNTAX,
                                 "%s: line %" PRIu64 ", column %zu: text after a closing quote",
                                 c->path, line + nl, c->nfields);
        if ((rc = row_push(c, (char)b, err, errcap)) != SL_OK)
            return rc;
        st = F_PLAIN;
    }
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */

static int number(const sl_csv *c, char *s, uint64_t line, size_t col, float *v, char *err,
                  size_t errcap)
{
    char *end;
    float f = strtof(s, &end);
    if (end == s || *end != '\0')
        return field_err(c, SL_ESYNTAX, line, col, "not a number:", s, err, errcap);
    if (!isfinite(f))
        return field_err(c, SL_ENONFINITE, line, col, "not a finite number:", s, err, errcap);
    *v = f;
    return SL_OK;
}

static int label(const sl_csv *c, char *s, uint64_t line, size_t col, float *v, char *err,
                 size_t errcap)
{
    char what[LIST_MAX + 64], names[LIST_MAX + 8];
    float f;
    int rc;
    if (c->kind == SL_CSV_TARGET)
        return number(c, s, line, col, v, err, errcap);
    if (c->class_names != NULL) {
        const csv_name *hit = find_name(c->class_sorted, c->classes, s);
        char *end;
        long ix = strtol(s, &end, 10);
        if (hit == NULL && end != s && *end == '\0' && ix >= 0 && (size_t)ix < c->classes) {
            *v = (float)ix; /* no class has this name: it is a class index */
            return SL_OK;
        }
        if (hit == NULL) {
            snprintf(what, sizeof what, "unknown class name (the classes are: %s):",
                     list_names(c->class_names, c->classes, names));
            return field_err(c, SL_ERANGE, line, col, what, s, err, errcap);
        }
        *v = (float)hit->idx;
        return SL_OK;
    }
    if ((rc = number(c, s, line, col, &f, err, errcap)) != SL_OK)
        return rc;
    if (f < 0 || f >= (float)c->classes || f != floorf(f)) {
        snprintf(what, sizeof what, "not a class in [0, %zu):", c->classes);
        return field_err(c, SL_ERANGE, line, col, what, s, err, errcap);
    }
    *v = f;
    return SL_OK;
}

/* The parsed record (a data row) into c->sample. */
static int convert_row(sl_csv *c, uint64_t line, char *err, size_t errcap)
{
    int rc;
    if (c->nfields != c->ncols)
        return sl__data_errf(err, errcap, SL_ECOUNT,
                             "%s: line %" PRIu64 ": %zu fields where the file has %zu columns",
                             c->path, line, c->nfields, c->ncols);
    for (size_t i = 0; i < c->ncols; i++) {
        char *s;
        if (c->slot[i] == SLOT_SKIP)
            continue;
        s = trim(c->row + c->field[i]);
        if (*s == '\0')
            return field_err(c, SL_ESYNTAX, line, i, "an empty field", NULL, err, errcap);
        if (c->slot[i] == SLOT_LABEL)
            rc = label(c, s, line, i, &c->sample[c->nfeat], err, errcap);
        else
            rc = number(c, s, line, i, &c->sample[c->slot[i]], err, errcap);
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                  */

static int check_options(const sl_csv_options *o, char *delim, char *err, size_t errcap)
{
    *delim = o->delimiter ? o->delimiter : ',';
    if (strchr(",\t; ", *delim) == NULL || *delim == '\0')
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "csv: delimiter 0x%02x: use ',', tab, ';' or space",
                             (unsigned char)*delim);
    if (o->label == NULL || o->label[0] == '\0')
        return sl__data_errf(err, errcap, SL_EINVAL, "csv: the label column is not named");
    if (o->timestamp != NULL && strcmp(o->timestamp, o->label) == 0)
        return sl__data_errf(err, errcap, SL_EINVAL, "csv: the timestamp column is the label");
    if (o->header && o->columns != NULL)
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "csv: column names given with a header line: give one or the other");
    if (!o->header && (o->columns == NULL || o->ncolumns == 0))
        return sl__data_errf(err, errcap, SL_EINVAL,
                             "csv: without a header line the column names must be given");
    for (size_t i = 0; !o->header && i < o->ncolumns; i++)
        if (o->columns[i] == NULL || o->columns[i][0] == '\0')
            return sl__data_errf(err, errcap, SL_EINVAL, "csv: column name %zu is empty", i + 1);
    if (o->features != NULL && o->nfeatures == 0)
        return sl__data_errf(err, errcap, SL_EINVAL, "csv: an empty list of features");
    for (size_t i = 0; o->features != NULL && i < o->nfeatures; i++)
        if (o->features[i] == NULL)
            return sl__data_errf(err, errcap, SL_EINVAL, "csv: feature %zu is NULL", i + 1);
    if (o->label_kind == SL_CSV_TARGET) {
        if (o->class_names != NULL)
            return sl__data_errf(err, errcap, SL_EINVAL,
                                 "csv: class names given for a regression target");
        return SL_OK;
    }
    if (o->label_kind != SL_CSV_CLASS)
        return sl__data_errf(err, errcap, SL_EINVAL, "csv: unknown label kind %d",
                             (int)o->label_kind);
    if (o->classes == 0 || o->classes > SL_CSV_MAX_CLASSES)
        return sl__data_errf(err, errcap, SL_EINVAL, "csv: %zu classes: give 1 to %zu", o->classes,
                             SL_CSV_MAX_CLASSES);
    for (size_t i = 0; o->class_names != NULL && i < o->classes; i++)
        if (o->class_names[i] == NULL || o->class_names[i][0] == '\0')
            return sl__data_errf(err, errcap, SL_EINVAL, "csv: class name %zu is empty", i);
    return SL_OK;
}

/* The BOM, the lines to skip and the header (or the given names): sets c->pos. */
static int read_head(sl_csv *c, const sl_csv_options *o, char *err, size_t errcap)
{
    uint64_t off = 0, line = 1, end, nl;
    int b0, b1, b2, kind, rc;

    if ((rc = byte_at(c, 0, &b0, err, errcap)) != SL_OK ||
        (rc = byte_at(c, 1, &b1, err, errcap)) != SL_OK ||
        (rc = byte_at(c, 2, &b2, err, errcap)) != SL_OK)
        return rc;
    if (b0 == 0xef && b1 == 0xbb && b2 == 0xbf)
        off = 3;
    c->data_start = off;
    for (size_t k = 0; k < o->skip_lines; k++) {
        do {
            if ((rc = byte_at(c, off++, &b0, err, errcap)) != SL_OK)
                return rc;
            if (b0 < 0)
                return sl__data_errf(err, errcap, SL_ETRUNCATED,
                                     "%s: line %" PRIu64 ": the file ends within the %zu "
                                     "lines to skip",
                                     c->path, line, o->skip_lines);
        } while (b0 != '\n');
        line++;
    }
    if (!o->header) {
        c->ncols = o->ncolumns;
        if (copy_names(o->columns, o->ncolumns, &c->col_names, &c->col_block) != SL_OK)
            return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", c->path);
    } else {
        if ((rc = parse_record(c, off, 0, line, &kind, &end, &nl, err, errcap)) != SL_OK)
            return rc;
        if ((rc = byte_at(c, off, &b0, err, errcap)) != SL_OK)
            return rc;
        if (kind == REC_INCOMPLETE)
            return sl__data_errf(err, errcap, SL_ETRUNCATED,
                                 b0 < 0 ? "%s: line %" PRIu64 ": no header line"
                                        : "%s: line %" PRIu64 ": the header line has no newline",
                                 c->path, line);
        if (kind == REC_BLANK)
            return sl__data_errf(err, errcap, SL_ESYNTAX, "%s: line %" PRIu64 ": a blank header",
                                 c->path, line);
        c->ncols = c->nfields;
        c->col_names = malloc(c->ncols * sizeof *c->col_names);
        c->col_block = malloc(c->row_len);
        if (c->col_names == NULL || c->col_block == NULL)
            return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", c->path);
        for (size_t i = 0; i < c->ncols; i++) {
            char *name = trim(c->row + c->field[i]);
            if (*name == '\0')
                return sl__data_errf(err, errcap, SL_ESYNTAX,
                                     "%s: line %" PRIu64 ", column %zu: an empty column name",
                                     c->path, line, i + 1);
            c->col_names[i] = c->col_block + (name - c->row);
        }
        memcpy(c->col_block, c->row, c->row_len);
        off = end;
        line += nl;
    }
    c->pos = off;
    c->line = line;
    return SL_OK;
}

/* Label, timestamp and feature columns by name: c->slot, c->feat_col. */
static int resolve(sl_csv *c, const sl_csv_options *o, const csv_name *cols, char *err,
                   size_t errcap)
{
    char names[LIST_MAX + 8], shown[SHOW_MAX + 4];
    const char *want[2] = {o->label, o->timestamp};
    size_t nfeat = o->features != NULL ? o->nfeatures : 0;
    const csv_name *hit;

    for (size_t i = 0; i < c->ncols; i++)
        c->slot[i] = SLOT_SKIP;
    for (size_t k = 0; k < 2 + nfeat; k++) {
        const char *name = k < 2 ? want[k] : o->features[k - 2];
        if (name == NULL)
            continue;
        if ((hit = find_name(cols, c->ncols, name)) == NULL)
            return sl__data_errf(err, errcap, SL_ENOENT, "%s: no %s column '%s' (%s: %s)", c->path,
                                 k == 0   ? "label"
                                 : k == 1 ? "timestamp"
                                          : "feature",
                                 show(name, shown), o->header ? "the file has" : "the columns are",
                                 list_names(c->col_names, c->ncols, names));
        if (k >= 2 && c->slot[hit->idx] == SLOT_LABEL)
            return sl__data_errf(err, errcap, SL_EINVAL, "%s: feature '%s' is the label column",
                                 c->path, show(name, shown));
        if (k >= 2 && o->timestamp != NULL && strcmp(name, o->timestamp) == 0)
            return sl__data_errf(err, errcap, SL_EINVAL, "%s: feature '%s' is the timestamp column",
                                 c->path, show(name, shown));
        if (k >= 2 && c->slot[hit->idx] != SLOT_SKIP)
            return sl__data_errf(err, errcap, SL_EDUPLICATE, "%s: feature '%s' is given twice",
                                 c->path, show(name, shown));
        if (k == 0)
            c->slot[hit->idx] = SLOT_LABEL;
        else if (k >= 2)
            c->slot[hit->idx] = k - 2;
    }
    if (o->features == NULL) {
        size_t ts = SLOT_SKIP;
        if (o->timestamp != NULL)
            ts = find_name(cols, c->ncols, o->timestamp)->idx;
        for (size_t i = 0; i < c->ncols; i++)
            if (c->slot[i] == SLOT_SKIP && i != ts)
                c->slot[i] = nfeat++;
    }
    if (nfeat == 0)
        return sl__data_errf(err, errcap, SL_EINVAL, "%s: no feature column (the file has: %s)",
                             c->path, list_names(c->col_names, c->ncols, names));
    c->nfeat = nfeat;
    c->feat_col = malloc(nfeat * sizeof *c->feat_col);
    c->sample = malloc((nfeat + 1) * sizeof *c->sample);
    if (c->feat_col == NULL || c->sample == NULL)
        return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", c->path);
    for (size_t i = 0; i < c->ncols; i++)
        if (c->slot[i] != SLOT_SKIP && c->slot[i] != SLOT_LABEL)
            c->feat_col[c->slot[i]] = i;
    return SL_OK;
}

void sl_csv_options_init(sl_csv_options *o)
{
    memset(o, 0, sizeof *o);
    o->delimiter = ',';
    o->header = 1;
    o->label_kind = SL_CSV_CLASS;
}

int sl_csv_open(const char *path, const sl_csv_options *o, sl_csv **out, char *err, size_t errcap)
{
    char delim, shown[SHOW_MAX + 4];
    const csv_name *dup;
    csv_name *cols = NULL;
    struct stat st;
    sl_csv *c;
    int rc;

    if (path == NULL || o == NULL || out == NULL)
        return sl__data_errf(err, errcap, SL_EINVAL, "sl_csv_open: NULL argument");
    if ((rc = check_options(o, &delim, err, errcap)) != SL_OK)
        return rc;
    if ((c = calloc(1, sizeof *c)) == NULL)
        return sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", path);
    c->fd = -1;
    c->delim = delim;
    c->kind = o->label_kind;
    c->classes = o->label_kind == SL_CSV_CLASS ? o->classes : 0;
    c->path = strdup(path);
    c->in = malloc(CSV_INBUF);
    c->row = malloc(CSV_FIRST_ROW);
    c->field = malloc(16 * sizeof *c->field);
    if (c->path == NULL || c->in == NULL || c->row == NULL || c->field == NULL) {
        rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    c->row_cap = CSV_FIRST_ROW;
    c->field_cap = 16;
    if ((c->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            rc = sl__data_errf(err, errcap, SL_ENOENT, "%s: no such file", path);
        else
            rc = sl__data_errf(err, errcap, sl_status_from_errno(e), "%s: cannot open: %s", path,
                               strerror(e));
        goto fail;
    }
    if (fstat(c->fd, &st) != 0) {
        rc = sl__data_errf(err, errcap, SL_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sl__data_errf(err, errcap, SL_EINVAL, "%s: not a regular file", path);
        goto fail;
    }
    if (st.st_size == 0) {
        rc = sl__data_errf(err, errcap, SL_ETRUNCATED, "%s: the file is empty", path);
        goto fail;
    }
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    if ((rc = read_head(c, o, err, errcap)) != SL_OK)
        goto fail;
    if ((cols = sort_names(c->col_names, c->ncols, &dup)) == NULL) {
        rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (dup != NULL) {
        rc = sl__data_errf(err, errcap, SL_EDUPLICATE,
                           "%s: column '%s' is named twice (columns %zu and %zu)", path,
                           show(dup->name, shown), dup[0].idx + 1, dup[1].idx + 1);
        goto fail;
    }
    c->slot = malloc(c->ncols * sizeof *c->slot);
    if (c->slot == NULL) {
        rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = resolve(c, o, cols, err, errcap)) != SL_OK)
        goto fail;
    if (o->class_names != NULL && c->kind == SL_CSV_CLASS) {
        if (copy_names(o->class_names, c->classes, &c->class_names, &c->class_block) != SL_OK ||
            (c->class_sorted = sort_names(c->class_names, c->classes, &dup)) == NULL) {
            rc = sl__data_errf(err, errcap, SL_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        if (dup != NULL) {
            rc = sl__data_errf(err, errcap, SL_EDUPLICATE, "csv: class name '%s' is given twice",
                               show(dup->name, shown));
            goto fail;
        }
    }
    free(cols);
    *out = c;
    return SL_OK;
fail:
    free(cols);
    sl_csv_close(c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                  */

static int changed(sl_csv *c, const char *why, char *err, size_t errcap)
{
    c->changed = 1;
    return sl__data_errf(err, errcap, SL_ESTATE, "%s: the file changed while it was read (%s)",
                         c->path, why);
}

static int check_unchanged(sl_csv *c, char *err, size_t errcap)
{
    struct stat st;
    int b, rc;
    if (c->changed)
        return sl__data_errf(err, errcap, SL_ESTATE,
                             "%s: the file changed while it was read: open it again", c->path);
    if (stat(c->path, &st) != 0 || st.st_dev != c->dev || st.st_ino != c->ino)
        return changed(c, "replaced or removed", err, errcap);
    if (fstat(c->fd, &st) != 0)
        return sl__data_errf(err, errcap, SL_EIO, "%s: cannot stat: %s", c->path, strerror(errno));
    if ((uint64_t)st.st_size < c->pos)
        return changed(c, "truncated below the position read", err, errcap);
    if (c->pos > c->data_start) {
        if ((rc = byte_at(c, c->pos - 1, &b, err, errcap)) != SL_OK)
            return rc;
        if (b != '\n')
            return changed(c, "rewritten before the position read", err, errcap);
    }
    return SL_OK;
}

int sl_csv_read(sl_csv *c, float *x, float *y, size_t max, size_t *n, char *err, size_t errcap)
{
    uint64_t off, line, end, nl;
    size_t got = 0;
    int kind, rc;

    if (c == NULL || n == NULL || (max > 0 && (x == NULL || y == NULL)))
        return sl__data_errf(err, errcap, SL_EINVAL, "sl_csv_read: NULL argument");
    c->in_len = 0; /* what was read before may have changed or grown */
    if ((rc = check_unchanged(c, err, errcap)) != SL_OK)
        return rc;
    off = c->pos;
    line = c->line;
    while (got < max) {
        rc = parse_record(c, off, c->ncols, line, &kind, &end, &nl, err, errcap);
        if (rc != SL_OK)
            return rc;
        if (kind == REC_INCOMPLETE)
            break;
        if (kind == REC_ROW) {
            if ((rc = convert_row(c, line, err, errcap)) != SL_OK)
                return rc;
            memcpy(x + got * c->nfeat, c->sample, c->nfeat * sizeof *x);
            y[got++] = c->sample[c->nfeat];
        }
        off = end;
        line += nl;
    }
    c->pos = off;
    c->line = line;
    c->rows += got;
    *n = got;
    return SL_OK;
}

size_t sl_csv_features(const sl_csv *c)
{
    return c->nfeat;
}

const char *sl_csv_feature_name(const sl_csv *c, size_t i)
{
    return i < c->nfeat ? c->col_names[c->feat_col[i]] : NULL;
}

uint64_t sl_csv_rows_read(const sl_csv *c)
{
    return c->rows;
}

void sl_csv_close(sl_csv *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c->path);
    free(c->class_names);
    free(c->class_block);
    free(c->class_sorted);
    free(c->col_names);
    free(c->col_block);
    free(c->slot);
    free(c->feat_col);
    free(c->sample);
    free(c->in);
    free(c->row);
    free(c->field);
    free(c);
}
