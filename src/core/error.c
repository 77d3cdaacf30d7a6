/* error.c: error names and texts, and the per-thread detail messages. */
#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *dlock_strerror(int err) {
  switch (err) {
  case DLOCK_OK: return "success";
#define X(name, code, msg)                                                     \
  case code: return msg;
    DLOCK_ERRNO_MAP(X)
#undef X
  }
  return "unknown error";
}

const char *dlock_err_name(int err) {
  switch (err) {
  case DLOCK_OK: return "OK";
#define X(name, code, msg)                                                     \
  case code: return #name;
    DLOCK_ERRNO_MAP(X)
#undef X
  }
  return "UNKNOWN";
}

const char *dlock_version(int *num) {
  if (num) *num = DLOCK_VERSION_NUM;
  return DLOCK_VERSION_STRING;
}

/* One detail buffer per thread, tagged with the client it belongs to, so a
 * client shared by many threads reports each thread its own failure. */
static _Thread_local char tl_msg[512];
static _Thread_local const void *tl_owner;

int dl_seterr(const void *owner, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char detail[400];
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  snprintf(tl_msg, sizeof tl_msg, "%s: %s", dlock_strerror(err), detail);
  tl_owner = owner;
  return err;
}

void dl_reowner_err(const void *owner) { tl_owner = owner; }

void dl_clearerr(const void *owner) {
  if (tl_owner == owner) tl_msg[0] = '\0';
}

const char *dlock_client_errmsg(const dlock_client *c) {
  return (c != NULL && tl_owner == c) ? tl_msg : "";
}

const char *dlock_client_open_errmsg(void) {
  return tl_owner == NULL ? tl_msg : "";
}

/* Redis 7 passes a failed redis.call's error code through a script, so the
 * code is found at the start or inside the text. */
int dl_server_errcode(const char *msg) {
  static const struct {
    const char *prefix;
    int code;
  } map[] = {
      {"WRONGTYPE", DLOCK_EWRONGTYPE}, {"READONLY", DLOCK_EREADONLY},
      {"OOM", DLOCK_EOOM},             {"NOAUTH", DLOCK_EAUTH},
      {"WRONGPASS", DLOCK_EAUTH},      {"NOPERM", DLOCK_ENOPERM},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    size_t n = strlen(map[i].prefix);
    if (strncmp(msg, map[i].prefix, n) == 0) return map[i].code;
  }
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    char pat[32];
    snprintf(pat, sizeof pat, " %s ", map[i].prefix);
    if (strstr(msg, pat) || strstr(msg, map[i].prefix + 0) == msg)
      return map[i].code;
    snprintf(pat, sizeof pat, "-%s ", map[i].prefix);
    if (strstr(msg, pat)) return map[i].code;
  }
  return DLOCK_ESERVER;
}
