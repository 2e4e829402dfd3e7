/*
 * source.c - a device's own data through its task's data contract.
 *
 * Two kinds of source. Row sources (CSV, NumPy, IDX, SQLite spool) give rows
 * of raw values and a label; a row is a sample, or, with the contract's
 * window, one step of a series whose windows are the samples. Folder sources
 * (images, WAV) give one sample per file, its class by its subfolder.
 *
 * A read either returns its samples and moves on, or refuses and returns
 * nothing; a source that refused keeps refusing with the same reason (its
 * readers may have moved past rows before the bad one), so the caller opens
 * the source anew once the data is fixed.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "starling/csv.h"
#include "starling/image.h"
#include "starling/logmel.h"
#include "starling/npy.h"
#include "starling/source.h"
#include "starling/spool.h"
#include "starling/wav.h"

#include "data_int.h"

#define PATH_MAX_LEN 4096
#define CHUNK_ROWS   256
#define MAX_FILES    (1u << 22)

typedef enum kind { K_CSV, K_NPY, K_IDX, K_SPOOL, K_IMAGES, K_WAV } kind;

struct sl_source {
    const sl_contract *c;
    kind k;
    char path[PATH_MAX_LEN];
    size_t row_vals; /* values per row the reader gives (raw_size, plus extra label columns) */
    /* row readers */
    sl_csv *csv;
    sl_spool *spool;
    int64_t spool_after;
    sl_npy *nx, *ny;
    uint64_t npy_next, npy_rows;
    gzFile idx_x, idx_y;
    uint64_t idx_next, idx_rows;
    float *rx, *ry; /* CHUNK_ROWS rows, labels */
    /* the window: the last c->window rows, rows_seen of them so far */
    float *ring, *ring_y;
    uint64_t rows_seen;
    /* folder sources: the files taken, sorted; the classes' folders */
    char **seen;
    size_t nseen, capseen;
    float *pcm;     /* a clip's samples (wav:) */
    uint64_t taken; /* samples returned so far */
    int failed;     /* a read refused: every later one refuses with @why */
    int why_rc;
    char why[512];
};

static int say(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int say(char *err, size_t cap, int rc, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL && cap > 0) {
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int sl_source_is_uri(const char *text)
{
    static const char *const schemes[] = {
        "csv:", "npy:", "npz:", "idx:", "images:", "wav:", "sqlite:", NULL};
    for (size_t i = 0; text != NULL && schemes[i] != NULL; i++)
        if (strncmp(text, schemes[i], strlen(schemes[i])) == 0)
            return 1;
    return 0;
}

/* ---- URI options ------------------------------------------------------------------------ */

typedef struct uri_opts {
    char buf[1024];
    const char *key[12], *val[12];
    size_t n;
} uri_opts;

/* "PATH?k=v&k=v" into @path and @o; keys must be among @allowed ("a,b,c"). */
static int split_uri(const char *scheme, const char *uri, const char *allowed, char *path,
                     uri_opts *o, char *err, size_t cap)
{
    const char *q = strchr(uri, '?');
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    char *save = NULL;
    o->n = 0;
    if (plen == 0 || plen >= PATH_MAX_LEN || (q && strlen(q + 1) >= sizeof o->buf))
        return say(err, cap, SL_EINVAL, "%s%s: a path, then ?options (%s)", scheme, uri, allowed);
    memcpy(path, uri, plen);
    path[plen] = '\0';
    snprintf(o->buf, sizeof o->buf, "%s", q ? q + 1 : "");
    for (char *kv = strtok_r(o->buf, "&", &save); kv != NULL; kv = strtok_r(NULL, "&", &save)) {
        char *v = strchr(kv, '=');
        const char *hit;
        size_t klen;
        if (v == NULL || v == kv || v[1] == '\0')
            return say(err, cap, SL_EINVAL, "%s \"%s\" is not key=value", scheme, kv);
        *v++ = '\0';
        klen = strlen(kv);
        hit = strstr(allowed, kv);
        while (hit != NULL &&
               !((hit == allowed || hit[-1] == ',') && (hit[klen] == ',' || hit[klen] == '\0')))
            hit = strstr(hit + 1, kv);
        if (hit == NULL || o->n == sizeof o->key / sizeof o->key[0])
            return say(err, cap, SL_EINVAL, "%s unknown option \"%s\" (options: %s)", scheme, kv,
                       allowed);
        for (size_t i = 0; i < o->n; i++)
            if (strcmp(o->key[i], kv) == 0)
                return say(err, cap, SL_EINVAL, "%s option \"%s\" given twice", scheme, kv);
        o->key[o->n] = kv;
        o->val[o->n++] = v;
    }
    return SL_OK;
}

static const char *opt(const uri_opts *o, const char *key)
{
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->key[i], key) == 0)
            return o->val[i];
    return NULL;
}

/* ---- labels ----------------------------------------------------------------------------- */

/* Check one row's label (@y, tdim floats) against the contract. */
static int check_label(const sl_source *s, const float *y, uint64_t row, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    for (size_t j = 0; j < c->tdim; j++) {
        float v = y[j];
        if (!isfinite(v))
            return say(err, cap, SL_ENONFINITE, "%s: row %llu: the label is not a finite number",
                       s->path, (unsigned long long)row);
        if (c->label_kind == SL_LABEL_CLASS && (v < 0 || v >= (float)c->nclasses || v != floorf(v)))
            return say(err, cap, SL_ERANGE,
                       "%s: row %llu: label %g is outside the task's %zu classes", s->path,
                       (unsigned long long)row, (double)v, c->nclasses);
        if (c->label_kind == SL_LABEL_MULTILABEL && v != 0.0f && v != 1.0f)
            return say(err, cap, SL_ERANGE,
                       "%s: row %llu: a multi-label value is 0 or 1 (class %s: %g)", s->path,
                       (unsigned long long)row, c->classes[j], (double)v);
    }
    return SL_OK;
}

/* ---- CSV and spool: the contract's columns ------------------------------------------------ */

/* The label columns: the contract's, else ?label=, else "label". */
static int label_cols(const sl_contract *c, const uri_opts *o, const char **first, const char *path,
                      char *err, size_t cap)
{
    const char *u = opt(o, "label");
    if (c->nlabel_columns > 0 && u != NULL && c->tdim > 1)
        return say(err, cap, SL_EINVAL,
                   "%s: ?label= renames one column; the task's label has %zu columns", path,
                   c->nlabel_columns);
    *first = u != NULL ? u : c->nlabel_columns > 0 ? c->label_columns[0] : "label";
    if (c->tdim > 1 && c->nlabel_columns == 0)
        return say(err, cap, SL_EINVAL,
                   "%s: the task's label has %zu values: its contract names their columns "
                   "(label.columns)",
                   path, c->tdim);
    if (c->tdim > 1 && c->nfeatures == 0)
        return say(err, cap, SL_EINVAL,
                   "%s: a label of several columns needs the contract's input.features", path);
    return SL_OK;
}

/* Features then the label columns after the first: what the reader returns per row. */
static const char **row_columns(const sl_contract *c, size_t *n)
{
    size_t extra = c->tdim > 1 ? c->tdim - 1 : 0;
    const char **cols;
    *n = c->nfeatures + extra;
    if (*n == 0)
        return NULL;
    cols = malloc(*n * sizeof *cols);
    if (cols == NULL)
        return NULL;
    for (size_t i = 0; i < c->nfeatures; i++)
        cols[i] = c->features[i];
    for (size_t i = 0; i < extra; i++)
        cols[c->nfeatures + i] = c->label_columns[1 + i];
    return cols;
}

/* The values of csv:'s delimiter= and skip= (defaults when absent). */
static int csv_values(const uri_opts *o, char *delimiter, size_t *skip, char *err, size_t cap)
{
    const char *d;
    if ((d = opt(o, "delimiter")) != NULL) {
        if (strcmp(d, ",") != 0 && strcmp(d, ";") != 0 && strcmp(d, "tab") != 0 &&
            strcmp(d, "space") != 0)
            return say(err, cap, SL_EINVAL, "csv: delimiter=%s: one of , ; tab space", d);
        *delimiter = d[0] == 't' ? '\t' : d[0] == 's' ? ' ' : d[0];
    }
    if ((d = opt(o, "skip")) != NULL) {
        char *end;
        long v = strtol(d, &end, 10);
        if (*end != '\0' || v < 0 || v > (1 << 20))
            return say(err, cap, SL_EINVAL, "csv: skip=%s: a number of lines", d);
        *skip = (size_t)v;
    }
    return SL_OK;
}

#define CSV_OPTIONS    "label,delimiter,skip,timestamp,kind,classes"
#define SQLITE_OPTIONS "table,label,blob"

static int open_csv(sl_source *s, const char *uri, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    uri_opts o;
    sl_csv_options co;
    const char **cols = NULL, *d;
    char why[512];
    int rc = split_uri("csv:", uri, "label,delimiter,skip,timestamp,kind,classes", s->path, &o, err,
                       cap);
    if (rc != SL_OK)
        return rc;
    /* kind= and classes= (a CSV read without a contract) must say what the contract says */
    if ((d = opt(&o, "kind")) != NULL &&
        strcmp(d, c->label_kind == SL_LABEL_CLASS ? "class" : "target") != 0)
        return say(err, cap, SL_EINVAL, "%s: kind=%s; the task's data contract says %s", s->path, d,
                   c->label_kind == SL_LABEL_CLASS ? "class" : "not class");
    if ((d = opt(&o, "classes")) != NULL &&
        (c->label_kind != SL_LABEL_CLASS || strtoul(d, NULL, 10) != c->nclasses))
        return say(err, cap, SL_EINVAL, "%s: classes=%s; the task's data contract has %zu", s->path,
                   d, c->nclasses);
    sl_csv_options_init(&co);
    if ((rc = label_cols(c, &o, &co.label, s->path, err, cap)) != SL_OK)
        return rc;
    if ((rc = csv_values(&o, &co.delimiter, &co.skip_lines, err, cap)) != SL_OK)
        return rc;
    co.timestamp = opt(&o, "timestamp");
    if (c->label_kind == SL_LABEL_CLASS) {
        co.label_kind = SL_CSV_CLASS;
        co.classes = c->nclasses;
        co.class_names = (const char *const *)c->classes;
    } else {
        co.label_kind = SL_CSV_TARGET; /* multi-label values are checked as 0/1 here */
    }
    if (c->nfeatures > 0 && (cols = row_columns(c, &co.nfeatures)) == NULL)
        return SL_ENOMEM;
    co.features = cols;
    rc = sl_csv_open(s->path, &co, &s->csv, why, sizeof why);
    free(cols);
    if (rc != SL_OK)
        return say(err, cap, rc, "%s", why);
    s->row_vals = sl_csv_features(s->csv);
    if (s->row_vals != c->raw_size + (c->tdim > 1 ? c->tdim - 1 : 0)) {
        size_t got = s->row_vals;
        sl_csv_close(s->csv);
        s->csv = NULL;
        return say(err, cap, SL_EINVAL,
                   "%s: %zu feature columns; the task's sample has %zu values a row (name the "
                   "columns in input.features)",
                   s->path, got, c->raw_size);
    }
    return SL_OK;
}

static int open_spool(sl_source *s, const char *uri, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    uri_opts o;
    sl_spool_options so;
    const char **cols = NULL;
    char why[512];
    size_t ncols = 0;
    int rc = split_uri("sqlite:", uri, SQLITE_OPTIONS, s->path, &o, err, cap);
    if (rc != SL_OK)
        return rc;
    memset(&so, 0, sizeof so);
    so.table = opt(&o, "table") ? opt(&o, "table") : "samples";
    so.blob = opt(&o, "blob");
    if ((rc = label_cols(c, &o, &so.label, s->path, err, cap)) != SL_OK)
        return rc;
    if (so.blob != NULL && c->tdim > 1)
        return say(err, cap, SL_EINVAL, "%s: a blob spool has one label column", s->path);
    if (so.blob == NULL) {
        if (c->nfeatures == 0)
            return say(err, cap, SL_EINVAL,
                       "%s: name the feature columns (input.features) or a blob column "
                       "(?blob=COL)",
                       s->path);
        if ((cols = row_columns(c, &ncols)) == NULL)
            return SL_ENOMEM;
    } else {
        ncols = c->raw_size;
    }
    so.features = cols;
    so.nfeatures = ncols;
    rc = sl_spool_open(s->path, &so, &s->spool, why, sizeof why);
    free(cols);
    if (rc != SL_OK)
        return say(err, cap, rc, "%s", why);
    s->row_vals = ncols;
    return SL_OK;
}

/* ---- NumPy -------------------------------------------------------------------------------- */

static const char *contract_dtype_name(sl_contract_dtype d)
{
    static const char *const names[] = {"any", "float32", "float64", "uint8", "int64"};
    return (unsigned)d < 5 ? names[d] : "?";
}

static const char *npy_dtype_name(sl_npy_dtype d)
{
    static const char *const names[] = {"float32", "float64", "uint8", "int64"};
    return (unsigned)d < 4 ? names[d] : "?";
}

static int dtype_is(sl_contract_dtype want, sl_npy_dtype got)
{
    return (want == SL_DTYPE_FLOAT32 && got == SL_NPY_F4) ||
           (want == SL_DTYPE_FLOAT64 && got == SL_NPY_F8) ||
           (want == SL_DTYPE_UINT8 && got == SL_NPY_U1) ||
           (want == SL_DTYPE_INT64 && got == SL_NPY_I8);
}

static int open_npy(sl_source *s, const char *uri, int npz, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    uri_opts o;
    char ypath[PATH_MAX_LEN], why[512];
    uint64_t yvals;
    int rc = npz ? split_uri("npz:", uri, "x,y", s->path, &o, err, cap)
                 : split_uri("npy:", uri, "y", s->path, &o, err, cap);
    if (rc != SL_OK)
        return rc;
    if (npz) {
        const char *xm = opt(&o, "x") ? opt(&o, "x") : "x", *ym = opt(&o, "y") ? opt(&o, "y") : "y";
        rc = sl_npz_open(s->path, xm, &s->nx, why, sizeof why);
        if (rc == SL_OK)
            rc = sl_npz_open(s->path, ym, &s->ny, why, sizeof why);
    } else {
        if (opt(&o, "y") == NULL)
            return say(err, cap, SL_EINVAL, "npy:%s: ?y=FILE names the labels' array", s->path);
        snprintf(ypath, sizeof ypath, "%s", opt(&o, "y"));
        rc = sl_npy_open(s->path, &s->nx, why, sizeof why);
        if (rc == SL_OK)
            rc = sl_npy_open(ypath, &s->ny, why, sizeof why);
    }
    if (rc != SL_OK)
        return say(err, cap, rc, "%s", why);
    s->npy_rows = sl_npy_rows(s->nx);
    if (c->dtype != SL_DTYPE_ANY && !dtype_is(c->dtype, sl_npy_type(s->nx)))
        return say(err, cap, SL_EINVAL, "%s: x holds %s; the task's contract says input.dtype %s",
                   s->path, npy_dtype_name(sl_npy_type(s->nx)), contract_dtype_name(c->dtype));
    if (sl_npy_row_size(s->nx) != c->raw_size)
        return say(err, cap, SL_EINVAL,
                   "%s: x has %llu values a row; the task's sample has %zu (input.shape)", s->path,
                   (unsigned long long)sl_npy_row_size(s->nx), c->raw_size);
    if (sl_npy_rows(s->ny) != s->npy_rows)
        return say(err, cap, SL_EINVAL, "%s: x has %llu rows, y %llu", s->path,
                   (unsigned long long)s->npy_rows, (unsigned long long)sl_npy_rows(s->ny));
    yvals = sl_npy_row_size(s->ny);
    if (yvals != c->tdim)
        return say(err, cap, SL_EINVAL, "%s: y has %llu values a row; the task's label has %zu",
                   s->path, (unsigned long long)yvals, c->tdim);
    s->row_vals = c->raw_size;
    return SL_OK;
}

/* ---- IDX (Fashion-MNIST's files), streamed -------------------------------------------------- */

static int idx_open1(const char *dir, const char *stem, unsigned ndims, uint32_t *dims, gzFile *out,
                     char *err, size_t cap)
{
    char path[PATH_MAX_LEN + 64];
    unsigned char hdr[16];
    struct stat st;
    gzFile f;
    snprintf(path, sizeof path, "%s/%s.gz", dir, stem);
    if (stat(path, &st) != 0)
        snprintf(path, sizeof path, "%s/%s", dir, stem);
    if ((f = gzopen(path, "rb")) == NULL)
        return say(err, cap, SL_ENOENT, "%s: cannot open", path);
    if (gzread(f, hdr, 4 + 4 * ndims) != (int)(4 + 4 * ndims) || hdr[0] != 0 || hdr[1] != 0 ||
        hdr[2] != 0x08 || hdr[3] != ndims) {
        gzclose(f);
        return say(err, cap, SL_EMAGIC, "%s: not an IDX file of unsigned bytes", path);
    }
    for (unsigned i = 0; i < ndims; i++)
        dims[i] = (uint32_t)hdr[4 + 4 * i] << 24 | (uint32_t)hdr[5 + 4 * i] << 16 |
                  (uint32_t)hdr[6 + 4 * i] << 8 | hdr[7 + 4 * i];
    *out = f;
    return SL_OK;
}

static int open_idx(sl_source *s, const char *uri, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    uri_opts o;
    uint32_t xd[3] = {0}, yd[1] = {0};
    int rc = split_uri("idx:", uri, "", s->path, &o, err, cap);
    if (rc != SL_OK)
        return rc;
    if (c->label_kind != SL_LABEL_CLASS)
        return say(err, cap, SL_EINVAL, "%s: IDX labels are classes; the task's are not", s->path);
    if (c->dtype != SL_DTYPE_ANY && c->dtype != SL_DTYPE_UINT8)
        return say(err, cap, SL_EINVAL,
                   "%s: IDX images hold uint8; the task's contract says input.dtype %s", s->path,
                   contract_dtype_name(c->dtype));
    if ((rc = idx_open1(s->path, "train-images-idx3-ubyte", 3, xd, &s->idx_x, err, cap)) != SL_OK ||
        (rc = idx_open1(s->path, "train-labels-idx1-ubyte", 1, yd, &s->idx_y, err, cap)) != SL_OK)
        return rc;
    if (xd[0] != yd[0])
        return say(err, cap, SL_ECORRUPT, "%s: %u images but %u labels", s->path, xd[0], yd[0]);
    if ((size_t)xd[1] * xd[2] != c->raw_size)
        return say(err, cap, SL_EINVAL, "%s: images of %ux%u; the task's sample has %zu values",
                   s->path, xd[1], xd[2], c->raw_size);
    s->idx_rows = xd[0];
    s->row_vals = c->raw_size;
    return SL_OK;
}

static int read_idx(sl_source *s, size_t max, size_t *n, char *err, size_t cap)
{
    size_t want = s->idx_rows - s->idx_next < max ? (size_t)(s->idx_rows - s->idx_next) : max;
    unsigned char px[4096], lab[CHUNK_ROWS];
    size_t sz = s->row_vals;
    if (want == 0) {
        *n = 0;
        return SL_OK;
    }
    if (gzread(s->idx_y, lab, (unsigned)want) != (int)want)
        return say(err, cap, SL_ETRUNCATED, "%s: labels truncated", s->path);
    for (size_t i = 0; i < want; i++) {
        for (size_t off = 0; off < sz; off += sizeof px) {
            size_t len = sz - off < sizeof px ? sz - off : sizeof px;
            if (gzread(s->idx_x, px, (unsigned)len) != (int)len)
                return say(err, cap, SL_ETRUNCATED, "%s: images truncated", s->path);
            for (size_t j = 0; j < len; j++)
                s->rx[i * sz + off + j] = px[j];
        }
        s->ry[i] = lab[i];
    }
    s->idx_next += want;
    *n = want;
    return SL_OK;
}

/* ---- rows --------------------------------------------------------------------------------- */

/* Up to @max (<= CHUNK_ROWS) rows into s->rx (row_vals each) and s->ry (tdim each). */
static int read_rows(sl_source *s, size_t max, size_t *n, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    char why[512];
    size_t got = 0, extra = c->tdim > 1 ? c->tdim - 1 : 0;
    /* the rows before these, for the reasons below (the readers count their own) */
    uint64_t before = s->k == K_NPY ? s->npy_next : s->k == K_IDX ? s->idx_next : s->rows_seen;
    int64_t last;
    int rc = SL_OK;
    switch (s->k) {
    case K_CSV:
        rc = sl_csv_read(s->csv, s->rx, s->ry, max, &got, why, sizeof why);
        break;
    case K_SPOOL:
        rc = sl_spool_read(s->spool, s->spool_after, s->rx, s->ry, max, &got, &last, why,
                           sizeof why);
        break;
    case K_NPY: {
        size_t want = s->npy_rows - s->npy_next < max ? (size_t)(s->npy_rows - s->npy_next) : max;
        rc = sl_npy_read(s->nx, s->npy_next, want, s->rx, why, sizeof why);
        if (rc == SL_OK)
            rc = sl_npy_read(s->ny, s->npy_next, want, s->ry, why, sizeof why);
        got = want;
        break;
    }
    case K_IDX:
        if ((rc = read_idx(s, max, &got, err, cap)) != SL_OK)
            return rc;
        break;
    default:
        return SL_EINVAL;
    }
    if (rc != SL_OK)
        return say(err, cap, rc, "%s", why);
    /* the reader's extra columns (labels after the first) move into the label */
    if (extra > 0 && (s->k == K_CSV || s->k == K_SPOOL)) {
        for (size_t i = got; i-- > 0;) {
            float first = s->ry[i];
            s->ry[i * c->tdim] = first;
            memcpy(s->ry + i * c->tdim + 1, s->rx + i * s->row_vals + c->raw_size,
                   extra * sizeof *s->ry);
        }
        for (size_t i = 0; i < got; i++)
            memmove(s->rx + i * c->raw_size, s->rx + i * s->row_vals, c->raw_size * sizeof *s->rx);
    }
    for (size_t i = 0; i < got; i++) {
        uint64_t row = before + i + 1;
        if ((rc = check_label(s, s->ry + i * c->tdim, row, err, cap)) != SL_OK)
            return rc;
    }
    *n = got;
    if (s->k == K_SPOOL && got > 0)
        s->spool_after = last;
    if (s->k == K_NPY)
        s->npy_next += got;
    return SL_OK;
}

/* One more row (@x, @y) into the window; 1 when it completes a window to emit. */
static int window_push(sl_source *s, const float *x, const float *y)
{
    const sl_contract *c = s->c;
    size_t slot = (size_t)(s->rows_seen % c->window);
    memcpy(s->ring + slot * c->raw_size, x, c->raw_size * sizeof *x);
    memcpy(s->ring_y + slot * c->tdim, y, c->tdim * sizeof *y);
    s->rows_seen++;
    return s->rows_seen >= c->window && (s->rows_seen - c->window) % c->stride == 0;
}

/* The window ending at the last row: [feature][step] into @x, its label into @y. */
static void window_emit(const sl_source *s, float *x, float *y)
{
    const sl_contract *c = s->c;
    size_t w = c->window, f = c->raw_size, oldest = (size_t)(s->rows_seen % w);
    for (size_t t = 0; t < w; t++) {
        const float *row = s->ring + ((oldest + t) % w) * f;
        for (size_t j = 0; j < f; j++)
            x[j * w + t] = row[j];
    }
    if (c->window_rule == SL_WINDOW_LAST) {
        memcpy(y, s->ring_y + ((oldest + w - 1) % w) * c->tdim, c->tdim * sizeof *y);
    } else if (c->window_rule == SL_WINDOW_MEAN) {
        for (size_t j = 0; j < c->tdim; j++) {
            double sum = 0;
            for (size_t t = 0; t < w; t++)
                sum += s->ring_y[t * c->tdim + j];
            y[j] = (float)(sum / (double)w);
        }
    } else { /* majority: the most frequent class, the smallest on a tie */
        size_t best = 0, best_n = 0;
        for (size_t t = 0; t < w; t++) {
            size_t k = (size_t)s->ring_y[t], cnt = 0;
            for (size_t u = 0; u < w; u++)
                cnt += (size_t)s->ring_y[u] == k;
            if (cnt > best_n || (cnt == best_n && k < best))
                best = k, best_n = cnt;
        }
        y[0] = (float)best;
    }
}

static int read_row_samples(sl_source *s, float *x, float *y, size_t max, size_t *n, char *err,
                            size_t cap)
{
    const sl_contract *c = s->c;
    size_t done = 0;
    while (done < max) {
        size_t got, want = max - done < CHUNK_ROWS ? max - done : CHUNK_ROWS;
        int rc = read_rows(s, want, &got, err, cap);
        if (rc != SL_OK)
            return rc;
        if (got == 0)
            break;
        for (size_t i = 0; i < got; i++) {
            const float *rx = s->rx + i * c->raw_size, *ry = s->ry + i * c->tdim;
            if (c->raw == SL_RAW_SERIES) {
                if (window_push(s, rx, ry)) {
                    window_emit(s, x + done * c->sample_size, y + done * c->tdim);
                    done++;
                }
            } else {
                memcpy(x + done * c->sample_size, rx, c->sample_size * sizeof *x);
                memcpy(y + done * c->tdim, ry, c->tdim * sizeof *y);
                done++;
                if (s->k != K_NPY && s->k != K_IDX)
                    s->rows_seen++;
            }
        }
    }
    *n = done;
    return SL_OK;
}

/* ---- folders of files, one subfolder per class ------------------------------------------------
 */

static int skipped_name(const char *name)
{
    size_t len = strlen(name);
    return name[0] == '.' || (len >= 4 && strcmp(name + len - 4, ".tmp") == 0) ||
           (len >= 5 && strcmp(name + len - 5, ".part") == 0);
}

static const sl__source_hooks *g_hooks;

void sl__source_set_hooks(const sl__source_hooks *hooks)
{
    g_hooks = hooks;
}

/* 1 when a file's stat before and after a read says nothing wrote or replaced it meanwhile
 * (the same inode, size and modification and change times to the nanosecond). */
static int same_file_state(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int taken(const sl_source *s, const char *rel)
{
    const char *key = rel;
    return s->nseen > 0 && bsearch(&key, s->seen, s->nseen, sizeof *s->seen, cmp_str) != NULL;
}

/* Mark @rel taken (kept sorted). */
static int take(sl_source *s, const char *rel)
{
    size_t lo = 0, hi = s->nseen;
    char *copy;
    if (s->nseen == MAX_FILES)
        return SL_ETOOBIG;
    if (s->nseen == s->capseen) {
        size_t nc = s->capseen ? s->capseen * 2 : 256;
        char **grown = realloc(s->seen, nc * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        s->seen = grown;
        s->capseen = nc;
    }
    if ((copy = strdup(rel)) == NULL)
        return SL_ENOMEM;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(s->seen[mid], rel) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(s->seen + lo + 1, s->seen + lo, (s->nseen - lo) * sizeof *s->seen);
    s->seen[lo] = copy;
    s->nseen++;
    return SL_OK;
}

/* The class folders of @dir: each must be one of the contract's classes. */
static int check_folders(sl_source *s, char *err, size_t cap)
{
    DIR *d;
    struct dirent *e;
    size_t classes = 0;
    /* "..", "." or "a/b" would take files from outside the class folders */
    for (size_t k = 0; k < s->c->nclasses; k++)
        if (s->c->classes[k][0] == '.' || strchr(s->c->classes[k], '/') != NULL)
            return say(err, cap, SL_EINVAL, "%s: class \"%s\" cannot be a folder's name", s->path,
                       s->c->classes[k]);
    if ((d = opendir(s->path)) == NULL)
        return say(err, cap, errno == ENOENT ? SL_ENOENT : SL_EIO, "%s: cannot open the folder",
                   s->path);
    while ((e = readdir(d)) != NULL) {
        char sub[PATH_MAX_LEN + 256];
        struct stat st;
        if (skipped_name(e->d_name))
            continue;
        snprintf(sub, sizeof sub, "%s/%s", s->path, e->d_name);
        if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode))
            continue; /* files beside the class folders are not samples */
        if (sl_contract_class(s->c, e->d_name) < 0) {
            /* the reason first: e->d_name lives in @d */
            say(err, cap, SL_ERANGE, "%s: folder \"%s\" is not one of the task's classes", s->path,
                e->d_name);
            closedir(d);
            return SL_ERANGE;
        }
        classes++;
    }
    closedir(d);
    if (classes == 0)
        return say(err, cap, SL_ENOENT, "%s: no class folders (one subfolder per class)", s->path);
    return SL_OK;
}

/* One file decoded into @x (sample_size floats, before scaling). */
static int decode_file(sl_source *s, const char *path, float *x, char *err, size_t cap)
{
    const sl_contract *c = s->c;
    if (s->k == K_IMAGES)
        return sl_image_load(path, c->image_channels, c->image_width, c->image_height, x, err, cap);
    {
        sl_logmel_config lc = {c->sample_rate, c->n_fft, c->hop, c->n_mels,
                               c->frames,      c->fmin,  c->fmax};
        size_t got = 0;
        int rc = sl_wav_load(path, c->sample_rate, s->pcm, c->raw_size, &got, err, cap);
        if (rc != SL_OK)
            return rc;
        return sl_logmel(&lc, s->pcm, got, x);
    }
}

/* The new files of the class folders, in name order, up to @max of them. */
static int read_folder(sl_source *s, float *x, float *y, size_t max, size_t *n, char *err,
                       size_t cap)
{
    const sl_contract *c = s->c;
    char **fresh = NULL;
    size_t nfresh = 0, capf = 0, done = 0;
    int rc = SL_OK;
    for (size_t k = 0; k < c->nclasses && rc == SL_OK; k++) {
        char sub[PATH_MAX_LEN + 256];
        DIR *d;
        struct dirent *e;
        snprintf(sub, sizeof sub, "%s/%s", s->path, c->classes[k]);
        if ((d = opendir(sub)) == NULL)
            continue; /* a class this device has no sample of */
        while (rc == SL_OK && (e = readdir(d)) != NULL) {
            char rel[600];
            if (skipped_name(e->d_name))
                continue;
            snprintf(rel, sizeof rel, "%s/%s", c->classes[k], e->d_name);
            if (taken(s, rel))
                continue;
            if (nfresh == capf) {
                size_t nc = capf ? capf * 2 : 64;
                char **g = realloc(fresh, nc * sizeof *g);
                if (g == NULL) {
                    rc = SL_ENOMEM;
                    break;
                }
                fresh = g;
                capf = nc;
            }
            if ((fresh[nfresh] = strdup(rel)) == NULL)
                rc = SL_ENOMEM;
            else
                nfresh++;
        }
        closedir(d);
    }
    if (rc == SL_OK && nfresh > 0)
        qsort(fresh, nfresh, sizeof *fresh, cmp_str);
    for (size_t i = 0; rc == SL_OK && i < nfresh && done < max; i++) {
        char path[PATH_MAX_LEN + 700];
        struct stat before, after;
        const char *slash = strchr(fresh[i], '/');
        char klass[512];
        snprintf(klass, sizeof klass, "%.*s", (int)(slash - fresh[i]), fresh[i]);
        snprintf(path, sizeof path, "%s/%s", s->path, fresh[i]);
        if (stat(path, &before) != 0 || !S_ISREG(before.st_mode))
            continue; /* gone, or not a file */
        rc = decode_file(s, path, x + done * c->sample_size, err, cap);
        if (g_hooks != NULL && g_hooks->after_decode != NULL)
            g_hooks->after_decode(path, g_hooks->arg);
        if (stat(path, &after) != 0 || !same_file_state(&before, &after)) {
            rc = SL_OK;
            continue; /* still being written, replaced or gone: the next read decides */
        }
        if (rc == SL_OK)
            rc = take(s, fresh[i]);
        if (rc == SL_OK) {
            float *yy = y + done * c->tdim;
            memset(yy, 0, c->tdim * sizeof *yy);
            yy[0] = (float)sl_contract_class(c, klass);
            done++;
        }
    }
    for (size_t i = 0; i < nfresh; i++)
        free(fresh[i]);
    free(fresh);
    if (rc == SL_ENOMEM)
        say(err, cap, rc, "out of memory");
    if (rc == SL_OK)
        *n = done;
    return rc;
}

/* ---- the source ---------------------------------------------------------------------------- */

int sl_source_check_uri(const char *uri, char *err, size_t errcap)
{
    static const struct {
        const char *scheme, *options;
    } kinds[] = {{"csv:", CSV_OPTIONS},
                 {"npy:", "y"},
                 {"npz:", "x,y"},
                 {"idx:", ""},
                 {"images:", ""},
                 {"wav:", ""},
                 {"sqlite:", SQLITE_OPTIONS}};
    char path[PATH_MAX_LEN], delimiter = ',';
    size_t skip = 0;
    uri_opts o;
    if (!sl_source_is_uri(uri))
        return say(err, errcap, SL_EINVAL,
                   "\"%s\": a data source is csv:, npy:, npz:, idx:, images:, wav: or sqlite:",
                   uri ? uri : "");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t len = strlen(kinds[i].scheme);
        int rc;
        if (strncmp(uri, kinds[i].scheme, len) != 0)
            continue;
        rc = split_uri(kinds[i].scheme, uri + len, kinds[i].options, path, &o, err, errcap);
        if (rc == SL_OK && i == 0)
            rc = csv_values(&o, &delimiter, &skip, err, errcap);
        if (rc == SL_OK && i == 1 && opt(&o, "y") == NULL)
            rc = say(err, errcap, SL_EINVAL, "npy:%s: ?y=FILE names the labels' array", path);
        return rc;
    }
    return SL_EINVAL;
}

int sl_source_open(const char *uri, const sl_contract *c, sl_source **out, char *err, size_t errcap)
{
    sl_source *s;
    int rc;
    if (uri == NULL || c == NULL || out == NULL)
        return SL_EINVAL;
    if (!sl_source_is_uri(uri))
        return say(
            err, errcap, SL_EINVAL,
            "\"%s\": a data source is csv:, npy:, npz:, idx:, images:, wav: or sqlite:", uri);
    /* before a row source's own checks, whose reason (a row's size) would mislead */
    if ((c->raw == SL_RAW_IMAGE || c->raw == SL_RAW_AUDIO) && strncmp(uri, "images:", 7) != 0 &&
        strncmp(uri, "wav:", 4) != 0)
        return say(err, errcap, SL_EINVAL,
                   "%s: the task's samples are %s; this source gives rows of values", uri,
                   c->raw == SL_RAW_IMAGE ? "images (images:DIR)" : "audio clips (wav:DIR)");
    if ((s = calloc(1, sizeof *s)) == NULL)
        return SL_ENOMEM;
    s->c = c;
    if (strncmp(uri, "csv:", 4) == 0) {
        s->k = K_CSV;
        rc = open_csv(s, uri + 4, err, errcap);
    } else if (strncmp(uri, "sqlite:", 7) == 0) {
        s->k = K_SPOOL;
        rc = open_spool(s, uri + 7, err, errcap);
    } else if (strncmp(uri, "npy:", 4) == 0 || strncmp(uri, "npz:", 4) == 0) {
        s->k = K_NPY;
        rc = open_npy(s, uri + 4, uri[2] == 'z', err, errcap);
    } else if (strncmp(uri, "idx:", 4) == 0) {
        s->k = K_IDX;
        rc = open_idx(s, uri + 4, err, errcap);
    } else {
        uri_opts o;
        s->k = strncmp(uri, "wav:", 4) == 0 ? K_WAV : K_IMAGES;
        rc = split_uri(s->k == K_WAV ? "wav:" : "images:", strchr(uri, ':') + 1, "", s->path, &o,
                       err, errcap);
        if (rc == SL_OK && c->label_kind != SL_LABEL_CLASS)
            rc = say(err, errcap, SL_EINVAL, "%s: a folder per class needs a class label", s->path);
        if (rc == SL_OK && s->k == K_IMAGES && c->raw != SL_RAW_IMAGE)
            rc = say(err, errcap, SL_EINVAL,
                     "%s: images need the contract's preprocess.image (width, height, channels)",
                     s->path);
        if (rc == SL_OK && s->k == K_WAV && c->raw != SL_RAW_AUDIO)
            rc = say(err, errcap, SL_EINVAL,
                     "%s: audio needs the contract's preprocess.audio (log-mel features)", s->path);
        if (rc == SL_OK)
            rc = check_folders(s, err, errcap);
        if (rc == SL_OK && s->k == K_WAV && (s->pcm = malloc(c->raw_size * sizeof *s->pcm)) == NULL)
            rc = SL_ENOMEM;
    }
    if (rc == SL_OK && s->k != K_IMAGES && s->k != K_WAV) {
        if ((s->rx = malloc(CHUNK_ROWS * (s->row_vals + c->tdim) * sizeof *s->rx)) == NULL ||
            (s->ry = malloc(CHUNK_ROWS * c->tdim * sizeof *s->ry)) == NULL)
            rc = SL_ENOMEM;
        else if (c->raw == SL_RAW_SERIES &&
                 ((s->ring = malloc(c->window * c->raw_size * sizeof *s->ring)) == NULL ||
                  (s->ring_y = malloc(c->window * c->tdim * sizeof *s->ring_y)) == NULL))
            rc = SL_ENOMEM;
    }
    if (rc != SL_OK) {
        if (rc == SL_ENOMEM)
            say(err, errcap, rc, "out of memory");
        sl_source_close(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

int sl_source_read(sl_source *s, float *x, float *y, size_t max, size_t *n, char *err,
                   size_t errcap)
{
    size_t got = 0;
    int rc;
    if (s == NULL || n == NULL || (max > 0 && (x == NULL || y == NULL)))
        return SL_EINVAL;
    if (s->failed)
        return say(err, errcap, s->why_rc, "%s", s->why);
    if (max == 0) {
        *n = 0;
        return SL_OK;
    }
    if (s->k == K_IMAGES || s->k == K_WAV)
        rc = read_folder(s, x, y, max, &got, s->why, sizeof s->why);
    else
        rc = read_row_samples(s, x, y, max, &got, s->why, sizeof s->why);
    if (rc != SL_OK) {
        s->failed = 1;
        s->why_rc = rc;
        return say(err, errcap, rc, "%s", s->why);
    }
    sl_contract_finish(s->c, x, got);
    /* a finite raw value can overflow the contract's scale or a tiny std: refused like a raw
     * non-finite value, never trained on */
    for (size_t i = 0; i < got * s->c->sample_size; i++) {
        if (!isfinite(x[i])) {
            s->failed = 1;
            s->why_rc = SL_ENONFINITE;
            say(s->why, sizeof s->why, SL_ENONFINITE,
                "%s: sample %llu, value %zu: not finite after the contract's "
                "scale and standardize",
                s->path, (unsigned long long)(s->taken + i / s->c->sample_size + 1),
                i % s->c->sample_size);
            return say(err, errcap, SL_ENONFINITE, "%s", s->why);
        }
    }
    s->taken += got;
    *n = got;
    return SL_OK;
}

void sl_source_close(sl_source *s)
{
    if (s == NULL)
        return;
    sl_csv_close(s->csv);
    sl_spool_close(s->spool);
    sl_npy_close(s->nx);
    sl_npy_close(s->ny);
    if (s->idx_x != NULL)
        gzclose(s->idx_x);
    if (s->idx_y != NULL)
        gzclose(s->idx_y);
    for (size_t i = 0; i < s->nseen; i++)
        free(s->seen[i]);
    free(s->seen);
    free(s->rx);
    free(s->ry);
    free(s->ring);
    free(s->ring_y);
    free(s->pcm);
    free(s);
}
