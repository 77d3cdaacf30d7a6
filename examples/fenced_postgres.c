/* fenced_postgres.c: a dlock fencing token checked by PostgreSQL (issue 34,
 * part 3). The row carries the highest token that wrote it; an update
 * names its token and matches only while no higher one has written:
 *
 *   CREATE TABLE IF NOT EXISTS fenced_counter (
 *     id    text PRIMARY KEY,
 *     value bigint NOT NULL DEFAULT 0,
 *     fence bigint NOT NULL DEFAULT 0);
 *
 *   UPDATE fenced_counter SET value = $2, fence = $3
 *    WHERE id = $1 AND fence <= $3;            -- 0 rows: a stale token
 *
 * Copy the fence column and the WHERE clause into your own table (or keep
 * a table of fences touched in the same transaction as the write). The
 * check and the write are one statement, so a holder paused past its lease
 * cannot overwrite a later holder's row: its UPDATE matches nothing.
 *
 *   dlock-example-postgres [--victim] [--unguarded] [-n N] DSN LOCK_URL
 *
 * Increments the counter "example" N times (default 5), each a
 * read-modify-write under the lock NAME "pg-counter". --victim: once, with
 * a 300 ms lease, stopping itself (SIGSTOP) between the read and the write,
 * as a GC pause would. --unguarded: without the fence clause (the positive
 * control). Exit 0 when every write matched, 76 when one was refused as
 * stale, 1 on an error. */
#include <dlock.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *schema =
    "SET client_min_messages = warning;"
    "CREATE TABLE IF NOT EXISTS fenced_counter (id text PRIMARY KEY, "
    "value bigint NOT NULL DEFAULT 0, fence bigint NOT NULL DEFAULT 0);"
    "INSERT INTO fenced_counter (id) VALUES ('example') "
    "ON CONFLICT (id) DO NOTHING";
static const char *guarded = "UPDATE fenced_counter SET value = $2, fence = "
                             "$3 WHERE id = $1 AND fence <= $3";
static const char *unguarded =
    "UPDATE fenced_counter SET value = $2, fence = $3 WHERE id = $1";

static int sql_failed(PGconn *pg, PGresult *r, const char *what) {
  fprintf(stderr, "%s: %s", what, PQerrorMessage(pg));
  PQclear(r);
  return 1;
}

/* One read-modify-write with `token`: 0 written, 76 stale, 1 error. */
static int increment(PGconn *pg, uint64_t token, bool guard, bool victim) {
  const char *id = "example";
  PGresult *r =
      PQexecParams(pg, "SELECT value FROM fenced_counter WHERE id = $1", 1,
                   NULL, &id, NULL, NULL, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
    return sql_failed(pg, r, "read");
  long long v = atoll(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (victim) raise(SIGSTOP); /* a pause past the lease, here */
  char value[32], fence[32];
  snprintf(value, sizeof value, "%lld", v + 1);
  snprintf(fence, sizeof fence, "%llu", (unsigned long long)token);
  const char *args[] = {id, value, fence};
  r = PQexecParams(pg, guard ? guarded : unguarded, 3, NULL, args, NULL, NULL,
                   0);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) return sql_failed(pg, r, "write");
  int rows = atoi(PQcmdTuples(r));
  PQclear(r);
  if (rows == 0)
    fprintf(stderr, "token %s is stale: a later holder wrote\n", fence);
  return rows == 1 ? 0 : 76;
}

int main(int argc, char **argv) {
  bool victim = false, guard = true;
  int n = 5, i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], "--victim") == 0)
      victim = true;
    else if (strcmp(argv[i], "--unguarded") == 0)
      guard = false;
    else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
      n = atoi(argv[++i]);
    else
      break;
  }
  if (argc - i != 2) {
    fprintf(stderr,
            "usage: %s [--victim] [--unguarded] [-n N] DSN "
            "LOCK_URL\n",
            argv[0]);
    return 1;
  }
  PGconn *pg = PQconnectdb(argv[i]);
  if (PQstatus(pg) != CONNECTION_OK) {
    fprintf(stderr, "postgres: %s", PQerrorMessage(pg));
    PQfinish(pg);
    return 1;
  }
  PGresult *r = PQexec(pg, schema);
  int rc =
      PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : sql_failed(pg, r, "schema");
  if (rc == 0) PQclear(r);
  dlock_client_options o;
  dlock_client_options_init(&o);
  o.url = argv[i + 1];
  dlock_client *c = NULL;
  dlock_lock *l = NULL;
  if (rc == 0 && (dlock_client_open(&o, &c) != 0 ||
                  dlock_lock_new(c, "pg-counter", NULL, &l) != 0)) {
    fprintf(stderr, "dlock: %s\n",
            c ? dlock_client_errmsg(c) : dlock_client_open_errmsg());
    rc = 1;
  }
  for (int k = 0; rc == 0 && k < (victim ? 1 : n); k++) {
    uint64_t token;
    int e = dlock_lock_try_acquire(l, 30000, victim ? 300 : 0, &token);
    if (e != 0) {
      fprintf(stderr, "dlock: %s\n", dlock_client_errmsg(c));
      rc = 1;
      break;
    }
    rc = increment(pg, token, guard, victim);
    if (!victim) dlock_lock_release(l); /* the victim's lease is gone */
  }
  dlock_lock_free(l);
  dlock_client_close(c);
  PQfinish(pg);
  return rc;
}
