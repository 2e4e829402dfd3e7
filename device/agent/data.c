/*
 * data.c - a device's share of Fashion-MNIST without holding the split.
 *
 * The labels (60 KB) are read whole, the partition is computed from them,
 * and the image file is streamed once, keeping only the samples of the
 * clients asked for: an agent for one client of 100 holds 600 images
 * (1.9 MB of floats), not 60,000 (188 MB). zlib's gz* reader takes plain
 * and gzip files alike. Headers are checked like device/data's reader:
 * magic and type, dimensions, counts agreeing, exact sizes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "agent_int.h"
#include "starling/csv.h"
#include "starling/data.h"
#include "starling/source.h"

#define IDX_MAX_N    ((uint64_t)1 << 28)
#define IDX_MAX_SIDE 4096u

static int errf(char *err, size_t cap, int rc, const char *fmt, const char *a, const char *b)
{
    if (err != NULL && cap > 0)
        snprintf(err, cap, fmt, a, b);
    return rc;
}

/* "<dir>/<stem>.gz", or without .gz when only that exists. */
static void file_path(const char *dir, const char *stem, char *out, size_t cap)
{
    struct stat st;
    snprintf(out, cap, "%s/%s.gz", dir, stem);
    if (stat(out, &st) != 0) {
        char plain[SL__AGENT_PATH_MAX];
        snprintf(plain, sizeof plain, "%s/%s", dir, stem);
        if (stat(plain, &st) == 0)
            snprintf(out, cap, "%s", plain);
    }
}

static int read_exact(gzFile f, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
        int got = gzread(f, p, chunk);
        if (got <= 0)
            return SL_ETRUNCATED;
        p += got;
        len -= (size_t)got;
    }
    return SL_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Open @path and check an IDX header of @ndims unsigned-byte dimensions. */
static int open_idx(const char *path, unsigned ndims, uint32_t *dims, gzFile *out, char *err,
                    size_t cap)
{
    unsigned char hdr[16];
    gzFile f = gzopen(path, "rb");
    if (f == NULL)
        return errf(err, cap, SL_ENOENT,
                    "%s: cannot open (install dataset-fashion-mnist or pass --data)%s", path, "");
    if (read_exact(f, hdr, 4 + 4 * ndims) != SL_OK) {
        gzclose(f);
        return errf(err, cap, SL_ETRUNCATED, "%s: truncated header%s", path, "");
    }
    if (hdr[0] != 0 || hdr[1] != 0 || hdr[2] != 0x08 || hdr[3] != ndims) {
        gzclose(f);
        return errf(err, cap, SL_EMAGIC, "%s: not an IDX file of unsigned bytes%s", path, "");
    }
    for (unsigned i = 0; i < ndims; i++)
        dims[i] = be32(hdr + 4 + 4 * i);
    *out = f;
    return SL_OK;
}

/* Nothing may follow the declared elements. */
static int at_end(gzFile f)
{
    unsigned char extra;
    return gzread(f, &extra, 1) == 0;
}

static int read_labels(const char *path, int32_t **labels, size_t *n, uint32_t *classes, char *err,
                       size_t cap)
{
    uint32_t dim;
    gzFile f;
    unsigned char *raw;
    int32_t *y;
    uint32_t top = 0;
    int rc = open_idx(path, 1, &dim, &f, err, cap);
    if (rc != SL_OK)
        return rc;
    if (dim == 0 || dim > IDX_MAX_N) {
        gzclose(f);
        return errf(err, cap, SL_ECORRUPT, "%s: bad sample count%s", path, "");
    }
    raw = malloc(dim);
    y = malloc(dim * sizeof *y);
    if (raw == NULL || y == NULL) {
        free(raw);
        free(y);
        gzclose(f);
        return SL_ENOMEM;
    }
    rc = read_exact(f, raw, dim);
    if (rc == SL_OK && !at_end(f))
        rc = SL_ECORRUPT;
    gzclose(f);
    if (rc != SL_OK) {
        free(raw);
        free(y);
        return errf(err, cap, rc, "%s: %s", path,
                    rc == SL_ECORRUPT ? "trailing data" : "truncated");
    }
    for (uint32_t i = 0; i < dim; i++) {
        y[i] = raw[i];
        if (raw[i] > top)
            top = raw[i];
    }
    free(raw);
    *labels = y;
    *n = dim;
    *classes = top + 1;
    return SL_OK;
}

void sl_agent_data_free(sl_agent_data *d)
{
    if (d == NULL)
        return;
    if (d->client_ix != NULL)
        for (uint32_t c = 0; c < d->count; c++)
            free(d->client_ix[c]);
    free(d->client_ix);
    free(d->client_n);
    if (d->eval_ix != NULL)
        for (uint32_t c = 0; c < d->count; c++)
            free(d->eval_ix[c]);
    free(d->eval_ix);
    free(d->eval_n);
    free(d->x);
    free(d->y);
    free(d->t);
    free(d);
}

size_t sl_agent_data_samples(const sl_agent_data *d, uint32_t client)
{
    if (d == NULL || client < d->first || client - d->first >= d->count)
        return 0;
    return d->client_n[client - d->first];
}

int sl_agent_data_sample(const sl_agent_data *d, uint32_t client, size_t i, const float **x,
                         float *y, size_t ycap)
{
    uint32_t k;
    size_t tdim;
    if (x == NULL || y == NULL || i >= sl_agent_data_samples(d, client))
        return SL_EINVAL;
    k = d->client_ix[client - d->first][i];
    tdim = d->t != NULL ? d->tdim : 1;
    if (ycap < tdim)
        return SL_EINVAL;
    *x = d->x + (size_t)k * d->features;
    if (d->t != NULL)
        memcpy(y, d->t + (size_t)k * tdim, tdim * sizeof *y);
    else
        y[0] = (float)d->y[k];
    return SL_OK;
}

/* Stream the images, keeping sample i when keep[i] != UINT32_MAX (its slot). */
static int read_images(const char *path, size_t n, const uint32_t *keep, sl_agent_data *d,
                       char *err, size_t cap)
{
    uint32_t dims[3];
    gzFile f;
    unsigned char *row;
    int rc = open_idx(path, 3, dims, &f, err, cap);
    if (rc != SL_OK)
        return rc;
    if (dims[0] != n || dims[1] == 0 || dims[2] == 0 || dims[1] > IDX_MAX_SIDE ||
        dims[2] > IDX_MAX_SIDE) {
        gzclose(f);
        return errf(err, cap, SL_ECORRUPT, "%s: dimensions disagree with the labels%s", path, "");
    }
    d->features = (size_t)dims[1] * dims[2];
    d->x = malloc((d->n ? d->n : 1) * d->features * sizeof *d->x);
    row = malloc(d->features);
    if (d->x == NULL || row == NULL) {
        free(row);
        gzclose(f);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < n && rc == SL_OK; i++) {
        rc = read_exact(f, row, d->features);
        if (rc == SL_OK && keep[i] != UINT32_MAX) {
            float *dst = d->x + (size_t)keep[i] * d->features;
            for (size_t j = 0; j < d->features; j++)
                dst[j] = ((float)row[j] / 255.0f - SL_DATA_FASHION_MEAN) / SL_DATA_FASHION_STD;
        }
    }
    if (rc == SL_OK && !at_end(f))
        rc = SL_ECORRUPT;
    free(row);
    gzclose(f);
    if (rc != SL_OK)
        return errf(err, cap, rc, "%s: %s", path,
                    rc == SL_ECORRUPT ? "trailing data" : "truncated");
    return SL_OK;
}

static const char *data_dir(const char *dir)
{
    if (dir != NULL && dir[0] != '\0')
        return dir;
    dir = getenv("STARLING_FASHION_MNIST_DIR");
    return dir != NULL && dir[0] != '\0' ? dir : SL_DATA_FASHION_MNIST_DIR;
}

static int load_split(const char *dir, const char *prefix, const char *spec, uint32_t of,
                      uint32_t first, uint32_t count, uint64_t seed, sl_agent_data **out, char *err,
                      size_t cap)
{
    char images[SL__AGENT_PATH_MAX], labels[SL__AGENT_PATH_MAX], stem[64];
    int32_t *y_all = NULL;
    uint32_t *keep = NULL, classes = 0;
    sl_partition *part = NULL;
    sl_agent_data *d = NULL;
    size_t n = 0, kept = 0;
    int rc;

    if (out == NULL || of == 0 || count == 0 || first >= of || count > of - first ||
        (spec == NULL && of != 1))
        return errf(err, cap, SL_EINVAL, "bad client range (or --of without --partition)%s%s", "",
                    "");
    dir = data_dir(dir);
    snprintf(stem, sizeof stem, "%s-images-idx3-ubyte", prefix);
    file_path(dir, stem, images, sizeof images);
    snprintf(stem, sizeof stem, "%s-labels-idx1-ubyte", prefix);
    file_path(dir, stem, labels, sizeof labels);
    rc = read_labels(labels, &y_all, &n, &classes, err, cap);
    if (rc != SL_OK)
        return rc;
    d = calloc(1, sizeof *d);
    keep = malloc(n * sizeof *keep);
    if (d == NULL || keep == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    d->first = first;
    d->count = count;
    d->client_n = calloc(count, sizeof *d->client_n);
    d->client_ix = calloc(count, sizeof *d->client_ix);
    if (d->client_n == NULL || d->client_ix == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    if (spec != NULL) {
        char perr[256];
        rc = sl_partition_create(y_all, n, classes, spec, of, seed, &part, perr, sizeof perr);
        if (rc != SL_OK) {
            errf(err, cap, rc, "partition %s: %s", spec, perr);
            goto fail;
        }
    }
    /* slots in sample order, so the kept copy reads the file front to back */
    for (size_t i = 0; i < n; i++)
        keep[i] = UINT32_MAX;
    for (uint32_t c = 0; c < count; c++) {
        size_t m = part ? part->count[first + c] : n;
        for (size_t j = 0; j < m; j++)
            keep[part ? part->idx[first + c][j] : j] = 0;
    }
    for (size_t i = 0; i < n; i++)
        if (keep[i] != UINT32_MAX)
            keep[i] = (uint32_t)kept++;
    d->n = kept;
    d->y = malloc((kept ? kept : 1) * sizeof *d->y);
    if (d->y == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        if (keep[i] != UINT32_MAX)
            d->y[keep[i]] = y_all[i];
    for (uint32_t c = 0; c < count; c++) {
        size_t m = part ? part->count[first + c] : n;
        d->client_n[c] = m;
        d->client_ix[c] = malloc((m ? m : 1) * sizeof **d->client_ix);
        if (d->client_ix[c] == NULL) {
            rc = SL_ENOMEM;
            goto fail;
        }
        for (size_t j = 0; j < m; j++)
            d->client_ix[c][j] = keep[part ? part->idx[first + c][j] : j];
    }
    sl_partition_free(part);
    part = NULL;
    free(y_all);
    y_all = NULL;
    rc = read_images(images, n, keep, d, err, cap);
    if (rc != SL_OK)
        goto fail;
    free(keep);
    *out = d;
    return SL_OK;
fail:
    if (rc == SL_ENOMEM)
        errf(err, cap, rc, "out of memory%s%s", "", "");
    sl_partition_free(part);
    free(y_all);
    free(keep);
    sl_agent_data_free(d);
    return rc;
}

int sl_agent_data_load(const char *dir, const char *spec, uint32_t of, uint32_t first,
                       uint32_t count, uint64_t seed, sl_agent_data **out, char *err, size_t errcap)
{
    return load_split(dir, "train", spec, of, first, count, seed, out, err, errcap);
}

int sl_agent_data_load_test(const char *dir, sl_agent_data **out, char *err, size_t errcap)
{
    return load_split(dir, "t10k", NULL, 1, 0, 1, 0, out, err, errcap);
}

/* ---- csv: sources ------------------------------------------------------------------------ */

/* A whole decimal number in [lo, hi] into *@out: 1, else 0. */
static int count_of(const char *text, long lo, long hi, size_t *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
        return 0;
    *out = (size_t)v;
    return 1;
}

/* "csv:PATH?label=NAME&kind=class|target&classes=N&delimiter=,|tab|;|space&skip=N&timestamp=C"
 * parsed into @o (the strings point into @buf, a copy of the query). */
static int csv_uri(const char *uri, char *path, size_t pcap, char *buf, size_t bcap,
                   sl_csv_options *o, char *err, size_t cap)
{
    const char *q = strchr(uri, '?');
    size_t plen = q ? (size_t)(q - uri) : strlen(uri);
    char *save = NULL;
    sl_csv_options_init(o);
    if (plen == 0 || plen >= pcap || (q && strlen(q + 1) >= bcap))
        return errf(err, cap, SL_EINVAL, "csv:%s%s: a file name, then ?label=COLUMN", uri, "");
    memcpy(path, uri, plen);
    path[plen] = '\0';
    snprintf(buf, bcap, "%s", q ? q + 1 : "");
    for (char *kv = strtok_r(buf, "&", &save); kv != NULL; kv = strtok_r(NULL, "&", &save)) {
        char *v = strchr(kv, '=');
        if (v == NULL)
            return errf(err, cap, SL_EINVAL, "csv: \"%s\" is not key=value%s", kv, "");
        *v++ = '\0';
        if (strcmp(kv, "label") == 0) {
            o->label = v;
        } else if (strcmp(kv, "kind") == 0 && strcmp(v, "class") == 0) {
            o->label_kind = SL_CSV_CLASS;
        } else if (strcmp(kv, "kind") == 0 && strcmp(v, "target") == 0) {
            o->label_kind = SL_CSV_TARGET;
        } else if (strcmp(kv, "classes") == 0 && count_of(v, 1, 1 << 20, &o->classes)) {
            continue;
        } else if (strcmp(kv, "skip") == 0 && count_of(v, 0, 1 << 20, &o->skip_lines)) {
            continue;
        } else if (strcmp(kv, "timestamp") == 0) {
            o->timestamp = v;
        } else if (strcmp(kv, "delimiter") == 0 &&
                   (strcmp(v, ",") == 0 || strcmp(v, ";") == 0 || strcmp(v, "tab") == 0 ||
                    strcmp(v, "space") == 0)) {
            o->delimiter = v[0] == 't' ? '\t' : v[0] == 's' ? ' ' : v[0];
        } else {
            return errf(err, cap, SL_EINVAL,
                        "csv: unknown or bad option \"%s=%s\" (label, kind=class|target, "
                        "classes, skip, timestamp, delimiter=,|;|tab|space)",
                        kv, v);
        }
    }
    if (o->label == NULL)
        return errf(err, cap, SL_EINVAL, "csv:%s%s: ?label=COLUMN names the label column", path,
                    "");
    if (o->label_kind == SL_CSV_CLASS && o->classes == 0)
        return errf(err, cap, SL_EINVAL, "csv:%s%s: class labels need &classes=N", path, "");
    return SL_OK;
}

/*
 * The clients @first .. @first + @count - 1 of @d's n samples split among @of by @spec (NULL:
 * one client with everything), the partition skewed by @labels (@classes classes). With
 * @held (NULL: none), each client's held-out samples go to its eval list instead.
 */
static int split_clients(sl_agent_data *d, const int32_t *labels, uint32_t classes,
                         const unsigned char *held, const char *spec, uint32_t of, uint32_t first,
                         uint32_t count, uint64_t seed, char *err, size_t cap)
{
    sl_partition *part = NULL;
    char why[256];
    int rc = SL_OK;
    d->first = first;
    d->count = count;
    d->client_n = calloc(count, sizeof *d->client_n);
    d->client_ix = calloc(count, sizeof *d->client_ix);
    if (held != NULL) {
        d->eval_n = calloc(count, sizeof *d->eval_n);
        d->eval_ix = calloc(count, sizeof *d->eval_ix);
    }
    if (d->client_n == NULL || d->client_ix == NULL ||
        (held != NULL && (d->eval_n == NULL || d->eval_ix == NULL)))
        return SL_ENOMEM;
    if (spec != NULL) {
        rc = sl_partition_create(labels, d->n, classes, spec, of, seed, &part, why, sizeof why);
        if (rc != SL_OK)
            return errf(err, cap, rc, "partition %s: %s", spec, why);
    }
    for (uint32_t k = 0; k < count && rc == SL_OK; k++) {
        size_t m = part ? part->count[first + k] : d->n, t = 0, e = 0;
        d->client_ix[k] = malloc((m ? m : 1) * sizeof **d->client_ix);
        if (held != NULL)
            d->eval_ix[k] = malloc((m ? m : 1) * sizeof **d->eval_ix);
        if (d->client_ix[k] == NULL || (held != NULL && d->eval_ix[k] == NULL)) {
            rc = SL_ENOMEM;
            break;
        }
        for (size_t j = 0; j < m; j++) {
            uint32_t i = part ? part->idx[first + k][j] : (uint32_t)j;
            if (held != NULL && held[i])
                d->eval_ix[k][e++] = i;
            else
                d->client_ix[k][t++] = i;
        }
        d->client_n[k] = t;
        if (held != NULL)
            d->eval_n[k] = e;
    }
    sl_partition_free(part);
    return rc;
}

/* Every row of the CSV file (whole rows only), split among the clients like the IDX split. */
static int load_csv(const char *uri, const char *spec, uint32_t of, uint32_t first, uint32_t count,
                    uint64_t seed, sl_agent_data **out, char *err, size_t cap)
{
    char path[SL__AGENT_PATH_MAX], buf[1024], why[512];
    sl_csv_options o;
    sl_csv *c = NULL;
    sl_agent_data *d = NULL;
    float *xs = NULL, *ys = NULL;
    int32_t *labels = NULL;
    size_t n = 0, capn = 0, f, got;
    int rc = csv_uri(uri, path, sizeof path, buf, sizeof buf, &o, err, cap);
    if (rc != SL_OK)
        return rc;
    if (of == 0 || count == 0 || first >= of || count > of - first || (spec == NULL && of != 1))
        return errf(err, cap, SL_EINVAL, "bad client range (or --of without --partition)%s%s", "",
                    "");
    rc = sl_csv_open(path, &o, &c, why, sizeof why);
    if (rc != SL_OK)
        return errf(err, cap, rc, "no usable data: %s%s", why, "");
    f = sl_csv_features(c);
    do {
        if (n == capn) {
            size_t nc = capn ? capn * 2 : 1024;
            float *nx = realloc(xs, nc * f * sizeof *xs), *ny;
            if (nx != NULL)
                xs = nx;
            ny = nx ? realloc(ys, nc * sizeof *ys) : NULL;
            if (nx == NULL || ny == NULL) {
                rc = SL_ENOMEM;
                break;
            }
            ys = ny;
            capn = nc;
        }
        rc = sl_csv_read(c, xs + n * f, ys + n, capn - n, &got, why, sizeof why);
        if (rc != SL_OK) {
            errf(err, cap, rc, "no usable data: %s%s", why, "");
            break;
        }
        n += got;
    } while (got > 0);
    sl_csv_close(c);
    if (rc == SL_OK && n < of)
        rc = errf(err, cap, SL_EINVAL, "no usable data: %s holds %s rows for the clients", path,
                  n == 0 ? "no" : "fewer");
    if (rc != SL_OK)
        goto fail;
    d = calloc(1, sizeof *d);
    labels = malloc(n * sizeof *labels);
    if (d == NULL || labels == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        labels[i] = o.label_kind == SL_CSV_CLASS ? (int32_t)ys[i] : 0;
    d->n = n;
    d->features = f;
    d->x = xs;
    xs = NULL;
    if (o.label_kind == SL_CSV_CLASS) {
        d->y = labels;
        labels = NULL;
        free(ys);
    } else {
        d->t = ys;
        d->tdim = 1;
    }
    ys = NULL;
    /* a regression target has no classes to skew: every row counts as one class */
    rc = split_clients(d, d->y ? d->y : labels,
                       o.label_kind == SL_CSV_CLASS ? (uint32_t)o.classes : 1, NULL, spec, of,
                       first, count, seed, err, cap);
    if (rc != SL_OK)
        goto fail;
    free(labels);
    *out = d;
    return SL_OK;
fail:
    if (rc == SL_ENOMEM)
        errf(err, cap, rc, "out of memory%s%s", "", "");
    free(labels);
    free(xs);
    free(ys);
    sl_agent_data_free(d);
    return rc;
}

int sl_agent_data_load_source(const char *source, const char *spec, uint32_t of, uint32_t first,
                              uint32_t count, uint64_t seed, sl_agent_data **out, char *err,
                              size_t errcap)
{
    if (source != NULL && strncmp(source, "csv:", 4) == 0)
        return load_csv(source + 4, spec, of, first, count, seed, out, err, errcap);
    if (source != NULL && strncmp(source, "idx:", 4) == 0)
        source += 4;
    return load_split(source, "train", spec, of, first, count, seed, out, err, errcap);
}

int sl_agent_data_load_contract(const char *source, const sl_contract *c, const char *spec,
                                uint32_t of, uint32_t first, uint32_t count, uint64_t seed,
                                sl_agent_data **out, char *err, size_t errcap)
{
    char why[512];
    sl_source *src = NULL;
    sl_agent_data *d = NULL;
    float *xs = NULL, *ys = NULL;
    int32_t *labels = NULL;
    unsigned char *held = NULL;
    size_t n = 0, capn = 0, got = 0, ss, td;
    int rc;
    if (source == NULL || c == NULL || out == NULL || of == 0 || count == 0 || first >= of ||
        count > of - first || (spec == NULL && of != 1))
        return errf(err, errcap, SL_EINVAL, "bad client range (or --of without --partition)%s%s",
                    "", "");
    ss = c->sample_size;
    td = c->tdim;
    rc = sl_source_open(source, c, &src, why, sizeof why);
    if (rc != SL_OK)
        return errf(err, errcap, rc, "no usable data: %s%s", why, "");
    do {
        if (n == capn) {
            size_t nc = capn ? capn * 2 : 1024;
            float *nx = realloc(xs, nc * ss * sizeof *xs), *ny;
            if (nx != NULL)
                xs = nx;
            ny = nx ? realloc(ys, nc * td * sizeof *ys) : NULL;
            if (nx == NULL || ny == NULL) {
                rc = SL_ENOMEM;
                break;
            }
            ys = ny;
            capn = nc;
        }
        rc = sl_source_read(src, xs + n * ss, ys + n * td, capn - n, &got, why, sizeof why);
        if (rc != SL_OK)
            errf(err, errcap, rc, "no usable data: %s%s", why, "");
        else
            n += got;
    } while (rc == SL_OK && got > 0);
    sl_source_close(src);
    if (rc == SL_OK && n < of)
        rc = errf(err, errcap, SL_EINVAL, "no usable data: %s holds %s samples for the clients",
                  source, n == 0 ? "no" : "fewer");
    if (rc != SL_OK)
        goto fail;
    d = calloc(1, sizeof *d);
    labels = malloc(n * sizeof *labels);
    held = malloc(n);
    if (d == NULL || labels == NULL || held == NULL) {
        rc = SL_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        labels[i] = c->label_kind == SL_LABEL_CLASS ? (int32_t)ys[i * td] : 0;
        held[i] = (unsigned char)sl_contract_heldout(c, xs + i * ss, ys + i * td);
    }
    d->n = n;
    d->features = ss;
    d->x = xs;
    xs = NULL;
    d->contract = c;
    if (c->label_kind == SL_LABEL_CLASS) {
        d->y = labels;
        labels = NULL;
        free(ys);
    } else {
        d->t = ys;
        d->tdim = td;
    }
    ys = NULL;
    rc = split_clients(d, d->y ? d->y : labels,
                       c->label_kind == SL_LABEL_CLASS ? (uint32_t)c->nclasses : 1,
                       c->eval_share > 0 ? held : NULL, spec, of, first, count, seed, err, errcap);
    if (rc != SL_OK)
        goto fail;
    free(labels);
    free(held);
    *out = d;
    return SL_OK;
fail:
    if (rc == SL_ENOMEM)
        errf(err, errcap, rc, "out of memory%s%s", "", "");
    free(labels);
    free(held);
    free(xs);
    free(ys);
    sl_agent_data_free(d);
    return rc;
}
