/*
 * server_bench.h - a switch for `starling bench api` alone.
 *
 * Not part of the product: no option, flag, setting or endpoint of the
 * coordinator reaches it, and only the benchmark includes this header. It
 * exists so the benchmark can measure what authentication costs against the
 * same server with none.
 */
#ifndef STARLING_SERVER_BENCH_H
#define STARLING_SERVER_BENCH_H

#include "starling/api_server.h"

/*
 * Admit device requests without authentication: the device is whoever the
 * X-Starling-Device header names; no timestamp, nonce, signature or session
 * is checked, and no rate limit applies. Everything after authentication
 * (routing, the upload's digest, decoding, validation, the durable write)
 * runs as for an authenticated request.
 *
 * Refused (SL_EINVAL) unless @s was created with insecure_http, listens on
 * a loopback address (127.0.0.0/8 or ::1) and is not started yet: a server
 * any other machine can reach never runs without authentication.
 */
int sl__server_bench_unauthenticated(sl_server *s);

#endif /* STARLING_SERVER_BENCH_H */
