/* schema.c - numbered, transactional schema migrations. */
#include <stdio.h>

#include "store_int.h"

/*
 * Each step takes the schema from version i to i + 1 and runs in its own
 * transaction together with the new version number, so a crash leaves the
 * database at one version or the next, never between. Append steps; never
 * edit a released one.
 */
static const char *const migrations[] = {
    /* 0 -> 1: the base schema */
    "CREATE TABLE tasks ("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  config TEXT NOT NULL,"
    "  layout TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE model_versions ("
    "  task_id INTEGER NOT NULL REFERENCES tasks(id),"
    "  version INTEGER NOT NULL CHECK (version > 0),"
    "  parent INTEGER NOT NULL,"
    "  frame BLOB NOT NULL,"
    "  sha256 BLOB NOT NULL CHECK (length(sha256) = 32),"
    "  created_at INTEGER NOT NULL,"
    "  metrics TEXT,"
    "  opt_state BLOB,"
    "  PRIMARY KEY (task_id, version));"
    "CREATE TABLE devices ("
    "  id INTEGER PRIMARY KEY,"
    "  public_key BLOB NOT NULL UNIQUE,"
    "  enrolled_at INTEGER NOT NULL,"
    "  last_seen INTEGER NOT NULL,"
    "  capabilities TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT 'active');"
    "CREATE TABLE rounds ("
    "  id INTEGER PRIMARY KEY,"
    "  task_id INTEGER NOT NULL REFERENCES tasks(id),"
    "  round_no INTEGER NOT NULL,"
    "  base_version INTEGER NOT NULL,"
    "  state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 4),"
    "  target INTEGER NOT NULL, quorum INTEGER NOT NULL,"
    "  opened_at INTEGER NOT NULL, select_deadline INTEGER NOT NULL,"
    "  report_deadline INTEGER NOT NULL, closed_at INTEGER NOT NULL DEFAULT 0,"
    "  selected INTEGER NOT NULL DEFAULT 0, reported INTEGER NOT NULL DEFAULT 0,"
    "  dropped INTEGER NOT NULL DEFAULT 0, late INTEGER NOT NULL DEFAULT 0,"
    "  rejected INTEGER NOT NULL DEFAULT 0,"
    "  bytes_up INTEGER NOT NULL DEFAULT 0, bytes_down INTEGER NOT NULL DEFAULT 0,"
    "  error TEXT NOT NULL DEFAULT '',"
    "  UNIQUE (task_id, round_no));"
    "CREATE TABLE round_participants ("
    "  round_id INTEGER NOT NULL REFERENCES rounds(id),"
    "  device_id INTEGER NOT NULL REFERENCES devices(id),"
    "  state INTEGER NOT NULL CHECK (state BETWEEN 0 AND 6),"
    "  reason TEXT NOT NULL DEFAULT '',"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (round_id, device_id));"
    "CREATE TABLE updates ("
    "  id INTEGER PRIMARY KEY,"
    "  round_id INTEGER NOT NULL REFERENCES rounds(id),"
    "  device_id INTEGER NOT NULL REFERENCES devices(id),"
    "  frame BLOB NOT NULL,"
    "  num_samples INTEGER NOT NULL,"
    "  sha256 BLOB NOT NULL CHECK (length(sha256) = 32),"
    "  received_at INTEGER NOT NULL,"
    "  UNIQUE (round_id, device_id));"
    "CREATE TABLE uploads ("
    "  id TEXT PRIMARY KEY,"
    "  device_id INTEGER NOT NULL REFERENCES devices(id),"
    "  round_id INTEGER NOT NULL REFERENCES rounds(id),"
    "  length INTEGER NOT NULL,"
    "  offset INTEGER NOT NULL,"
    "  sha256 BLOB NOT NULL CHECK (length(sha256) = 32),"
    "  num_samples INTEGER NOT NULL,"
    "  expires_at INTEGER NOT NULL,"
    "  data BLOB NOT NULL);",

    /* 1 -> 2: the audit log; lookups by expiry and by base version */
    "CREATE TABLE audit ("
    "  id INTEGER PRIMARY KEY,"
    "  at INTEGER NOT NULL,"
    "  actor TEXT NOT NULL,"
    "  action TEXT NOT NULL,"
    "  detail TEXT NOT NULL);"
    "CREATE INDEX uploads_expiry ON uploads(expires_at);"
    "CREATE INDEX rounds_base ON rounds(task_id, base_version);",
    /* 2 -> 3: a device's participations and updates (the device list, GET /v1/devices) */
    ("CREATE INDEX round_participants_device ON round_participants(device_id, state);"
     "CREATE INDEX updates_device ON updates(device_id);"),
    /* 3 -> 4: a task's model spec (device/nn/MODEL_SPEC.md; NULL for a task without one) and
     * the reasons devices gave for refusing a task's model (one per device and task) */
    ("ALTER TABLE tasks ADD COLUMN model_spec TEXT;"
     "CREATE TABLE device_refusals ("
     "  task_id INTEGER NOT NULL REFERENCES tasks(id),"
     "  device_id INTEGER NOT NULL REFERENCES devices(id),"
     "  reason TEXT NOT NULL,"
     "  at INTEGER NOT NULL,"
     "  PRIMARY KEY (task_id, device_id));"),
    /* 4 -> 5: a task's data contract (device/data/DATA_CONTRACT.md; NULL for none) and the
     * devices' federated evaluation of each round's base model on their held-out samples */
    ("ALTER TABLE tasks ADD COLUMN data_contract TEXT;"
     "CREATE TABLE round_evals ("
     "  round_id INTEGER NOT NULL REFERENCES rounds(id),"
     "  device_id INTEGER NOT NULL REFERENCES devices(id),"
     "  samples INTEGER NOT NULL CHECK (samples > 0),"
     "  loss REAL NOT NULL,"
     "  accuracy REAL,"
     "  mae REAL,"
     "  rmse REAL,"
     "  at INTEGER NOT NULL,"
     "  PRIMARY KEY (round_id, device_id));"),
    /* 5 -> 6: device sessions (#20): the coordinator's session secrets by epoch, and the
     * sessions it issued (their keys are derived, never stored), for listing and revocation */
    ("CREATE TABLE session_secrets ("
     "  epoch INTEGER PRIMARY KEY,"
     "  secret BLOB NOT NULL CHECK (length(secret) = 32),"
     "  created_at INTEGER NOT NULL);"
     "CREATE TABLE sessions ("
     "  id TEXT PRIMARY KEY,"
     "  device_id INTEGER NOT NULL REFERENCES devices(id),"
     "  epoch INTEGER NOT NULL,"
     "  issued_at INTEGER NOT NULL,"
     "  expires_at INTEGER NOT NULL,"
     "  revoked_at INTEGER);"
     "CREATE INDEX sessions_device ON sessions(device_id, expires_at);"),
    /* 6 -> 7: the leader of the replicas that share the store, with its fencing epoch */
    ("CREATE TABLE leader ("
     "  id INTEGER PRIMARY KEY CHECK (id = 1),"
     "  owner TEXT NOT NULL,"
     "  epoch INTEGER NOT NULL,"
     "  expires_at INTEGER NOT NULL);"),
    /* 7 -> 8: check-ins that replicas other than the leader took, for its selection */
    ("CREATE TABLE checkins ("
     "  task_id INTEGER NOT NULL REFERENCES tasks(id),"
     "  device_id INTEGER NOT NULL REFERENCES devices(id),"
     "  at INTEGER NOT NULL,"
     "  PRIMARY KEY (task_id, device_id));"
     "CREATE INDEX checkins_at ON checkins(task_id, at);"),
    /* 8 -> 9: each replica's durable partial sum of the updates it took in a round */
    ("CREATE TABLE round_partials ("
     "  round_id INTEGER NOT NULL REFERENCES rounds(id),"
     "  replica TEXT NOT NULL,"
     "  data BLOB NOT NULL,"
     "  devices BLOB NOT NULL,"
     "  updates INTEGER NOT NULL,"
     "  at INTEGER NOT NULL,"
     "  PRIMARY KEY (round_id, replica));"),
    /* 9 -> 10: the local steps a device reports with its update (FedNova, time budgets) */
    ("ALTER TABLE updates ADD COLUMN local_steps INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE uploads ADD COLUMN local_steps INTEGER NOT NULL DEFAULT 0;"),
    /* 10 -> 11: what each device measured of itself for a task (time budgets, #22) */
    ("CREATE TABLE device_pace ("
     "  task_id INTEGER NOT NULL REFERENCES tasks(id),"
     "  device_id INTEGER NOT NULL REFERENCES devices(id),"
     "  step_ms REAL NOT NULL,"
     "  up_bps REAL NOT NULL,"
     "  down_bps REAL NOT NULL,"
     "  at INTEGER NOT NULL,"
     "  PRIMARY KEY (task_id, device_id));"),
    /* 11 -> 12: how many devices a round's bytes_down came from (what a download weighs) */
    ("ALTER TABLE rounds ADD COLUMN downloads INTEGER NOT NULL DEFAULT 0;"),
    /* 12 -> 13: what each replica served of a round's downloads (summed at its close) */
    ("CREATE TABLE round_downloads ("
     "  round_id INTEGER NOT NULL REFERENCES rounds(id),"
     "  replica TEXT NOT NULL,"
     "  bytes INTEGER NOT NULL,"
     "  devices BLOB NOT NULL,"
     "  at INTEGER NOT NULL,"
     "  PRIMARY KEY (round_id, replica));"),
    /* 13 -> 14: a device's upload sessions (the per-device bound a create counts, and the
     * same round's older session it replaces), read by index, not by all live sessions */
    ("CREATE INDEX uploads_device ON uploads(device_id, round_id);"),
    /* 14 -> 15: 1 once retention took the bytes of the round's updates and its partial sums
     * (sl_store_retain_updates) */
    ("ALTER TABLE rounds ADD COLUMN updates_retired INTEGER NOT NULL DEFAULT 0;"),
};

#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

static int read_version(sl__conn *c, int *version)
{
    sqlite3_stmt *st;
    int rc = sl__stmt(c, "SELECT version FROM schema_version", &st);
    if (rc != SL_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *version = sqlite3_column_int(st, 0);
        rc = SQLITE_DONE;
    } else if (rc == SQLITE_DONE) {
        *version = 0;
    }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? SL_OK : sl__status_from_sqlite(rc);
}

static int step_to(sl__conn *c, int target)
{
    char sql[96];
    int rc = sl__exec(c, "BEGIN IMMEDIATE");
    if (rc != SL_OK)
        return rc;
    rc = sl__exec(c, migrations[target - 1]);
    snprintf(sql, sizeof sql, "DELETE FROM schema_version; INSERT INTO schema_version VALUES (%d)",
             target);
    if (rc == SL_OK)
        rc = sl__exec(c, sql);
    if (rc == SL_OK)
        rc = sl__exec(c, "COMMIT");
    if (rc != SL_OK)
        sl__exec(c, "ROLLBACK");
    return rc;
}

static int ensure_version_table(sl__conn *c)
{
    return sl__exec(c, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
}

int sl__migrate(sl__conn *c, char *err, size_t errcap)
{
    int version, rc;

    if ((rc = ensure_version_table(c)) != SL_OK || (rc = read_version(c, &version)) != SL_OK) {
        snprintf(err, errcap, "cannot read the schema version: %s", sl_strerror(rc));
        return rc;
    }
    if (version > NMIGRATIONS) {
        snprintf(err, errcap,
                 "the database has schema version %d, newer than this build's %d: use a newer "
                 "starling-coordinator",
                 version, NMIGRATIONS);
        return SL_EVERSION;
    }
    while (version < NMIGRATIONS) {
        rc = step_to(c, version + 1);
        if (rc != SL_OK) {
            snprintf(err, errcap, "migration to schema version %d failed: %s (%s)", version + 1,
                     sl_strerror(rc), sqlite3_errmsg(c->db));
            return rc;
        }
        version++;
    }
    return SL_OK;
}

int sl__schema_create_at(sl__conn *c, int version)
{
    int rc = ensure_version_table(c);
    if (version < 0 || version > NMIGRATIONS)
        return SL_EINVAL;
    for (int v = 1; v <= version && rc == SL_OK; v++)
        rc = step_to(c, v);
    return rc;
}

_Static_assert(NMIGRATIONS == SL_STORE_SCHEMA_VERSION, "store.h's schema version is the last step");
