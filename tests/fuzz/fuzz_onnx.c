/*
 * Fuzz target: an ONNX file given to `starling model import` / `task create`
 * (untrusted: protobuf-c unpacks it, the importer folds and maps it). When it
 * imports, the spec must parse, the parameters must be the layout's, and the
 * export of it must import again to the same spec. Nothing may crash, read out
 * of bounds or leak. The replay corpus is tests/fixtures/onnx (torch exports)
 * plus corpus/fuzz_onnx (hostile ones).
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "starling/nn.h"
#include "starling/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = NULL, *again = NULL, err[512];
    float *params = NULL, *params2 = NULL;
    size_t tlen = 0, np = 0, alen = 0, np2 = 0, olen = 0;
    void *onnx = NULL;
    sl_spec *s = NULL;
    sl_onnx_report rep;

    if (sl_onnx_import(data, size, "fuzz", &text, &tlen, &params, &np, &rep, err, sizeof err) !=
        SL_OK) {
        if (memchr(err, '\0', sizeof err) == NULL)
            abort();
        return 0;
    }
    if (sl_spec_parse(text, tlen, &s, err, sizeof err) != SL_OK ||
        sl_layout_params(sl_spec_layout(s)) != np)
        abort(); /* the importer checks its own output */
    if (sl_onnx_export(s, params, &onnx, &olen, err, sizeof err) == SL_OK) {
        if (sl_onnx_import(onnx, olen, "fuzz", &again, &alen, &params2, &np2, &rep, err,
                           sizeof err) != SL_OK ||
            np2 != np) {
            fprintf(stderr, "the export does not import again: %s\n", err);
            abort(); /* what we export, we import */
        }
        free(again);
        free(params2);
        free(onnx);
    }
    sl_spec_free(s);
    free(text);
    free(params);
    return 0;
}
