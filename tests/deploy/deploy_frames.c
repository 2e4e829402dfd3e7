/*
 * deploy_frames - the frames test_rootfs.sh sends to the coordinator in
 * the runtime root filesystem; everything else there is curl and openssl.
 *
 *   deploy_frames layout                    the layout text (stdout)
 *   deploy_frames model OUT                 the initial full-model frame, version 1
 *   deploy_frames update ROUND VERSION OUT  a sparse fp32 update of ROUND from VERSION
 *
 * Exit status 0, or 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "starling/codec.h"

#define LAYOUT "w 4 8\nb 4\n"

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok = f != NULL && fwrite(data, 1, len, f) == len;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "deploy_frames: cannot write %s\n", path);
    return ok ? 0 : 1;
}

static int model(const sl_layout *layout, const char *out)
{
    size_t n = (size_t)sl_layout_params(layout), len = 0;
    float *w = malloc(n * sizeof *w);
    void *frame = NULL;
    int rc;
    if (w == NULL)
        return 1;
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((int)(i % 7) - 3) * 0.1f;
    rc = sl_frame_encode_model(layout, w, 1, 3, &frame, &len);
    free(w);
    if (rc != SL_OK) {
        fprintf(stderr, "deploy_frames: model: %s\n", sl_strerror(rc));
        return 1;
    }
    rc = write_file(out, frame, len);
    free(frame);
    return rc;
}

static int update(const sl_layout *layout, const char *round, const char *version, const char *out)
{
    char *end1, *end2;
    unsigned long long r = strtoull(round, &end1, 10), v = strtoull(version, &end2, 10);
    sl_frame_header h = {SL_FRAME_VERSION, SL_FRAME_UPDATE, 0, 0, v, r, 0};
    sl_sparse_tensor t[2];
    static const uint32_t idx[3] = {0, 1, 2};
    static const float val[3] = {0.25f, 0.125f, -0.25f};
    sl_encode_params p;
    void *frame = NULL;
    size_t len = 0;
    int rc;
    if (*round == '\0' || *end1 != '\0' || *version == '\0' || *end2 != '\0') {
        fprintf(stderr, "deploy_frames: ROUND and VERSION are numbers\n");
        return 1;
    }
    h.layout_hash = sl_layout_hash(layout);
    for (size_t i = 0; i < 2; i++) {
        t[i].n = 3;
        t[i].idx = idx;
        t[i].val = val;
    }
    sl_encode_params_default(&p);
    rc = sl_frame_encode_update(layout, &h, t, &p, NULL, &frame, &len);
    if (rc != SL_OK) {
        fprintf(stderr, "deploy_frames: update: %s\n", sl_strerror(rc));
        return 1;
    }
    rc = write_file(out, frame, len);
    free(frame);
    return rc;
}

int main(int argc, char **argv)
{
    sl_layout *layout = NULL;
    int rc = 2;
    if (sl_layout_parse(LAYOUT, strlen(LAYOUT), &layout) != SL_OK)
        return 1;
    if (argc == 2 && strcmp(argv[1], "layout") == 0)
        rc = fputs(LAYOUT, stdout) < 0;
    else if (argc == 3 && strcmp(argv[1], "model") == 0)
        rc = model(layout, argv[2]);
    else if (argc == 5 && strcmp(argv[1], "update") == 0)
        rc = update(layout, argv[2], argv[3], argv[4]);
    else
        fprintf(stderr, "usage: deploy_frames layout | model OUT | update ROUND VERSION OUT\n");
    sl_layout_free(layout);
    return rc;
}
