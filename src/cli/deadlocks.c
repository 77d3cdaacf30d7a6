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

/* One waiting owner: the record, the holders of what it waits for (a
 * read lock's every reader), and the waiting owners those holders are. */
typedef struct waiter {
  char *owner, *name, *kind, *info;
  char **holders;
  size_t nh;
  int *next; /* waiters that hold what this one waits for */
  size_t nn;
  bool oom; /* a holder not kept */
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
  ws->n++;
  if (!x->owner || !x->name || !x->kind || !x->info) ws->oom = true;
  return ws->oom;
}

/* The owner id without a writer's ":write". */
static void base_owner(char *s) {
  size_t n = strlen(s);
  if (n > 6 && strcmp(s + n - 6, ":write") == 0) s[n - 6] = '\0';
}

/* One holder of what x waits for, onto x->holders (each once). */
static int add_holder(const char *owner, void *ud) {
  waiter *x = ud;
  char *o = strdup(owner);
  if (o == NULL) return x->oom = true;
  base_owner(o);
  for (size_t i = 0; i < x->nh; i++)
    if (strcmp(x->holders[i], o) == 0) {
      free(o);
      return 0;
    }
  char **nv = realloc(x->holders, (x->nh + 1) * sizeof *nv);
  if (nv == NULL) {
    free(o);
    return x->oom = true;
  }
  x->holders = nv;
  x->holders[x->nh++] = o;
  return 0;
}

/* Who holds what x waits for (x->holders: every reader of a read lock;
 * none when free or unknown). */
static int holders_of(dlock_client *c, waiter *x) {
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
  if (rc == 0) rc = dlock_lock_holders(l, add_holder, x);
  if (rc >= 0 && x->oom) rc = DLOCK_ENOMEM;
  if (rw)
    dlock_rwlock_free(rw);
  else
    dlock_lock_free(l);
  return rc;
}

/* x, an owner of a cycle, which holds what `prev` waits for, and waits
 * for what `by` (the reader or holder that closes the way) holds. */
static void print_owner(const waiter *x, const waiter *prev, const waiter *by) {
  char buf[DLOCK_INFO_MAX + 1];
  cli_holder h;
  printf("  %s", x->owner);
  if (cli_parse_holder(x->info, buf, sizeof buf, &h))
    printf(" (host %s, pid %s: %s)", h.host, h.pid, h.cmd);
  else if (x->info[0])
    printf(" (%s)", x->info);
  /* Of a read-write lock, either side (a reader of what a writer waits
   * for holds the read side). */
  bool rw = strcmp(prev->kind, "read") == 0 || strcmp(prev->kind, "write") == 0;
  printf("\n    holds %s '%s', waits for %s '%s' (held by %s)\n",
         rw ? "read-write lock" : prev->kind, prev->name, x->kind, x->name,
         by->owner);
}

/* The search for a way from `at` back to `start` through waiters after
 * start (a cycle is found from its first waiter only), each once. */
typedef struct search {
  waiters *ws;
  int start;
  int *path, len;
  char *dead; /* searched from, no way back */
} search;

static bool way_back(search *s, int at) {
  s->path[s->len++] = at;
  s->dead[at] = 1;
  waiter *x = &s->ws->v[at];
  for (size_t k = 0; k < x->nn; k++) {
    int j = x->next[k];
    if (j == s->start) return true;
    if (j > s->start && !s->dead[j] && way_back(s, j)) return true;
  }
  s->len--;
  return false;
}

/* Follows the owners' wait-for edges (every holder of what each waits
 * for); prints each cycle once, from its first waiter. Returns how many
 * it found, or -1 out of memory. */
static int find_cycles(waiters *ws) {
  int found = 0;
  search s = {ws, 0, calloc(ws->n + 1, sizeof(int)), 0, calloc(ws->n + 1, 1)};
  if (s.path == NULL || s.dead == NULL) {
    free(s.path);
    free(s.dead);
    return -1;
  }
  for (size_t i = 0; i < ws->n; i++) {
    s.start = (int)i;
    s.len = 0;
    memset(s.dead, 0, ws->n);
    if (!way_back(&s, (int)i)) continue;
    printf("deadlock: %d owners wait for each other\n", s.len);
    for (int k = 0; k < s.len; k++)
      print_owner(&ws->v[s.path[k]], &ws->v[s.path[(k + s.len - 1) % s.len]],
                  &ws->v[s.path[(k + 1) % s.len]]);
    found++;
  }
  free(s.path);
  free(s.dead);
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
    if ((e = holders_of(c, &ws.v[i])) > 0) e = 0;
  if (e < 0) {
    cli_err("%s", e == DLOCK_ENOMEM ? "out of memory" : dlock_client_errmsg(c));
    rc = cli_exit_for(e);
  } else {
    /* An owner waiting for a lock held by owners that wait too. */
    for (size_t i = 0; i < ws.n && !ws.oom; i++) {
      waiter *x = &ws.v[i];
      if (x->nh && (x->next = calloc(ws.n, sizeof(int))) == NULL) ws.oom = true;
      for (size_t h = 0; x->next && h < x->nh; h++)
        for (size_t j = 0; j < ws.n; j++)
          if (j != i && strcmp(ws.v[j].owner, x->holders[h]) == 0) {
            x->next[x->nn++] = (int)j;
            break;
          }
    }
    int n = ws.oom ? -1 : find_cycles(&ws);
    if (n < 0) {
      cli_err("out of memory");
      n = 0;
      rc = cli_exit_for(DLOCK_ENOMEM);
    }
    if (n == 0)
      printf("no deadlock among %zu waiting owner%s\n", ws.n,
             ws.n == 1 ? "" : "s");
    if (rc == 0) rc = n > 0 ? 1 : 0;
  }
  for (size_t i = 0; i < ws.n; i++) {
    free(ws.v[i].owner);
    free(ws.v[i].name);
    free(ws.v[i].kind);
    free(ws.v[i].info);
    for (size_t h = 0; h < ws.v[i].nh; h++)
      free(ws.v[i].holders[h]);
    free(ws.v[i].holders);
    free(ws.v[i].next);
  }
  free(ws.v);
  dlock_client_close(c);
  return rc;
}
