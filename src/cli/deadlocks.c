/* deadlocks.c: dlock deadlocks: wait-for cycles between owners, found from
 * the waiter records (who waits for which lock; on zk:// and etcd:// the
 * places in line) and the locks' holders.
 * Public library calls only. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dlock deadlocks [PATTERN]\n"
    "Finds owners that wait for each other in a cycle: owner A holds L1 and\n"
    "waits for L2 while owner B holds L2 and waits for L1 (any length), from\n"
    "the waiter records an acquire writes while it waits and the locks'\n"
    "holders, among the locks whose names match PATTERN (glob, default *).\n"
    "Prints each cycle: every owner with its host, pid and command where it\n"
    "set them (dlock run does), the lock it waits for and who holds it.\n"
    "Exit status: 0 no cycle, 1 a cycle found, 69 server trouble or a\n"
    "backend that cannot tell who waits (Redis, zk:// and etcd:// can:\n"
    "on zk:// and etcd:// the nodes or keys in line behind a lock's\n"
    "holders; redlock:// cannot), 64 usage.\n";

/* One waiting owner: the record, the holder of what it waits for, and the
 * waiting owner that holder is (-1: none, it does not wait). */
typedef struct waiter {
  char *owner, *name, *kind, *info, *holder;
  int next;
  int mark; /* 0 unseen, walk number while walked, -1 done */
} waiter;

typedef struct waiters {
  waiter *v;
  size_t n;
  bool oom;
} waiters;

static int add_one(const dlock_waiter *w, void *ud) {
  waiters *ws = ud;
  waiter *nv = realloc(ws->v, (ws->n + 1) * sizeof *nv);
  if (nv == NULL) {
    ws->oom = true;
    return 1;
  }
  ws->v = nv;
  waiter *x = &ws->v[ws->n];
  memset(x, 0, sizeof *x);
  x->owner = strdup(w->owner);
  x->name = strdup(w->name);
  x->kind = strdup(w->kind);
  x->info = strdup(w->info);
  x->next = -1;
  ws->n++;
  if (!x->owner || !x->name || !x->kind || !x->info) ws->oom = true;
  return ws->oom;
}

/* The owner id without a writer's ":write". */
static void base_owner(char *s) {
  size_t n = strlen(s);
  if (n > 6 && strcmp(s + n - 6, ":write") == 0) s[n - 6] = '\0';
}

/* Who holds what x waits for (x->holder, or NULL: free or unknown). */
static int holder_of(dlock_client *c, waiter *x) {
  dlock_lock *l = NULL;
  dlock_rwlock *rw = NULL;
  int rc;
  if (strcmp(x->kind, "read") == 0 || strcmp(x->kind, "write") == 0) {
    rc = dlock_rwlock_new(c, x->name, NULL, &rw);
    if (rc == 0) l = dlock_rwlock_read(rw);
  } else if (strcmp(x->kind, "fair") == 0) {
    rc = dlock_fairlock_new(c, x->name, NULL, 0, &l);
  } else if (strcmp(x->kind, "plain") == 0) {
    rc = dlock_plainlock_new(c, x->name, NULL, &l);
  } else {
    rc = dlock_lock_new(c, x->name, NULL, &l);
  }
  dlock_lock_state st;
  if (rc == 0) rc = dlock_lock_inspect(l, &st);
  if (rc == 0 && st.held && st.owner[0]) {
    base_owner(st.owner);
    if ((x->holder = strdup(st.owner)) == NULL) rc = DLOCK_ENOMEM;
  }
  if (rw)
    dlock_rwlock_free(rw);
  else
    dlock_lock_free(l);
  return rc;
}

/* x, an owner of a cycle, which holds what `prev` waits for. */
static void print_owner(const waiter *x, const waiter *prev) {
  char buf[DLOCK_INFO_MAX + 1];
  cli_holder h;
  printf("  %s", x->owner);
  if (cli_parse_holder(x->info, buf, sizeof buf, &h))
    printf(" (host %s, pid %s: %s)", h.host, h.pid, h.cmd);
  else if (x->info[0])
    printf(" (%s)", x->info);
  printf("\n    holds %s '%s', waits for %s '%s' (held by %s)\n", prev->kind,
         prev->name, x->kind, x->name, x->holder);
}

/* Follows each owner's wait-for edge; prints each cycle once. Returns how
 * many it found. */
static int find_cycles(waiters *ws) {
  int found = 0;
  for (size_t i = 0; i < ws->n; i++) {
    int walk = (int)i + 1, at = (int)i;
    while (at >= 0 && ws->v[at].mark == 0) {
      ws->v[at].mark = walk;
      at = ws->v[at].next;
    }
    if (at >= 0 && ws->v[at].mark == walk) { /* back on this walk: a cycle */
      int len = 0, j = at;
      do {
        len++;
        j = ws->v[j].next;
      } while (j != at);
      printf("deadlock: %d owners wait for each other\n", len);
      int prev = at;
      while (ws->v[prev].next != at)
        prev = ws->v[prev].next;
      j = at;
      do {
        print_owner(&ws->v[j], &ws->v[prev]);
        prev = j;
        j = ws->v[j].next;
      } while (j != at);
      found++;
    }
    for (at = (int)i; at >= 0 && ws->v[at].mark == walk; at = ws->v[at].next)
      ws->v[at].mark = -1;
  }
  return found;
}

int cmd_deadlocks(int argc, char **argv, cli_global *g) {
  static const struct option longopts[] = {CLI_GLOBAL_LONGOPTS, {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, CLI_GLOBAL_SHORTOPTS, longopts,
                            NULL)) != -1) {
    if (opt == 'h') {
      fputs(usage_text, stdout);
      return 0;
    }
    if (opt == '?') {
      cli_err("unknown option '%s' (see dlock deadlocks --help)",
              argv[optind - 1]);
      return EXIT_USAGE;
    }
    if (cli_global_opt(g, opt, optarg) < 0) return EXIT_USAGE;
  }
  if (argc - optind > 1) {
    cli_err("usage: dlock deadlocks [PATTERN]");
    return EXIT_USAGE;
  }
  int rc = 0;
  dlock_client *c = cli_open(g, 0, &rc);
  if (c == NULL) return rc;
  waiters ws = {0};
  int e = dlock_client_scan_waiters(c, optind < argc ? argv[optind] : NULL,
                                    add_one, &ws);
  if (e >= 0 && ws.oom) e = DLOCK_ENOMEM;
  for (size_t i = 0; e >= 0 && i < ws.n; i++)
    if ((e = holder_of(c, &ws.v[i])) > 0) e = 0;
  if (e < 0) {
    cli_err("%s", e == DLOCK_ENOMEM ? "out of memory" : dlock_client_errmsg(c));
    rc = cli_exit_for(e);
  } else {
    /* An owner waiting for a lock held by an owner that waits too. */
    for (size_t i = 0; i < ws.n; i++)
      for (size_t j = 0; ws.v[i].holder && j < ws.n; j++)
        if (j != i && strcmp(ws.v[j].owner, ws.v[i].holder) == 0)
          ws.v[i].next = (int)j;
    int n = find_cycles(&ws);
    if (n == 0)
      printf("no deadlock among %zu waiting owner%s\n", ws.n,
             ws.n == 1 ? "" : "s");
    rc = n > 0 ? 1 : 0;
  }
  for (size_t i = 0; i < ws.n; i++) {
    free(ws.v[i].owner);
    free(ws.v[i].name);
    free(ws.v[i].kind);
    free(ws.v[i].info);
    free(ws.v[i].holder);
  }
  free(ws.v);
  dlock_client_close(c);
  return rc;
}
