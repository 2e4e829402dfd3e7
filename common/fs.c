/* fs.c - atomic file replacement and bounded whole-file reads. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "starling/common.h"

static int write_all(int fd, const unsigned char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return sl_status_from_errno(errno);
        }
        p += n;
        len -= (size_t)n;
    }
    return SL_OK;
}

/* fsync the directory holding @path, so that a rename in it is durable. */
static int fsync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    int fd, rc = SL_OK;

    if (slash == NULL)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (dir == NULL)
        return SL_ENOMEM;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return sl_status_from_errno(errno);
    if (fsync(fd) != 0 && errno != EINVAL) /* some file systems refuse dir fsync */
        rc = sl_status_from_errno(errno);
    close(fd);
    return rc;
}

int sl_fs_write_atomic(const char *path, const void *data, size_t len, unsigned mode)
{
    static _Atomic unsigned long counter;
    size_t plen;
    char *tmp;
    int fd, rc;

    if (path == NULL || (data == NULL && len > 0))
        return SL_EINVAL;
    plen = strlen(path);
    tmp = malloc(plen + 48);
    if (tmp == NULL)
        return SL_ENOMEM;
    snprintf(tmp, plen + 48, "%s.tmp.%ld.%lu", path, (long)getpid(), atomic_fetch_add(&counter, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
    if (fd < 0) {
        rc = sl_status_from_errno(errno);
        free(tmp);
        return rc;
    }
    rc = write_all(fd, data, len);
    if (rc == SL_OK && fchmod(fd, (mode_t)mode) != 0) /* umask must not widen or narrow it */
        rc = sl_status_from_errno(errno);
    if (rc == SL_OK && fsync(fd) != 0)
        rc = sl_status_from_errno(errno);
    if (close(fd) != 0 && rc == SL_OK)
        rc = sl_status_from_errno(errno);
    if (rc == SL_OK && rename(tmp, path) != 0)
        rc = sl_status_from_errno(errno);
    if (rc != SL_OK) {
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return fsync_parent(path);
}

int sl_fs_read_file(const char *path, size_t max_len, void **out, size_t *out_len)
{
    struct stat st;
    unsigned char *buf;
    size_t have = 0, cap;
    int fd, rc;

    if (path == NULL || out == NULL || out_len == NULL)
        return SL_EINVAL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_status_from_errno(errno);
    if (fstat(fd, &st) != 0) {
        rc = sl_status_from_errno(errno);
        close(fd);
        return rc;
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > max_len) {
        close(fd);
        return SL_ETOOBIG;
    }
    cap = (size_t)st.st_size + 1;
    buf = malloc(cap);
    if (buf == NULL) {
        close(fd);
        return SL_ENOMEM;
    }
    /* the file may grow while we read: never read past max_len */
    for (;;) {
        ssize_t n;
        if (have + 1 == cap) {
            unsigned char *grown;
            if (have >= max_len) {
                char probe;
                n = read(fd, &probe, 1);
                if (n > 0) {
                    rc = SL_ETOOBIG;
                    goto fail;
                }
                if (n == 0)
                    break;
                if (errno == EINTR)
                    continue;
                rc = sl_status_from_errno(errno);
                goto fail;
            }
            cap = cap * 2 > max_len + 1 ? max_len + 1 : cap * 2;
            grown = realloc(buf, cap);
            if (grown == NULL) {
                rc = SL_ENOMEM;
                goto fail;
            }
            buf = grown;
        }
        n = read(fd, buf + have, cap - 1 - have);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = sl_status_from_errno(errno);
            goto fail;
        }
        if (n == 0)
            break;
        have += (size_t)n;
    }
    close(fd);
    buf[have] = '\0';
    *out = buf;
    *out_len = have;
    return SL_OK;
fail:
    free(buf);
    close(fd);
    return rc;
}

int sl_fs_read_secret(const char *path, char **out)
{
    void *buf;
    size_t len;
    char *text, *start;
    int rc;

    if (out == NULL)
        return SL_EINVAL;
    rc = sl_fs_read_file(path, 4096, &buf, &len);
    if (rc != SL_OK)
        return rc;
    text = buf;
    while (len > 0 && isspace((unsigned char)text[len - 1]))
        text[--len] = '\0';
    start = text;
    while (*start != '\0' && isspace((unsigned char)*start))
        start++;
    if (*start == '\0' || strlen(start) != (size_t)(text + len - start)) {
        free(buf);
        return SL_EINVAL; /* empty, or a NUL byte inside */
    }
    memmove(text, start, strlen(start) + 1);
    *out = text;
    return SL_OK;
}
