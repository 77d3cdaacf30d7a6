/* reply.c: what every Redis connection shares about commands and replies:
 * the EVALSHA/EVAL argv, the script table's hashes, and error replies as
 * codes (the blocking link and the event loop's connection). */
#include "conns.h"

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;
/* The sharded variants (DL_EVAL_SHARDED): bodies made at init, kept for
 * the process's life. */
static dl_script sharded[DL_SCRIPT_COUNT];

static void hash_into(dl_script *s) {
  unsigned char md[SHA_DIGEST_LENGTH];
  SHA1((const unsigned char *)s->body, strlen(s->body), md);
  for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
    snprintf(s->sha + 2 * j, 3, "%02x", md[j]);
}

/* body with each publish to the lock's channels (a KEYS entry, or the
 * local `channel` made from one) turned into spublish; NULL when out of
 * memory, or when nothing changed. */
static char *shard_body(const char *body) {
  static const char *const from[] = {"'publish', KEYS[", "'publish', channel"};
  size_t n = 0;
  for (size_t k = 0; k < 2; k++)
    for (const char *p = strstr(body, from[k]); p; p = strstr(p + 1, from[k]))
      n++;
  if (n == 0) return NULL;
  char *out = malloc(strlen(body) + n + 1);
  if (out == NULL) return NULL;
  char *o = out;
  for (const char *p = body; *p;) {
    if (strncmp(p, from[0], strlen(from[0])) == 0 ||
        strncmp(p, from[1], strlen(from[1])) == 0) {
      memcpy(o, "'s", 2);
      o += 2;
      p++; /* the quote; "publish..." follows as it is */
      continue;
    }
    *o++ = *p++;
  }
  *o = '\0';
  return out;
}

static void scripts_hash(void) {
  for (int i = 0; i < DL_SCRIPT_COUNT; i++) {
    hash_into(&dl_scripts[i]);
    sharded[i] = dl_scripts[i];
    /* The delayed queue's channels stay classic (Redisson's do). */
    char *b = i == DL_SCRIPT_DELAY_OFFER ? NULL : shard_body(dl_scripts[i].body);
    if (b) {
      sharded[i].body = b;
      hash_into(&sharded[i]);
    }
  }
}

const dl_script *dl_script_of(int script) {
  if (script & DL_EVAL_SHARDED)
    return &sharded[script & ~(DL_EVAL_SHARDED | DL_EVAL_WAKE_FIRST)];
  return &dl_scripts[script & ~DL_EVAL_WAKE_FIRST];
}

void dl_scripts_init(void) { pthread_once(&scripts_once, scripts_hash); }

void dl_reply_error_text(const char *in, char *out, size_t len) {
  static const char running[] = "ERR Error running script";
  const char *s = in, *at;
  if (strncmp(s, running, sizeof running - 1) == 0 &&
      (at = strstr(s, "@user_script:")) != NULL &&
      (at = strstr(at, ": ")) != NULL)
    s = at + 2;
  size_t n = strlen(s);
  for (const char *p = strstr(s, " script: "); p;
       p = strstr(p + 1, " script: "))
    if (strspn(p + 9, "0123456789abcdef") == 40) {
      n = (size_t)(p - s);
      break;
    }
  if (strncmp(s, "ERR user_script:", 16) == 0 ||
      strncmp(s, "user_script:", 12) == 0) {
    snprintf(out, len,
             "a dlock script failed on the server (please report "
             "it, with the server's version)");
    return;
  }
  snprintf(out, len, "%.*s", (int)n, s);
}

int dl_reply_check(const struct dlock_client *owner, redisReply **reply) {
  redisReply *r = *reply;
  if (r->type != REDIS_REPLY_ERROR) return 0;
  int code = dl_server_errcode(r->str);
  char msg[512];
  dl_reply_error_text(r->str, msg, sizeof msg);
  dl_seterr(owner, code, "%s", msg);
  freeReplyObject(r);
  *reply = NULL;
  return code;
}

bool dl_reply_noscript(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

int dl_role_replicas(const struct dlock_client *owner, redisReply *r) {
  int rc = dl_reply_check(owner, &r);
  if (rc != 0) return rc;
  int m = -1;
  if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
      r->element[0]->type == REDIS_REPLY_STRING &&
      strcmp(r->element[0]->str, "master") == 0 &&
      r->element[2]->type == REDIS_REPLY_ARRAY)
    m = r->element[2]->elements > 1000 ? 1000 : (int)r->element[2]->elements;
  freeReplyObject(r);
  return m >= 0 ? m
                : dl_seterr(owner, DLOCK_EREADONLY,
                            "ROLE: the server is not a master");
}

int dl_auto_shortfall(const struct dlock_client *owner, int got, int n,
                      int timeout_ms) {
  return dl_seterr(owner, DLOCK_ENOTACKED,
                   "%d of the %d replicas the master has acknowledged within "
                   "%d ms",
                   got, n, timeout_ms);
}

bool dl_reply_readonly(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
}

int dl_evargv_build(int script, bool body, int nkeys, const char *const *keys,
                    int nargs, const char *const *args, dl_evargv *v) {
  int argc = 3 + nkeys + nargs;
  v->argv = v->small;
  v->lens = v->small_lens;
  if (argc > 16) {
    v->argv = malloc(sizeof *v->argv * (size_t)argc);
    v->lens = malloc(sizeof *v->lens * (size_t)argc);
    if (!v->argv || !v->lens) {
      free(v->argv);
      free(v->lens);
      v->argv = NULL;
      v->lens = NULL;
      return -1;
    }
  }
  const char **argv = v->argv;
  argv[0] = body ? "EVAL" : "EVALSHA";
  const dl_script *sc = dl_script_of(script);
  argv[1] = body ? sc->body : sc->sha;
  argv[2] = dl_fmt_ll(v->nk, nkeys);
  for (int i = 0; i < nkeys; i++) argv[3 + i] = keys[i];
  for (int i = 0; i < nargs; i++) argv[3 + nkeys + i] = args[i];
  for (int i = 0; i < argc; i++) v->lens[i] = strlen(argv[i]);
  return argc;
}

/* The decimal digits of n. */
static size_t ndigits(size_t n) {
  size_t d = 1;
  while (n >= 10) {
    n /= 10;
    d++;
  }
  return d;
}

/* Writes n in decimal at p, returns the end. */
static char *put_size(char *p, size_t n) {
  char tmp[24];
  size_t i = 0;
  do {
    tmp[i++] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  while (i) *p++ = tmp[--i];
  return p;
}

int dl_resp_format(char **out, int argc, const char *const *argv,
                   const size_t *lens) {
  /* hiredis formats each "$len" through sdscatfmt, growing the string as
   * it goes: a fifth of a blocking lock cycle's client instructions. Here
   * the size is known first and the buffer allocated once. */
  size_t total = 1 + ndigits((size_t)argc) + 2;
  for (int i = 0; i < argc; i++) {
    size_t n = lens ? lens[i] : strlen(argv[i]);
    total += 1 + ndigits(n) + 2 + n + 2;
  }
  char *buf = malloc(total + 1);
  *out = buf;
  if (buf == NULL || total > INT_MAX) {
    free(buf);
    *out = NULL;
    return -1;
  }
  char *p = buf;
  *p++ = '*';
  p = put_size(p, (size_t)argc);
  *p++ = '\r';
  *p++ = '\n';
  for (int i = 0; i < argc; i++) {
    size_t n = lens ? lens[i] : strlen(argv[i]);
    *p++ = '$';
    p = put_size(p, n);
    *p++ = '\r';
    *p++ = '\n';
    memcpy(p, argv[i], n);
    p += n;
    *p++ = '\r';
    *p++ = '\n';
  }
  *p = '\0';
  return (int)total;
}

void dl_evargv_free(dl_evargv *v) {
  if (v->argv != v->small) {
    free(v->argv);
    free(v->lens);
  }
}
