/*
 * The data contract (device/data/DATA_CONTRACT.md) against its parser: the
 * document's worked example read out of the document, valid contracts of
 * every kind with every derived field (shape, sample_size, raw, raw_size,
 * tdim, nstats, the preprocessing's parameters), and each refusal with the
 * JSON path its message must start with; then sl_contract_finish (scale, then
 * standardise: one value, per channel, per input value, per feature of a
 * window) and sl_contract_heldout (never at share 0, the share over many
 * samples, stable, and a function of the input and the label).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../support/sl_test.h"
#include "starling/contract.h"

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source tree"
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sl_contract *parse_ok(const char *json)
{
    char err[512] = "";
    sl_contract *c = NULL;
    int rc = sl_contract_parse(json, strlen(json), &c, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("refused (%d: %s): %s", rc, err, json);
    assert_non_null(c);
    return c;
}

/* @json must be refused with @status and a message that starts "@path: " and holds @words. */
static void refused(const char *json, int status, const char *path, const char *words)
{
    char err[512] = "", want[256];
    sl_contract *c = (sl_contract *)0x1;
    int rc = sl_contract_parse(json, strlen(json), &c, err, sizeof err);
    if (rc != status)
        fail_msg("status %d (%s), wanted %d: %s", rc, err, status, json);
    assert_ptr_equal(c, (sl_contract *)0x1); /* untouched */
    snprintf(want, sizeof want, "%s: ", path);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("message \"%s\" does not start with \"%s\"", err, want);
    if (words != NULL && strstr(err, words) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err, words);
    /* the same refusal without a message buffer */
    assert_int_equal(sl_contract_parse(json, strlen(json), &c, NULL, 0), status);
}

static void expect_shape(const sl_contract *c, size_t ndim, size_t d0, size_t d1, size_t d2)
{
    const size_t want[3] = {d0, d1, d2};
    size_t product = 1;
    assert_int_equal(c->ndim, ndim);
    for (size_t i = 0; i < ndim; i++) {
        assert_int_equal(c->shape[i], want[i]);
        product *= want[i];
    }
    assert_int_equal(c->sample_size, product);
}

/* ---- the document ------------------------------------------------------------------------- */

static char *read_doc(size_t *len)
{
    FILE *f = fopen(SL_SOURCE_DIR "/device/data/DATA_CONTRACT.md", "rb");
    char *b;
    long n;
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The worked example of DATA_CONTRACT.md, parsed straight out of the document. */
static void test_document_example(void **state)
{
    size_t len;
    char *doc = read_doc(&len), err[256];
    const char *start = strstr(doc, "```json\n"), *end;
    sl_contract *c = NULL;
    (void)state;
    assert_non_null(start);
    start += 8;
    end = strstr(start, "```");
    assert_non_null(end);
    /* the block, not NUL-terminated where it ends: the parser takes the length */
    assert_int_equal(sl_contract_parse(start, (size_t)(end - start), &c, err, sizeof err), SL_OK);
    assert_int_equal(c->nfeatures, 3);
    assert_string_equal(c->features[0], "alcohol");
    assert_string_equal(c->features[1], "malic_acid");
    assert_string_equal(c->features[2], "ash");
    expect_shape(c, 1, 3, 0, 0);
    assert_int_equal(c->raw, SL_RAW_VALUES);
    assert_int_equal(c->raw_size, 3);
    assert_int_equal(c->label_kind, SL_LABEL_CLASS);
    assert_int_equal(c->nlabel_columns, 1);
    assert_string_equal(c->label_columns[0], "target");
    assert_int_equal(c->nclasses, 3);
    assert_string_equal(c->classes[2], "class_2");
    assert_int_equal(c->tdim, 1);
    assert_int_equal(c->has_scale, 0);
    assert_int_equal(c->nstats, 3);
    assert_true(c->mean[0] == 13.0f && c->mean[1] == 2.3f && c->mean[2] == 2.4f);
    assert_true(c->std[0] == 0.8f && c->std[1] == 1.1f && c->std[2] == 0.3f);
    assert_int_equal(c->min_samples, 10);
    assert_true(c->eval_share == 0.2);
    sl_contract_free(c);
    free(doc);
}

/* ---- valid contracts --------------------------------------------------------------------------
 */

static void test_tabular(void **state)
{
    sl_contract *c;
    (void)state;
    /* features, classes by count, standardisation per feature; the defaults */
    c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\", \"c\", \"d\"]},"
                 " \"label\": {\"kind\": \"class\", \"classes\": 4},"
                 " \"preprocess\": {\"standardize\": {\"mean\": [1, 2, 3, 4],"
                 " \"std\": [0.5, 1, 2, 4]}}}");
    expect_shape(c, 1, 4, 0, 0);
    assert_int_equal(c->raw, SL_RAW_VALUES);
    assert_int_equal(c->raw_size, 4);
    assert_int_equal(c->nclasses, 4);
    assert_string_equal(c->classes[0], "0");
    assert_string_equal(c->classes[3], "3");
    assert_int_equal(sl_contract_class(c, "2"), 2);
    assert_int_equal(sl_contract_class(c, "4"), -1);
    assert_int_equal(sl_contract_class(c, NULL), -1);
    assert_int_equal(c->tdim, 1);
    assert_int_equal(c->nlabel_columns, 0);
    assert_null(c->label_columns);
    assert_int_equal(c->nstats, 4);
    assert_true(c->mean[3] == 4.0f && c->std[0] == 0.5f);
    assert_int_equal(c->has_scale, 0);
    assert_true(c->scale == 1.0f && c->offset == 0.0f);
    assert_int_equal(c->min_samples, 1);
    assert_true(c->eval_share == 0.0);
    sl_contract_free(c);

    /* class names, the version, one number for every value, a scale, an explicit 2-D shape */
    c = parse_ok("{\"contract\": 1, \"input\": {\"features\": [\"x\", \"y\", \"z\", \"w\"],"
                 " \"shape\": [2, 2]},"
                 " \"label\": {\"kind\": \"class\", \"classes\": [\"cat\", \"dog\", \"cow\"],"
                 " \"column\": \"animal\"},"
                 " \"preprocess\": {\"scale\": {\"factor\": 0.5, \"offset\": -1},"
                 " \"standardize\": {\"mean\": 3, \"std\": 2}},"
                 " \"min_samples\": 7, \"evaluation\": {\"share\": 0}}");
    expect_shape(c, 2, 2, 2, 0);
    assert_int_equal(c->raw_size, 4);
    assert_int_equal(c->nclasses, 3);
    assert_int_equal(sl_contract_class(c, "cat"), 0);
    assert_int_equal(sl_contract_class(c, "cow"), 2);
    assert_int_equal(sl_contract_class(c, "bird"), -1);
    assert_int_equal(sl_contract_class(c, "1"), -1); /* named classes are not numbered */
    assert_string_equal(c->label_columns[0], "animal");
    assert_int_equal(c->has_scale, 1);
    assert_true(c->scale == 0.5f && c->offset == -1.0f);
    assert_int_equal(c->nstats, 1);
    assert_true(c->mean[0] == 3.0f && c->std[0] == 2.0f);
    assert_int_equal(c->min_samples, 7);
    assert_true(c->eval_share == 0.0);
    sl_contract_free(c);

    /* no features: the shape says what a row is; standardisation per input value */
    c = parse_ok("{\"input\": {\"shape\": [3]}, \"label\": {\"kind\": \"class\", \"classes\": 2},"
                 " \"preprocess\": {\"standardize\": {\"mean\": [0, 1, 2], \"std\": [1, 1, 1]}},"
                 " \"evaluation\": {\"share\": 0.9}}");
    assert_int_equal(c->nfeatures, 0);
    assert_null(c->features);
    expect_shape(c, 1, 3, 0, 0);
    assert_int_equal(c->raw_size, 3);
    assert_int_equal(c->nstats, 3);
    assert_true(c->eval_share == 0.9);
    sl_contract_free(c);

    sl_contract_free(NULL);
}

static void test_multilabel_and_targets(void **state)
{
    sl_contract *c;
    (void)state;
    c = parse_ok("{\"input\": {\"features\": [\"f1\", \"f2\"]},"
                 " \"label\": {\"kind\": \"multilabel\", \"classes\": [\"x\", \"y\", \"z\"],"
                 " \"columns\": [\"is_x\", \"is_y\", \"is_z\"]}}");
    assert_int_equal(c->label_kind, SL_LABEL_MULTILABEL);
    assert_int_equal(c->nclasses, 3);
    assert_int_equal(c->tdim, 3);
    assert_int_equal(c->nlabel_columns, 3);
    assert_string_equal(c->label_columns[1], "is_y");
    expect_shape(c, 1, 2, 0, 0);
    sl_contract_free(c);

    /* multi-label without columns (a NumPy y of (n, classes)); one class is enough */
    c = parse_ok("{\"input\": {\"shape\": [5]}, \"label\": {\"kind\": \"multilabel\","
                 " \"classes\": 1}}");
    assert_int_equal(c->tdim, 1);
    assert_int_equal(c->nclasses, 1);
    assert_int_equal(c->nlabel_columns, 0);
    sl_contract_free(c);

    /* multi-target: a column per target, dim derived */
    c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\", \"c\"]},"
                 " \"label\": {\"kind\": \"target\", \"columns\": [\"t1\", \"t2\"]}}");
    assert_int_equal(c->label_kind, SL_LABEL_TARGET);
    assert_int_equal(c->tdim, 2);
    assert_int_equal(c->nclasses, 0);
    assert_null(c->classes);
    assert_int_equal(c->nlabel_columns, 2);
    assert_string_equal(c->label_columns[0], "t1");
    assert_string_equal(c->label_columns[1], "t2");
    sl_contract_free(c);

    /* ... dim given and agreeing */
    c = parse_ok("{\"input\": {\"features\": [\"a\"]},"
                 " \"label\": {\"kind\": \"target\", \"columns\": [\"t1\", \"t2\"], \"dim\": 2}}");
    assert_int_equal(c->tdim, 2);
    sl_contract_free(c);

    /* dim without columns; a single target by default */
    c = parse_ok("{\"input\": {\"shape\": [4]}, \"label\": {\"kind\": \"target\", \"dim\": 3}}");
    assert_int_equal(c->tdim, 3);
    assert_int_equal(c->nlabel_columns, 0);
    sl_contract_free(c);
    c = parse_ok("{\"input\": {\"shape\": [4]}, \"label\": {\"kind\": \"target\","
                 " \"column\": \"price\"}}");
    assert_int_equal(c->tdim, 1);
    assert_int_equal(c->nlabel_columns, 1);
    assert_string_equal(c->label_columns[0], "price");
    sl_contract_free(c);
}

static void test_image(void **state)
{
    sl_contract *c;
    (void)state;
    c = parse_ok("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": 10},"
                 " \"preprocess\": {\"image\": {\"width\": 32, \"height\": 24, \"channels\": 3},"
                 " \"scale\": {\"factor\": 0.00392156862745098},"
                 " \"standardize\": {\"mean\": [0.5, 0.4, 0.3], \"std\": [0.2, 0.25, 0.3]}}}");
    assert_int_equal(c->raw, SL_RAW_IMAGE);
    assert_int_equal(c->image_width, 32);
    assert_int_equal(c->image_height, 24);
    assert_int_equal(c->image_channels, 3);
    expect_shape(c, 3, 3, 24, 32);
    assert_int_equal(c->raw_size, 3 * 24 * 32);
    assert_int_equal(c->nstats, 3);
    assert_int_equal(c->has_scale, 1);
    assert_true(c->offset == 0.0f);
    sl_contract_free(c);

    /* grey by default; an explicit shape of the same size (flat) is taken as given */
    c = parse_ok("{\"input\": {\"shape\": [784]}, \"label\": {\"kind\": \"class\","
                 " \"classes\": 10}, \"preprocess\": {\"image\": {\"width\": 28,"
                 " \"height\": 28}}}");
    assert_int_equal(c->image_channels, 1);
    expect_shape(c, 1, 784, 0, 0);
    assert_int_equal(c->raw_size, 784);
    sl_contract_free(c);

    c = parse_ok("{\"input\": {\"shape\": [1, 28, 28]}, \"label\": {\"kind\": \"class\","
                 " \"classes\": 10}, \"preprocess\": {\"image\": {\"width\": 28,"
                 " \"height\": 28, \"channels\": 1}}}");
    expect_shape(c, 3, 1, 28, 28);
    sl_contract_free(c);
}

static void test_audio(void **state)
{
    sl_contract *c;
    (void)state;
    /* every default but frames */
    c = parse_ok("{\"input\": {}, \"label\": {\"kind\": \"class\", \"classes\": [\"yes\","
                 " \"no\"]}, \"preprocess\": {\"audio\": {\"frames\": 98}}}");
    assert_int_equal(c->raw, SL_RAW_AUDIO);
    assert_int_equal(c->sample_rate, 16000);
    assert_int_equal(c->n_fft, 512);
    assert_int_equal(c->hop, 160);
    assert_int_equal(c->n_mels, 40);
    assert_int_equal(c->frames, 98);
    assert_true(c->fmin == 0.0f && c->fmax == 8000.0f);
    expect_shape(c, 3, 1, 40, 98);
    assert_int_equal(c->raw_size, 97 * 160 + 512); /* samples of a clip */
    sl_contract_free(c);

    /* everything given; [n_mels, frames] as the shape; standardised per mel band */
    c = parse_ok("{\"input\": {\"shape\": [20, 11]}, \"label\": {\"kind\": \"class\","
                 " \"classes\": 3}, \"preprocess\": {\"audio\": {\"sample_rate\": 8000,"
                 " \"n_fft\": 256, \"hop\": 80, \"n_mels\": 20, \"frames\": 11, \"fmin\": 20,"
                 " \"fmax\": 4000}, \"standardize\": {\"mean\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9,"
                 " 10, 11, 12, 13, 14, 15, 16, 17, 18, 19], \"std\": [2, 2, 2, 2, 2, 2, 2, 2, 2, 2,"
                 " 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]}}}");
    assert_int_equal(c->sample_rate, 8000);
    assert_int_equal(c->n_fft, 256);
    assert_int_equal(c->hop, 80);
    assert_int_equal(c->n_mels, 20);
    assert_true(c->fmin == 20.0f && c->fmax == 4000.0f);
    expect_shape(c, 2, 20, 11, 0);
    assert_int_equal(c->raw_size, 10 * 80 + 256);
    sl_contract_free(c);
}

static void test_window(void **state)
{
    sl_contract *c;
    const char *head = "{\"input\": {\"features\": [\"ax\", \"ay\", \"az\"]}, \"label\": ";
    char json[512];
    (void)state;
    /* classes: stride = size, label of the last row */
    snprintf(json, sizeof json,
             "%s{\"kind\": \"class\", \"classes\": [\"walk\", \"run\"]},"
             " \"preprocess\": {\"window\": {\"size\": 8}}}",
             head);
    c = parse_ok(json);
    assert_int_equal(c->raw, SL_RAW_SERIES);
    assert_int_equal(c->window, 8);
    assert_int_equal(c->stride, 8);
    assert_int_equal(c->window_rule, SL_WINDOW_LAST);
    expect_shape(c, 2, 3, 8, 0);
    assert_int_equal(c->raw_size, 3);
    assert_int_equal(c->tdim, 1);
    sl_contract_free(c);

    snprintf(json, sizeof json,
             "%s{\"kind\": \"class\", \"classes\": 2}, \"preprocess\": {\"window\": {\"size\": 4,"
             " \"stride\": 2, \"label\": \"majority\"}, \"standardize\": {\"mean\": [1, 2, 3],"
             " \"std\": [1, 1, 1]}}}",
             head);
    c = parse_ok(json);
    assert_int_equal(c->stride, 2);
    assert_int_equal(c->window_rule, SL_WINDOW_MAJORITY);
    assert_int_equal(c->nstats, 3); /* per feature: the first axis of [features, size] */
    sl_contract_free(c);

    snprintf(json, sizeof json,
             "%s{\"kind\": \"class\", \"classes\": 2}, \"preprocess\": {\"window\": {\"size\": 4,"
             " \"label\": \"last\"}}}",
             head);
    c = parse_ok(json);
    assert_int_equal(c->window_rule, SL_WINDOW_LAST);
    sl_contract_free(c);

    /* targets: the mean by default; last allowed */
    snprintf(
        json, sizeof json,
        "%s{\"kind\": \"target\"}, \"preprocess\": {\"window\": {\"size\": 5, \"stride\": 1}}}",
        head);
    c = parse_ok(json);
    assert_int_equal(c->window_rule, SL_WINDOW_MEAN);
    assert_int_equal(c->stride, 1);
    expect_shape(c, 2, 3, 5, 0);
    sl_contract_free(c);
    snprintf(json, sizeof json,
             "%s{\"kind\": \"target\"}, \"preprocess\": {\"window\": {\"size\": 5,"
             " \"label\": \"mean\"}}}",
             head);
    c = parse_ok(json);
    assert_int_equal(c->window_rule, SL_WINDOW_MEAN);
    sl_contract_free(c);
    snprintf(json, sizeof json,
             "%s{\"kind\": \"target\"}, \"preprocess\": {\"window\": {\"size\": 5,"
             " \"label\": \"last\"}}}",
             head);
    c = parse_ok(json);
    assert_int_equal(c->window_rule, SL_WINDOW_LAST);
    sl_contract_free(c);

    /* multi-label: the last row's by default; an explicit shape of the window's size */
    c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\"], \"shape\": [2, 6]},"
                 " \"label\": {\"kind\": \"multilabel\", \"classes\": 3},"
                 " \"preprocess\": {\"window\": {\"size\": 6, \"stride\": 3}}}");
    assert_int_equal(c->window_rule, SL_WINDOW_LAST);
    assert_int_equal(c->tdim, 3);
    expect_shape(c, 2, 2, 6, 0);
    sl_contract_free(c);
}

/* ---- refusals ------------------------------------------------------------------------------- */

#define FEAT3  "\"input\": {\"features\": [\"a\", \"b\", \"c\"]}"
#define CLASS2 "\"label\": {\"kind\": \"class\", \"classes\": 2}"

static void test_refused_document(void **state)
{
    char err[256] = "";
    sl_contract *c = NULL;
    (void)state;
    refused("{", SL_ESYNTAX, "data contract", "not a JSON object");
    refused("", SL_ESYNTAX, "data contract", NULL);
    refused("[1, 2]", SL_ESYNTAX, "data contract", "not a JSON object");
    refused("\"contract\"", SL_ESYNTAX, "data contract", NULL);
    refused("{" FEAT3 ", " CLASS2 "} trailing", SL_ESYNTAX, "data contract", NULL);
    /* a document too large is refused before it is read */
    assert_int_equal(sl_contract_parse("{}", SL_CONTRACT_MAX_BYTES + 1, &c, err, sizeof err),
                     SL_ETOOBIG);
    assert_null(c);
    assert_non_null(strstr(err, "larger than"));
    assert_int_equal(sl_contract_parse(NULL, 2, &c, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_contract_parse("{}", 2, NULL, err, sizeof err), SL_EINVAL);
    /* a message cut to its buffer stays a string */
    memset(err, 'x', sizeof err);
    assert_int_equal(sl_contract_parse("{\"input\": 1}", 12, &c, err, 8), SL_EINVAL);
    assert_int_equal(strlen(err), 7);

    /* white space around the object is fine, and so is the NUL of a C string */
    {
        const char *padded = "\n  {\"input\": {\"shape\": [2]}, " CLASS2 "}\r\n\t ";
        assert_int_equal(sl_contract_parse(padded, strlen(padded) + 1, &c, err, sizeof err), SL_OK);
        assert_int_equal(c->sample_size, 2);
        sl_contract_free(c);
        c = NULL;
    }
    /* a member given twice: cJSON would take the first, another reader the last */
    refused("{" FEAT3 ", " CLASS2 ", \"min_samples\": 5, \"min_samples\": 50}", SL_EINVAL,
            "data contract", "member \"min_samples\" given twice");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"scale\": {\"factor\": 2, \"factor\": 3}}}",
            SL_EINVAL, "preprocess.scale", "member \"factor\" given twice");

    /* unknown members, at the top and nested */
    refused("{" FEAT3 ", " CLASS2 ", \"labels\": 1}", SL_EINVAL, "data contract",
            "unknown member \"labels\"");
    refused("{\"input\": {\"feature\": [\"a\"]}, " CLASS2 "}", SL_EINVAL, "input",
            "unknown member \"feature\"");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 2, \"colum\": \"y\"}}",
            SL_EINVAL, "label", "unknown member \"colum\"");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"standardise\": {}}}", SL_EINVAL,
            "preprocess", "unknown member \"standardise\"");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": 0, \"std\": 1, \"var\": 1}}}",
            SL_EINVAL, "preprocess.standardize", "unknown member \"var\"");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"scale\": {\"factr\": 2}}}", SL_EINVAL,
            "preprocess.scale", "unknown member \"factr\"");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 2, \"height\": 2, \"depth\": 8}}}",
            SL_EINVAL, "preprocess.image", "unknown member \"depth\"");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 2, \"n_fft\": 512, \"hopp\": 1}}}",
            SL_EINVAL, "preprocess.audio", "unknown member \"hopp\"");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"window\": {\"size\": 2, \"step\": 1}}}",
            SL_EINVAL, "preprocess.window", "unknown member \"step\"");
    refused("{" FEAT3 ", " CLASS2 ", \"evaluation\": {\"shares\": 0.1}}", SL_EINVAL, "evaluation",
            "unknown member \"shares\"");

    /* the top-level members */
    refused("{" CLASS2 "}", SL_EINVAL, "input", "is required");
    refused("{\"input\": [1], " CLASS2 "}", SL_EINVAL, "input", "is required");
    refused("{" FEAT3 "}", SL_EINVAL, "label", "is required");
    refused("{" FEAT3 ", \"label\": \"class\"}", SL_EINVAL, "label", "is required");
    refused("{\"contract\": 2, " FEAT3 ", " CLASS2 "}", SL_EINVAL, "contract",
            "whole number in [1, 1]");
    refused("{\"input\": {}, " CLASS2 "}", SL_EINVAL, "input",
            "names its features or gives its shape");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": [1]}", SL_EINVAL, "preprocess",
            "must be an object");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"image\": 3}}", SL_EINVAL,
            "preprocess.image", "must be an object");
    refused("{" FEAT3 ", " CLASS2 ", \"min_samples\": 0}", SL_EINVAL, "min_samples",
            "whole number in [1, 1073741824]");
    refused("{" FEAT3 ", " CLASS2 ", \"min_samples\": 2.5}", SL_EINVAL, "min_samples", NULL);
    refused("{" FEAT3 ", " CLASS2 ", \"min_samples\": \"10\"}", SL_EINVAL, "min_samples", NULL);
    refused("{" FEAT3 ", " CLASS2 ", \"evaluation\": {\"share\": 0.95}}", SL_EINVAL,
            "evaluation.share", "[0, 0.9]");
    refused("{" FEAT3 ", " CLASS2 ", \"evaluation\": {\"share\": -0.1}}", SL_EINVAL,
            "evaluation.share", NULL);
    refused("{" FEAT3 ", " CLASS2 ", \"evaluation\": 0.2}", SL_EINVAL, "evaluation",
            "must be an object");
}

static void test_refused_input_and_label(void **state)
{
    (void)state;
    refused("{\"input\": {\"features\": []}, " CLASS2 "}", SL_EINVAL, "input.features",
            "1 to 65536 names");
    refused("{\"input\": {\"features\": \"a\"}, " CLASS2 "}", SL_EINVAL, "input.features", NULL);
    refused("{\"input\": {\"features\": [\"a\", \"\"]}, " CLASS2 "}", SL_EINVAL, "input.features",
            "entry 1 must be a non-empty name");
    refused("{\"input\": {\"features\": [\"a\", 2]}, " CLASS2 "}", SL_EINVAL, "input.features",
            "entry 1");
    refused("{\"input\": {\"features\": [\"a\", \"b\", \"a\"]}, " CLASS2 "}", SL_EINVAL,
            "input.features", "\"a\" is named twice");
    refused("{\"input\": {\"shape\": []}, " CLASS2 "}", SL_EINVAL, "input.shape", "1 to 4 sizes");
    refused("{\"input\": {\"shape\": [2], \"dtype\": \"int16\"}, " CLASS2 "}", SL_EINVAL,
            "input.dtype", "\"float32\", \"float64\", \"uint8\" or \"int64\"");
    refused("{\"input\": {\"shape\": [2], \"dtype\": 4}, " CLASS2 "}", SL_EINVAL, "input.dtype",
            NULL);
    refused("{\"input\": {\"shape\": [1, 2, 3, 4, 5]}, " CLASS2 "}", SL_EINVAL, "input.shape",
            "1 to 4 sizes");
    refused("{\"input\": {\"shape\": [3, 0]}, " CLASS2 "}", SL_EINVAL, "input.shape",
            "entry 1 must be a whole number");
    refused("{\"input\": {\"shape\": [2.5]}, " CLASS2 "}", SL_EINVAL, "input.shape", "entry 0");
    refused("{\"input\": {\"shape\": [4096, 4096, 2]}, " CLASS2 "}", SL_EINVAL, "input.shape",
            "more than 16777216 values");
    /* shape against the feature list */
    refused("{\"input\": {\"features\": [\"a\", \"b\", \"c\"], \"shape\": [4]}, " CLASS2 "}",
            SL_EINVAL, "input.shape", "holds 4 values; the feature list makes 3");

    /* the label's kind */
    refused("{" FEAT3 ", \"label\": {\"kind\": \"regression\"}}", SL_EINVAL, "label.kind",
            "\"regression\" is not");
    refused("{" FEAT3 ", \"label\": {\"classes\": 2}}", SL_EINVAL, "label.kind", NULL);
    refused("{" FEAT3 ", \"label\": {\"kind\": 1, \"classes\": 2}}", SL_EINVAL, "label.kind", NULL);
    /* classes */
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\"}}", SL_EINVAL, "label.classes",
            "is required");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": [\"a\", \"b\", \"a\"]}}",
            SL_EINVAL, "label.classes", "\"a\" is named twice");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": [\"a\"]}}", SL_EINVAL,
            "label.classes", "at least 2 classes");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 1}}", SL_EINVAL,
            "label.classes", "at least 2 classes");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 0}}", SL_EINVAL,
            "label.classes", "whole number");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 2.5}}", SL_EINVAL,
            "label.classes", NULL);
    refused("{" FEAT3 ", \"label\": {\"kind\": \"multilabel\", \"classes\": []}}", SL_EINVAL,
            "label.classes", NULL);
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"classes\": [\"a\", \"b\"]}}",
            SL_EINVAL, "label.classes", "a regression target has no classes");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 3, \"dim\": 1}}", SL_EINVAL,
            "label.dim", "only a regression target");
    /* columns */
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"columns\": [\"t1\", \"t2\"],"
            " \"dim\": 3}}",
            SL_EINVAL, "label.dim", "is 3; the label has 2 columns");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"column\": \"t\", \"dim\": 2}}",
            SL_EINVAL, "label.dim", "is 2; the label has 1 columns");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"dim\": 0}}", SL_EINVAL, "label.dim",
            NULL);
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"column\": \"t\","
            " \"columns\": [\"u\"]}}",
            SL_EINVAL, "label", "name one or the other");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"column\": \"\"}}", SL_EINVAL,
            "label.column", "non-empty column name");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"column\": 3}}", SL_EINVAL,
            "label.column", NULL);
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"columns\": [\"t\", \"t\"]}}",
            SL_EINVAL, "label.columns", "named twice");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 2,"
            " \"columns\": [\"y1\", \"y2\"]}}",
            SL_EINVAL, "label.columns", "a class label is one column");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"multilabel\", \"classes\": 3,"
            " \"columns\": [\"y1\", \"y2\"]}}",
            SL_EINVAL, "label.columns", "2 columns for 3 classes");
    /* a feature that is also a label column */
    refused("{" FEAT3 ", \"label\": {\"kind\": \"class\", \"classes\": 2, \"column\": \"b\"}}",
            SL_EINVAL, "label", "\"b\" is a feature and a label column");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\", \"columns\": [\"t\", \"c\"]}}",
            SL_EINVAL, "label", "\"c\" is a feature and a label column");
}

static void test_refused_preprocess(void **state)
{
    (void)state;
    /* image */
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 8, \"height\": 8, \"channels\": 2}}}",
            SL_EINVAL, "preprocess.image.channels", "1 (grayscale) or 3 (RGB)");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 8, \"height\": 8, \"channels\": 4}}}",
            SL_EINVAL, "preprocess.image.channels", NULL);
    refused("{\"input\": {}, " CLASS2 ", \"preprocess\": {\"image\": {\"height\": 8}}}", SL_EINVAL,
            "preprocess.image.width", "is required");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 8, \"height\": 0}}}",
            SL_EINVAL, "preprocess.image.height", NULL);
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 4097, \"height\": 8}}}",
            SL_EINVAL, "preprocess.image.width", NULL);
    refused("{\"input\": {\"shape\": [3, 24, 30]}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 32, \"height\": 24, \"channels\": 3}}}",
            SL_EINVAL, "input.shape", "holds 2160 values; the image");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"image\": {\"width\": 1, \"height\": 3}}}",
            SL_EINVAL, "input.features", "no named features");
    /* audio */
    refused("{\"input\": {}, " CLASS2 ", \"preprocess\": {\"audio\": {\"n_fft\": 512}}}", SL_EINVAL,
            "preprocess.audio.frames", "is required");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"n_fft\": 500}}}",
            SL_EINVAL, "preprocess.audio.n_fft", "must be a power of two (500)");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"n_fft\": 32}}}",
            SL_EINVAL, "preprocess.audio.n_fft", NULL);
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"n_fft\": 64, \"n_mels\": 40}}}",
            SL_EINVAL, "preprocess.audio.n_mels", "40 mel bands need n_fft >= 78");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"n_mels\": 257}}}",
            SL_EINVAL, "preprocess.audio.n_mels", NULL);
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"fmax\": 9000}}}",
            SL_EINVAL, "preprocess.audio", "fmax <= sample_rate / 2");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"fmin\": 8000}}}",
            SL_EINVAL, "preprocess.audio", "fmin < fmax");
    /* apart as doubles, one float: sl_logmel() would refuse every clip */
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"fmin\": 7999.9999999}}}",
            SL_EINVAL, "preprocess.audio", "fmin < fmax");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 10, \"sample_rate\": 96000}}}",
            SL_EINVAL, "preprocess.audio.sample_rate", NULL);
    refused("{\"input\": {\"shape\": [1, 40, 97]}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 98}}}",
            SL_EINVAL, "input.shape", "(n_mels x frames) makes 3920");
    /* window */
    refused("{\"input\": {\"shape\": [3, 8]}, " CLASS2
            ", \"preprocess\": {\"window\": {\"size\": 8}}}",
            SL_EINVAL, "preprocess.window", "input.features names the columns");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"window\": {\"stride\": 2}}}", SL_EINVAL,
            "preprocess.window.size", "is required");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"window\": {\"size\": 1}}}", SL_EINVAL,
            "preprocess.window.size", NULL);
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"window\": {\"size\": 4, \"stride\": 0}}}",
            SL_EINVAL, "preprocess.window.stride", NULL);
    refused("{" FEAT3 ", \"label\": {\"kind\": \"target\"},"
            " \"preprocess\": {\"window\": {\"size\": 4, \"label\": \"majority\"}}}",
            SL_EINVAL, "preprocess.window.label", "\"majority\" does not fit the label");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"window\": {\"size\": 4, \"label\": \"mean\"}}}",
            SL_EINVAL, "preprocess.window.label", "\"mean\" does not fit");
    refused("{" FEAT3 ", \"label\": {\"kind\": \"multilabel\", \"classes\": 2},"
            " \"preprocess\": {\"window\": {\"size\": 4, \"label\": \"majority\"}}}",
            SL_EINVAL, "preprocess.window.label", NULL);
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"window\": {\"size\": 4, \"label\": \"first\"}}}",
            SL_EINVAL, "preprocess.window.label", "\"first\"");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"window\": {\"size\": 4, \"label\": 1}}}",
            SL_EINVAL, "preprocess.window.label", NULL);
    refused("{\"input\": {\"features\": [\"a\", \"b\", \"c\"], \"shape\": [3, 5]}, " CLASS2
            ", \"preprocess\": {\"window\": {\"size\": 4}}}",
            SL_EINVAL, "input.shape", "holds 15 values; the window (features x size) makes 12");
    /* one kind of sample */
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"window\": {\"size\": 4}, \"audio\": {\"frames\": 3}}}",
            SL_EINVAL, "preprocess", "name one");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 2, \"height\": 2}, \"audio\": "
            "{\"frames\": 3}}}",
            SL_EINVAL, "preprocess", "different kinds of sample");
    /* scale */
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"scale\": {\"factor\": \"2\"}}}", SL_EINVAL,
            "preprocess.scale.factor", NULL);
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"scale\": {\"offset\": 1e999}}}", SL_EINVAL,
            "preprocess.scale.offset", NULL);
    /* standardize */
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": [1, 2], \"std\": [1, 2]}}}",
            SL_EINVAL, "preprocess.standardize",
            "has 2 values: 1, one per channel (3) or one per input value (3)");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": [1, 2, 3], \"std\": [1, 2]}}}",
            SL_EINVAL, "preprocess.standardize", "mean has 3 values, std 2");
    refused("{" FEAT3 ", " CLASS2 ", \"preprocess\": {\"standardize\": {\"mean\": [1, 2, 3]}}}",
            SL_EINVAL, "preprocess.standardize", "needs \"mean\" and \"std\"");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": [], \"std\": []}}}",
            SL_EINVAL, "preprocess.standardize.mean", "non-empty array");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": [1, 2, 3], \"std\": [1, 0, 1]}}}",
            SL_EINVAL, "preprocess.standardize.std", "entry 1 must be a finite number above 0");
    /* above 0 as a double, 0 as the float it is stored in: a division by zero */
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": 0, \"std\": [1, 1, 1e-50]}}}",
            SL_EINVAL, "preprocess.standardize.std", "entry 2 must be a finite number above 0");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": 0, \"std\": -2}}}",
            SL_EINVAL, "preprocess.standardize.std", "entry 0 must be a finite number above 0");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": [0, 1e999, 0], \"std\": 1}}}",
            SL_EINVAL, "preprocess.standardize.mean", "entry 1 must be a finite number");
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": [0, 0, 1e39], \"std\": 1}}}",
            SL_EINVAL, "preprocess.standardize.mean", "entry 2"); /* beyond float32 */
    refused("{" FEAT3 ", " CLASS2
            ", \"preprocess\": {\"standardize\": {\"mean\": 0, \"std\": [1, \"x\", 1]}}}",
            SL_EINVAL, "preprocess.standardize.std", "entry 1");
    /* per channel of an image: 3 channels, not 2; a log-mel sample of [1, 40, 98] has 1 */
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"image\": {\"width\": 2, \"height\": 2, \"channels\": 3},"
            " \"standardize\": {\"mean\": [1, 2], \"std\": [1, 2]}}}",
            SL_EINVAL, "preprocess.standardize", "one per channel (3) or one per input value (12)");
    refused("{\"input\": {}, " CLASS2
            ", \"preprocess\": {\"audio\": {\"frames\": 4, \"n_mels\": 2},"
            " \"standardize\": {\"mean\": [1, 2], \"std\": [1, 2]}}}",
            SL_EINVAL, "preprocess.standardize", "one per channel (1)");
}

/* "[\"P0\", \"P1\", ...]" into @out (@cap bytes): @n names, the last one @last unless NULL. */
static void put_names(char *out, size_t cap, const char *prefix, size_t n, const char *last)
{
    size_t len = 1;
    out[0] = '[';
    for (size_t i = 0; i < n; i++) {
        int w = i + 1 == n && last != NULL
                    ? snprintf(out + len, cap - len, "%s\"%s\"", i ? ", " : "", last)
                    : snprintf(out + len, cap - len, "%s\"%s%zu\"", i ? ", " : "", prefix, i);
        assert_true(w > 0 && (size_t)w < cap - len);
        len += (size_t)w;
    }
    assert_true(len + 2 <= cap);
    out[len++] = ']';
    out[len] = '\0';
}

static void put_contract(char *json, size_t cap, const char *features, const char *classes,
                         const char *columns)
{
    int w = snprintf(json, cap,
                     "{\"input\": {\"features\": %s}, \"label\": {\"kind\": \"multilabel\", "
                     "\"classes\": %s, \"columns\": %s}}",
                     features, classes, columns);
    assert_true(w > 0 && (size_t)w < cap);
}

/* As many names as a contract may have: checked in n log n, not pairwise (seconds). */
static void test_large_lists(void **state)
{
    const size_t n = SL_CONTRACT_MAX_NAMES, lcap = 16 * (n + 1), jcap = 3 * lcap + 256;
    char *json = malloc(jcap), *features = malloc(lcap), *classes = malloc(lcap),
         *columns = malloc(lcap), last[32];
    double start, took;
    sl_contract *c;
    (void)state;
    assert_non_null(json);
    assert_non_null(features);
    assert_non_null(classes);
    assert_non_null(columns);
    put_names(features, lcap, "f", n, NULL);
    put_names(classes, lcap, "k", n, NULL);
    put_names(columns, lcap, "c", n, NULL);
    put_contract(json, jcap, features, classes, columns);
    start = now_s();
    c = parse_ok(json);
    took = now_s() - start;
    if (took > 10.0 * sl_test_time_scale()) /* pairwise: 40 s on a PC */
        fail_msg("%.1f s to check lists of %zu names", took, n);
    assert_int_equal(c->nfeatures, n);
    assert_int_equal(c->tdim, n);
    assert_int_equal(sl_contract_class(c, "k65535"), 65535);
    sl_contract_free(c);
    /* a name given twice, far apart */
    put_names(classes, lcap, "k", n, "k7");
    put_contract(json, jcap, features, classes, columns);
    refused(json, SL_EINVAL, "label.classes", "\"k7\" is named twice");
    /* a label column that is the last feature */
    put_names(classes, lcap, "k", n, NULL);
    snprintf(last, sizeof last, "f%zu", n - 1);
    put_names(columns, lcap, "c", n, last);
    put_contract(json, jcap, features, classes, columns);
    refused(json, SL_EINVAL, "label", "\"f65535\" is a feature and a label column");
    /* one name too many */
    put_names(features, lcap, "f", n + 1, NULL);
    snprintf(json, jcap, "{\"input\": {\"features\": %s}, \"label\": {\"kind\": \"target\"}}",
             features);
    refused(json, SL_EINVAL, "input.features", "1 to 65536 names");
    free(json);
    free(features);
    free(classes);
    free(columns);
}

/* ---- sl_contract_finish -----------------------------------------------------------------------
 */

static void expect_floats(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f * (1.0f + fabsf(want[i])))
            fail_msg("value %zu: %.9g, wanted %.9g", i, (double)got[i], (double)want[i]);
}

static void test_finish(void **state)
{
    sl_contract *c;
    (void)state;
    {
        /* scale, then per-feature standardisation, over two samples */
        float x[4] = {1, 2, 0, -1},
              want[4] = {(3 - 1) / 2.0f, (5 - 3) / 4.0f, (1 - 1) / 2.0f, (-1 - 3) / 4.0f};
        c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\"]}, " CLASS2
                     ", \"preprocess\": {\"scale\": {\"factor\": 2, \"offset\": 1},"
                     " \"standardize\": {\"mean\": [1, 3], \"std\": [2, 4]}}}");
        sl_contract_finish(c, x, 2);
        expect_floats(x, want, 4);
        sl_contract_free(c);
    }
    {
        /* nothing to do: unchanged, bit for bit */
        float x[3] = {1.25f, -7, 1e30f}, keep[3] = {1.25f, -7, 1e30f};
        c = parse_ok("{" FEAT3 ", " CLASS2 "}");
        sl_contract_finish(c, x, 1);
        assert_memory_equal(x, keep, sizeof x);
        sl_contract_free(c);
    }
    {
        /* one mean and std for every value; no scale */
        float x[3] = {10, 15, 0}, want[3] = {0, 1, -2};
        c = parse_ok("{" FEAT3 ", " CLASS2
                     ", \"preprocess\": {\"standardize\": {\"mean\": 10, \"std\": 5}}}");
        sl_contract_finish(c, x, 1);
        expect_floats(x, want, 3);
        sl_contract_free(c);
    }
    {
        /* a scale alone */
        float x[3] = {255, 0, 51}, want[3] = {1, 0, 0.2f};
        c = parse_ok("{" FEAT3 ", " CLASS2
                     ", \"preprocess\": {\"scale\": {\"factor\": 0.00392156862745098}}}");
        sl_contract_finish(c, x, 1);
        expect_floats(x, want, 3);
        sl_contract_free(c);
    }
    {
        /* a window of [F = 2][size = 3]: the statistics of feature j apply to its row */
        float x[12] = {1, 2, 3, 10, 12, 14, 0, 1, 2, 8, 10, 10};
        float want[12] = {0, 1, 2, 0, 1, 2, -1, 0, 1, -1, 0, 0};
        c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\"]}, " CLASS2
                     ", \"preprocess\": {\"window\": {\"size\": 3},"
                     " \"standardize\": {\"mean\": [1, 10], \"std\": [1, 2]}}}");
        assert_int_equal(c->sample_size, 6);
        sl_contract_finish(c, x, 2);
        expect_floats(x, want, 12);
        sl_contract_free(c);
    }
    {
        /* scale then per-feature statistics of a window */
        float x[6] = {1, 2, 3, 10, 12, 14}, want[6] = {1, 3, 5, 9.5f, 11.5f, 13.5f};
        c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\"]}, " CLASS2
                     ", \"preprocess\": {\"window\": {\"size\": 3}, \"scale\": {\"factor\": 2},"
                     " \"standardize\": {\"mean\": [1, 1], \"std\": [1, 2]}}}");
        sl_contract_finish(c, x, 1);
        expect_floats(x, want, 6);
        sl_contract_free(c);
    }
    {
        /* a statistic per value of the window */
        float x[4] = {1, 2, 3, 4}, want[4] = {1, 1, 1, 1};
        c = parse_ok("{\"input\": {\"features\": [\"a\", \"b\"]}, " CLASS2
                     ", \"preprocess\": {\"window\": {\"size\": 2},"
                     " \"standardize\": {\"mean\": [0, 1, 2, 3], \"std\": [1, 1, 1, 1]}}}");
        sl_contract_finish(c, x, 1);
        expect_floats(x, want, 4);
        sl_contract_free(c);
    }
    {
        /* an image of [3][2][2]: per channel */
        float x[12] = {0, 1, 2, 3, 100, 110, 120, 130, 200, 300, 400, 500};
        float want[12] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
        c = parse_ok("{\"input\": {}, " CLASS2
                     ", \"preprocess\": {\"image\": {\"width\": 2, \"height\": 2, \"channels\": 3},"
                     " \"standardize\": {\"mean\": [0, 100, 200], \"std\": [1, 10, 100]}}}");
        sl_contract_finish(c, x, 1);
        expect_floats(x, want, 12);
        sl_contract_free(c);
    }
}

/* ---- sl_contract_heldout ----------------------------------------------------------------------
 */

static void test_heldout(void **state)
{
    sl_contract *c, *none, *again;
    float x[4], y = 0;
    size_t held = 0, flips = 0, xflips = 0;
    uint64_t rng = 0x1234567;
    (void)state;
    none = parse_ok("{\"input\": {\"shape\": [4]}, " CLASS2 "}");
    c = parse_ok("{\"input\": {\"shape\": [4]}, \"label\": {\"kind\": \"class\", \"classes\": 5},"
                 " \"evaluation\": {\"share\": 0.3}}");
    again = parse_ok("{\"input\": {\"shape\": [4]}, \"label\": {\"kind\": \"class\","
                     " \"classes\": 5}, \"evaluation\": {\"share\": 0.3}}");
    assert_int_equal(sl_contract_heldout(NULL, x, &y), 0);
    for (size_t i = 0; i < 10000; i++) {
        int h;
        float y2, x2[4];
        for (size_t j = 0; j < 4; j++)
            x[j] = (float)(sl_test_rand(&rng) % 100000) / 1000.0f;
        y = (float)(sl_test_rand(&rng) % 5);
        h = sl_contract_heldout(c, x, &y);
        assert_true(h == 0 || h == 1);
        held += (size_t)h;
        /* share 0: never held out */
        assert_int_equal(sl_contract_heldout(none, x, &y), 0);
        /* stable: the same sample, the same answer, from another parse of the contract too */
        assert_int_equal(sl_contract_heldout(c, x, &y), h);
        assert_int_equal(sl_contract_heldout(again, x, &y), h);
        /* the label is part of the sample */
        y2 = (float)(((int)y + 1) % 5);
        flips += (size_t)(sl_contract_heldout(c, x, &y2) != h);
        /* and so is every input value */
        memcpy(x2, x, sizeof x);
        x2[3] += 1.0f;
        xflips += (size_t)(sl_contract_heldout(c, x2, &y) != h);
    }
    if (held < 2700 || held > 3300)
        fail_msg("%zu of 10000 held out at share 0.3", held);
    /* independent draws at 0.3 differ with probability 0.42 */
    if (flips < 3500 || flips > 4900)
        fail_msg("another label changed %zu of 10000 decisions", flips);
    if (xflips < 3500 || xflips > 4900)
        fail_msg("another input changed %zu of 10000 decisions", xflips);
    sl_contract_free(c);
    sl_contract_free(again);
    sl_contract_free(none);

    /* an evaluation object without a share holds nothing out (DATA_CONTRACT.md: absent: none) */
    c = parse_ok("{\"input\": {\"shape\": [4]}, " CLASS2 ", \"evaluation\": {}}");
    assert_true(c->eval_share == 0.0);
    assert_int_equal(sl_contract_heldout(c, x, &y), 0);
    sl_contract_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_document_example),
        cmocka_unit_test(test_tabular),
        cmocka_unit_test(test_multilabel_and_targets),
        cmocka_unit_test(test_image),
        cmocka_unit_test(test_audio),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_refused_document),
        cmocka_unit_test(test_refused_input_and_label),
        cmocka_unit_test(test_refused_preprocess),
        cmocka_unit_test(test_large_lists),
        cmocka_unit_test(test_finish),
        cmocka_unit_test(test_heldout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
