/*
 * spec.c - the model spec (MODEL_SPEC.md): parse the JSON, check every key,
 * name and attribute, infer every tensor's shape, and build the layout.
 *
 * The document is untrusted (an operator's file, a coordinator's answer):
 * every count and size is bounded before it is used, and a refusal names
 * the JSON path of the first problem ("nodes[3].attrs.kernel_shape: ...")
 * and leaves nothing allocated. Shape arithmetic is done in 64 bits with
 * the per-tensor element count capped at 2^28, so no product overflows.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "spec_int.h"

#define MAX_TEXT   (16u << 20) /* bytes of a spec document */
#define MAX_COUNT  (1u << 28)  /* elements of one tensor (per sample for activations) */
#define MAX_DIM_IN (1u << 24)  /* one dimension of an input */
#define MAX_PARAMS ((uint64_t)1 << 31)

static const char *const op_names[] = {
#define SL__OP_NAME(id, name) name,
    SL__OP_LIST(SL__OP_NAME)
#undef SL__OP_NAME
};

const char *sl__op_name(sl__op op)
{
    return (unsigned)op < SL__OP_COUNT ? op_names[op] : "?";
}

/* ---- parse state and errors ------------------------------------------------------------- */

typedef struct parser {
    sl_spec *s;
    char *err;
    size_t errcap;
    char path[160]; /* JSON path of what is being read */
    size_t cap_t, cap_n;
} parser;

static int fail(parser *ps, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->err != NULL && ps->errcap > 0)
        snprintf(ps->err, ps->errcap, "%s%s%s", ps->path, ps->path[0] ? ": " : "", msg);
    return SL_ESPEC;
}

static void set_path(parser *ps, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->path, sizeof ps->path, fmt, ap);
    va_end(ap);
}

/* 1 when @name is 1..127 bytes of [A-Za-z0-9_.:/-]. */
static int good_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > SL__SPEC_MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '/' || c == '-'))
            return 0;
    }
    return 1;
}

/* Refuse any member of @obj not in the NULL-terminated @allowed. */
static int only_keys(parser *ps, const cJSON *obj, const char *const *allowed)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, obj)
    {
        int ok = 0;
        for (size_t i = 0; allowed[i] != NULL && !ok; i++)
            ok = strcmp(it->string, allowed[i]) == 0;
        if (!ok)
            return fail(ps, "unknown key \"%.64s\"", it->string);
        for (const cJSON *o = obj->child; o != it; o = o->next)
            if (strcmp(o->string, it->string) == 0)
                return fail(ps, "key \"%.64s\" given twice", it->string);
    }
    return SL_OK;
}

/* An integer in [lo, hi] from a JSON number. */
static int get_int(parser *ps, const cJSON *v, const char *what, int64_t lo, int64_t hi,
                   int64_t *out)
{
    double d;
    if (!cJSON_IsNumber(v))
        return fail(ps, "%s: expected an integer", what);
    d = v->valuedouble;
    if (!(d == floor(d)) || d < (double)lo || d > (double)hi)
        return fail(ps, "%s: %g is not an integer in %lld..%lld", what, d, (long long)lo,
                    (long long)hi);
    *out = (int64_t)d;
    return SL_OK;
}

static int get_num(parser *ps, const cJSON *v, const char *what, double *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fail(ps, "%s: expected a finite number", what);
    *out = v->valuedouble;
    return SL_OK;
}

/* A shape: @min..@max dimensions, each 1..@dim_max, the product at most MAX_COUNT. */
static int get_shape(parser *ps, const cJSON *v, size_t min, size_t max, uint64_t dim_max,
                     uint32_t *shape, uint8_t *ndim, uint64_t *count)
{
    const cJSON *d;
    size_t n = 0;
    uint64_t prod = 1;
    if (!cJSON_IsArray(v))
        return fail(ps, "shape: expected an array of integers");
    cJSON_ArrayForEach(d, v)
    {
        int64_t x = 0;
        int rc;
        if (n == max)
            return fail(ps, "shape: more than %zu dimensions", max);
        if ((rc = get_int(ps, d, "shape", 1, (int64_t)dim_max, &x)) != SL_OK)
            return rc;
        prod *= (uint64_t)x;
        if (prod > MAX_COUNT)
            return fail(ps, "shape: more than %u elements", MAX_COUNT);
        shape[n++] = (uint32_t)x;
    }
    if (n < min)
        return fail(ps, "shape: fewer than %zu dimensions", min);
    *ndim = (uint8_t)n;
    *count = prod;
    return SL_OK;
}

/* ---- the tensor table -------------------------------------------------------------------- */

static int find_tensor(const sl_spec *s, const char *name)
{
    for (size_t i = 0; i < s->nt; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Append a tensor named @name (unique); its number in *@index. */
static int add_tensor(parser *ps, const char *name, sl__tensor_kind kind, int *index)
{
    sl_spec *s = ps->s;
    sl__tensor *t;
    if (!good_name(name))
        return fail(ps, "\"%.64s\" is not a tensor name (1-127 bytes of A-Z a-z 0-9 _ . : / -)",
                    name);
    if (find_tensor(s, name) >= 0)
        return fail(ps, "the tensor \"%s\" is produced twice", name);
    if (s->nt == ps->cap_t) {
        size_t cap = ps->cap_t ? ps->cap_t * 2 : 64;
        sl__tensor *grown = realloc(s->t, cap * sizeof *grown);
        if (grown == NULL)
            return SL_ENOMEM;
        s->t = grown;
        ps->cap_t = cap;
    }
    t = &s->t[s->nt];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, strlen(name) + 1);
    t->kind = (uint8_t)kind;
    t->param = -1;
    t->producer = -1;
    *index = (int)s->nt++;
    return SL_OK;
}

/* ---- inputs and parameters --------------------------------------------------------------- */

static int parse_inputs(parser *ps, const cJSON *arr)
{
    static const char *const keys[] = {"name", "shape", "dtype", NULL};
    const cJSON *it;
    sl_spec *s = ps->s;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1 ||
        cJSON_GetArraySize(arr) > SL__SPEC_MAX_INPUTS)
        return fail(ps, "expected an array of 1 to %d inputs", SL__SPEC_MAX_INPUTS);
    cJSON_ArrayForEach(it, arr)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        sl__tensor *t;
        int rc, idx;
        set_path(ps, "inputs[%zu]", s->ninputs);
        if (!cJSON_IsObject(it))
            return fail(ps, "expected an object");
        if ((rc = only_keys(ps, it, keys)) != SL_OK)
            return rc;
        if (!cJSON_IsString(name))
            return fail(ps, "name: required, a string");
        if ((rc = add_tensor(ps, name->valuestring, SL__T_INPUT, &idx)) != SL_OK)
            return rc;
        t = &s->t[idx];
        if ((rc = get_shape(ps, cJSON_GetObjectItemCaseSensitive(it, "shape"), 1, 4, MAX_DIM_IN,
                            t->shape, &t->ndim, &t->count)) != SL_OK)
            return rc;
        if (dtype != NULL) {
            if (!cJSON_IsString(dtype) || (strcmp(dtype->valuestring, "float32") != 0 &&
                                           strcmp(dtype->valuestring, "int64") != 0))
                return fail(ps, "dtype: \"float32\" or \"int64\"");
            t->dtype = strcmp(dtype->valuestring, "int64") == 0 ? SL__I64 : SL__F32;
        }
        s->input[s->ninputs++] = idx;
    }
    return SL_OK;
}

static int parse_init(parser *ps, const cJSON *init, sl__param_info *pi)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(init, "kind");
    int rc;
    pi->init = SL__INIT_UNIFORM_FAN_IN;
    if (init == NULL)
        return SL_OK;
    if (!cJSON_IsObject(init) || !cJSON_IsString(kind))
        return fail(ps, "init: an object with a \"kind\"");
    if (strcmp(kind->valuestring, "uniform_fan_in") == 0) {
        static const char *const keys[] = {"kind", "fan_in", NULL};
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(init, "fan_in");
        int64_t v = 0;
        if ((rc = only_keys(ps, init, keys)) != SL_OK)
            return rc;
        if (f != NULL && (rc = get_int(ps, f, "init.fan_in", 1, MAX_COUNT, &v)) != SL_OK)
            return rc;
        pi->fan_in = (uint64_t)v;
    } else if (strcmp(kind->valuestring, "uniform") == 0) {
        static const char *const keys[] = {"kind", "low", "high", NULL};
        pi->init = SL__INIT_UNIFORM;
        if ((rc = only_keys(ps, init, keys)) != SL_OK ||
            (rc = get_num(ps, cJSON_GetObjectItemCaseSensitive(init, "low"), "init.low", &pi->a)) !=
                SL_OK ||
            (rc = get_num(ps, cJSON_GetObjectItemCaseSensitive(init, "high"), "init.high",
                          &pi->b)) != SL_OK)
            return rc;
        if (!(pi->a <= pi->b))
            return fail(ps, "init: low above high");
    } else if (strcmp(kind->valuestring, "normal") == 0) {
        static const char *const keys[] = {"kind", "mean", "std", NULL};
        const cJSON *mean = cJSON_GetObjectItemCaseSensitive(init, "mean");
        pi->init = SL__INIT_NORMAL;
        if ((rc = only_keys(ps, init, keys)) != SL_OK ||
            (mean != NULL && (rc = get_num(ps, mean, "init.mean", &pi->a)) != SL_OK) ||
            (rc = get_num(ps, cJSON_GetObjectItemCaseSensitive(init, "std"), "init.std", &pi->b)) !=
                SL_OK)
            return rc;
        if (pi->b < 0)
            return fail(ps, "init.std: negative");
    } else if (strcmp(kind->valuestring, "constant") == 0) {
        static const char *const keys[] = {"kind", "value", NULL};
        pi->init = SL__INIT_CONSTANT;
        if ((rc = only_keys(ps, init, keys)) != SL_OK ||
            (rc = get_num(ps, cJSON_GetObjectItemCaseSensitive(init, "value"), "init.value",
                          &pi->a)) != SL_OK)
            return rc;
    } else {
        return fail(ps, "init.kind: \"%.32s\" is not uniform_fan_in, uniform, normal or constant",
                    kind->valuestring);
    }
    return SL_OK;
}

static int get_bool(parser *ps, const cJSON *v, const char *what, uint8_t *out)
{
    if (v == NULL)
        return SL_OK;
    if (!cJSON_IsBool(v))
        return fail(ps, "%s: expected true or false", what);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return SL_OK;
}

static int parse_params(parser *ps, const cJSON *arr)
{
    static const char *const keys[] = {"name", "shape", "init", "buffer", "local", NULL};
    const cJSON *it;
    sl_spec *s = ps->s;
    size_t n;
    uint64_t total = 0;
    int rc;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1 ||
        cJSON_GetArraySize(arr) > SL__SPEC_MAX_PARAMS)
        return fail(ps, "expected an array of 1 to %d parameters", SL__SPEC_MAX_PARAMS);
    n = (size_t)cJSON_GetArraySize(arr);
    s->p = calloc(n, sizeof *s->p);
    if (s->p == NULL)
        return SL_ENOMEM;
    if ((rc = sl_layout_create(&s->layout)) != SL_OK)
        return rc;
    cJSON_ArrayForEach(it, arr)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        sl__param_info *pi = &s->p[s->np];
        sl__tensor *t;
        uint64_t shape[SL__SPEC_MAX_DIMS];
        int idx;
        set_path(ps, "params[%zu]", s->np);
        if (!cJSON_IsObject(it))
            return fail(ps, "expected an object");
        if ((rc = only_keys(ps, it, keys)) != SL_OK)
            return rc;
        if (!cJSON_IsString(name))
            return fail(ps, "name: required, a string");
        if ((rc = add_tensor(ps, name->valuestring, SL__T_PARAM, &idx)) != SL_OK)
            return rc;
        t = &s->t[idx];
        if ((rc = get_shape(ps, cJSON_GetObjectItemCaseSensitive(it, "shape"), 1, 6, MAX_COUNT,
                            t->shape, &t->ndim, &t->count)) != SL_OK)
            return rc;
        total += t->count;
        if (total > MAX_PARAMS)
            return fail(ps, "the parameters hold more than 2^31 values");
        if ((rc = parse_init(ps, cJSON_GetObjectItemCaseSensitive(it, "init"), pi)) != SL_OK ||
            (rc = get_bool(ps, cJSON_GetObjectItemCaseSensitive(it, "buffer"), "buffer",
                           &pi->buffer)) != SL_OK ||
            (rc = get_bool(ps, cJSON_GetObjectItemCaseSensitive(it, "local"), "local",
                           &pi->local)) != SL_OK)
            return rc;
        for (uint8_t d = 0; d < t->ndim; d++)
            shape[d] = t->shape[d];
        if ((rc = sl_layout_add(s->layout, t->name, shape, t->ndim)) != SL_OK)
            return rc == SL_ENOMEM ? rc : fail(ps, "not a layout tensor: %s", sl_strerror(rc));
        t->param = (int32_t)s->np;
        pi->tensor = idx;
        s->np++;
    }
    return SL_OK;
}

/* ---- attributes -------------------------------------------------------------------------- */

/* The attributes each op takes (NULL-terminated). */
static const char *const *op_attrs(sl__op op)
{
    static const char *const none[] = {NULL};
    static const char *const gemm[] = {"transB", "alpha", "beta", NULL};
    static const char *const conv[] = {"kernel_shape", "strides", "pads",
                                       "dilations",    "group",   NULL};
    static const char *const maxpool[] = {"kernel_shape", "strides", "pads", "ceil_mode", NULL};
    static const char *const avgpool[] = {"kernel_shape", "strides",           "pads",
                                          "ceil_mode",    "count_include_pad", NULL};
    static const char *const reduce[] = {"axes", "keepdims", NULL};
    static const char *const axis[] = {"axis", NULL};
    static const char *const shape[] = {"shape", NULL};
    static const char *const perm[] = {"perm", NULL};
    static const char *const axes[] = {"axes", NULL};
    static const char *const slice[] = {"starts", "ends", "axes", "steps", NULL};
    static const char *const gather[] = {"axis", "indices", NULL};
    static const char *const leaky[] = {"alpha", NULL};
    static const char *const gelu[] = {"approximate", NULL};
    static const char *const dropout[] = {"ratio", NULL};
    static const char *const bn[] = {"epsilon", "momentum", NULL};
    static const char *const ln[] = {"axis", "epsilon", NULL};
    static const char *const rnn[] = {"hidden_size", NULL};
    switch (op) {
    case SL__OP_GEMM:
        return gemm;
    case SL__OP_CONV:
        return conv;
    case SL__OP_MAXPOOL:
        return maxpool;
    case SL__OP_AVGPOOL:
        return avgpool;
    case SL__OP_REDUCEMEAN:
        return reduce;
    case SL__OP_FLATTEN:
    case SL__OP_CONCAT:
        return axis;
    case SL__OP_RESHAPE:
        return shape;
    case SL__OP_TRANSPOSE:
        return perm;
    case SL__OP_SQUEEZE:
    case SL__OP_UNSQUEEZE:
        return axes;
    case SL__OP_SLICE:
        return slice;
    case SL__OP_GATHER:
        return gather;
    case SL__OP_LEAKYRELU:
        return leaky;
    case SL__OP_GELU:
        return gelu;
    case SL__OP_DROPOUT:
        return dropout;
    case SL__OP_BATCHNORM:
        return bn;
    case SL__OP_LAYERNORM:
        return ln;
    case SL__OP_GRU:
    case SL__OP_LSTM:
        return rnn;
    default:
        return none;
    }
}

/* An integer-list attribute into @out (at most SL__SPEC_MAX_INTS entries in [lo, hi]). */
static int get_ints(parser *ps, const cJSON *v, const char *what, int64_t lo, int64_t hi,
                    int32_t *out, uint8_t *n)
{
    const cJSON *d;
    size_t k = 0;
    if (!cJSON_IsArray(v))
        return fail(ps, "%s: expected an array of integers", what);
    cJSON_ArrayForEach(d, v)
    {
        int64_t x = 0;
        int rc;
        if (k == SL__SPEC_MAX_INTS)
            return fail(ps, "%s: more than %d entries", what, SL__SPEC_MAX_INTS);
        if ((rc = get_int(ps, d, what, lo, hi, &x)) != SL_OK)
            return rc;
        out[k++] = (int32_t)x;
    }
    *n = (uint8_t)k;
    return SL_OK;
}

static int get_scalar_int(parser *ps, const cJSON *attrs, const char *key, int64_t lo, int64_t hi,
                          int32_t dflt, int32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(attrs, key);
    int64_t x = 0;
    int rc;
    *out = dflt;
    if (v == NULL)
        return SL_OK;
    if ((rc = get_int(ps, v, key, lo, hi, &x)) != SL_OK)
        return rc;
    *out = (int32_t)x;
    return SL_OK;
}

static int get_scalar_num(parser *ps, const cJSON *attrs, const char *key, double lo, double hi,
                          float dflt, float *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(attrs, key);
    double x = 0;
    int rc;
    *out = dflt;
    if (v == NULL)
        return SL_OK;
    if ((rc = get_num(ps, v, key, &x)) != SL_OK)
        return rc;
    if (!(x >= lo && x <= hi))
        return fail(ps, "%s: %g is outside [%g, %g]", key, x, lo, hi);
    *out = (float)x;
    return SL_OK;
}

/* A spatial list attribute of @ns entries (2 x @ns for pads), or the default. */
static int get_spatial(parser *ps, const cJSON *attrs, const char *key, size_t want, int64_t lo,
                       int32_t dflt, int32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(attrs, key);
    int32_t tmp[SL__SPEC_MAX_INTS];
    uint8_t n = 0;
    int rc;
    for (size_t i = 0; i < want; i++)
        out[i] = dflt;
    if (v == NULL)
        return SL_OK;
    if ((rc = get_ints(ps, v, key, lo, 1 << 16, tmp, &n)) != SL_OK)
        return rc;
    if (n != want)
        return fail(ps, "%s: %u entries where the input has %zu spatial axes (%zu wanted)", key, n,
                    key[0] == 'p' ? want / 2 : want, want);
    memcpy(out, tmp, want * sizeof *out);
    return SL_OK;
}

/* The spatial attributes of Conv and the pools, for @ns spatial axes. */
static int parse_window(parser *ps, sl__op op, const cJSON *attrs, size_t ns, sl__attrs *a)
{
    int rc;
    a->nspatial = (uint8_t)ns;
    if ((rc = get_spatial(ps, attrs, "kernel_shape", ns, 1, 0, a->kernel)) != SL_OK ||
        (rc = get_spatial(ps, attrs, "strides", ns, 1, 1, a->stride)) != SL_OK ||
        (rc = get_spatial(ps, attrs, "pads", 2 * ns, 0, 0, a->pad)) != SL_OK)
        return rc;
    if (op == SL__OP_CONV) {
        if ((rc = get_spatial(ps, attrs, "dilations", ns, 1, 1, a->dilation)) != SL_OK ||
            (rc = get_scalar_int(ps, attrs, "group", 1, 1 << 16, 1, &a->group)) != SL_OK)
            return rc;
    } else {
        a->dilation[0] = a->dilation[1] = 1;
        if (cJSON_GetObjectItemCaseSensitive(attrs, "kernel_shape") == NULL)
            return fail(ps, "kernel_shape: required");
        if ((rc = get_scalar_int(ps, attrs, "ceil_mode", 0, 0, 0, &a->ceil_mode)) != SL_OK ||
            (rc = get_scalar_int(ps, attrs, "count_include_pad", 0, 1, 0, &a->count_include_pad)) !=
                SL_OK)
            return rc;
    }
    return SL_OK;
}

/* ---- shapes ------------------------------------------------------------------------------ */

static void set_shape(sl__tensor *t, const uint32_t *shape, size_t ndim)
{
    t->ndim = (uint8_t)ndim;
    t->count = 1;
    for (size_t i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->count *= shape[i];
    }
}

static void shape_str(const sl__tensor *t, char *out, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(out + o, cap - o, "[");
    for (uint8_t i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%u", i ? ", " : "", t->shape[i]);
    if (o < cap)
        snprintf(out + o, cap - o, "]");
}

/* An axis of a rank-@rank tensor, negative counting from the end, into [0, rank). */
static int norm_axis(parser *ps, const char *what, int32_t axis, size_t rank, size_t *out)
{
    int64_t a = axis < 0 ? (int64_t)rank + axis : axis;
    if (a < 0 || a >= (int64_t)rank)
        return fail(ps, "%s: axis %d outside a sample of %zu axes", what, axis, rank);
    *out = (size_t)a;
    return SL_OK;
}

/* Window output length: floor((len + pads - dil * (k - 1) - 1) / stride) + 1 >= 1. */
static int window_len(parser *ps, uint32_t len, int32_t k, int32_t stride, int32_t pb, int32_t pe,
                      int32_t dil, uint32_t *out)
{
    int64_t span = (int64_t)dil * (k - 1) + 1, room = (int64_t)len + pb + pe;
    if (room < span)
        return fail(ps, "the window (%lld) is wider than the padded input (%lld)", (long long)span,
                    (long long)room);
    if (pb >= span || pe >= span)
        return fail(ps, "a pad of %d is not smaller than the window %lld", pb >= span ? pb : pe,
                    (long long)span);
    *out = (uint32_t)((room - span) / stride + 1);
    return SL_OK;
}

/* Broadcast @a and @b (NumPy rules, aligned right) into @t. */
static int broadcast(parser *ps, const sl__tensor *a, const sl__tensor *b, sl__tensor *t)
{
    uint32_t shape[SL__SPEC_MAX_DIMS];
    size_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
    if (n > 5)
        return fail(ps, "more than 5 axes");
    for (size_t i = 0; i < n; i++) {
        uint32_t da = i < n - a->ndim ? 1 : a->shape[i - (n - a->ndim)];
        uint32_t db = i < n - b->ndim ? 1 : b->shape[i - (n - b->ndim)];
        if (da != db && da != 1 && db != 1) {
            char sa[96], sb[96];
            shape_str(a, sa, sizeof sa);
            shape_str(b, sb, sizeof sb);
            return fail(ps, "%s and %s do not broadcast", sa, sb);
        }
        shape[i] = da > db ? da : db;
    }
    set_shape(t, shape, n);
    return SL_OK;
}

/* The number of inputs and outputs an op takes: [min, max]. */
static void arity(sl__op op, int *in_min, int *in_max, int *out_min, int *out_max)
{
    *in_min = *in_max = 1;
    *out_min = *out_max = 1;
    switch (op) {
    case SL__OP_GEMM:
    case SL__OP_CONV:
        *in_min = 2, *in_max = 3;
        break;
    case SL__OP_MATMUL:
    case SL__OP_ADD:
    case SL__OP_SUB:
    case SL__OP_MUL:
    case SL__OP_DIV:
    case SL__OP_EMBEDDING:
        *in_min = *in_max = 2;
        break;
    case SL__OP_CONCAT:
        *in_min = 2, *in_max = SL__SPEC_MAX_IN;
        break;
    case SL__OP_BATCHNORM:
        *in_min = *in_max = 5;
        break;
    case SL__OP_LAYERNORM:
        *in_min = 2, *in_max = 3;
        break;
    case SL__OP_GRU:
        *in_min = *in_max = 5;
        *out_max = 2;
        break;
    case SL__OP_LSTM:
        *in_min = *in_max = 5;
        *out_max = 3;
        break;
    default:
        break;
    }
}

/* Which inputs of @op must be parameters (bit i: input i), and which may be. */
static void param_slots(sl__op op, unsigned *must, unsigned *may)
{
    *must = 0;
    *may = 0;
    switch (op) {
    case SL__OP_GEMM:
    case SL__OP_CONV:
        *must = 0x6;
        break;
    case SL__OP_MATMUL:
    case SL__OP_EMBEDDING:
        *must = 0x2;
        break;
    case SL__OP_ADD:
    case SL__OP_SUB:
    case SL__OP_MUL:
    case SL__OP_DIV:
        *may = 0x3;
        break;
    case SL__OP_BATCHNORM:
        *must = 0x1e;
        break;
    case SL__OP_LAYERNORM:
        *must = 0x6;
        break;
    case SL__OP_GRU:
    case SL__OP_LSTM:
        *must = 0x1e;
        break;
    default:
        break;
    }
}

/* A parameter input @i of node @nd must have @ndim dims with the given sizes (0: any). */
static int want_param(parser *ps, const sl__node *nd, int i, size_t ndim, uint32_t d0, uint32_t d1)
{
    const sl__tensor *w = &ps->s->t[nd->in[i]];
    char sh[96];
    if (w->ndim == ndim && (d0 == 0 || w->shape[0] == d0) &&
        (ndim < 2 || d1 == 0 || w->shape[1] == d1))
        return SL_OK;
    shape_str(w, sh, sizeof sh);
    if (ndim == 1)
        return fail(ps, "input %d (%s) is %s where [%u] is wanted", i, w->name, sh, d0);
    return fail(ps, "input %d (%s) is %s where [%u, %u, ...] is wanted", i, w->name, sh, d0, d1);
}

/* Infer the shapes of node @nd's outputs, checking its inputs. */
static int infer(parser *ps, sl__node *nd, const cJSON *attrs)
{
    sl_spec *s = ps->s;
    sl__attrs *a = &nd->a;
    const sl__tensor *x = &s->t[nd->in[0]];
    sl__tensor *y = &s->t[nd->out[0]];
    uint32_t shape[SL__SPEC_MAX_DIMS];
    size_t r = x->ndim;
    int rc;

    switch ((sl__op)nd->op) {
    case SL__OP_GEMM: {
        const sl__tensor *w = &s->t[nd->in[1]];
        uint32_t k, n;
        if ((rc = get_scalar_int(ps, attrs, "transB", 0, 1, 1, &a->trans_b)) != SL_OK ||
            (rc = get_scalar_num(ps, attrs, "alpha", -1e6, 1e6, 1.0f, &a->alpha)) != SL_OK ||
            (rc = get_scalar_num(ps, attrs, "beta", -1e6, 1e6, 1.0f, &a->beta)) != SL_OK)
            return rc;
        if (x->ndim != 1)
            return fail(ps, "input 0 (%s) must be one axis per sample (Flatten before Gemm)",
                        x->name);
        if (w->ndim != 2)
            return fail(ps, "input 1 (%s) must have two axes", w->name);
        k = a->trans_b ? w->shape[1] : w->shape[0];
        n = a->trans_b ? w->shape[0] : w->shape[1];
        if (k != x->shape[0])
            return fail(ps, "input 1 (%s) takes %u features where input 0 (%s) has %u", w->name, k,
                        x->name, x->shape[0]);
        if (nd->nin == 3 && nd->in[2] >= 0 && (rc = want_param(ps, nd, 2, 1, n, 0)) != SL_OK)
            return rc;
        shape[0] = n;
        set_shape(y, shape, 1);
        return SL_OK;
    }
    case SL__OP_MATMUL: {
        const sl__tensor *w = &s->t[nd->in[1]];
        if (w->ndim != 2 || r < 1 || r > 4 || x->shape[r - 1] != w->shape[0])
            return fail(ps, "input 1 (%s) must be [K, N] with K the last axis of input 0 (%s)",
                        w->name, x->name);
        memcpy(shape, x->shape, r * sizeof *shape);
        shape[r - 1] = w->shape[1];
        set_shape(y, shape, r);
        return SL_OK;
    }
    case SL__OP_ADD:
    case SL__OP_SUB:
    case SL__OP_MUL:
    case SL__OP_DIV:
        return broadcast(ps, x, &s->t[nd->in[1]], y);
    case SL__OP_CONV: {
        const sl__tensor *w = &s->t[nd->in[1]];
        size_t ns = r - 1;
        uint32_t cin, m;
        if (r != 2 && r != 3)
            return fail(ps, "input 0 (%s) must be [C, L] or [C, H, W]", x->name);
        if ((rc = parse_window(ps, SL__OP_CONV, attrs, ns, a)) != SL_OK)
            return rc;
        if (w->ndim != r + 1)
            return fail(ps, "input 1 (%s) must have %zu axes [M, C/group, k...]", w->name, r + 1);
        m = w->shape[0];
        cin = x->shape[0];
        if (cin % (uint32_t)a->group != 0 || m % (uint32_t)a->group != 0 ||
            w->shape[1] * (uint32_t)a->group != cin)
            return fail(ps, "input 1 (%s) does not fit %u channels in %d groups", w->name, cin,
                        a->group);
        for (size_t i = 0; i < ns; i++) {
            if (cJSON_GetObjectItemCaseSensitive(attrs, "kernel_shape") == NULL)
                a->kernel[i] = (int32_t)w->shape[2 + i];
            else if ((uint32_t)a->kernel[i] != w->shape[2 + i])
                return fail(ps, "kernel_shape differs from input 1 (%s)", w->name);
            if ((rc = window_len(ps, x->shape[1 + i], a->kernel[i], a->stride[i], a->pad[i],
                                 a->pad[ns + i], a->dilation[i], &shape[1 + i])) != SL_OK)
                return rc;
        }
        if (nd->nin == 3 && nd->in[2] >= 0 && (rc = want_param(ps, nd, 2, 1, m, 0)) != SL_OK)
            return rc;
        shape[0] = m;
        set_shape(y, shape, r);
        return SL_OK;
    }
    case SL__OP_MAXPOOL:
    case SL__OP_AVGPOOL: {
        size_t ns = r - 1;
        if (r != 2 && r != 3)
            return fail(ps, "input 0 (%s) must be [C, L] or [C, H, W]", x->name);
        if ((rc = parse_window(ps, (sl__op)nd->op, attrs, ns, a)) != SL_OK)
            return rc;
        shape[0] = x->shape[0];
        for (size_t i = 0; i < ns; i++)
            if ((rc = window_len(ps, x->shape[1 + i], a->kernel[i], a->stride[i], a->pad[i],
                                 a->pad[ns + i], 1, &shape[1 + i])) != SL_OK)
                return rc;
        set_shape(y, shape, r);
        return SL_OK;
    }
    case SL__OP_GLOBALAVGPOOL:
        if (r < 2)
            return fail(ps, "input 0 (%s) must be [C, ...]", x->name);
        shape[0] = x->shape[0];
        for (size_t i = 1; i < r; i++)
            shape[i] = 1;
        set_shape(y, shape, r);
        return SL_OK;
    case SL__OP_REDUCEMEAN: {
        uint8_t seen[SL__SPEC_MAX_DIMS] = {0};
        size_t k = 0;
        if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "axes"), "axes", -6, 5,
                           a->ints, &a->nints)) != SL_OK ||
            (rc = get_scalar_int(ps, attrs, "keepdims", 0, 1, 1, &a->keepdims)) != SL_OK)
            return rc;
        if (a->nints == 0)
            return fail(ps, "axes: at least one");
        for (size_t i = 0; i < a->nints; i++) {
            size_t ax = 0;
            if ((rc = norm_axis(ps, "axes", a->ints[i], r, &ax)) != SL_OK)
                return rc;
            if (seen[ax]++)
                return fail(ps, "axes: axis %zu twice", ax);
            a->ints[i] = (int32_t)ax;
        }
        for (size_t i = 0; i < r; i++)
            if (!seen[i] || a->keepdims)
                shape[k++] = seen[i] ? 1 : x->shape[i];
        if (k == 0)
            shape[k++] = 1;
        set_shape(y, shape, k);
        return SL_OK;
    }
    case SL__OP_FLATTEN: {
        uint64_t head = 1;
        if ((rc = get_scalar_int(ps, attrs, "axis", 0, (int64_t)r, 0, &a->axis)) != SL_OK)
            return rc;
        for (int32_t i = 0; i < a->axis; i++)
            head *= x->shape[i];
        if (a->axis == 0) {
            shape[0] = (uint32_t)x->count;
            set_shape(y, shape, 1);
        } else {
            shape[0] = (uint32_t)head;
            shape[1] = (uint32_t)(x->count / head);
            set_shape(y, shape, 2);
        }
        return SL_OK;
    }
    case SL__OP_RESHAPE: {
        uint64_t known = 1;
        int free_at = -1;
        if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "shape"), "shape", -1,
                           MAX_COUNT, a->ints, &a->nints)) != SL_OK)
            return rc;
        if (a->nints < 1 || a->nints > 5)
            return fail(ps, "shape: 1 to 5 axes");
        for (int i = 0; i < a->nints; i++) {
            int64_t d = a->ints[i];
            if (d == 0) {
                if ((size_t)i >= r)
                    return fail(ps, "shape: 0 copies axis %d, which input 0 lacks", i);
                d = x->shape[i];
            }
            if (d == -1) {
                if (free_at >= 0)
                    return fail(ps, "shape: more than one -1");
                free_at = i;
                continue;
            }
            known *= (uint64_t)d;
            shape[i] = (uint32_t)d;
        }
        if (known == 0 || x->count % known != 0 || (free_at < 0 && known != x->count))
            return fail(ps, "shape: %llu elements do not make input 0's %llu",
                        (unsigned long long)known, (unsigned long long)x->count);
        if (free_at >= 0)
            shape[free_at] = (uint32_t)(x->count / known);
        set_shape(y, shape, a->nints);
        return SL_OK;
    }
    case SL__OP_TRANSPOSE: {
        uint8_t seen[SL__SPEC_MAX_DIMS] = {0};
        if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "perm"), "perm", 0, 5,
                           a->ints, &a->nints)) != SL_OK)
            return rc;
        if (a->nints != r)
            return fail(ps, "perm: %u entries for a sample of %zu axes", a->nints, r);
        for (size_t i = 0; i < r; i++) {
            if ((size_t)a->ints[i] >= r || seen[a->ints[i]]++)
                return fail(ps, "perm: not a permutation of 0..%zu", r - 1);
            shape[i] = x->shape[a->ints[i]];
        }
        set_shape(y, shape, r);
        return SL_OK;
    }
    case SL__OP_SQUEEZE:
    case SL__OP_UNSQUEEZE: {
        uint8_t mark[SL__SPEC_MAX_DIMS] = {0};
        size_t out_r, k = 0;
        if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "axes"), "axes", -6, 5,
                           a->ints, &a->nints)) != SL_OK)
            return rc;
        if (a->nints == 0)
            return fail(ps, "axes: at least one");
        out_r = nd->op == SL__OP_SQUEEZE ? r - (a->nints < r ? a->nints : r) : r + a->nints;
        if (nd->op == SL__OP_UNSQUEEZE && out_r > 5)
            return fail(ps, "more than 5 axes");
        if (nd->op == SL__OP_SQUEEZE && a->nints >= r)
            return fail(ps, "axes: squeezing every axis of the sample");
        for (size_t i = 0; i < a->nints; i++) {
            size_t ax = 0;
            if ((rc = norm_axis(ps, "axes", a->ints[i], nd->op == SL__OP_SQUEEZE ? r : out_r,
                                &ax)) != SL_OK)
                return rc;
            if (mark[ax]++)
                return fail(ps, "axes: axis %zu twice", ax);
            if (nd->op == SL__OP_SQUEEZE && x->shape[ax] != 1)
                return fail(ps, "axes: axis %zu has %u entries, not 1", ax, x->shape[ax]);
            a->ints[i] = (int32_t)ax;
        }
        if (nd->op == SL__OP_SQUEEZE) {
            for (size_t i = 0; i < r; i++)
                if (!mark[i])
                    shape[k++] = x->shape[i];
        } else {
            for (size_t i = 0, j = 0; i < out_r; i++)
                shape[i] = mark[i] ? 1 : x->shape[j++];
            k = out_r;
        }
        set_shape(y, shape, k);
        return SL_OK;
    }
    case SL__OP_CONCAT: {
        size_t ax = 0;
        uint64_t total = 0;
        if ((rc = get_scalar_int(ps, attrs, "axis", -5, 4, 0, &a->axis)) != SL_OK ||
            (rc = norm_axis(ps, "axis", a->axis, r, &ax)) != SL_OK)
            return rc;
        a->axis = (int32_t)ax;
        for (int i = 0; i < nd->nin; i++) {
            const sl__tensor *xi = &s->t[nd->in[i]];
            if (xi->ndim != r)
                return fail(ps, "input %d (%s) has %u axes, input 0 %zu", i, xi->name, xi->ndim, r);
            for (size_t d = 0; d < r; d++)
                if (d != ax && xi->shape[d] != x->shape[d])
                    return fail(ps, "input %d (%s) differs from input 0 on axis %zu", i, xi->name,
                                d);
            total += xi->shape[ax];
        }
        memcpy(shape, x->shape, r * sizeof *shape);
        if (total * (x->count / x->shape[ax]) > MAX_COUNT)
            return fail(ps, "more than %u elements", MAX_COUNT);
        shape[ax] = (uint32_t)total;
        set_shape(y, shape, r);
        return SL_OK;
    }
    case SL__OP_SLICE: {
        int32_t st[SL__SPEC_MAX_INTS];
        uint8_t nst = 0, mark[SL__SPEC_MAX_DIMS] = {0};
        if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "starts"), "starts",
                           INT32_MIN, INT32_MAX, st, &nst)) != SL_OK ||
            (rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "ends"), "ends", INT32_MIN,
                           INT32_MAX, a->ends, &a->nends)) != SL_OK)
            return rc;
        if (nst == 0 || nst != a->nends)
            return fail(ps, "starts and ends: as many entries, at least one");
        if (cJSON_GetObjectItemCaseSensitive(attrs, "axes") != NULL) {
            if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "axes"), "axes", -6, 5,
                               a->axes, &a->naxes)) != SL_OK)
                return rc;
        } else {
            a->naxes = nst;
            for (uint8_t i = 0; i < nst; i++)
                a->axes[i] = i;
        }
        if (cJSON_GetObjectItemCaseSensitive(attrs, "steps") != NULL) {
            if ((rc = get_ints(ps, cJSON_GetObjectItemCaseSensitive(attrs, "steps"), "steps", 1,
                               1 << 20, a->steps, &a->nsteps)) != SL_OK)
                return rc;
        } else {
            a->nsteps = nst;
            for (uint8_t i = 0; i < nst; i++)
                a->steps[i] = 1;
        }
        if (a->naxes != nst || a->nsteps != nst)
            return fail(ps, "axes and steps: as many entries as starts");
        memcpy(shape, x->shape, r * sizeof *shape);
        for (uint8_t i = 0; i < nst; i++) {
            size_t ax = 0;
            int64_t d, b, e;
            if ((rc = norm_axis(ps, "axes", a->axes[i], r, &ax)) != SL_OK)
                return rc;
            if (mark[ax]++)
                return fail(ps, "axes: axis %zu twice", ax);
            d = x->shape[ax];
            b = st[i] < 0 ? st[i] + d : st[i];
            e = a->ends[i] < 0 ? a->ends[i] + d : a->ends[i];
            b = b < 0 ? 0 : b > d ? d : b; /* clamped, as ONNX does */
            e = e < 0 ? 0 : e > d ? d : e;
            if (e <= b)
                return fail(ps, "an empty slice of axis %zu", ax);
            a->axes[i] = (int32_t)ax;
            a->ints[i] = (int32_t)b;
            a->ends[i] = (int32_t)e;
            shape[ax] = (uint32_t)((e - b + a->steps[i] - 1) / a->steps[i]);
        }
        a->nints = nst;
        set_shape(y, shape, r);
        return SL_OK;
    }
    case SL__OP_GATHER: {
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(attrs, "indices");
        size_t ax = 0;
        if ((rc = get_scalar_int(ps, attrs, "axis", -5, 4, 0, &a->axis)) != SL_OK ||
            (rc = norm_axis(ps, "axis", a->axis, r, &ax)) != SL_OK)
            return rc;
        a->axis = (int32_t)ax;
        if (cJSON_IsNumber(ix)) {
            int64_t v = 0;
            if ((rc = get_int(ps, ix, "indices", -(int64_t)x->shape[ax], (int64_t)x->shape[ax] - 1,
                              &v)) != SL_OK)
                return rc;
            a->ints[0] = (int32_t)(v < 0 ? v + x->shape[ax] : v);
            a->nints = 1;
            a->scalar_index = 1;
        } else if (ix != NULL) {
            if ((rc = get_ints(ps, ix, "indices", -(int64_t)x->shape[ax], (int64_t)x->shape[ax] - 1,
                               a->ints, &a->nints)) != SL_OK)
                return rc;
            if (a->nints == 0)
                return fail(ps, "indices: at least one");
            for (uint8_t i = 0; i < a->nints; i++)
                if (a->ints[i] < 0)
                    a->ints[i] += (int32_t)x->shape[ax];
        } else {
            return fail(ps, "indices: required (an integer or a list of them)");
        }
        if (a->scalar_index && r == 1)
            return fail(ps, "indices: one index of a one-axis sample leaves nothing");
        {
            size_t k = 0;
            for (size_t i = 0; i < r; i++) {
                if (i != ax)
                    shape[k++] = x->shape[i];
                else if (!a->scalar_index)
                    shape[k++] = a->nints;
            }
            set_shape(y, shape, k);
        }
        return SL_OK;
    }
    case SL__OP_IDENTITY:
    case SL__OP_RELU:
    case SL__OP_SIGMOID:
    case SL__OP_TANH:
        set_shape(y, x->shape, r);
        return SL_OK;
    case SL__OP_LEAKYRELU:
        if ((rc = get_scalar_num(ps, attrs, "alpha", -1e3, 1e3, 0.01f, &a->alpha)) != SL_OK)
            return rc;
        set_shape(y, x->shape, r);
        return SL_OK;
    case SL__OP_GELU: {
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(attrs, "approximate");
        if (ap != NULL) {
            if (!cJSON_IsString(ap) ||
                (strcmp(ap->valuestring, "none") != 0 && strcmp(ap->valuestring, "tanh") != 0))
                return fail(ps, "approximate: \"none\" or \"tanh\"");
            a->tanh_approx = strcmp(ap->valuestring, "tanh") == 0;
        }
        set_shape(y, x->shape, r);
        return SL_OK;
    }
    case SL__OP_DROPOUT:
        if ((rc = get_scalar_num(ps, attrs, "ratio", 0.0, 0.99, 0.5f, &a->ratio)) != SL_OK)
            return rc;
        set_shape(y, x->shape, r);
        return SL_OK;
    case SL__OP_BATCHNORM:
        if ((rc = get_scalar_num(ps, attrs, "epsilon", 1e-12, 1.0, 1e-5f, &a->epsilon)) != SL_OK ||
            (rc = get_scalar_num(ps, attrs, "momentum", 0.0, 1.0, 0.1f, &a->momentum)) != SL_OK)
            return rc;
        if (r < 1)
            return fail(ps, "input 0 (%s) must be [C, ...]", x->name);
        for (int i = 1; i < 5; i++)
            if ((rc = want_param(ps, nd, i, 1, x->shape[0], 0)) != SL_OK)
                return rc;
        for (int i = 3; i < 5; i++)
            if (!s->p[s->t[nd->in[i]].param].buffer)
                return fail(ps, "input %d (%s), the running %s, must be a buffer", i,
                            s->t[nd->in[i]].name, i == 3 ? "mean" : "variance");
        set_shape(y, x->shape, r);
        return SL_OK;
    case SL__OP_LAYERNORM: {
        size_t ax = 0;
        uint64_t norm = 1;
        if ((rc = get_scalar_int(ps, attrs, "axis", -5, 4, -1, &a->axis)) != SL_OK ||
            (rc = get_scalar_num(ps, attrs, "epsilon", 1e-12, 1.0, 1e-5f, &a->epsilon)) != SL_OK ||
            (rc = norm_axis(ps, "axis", a->axis, r, &ax)) != SL_OK)
            return rc;
        a->axis = (int32_t)ax;
        for (size_t i = ax; i < r; i++)
            norm *= x->shape[i];
        for (int i = 1; i < nd->nin; i++) {
            const sl__tensor *p = nd->in[i] >= 0 ? &s->t[nd->in[i]] : NULL;
            if (p != NULL && p->count != norm)
                return fail(ps, "input %d (%s) must hold the %llu normalised values", i, p->name,
                            (unsigned long long)norm);
        }
        set_shape(y, x->shape, r);
        return SL_OK;
    }
    case SL__OP_EMBEDDING: {
        const sl__tensor *w = &s->t[nd->in[1]];
        if (x->dtype != SL__I64)
            return fail(ps, "input 0 (%s) must be an int64 input", x->name);
        if (w->ndim != 2)
            return fail(ps, "input 1 (%s) must be [V, D]", w->name);
        if (r + 1 > 5)
            return fail(ps, "more than 5 axes");
        memcpy(shape, x->shape, r * sizeof *shape);
        shape[r] = w->shape[1];
        if (x->count * w->shape[1] > MAX_COUNT)
            return fail(ps, "more than %u elements", MAX_COUNT);
        set_shape(y, shape, r + 1);
        return SL_OK;
    }
    case SL__OP_GRU:
    case SL__OP_LSTM: {
        uint32_t gates = nd->op == SL__OP_GRU ? 3 : 4, h;
        if ((rc = get_scalar_int(ps, attrs, "hidden_size", 1, 1 << 16, 0, &a->hidden)) != SL_OK)
            return rc;
        if (a->hidden == 0)
            return fail(ps, "hidden_size: required");
        h = (uint32_t)a->hidden;
        if (r != 2)
            return fail(ps, "input 0 (%s) must be [T, I]", x->name);
        if ((rc = want_param(ps, nd, 1, 2, gates * h, x->shape[1])) != SL_OK ||
            (rc = want_param(ps, nd, 2, 2, gates * h, h)) != SL_OK ||
            (rc = want_param(ps, nd, 3, 1, gates * h, 0)) != SL_OK ||
            (rc = want_param(ps, nd, 4, 1, gates * h, 0)) != SL_OK)
            return rc;
        shape[0] = x->shape[0];
        shape[1] = h;
        set_shape(y, shape, 2);
        for (int o = 1; o < nd->nout; o++)
            if (nd->out[o] >= 0) {
                shape[0] = h;
                set_shape(&s->t[nd->out[o]], shape, 1);
            }
        return SL_OK;
    }
    case SL__OP_COUNT:
        break;
    }
    return fail(ps, "unknown op");
}

/* ---- nodes ------------------------------------------------------------------------------- */

static int parse_node(parser *ps, const cJSON *it, size_t index)
{
    static const char *const keys[] = {"op", "name", "inputs", "outputs", "attrs", NULL};
    sl_spec *s = ps->s;
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(it, "inputs");
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(it, "outputs");
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(it, "attrs");
    static const cJSON empty = {0};
    sl__node *nd = &s->n[index];
    int in_min, in_max, out_min, out_max, rc, i;
    unsigned must, may;
    const cJSON *v;

    memset(nd, 0, sizeof *nd);
    set_path(ps, "nodes[%zu]", index);
    if (!cJSON_IsObject(it))
        return fail(ps, "expected an object");
    if ((rc = only_keys(ps, it, keys)) != SL_OK)
        return rc;
    if (!cJSON_IsString(op))
        return fail(ps, "op: required, a string");
    for (i = 0; i < SL__OP_COUNT && strcmp(op_names[i], op->valuestring) != 0; i++)
        ;
    if (i == SL__OP_COUNT)
        return fail(ps, "op: \"%.48s\" is not an op of model spec version 1", op->valuestring);
    nd->op = (uint8_t)i;
    if (name != NULL) {
        if (!cJSON_IsString(name) || strlen(name->valuestring) > SL__SPEC_MAX_NAME)
            return fail(ps, "name: a string of at most %d bytes", SL__SPEC_MAX_NAME);
        memcpy(nd->name, name->valuestring, strlen(name->valuestring) + 1);
        set_path(ps, "nodes[%zu] (%.64s)", index, nd->name);
    }
    if (attrs == NULL)
        attrs = &empty;
    else if (!cJSON_IsObject(attrs))
        return fail(ps, "attrs: expected an object");
    cJSON_ArrayForEach(v, attrs)
    {
        const char *const *allowed = op_attrs((sl__op)nd->op);
        int ok = 0;
        for (size_t k = 0; allowed[k] != NULL && !ok; k++)
            ok = strcmp(v->string, allowed[k]) == 0;
        if (!ok)
            return fail(ps, "attrs: %s takes no attribute \"%.48s\"", op_names[nd->op], v->string);
        for (const cJSON *o = attrs->child; o != v; o = o->next)
            if (strcmp(o->string, v->string) == 0)
                return fail(ps, "attrs: \"%.48s\" given twice", v->string);
    }
    arity((sl__op)nd->op, &in_min, &in_max, &out_min, &out_max);
    if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) < in_min || cJSON_GetArraySize(ins) > in_max)
        return fail(ps, "inputs: %s takes %d to %d", op_names[nd->op], in_min, in_max);
    if (!cJSON_IsArray(outs) || cJSON_GetArraySize(outs) < out_min ||
        cJSON_GetArraySize(outs) > out_max)
        return fail(ps, "outputs: %s gives %d to %d", op_names[nd->op], out_min, out_max);
    param_slots((sl__op)nd->op, &must, &may);
    i = 0;
    cJSON_ArrayForEach(v, ins)
    {
        int t;
        if (!cJSON_IsString(v))
            return fail(ps, "inputs[%d]: expected a tensor name", i);
        if (v->valuestring[0] == '\0') {
            /* only the optional bias of Gemm, Conv and LayerNormalization may be left out */
            if (!((nd->op == SL__OP_GEMM || nd->op == SL__OP_CONV || nd->op == SL__OP_LAYERNORM) &&
                  i == 2))
                return fail(ps, "inputs[%d]: required by %s", i, op_names[nd->op]);
            nd->in[i++] = -1;
            continue;
        }
        t = find_tensor(s, v->valuestring);
        if (t < 0)
            return fail(ps, "inputs[%d]: \"%.64s\" is not produced before this node", i,
                        v->valuestring);
        if ((must >> i & 1) && s->t[t].kind != SL__T_PARAM)
            return fail(ps, "inputs[%d]: \"%s\" must be a parameter", i, s->t[t].name);
        if (!((must | may) >> i & 1) && s->t[t].kind == SL__T_PARAM)
            return fail(ps, "inputs[%d]: \"%s\" is a parameter where %s wants data", i,
                        s->t[t].name, op_names[nd->op]);
        if (s->t[t].dtype == SL__I64 && !(nd->op == SL__OP_EMBEDDING && i == 0))
            return fail(ps, "inputs[%d]: the int64 input \"%s\" may only feed an Embedding", i,
                        s->t[t].name);
        s->t[t].readers++;
        nd->in[i++] = t;
    }
    nd->nin = (uint8_t)i;
    i = 0;
    cJSON_ArrayForEach(v, outs)
    {
        int t;
        if (!cJSON_IsString(v))
            return fail(ps, "outputs[%d]: expected a tensor name", i);
        if (v->valuestring[0] == '\0' && i > 0) {
            nd->out[i++] = -1;
            continue;
        }
        if ((rc = add_tensor(ps, v->valuestring, SL__T_ACT, &t)) != SL_OK)
            return rc;
        s->t[t].producer = (int32_t)index;
        nd->out[i++] = t;
    }
    nd->nout = (uint8_t)i;
    if ((rc = infer(ps, nd, attrs)) != SL_OK)
        return rc;
    for (i = 0; i < nd->nout; i++)
        if (nd->out[i] >= 0 && s->t[nd->out[i]].count > MAX_COUNT)
            return fail(ps, "output %d holds more than %u elements per sample", i, MAX_COUNT);
    return SL_OK;
}

static int parse_nodes(parser *ps, const cJSON *arr)
{
    sl_spec *s = ps->s;
    const cJSON *it;
    size_t n;
    int rc;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1 ||
        cJSON_GetArraySize(arr) > SL__SPEC_MAX_NODES)
        return fail(ps, "expected an array of 1 to %d nodes", SL__SPEC_MAX_NODES);
    n = (size_t)cJSON_GetArraySize(arr);
    s->n = calloc(n, sizeof *s->n);
    if (s->n == NULL)
        return SL_ENOMEM;
    cJSON_ArrayForEach(it, arr)
    {
        if ((rc = parse_node(ps, it, s->nn)) != SL_OK)
            return rc;
        s->nn++;
    }
    return SL_OK;
}

/* ---- loss, metrics and the whole document ------------------------------------------------ */

static int parse_loss(parser *ps, const cJSON *loss, const cJSON *metrics)
{
    static const char *const keys[] = {"op", "label_smoothing", "delta", NULL};
    static const char *const losses[] = {"cross_entropy", "bce_with_logits", "mse", "l1", "huber"};
    static const char *const metric_names[] = {"accuracy", "recall_per_class", "mae", "rmse"};
    sl_spec *s = ps->s;
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(loss, "op"), *m;
    const sl__tensor *y = &s->t[s->output];
    int classify, rc;
    size_t i;
    set_path(ps, "loss");
    if (!cJSON_IsObject(loss))
        return fail(ps, "required, an object");
    if ((rc = only_keys(ps, loss, keys)) != SL_OK)
        return rc;
    if (!cJSON_IsString(op))
        return fail(ps, "op: required, a string");
    for (i = 0; i < 5 && strcmp(losses[i], op->valuestring) != 0; i++)
        ;
    if (i == 5)
        return fail(ps, "op: \"%.32s\" is not cross_entropy, bce_with_logits, mse, l1 or huber",
                    op->valuestring);
    s->loss = (uint8_t)i;
    classify = s->loss == SL__LOSS_CROSS_ENTROPY || s->loss == SL__LOSS_BCE_WITH_LOGITS;
    if ((rc = get_scalar_num(ps, loss, "label_smoothing", 0.0, 0.999, 0.0f, &s->label_smoothing)) !=
            SL_OK ||
        (rc = get_scalar_num(ps, loss, "delta", 1e-9, 1e9, 1.0f, &s->huber_delta)) != SL_OK)
        return rc;
    if (cJSON_GetObjectItemCaseSensitive(loss, "label_smoothing") != NULL &&
        s->loss != SL__LOSS_CROSS_ENTROPY)
        return fail(ps, "label_smoothing: only with cross_entropy");
    if (cJSON_GetObjectItemCaseSensitive(loss, "delta") != NULL && s->loss != SL__LOSS_HUBER)
        return fail(ps, "delta: only with huber");
    if (y->ndim != 1)
        return fail(ps, "the output \"%s\" must be one axis per sample (logits or predictions)",
                    y->name);
    if (s->loss == SL__LOSS_CROSS_ENTROPY && y->shape[0] < 2)
        return fail(ps, "cross_entropy needs at least 2 classes; the output \"%s\" has %u", y->name,
                    y->shape[0]);
    set_path(ps, "metrics");
    if (metrics == NULL)
        return SL_OK;
    if (!cJSON_IsArray(metrics) || cJSON_GetArraySize(metrics) > 8)
        return fail(ps, "expected an array of at most 8 names");
    i = 0;
    cJSON_ArrayForEach(m, metrics)
    {
        size_t k;
        if (!cJSON_IsString(m))
            return fail(ps, "[%zu]: expected a name", i);
        for (k = 0; k < 4 && strcmp(metric_names[k], m->valuestring) != 0; k++)
            ;
        if (k == 4)
            return fail(ps, "[%zu]: \"%.32s\" is not accuracy, recall_per_class, mae or rmse", i,
                        m->valuestring);
        if (s->metrics & (1u << k))
            return fail(ps, "[%zu]: %s twice", i, metric_names[k]);
        if ((k <= 1) != classify || (k == 1 && s->loss != SL__LOSS_CROSS_ENTROPY))
            return fail(ps, "[%zu]: %s does not go with the loss %s", i, metric_names[k],
                        losses[s->loss]);
        s->metrics |= 1u << k;
        i++;
    }
    return SL_OK;
}

void sl_spec_free(sl_spec *spec)
{
    if (spec == NULL)
        return;
    free(spec->t);
    free(spec->n);
    free(spec->p);
    sl_layout_free(spec->layout);
    free(spec->text);
    free(spec);
}

static int parse_document(parser *ps, const cJSON *root)
{
    static const char *const keys[] = {"starling_model", "name", "inputs",  "params", "nodes",
                                       "output",         "loss", "metrics", NULL};
    sl_spec *s = ps->s;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "starling_model");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    const cJSON *output = cJSON_GetObjectItemCaseSensitive(root, "output");
    int rc, idx;
    if (!cJSON_IsObject(root))
        return fail(ps, "a model spec is a JSON object");
    if ((rc = only_keys(ps, root, keys)) != SL_OK)
        return rc;
    if (!cJSON_IsNumber(v) || v->valuedouble != 1)
        return cJSON_IsNumber(v) ? SL_EVERSION
                                 : fail(ps, "starling_model: required, the format version 1");
    if (!cJSON_IsString(name) || name->valuestring[0] == '\0' || strlen(name->valuestring) > 63)
        return fail(ps, "name: required, 1-63 bytes");
    memcpy(s->name, name->valuestring, strlen(name->valuestring) + 1);
    set_path(ps, "inputs");
    if ((rc = parse_inputs(ps, cJSON_GetObjectItemCaseSensitive(root, "inputs"))) != SL_OK)
        return rc;
    set_path(ps, "params");
    if ((rc = parse_params(ps, cJSON_GetObjectItemCaseSensitive(root, "params"))) != SL_OK)
        return rc;
    set_path(ps, "nodes");
    if ((rc = parse_nodes(ps, cJSON_GetObjectItemCaseSensitive(root, "nodes"))) != SL_OK)
        return rc;
    set_path(ps, "output");
    if (!cJSON_IsString(output))
        return fail(ps, "required, a tensor name");
    idx = find_tensor(s, output->valuestring);
    if (idx < 0 || s->t[idx].kind != SL__T_ACT)
        return fail(ps, "\"%.64s\" is not the output of a node", output->valuestring);
    s->output = idx;
    s->t[idx].readers++;
    if ((rc = parse_loss(ps, cJSON_GetObjectItemCaseSensitive(root, "loss"),
                         cJSON_GetObjectItemCaseSensitive(root, "metrics"))) != SL_OK)
        return rc;
    set_path(ps, "params");
    for (size_t i = 0; i < s->np; i++)
        if (s->t[s->p[i].tensor].readers == 0)
            return fail(ps, "\"%s\" is read by no node", s->t[s->p[i].tensor].name);
    set_path(ps, "inputs");
    for (size_t i = 0; i < s->ninputs; i++)
        if (s->t[s->input[i]].readers == 0)
            return fail(ps, "\"%s\" is read by no node", s->t[s->input[i]].name);
    return SL_OK;
}

int sl_spec_parse(const char *json, size_t len, sl_spec **out, char *err, size_t errcap)
{
    parser ps;
    cJSON *root;
    sl_spec *s;
    int rc;
    if (err != NULL && errcap > 0)
        err[0] = '\0';
    if (json == NULL || out == NULL)
        return SL_EINVAL;
    memset(&ps, 0, sizeof ps);
    ps.err = err;
    ps.errcap = errcap;
    if (len > MAX_TEXT)
        return fail(&ps, "the document is larger than %u bytes", MAX_TEXT);
    root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at != NULL && at >= json && at <= json + len ? (size_t)(at - json) : len;
        if (err != NULL && errcap > 0)
            snprintf(err, errcap, "not JSON: syntax error at byte %zu", off);
        return SL_ESYNTAX;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        cJSON_Delete(root);
        return SL_ENOMEM;
    }
    ps.s = s;
    rc = parse_document(&ps, root);
    cJSON_Delete(root);
    if (rc == SL_OK) {
        s->text = malloc(len + 1);
        if (s->text == NULL) {
            rc = SL_ENOMEM;
        } else {
            memcpy(s->text, json, len);
            s->text[len] = '\0';
            s->text_len = len;
        }
    }
    if (rc == SL_EVERSION && err != NULL && errcap > 0)
        snprintf(err, errcap, "starling_model: this build reads model spec version 1");
    if (rc == SL_ENOMEM && err != NULL && errcap > 0)
        snprintf(err, errcap, "out of memory");
    if (rc != SL_OK) {
        sl_spec_free(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

/* ---- accessors --------------------------------------------------------------------------- */

const char *sl_spec_name(const sl_spec *spec)
{
    return spec->name;
}

const sl_layout *sl_spec_layout(const sl_spec *spec)
{
    return spec->layout;
}

const char *sl_spec_text(const sl_spec *spec, size_t *len)
{
    if (len != NULL)
        *len = spec->text_len;
    return spec->text;
}

size_t sl_spec_inputs(const sl_spec *spec)
{
    return spec->ninputs;
}

size_t sl_spec_input_size(const sl_spec *spec, size_t i)
{
    return i < spec->ninputs ? (size_t)spec->t[spec->input[i]].count : 0;
}

size_t sl_spec_output_size(const sl_spec *spec)
{
    return (size_t)spec->t[spec->output].count;
}

size_t sl_spec_nodes(const sl_spec *spec)
{
    return spec->nn;
}

sl_spec_loss sl_spec_loss_kind(const sl_spec *spec)
{
    return (sl_spec_loss)spec->loss;
}

int sl_spec_tensor_shape(const sl_spec *spec, const char *name, uint32_t *shape, size_t *ndim)
{
    int t;
    if (spec == NULL || name == NULL || shape == NULL || ndim == NULL)
        return SL_EINVAL;
    t = find_tensor(spec, name);
    if (t < 0)
        return SL_ENOENT;
    memcpy(shape, spec->t[t].shape, spec->t[t].ndim * sizeof *shape);
    *ndim = spec->t[t].ndim;
    return SL_OK;
}
