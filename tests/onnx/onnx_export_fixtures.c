/*
 * onnx_export_fixtures.c - the onnx_checker test's driver: every fixture of
 * tests/fixtures/onnx imported (sl_onnx_import) and exported again
 * (sl_onnx_export) into OUT_DIR/<fixture>.onnx, for check_exports.sh to
 * hand to onnx.checker and to run_onnx.py. Exit 0 when all were written.
 *   usage: onnx_export_fixtures OUT_DIR
 */
#include <stdio.h>
#include <stdlib.h>

#include "onnx_fixture.h"
#include "starling/onnx.h"

int main(int argc, char **argv)
{
    static char names[SL_ONNX_FIXTURES_MAX][64];
    int n, failed = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: onnx_export_fixtures OUT_DIR\n");
        return 2;
    }
    n = sl_onnx_fixture_list(names, SL_ONNX_FIXTURES_MAX);
    if (n <= 0)
        return 1;
    for (int k = 0; k < n; k++) {
        sl_onnx_fixture f;
        char *json = NULL, err[512] = "", path[4096];
        float *params = NULL;
        size_t jlen = 0, np = 0, len = 0;
        sl_spec *spec = NULL;
        void *onnx = NULL;
        int rc = sl_onnx_fixture_load(names[k], &f);
        if (rc == 0)
            rc = sl_onnx_import(f.onnx, f.onnx_len, names[k], &json, &jlen, &params, &np, NULL, err,
                                sizeof err);
        if (rc == SL_OK)
            rc = sl_spec_parse(json, jlen, &spec, err, sizeof err);
        if (rc == SL_OK)
            rc = sl_onnx_export(spec, params, &onnx, &len, err, sizeof err);
        if (rc == SL_OK &&
            snprintf(path, sizeof path, "%s/%s.onnx", argv[1], names[k]) >= (int)sizeof path)
            rc = SL_ERANGE;
        if (rc == SL_OK)
            rc = sl_fs_write_atomic(path, onnx, len, 0644);
        if (rc != SL_OK) {
            fprintf(stderr, "%s: %s %s\n", names[k], sl_errname(rc), err);
            failed = 1;
        } else {
            printf("%s\n", path);
        }
        free(onnx);
        sl_spec_free(spec);
        free(json);
        free(params);
        sl_onnx_fixture_free(&f);
    }
    return failed;
}
