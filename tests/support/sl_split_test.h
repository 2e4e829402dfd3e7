/* sl_split_test.h - stored update frames as plain ones (header-only): a split frame
 * (codecs/FORMAT.md) is stored as sent, and a test that decodes stored updates reads it
 * against the change between the two stored versions it names, as the coordinator does. */
#ifndef SL_SPLIT_TEST_H
#define SL_SPLIT_TEST_H

#include <stdlib.h>
#include <string.h>

#include "starling/codec.h"
#include "starling/store.h"

/* Version @version of @task's model into @out (sl_layout_params() floats). */
static inline int sl_test_stored_params(sl_store *s, int64_t task, const sl_layout *l,
                                        int64_t version, float *out)
{
    sl_model_record m;
    int rc = sl_store_get_model(s, task, version, &m);
    if (rc != SL_OK)
        return rc;
    rc = sl_frame_decode_model(l, m.frame, m.frame_len, NULL, 0, out);
    sl_store_model_free(&m);
    return rc;
}

/* @frame, a stored update of @task, as a plain frame in *@out (malloc'd, *@out_len bytes):
 * a copy, or for a split frame the plain frame of the same update. */
static inline int sl_test_plain_frame(sl_store *s, int64_t task, const sl_layout *l,
                                      const void *frame, size_t len, void **out, size_t *out_len)
{
    size_t n = (size_t)sl_layout_params(l);
    sl_frame_header h;
    sl_support *sup = NULL;
    float *a, *b;
    int rc = sl_frame_peek_header(frame, len, &h);
    if (rc != SL_OK)
        return rc;
    if (!(h.flags & SL_FRAME_FLAG_SPLIT)) {
        if ((*out = malloc(len ? len : 1)) == NULL)
            return SL_ENOMEM;
        memcpy(*out, frame, len);
        *out_len = len;
        return SL_OK;
    }
    a = malloc((n ? n : 1) * sizeof *a);
    b = malloc((n ? n : 1) * sizeof *b);
    rc = a && b ? SL_OK : SL_ENOMEM;
    if (rc == SL_OK)
        rc = sl_test_stored_params(s, task, l, (int64_t)h.ref_version, a);
    if (rc == SL_OK)
        rc = sl_test_stored_params(s, task, l, (int64_t)h.base_version, b);
    if (rc == SL_OK)
        rc = sl_support_diff(l, a, b, &sup);
    if (rc == SL_OK)
        rc = sl_frame_unsplit(l, frame, len, NULL, sup, out, out_len);
    sl_support_free(sup);
    free(a);
    free(b);
    return rc;
}

#endif /* SL_SPLIT_TEST_H */
