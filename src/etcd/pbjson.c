/* pbjson.c: etcd's protobuf messages to and from the JSON of etcd's
 * gateway (grpc-gateway's jsonpb with proto names), walking protobuf-c's
 * descriptors: one converter for every message, so that the call sites
 * keep writing and reading the gateway's JSON while grpc.c sends gRPC. */
#include "pbjson.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcdb.h"

/* The bytes of one element of a field's type in a message's struct. */
static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_ENUM: return 4;
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  default: return 8;
  }
}

/* One JSON value into the element at dst: 0, or -1 (a value of the wrong
 * kind, not base64, out of memory). */
static int from_json(const ProtobufCMessageDescriptor *d, json_object *o,
                     bool answer, ProtobufCMessage **out);

/* An integer (the gateway's int64s are strings: "123", or 123) into
 * *out: 0, or -1 (not a whole number, or out of range; a garbled
 * revision read as 0 would mean "none"). uns: unsigned (uint64). */
static int int_in(json_object *v, bool uns, uint64_t *out) {
  if (json_object_is_type(v, json_type_int)) {
    int64_t i = json_object_get_int64(v);
    if (uns && i < 0) return -1;
    *out = uns && i == INT64_MAX ? json_object_get_uint64(v) : (uint64_t)i;
    return 0;
  }
  if (!json_object_is_type(v, json_type_string)) return -1;
  const char *p = json_object_get_string(v);
  char *end;
  errno = 0;
  if (uns && *p == '-') return -1;
  *out = uns ? (uint64_t)strtoull(p, &end, 10) : (uint64_t)strtoll(p, &end, 10);
  return *p == '\0' || *end != '\0' || errno ? -1 : 0;
}

static int value_in(const ProtobufCFieldDescriptor *f, json_object *v,
                    bool answer, void *dst) {
  uint64_t u;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    if (int_in(v, false, &u) != 0) return -1;
    *(int64_t *)dst = (int64_t)u;
    return 0;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (int_in(v, true, &u) != 0) return -1;
    *(uint64_t *)dst = u;
    return 0;
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    if (int_in(v, false, &u) != 0) return -1;
    *(int32_t *)dst = (int32_t)(int64_t)u;
    return 0;
  case PROTOBUF_C_TYPE_BOOL:
    *(protobuf_c_boolean *)dst = json_object_get_boolean(v) != 0;
    return 0;
  case PROTOBUF_C_TYPE_ENUM: {
    if (json_object_is_type(v, json_type_string)) {
      const ProtobufCEnumValue *ev =
          protobuf_c_enum_descriptor_get_value_by_name(
              f->descriptor, json_object_get_string(v));
      if (ev == NULL) return -1;
      *(int32_t *)dst = ev->value;
    } else {
      *(int32_t *)dst = json_object_get_int(v);
    }
    return 0;
  }
  case PROTOBUF_C_TYPE_STRING: {
    char *s = dl_strdup(json_object_get_string(v));
    if (s == NULL) return -1;
    *(char **)dst = s;
    return 0;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    const char *s = json_object_get_string(v);
    size_t cap = strlen(s) / 4 * 3 + 4;
    char *p = malloc(cap);
    int n = p ? dl_etcd_unb64(s, p, cap) : -1;
    if (n <= 0) {
      free(p);
      p = NULL;
    }
    *(ProtobufCBinaryData *)dst =
        (ProtobufCBinaryData){n > 0 ? (size_t)n : 0, (uint8_t *)p};
    return n < 0 ? -1 : 0;
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    return from_json(f->descriptor, v, answer, (ProtobufCMessage **)dst);
  default: return -1; /* float, double: in none of etcd's requests */
  }
}

/* dl_pb_from_json's and dl_pb_from_json_answer's: answer, names d does
 * not have skipped. */
static int from_json(const ProtobufCMessageDescriptor *d, json_object *o,
                     bool answer, ProtobufCMessage **out) {
  *out = NULL;
  if (!json_object_is_type(o, json_type_object)) return -1;
  ProtobufCMessage *m = calloc(1, d->sizeof_message);
  if (m == NULL) return -1;
  d->message_init(m);
  int rc = 0;
  json_object_object_foreach(o, name, v) {
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(d, name);
    if (f == NULL && answer) continue; /* a newer etcd's: as unpack skips */
    if (f == NULL) {
      rc = -1; /* a field etcd_min.proto does not know */
      break;
    }
    char *member = (char *)m + f->offset;
    if (json_object_is_type(v, json_type_null)) continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      if (!json_object_is_type(v, json_type_array)) {
        rc = -1;
        break;
      }
      size_t n = json_object_array_length(v), sz = elem_size(f->type);
      char *arr = n ? calloc(n, sz) : NULL;
      if (n && arr == NULL) {
        rc = -1;
        break;
      }
      *(void **)member = arr;
      size_t *count = (size_t *)((char *)m + f->quantifier_offset);
      for (*count = 0; *count < n && rc == 0; ++*count)
        rc = value_in(f, json_object_array_get_idx(v, *count), answer,
                      arr + *count * sz);
      if (rc != 0) { /* the element that failed is not counted */
        --*count;
        break;
      }
      continue;
    }
    /* The old value (a default: a proto3 message has no other, json-c
     * keeps one member of a name) is not freed; a string's default is
     * protobuf-c's static empty string. A oneof's second member would
     * overwrite the first's: malformed. */
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(uint32_t *)((char *)m + f->quantifier_offset) != 0) {
      rc = -1;
      break;
    }
    if ((rc = value_in(f, v, answer, member)) != 0) break;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
      *(uint32_t *)((char *)m + f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset)
      *(protobuf_c_boolean *)((char *)m + f->quantifier_offset) = 1;
  }
  if (rc != 0) {
    protobuf_c_message_free_unpacked(m, NULL);
    return -1;
  }
  *out = m;
  return 0;
}

int dl_pb_from_json(const ProtobufCMessageDescriptor *d, json_object *o,
                    ProtobufCMessage **out) {
  return from_json(d, o, false, out);
}

int dl_pb_from_json_answer(const ProtobufCMessageDescriptor *d, json_object *o,
                           ProtobufCMessage **out) {
  return from_json(d, o, true, out);
}

/* One element at p as JSON into *out: 1, 0 when it is a zero value the
 * gateway omits (unless always: an element of a list, a oneof's member),
 * or -1 out of memory. */
static int value_out(const ProtobufCFieldDescriptor *f, const void *p,
                     bool always, json_object **out) {
  char num[24];
  *out = NULL;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: { /* a string, as jsonpb writes it */
    int64_t v = *(const int64_t *)p;
    if (v == 0 && !always) return 0;
    snprintf(num, sizeof num, "%" PRId64, v);
    *out = json_object_new_string(num);
    break;
  }
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t v = *(const uint64_t *)p;
    if (v == 0 && !always) return 0;
    snprintf(num, sizeof num, "%" PRIu64, v);
    *out = json_object_new_string(num);
    break;
  }
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: {
    int32_t v = *(const int32_t *)p;
    if (v == 0 && !always) return 0;
    *out =
        f->type == PROTOBUF_C_TYPE_UINT32 || f->type == PROTOBUF_C_TYPE_FIXED32
            ? json_object_new_int64((uint32_t)v)
            : json_object_new_int(v);
    break;
  }
  case PROTOBUF_C_TYPE_BOOL: {
    protobuf_c_boolean v = *(const protobuf_c_boolean *)p;
    if (!v && !always) return 0;
    *out = json_object_new_boolean(v != 0);
    break;
  }
  case PROTOBUF_C_TYPE_ENUM: { /* by name */
    int32_t v = *(const int32_t *)p;
    if (v == 0 && !always) return 0;
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value(f->descriptor, v);
    *out = ev ? json_object_new_string(ev->name) : json_object_new_int(v);
    break;
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;
    if ((s == NULL || *s == '\0') && !always) return 0;
    *out = json_object_new_string(s ? s : "");
    break;
  }
  case PROTOBUF_C_TYPE_BYTES: { /* base64 */
    const ProtobufCBinaryData *b = p;
    if (b->len == 0 && !always) return 0;
    char *s = malloc(4 * ((b->len + 2) / 3) + 1);
    if (s == NULL) return -1;
    dl_etcd_b64((const char *)b->data, b->len, s);
    *out = json_object_new_string(s);
    free(s);
    break;
  }
  case PROTOBUF_C_TYPE_MESSAGE: { /* a message there: written, even empty */
    const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;
    if (sub == NULL) return 0;
    *out = dl_pb_to_json(sub);
    break;
  }
  default: return 0; /* float, double: in none of etcd's answers */
  }
  return *out ? 1 : -1;
}

json_object *dl_pb_to_json(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  json_object *o = json_object_new_object();
  for (unsigned i = 0; o && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *member = (const char *)m + f->offset;
    json_object *v = NULL;
    int rc;
    bool oneof = (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
    if (oneof &&
        *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
      continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
      if (n == 0) continue; /* an empty list: omitted */
      const char *arr = *(char *const *)member;
      size_t sz = elem_size(f->type);
      rc = (v = json_object_new_array()) ? 1 : -1;
      for (size_t k = 0; k < n && rc == 1; k++) {
        json_object *x;
        rc = value_out(f, arr + k * sz, true, &x);
        if (rc == 1 && json_object_array_add(v, x) != 0) {
          json_object_put(x);
          rc = -1;
        }
      }
    } else {
      rc = value_out(f, member, oneof, &v);
    }
    if (rc == 1 && json_object_object_add(o, f->name, v) == 0) continue;
    if (rc == 0) continue;
    json_object_put(v);
    json_object_put(o);
    o = NULL;
  }
  return o;
}
