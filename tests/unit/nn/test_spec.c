/*
 * The model spec (device/nn/MODEL_SPEC.md) against its parser: the worked
 * example is read out of the document and must parse to the layout and the
 * shapes the document states; the registry's spec files (device/nn/models)
 * give the reference fixtures' layouts; the op table of the JSON Schema is
 * the parser's; and every kind of bad document is refused with its path and
 * reason.
 */
#include "../../support/sl_fixture.h"
#include "../../support/sl_test.h"
#include "starling/nn.h"
#include "../../../device/nn/spec_int.h"

#ifndef SL_SOURCE_DIR
#error "SL_SOURCE_DIR must name the source tree"
#endif

static char *read_text(const char *rel, size_t *len)
{
    char path[1024];
    void *data = NULL;
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", SL_SOURCE_DIR, rel);
    assert_int_equal(sl_fs_read_file(path, 16u << 20, &data, &n), SL_OK);
    data = realloc(data, n + 1);
    assert_non_null(data);
    ((char *)data)[n] = '\0';
    if (len != NULL)
        *len = n;
    return data;
}

static sl_spec *parse_ok(const char *json)
{
    char err[512];
    sl_spec *s = NULL;
    int rc = sl_spec_parse(json, strlen(json), &s, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("refused: %s (%s)", err, sl_strerror(rc));
    return s;
}

static void check_shape(const sl_spec *s, const char *name, size_t ndim, uint32_t a, uint32_t b,
                        uint32_t c)
{
    uint32_t shape[6];
    size_t n = 0;
    uint32_t want[3] = {a, b, c};
    assert_int_equal(sl_spec_tensor_shape(s, name, shape, &n), SL_OK);
    assert_int_equal(n, ndim);
    for (size_t i = 0; i < ndim; i++)
        assert_int_equal(shape[i], want[i]);
}

static sl_layout *fixture_layout(const char *model)
{
    char name[128];
    size_t len = 0;
    void *text;
    sl_layout *l = NULL;
    snprintf(name, sizeof name, "nn/%s.layout", model);
    text = sl_fixture_load(name, &len);
    assert_non_null(text);
    assert_int_equal(sl_layout_parse(text, len, &l), SL_OK);
    free(text);
    return l;
}

/* The worked example of MODEL_SPEC.md, read out of the document. */
static void test_worked_example(void **state)
{
    char *doc = read_text("device/nn/MODEL_SPEC.md", NULL);
    char *at = strstr(doc, "## Worked example"), *json, *end;
    sl_spec *s;
    sl_layout *ref = fixture_layout("lenet5");
    (void)state;
    assert_non_null(at);
    json = strstr(at, "```json\n");
    assert_non_null(json);
    json += 8;
    end = strstr(json, "```");
    assert_non_null(end);
    *end = '\0';
    s = parse_ok(json);
    assert_string_equal(sl_spec_name(s), "lenet5");
    assert_int_equal(sl_layout_params(sl_spec_layout(s)), 44426);
    assert_true(sl_layout_equal(sl_spec_layout(s), ref));
    /* the shapes the document states after the example */
    assert_non_null(strstr(end + 3, "44,426"));
    assert_non_null(strstr(end + 3, "c1 `[6, 24, 24]`, p1 `[6, 12, 12]`, c2"));
    check_shape(s, "c1", 3, 6, 24, 24);
    check_shape(s, "p1", 3, 6, 12, 12);
    check_shape(s, "c2", 3, 16, 8, 8);
    check_shape(s, "p2", 3, 16, 4, 4);
    check_shape(s, "flat", 1, 256, 0, 0);
    check_shape(s, "logits", 1, 10, 0, 0);
    assert_int_equal(sl_spec_output_size(s), 10);
    assert_int_equal(sl_spec_input_size(s, 0), 784);
    assert_int_equal(sl_spec_loss_kind(s), SL_SPEC_CROSS_ENTROPY);
    sl_spec_free(s);
    sl_layout_free(ref);
    free(doc);
}

/* The registry's spec files give the PyTorch reference layouts. */
static void test_registry_files(void **state)
{
    static const char *const models[] = {"logreg", "mlp", "lenet5", "cnn"};
    static const uint64_t params[] = {7850, 199210, 44426, 1663370};
    (void)state;
    for (size_t i = 0; i < 4; i++) {
        char rel[128];
        size_t len;
        char *text, err[256];
        sl_spec *s = NULL;
        sl_layout *ref = fixture_layout(models[i]);
        snprintf(rel, sizeof rel, "device/nn/models/%s.json", models[i]);
        text = read_text(rel, &len);
        assert_int_equal(sl_spec_parse(text, len, &s, err, sizeof err), SL_OK);
        assert_string_equal(sl_spec_name(s), models[i]);
        assert_int_equal(sl_layout_params(sl_spec_layout(s)), params[i]);
        assert_true(sl_layout_equal(sl_spec_layout(s), ref));
        assert_int_equal(sl_layout_hash(sl_spec_layout(s)), sl_layout_hash(ref));
        assert_int_equal(sl_spec_output_size(s), 10);
        {
            size_t tl;
            const char *t = sl_spec_text(s, &tl);
            assert_int_equal(tl, len);
            assert_memory_equal(t, text, len);
        }
        sl_layout_free(ref);
        sl_spec_free(s);
        free(text);
    }
}

/* The JSON Schema's op list is the parser's op table, in order. */
static void test_schema_ops(void **state)
{
    char *schema = read_text("device/nn/model_spec.schema.json", NULL);
    char *at = strstr(schema, "\"op\": {\"enum\": [");
    (void)state;
    assert_non_null(at);
    at += strlen("\"op\": {\"enum\": [");
    for (int op = 0; op < SL__OP_COUNT; op++) {
        char quoted[64];
        char *hit;
        snprintf(quoted, sizeof quoted, "\"%s\"", sl__op_name((sl__op)op));
        hit = strstr(at, quoted);
        if (hit == NULL || hit > strchr(at, ']'))
            fail_msg("the schema's op list lacks %s (or has it out of order)", quoted);
        at = hit + strlen(quoted);
    }
    assert_true(strchr(at, ']') - at < 4); /* nothing after the last one */
    assert_string_equal(sl__op_name((sl__op)SL__OP_COUNT), "?");
    free(schema);
}

/* A small valid spec that the rejection cases edit. */
#define BASE                                                                                       \
    "{\"starling_model\": 1, \"name\": \"t\", \"inputs\": [{\"name\": \"x\", \"shape\": [3, 8, "   \
    "8]}], \"params\": [{\"name\": \"w\", \"shape\": [4, 3, 3, 3]}, {\"name\": \"b\", \"shape\": " \
    "[4]}, {\"name\": \"fw\", \"shape\": [5, 64]}], \"nodes\": [{\"op\": \"Conv\", \"inputs\": "   \
    "[\"x\", \"w\", \"b\"], \"outputs\": [\"c\"], \"attrs\": {\"pads\": [1, 1, 1, 1]}}, {\"op\": " \
    "\"MaxPool\", \"inputs\": [\"c\"], \"outputs\": [\"p\"], \"attrs\": {\"kernel_shape\": [2, "   \
    "2], \"strides\": [2, 2]}}, {\"op\": \"Flatten\", \"inputs\": [\"p\"], \"outputs\": "          \
    "[\"f\"]}, {\"op\": \"Gemm\", \"inputs\": [\"f\", \"fw\", \"\"], \"outputs\": [\"y\"]}], "     \
    "\"output\": \"y\", \"loss\": {\"op\": \"cross_entropy\"}, \"metrics\": [\"accuracy\"]}"

/* BASE with the first @from replaced by @to. */
static char *edit(const char *from, const char *to)
{
    const char *at = strstr(BASE, from);
    size_t n = strlen(BASE) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    assert_non_null(at);
    assert_non_null(out);
    snprintf(out, n, "%.*s%s%s", (int)(at - BASE), BASE, to, at + strlen(from));
    return out;
}

static void test_base_and_shapes(void **state)
{
    sl_spec *s = parse_ok(BASE);
    (void)state;
    check_shape(s, "c", 3, 4, 8, 8);
    check_shape(s, "p", 3, 4, 4, 4);
    check_shape(s, "f", 1, 64, 0, 0);
    sl_spec_free(s);
}

static void test_rejections(void **state)
{
    static const struct {
        const char *from, *to;
        int rc;
        const char *says;
    } cases[] = {
        {"\"shape\": [5, 64]", "\"shape\": [5, 144]", SL_ESPEC,
         "nodes[3]: input 1 (fw) takes 144 features where input 0 (f) has 64"},
        {"\"starling_model\": 1", "\"starling_model\": 2", SL_EVERSION,
         "this build reads model spec version 1"},
        {"\"starling_model\": 1", "\"starling_model\": \"1\"", SL_ESPEC, "starling_model"},
        {"\"name\": \"t\",", "\"name\": \"t\", \"colour\": 1,", SL_ESPEC, "unknown key \"colour\""},
        {"\"name\": \"t\",", "", SL_ESPEC, "name: required"},
        {"{\"name\": \"x\"", "{\"name\": \"x y\"", SL_ESPEC, "inputs[0]: \"x y\" is not a"},
        {"\"shape\": [3, 8, 8]", "\"shape\": [3, 0, 8]", SL_ESPEC, "inputs[0]: shape"},
        {"\"shape\": [3, 8, 8]", "\"shape\": [3, 8, 8.5]", SL_ESPEC, "not an integer"},
        {"\"shape\": [3, 8, 8]", "\"shape\": [65536, 65536, 65536]", SL_ESPEC,
         "more than 268435456 elements"},
        {"{\"name\": \"b\"", "{\"name\": \"w\"", SL_ESPEC, "params[1]: the tensor \"w\" is"},
        {"\"shape\": [4]}", "\"shape\": [4], \"init\": {\"kind\": \"xavier\"}}", SL_ESPEC,
         "init.kind: \"xavier\""},
        {"\"shape\": [4]}", "\"shape\": [4], \"init\": {\"kind\": \"normal\", \"std\": -1}}",
         SL_ESPEC, "init.std: negative"},
        {"\"shape\": [4]}", "\"shape\": [4], \"buffer\": 1}", SL_ESPEC, "buffer: expected true"},
        {"\"op\": \"Conv\"", "\"op\": \"Conv3D\"", SL_ESPEC,
         "nodes[0]: op: \"Conv3D\" is not an op of model spec version 1"},
        {"\"pads\": [1, 1, 1, 1]", "\"padding\": [1, 1, 1, 1]", SL_ESPEC,
         "nodes[0]: attrs: Conv takes no attribute \"padding\""},
        {"\"pads\": [1, 1, 1, 1]", "\"pads\": [1, 1]", SL_ESPEC, "pads: 2 entries"},
        {"\"pads\": [1, 1, 1, 1]", "\"pads\": [5, 5, 5, 5]", SL_ESPEC,
         "a pad of 5 is not smaller than the window"},
        {"\"pads\": [1, 1, 1, 1]", "\"strides\": [0, 1]", SL_ESPEC, "strides"},
        {"\"pads\": [1, 1, 1, 1]", "\"group\": 2", SL_ESPEC, "does not fit 3 channels in 2 groups"},
        {"\"inputs\": [\"x\", \"w\", \"b\"]", "\"inputs\": [\"x\", \"b\", \"w\"]", SL_ESPEC,
         "input 1 (b) must have 4 axes"},
        {"\"inputs\": [\"x\", \"w\", \"b\"]", "\"inputs\": [\"x\", \"x\", \"b\"]", SL_ESPEC,
         "\"x\" must be a parameter"},
        {"\"inputs\": [\"c\"]", "\"inputs\": [\"p\"]", SL_ESPEC,
         "\"p\" is not produced before this node"},
        {"\"inputs\": [\"c\"]", "\"inputs\": [\"w\"]", SL_ESPEC,
         "\"w\" is a parameter where MaxPool wants data"},
        {"\"outputs\": [\"p\"]", "\"outputs\": [\"c\"]", SL_ESPEC,
         "the tensor \"c\" is produced twice"},
        {"\"kernel_shape\": [2, 2], ", "", SL_ESPEC, "kernel_shape: required"},
        {"\"kernel_shape\": [2, 2]", "\"kernel_shape\": [9, 9]", SL_ESPEC,
         "the window (9) is wider"},
        {"\"output\": \"y\"", "\"output\": \"w\"", SL_ESPEC,
         "output: \"w\" is not the output of a node"},
        {"\"output\": \"y\"", "\"output\": \"p\"", SL_ESPEC, "must be one axis per sample"},
        {"\"op\": \"cross_entropy\"", "\"op\": \"hinge\"", SL_ESPEC, "loss: op: \"hinge\""},
        {"\"op\": \"cross_entropy\"}", "\"op\": \"mse\", \"label_smoothing\": 0.1}", SL_ESPEC,
         "label_smoothing: only with cross_entropy"},
        {"[\"accuracy\"]", "[\"rmse\"]", SL_ESPEC, "rmse does not go with the loss cross_entropy"},
        {"[\"accuracy\"]", "[\"accuracy\", \"accuracy\"]", SL_ESPEC, "accuracy twice"},
        {"{\"name\": \"b\", \"shape\": [4]}, ", "", SL_ESPEC, "\"b\" is not produced before"},
        {"\"shape\": [3, 8, 8]}", "\"shape\": [3, 8, 8], \"dtype\": \"int64\"}", SL_ESPEC,
         "the int64 input \"x\" may only feed an Embedding"},
        {"\"op\": \"Flatten\"", "\"op\": \"Flatten\", \"attrs\": {\"axis\": 4}", SL_ESPEC,
         "axis: 4 is not an integer in 0..3"},
        {"\"outputs\": [\"y\"]", "\"outputs\": [\"y\", \"z\"]", SL_ESPEC, "outputs: Gemm gives 1"},
        {"\"nodes\": [", "\"nodes\": 3, \"x\": [", SL_ESPEC, "unknown key \"x\""},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *doc = edit(cases[i].from, cases[i].to), err[512];
        sl_spec *s = (sl_spec *)0x1;
        int rc;
        rc = sl_spec_parse(doc, strlen(doc), &s, err, sizeof err);
        if (rc != cases[i].rc || strstr(err, cases[i].says) == NULL)
            fail_msg("case %zu: %s (%s), wanted %s with \"%s\"", i, err, sl_strerror(rc),
                     sl_strerror(cases[i].rc), cases[i].says);
        assert_true(s == (sl_spec *)0x1); /* untouched */
        free(doc);
    }
}

static void test_not_json(void **state)
{
    char err[256];
    sl_spec *s = NULL;
    (void)state;
    assert_int_equal(sl_spec_parse("{\"starling_model\": 1,", 21, &s, err, sizeof err), SL_ESYNTAX);
    assert_non_null(strstr(err, "not JSON"));
    assert_int_equal(sl_spec_parse("[1, 2]", 6, &s, err, sizeof err), SL_ESPEC);
    assert_non_null(strstr(err, "a model spec is a JSON object"));
    assert_int_equal(sl_spec_parse(BASE, strlen(BASE) - 1, &s, err, sizeof err), SL_ESYNTAX);
    assert_int_equal(sl_spec_parse(NULL, 0, &s, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_spec_parse(BASE, strlen(BASE), NULL, err, sizeof err), SL_EINVAL);
    assert_null(s);
    sl_spec_free(NULL);
}

/* Every op of the table with a small graph: shapes as PyTorch computes them. */
static void test_op_shapes(void **state)
{
    static const char doc[] =
        "{\"starling_model\": 1, \"name\": \"ops\","
        " \"inputs\": [{\"name\": \"seq\", \"shape\": [20, 8]}, {\"name\": \"img\", \"shape\":"
        " [3, 9, 9]}, {\"name\": \"tok\", \"shape\": [6], \"dtype\": \"int64\"}],"
        " \"params\": [{\"name\": \"gru.w_ih\", \"shape\": [96, 8]}, {\"name\": \"gru.w_hh\","
        " \"shape\": [96, 32]}, {\"name\": \"gru.b_ih\", \"shape\": [96]}, {\"name\":"
        " \"gru.b_hh\", \"shape\": [96]}, {\"name\": \"lstm.w_ih\", \"shape\": [64, 32]},"
        " {\"name\": \"lstm.w_hh\", \"shape\": [64, 16]}, {\"name\": \"lstm.b_ih\", \"shape\":"
        " [64]}, {\"name\": \"lstm.b_hh\", \"shape\": [64]}, {\"name\": \"dw\", \"shape\": [3, 1,"
        " 3, 3]}, {\"name\": \"bn.w\", \"shape\": [3]}, {\"name\": \"bn.b\", \"shape\": [3]},"
        " {\"name\": \"bn.m\", \"shape\": [3], \"buffer\": true, \"init\": {\"kind\": \"constant\","
        " \"value\": 0}}, {\"name\": \"bn.v\", \"shape\": [3], \"buffer\": true, \"init\": "
        "{\"kind\":"
        " \"constant\", \"value\": 1}}, {\"name\": \"emb\", \"shape\": [100, 4]}, {\"name\":"
        " \"ln.w\", \"shape\": [4]}, {\"name\": \"c1d\", \"shape\": [5, 8, 3]},"
        " {\"name\": \"head\", \"shape\": [16, 7]}],"
        " \"nodes\": ["
        "  {\"op\": \"GRU\", \"inputs\": [\"seq\", \"gru.w_ih\", \"gru.w_hh\", \"gru.b_ih\","
        " \"gru.b_hh\"], \"outputs\": [\"gy\", \"gh\"], \"attrs\": {\"hidden_size\": 32}},"
        "  {\"op\": \"LSTM\", \"inputs\": [\"gy\", \"lstm.w_ih\", \"lstm.w_hh\", \"lstm.b_ih\","
        " \"lstm.b_hh\"], \"outputs\": [\"ly\", \"\", \"lc\"], \"attrs\": {\"hidden_size\": 16}},"
        "  {\"op\": \"Gather\", \"inputs\": [\"ly\"], \"outputs\": [\"last\"], \"attrs\":"
        " {\"axis\": 0, \"indices\": -1}},"
        "  {\"op\": \"Conv\", \"inputs\": [\"img\", \"dw\", \"\"], \"outputs\": [\"dwc\"],"
        " \"attrs\": {\"group\": 3, \"strides\": [2, 2], \"dilations\": [2, 2], \"pads\": [2, 2,"
        " 2, 2]}},"
        "  {\"op\": \"BatchNormalization\", \"inputs\": [\"dwc\", \"bn.w\", \"bn.b\", \"bn.m\","
        " \"bn.v\"], \"outputs\": [\"bnd\"]},"
        "  {\"op\": \"AveragePool\", \"inputs\": [\"bnd\"], \"outputs\": [\"ap\"], \"attrs\":"
        " {\"kernel_shape\": [3, 3], \"pads\": [1, 1, 1, 1], \"count_include_pad\": 1}},"
        "  {\"op\": \"GlobalAveragePool\", \"inputs\": [\"ap\"], \"outputs\": [\"gap\"]},"
        "  {\"op\": \"Squeeze\", \"inputs\": [\"gap\"], \"outputs\": [\"sq\"], \"attrs\":"
        " {\"axes\": [1, 2]}},"
        "  {\"op\": \"Unsqueeze\", \"inputs\": [\"sq\"], \"outputs\": [\"us\"], \"attrs\":"
        " {\"axes\": [0]}},"
        "  {\"op\": \"Embedding\", \"inputs\": [\"tok\", \"emb\"], \"outputs\": [\"e\"]},"
        "  {\"op\": \"LayerNormalization\", \"inputs\": [\"e\", \"ln.w\", \"\"], \"outputs\":"
        " [\"eln\"]},"
        "  {\"op\": \"Transpose\", \"inputs\": [\"eln\"], \"outputs\": [\"et\"], \"attrs\":"
        " {\"perm\": [1, 0]}},"
        "  {\"op\": \"Slice\", \"inputs\": [\"et\"], \"outputs\": [\"es\"], \"attrs\":"
        " {\"starts\": [1], \"ends\": [100], \"axes\": [-1], \"steps\": [2]}},"
        "  {\"op\": \"ReduceMean\", \"inputs\": [\"es\"], \"outputs\": [\"em\"], \"attrs\":"
        " {\"axes\": [-1], \"keepdims\": 0}},"
        "  {\"op\": \"Reshape\", \"inputs\": [\"seq\"], \"outputs\": [\"sr\"], \"attrs\":"
        " {\"shape\": [20, -1, 2]}},"
        "  {\"op\": \"Flatten\", \"inputs\": [\"sr\"], \"outputs\": [\"sf\"], \"attrs\":"
        " {\"axis\": 1}},"
        "  {\"op\": \"Transpose\", \"inputs\": [\"seq\"], \"outputs\": [\"st\"], \"attrs\":"
        " {\"perm\": [1, 0]}},"
        "  {\"op\": \"Conv\", \"inputs\": [\"st\", \"c1d\", \"\"], \"outputs\": [\"c1\"],"
        " \"attrs\": {\"pads\": [1, 1]}},"
        "  {\"op\": \"MaxPool\", \"inputs\": [\"c1\"], \"outputs\": [\"c1p\"], \"attrs\":"
        " {\"kernel_shape\": [2], \"strides\": [2]}},"
        "  {\"op\": \"Concat\", \"inputs\": [\"last\", \"lc\"], \"outputs\": [\"cat\"], \"attrs\":"
        " {\"axis\": 0}},"
        "  {\"op\": \"Gemm\", \"inputs\": [\"lc\", \"head\"], \"outputs\": [\"h\"], \"attrs\":"
        " {\"transB\": 0}},"
        "  {\"op\": \"Mul\", \"inputs\": [\"us\", \"sq\"], \"outputs\": [\"hm\"]},"
        "  {\"op\": \"Flatten\", \"inputs\": [\"hm\"], \"outputs\": [\"hf\"]},"
        "  {\"op\": \"Gelu\", \"inputs\": [\"h\"], \"outputs\": [\"g\"], \"attrs\":"
        " {\"approximate\": \"tanh\"}},"
        "  {\"op\": \"Dropout\", \"inputs\": [\"g\"], \"outputs\": [\"d\"], \"attrs\": {\"ratio\":"
        " 0.1}},"
        "  {\"op\": \"LeakyRelu\", \"inputs\": [\"d\"], \"outputs\": [\"y\"]}],"
        " \"output\": \"y\", \"loss\": {\"op\": \"huber\", \"delta\": 0.5}, \"metrics\":"
        " [\"mae\", \"rmse\"]}";
    sl_spec *s;
    uint32_t shape[6];
    size_t n;
    (void)state;
    s = parse_ok(doc);
    check_shape(s, "gy", 2, 20, 32, 0);
    check_shape(s, "gh", 1, 32, 0, 0);
    check_shape(s, "ly", 2, 20, 16, 0);
    check_shape(s, "lc", 1, 16, 0, 0);
    check_shape(s, "last", 1, 16, 0, 0);
    check_shape(s, "dwc", 3, 3, 5, 5); /* (9 + 2 + 2 - (2 * (3 - 1) + 1)) / 2 + 1 */
    check_shape(s, "bnd", 3, 3, 5, 5);
    check_shape(s, "ap", 3, 3, 5, 5);
    check_shape(s, "gap", 3, 3, 1, 1);
    check_shape(s, "sq", 1, 3, 0, 0);
    check_shape(s, "us", 2, 1, 3, 0);
    check_shape(s, "e", 2, 6, 4, 0);
    check_shape(s, "et", 2, 4, 6, 0);
    check_shape(s, "es", 2, 4, 3, 0);
    check_shape(s, "em", 1, 4, 0, 0);
    check_shape(s, "sr", 3, 20, 4, 2);
    check_shape(s, "sf", 2, 20, 8, 0);
    check_shape(s, "st", 2, 8, 20, 0);
    check_shape(s, "c1", 2, 5, 20, 0);
    check_shape(s, "c1p", 2, 5, 10, 0);
    check_shape(s, "cat", 1, 32, 0, 0);
    check_shape(s, "hm", 2, 1, 3, 0);
    check_shape(s, "hf", 1, 3, 0, 0);
    check_shape(s, "h", 1, 7, 0, 0);
    check_shape(s, "y", 1, 7, 0, 0);
    assert_int_equal(sl_spec_tensor_shape(s, "nope", shape, &n), SL_ENOENT);
    assert_int_equal(sl_spec_loss_kind(s), SL_SPEC_HUBER);
    assert_int_equal(sl_spec_inputs(s), 3);
    assert_int_equal(sl_spec_input_size(s, 2), 6);
    assert_int_equal(sl_spec_input_size(s, 3), 0);
    sl_spec_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_example), cmocka_unit_test(test_registry_files),
        cmocka_unit_test(test_schema_ops),     cmocka_unit_test(test_base_and_shapes),
        cmocka_unit_test(test_rejections),     cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_op_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
