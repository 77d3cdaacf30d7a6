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
  bool out;       /* guarded by e->mu: the thread has ended its steps */
  etcd_hold h;    /* its key, lease and create revision (rev 0: none) */
  int64_t ttl_ms;
  int64_t lease_until;
  int leader; /* as last told */
  /* A Proclaim asked of the thread (guarded by e->mu): the value, then
   * its answer and detail. */
  char *asked;
  bool answered;
  int answer;
  char detail[256];
};

/* An election watched (Go's Observe): a thread of its own. */
struct dl_observer {
  dl_etcd *e;
  char *pfx; /* PREFIX/NAME/ */
  dl_observe_fn fn;
  void *ud;
  pthread_t thread;
  bool stop; /* guarded by e->mu */
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
 * Returns 0 to step again, DLOCK_EWRONGTYPE recorded when a key on no
 * lease is first in line or just before ours (a queue's value, an
 * application's key: no candidate's, every one's is on its lease), or
 * another negative code (pause, then again). */
static int step(dl_elect *el, unsigned wakes) {
  dl_etcd *e = el->e;
  int rc = keep(el);
  if (rc != 0) return rc;
  int64_t deadline = dl_now_ms() + e->command_timeout_ms;
  if (el->h.rev == 0) {
    int64_t owner = 0;
    rc = dl_etcd_put_and_read(e, &el->h, el->id, el->pfx, false, deadline,
                              &owner);
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
  rc = dl_etcd_wait_delete_since(e, watch, at, step_end, wakes);
  if (rc == 1 && watch == el->h.key) { /* our own key deleted */
    tell(el, 0);
    el->h.rev = 0;
  }
  return rc < 0 && rc != DLOCK_ECLOSED ? rc : 0;
}

/* Go's Proclaim, on the participant's thread: our value put on our key,
 * in a txn that compares its create revision (ours, leading): 0, or
 * DLOCK_ENOTOWNER, or a negative code. */
static int proclaim(dl_elect *el, const char *value) {
  dl_etcd *e = el->e;
  if (!el->leader || el->h.rev == 0 || el->h.key == NULL)
    return dl_seterr(e->err, DLOCK_ENOTOWNER,
                     "this participant does not lead %s: nothing proclaimed",
                     el->pfx);
  size_t vl = strlen(value), kl = strlen(el->h.key);
  size_t cap = 2 * (4 * kl / 3 + 8) + 4 * vl / 3 + 256;
  char *body = malloc(cap), *k64 = malloc(4 * kl / 3 + 8),
       *v64 = malloc(4 * vl / 3 + 8), *v = dl_strdup(value);
  int rc = 0;
  if (body == NULL || k64 == NULL || v64 == NULL || v == NULL) {
    rc = dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  } else {
    dl_etcd_b64(el->h.key, kl, k64);
    dl_etcd_b64(value, vl, v64);
    snprintf(body, cap,
             "{\"compare\":[{\"target\":\"CREATE\",\"key\":\"%s\","
             "\"create_revision\":\"%" PRId64 "\"}],\"success\":["
             "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
             "\"lease\":\"%" PRId64 "\"}}]}",
             k64, el->h.rev, k64, v64, el->h.lease);
    json_object *r;
    rc = dl_etcd_call(e, "/v3/kv/txn", body,
                      dl_now_ms() + e->command_timeout_ms, &r, NULL);
    if (rc == 0) {
      json_object *ok = dl_etcd_get(r, "succeeded");
      if (ok && json_object_get_boolean(ok)) {
        free(el->id); /* ours from now on, a new campaign's too */
        el->id = v;
        v = NULL;
      } else {
        rc = dl_seterr(e->err, DLOCK_ENOTOWNER,
                       "our key %s is gone (deleted, or its lease ended): "
                       "nothing proclaimed",
                       el->h.key);
      }
      json_object_put(r);
    }
  }
  free(body);
  free(k64);
  free(v64);
  free(v);
  return rc;
}

/* Runs a Proclaim asked of the thread, if any, and answers it. */
static void serve(dl_elect *el) {
  dl_etcd *e = el->e;
  pthread_mutex_lock(&e->mu);
  char *value = el->answered ? NULL : el->asked;
  pthread_mutex_unlock(&e->mu);
  if (value == NULL) return;
  int rc = proclaim(el, value);
  pthread_mutex_lock(&e->mu);
  el->answer = rc;
  snprintf(el->detail, sizeof el->detail, "%s",
           rc < 0 ? dlock_client_errmsg((const dlock_client *)e->err) : "");
  el->answered = true;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

int dl_etcd_elect_proclaim(dl_backend *b, dl_elect *el, const char *value) {
  dl_etcd *e = (dl_etcd *)b;
  if (pthread_equal(pthread_self(), el->thread)) /* from its callback */
    return proclaim(el, value);
  char *v = dl_strdup(value);
  if (v == NULL) return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  pthread_mutex_lock(&e->mu);
  while (el->asked && !el->stop && !el->out) /* one at a time */
    pthread_cond_wait(&e->cv, &e->mu);
  el->asked = v;
  el->answered = false;
  pthread_mutex_unlock(&e->mu);
  /* The thread's wait ends at once (the other waits look again). */
  atomic_fetch_add(&e->wakes, 1);
  dl_etcd_wake_waits(e);
  pthread_mutex_lock(&e->mu);
  while (!el->answered && !el->stop && !el->out &&
         !atomic_load(e->env->closing))
    pthread_cond_wait(&e->cv, &e->mu);
  int rc = el->answered ? el->answer : DLOCK_ECLOSED;
  char detail[sizeof el->detail];
  snprintf(detail, sizeof detail, "%s", el->detail);
  el->asked = NULL;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  free(v);
  if (rc == DLOCK_ECLOSED)
    return dl_seterr(e->err, rc,
                     "the participant left (or was refused), or the client "
                     "is closing: nothing proclaimed");
  return rc < 0 ? dl_seterr(e->err, rc, "%s", detail) : rc;
}

static void *elect_main(void *arg) {
  dl_elect *el = arg;
  dl_etcd *e = el->e;
  int refused = 0;
  char why[256] = "";
  for (;;) {
    /* The wake count before the reasons to stop or to proclaim are read:
     * a leave or a Proclaim after it ends the step's wait at once. */
    unsigned wakes = atomic_load(&e->wakes);
    if (stopping(el)) break;
    serve(el);
    int rc = step(el, wakes);
    if (rc == DLOCK_EWRONGTYPE) { /* another kind's name: out for good */
      refused = rc;
      snprintf(why, sizeof why, "%s",
               dlock_client_errmsg((const dlock_client *)e->err));
      tell(el, 0);
      break;
    }
    if (rc < 0 && !stopping(el)) {
      /* An error (no server answering): not the leader meanwhile, as
       * nobody can tell; again after a pause. */
      tell(el, 0);
      dl_sleep_ms(200);
    }
  }
  pthread_mutex_lock(&e->mu);
  bool shutdown = atomic_load(e->env->closing) && !el->stop && !el->self_free;
  el->out = true;
  pthread_cond_broadcast(&e->cv); /* a Proclaim waiting: no answer */
  pthread_mutex_unlock(&e->mu);
  /* Our key goes with our lease, at once. */
  if (el->h.lease)
    dl_etcd_revoke(e, el->h.lease, dl_now_ms() + e->command_timeout_ms);
  if (refused && el->fn) {
    dl_seterr(e->err, refused, "%s", why);
    el->fn(el->ud, 0, 0, refused);
  } else if (shutdown && el->fn) {
    el->leader = 0;
    el->fn(el->ud, 0, 0, 0);
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

/* Starts a participant's or observer's thread, counted in e->participants
 * (etcd_free waits for them): 0, or -1 (not started, not counted). */
static int start_thread(dl_etcd *e, pthread_t *t, void *(*fn)(void *),
                        void *arg) {
  pthread_mutex_lock(&e->mu);
  e->participants++;
  pthread_mutex_unlock(&e->mu);
  if (pthread_create(t, NULL, fn, arg) == 0) return 0;
  pthread_mutex_lock(&e->mu);
  e->participants--;
  pthread_mutex_unlock(&e->mu);
  return -1;
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
  if (start_thread(e, &el->thread, elect_main, el) != 0) {
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
  char pfx[ETCD_KEY_MAX];
  snprintf(pfx, sizeof pfx, "%s%s/", e->prefix, s->key);
  json_object *r;
  int rc = dl_etcd_range_under(e, pfx, 1, &r);
  if (rc != 0) return rc;
  json_object *kv = dl_etcd_kv0(r);
  json_object *v = dl_etcd_get(kv, "value");
  rc = kv != NULL;
  if (kv && dl_etcd_i64(kv, "lease") == 0) { /* no candidate's */
    json_object_put(r);
    return dl_seterr(e->err, DLOCK_EWRONGTYPE,
                     "%s: the first key is on no lease (a queue's value, an "
                     "application's key): no election's",
                     pfx);
  }
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

/* ---- Observe ---- */
static bool observer_stopping(dl_observer *o) {
  pthread_mutex_lock(&o->e->mu);
  bool stop = o->stop || atomic_load(o->e->env->closing);
  pthread_mutex_unlock(&o->e->mu);
  return stop;
}

/* Reads the leader (the oldest key under the prefix) and tells it when it
 * is not what was told last (its key and mod revision): the answer's
 * revision, or a negative code. A first key on no lease (a queue's value,
 * an application's key) is no candidate's: nobody leads, as
 * dl_etcd_elect_leader says (Go's Observe would tell it). */
static int64_t observe_step(dl_observer *o, char *last, size_t len,
                            int64_t *last_mod) {
  dl_etcd *e = o->e;
  json_object *r;
  int rc = dl_etcd_range_under(e, o->pfx, 1, &r);
  if (rc != 0) return rc;
  int64_t at = dl_etcd_i64(dl_etcd_get(r, "header"), "revision");
  json_object *kv = dl_etcd_kv0(r);
  if (kv && dl_etcd_i64(kv, "lease") == 0) kv = NULL;
  json_object *k = dl_etcd_get(kv, "key"), *v = dl_etcd_get(kv, "value");
  const char *k64 = k ? json_object_get_string(k) : "";
  int64_t mod = kv ? dl_etcd_i64(kv, "mod_revision") : 0;
  if (*last_mod < 0 || mod != *last_mod || strcmp(k64, last) != 0) {
    snprintf(last, len, "%s", k64);
    *last_mod = mod;
    const char *v64 = v ? json_object_get_string(v) : "";
    size_t cap = strlen(v64) / 4 * 3 + 4;
    char *val = kv ? malloc(cap) : NULL;
    int n = val ? dl_etcd_unb64(v64, val, cap) : -1;
    if (kv && n < 0) {
      free(val);
      json_object_put(r);
      return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
    }
    if (val && n > DLOCK_LEADER_VALUE_MAX)
      val[n = DLOCK_LEADER_VALUE_MAX] = '\0';
    o->fn(o->ud, val, val ? (size_t)n : 0,
          kv ? (uint64_t)dl_etcd_i64(kv, "create_revision") : 0);
    free(val);
  }
  json_object_put(r);
  return at;
}

static void *observe_main(void *arg) {
  dl_observer *o = arg;
  dl_etcd *e = o->e;
  char last[4 * ETCD_KEY_MAX / 3 + 8] = "";
  int64_t last_mod = -1; /* nothing told yet */
  for (;;) {
    unsigned wakes = atomic_load(&e->wakes); /* as elect_main's */
    if (observer_stopping(o)) break;
    int64_t at = observe_step(o, last, sizeof last, &last_mod);
    /* Then any change under the prefix (a second at most, to look at
     * stop); an error: again after a pause. */
    int rc =
        at < 0 ? (int)at
               : dl_etcd_wait_change(e, o->pfx, at, dl_now_ms() + 1000, wakes);
    if (rc < 0 && rc != DLOCK_ECLOSED && !observer_stopping(o))
      dl_sleep_ms(200);
  }
  /* The last touch of e: etcd_free waits for this count to reach 0. */
  pthread_mutex_lock(&e->mu);
  e->participants--;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

int dl_etcd_elect_observe(dl_backend *b, const dl_sync_ref *s, dl_observe_fn fn,
                          void *ud, dl_observer **out) {
  dl_etcd *e = (dl_etcd *)b;
  *out = NULL;
  dl_observer *o = calloc(1, sizeof *o);
  size_t n = strlen(e->prefix) + strlen(s->key) + 2;
  if (o == NULL || (o->pfx = malloc(n)) == NULL) {
    free(o);
    return dl_seterr(e->err, DLOCK_ENOMEM, "out of memory");
  }
  snprintf(o->pfx, n, "%s%s/", e->prefix, s->key);
  o->e = e;
  o->fn = fn;
  o->ud = ud;
  if (start_thread(e, &o->thread, observe_main, o) != 0) {
    free(o->pfx);
    free(o);
    return dl_seterr(e->err, DLOCK_ENOMEM,
                     "cannot start a thread for the observer");
  }
  *out = o;
  return 0;
}

void dl_etcd_elect_unobserve(dl_backend *b, dl_observer *o) {
  dl_etcd *e = (dl_etcd *)b;
  if (o == NULL) return;
  pthread_mutex_lock(&e->mu);
  o->stop = true;
  pthread_mutex_unlock(&e->mu);
  atomic_fetch_add(&e->wakes, 1);
  dl_etcd_wake_waits(e);
  pthread_join(o->thread, NULL);
  free(o->pfx);
  free(o);
}
