/*
 * sl_pg.h - a throwaway PostgreSQL cluster for tests: Debian's postgresql
 * package (initdb and pg_ctl from /usr/lib/postgresql/<version>/bin), in a
 * temporary folder, listening on a Unix socket in that folder only (no TCP
 * port), trust authentication for the user "starling". As root the cluster
 * runs as the "postgres" user (initdb refuses root), through runuser.
 *
 *   sl_test_pg pg;
 *   if (sl_test_pg_start(&pg, why, sizeof why) != 0) skip with @why;
 *   ... connect with pg.conninfo ...
 *   sl_test_pg_stop(&pg);   (stops the server and removes the folder)
 */
#ifndef SL_PG_TEST_H
#define SL_PG_TEST_H

#include <stddef.h>

typedef struct sl_test_pg {
    char dir[64];       /* the cluster's folder (short: a socket path has ~100 bytes) */
    char bin[256];      /* the folder of initdb, pg_ctl */
    char conninfo[256]; /* libpq connection string to the "postgres" database */
    int running;
} sl_test_pg;

/*
 * sl_test_pg_start - make and start a cluster. 0 on success; -1 when
 * PostgreSQL is not installed or does not start, with the reason in @why
 * (a test then skips, naming it).
 */
int sl_test_pg_start(sl_test_pg *pg, char *why, size_t whycap);

/* sl_test_pg_restart - stop the server (fast, or "immediate": a crash) and start it again. */
int sl_test_pg_restart(sl_test_pg *pg, int immediate);

/* sl_test_pg_stop - stop the server and remove its folder. */
void sl_test_pg_stop(sl_test_pg *pg);

#endif /* SL_PG_TEST_H */
