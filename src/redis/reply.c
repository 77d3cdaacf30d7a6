/* reply.c: what every Redis connection shares about commands and replies:
 * the EVALSHA/EVAL argv, the script table's hashes, and error replies as
 * codes (the blocking link and the event loop's connection). */
#include "redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

static pthread_once_t scripts_once = PTHREAD_ONCE_INIT;

static void scripts_hash(void) {
  for (int i = 0; i < DL_SCRIPT_COUNT; i++) {
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)dl_scripts[i].body, strlen(dl_scripts[i].body),
         md);
    for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
      snprintf(dl_scripts[i].sha + 2 * j, 3, "%02x", md[j]);
  }
}

void dl_scripts_init(void) { pthread_once(&scripts_once, scripts_hash); }

int dl_reply_check(const struct dlock_client *owner, redisReply **reply) {
  redisReply *r = *reply;
  if (r->type != REDIS_REPLY_ERROR) return 0;
  int code = dl_server_errcode(r->str);
  dl_seterr(owner, code, "%s", r->str);
  freeReplyObject(r);
  *reply = NULL;
  return code;
}

bool dl_reply_noscript(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
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
  argv[1] = body ? dl_scripts[script].body : dl_scripts[script].sha;
  argv[2] = dl_fmt_ll(v->nk, nkeys);
  for (int i = 0; i < nkeys; i++) argv[3 + i] = keys[i];
  for (int i = 0; i < nargs; i++) argv[3 + nkeys + i] = args[i];
  for (int i = 0; i < argc; i++) v->lens[i] = strlen(argv[i]);
  return argc;
}

void dl_evargv_free(dl_evargv *v) {
  if (v->argv != v->small) {
    free(v->argv);
    free(v->lens);
  }
}
