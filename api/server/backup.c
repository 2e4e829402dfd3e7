/*
 * backup.c - online backups of the coordinator's database, for operators
 * (admin token): POST /v1/backups copies the database with SQLite's
 * VACUUM INTO (sl_store_backup) while rounds go on, into a private directory
 * made under $TMPDIR (else /tmp) at the first backup, and answers with its
 * size and SHA-256; GET /v1/backups/{id} serves the file with that digest
 * as a strong ETag and single byte ranges, so a client resumes a cut
 * download and checks what it received (sl_client_download does both).
 *
 * A backup is a file on disk, not a buffer: the server's memory stays
 * O(model size) whatever the database's size, and libmicrohttpd sends the
 * file from its descriptor. Each backup is kept SL__BACKUP_TTL_MS and at
 * most SL__BACKUPS exist at a time (the oldest goes first); the files and
 * the directory are removed when the server is freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/sha256.h>

#include "server_int.h"

/* The backup directory, made on first use. Called with backup_lock held. */
static int backup_dir(sl_server *s)
{
    const char *tmp = getenv("TMPDIR");
    if (s->backup_dir[0] != '\0')
        return SL_OK;
    if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > 400)
        tmp = "/tmp";
    snprintf(s->backup_dir, sizeof s->backup_dir, "%s/starling-backups-XXXXXX", tmp);
    if (mkdtemp(s->backup_dir) == NULL) {
        s->backup_dir[0] = '\0';
        return errno == ENOSPC ? SL_ENOSPC : SL_EIO;
    }
    return SL_OK;
}

static void forget(sl__backup *b)
{
    if (b->id[0] != '\0')
        unlink(b->path);
    memset(b, 0, sizeof *b);
}

/* Drop expired backups; returns a free slot (the oldest one evicted when
 * every slot is taken). Called with backup_lock held. */
static sl__backup *expire(sl_server *s, int64_t now)
{
    sl__backup *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < SL__BACKUPS; i++) {
        sl__backup *b = &s->backups[i];
        if (b->id[0] != '\0' && b->expires_ms <= now)
            forget(b);
        if (b->id[0] == '\0') {
            if (free_slot == NULL)
                free_slot = b;
        } else if (oldest == NULL || b->created_ms < oldest->created_ms) {
            oldest = b;
        }
    }
    if (free_slot == NULL) {
        forget(oldest);
        free_slot = oldest;
    }
    return free_slot;
}

/* SHA-256 and size of the file at @path. */
static int digest_file(const char *path, uint8_t sha[32], uint64_t *bytes)
{
    mbedtls_sha256_context ctx;
    unsigned char buf[65536];
    uint64_t total = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = SL_OK;
    if (fd < 0)
        return SL_EIO;
    mbedtls_sha256_init(&ctx);
    (void)mbedtls_sha256_starts_ret(&ctx, 0);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = SL_EIO;
            break;
        }
        if (n == 0)
            break;
        (void)mbedtls_sha256_update_ret(&ctx, buf, (size_t)n);
        total += (uint64_t)n;
    }
    (void)mbedtls_sha256_finish_ret(&ctx, sha);
    mbedtls_sha256_free(&ctx);
    close(fd);
    if (rc == SL_OK)
        *bytes = total;
    return rc;
}

static cJSON *backup_json(const sl__backup *b)
{
    cJSON *o = cJSON_CreateObject();
    char hex[65], href[64];
    if (o == NULL)
        return NULL;
    memcpy(hex, b->etag + 1, 64);
    hex[64] = '\0';
    snprintf(href, sizeof href, "/v1/backups/%s", b->id);
    cJSON_AddStringToObject(o, "backup_id", b->id);
    cJSON_AddNumberToObject(o, "bytes", (double)b->bytes);
    cJSON_AddStringToObject(o, "sha256", hex);
    cJSON_AddNumberToObject(o, "created_at_ms", (double)b->created_ms);
    cJSON_AddNumberToObject(o, "expires_at_ms", (double)b->expires_ms);
    cJSON_AddStringToObject(o, "href", href);
    return o;
}

void sl__h_backup_create(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl__backup b, *slot;
    uint8_t sha[32];
    char hex[65], detail[160];
    cJSON *out;
    int rc;
    (void)p;
    if (strcmp(sl_store_backend(s->store), "sqlite") != 0) { /* PostgreSQL: its own tools */
        sl__problem(rs, rq, 409, "conflict", NULL,
                    "this coordinator's store is %s (replicas): back it up with pg_dump or the "
                    "database's base backups (deploy/README.md)",
                    sl_store_backend(s->store));
        return;
    }
    memset(&b, 0, sizeof b);
    sl__random_id(b.id, sizeof b.id, 12);
    pthread_mutex_lock(&s->backup_lock);
    rc = backup_dir(s);
    if (rc == SL_OK)
        snprintf(b.path, sizeof b.path, "%s/%s.db", s->backup_dir, b.id);
    pthread_mutex_unlock(&s->backup_lock);
    if (rc != SL_OK) {
        sl__problem_status(rs, rq, rc, "making the backup directory");
        return;
    }
    /* the copy runs outside the lock: it takes a while, and rounds go on */
    rc = sl_store_backup(s->store, b.path);
    if (rc == SL_OK)
        rc = digest_file(b.path, sha, &b.bytes);
    if (rc != SL_OK) {
        unlink(b.path);
        sl_log(SL_LOG_ERROR, "http", "backup failed: %s", sl_strerror(rc));
        sl__problem_status(rs, rq, rc, "backing up the database");
        return;
    }
    sl_hex(sha, 32, hex);
    snprintf(b.etag, sizeof b.etag, "\"%s\"", hex);
    b.created_ms = sl__wall_ms(s);
    b.expires_ms = b.created_ms + SL__BACKUP_TTL_MS;
    pthread_mutex_lock(&s->backup_lock);
    slot = expire(s, b.created_ms);
    *slot = b;
    out = backup_json(&b);
    pthread_mutex_unlock(&s->backup_lock);
    snprintf(detail, sizeof detail, "{\"backup_id\":\"%s\",\"bytes\":%llu}", b.id,
             (unsigned long long)b.bytes);
    rc = sl_store_audit(s->store, "admin", "backup", detail);
    if (rc != SL_OK)
        sl_log(SL_LOG_WARN, "http", "audit of backup %s failed: %s", b.id, sl_strerror(rc));
    sl_log(SL_LOG_INFO, "http", "backup %s: %llu bytes, sha256 %s", b.id,
           (unsigned long long)b.bytes, hex);
    sl__resp_json(rs, 201, out);
    sl__resp_header(rs, "Location", "/v1/backups/%s", b.id);
}

void sl__h_backup_get(sl_server *s, sl__req *rq, const sl__params *p, sl__resp *rs)
{
    sl__backup b;
    const char *if_range = sl__req_header(rq, "If-Range");
    uint64_t first = 0, last = 0;
    struct stat sb;
    int found = 0, range, fd = -1;
    pthread_mutex_lock(&s->backup_lock);
    (void)expire(s, sl__wall_ms(s));
    for (int i = 0; i < SL__BACKUPS && !found; i++)
        if (s->backups[i].id[0] != '\0' && strcmp(s->backups[i].id, p->seg[0]) == 0) {
            b = s->backups[i];
            found = 1;
        }
    /* opened under the lock: an expiry that unlinks it now leaves this descriptor valid */
    if (found)
        fd = open(b.path, O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&s->backup_lock);
    if (!found) {
        sl__problem(rs, rq, 404, "not-found", NULL,
                    "no backup %s (backups are kept %lld minutes: POST /v1/backups makes one)",
                    p->seg[0], (long long)(SL__BACKUP_TTL_MS / 60000));
        return;
    }
    if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != b.bytes) {
        if (fd >= 0)
            close(fd);
        sl__problem_status(rs, rq, SL_EIO, "reading the backup");
        return;
    }
    range = sl__parse_range(sl__req_header(rq, "Range"), b.bytes, &first, &last);
    if (range != 0 && if_range != NULL && strcmp(if_range, b.etag) != 0)
        range = 0; /* the client's bytes are of another backup: send it all */
    sl__resp_header(rs, "ETag", "%s", b.etag);
    sl__resp_header(rs, "Accept-Ranges", "bytes");
    sl__resp_header(rs, "Cache-Control", "no-store");
    sl__resp_header(rs, "Content-Disposition", "attachment; filename=\"starling-%s.db\"", b.id);
    if (range < 0) {
        close(fd);
        sl__problem(rs, rq, 416, "range-not-satisfiable", NULL, "the backup has %llu bytes",
                    (unsigned long long)b.bytes);
        sl__resp_header(rs, "Content-Range", "bytes */%llu", (unsigned long long)b.bytes);
        return;
    }
    if (range == 0) {
        first = 0;
        last = b.bytes ? b.bytes - 1 : 0;
    }
    sl__resp_file(rs, range ? 206 : 200, "application/vnd.sqlite3", fd, first,
                  b.bytes ? last - first + 1 : 0);
    if (range)
        sl__resp_header(rs, "Content-Range", "bytes %llu-%llu/%llu", (unsigned long long)first,
                        (unsigned long long)last, (unsigned long long)b.bytes);
}

void sl__backups_free(sl_server *s)
{
    for (int i = 0; i < SL__BACKUPS; i++)
        forget(&s->backups[i]);
    if (s->backup_dir[0] != '\0')
        rmdir(s->backup_dir);
    s->backup_dir[0] = '\0';
}
