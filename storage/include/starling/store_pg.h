/*
 * store_pg.h - the coordinator's store on PostgreSQL (libpq): for replicas
 * of the coordinator that share one database (issue #21).
 *
 * Built where libpq is (Debian's libpq-dev), never for the agents. This is
 * the first step of the PostgreSQL backend: the connection and the schema,
 * with the same numbered migrations as the SQLite store (storage/schema.c):
 * schema version N means the same tables, columns and constraints in both,
 * in each database's types (BIGINT for INTEGER, BYTEA for BLOB, DOUBLE
 * PRECISION for REAL, identity columns for SQLite's rowid keys). The store's
 * operations (starling/store.h) follow on this backend; nothing in the
 * product opens it yet.
 */
#ifndef STARLING_STORE_PG_H
#define STARLING_STORE_PG_H

#include <stddef.h>

#include "starling/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The schema version this build writes: the SQLite store's (storage/schema.c). */
#define SL_PGSTORE_SCHEMA_VERSION 6

/** An open PostgreSQL store. Opaque. Not thread-safe: one per thread. */
typedef struct sl_pgstore sl_pgstore;

/**
 * sl_pgstore_open - connect with the libpq connection string @conninfo
 * ("host=... dbname=... user=...", or a postgresql:// URI) and bring the
 * schema to SL_PGSTORE_SCHEMA_VERSION: each missing step in its own
 * transaction with the new version number, so a failure leaves the database
 * at one version or the next. Replicas opening at once are serialised by a
 * transaction-scoped advisory lock: each step runs exactly once. A database
 * a newer build wrote is refused (SL_EVERSION) and left as it is; a
 * connection that fails gives SL_EIO. @err receives a one-line reason.
 */
int sl_pgstore_open(const char *conninfo, sl_pgstore **out, char *err, size_t errcap);

/** sl_pgstore_close - NULL is a no-op. */
void sl_pgstore_close(sl_pgstore *s);

/** sl_pgstore_schema_version - the version recorded in the database. */
int sl_pgstore_schema_version(sl_pgstore *s, int *version);

#ifdef __cplusplus
}
#endif

#endif /* STARLING_STORE_PG_H */
