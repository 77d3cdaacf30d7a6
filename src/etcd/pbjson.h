/* pbjson.h: etcd's protobuf messages (protobuf-c) to and from the JSON of
 * etcd's gateway, as grpc-gateway's jsonpb writes it with proto names
 * (the call sites' JSON): field names as in etcd_min.proto, int64s and
 * uint64s as strings, bytes as base64, enums by name; zero values, empty
 * lists and absent messages omitted, a message there written even when
 * empty. Any thread. */
#ifndef DLOCK_ETCD_PBJSON_H
#define DLOCK_ETCD_PBJSON_H

#include <json-c/json.h>
#include <protobuf-c/protobuf-c.h>

/* The JSON object o as a new message of d: 0 with *out (free it with
 * protobuf_c_message_free_unpacked(*out, NULL)), or -1 (a field d does
 * not have, a value of the wrong kind, an integer that is not one whole
 * number in range, two members of one oneof, out of memory; *out NULL).
 * Integers may be JSON numbers or strings, enums names or numbers. */
int dl_pb_from_json(const ProtobufCMessageDescriptor *d, json_object *o,
                    ProtobufCMessage **out);
/* As dl_pb_from_json for an answer of the gateway: a field d does not
 * have (a newer etcd's) is skipped, as protobuf-c's unpack skips one on
 * the wire. */
int dl_pb_from_json_answer(const ProtobufCMessageDescriptor *d, json_object *o,
                           ProtobufCMessage **out);
/* The message m as JSON (the caller puts it), or NULL out of memory. */
json_object *dl_pb_to_json(const ProtobufCMessage *m);

#endif
