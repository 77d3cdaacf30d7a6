/* cli.h: what the dlock command's subcommands share. */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include "dlock.h"

#include <signal.h>

#include <stdbool.h>
#include <stdint.h>

/* Exit statuses (sysexits.h where one fits). */
enum {
  EXIT_USAGE = 64,       /* EX_USAGE */
  EXIT_DATAERR = 65,     /* EX_DATAERR: NAME holds something else */
  EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: server unreachable or refusing */
  EXIT_CONFLICT = 75,    /* EX_TEMPFAIL: not acquired in time (or granted
                            too late to trust: DLOCK_ELATE) */
  EXIT_LOST = 76,        /* the lock was lost while COMMAND ran (dlock
                            fence set: a stale token, nothing written) */
  EXIT_NOPERM = 77,      /* EX_NOPERM: the server's ACL refuses a command */
  EXIT_NOEXEC = 126,
  EXIT_NOTFOUND = 127,
};

/* Options every subcommand accepts. */
typedef struct cli_global {
  const char *url;      /* -u, else $DLOCK_URL, else the default */
  char *password_file;  /* what --password-file read, or NULL */
  char *password;       /* the password in use: --password-file's, else the
                           URL's own, else $DLOCK_PASSWORD; NULL if none.
                           Kept up to date by cli_global_opt. */
  const char *cacert, *cert, *key;
  bool insecure;
  int verbose; /* -v: 1, -q: -1 */
  int replicas;            /* --replicas N: min_replicas_acked */
  int replicas_timeout_ms; /* --replicas-timeout DURATION (0: default) */
} cli_global;

/* getopt_long entries for the global options, and their handler: returns 1
 * if `opt` was one of them, 0 if not, -1 on a bad value (message printed). */
#define CLI_GLOBAL_LONGOPTS                                                    \
  {"url", required_argument, 0, 'u'},                                          \
      {"password-file", required_argument, 0, 1001},                           \
      {"cacert", required_argument, 0, 1002},                                  \
      {"cert", required_argument, 0, 1003},                                    \
      {"key", required_argument, 0, 1004},                                     \
      {"insecure", no_argument, 0, 1005}, {"quiet", no_argument, 0, 'q'},      \
      {"replicas", required_argument, 0, 1006},                                \
      {"replicas-timeout", required_argument, 0, 1007},                        \
      {"verbose", no_argument, 0, 'v'}, {"help", no_argument, 0, 'h'}
#define CLI_GLOBAL_SHORTOPTS "u:qvh"
int cli_global_opt(cli_global *g, int opt, const char *arg);

/* Sets g->password from g->password_file, g->url and $DLOCK_PASSWORD (see
 * cli_global). Returns 0, or -1 out of memory. */
int cli_password_resolve(cli_global *g);

/* Client options for g (watchdog lease `lease_ms`, 0 = default). */
void cli_options(const cli_global *g, int64_t lease_ms,
                 dlock_client_options *o);

/* Opens the client for g (watchdog lease `lease_ms`, 0 = default). On
 * failure prints why and returns NULL with *exit_code set. */
dlock_client *cli_open(const cli_global *g, int64_t lease_ms, int *exit_code);

/* Maps a library error to the command's exit status. */
int cli_exit_for(int err);
/* A dlock_client_on_state callback (zk://): the connection's states told
 * on stderr; ud is the lock's name. */
void cli_on_conn_state(dlock_client *c, dlock_conn_state st, void *ud);

/* The URL to show or pass on: without any password. Caller frees. */
char *cli_url_public(const char *url);

/* "dlock: " + message on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A lock's holder description, parsed from dlock_lock_state.info
 * ("v1\thost\tpid\tcommand"). Fields point into `buf`. */
typedef struct cli_holder {
  const char *host, *pid, *cmd;
} cli_holder;
bool cli_parse_holder(const char *info, char *buf, size_t len, cli_holder *h);

/* Who holds the lock of `st`, on one line, in buf: "host pid N (command)"
 * for a holder described by dlock run, else its description as given (any
 * dlock_lock_set_info text, control characters as spaces), else its owner
 * id. Returns buf. */
const char *cli_holder_text(const dlock_lock_state *st, char *buf,
                            size_t len);

/* Writes s as a JSON string (with quotes) to f. */
void cli_json_str(void *f, const char *s);

/* child.c: the monotonic clock in ms; one of the signals in `set`, waited
 * for until deadline_ms (-1: forever), or 0 at the deadline. */
int64_t cli_mono_ms(void);
int cli_wait_signal(const sigset_t *set, int64_t deadline_ms);
/* Runs cmd while `held` ("lock NAME") is held: forwards the signals in
 * `set` that would stop us, stops it (SIGTERM, then SIGKILL after
 * grace_ms) at SIGUSR1 (the hold lost, said unless verbose < 0), and
 * restores `orig`'s mask in the child. Returns COMMAND's status (128 + a
 * signal), or 127/126 when it could not be executed (*ran false), or -1
 * when it could not start (pipe, fork: message printed); *lost whether
 * SIGUSR1 came. */
int cli_run_child(char **cmd, const char *held, int64_t grace_ms, int verbose,
                  const sigset_t *set, const sigset_t *orig, bool *ran,
                  bool *lost);
int cmd_run(int argc, char **argv, cli_global *g);
/* dlock elect (run.c): run a command while leading an election. */
int cmd_elect(int argc, char **argv, cli_global *g);
/* dlock elect --listen (listen.c): the election's leaders as they change. */
int cli_elect_listen(int argc, char **argv, cli_global *g);
int cmd_status(int argc, char **argv, cli_global *g);
int cmd_release(int argc, char **argv, cli_global *g);
int cmd_list(int argc, char **argv, cli_global *g);
int cmd_bench(int argc, char **argv, cli_global *g); /* src/cli/bench/bench.c */
int cmd_queue(int argc, char **argv, cli_global *g); /* src/cli/queue.c */
int cmd_top(int argc, char **argv, cli_global *g);   /* src/cli/top.c */
int cmd_metrics(int argc, char **argv, cli_global *g); /* src/cli/metrics.c */
int cmd_deadlocks(int argc, char **argv, cli_global *g); /* deadlocks.c */
int cmd_fence(int argc, char **argv, cli_global *g); /* src/cli/fence.c */

#endif
