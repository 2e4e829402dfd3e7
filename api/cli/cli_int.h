/*
 * cli_int.h - internals shared by the operator commands of `starling`
 * (cmd_*.c): status, rounds, devices, task create, model export, backup.
 *
 * Every command talks to a coordinator through the libcurl client
 * (starling/api_client.h) and follows one convention:
 *   --help prints the command's usage on stdout and exits 0;
 *   exit status 0 success, 1 an error (unreachable coordinator, an HTTP
 *   error, a bad file), 2 a usage error (unknown option, missing argument).
 * Errors go to stderr as "starling <command>: <what>".
 *
 * Connection options shared by all of them:
 *   --url U          the coordinator (default $STARLING_URL, else
 *                    https://127.0.0.1:8443)
 *   --token-file F   a file holding the admin token (default
 *                    $STARLING_TOKEN_FILE); without one, requests carry no
 *                    token (enough with --public-status)
 *   --ca-file F      PEM CA bundle for https (default: the system's)
 */
#ifndef STARLING_CLI_INT_H
#define STARLING_CLI_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "starling/api_client.h"

#define SL__CLI_OK    0
#define SL__CLI_ERROR 1
#define SL__CLI_USAGE 2

/* Usage text of the connection options, for the commands' --help. */
#define SL__CLI_CONN_HELP                                                                       \
    "  --url U          the coordinator (default $STARLING_URL, else https://127.0.0.1:8443)\n" \
    "  --token-file F   file with the admin token (default $STARLING_TOKEN_FILE; none: no "     \
    "token)\n"                                                                                  \
    "  --ca-file F      PEM CA bundle for https\n"

/** A connection to one coordinator, made from the shared options. */
typedef struct sl__cli {
    const char *cmd; /* "status", "rounds", ... for messages */
    const char *url, *token_file, *ca_file;
    unsigned max_attempts; /* 0: the command's default */
    sl_client *client;
} sl__cli;

/*
 * sl__cli_opt - when argv[*i] is the option @name, as "--name V" or
 * "--name=V": returns 1 with *value set (and *i moved onto the value);
 * 0 when argv[*i] is another argument; -1 when the value is missing (a
 * message is printed).
 */
int sl__cli_opt(int argc, char **argv, int *i, const char *name, const char **value);

/* sl__cli_conn_opt - consume a connection option (--url, --token-file,
 * --ca-file) at argv[*i] into @c: 1 consumed, 0 not one, -1 usage error. */
int sl__cli_conn_opt(sl__cli *c, int argc, char **argv, int *i);

/* sl__cli_int - a strict decimal integer in [min, max] for option @name:
 * 0 with *out set, or SL__CLI_USAGE after a message. */
int sl__cli_int(const sl__cli *c, const char *name, const char *text, int64_t min, int64_t max,
                int64_t *out);

/* sl__cli_usage_error - "starling <cmd>: <message>" and a hint; returns SL__CLI_USAGE. */
int sl__cli_usage_error(const sl__cli *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* sl__cli_error - "starling <cmd>: <message>" on stderr; returns SL__CLI_ERROR. */
int sl__cli_error(const sl__cli *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* sl__cli_connect - make the client (reads the token file). 0 or SL__CLI_ERROR. */
int sl__cli_connect(sl__cli *c);
void sl__cli_close(sl__cli *c);

/*
 * sl__cli_call - one request. On a 2xx answer returns 0 and, when @json is
 * not NULL, the parsed body in *json (the caller frees it; NULL for an empty
 * body) and when @raw is not NULL the response (the caller frees it with
 * sl_client_response_free). Otherwise prints what went wrong (the problem
 * document's detail, or the transport error) and returns SL__CLI_ERROR.
 */
int sl__cli_call(sl__cli *c, const char *method, const char *path, const char *body, cJSON **json,
                 sl_client_response *raw);

/* The task the user meant: @given (> 0) if set, else the only task of
 * /v1/status. 0 with *task set, else the status to exit with. */
int sl__cli_pick_task(sl__cli *c, int64_t given, int64_t *task);

/* ---- downloads (fetch.c) ------------------------------------------------------ */

#define SL__CLI_CHUNK (1u << 20) /* bytes per range of sl__cli_fetch */

/*
 * sl__cli_fetch - GET @path in ranges of @chunk bytes (0: SL__CLI_CHUNK),
 * each with the client's retries, showing progress under @label on stderr
 * (a bar on a terminal, plain lines otherwise: progress.h). The pieces are
 * held together by If-Range with the strong ETag; when the ETag is a quoted
 * SHA-256 hex the whole body is checked against it and @sha_hex receives it
 * (else ""). At most @max bytes. On 0, *data (malloc'd, the caller frees
 * it) and *len hold the body; otherwise SL__CLI_ERROR after a message.
 */
int sl__cli_fetch(sl__cli *c, const char *path, const char *label, size_t chunk, size_t max,
                  uint8_t **data, size_t *len, char sha_hex[65]);

/* ---- output ----------------------------------------------------------------- */

/* 1 when @f should get ANSI colours: a terminal, NO_COLOR unset, TERM not
 * "dumb"; CLICOLOR_FORCE=1 forces them (tests, pagers with -R). */
int sl__cli_colour(FILE *f);
/* Human forms ("1.2 kB", "3.4 s", "71.2%", "2024-05-01 12:00:00Z"); "-" for unknown. */
void sl__cli_bytes(double n, char *out, size_t cap);
void sl__cli_duration(int64_t ms, char *out, size_t cap);
void sl__cli_percent(const cJSON *v, char *out, size_t cap);
void sl__cli_time(int64_t ms, char *out, size_t cap);
/* A number member of @o (or @dflt when absent or not a number). */
double sl__cli_num(const cJSON *o, const char *key, double dflt);
/* A string member of @o (or "" when absent). */
const char *sl__cli_str(const cJSON *o, const char *key);

/* ---- the commands (argv[0] is the command's name) ------------------------------ */

int sl__cli_status(int argc, char **argv);
int sl__cli_rounds(int argc, char **argv);
int sl__cli_task(int argc, char **argv);
int sl__cli_model(int argc, char **argv);
int sl__cli_follow(int argc, char **argv);
int sl__cli_report(int argc, char **argv); /* cmd_report.c: reads a data directory */
int sl__cli_devices(int argc, char **argv);
int sl__cli_backup(int argc, char **argv);
/* `starling store migrate`: an SQLite store into PostgreSQL (cmd_store.c). */
int sl__cli_store(int argc, char **argv);

#endif /* STARLING_CLI_INT_H */
