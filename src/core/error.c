/* error.c: error names and texts, and the detail messages (per client and
 * per thread). */
#include "core.h"

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

/* The details, per client and per thread. Each thread has a few slots,
 * each tagged with the serial of the client whose detail it holds (serials
 * are never reused, so a slot left by a closed client never matches a new
 * one at the same address), and one slot for dlock_client_open. Nothing is
 * shared between threads: no lock, nothing for TSan to see. A thread that
 * uses more than ERR_SLOTS clients loses the oldest detail (its errmsg is
 * then ""). A successful call clears its slot, which costs a look at
 * `tl_live` when the thread has no detail at all (the usual case). */
enum { ERR_SLOTS = 8, ERR_LEN = 512 };
typedef struct err_slot {
  uint64_t serial; /* 0: empty */
  uint64_t stamp;  /* when last written, for the eviction */
  char msg[ERR_LEN];
} err_slot;
static _Thread_local err_slot tl_slot[ERR_SLOTS];
static _Thread_local int tl_live; /* slots with a serial */
static _Thread_local uint64_t tl_stamp;
static _Thread_local char tl_open[ERR_LEN];

static atomic_uint_fast64_t next_serial = 1;

uint64_t dl_err_serial(void) { return atomic_fetch_add(&next_serial, 1); }

static err_slot *slot_find(uint64_t serial) {
  if (tl_live == 0) return NULL;
  for (int i = 0; i < ERR_SLOTS; i++)
    if (tl_slot[i].serial == serial) return &tl_slot[i];
  return NULL;
}

/* The slot for `serial`: its own, else an empty one, else the oldest. */
static err_slot *slot_take(uint64_t serial) {
  err_slot *s = slot_find(serial);
  if (s) return s;
  s = &tl_slot[0];
  for (int i = 0; i < ERR_SLOTS; i++) {
    if (tl_slot[i].serial == 0) {
      s = &tl_slot[i];
      break;
    }
    if (tl_slot[i].stamp < s->stamp) s = &tl_slot[i];
  }
  if (s->serial == 0) tl_live++;
  s->serial = serial;
  return s;
}

static void slot_drop(err_slot *s) {
  s->serial = 0;
  s->msg[0] = '\0';
  tl_live--;
}

/* A client begins with its tag (client.h), so the core reads its serial
 * without knowing the rest of it. */
static uint64_t serial_of(const dlock_client *c) {
  return ((const dl_err_tag *)(const void *)c)->serial;
}

int dl_seterr(const dlock_client *owner, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char detail[400];
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  char *msg = tl_open;
  if (owner != NULL) {
    err_slot *s = slot_take(serial_of(owner));
    s->stamp = ++tl_stamp;
    msg = s->msg;
  }
  /* A detail passed on from another message of the same code (an
   * operation's result handed to another thread, a give-back) already
   * begins with the code's text: not twice. */
  const char *text = dlock_strerror(err);
  size_t n = strlen(text);
  if (strncmp(detail, text, n) == 0 && detail[n] == ':' && detail[n + 1] == ' ')
    snprintf(msg, ERR_LEN, "%s", detail);
  else
    snprintf(msg, ERR_LEN, "%s: %s", text, detail);
  return err;
}

void dl_err_to_open(const dlock_client *c) {
  err_slot *s = slot_find(serial_of(c));
  if (s == NULL) return;
  memcpy(tl_open, s->msg, ERR_LEN);
  slot_drop(s);
}

void dl_clearerr(const dlock_client *owner) {
  if (owner == NULL) {
    tl_open[0] = '\0';
    return;
  }
  err_slot *s = slot_find(serial_of(owner));
  if (s) slot_drop(s);
}

void dl_err_copy(const dlock_client *owner, char *buf, size_t len) {
  const char *m = owner ? dlock_client_errmsg(owner) : tl_open;
  snprintf(buf, len, "%s", m);
}

const char *dlock_client_errmsg(const dlock_client *c) {
  err_slot *s = c ? slot_find(serial_of(c)) : NULL;
  return s ? s->msg : "";
}

const char *dlock_client_open_errmsg(void) { return tl_open; }

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
