/* elect.c: leader election on etcd, laid out as Go's concurrency.Election
 * and `etcdctl elect`: each participant's key PREFIX/NAME/<lease in hex>,
 * its id as the value, on a lease of its own (the watchdog lease's TTL,
 * kept alive by the participant's thread every third of it); the lowest
 * create revision leads, every other watches its predecessor. The leader
 * watches its own key: deleted (by hand, its lease's end) it stops leading
 * at once (Go's Campaign does not look again) and campaigns anew at the
 * end of the line. One thread per participant. */
#include "etcdb.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dl_elect {
  dl_etcd *e;
  char *pfx; /* PREFIX/NAME/ */
  char *id;
  dl_elect_fn fn;
  void *ud;
  pthread_t thread;
  bool stop;      /* guarded by e->mu: leave */
  bool self_free; /* left from its own callback: the thread frees it */
  etcd_hold h;    /* its key, lease and create revision (rev 0: none) */
  int64_t ttl_ms;
  int64_t lease_until;
  int leader; /* as last told */
};

static void tell(dl_elect *el, int leader) {
  if (leader == el->leader) return;
  el->leader = leader;
  if (el->fn) el->fn(el->ud, leader, leader ? (uint64_t)el->h.rev : 0, false);
}

static bool stopping(dl_elect *el) {
  pthread_mutex_lock(&el->e->mu);
  bool stop = el->stop || atomic_load(el->e->env->closing);
  pthread_mutex_unlock(&el->e->mu);
  return stop;
}

/* The participant's lease, granted or kept alive: 0, or a negative code
 * (the lease ended: el->h.lease 0, its key gone with it). */
static int keep(dl_elect *el) {
  dl_etcd *e = el->e;
  int64_t sent = dl_now_ms(), deadline = sent + e->command_timeout_ms, ttl;
  if (el->h.lease != 0 && sent < el->lease_until - el->ttl_ms / 2) return 0;
  int rc = el->h.lease ? dl_etcd_keepalive(e, el->h.lease, deadline, &ttl) : 0;
  if (rc == 1) {
    el->lease_until = dl_validity(sent, ttl * 1000);
    return 0;
  }
  if (rc < 0) return rc;
  if (el->h.lease) tell(el, 0); /* our lease ended: our key with it */
  el->h.lease = 0;              /* gone (or none yet): a new one, a new key */
  el->h.rev = 0;
  int64_t got;
  rc =
      dl_etcd_grant(e, dl_etcd_ttl_s(el->ttl_ms), deadline, &el->h.lease, &got);
  if (rc != 0) return rc;
  el->lease_until = dl_validity(sent, got * 1000);
  char key[ETCD_KEY_MAX + 24];
  snprintf(key, sizeof key, "%s%" PRIx64, el->pfx, (uint64_t)el->h.lease);
  free(el->h.key);
  if ((el->h.key = dl_strdup(key)) == NULL)
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  return 0;
}

/* One step: campaign (the key made if it is not there), then wait for our
 * predecessor's or our own key's delete, a third of the TTL at most.
 * Returns 0 to step again, or a negative code (pause, then again). */
static int step(dl_elect *el) {
  dl_etcd *e = el->e;
  int rc = keep(el);
  if (rc != 0) return rc;
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  if (el->h.rev == 0) {
    int64_t owner = 0;
    rc = dl_etcd_put_and_read(e, &el->h, el->id, el->pfx, deadline, &owner);
    if (rc == 1)
      rc = dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "%s is there on a lease not ours: no election of ours "
                     "made it (nothing changed)",
                     el->h.key);
    if (rc != 0) {
      el->h.rev = 0;
      return rc;
    }
  }
  char pred[ETCD_KEY_MAX];
  int64_t at = 0;
  rc = dl_etcd_predecessor(e, el->pfx, el->h.rev, pred, sizeof pred, &at,
                           deadline);
  if (rc < 0) return rc;
  const char *watch = rc == 1 ? pred : el->h.key;
  if (rc == 0) {
    /* First in line: the leader, if our key is still ours. */
    char k64[4 * ETCD_KEY_MAX / 3 + 8], body[4 * ETCD_KEY_MAX / 3 + 64];
    dl_etcd_b64(el->h.key, strlen(el->h.key), k64);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"keys_only\":true}", k64);
    json_object *r;
    rc = dl_etcd_call(e, "/v3/kv/range", body, deadline, &r, NULL);
    if (rc != 0) return rc;
    int64_t now = dl_etcd_i64(dl_etcd_kv0(r), "create_revision");
    at = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
    json_object_put(r);
    if (now != el->h.rev) { /* gone: out, and in again at the end */
      tell(el, 0);
      el->h.rev = 0;
      return 0;
    }
    tell(el, 1);
  } else {
    tell(el, 0);
  }
  int64_t step_end =
      dl_now_ms() + (el->ttl_ms / 3 > 200 ? el->ttl_ms / 3 : 200);
  rc = dl_etcd_wait_delete(e, watch, at, step_end);
  if (rc == 1 && watch == el->h.key) { /* our own key deleted */
    tell(el, 0);
    el->h.rev = 0;
  }
  return rc < 0 && rc != DLOCK_ECLOSED ? rc : 0;
}

static void *elect_main(void *arg) {
  dl_elect *el = arg;
  dl_etcd *e = el->e;
  while (!stopping(el)) {
    if (step(el) < 0 && !stopping(el)) {
      /* An error (no server answering): not the leader meanwhile, as
       * nobody can tell; again after a pause. */
      tell(el, 0);
      dl_sleep_ms(200);
    }
  }
  pthread_mutex_lock(&e->mu);
  bool shutdown = atomic_load(e->env->closing) && !el->stop && !el->self_free;
  pthread_mutex_unlock(&e->mu);
  /* Our key goes with our lease, at once. */
  if (el->h.lease)
    dl_etcd_revoke(e, el->h.lease, dl_now_ms() + e->command_timeout_ms);
  if (shutdown && el->fn) {
    el->leader = 0;
    el->fn(el->ud, 0, 0, false);
  }
  pthread_mutex_lock(&e->mu);
  bool self_free = el->self_free;
  pthread_mutex_unlock(&e->mu);
  if (self_free) {
    free(el->h.key);
    free(el->pfx);
    free(el->id);
    free(el);
  }
  /* The last touch of e: etcd_free waits for this count to reach 0. */
  pthread_mutex_lock(&e->mu);
  e->participants--;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

int dl_etcd_elect_join(dl_backend *b, const dl_sync_ref *s, const char *id,
                       dl_elect_fn fn, void *ud, dl_elect **out) {
  dl_etcd *e = (dl_etcd *)b;
  *out = NULL;
  dl_elect *el = calloc(1, sizeof *el);
  size_t n = strlen(e->prefix) + strlen(s->key) + 2;
  if (el == NULL || (el->pfx = malloc(n)) == NULL ||
      (el->id = dl_strdup(id ? id : "")) == NULL) {
    if (el) free(el->pfx);
    free(el);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  snprintf(el->pfx, n, "%s%s/", e->prefix, s->key);
  el->e = e;
  el->fn = fn;
  el->ud = ud;
  el->ttl_ms = e->session_ttl_ms;
  pthread_mutex_lock(&e->mu);
  e->participants++;
  pthread_mutex_unlock(&e->mu);
  if (pthread_create(&el->thread, NULL, elect_main, el) != 0) {
    pthread_mutex_lock(&e->mu);
    e->participants--;
    pthread_mutex_unlock(&e->mu);
    free(el->pfx);
    free(el->id);
    free(el);
    return dl_seterr(e->err, DLOCK_ENOMEM,
                     "cannot start a thread for the election");
  }
  *out = el;
  return 0;
}

void dl_etcd_elect_leave(dl_backend *b, dl_elect *el) {
  dl_etcd *e = (dl_etcd *)b;
  if (el == NULL) return;
  bool self = pthread_equal(pthread_self(), el->thread);
  pthread_mutex_lock(&e->mu);
  el->stop = true;
  el->self_free = self;
  pthread_mutex_unlock(&e->mu);
  /* Its wait ends at once (the other waits look again: a spurious wake). */
  atomic_fetch_add(&e->wakes, 1);
  dl_etcd_wake_waits(e);
  if (self) { /* from its own callback: the thread ends and frees it */
    pthread_detach(el->thread);
    el->fn = NULL;
    return;
  }
  pthread_join(el->thread, NULL);
  free(el->h.key);
  free(el->pfx);
  free(el->id);
  free(el);
}

int dl_etcd_elect_leader(dl_backend *b, const dl_sync_ref *s, char *buf,
                         size_t len) {
  dl_etcd *e = (dl_etcd *)b;
  if (len > 0) buf[0] = '\0';
  char pfx[ETCD_KEY_MAX], p64[4 * ETCD_KEY_MAX / 3 + 8],
      end64[4 * ETCD_KEY_MAX / 3 + 8];
  snprintf(pfx, sizeof pfx, "%s%s/", e->prefix, s->key);
  dl_etcd_b64(pfx, strlen(pfx), p64);
  dl_etcd_prefix_end(pfx, end64);
  char body[3 * ETCD_KEY_MAX];
  snprintf(body, sizeof body,
           "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"1\","
           "\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\"}",
           p64, end64);
  json_object *r;
  int rc = dl_etcd_call(e, "/v3/kv/range", body,
                        dl_now_ms() + e->command_timeout_ms, &r, NULL);
  if (rc != 0) return rc;
  json_object *kv = dl_etcd_kv0(r);
  json_object *v = dl_etcd_get(kv, "value");
  rc = kv != NULL;
  /* Any length: etcdctl's proposal or a Go leader's Proclaim may be
   * longer than an id; cut to fit buf. */
  const char *v64 = v ? json_object_get_string(v) : "";
  char *val = malloc(strlen(v64) / 4 * 3 + 4);
  if (val == NULL)
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  else if (dl_etcd_unb64(v64, val, strlen(v64) / 4 * 3 + 4) >= 0 && len > 0)
    snprintf(buf, len, "%s", val);
  free(val);
  json_object_put(r);
  return rc;
}
