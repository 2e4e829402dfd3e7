/*
 * Replays fuzz inputs under plain ctest (after zstd's
 * tests/fuzz/regression_driver.c): every argument is a file or a directory
 * of files, each fed once to LLVMFuzzerTestOneInput. A crash, an abort or
 * a sanitizer report fails the test.
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static int run_file(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    buf = malloc((size_t)len + 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "cannot read %s\n", path);
        free(buf);
        fclose(f);
        return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    (*count)++;
    return 0;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    int failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "missing %s\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            while (d != NULL && (e = readdir(d)) != NULL) {
                char path[4096];
                if (e->d_name[0] == '.')
                    continue;
                snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
                failures += run_file(path, &count);
            }
            if (d)
                closedir(d);
        } else {
            failures += run_file(argv[i], &count);
        }
    }
    printf("replayed %zu inputs\n", count);
    return failures != 0 || count == 0;
}
