/*
 * contract.c - a task's data contract (DATA_CONTRACT.md): parse the JSON,
 * check every member, and derive the sizes a source and a model agree on.
 *
 * The document is untrusted (an operator's task file, a coordinator's
 * answer): unknown members are refused (a misspelt "standardise" must not
 * silently train on raw values), every count is bounded before it is used,
 * and a refusal names the JSON path of the first problem and leaves nothing
 * allocated.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "starling/contract.h"

typedef struct parser {
    sl_contract *c;
    char *err;
    size_t errcap;
} parser;

static int fail(parser *ps, const char *path, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->err != NULL && ps->errcap > 0)
        snprintf(ps->err, ps->errcap, "%s: %s", path, msg);
    return SL_EINVAL;
}

/*
 * Every member of @obj is one of @keys (NULL-terminated), once: cJSON keeps
 * both of a repeated name and finds the first, where another reader of the
 * same document may take the last.
 */
static int only_keys(parser *ps, const cJSON *obj, const char *path, const char *const *keys)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, obj)
    {
        size_t i = 0;
        while (keys[i] != NULL && strcmp(keys[i], it->string) != 0)
            i++;
        if (keys[i] == NULL)
            return fail(ps, path, "unknown member \"%s\"", it->string);
        for (const cJSON *before = obj->child; before != it; before = before->next)
            if (strcmp(before->string, it->string) == 0)
                return fail(ps, path, "member \"%s\" given twice", it->string);
    }
    return SL_OK;
}

static const cJSON *member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* An optional object member: NULL when absent, SL_EINVAL when not an object. */
static int object_of(parser *ps, const cJSON *obj, const char *key, const char *path,
                     const cJSON **out)
{
    const cJSON *v = member(obj, key);
    *out = NULL;
    if (v == NULL)
        return SL_OK;
    if (!cJSON_IsObject(v))
        return fail(ps, path, "must be an object");
    *out = v;
    return SL_OK;
}

/* An integer member in [lo, hi]; @def when absent (a required member has def < 0). */
static int int_of(parser *ps, const cJSON *obj, const char *key, const char *path, double lo,
                  double hi, long def, size_t *out)
{
    const cJSON *v = member(obj, key);
    if (v == NULL) {
        if (def < 0)
            return fail(ps, path, "is required");
        *out = (size_t)def;
        return SL_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return fail(ps, path, "must be a whole number in [%.0f, %.0f]", lo, hi);
    *out = (size_t)v->valuedouble;
    return SL_OK;
}

static int num_of(parser *ps, const cJSON *obj, const char *key, const char *path, double lo,
                  double hi, double def, double *out)
{
    const cJSON *v = member(obj, key);
    if (v == NULL) {
        *out = def;
        return SL_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return fail(ps, path, "must be a number in [%g, %g]", lo, hi);
    *out = v->valuedouble;
    return SL_OK;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * @n names sorted into a new array (NULL: out of memory). Names are compared
 * sorted, not pairwise: up to SL_CONTRACT_MAX_NAMES of them, pairs would take
 * seconds on a device.
 */
static char **sorted_names(char *const *names, size_t n)
{
    char **sorted = malloc(n * sizeof *sorted);
    if (sorted != NULL) {
        memcpy(sorted, names, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_name);
    }
    return sorted;
}

/* A non-empty array of distinct, non-empty strings into *@out (owned by the contract). */
static int names_of(parser *ps, const cJSON *v, const char *path, char ***out, size_t *n)
{
    int count, i = 0, rc = SL_OK;
    const cJSON *it;
    char **names, **sorted;
    if (!cJSON_IsArray(v) || (count = cJSON_GetArraySize(v)) < 1 ||
        (unsigned)count > SL_CONTRACT_MAX_NAMES)
        return fail(ps, path, "must be an array of 1 to %u names", SL_CONTRACT_MAX_NAMES);
    names = calloc((size_t)count, sizeof *names);
    if (names == NULL)
        return SL_ENOMEM;
    *out = names; /* freed with the contract, even half filled */
    *n = (size_t)count;
    cJSON_ArrayForEach(it, v)
    {
        if (!cJSON_IsString(it) || it->valuestring[0] == '\0' || strlen(it->valuestring) > 256)
            return fail(ps, path, "entry %d must be a non-empty name of at most 256 bytes", i);
        names[i] = strdup(it->valuestring);
        if (names[i] == NULL)
            return SL_ENOMEM;
        i++;
    }
    if ((sorted = sorted_names(names, (size_t)count)) == NULL)
        return SL_ENOMEM;
    for (i = 1; i < count && rc == SL_OK; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            rc = fail(ps, path, "\"%s\" is named twice", sorted[i]);
    free(sorted);
    return rc;
}

/* "column": "y" or "columns": [...] of the label. */
static int label_columns(parser *ps, const cJSON *label)
{
    sl_contract *c = ps->c;
    const cJSON *one = member(label, "column"), *many = member(label, "columns");
    if (one != NULL && many != NULL)
        return fail(ps, "label", "has \"column\" and \"columns\": name one or the other");
    if (one != NULL) {
        if (!cJSON_IsString(one) || one->valuestring[0] == '\0')
            return fail(ps, "label.column", "must be a non-empty column name");
        c->label_columns = calloc(1, sizeof *c->label_columns);
        if (c->label_columns == NULL || (c->label_columns[0] = strdup(one->valuestring)) == NULL)
            return SL_ENOMEM;
        c->nlabel_columns = 1;
    } else if (many != NULL) {
        int rc = names_of(ps, many, "label.columns", &c->label_columns, &c->nlabel_columns);
        if (rc != SL_OK)
            return rc;
    }
    if (c->nlabel_columns > 0 && c->nfeatures > 0) {
        char **features = sorted_names(c->features, c->nfeatures);
        int rc = SL_OK;
        if (features == NULL)
            return SL_ENOMEM;
        for (size_t i = 0; i < c->nlabel_columns && rc == SL_OK; i++)
            if (bsearch(&c->label_columns[i], features, c->nfeatures, sizeof *features, cmp_name) !=
                NULL)
                rc = fail(ps, "label", "\"%s\" is a feature and a label column",
                          c->label_columns[i]);
        free(features);
        return rc;
    }
    return SL_OK;
}

static int parse_label(parser *ps, const cJSON *root)
{
    sl_contract *c = ps->c;
    const cJSON *label = member(root, "label"), *kind, *classes;
    static const char *const keys[] = {"kind", "classes", "column", "columns", "dim", NULL};
    int rc;
    if (label == NULL || !cJSON_IsObject(label))
        return fail(ps, "label", "is required: an object with \"kind\"");
    if ((rc = only_keys(ps, label, "label", keys)) != SL_OK)
        return rc;
    kind = member(label, "kind");
    if (!cJSON_IsString(kind))
        return fail(ps, "label.kind", "must be \"class\", \"multilabel\" or \"target\"");
    if (strcmp(kind->valuestring, "class") == 0)
        c->label_kind = SL_LABEL_CLASS;
    else if (strcmp(kind->valuestring, "multilabel") == 0)
        c->label_kind = SL_LABEL_MULTILABEL;
    else if (strcmp(kind->valuestring, "target") == 0)
        c->label_kind = SL_LABEL_TARGET;
    else
        return fail(ps, "label.kind", "\"%s\" is not \"class\", \"multilabel\" or \"target\"",
                    kind->valuestring);
    if ((rc = label_columns(ps, label)) != SL_OK)
        return rc;
    classes = member(label, "classes");
    if (c->label_kind == SL_LABEL_TARGET) {
        if (classes != NULL)
            return fail(ps, "label.classes", "a regression target has no classes");
        if ((rc = int_of(ps, label, "dim", "label.dim", 1, SL_CONTRACT_MAX_NAMES,
                         c->nlabel_columns ? (long)c->nlabel_columns : 1, &c->tdim)) != SL_OK)
            return rc;
        if (c->nlabel_columns > 0 && c->tdim != c->nlabel_columns)
            return fail(ps, "label.dim", "is %zu; the label has %zu columns", c->tdim,
                        c->nlabel_columns);
        return SL_OK;
    }
    if (member(label, "dim") != NULL)
        return fail(ps, "label.dim", "only a regression target has a dimension");
    if (classes == NULL)
        return fail(ps, "label.classes", "is required: the class names in index order");
    if (cJSON_IsNumber(classes)) { /* unnamed classes: "0", "1", ... */
        size_t n = 0;
        if ((rc = int_of(ps, label, "classes", "label.classes", 1, SL_CONTRACT_MAX_NAMES, -1,
                         &n)) != SL_OK)
            return rc;
        c->classes = calloc(n, sizeof *c->classes);
        if (c->classes == NULL)
            return SL_ENOMEM;
        c->nclasses = n;
        for (size_t i = 0; i < n; i++) {
            char name[24];
            snprintf(name, sizeof name, "%zu", i);
            if ((c->classes[i] = strdup(name)) == NULL)
                return SL_ENOMEM;
        }
    } else if ((rc = names_of(ps, classes, "label.classes", &c->classes, &c->nclasses)) != SL_OK) {
        return rc;
    }
    if (c->label_kind == SL_LABEL_CLASS && c->nclasses < 2)
        return fail(ps, "label.classes", "a class label needs at least 2 classes");
    if (c->label_kind == SL_LABEL_CLASS && c->nlabel_columns > 1)
        return fail(ps, "label.columns", "a class label is one column");
    if (c->label_kind == SL_LABEL_MULTILABEL && c->nlabel_columns > 0 &&
        c->nlabel_columns != c->nclasses)
        return fail(ps, "label.columns",
                    "a multi-label task has a 0/1 column per class: %zu "
                    "columns for %zu classes",
                    c->nlabel_columns, c->nclasses);
    c->tdim = c->label_kind == SL_LABEL_CLASS ? 1 : c->nclasses;
    return SL_OK;
}

static int parse_input(parser *ps, const cJSON *root)
{
    sl_contract *c = ps->c;
    const cJSON *input = member(root, "input"), *shape, *it;
    static const char *const keys[] = {"features", "shape", "dtype", NULL};
    static const char *const dtypes[] = {"float32", "float64", "uint8", "int64"};
    const cJSON *dtype;
    int rc, i = 0;
    if (input == NULL || !cJSON_IsObject(input))
        return fail(ps, "input", "is required: an object with \"features\" or \"shape\"");
    if ((rc = only_keys(ps, input, "input", keys)) != SL_OK)
        return rc;
    c->dtype = SL_DTYPE_ANY;
    if ((dtype = member(input, "dtype")) != NULL) {
        for (size_t k = 0; cJSON_IsString(dtype) && k < 4 && c->dtype == SL_DTYPE_ANY; k++)
            if (strcmp(dtype->valuestring, dtypes[k]) == 0)
                c->dtype = (sl_contract_dtype)(k + 1);
        if (c->dtype == SL_DTYPE_ANY)
            return fail(ps, "input.dtype",
                        "must be \"float32\", \"float64\", \"uint8\" or \"int64\"");
    }
    if (member(input, "features") != NULL &&
        (rc = names_of(ps, member(input, "features"), "input.features", &c->features,
                       &c->nfeatures)) != SL_OK)
        return rc;
    shape = member(input, "shape");
    if (shape == NULL)
        return SL_OK; /* derived from the preprocessing or the features */
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) < 1 || cJSON_GetArraySize(shape) > 4)
        return fail(ps, "input.shape", "must be an array of 1 to 4 sizes");
    c->ndim = (size_t)cJSON_GetArraySize(shape);
    cJSON_ArrayForEach(it, shape)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
            it->valuedouble < 1 || it->valuedouble > (double)SL_CONTRACT_MAX_SAMPLE)
            return fail(ps, "input.shape", "entry %d must be a whole number in [1, %zu]", i,
                        SL_CONTRACT_MAX_SAMPLE);
        c->shape[i++] = (size_t)it->valuedouble;
    }
    return SL_OK;
}

/* One finite number (above 0 when @positive) into @out, else SL_EINVAL naming entry @i. */
static int float_at(parser *ps, const cJSON *it, const char *path, int i, int positive, float *out)
{
    /* above 0 as stored: 1e-50 is a double above 0 and a float of 0 */
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || fabs(it->valuedouble) > 3.0e38 ||
        (positive && !((float)it->valuedouble > 0)))
        return fail(ps, path, "entry %d must be a finite number%s", i, positive ? " above 0" : "");
    *out = (float)it->valuedouble;
    return SL_OK;
}

/* A number, or a non-empty array of numbers, into @out (n entries; 1 for a number). */
static int floats_of(parser *ps, const cJSON *v, const char *path, int positive, float **out,
                     size_t *n)
{
    int count = 1, i = 0, rc;
    const cJSON *it;
    if (!cJSON_IsNumber(v) && (!cJSON_IsArray(v) || (count = cJSON_GetArraySize(v)) < 1 ||
                               (size_t)count > SL_CONTRACT_MAX_SAMPLE))
        return fail(ps, path, "must be a number or a non-empty array of numbers");
    *out = malloc((size_t)count * sizeof **out);
    if (*out == NULL)
        return SL_ENOMEM;
    *n = (size_t)count;
    if (cJSON_IsNumber(v))
        return float_at(ps, v, path, 0, positive, *out);
    cJSON_ArrayForEach(it, v)
    {
        if ((rc = float_at(ps, it, path, i, positive, *out + i)) != SL_OK)
            return rc;
        i++;
    }
    return SL_OK;
}

static int parse_image(parser *ps, const cJSON *img)
{
    sl_contract *c = ps->c;
    static const char *const keys[] = {"width", "height", "channels", NULL};
    size_t w = 0, h = 0, ch = 0;
    int rc;
    if ((rc = only_keys(ps, img, "preprocess.image", keys)) != SL_OK ||
        (rc = int_of(ps, img, "width", "preprocess.image.width", 1, 4096, -1, &w)) != SL_OK ||
        (rc = int_of(ps, img, "height", "preprocess.image.height", 1, 4096, -1, &h)) != SL_OK ||
        (rc = int_of(ps, img, "channels", "preprocess.image.channels", 1, 3, 1, &ch)) != SL_OK)
        return rc;
    if (ch == 2)
        return fail(ps, "preprocess.image.channels", "must be 1 (grayscale) or 3 (RGB)");
    c->raw = SL_RAW_IMAGE;
    c->image_width = (unsigned)w;
    c->image_height = (unsigned)h;
    c->image_channels = (unsigned)ch;
    c->raw_size = ch * h * w;
    return SL_OK;
}

static int parse_audio(parser *ps, const cJSON *a)
{
    sl_contract *c = ps->c;
    static const char *const keys[] = {"sample_rate", "n_fft", "hop",  "n_mels",
                                       "frames",      "fmin",  "fmax", NULL};
    size_t rate = 0, fft = 0, hop = 0, mels = 0, frames = 0;
    double fmin, fmax;
    int rc;
    if ((rc = only_keys(ps, a, "preprocess.audio", keys)) != SL_OK ||
        (rc = int_of(ps, a, "sample_rate", "preprocess.audio.sample_rate", 8000, 48000, 16000,
                     &rate)) != SL_OK ||
        (rc = int_of(ps, a, "n_fft", "preprocess.audio.n_fft", 64, 4096, 512, &fft)) != SL_OK ||
        (rc = int_of(ps, a, "hop", "preprocess.audio.hop", 1, 4096, 160, &hop)) != SL_OK ||
        (rc = int_of(ps, a, "n_mels", "preprocess.audio.n_mels", 1, 256, 40, &mels)) != SL_OK ||
        (rc = int_of(ps, a, "frames", "preprocess.audio.frames", 1, 4096, -1, &frames)) != SL_OK ||
        (rc = num_of(ps, a, "fmin", "preprocess.audio.fmin", 0, 24000, 0, &fmin)) != SL_OK ||
        (rc = num_of(ps, a, "fmax", "preprocess.audio.fmax", 0, 24000, (double)rate / 2, &fmax)) !=
            SL_OK)
        return rc;
    if ((fft & (fft - 1)) != 0)
        return fail(ps, "preprocess.audio.n_fft", "must be a power of two (%zu)", fft);
    if (mels > fft / 2 + 1)
        return fail(ps, "preprocess.audio.n_mels", "%zu mel bands need n_fft >= %zu", mels,
                    2 * (mels - 1));
    /* compared as stored: 7999.9999999 and 8000 are one float, and sl_logmel wants fmin < fmax */
    if (!((float)fmin < (float)fmax) || fmax > (double)rate / 2)
        return fail(ps, "preprocess.audio", "needs 0 <= fmin < fmax <= sample_rate / 2");
    c->raw = SL_RAW_AUDIO;
    c->sample_rate = (unsigned)rate;
    c->n_fft = (unsigned)fft;
    c->hop = (unsigned)hop;
    c->n_mels = (unsigned)mels;
    c->frames = (unsigned)frames;
    c->fmin = (float)fmin;
    c->fmax = (float)fmax;
    c->raw_size = (frames - 1) * hop + fft; /* samples of a clip */
    return SL_OK;
}

static int parse_window(parser *ps, const cJSON *w)
{
    sl_contract *c = ps->c;
    static const char *const keys[] = {"size", "stride", "label", NULL};
    const cJSON *rule = member(w, "label");
    int rc;
    if ((rc = only_keys(ps, w, "preprocess.window", keys)) != SL_OK ||
        (rc = int_of(ps, w, "size", "preprocess.window.size", 2, 1 << 16, -1, &c->window)) !=
            SL_OK ||
        (rc = int_of(ps, w, "stride", "preprocess.window.stride", 1, 1 << 16, (long)c->window,
                     &c->stride)) != SL_OK)
        return rc;
    if (c->nfeatures == 0)
        return fail(ps, "preprocess.window",
                    "windows a series of rows: input.features names "
                    "the columns of a row");
    c->window_rule = c->label_kind == SL_LABEL_TARGET ? SL_WINDOW_MEAN : SL_WINDOW_LAST;
    if (rule != NULL) {
        if (!cJSON_IsString(rule))
            return fail(ps, "preprocess.window.label",
                        "must be \"last\", \"majority\" or "
                        "\"mean\"");
        if (strcmp(rule->valuestring, "last") == 0)
            c->window_rule = SL_WINDOW_LAST;
        else if (strcmp(rule->valuestring, "majority") == 0 && c->label_kind == SL_LABEL_CLASS)
            c->window_rule = SL_WINDOW_MAJORITY;
        else if (strcmp(rule->valuestring, "mean") == 0 && c->label_kind == SL_LABEL_TARGET)
            c->window_rule = SL_WINDOW_MEAN;
        else
            return fail(ps, "preprocess.window.label",
                        "\"%s\" does not fit the label: \"last\", \"majority\" (classes) or "
                        "\"mean\" (targets)",
                        rule->valuestring);
    }
    c->raw = SL_RAW_SERIES;
    c->raw_size = c->nfeatures;
    return SL_OK;
}

static int parse_preprocess(parser *ps, const cJSON *root)
{
    sl_contract *c = ps->c;
    const cJSON *pp, *img, *audio, *win, *scale, *st;
    static const char *const keys[] = {"image", "audio", "window", "scale", "standardize", NULL};
    int rc = object_of(ps, root, "preprocess", "preprocess", &pp);
    c->scale = 1.0f;
    c->raw = SL_RAW_VALUES;
    if (rc != SL_OK || pp == NULL)
        return rc;
    if ((rc = only_keys(ps, pp, "preprocess", keys)) != SL_OK ||
        (rc = object_of(ps, pp, "image", "preprocess.image", &img)) != SL_OK ||
        (rc = object_of(ps, pp, "audio", "preprocess.audio", &audio)) != SL_OK ||
        (rc = object_of(ps, pp, "window", "preprocess.window", &win)) != SL_OK ||
        (rc = object_of(ps, pp, "scale", "preprocess.scale", &scale)) != SL_OK ||
        (rc = object_of(ps, pp, "standardize", "preprocess.standardize", &st)) != SL_OK)
        return rc;
    if ((img != NULL) + (audio != NULL) + (win != NULL) > 1)
        return fail(ps, "preprocess",
                    "image, audio and window are different kinds of sample: "
                    "name one");
    if ((img != NULL && c->nfeatures > 0) || (audio != NULL && c->nfeatures > 0))
        return fail(ps, "input.features", "an image or audio sample has no named features");
    if ((img != NULL && (rc = parse_image(ps, img)) != SL_OK) ||
        (audio != NULL && (rc = parse_audio(ps, audio)) != SL_OK) ||
        (win != NULL && (rc = parse_window(ps, win)) != SL_OK))
        return rc;
    if (scale != NULL) {
        static const char *const skeys[] = {"factor", "offset", NULL};
        double f, o;
        if ((rc = only_keys(ps, scale, "preprocess.scale", skeys)) != SL_OK ||
            (rc = num_of(ps, scale, "factor", "preprocess.scale.factor", -1e30, 1e30, 1, &f)) !=
                SL_OK ||
            (rc = num_of(ps, scale, "offset", "preprocess.scale.offset", -1e30, 1e30, 0, &o)) !=
                SL_OK)
            return rc;
        c->has_scale = 1;
        c->scale = (float)f;
        c->offset = (float)o;
    }
    if (st != NULL) {
        static const char *const tkeys[] = {"mean", "std", NULL};
        size_t nm = 0, ns = 0;
        if ((rc = only_keys(ps, st, "preprocess.standardize", tkeys)) != SL_OK)
            return rc;
        if (member(st, "mean") == NULL || member(st, "std") == NULL)
            return fail(ps, "preprocess.standardize", "needs \"mean\" and \"std\"");
        if ((rc = floats_of(ps, member(st, "mean"), "preprocess.standardize.mean", 0, &c->mean,
                            &nm)) != SL_OK ||
            (rc = floats_of(ps, member(st, "std"), "preprocess.standardize.std", 1, &c->std,
                            &ns)) != SL_OK)
            return rc;
        if (nm != ns)
            return fail(ps, "preprocess.standardize", "mean has %zu values, std %zu", nm, ns);
        c->nstats = nm;
    }
    return SL_OK;
}

static size_t product(const size_t *shape, size_t ndim)
{
    size_t p = 1;
    for (size_t i = 0; i < ndim; i++) {
        if (shape[i] > SL_CONTRACT_MAX_SAMPLE / p)
            return 0;
        p *= shape[i];
    }
    return p;
}

/* The sample's shape: given, or what the preprocessing makes; the two must agree. */
static int settle_shape(parser *ps)
{
    sl_contract *c = ps->c;
    size_t want[4], nd = 0;
    switch (c->raw) {
    case SL_RAW_IMAGE:
        want[0] = c->image_channels, want[1] = c->image_height, want[2] = c->image_width, nd = 3;
        break;
    case SL_RAW_AUDIO:
        want[0] = 1, want[1] = c->n_mels, want[2] = c->frames, nd = 3;
        break;
    case SL_RAW_SERIES:
        want[0] = c->nfeatures, want[1] = c->window, nd = 2;
        break;
    case SL_RAW_VALUES:
        if (c->nfeatures > 0)
            want[0] = c->nfeatures, nd = 1;
        break;
    }
    if (c->ndim == 0) {
        if (nd == 0)
            return fail(ps, "input", "names its features or gives its shape");
        memcpy(c->shape, want, nd * sizeof *want);
        c->ndim = nd;
    }
    c->sample_size = product(c->shape, c->ndim);
    if (c->sample_size == 0)
        return fail(ps, "input.shape", "has more than %zu values", SL_CONTRACT_MAX_SAMPLE);
    if (nd > 0 && c->sample_size != product(want, nd))
        return fail(ps, "input.shape", "holds %zu values; the %s makes %zu", c->sample_size,
                    c->raw == SL_RAW_IMAGE    ? "image (channels x height x width)"
                    : c->raw == SL_RAW_AUDIO  ? "log-mel features (n_mels x frames)"
                    : c->raw == SL_RAW_SERIES ? "window (features x size)"
                                              : "feature list",
                    product(want, nd));
    if (c->raw == SL_RAW_VALUES)
        c->raw_size = c->sample_size;
    if (c->nstats > 1 && c->nstats != c->sample_size && c->nstats != c->shape[0])
        return fail(ps, "preprocess.standardize",
                    "has %zu values: 1, one per channel (%zu) or one per input value (%zu)",
                    c->nstats, c->shape[0], c->sample_size);
    return SL_OK;
}

int sl_contract_parse(const char *text, size_t len, sl_contract **out, char *err, size_t errcap)
{
    parser ps = {NULL, err, errcap};
    static const char *const keys[] = {"contract",    "input",      "label", "preprocess",
                                       "min_samples", "evaluation", NULL};
    const cJSON *ev;
    const char *end = text;
    cJSON *root;
    size_t version;
    int rc;
    if (err != NULL && errcap > 0)
        err[0] = '\0';
    if (text == NULL || out == NULL)
        return SL_EINVAL;
    if (len > SL_CONTRACT_MAX_BYTES) {
        if (err != NULL && errcap > 0)
            snprintf(err, errcap, "data contract: larger than %zu bytes", SL_CONTRACT_MAX_BYTES);
        return SL_ETOOBIG;
    }
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    /* cJSON stops after the value: what follows it must be white space */
    while (root != NULL && end < text + len && (unsigned char)*end <= ' ')
        end++;
    if (root == NULL || !cJSON_IsObject(root) || end != text + len) {
        if (err != NULL && errcap > 0)
            snprintf(err, errcap, "data contract: not a JSON object");
        cJSON_Delete(root);
        return SL_ESYNTAX;
    }
    ps.c = calloc(1, sizeof *ps.c);
    if (ps.c == NULL) {
        cJSON_Delete(root);
        return SL_ENOMEM;
    }
    if ((rc = only_keys(&ps, root, "data contract", keys)) != SL_OK ||
        (rc = int_of(&ps, root, "contract", "contract", 1, 1, 1, &version)) != SL_OK ||
        (rc = parse_input(&ps, root)) != SL_OK || (rc = parse_label(&ps, root)) != SL_OK ||
        (rc = parse_preprocess(&ps, root)) != SL_OK || (rc = settle_shape(&ps)) != SL_OK ||
        (rc = int_of(&ps, root, "min_samples", "min_samples", 1, 1u << 30, 1,
                     &ps.c->min_samples)) != SL_OK ||
        (rc = object_of(&ps, root, "evaluation", "evaluation", &ev)) != SL_OK)
        goto done;
    if (ev != NULL) {
        static const char *const ekeys[] = {"share", NULL};
        if ((rc = only_keys(&ps, ev, "evaluation", ekeys)) != SL_OK ||
            (rc = num_of(&ps, ev, "share", "evaluation.share", 0, 0.9, 0, &ps.c->eval_share)) !=
                SL_OK)
            goto done;
    }
done:
    cJSON_Delete(root);
    if (rc != SL_OK) {
        sl_contract_free(ps.c);
        return rc;
    }
    *out = ps.c;
    return SL_OK;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; names != NULL && i < n; i++)
        free(names[i]);
    free(names);
}

void sl_contract_free(sl_contract *c)
{
    if (c == NULL)
        return;
    free_names(c->features, c->nfeatures);
    free_names(c->label_columns, c->nlabel_columns);
    free_names(c->classes, c->nclasses);
    free(c->mean);
    free(c->std);
    free(c);
}

long sl_contract_class(const sl_contract *c, const char *name)
{
    for (size_t i = 0; c != NULL && name != NULL && i < c->nclasses; i++)
        if (strcmp(c->classes[i], name) == 0)
            return (long)i;
    return -1;
}

void sl_contract_finish(const sl_contract *c, float *x, size_t n)
{
    size_t per = c->nstats > 1 && c->nstats != c->sample_size ? c->sample_size / c->shape[0] : 1;
    for (size_t s = 0; s < n; s++, x += c->sample_size) {
        if (c->has_scale)
            for (size_t i = 0; i < c->sample_size; i++)
                x[i] = x[i] * c->scale + c->offset;
        if (c->mean == NULL)
            continue;
        for (size_t i = 0; i < c->sample_size; i++) {
            size_t k = c->nstats == 1 ? 0 : c->nstats == c->sample_size ? i : i / per;
            x[i] = (x[i] - c->mean[k]) / c->std[k];
        }
    }
}

/* FNV-1a over the bytes, then a splitmix64 finaliser (the low bits of FNV mix poorly). */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

int sl_contract_heldout(const sl_contract *c, const float *x, const float *y)
{
    uint64_t h;
    if (c == NULL || !(c->eval_share > 0))
        return 0;
    h = hash_bytes(0xcbf29ce484222325ULL, x, c->sample_size * sizeof *x);
    h = hash_bytes(h, y, c->tdim * sizeof *y);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (double)(h >> 11) * 0x1.0p-53 < c->eval_share;
}
