/* holds.c: what a client knows of its own holds, per (key, owner), shared by
 * every lock handle of the client (as Redisson tracks holds per client, not
 * per RLock object). The count is sent with every acquire and release, so the
 * server's count always mirrors what the client knows. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static unsigned bucket(const char *key, const char *owner) {
  unsigned h = 2166136261u;
  for (const char *s = key; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  for (const char *s = owner; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h % DL_HOLD_BUCKETS;
}

dl_hold *dl_hold_find(dlock_client *c, const char *key, const char *owner) {
  for (dl_hold *h = c->holds[bucket(key, owner)]; h; h = h->next)
    if (strcmp(h->owner, owner) == 0 && strcmp(h->key, key) == 0) return h;
  return NULL;
}

dl_hold *dl_hold_add(dlock_client *c, const char *key, const char *owner) {
  size_t kl = strlen(key), ol = strlen(owner);
  dl_hold *h = calloc(1, sizeof *h + kl + ol + 2);
  if (h == NULL) return NULL;
  h->key = (char *)(h + 1);
  h->owner = h->key + kl + 1;
  memcpy(h->key, key, kl + 1);
  memcpy(h->owner, owner, ol + 1);
  unsigned b = bucket(key, owner);
  h->next = c->holds[b];
  c->holds[b] = h;
  return h;
}

dl_hold *dl_hold_drop(dlock_client *c, dl_hold *h) {
  dl_hold **pp = &c->holds[bucket(h->key, h->owner)];
  while (*pp != h) pp = &(*pp)->next;
  *pp = h->next;
  h->next = NULL;
  return h;
}

void dl_hold_bury(dlock_client *c, dl_hold *h) {
  if (h == NULL) return;
  dl_watchdog_remove(c->watchdog, h->renewal);
  free(h);
}
