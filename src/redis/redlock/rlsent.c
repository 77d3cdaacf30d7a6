/* rlsent.c: how many acquires of each name and owner went to each server,
 * while an acquire or a release of that name and owner is under way, so
 * that nothing of an older call is sent to a server behind a later
 * acquire of the same owner there (redlock.h says why). */
#include "redlock.h"

#include <stdlib.h>
#include <string.h>

struct rl_sent {
  struct rl_sent *next;
  int refs;           /* operations holding it */
  unsigned n[RL_MAX]; /* acquires sent to server i so far */
  char id[];          /* the key, '\0', the owner */
};

static unsigned bucket(const char *key, const char *owner) {
  return dl_hash(dl_hash(DL_HASH_SEED, key), owner) % RL_SENT_BUCKETS;
}

static rl_sent *find(redlock *B, const char *key, const char *owner) {
  size_t kl = strlen(key);
  for (rl_sent *e = B->sent[bucket(key, owner)]; e; e = e->next)
    if (strcmp(e->id, key) == 0 && strcmp(e->id + kl + 1, owner) == 0) return e;
  return NULL;
}

int dl_rl_sent_ref(rl_op *o) {
  redlock *B = o->B;
  const char *key = o->l->key, *owner = o->l->owner;
  rl_sent *e = find(B, key, owner);
  if (e == NULL) {
    size_t kl = strlen(key) + 1, ol = strlen(owner) + 1;
    if ((e = calloc(1, sizeof *e + kl + ol)) == NULL)
      return dl_seterr(B->env.err_owner, DLOCK_ENOMEM, "out of memory");
    memcpy(e->id, key, kl);
    memcpy(e->id + kl, owner, ol);
    unsigned b = bucket(key, owner);
    e->next = B->sent[b];
    B->sent[b] = e;
  }
  e->refs++;
  o->sent = e;
  return 0;
}

void dl_rl_sent_unref(rl_op *o) {
  rl_sent *e = o->sent;
  o->sent = NULL;
  if (e == NULL || --e->refs > 0) return;
  redlock *B = o->B;
  size_t kl = strlen(e->id);
  rl_sent **pp = &B->sent[bucket(e->id, e->id + kl + 1)];
  while (*pp != e)
    pp = &(*pp)->next;
  *pp = e->next;
  free(e);
}

unsigned dl_rl_sent_mark(rl_op *o, int i) {
  unsigned was = o->sent_n[i];
  o->sent_n[i] = ++o->sent->n[i];
  return was;
}

void dl_rl_sent_unmark(rl_op *o, int i, unsigned was) {
  o->sent->n[i]--;
  o->sent_n[i] = was;
}

bool dl_rl_sent_since(const rl_op *o, int i) {
  return o->sent != NULL && o->sent->n[i] != o->sent_n[i];
}

unsigned dl_rl_sent_count(void *ud, const dl_lock_ref *l) {
  const rl_part_at *at = ud;
  rl_sent *e = find(at->B, l->key, l->owner);
  return e ? e->n[at->i] : 0;
}

void dl_rl_sent_free(redlock *B) {
  for (int b = 0; b < RL_SENT_BUCKETS; b++)
    while (B->sent[b]) {
      rl_sent *e = B->sent[b];
      B->sent[b] = e->next;
      free(e);
    }
}
