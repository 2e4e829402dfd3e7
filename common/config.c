/* config.c - declared keys set from files, the environment and argv. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "starling/common.h"

#define CONFIG_FILE_MAX (1u << 20)
#define CONFIG_KEY_MAX  64

typedef struct config_value {
    int set;
    char *text; /* STRING value, owned */
    union {
        int64_t i;
        double d;
        uint64_t u;
    } v;
} config_value;

struct sl_config {
    const sl_config_spec *specs;
    size_t n;
    config_value *values;
    char error[512];
};

static void set_error(sl_config *cfg, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void set_error(sl_config *cfg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->error, sizeof cfg->error, fmt, ap);
    va_end(ap);
}

static const char *type_name(sl_config_type t)
{
    switch (t) {
    case SL_CONFIG_STRING:
        return "string";
    case SL_CONFIG_INT:
        return "integer";
    case SL_CONFIG_DOUBLE:
        return "number";
    case SL_CONFIG_BOOL:
        return "boolean";
    case SL_CONFIG_SIZE:
        return "size";
    case SL_CONFIG_DURATION:
        return "duration";
    }
    return "?";
}

static long find_key(const sl_config *cfg, const char *key, size_t len)
{
    for (size_t i = 0; i < cfg->n; i++) {
        const char *k = cfg->specs[i].key;
        if (strlen(k) == len && strncmp(k, key, len) == 0)
            return (long)i;
    }
    return -1;
}

static int parse_int64(const char *s, int64_t *out)
{
    char *end;
    long long v;
    if (*s == '\0' || isspace((unsigned char)*s))
        return 0;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return 0;
    *out = (int64_t)v;
    return 1;
}

/* "<digits>[suffix]" with a suffix from @units; returns 1 and the scaled value. */
static int parse_scaled(const char *s, const char *const *suffixes, const uint64_t *scales,
                        size_t nunits, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (!isdigit((unsigned char)*s))
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return 0;
    for (size_t i = 0; i < nunits; i++) {
        if (strcmp(end, suffixes[i]) == 0) {
            if (scales[i] != 0 && v > UINT64_MAX / scales[i])
                return 0;
            *out = (uint64_t)v * scales[i];
            return 1;
        }
    }
    return 0;
}

static int in_bounds(const sl_config_spec *sp, double v)
{
    return sp->min > sp->max || (v >= sp->min && v <= sp->max);
}

/* Parse @text for spec @i into @val. On failure writes the reason into cfg->error. */
static int parse_value(sl_config *cfg, size_t i, const char *text, const char *origin,
                       config_value *val)
{
    static const char *const size_sfx[] = {"", "K", "M", "G", "KiB", "MiB", "GiB"};
    static const uint64_t size_scale[] = {1,    1024,        1024 * 1024, 1ull << 30,
                                          1024, 1024 * 1024, 1ull << 30};
    static const char *const dur_sfx[] = {"", "ms", "s", "m", "h"};
    static const uint64_t dur_scale[] = {1, 1, 1000, 60000, 3600000};
    const sl_config_spec *sp = &cfg->specs[i];
    const char *where = origin ? origin : "config";
    config_value v = {0};

    switch (sp->type) {
    case SL_CONFIG_STRING:
        v.text = strdup(text);
        if (v.text == NULL)
            return SL_ENOMEM;
        break;
    case SL_CONFIG_INT:
        if (!parse_int64(text, &v.v.i)) {
            set_error(cfg, "%s: %s: \"%s\" is not an integer", where, sp->key, text);
            return SL_ECONFIG_VALUE;
        }
        if (!in_bounds(sp, (double)v.v.i)) {
            set_error(cfg, "%s: %s: %s is outside [%.17g, %.17g]", where, sp->key, text, sp->min,
                      sp->max);
            return SL_ECONFIG_VALUE;
        }
        break;
    case SL_CONFIG_DOUBLE: {
        char *end;
        errno = 0;
        v.v.d = strtod(text, &end);
        if (*text == '\0' || *end != '\0' || errno == ERANGE || !isfinite(v.v.d)) {
            set_error(cfg, "%s: %s: \"%s\" is not a finite number", where, sp->key, text);
            return SL_ECONFIG_VALUE;
        }
        if (!in_bounds(sp, v.v.d)) {
            set_error(cfg, "%s: %s: %s is outside [%.17g, %.17g]", where, sp->key, text, sp->min,
                      sp->max);
            return SL_ECONFIG_VALUE;
        }
        break;
    }
    case SL_CONFIG_BOOL:
        if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes") ||
            !strcmp(text, "on"))
            v.v.i = 1;
        else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no") ||
                 !strcmp(text, "off"))
            v.v.i = 0;
        else {
            set_error(cfg, "%s: %s: \"%s\" is not a boolean (true/false)", where, sp->key, text);
            return SL_ECONFIG_VALUE;
        }
        break;
    case SL_CONFIG_SIZE:
        if (!parse_scaled(text, size_sfx, size_scale, 7, &v.v.u)) {
            set_error(cfg, "%s: %s: \"%s\" is not a size (e.g. 4096, 64K, 16M, 2G)", where, sp->key,
                      text);
            return SL_ECONFIG_VALUE;
        }
        if (!in_bounds(sp, (double)v.v.u)) {
            set_error(cfg, "%s: %s: %s is outside [%.17g, %.17g] bytes", where, sp->key, text,
                      sp->min, sp->max);
            return SL_ECONFIG_VALUE;
        }
        break;
    case SL_CONFIG_DURATION:
        if (!parse_scaled(text, dur_sfx, dur_scale, 5, &v.v.u) || v.v.u > INT64_MAX) {
            set_error(cfg, "%s: %s: \"%s\" is not a duration (e.g. 250ms, 30s, 5m, 1h)", where,
                      sp->key, text);
            return SL_ECONFIG_VALUE;
        }
        v.v.i = (int64_t)v.v.u;
        if (!in_bounds(sp, (double)v.v.i)) {
            set_error(cfg, "%s: %s: %s is outside [%.17g, %.17g] ms", where, sp->key, text, sp->min,
                      sp->max);
            return SL_ECONFIG_VALUE;
        }
        break;
    }
    v.set = 1;
    *val = v;
    return SL_OK;
}

int sl_config_create(const sl_config_spec *specs, size_t n, sl_config **out)
{
    sl_config *cfg;

    if (out == NULL || (specs == NULL && n > 0))
        return SL_EINVAL;
    cfg = calloc(1, sizeof *cfg);
    if (cfg == NULL)
        return SL_ENOMEM;
    cfg->values = calloc(n ? n : 1, sizeof *cfg->values);
    if (cfg->values == NULL) {
        free(cfg);
        return SL_ENOMEM;
    }
    cfg->specs = specs;
    cfg->n = n;
    for (size_t i = 0; i < n; i++) {
        if (specs[i].default_value != NULL) {
            int rc = parse_value(cfg, i, specs[i].default_value, "default", &cfg->values[i]);
            if (rc != SL_OK) {
                sl_config_free(cfg);
                return rc;
            }
        }
    }
    *out = cfg;
    return SL_OK;
}

void sl_config_free(sl_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->n; i++)
        free(cfg->values[i].text);
    free(cfg->values);
    free(cfg);
}

/* Set the key spelled by the first @klen bytes of @key. */
static int set_n(sl_config *cfg, const char *key, size_t klen, const char *value,
                 const char *origin)
{
    config_value v;
    long i = find_key(cfg, key, klen);
    int rc;

    if (i < 0) {
        set_error(cfg, "%s: unknown key \"%.*s\"", origin ? origin : "config",
                  (int)(klen > CONFIG_KEY_MAX ? CONFIG_KEY_MAX : klen), key);
        return SL_ECONFIG_KEY;
    }
    rc = parse_value(cfg, (size_t)i, value, origin, &v);
    if (rc != SL_OK)
        return rc;
    free(cfg->values[i].text);
    cfg->values[i] = v;
    return SL_OK;
}

int sl_config_set(sl_config *cfg, const char *key, const char *value, const char *origin)
{
    if (cfg == NULL || key == NULL || value == NULL)
        return SL_EINVAL;
    return set_n(cfg, key, strlen(key), value, origin);
}

int sl_config_load_text(sl_config *cfg, const char *text, size_t len, const char *name)
{
    size_t pos = 0;
    unsigned lineno = 0;

    if (cfg == NULL || (text == NULL && len > 0))
        return SL_EINVAL;
    while (pos < len) {
        size_t start = pos, end, ks, ke, vs, ve;
        char origin[300];
        char *value;
        int rc;

        while (pos < len && text[pos] != '\n')
            pos++;
        end = pos;
        pos++; /* skip '\n' */
        lineno++;
        snprintf(origin, sizeof origin, "%s:%u", name ? name : "config", lineno);
        if (end > start && text[end - 1] == '\r')
            end--;
        ks = start;
        while (ks < end && isspace((unsigned char)text[ks]))
            ks++;
        if (ks == end || text[ks] == '#')
            continue;
        if (memchr(text + ks, '\0', end - ks) != NULL) {
            set_error(cfg, "%s: NUL byte in line", origin);
            return SL_ESYNTAX;
        }
        ke = ks;
        while (ke < end && text[ke] != '=')
            ke++;
        if (ke == end) {
            set_error(cfg, "%s: expected key = value", origin);
            return SL_ESYNTAX;
        }
        vs = ke + 1;
        while (ke > ks && isspace((unsigned char)text[ke - 1]))
            ke--;
        if (ke == ks) {
            set_error(cfg, "%s: missing key before '='", origin);
            return SL_ESYNTAX;
        }
        while (vs < end && isspace((unsigned char)text[vs]))
            vs++;
        ve = end;
        while (ve > vs && isspace((unsigned char)text[ve - 1]))
            ve--;
        if (ve > vs && text[vs] == '"') {
            if (ve - vs < 2 || text[ve - 1] != '"') {
                set_error(cfg, "%s: unterminated quoted value", origin);
                return SL_ESYNTAX;
            }
            vs++;
            ve--;
        }
        value = strndup(text + vs, ve - vs);
        if (value == NULL)
            return SL_ENOMEM;
        rc = set_n(cfg, text + ks, ke - ks, value, origin);
        free(value);
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

int sl_config_load_file(sl_config *cfg, const char *path)
{
    void *buf;
    size_t len;
    int rc;

    if (cfg == NULL || path == NULL)
        return SL_EINVAL;
    rc = sl_fs_read_file(path, CONFIG_FILE_MAX, &buf, &len);
    if (rc != SL_OK) {
        set_error(cfg, "%s: cannot read: %s", path, sl_strerror(rc));
        return rc;
    }
    rc = sl_config_load_text(cfg, buf, len, path);
    free(buf);
    return rc;
}

int sl_config_load_env(sl_config *cfg, const char *prefix, char *const *envp, unsigned flags)
{
    size_t plen;

    if (cfg == NULL || prefix == NULL)
        return SL_EINVAL;
    if (envp == NULL)
        return SL_OK;
    plen = strlen(prefix);
    for (char *const *e = envp; *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        char key[CONFIG_KEY_MAX + 1];
        size_t klen;
        int rc;

        if (eq == NULL || strncmp(*e, prefix, plen) != 0)
            continue;
        klen = (size_t)(eq - *e) - plen;
        if (klen == 0 || klen > CONFIG_KEY_MAX) {
            if (flags & SL_CONFIG_ENV_STRICT) {
                set_error(cfg, "environment: unknown variable %.*s", (int)(eq - *e), *e);
                return SL_ECONFIG_KEY;
            }
            continue;
        }
        for (size_t i = 0; i < klen; i++)
            key[i] = (char)tolower((unsigned char)(*e)[plen + i]);
        key[klen] = '\0';
        if (find_key(cfg, key, klen) < 0) {
            if (flags & SL_CONFIG_ENV_STRICT) {
                set_error(cfg, "environment: unknown variable %.*s", (int)(eq - *e), *e);
                return SL_ECONFIG_KEY;
            }
            continue;
        }
        {
            char origin[CONFIG_KEY_MAX + 64];
            snprintf(origin, sizeof origin, "environment %.*s", (int)(eq - *e), *e);
            rc = set_n(cfg, key, klen, eq + 1, origin);
        }
        if (rc != SL_OK)
            return rc;
    }
    return SL_OK;
}

int sl_config_load_args(sl_config *cfg, int argc, char *const *argv, int *first_positional)
{
    int i = 1;

    if (cfg == NULL || argc < 0 || (argv == NULL && argc > 0))
        return SL_EINVAL;
    while (i < argc) {
        const char *a = argv[i];
        const char *eq;
        char key[CONFIG_KEY_MAX + 1];
        char origin[CONFIG_KEY_MAX + 32];
        size_t klen;
        long k;
        int rc;

        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strncmp(a, "--", 2) != 0)
            break;
        a += 2;
        eq = strchr(a, '=');
        klen = eq ? (size_t)(eq - a) : strlen(a);
        if (klen == 0 || klen > CONFIG_KEY_MAX) {
            set_error(cfg, "command line: unknown option %s", argv[i]);
            return SL_ECONFIG_KEY;
        }
        for (size_t j = 0; j < klen; j++)
            key[j] = a[j] == '-' ? '_' : a[j];
        key[klen] = '\0';
        snprintf(origin, sizeof origin, "option --%s", key);
        k = find_key(cfg, key, klen);
        if (k < 0 && eq == NULL && klen > 3 && strncmp(key, "no_", 3) == 0) {
            long nk = find_key(cfg, key + 3, klen - 3);
            if (nk >= 0 && cfg->specs[nk].type == SL_CONFIG_BOOL) {
                rc = set_n(cfg, key + 3, klen - 3, "false", origin);
                if (rc != SL_OK)
                    return rc;
                i++;
                continue;
            }
        }
        if (k < 0) {
            set_error(cfg, "command line: unknown option %s", argv[i]);
            return SL_ECONFIG_KEY;
        }
        if (eq != NULL) {
            rc = set_n(cfg, key, klen, eq + 1, origin);
            i++;
        } else if (cfg->specs[k].type == SL_CONFIG_BOOL) {
            rc = set_n(cfg, key, klen, "true", origin);
            i++;
        } else if (i + 1 < argc) {
            rc = set_n(cfg, key, klen, argv[i + 1], origin);
            i += 2;
        } else {
            set_error(cfg, "command line: option --%s needs a value", key);
            return SL_ECONFIG_VALUE;
        }
        if (rc != SL_OK)
            return rc;
    }
    if (first_positional != NULL)
        *first_positional = i;
    return SL_OK;
}

static int get_value(const sl_config *cfg, const char *key, sl_config_type type,
                     const config_value **out)
{
    long i;
    if (cfg == NULL || key == NULL)
        return SL_EINVAL;
    i = find_key(cfg, key, strlen(key));
    if (i < 0)
        return SL_ECONFIG_KEY;
    if (cfg->specs[i].type != type)
        return SL_EINVAL;
    *out = &cfg->values[i];
    return SL_OK;
}

int sl_config_get_string(const sl_config *cfg, const char *key, const char **out)
{
    const config_value *v;
    int rc = get_value(cfg, key, SL_CONFIG_STRING, &v);
    if (rc == SL_OK)
        *out = v->set ? v->text : NULL;
    return rc;
}

#define DEFINE_GETTER(fn, type, ctype, field)                 \
    int fn(const sl_config *cfg, const char *key, ctype *out) \
    {                                                         \
        const config_value *v;                                \
        int rc = get_value(cfg, key, type, &v);               \
        if (rc != SL_OK)                                      \
            return rc;                                        \
        if (!v->set)                                          \
            return SL_ENOENT;                                 \
        *out = (ctype)v->v.field;                             \
        return SL_OK;                                         \
    }

DEFINE_GETTER(sl_config_get_int, SL_CONFIG_INT, int64_t, i)
DEFINE_GETTER(sl_config_get_double, SL_CONFIG_DOUBLE, double, d)
DEFINE_GETTER(sl_config_get_bool, SL_CONFIG_BOOL, int, i)
DEFINE_GETTER(sl_config_get_size, SL_CONFIG_SIZE, uint64_t, u)
DEFINE_GETTER(sl_config_get_duration_ms, SL_CONFIG_DURATION, int64_t, i)

const char *sl_config_error(const sl_config *cfg)
{
    return cfg ? cfg->error : "";
}

size_t sl_config_usage(const sl_config *cfg, char *out, size_t cap)
{
    size_t need = 0;
    if (cfg == NULL)
        return 0;
    if (cap > 0)
        out[0] = '\0';
    for (size_t i = 0; i < cfg->n; i++) {
        const sl_config_spec *sp = &cfg->specs[i];
        char line[512], opt[CONFIG_KEY_MAX + 3];
        int n;
        size_t j;
        for (j = 0; sp->key[j] != '\0' && j < CONFIG_KEY_MAX; j++)
            opt[j] = sp->key[j] == '_' ? '-' : sp->key[j];
        opt[j] = '\0';
        n = snprintf(line, sizeof line, "  --%-24s <%s>  %s%s%s%s\n", opt, type_name(sp->type),
                     sp->help ? sp->help : "", sp->default_value ? " (default " : "",
                     sp->default_value ? sp->default_value : "", sp->default_value ? ")" : "");
        if (n < 0)
            continue;
        if (need + (size_t)n < cap)
            memcpy(out + need, line, (size_t)n + 1);
        else if (need < cap)
            out[need] = '\0';
        need += (size_t)n;
    }
    return need;
}
