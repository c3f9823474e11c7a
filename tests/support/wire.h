/*
 * Helpers shared by the wire codec's test programs (test_wire.c,
 * test_wire_hostile.c): the seed's vectors from tests/data/wire-vectors.json,
 * hex, and message equality.  CHECK_NO_LEAKS() is in support/util.h.
 */
#ifndef ECT_TESTS_SUPPORT_WIRE_H
#define ECT_TESTS_SUPPORT_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "proto/wire.h"
#include "support/util.h"

/* The values the seed's vectors use: an mm_hash, a compatibility hash and a
 * session id. */
extern const char ts_wire_mm_hash[];
extern const char ts_wire_compat[];
extern const char ts_wire_session[];

/* The bytes of an even-length hex string, malloc'd; *len_p their number. */
uint8_t *ts_hex_decode(const char *hex, size_t *len_p);

/* n bytes as lower-case hex, malloc'd. */
char *ts_hex_encode(const uint8_t *p, size_t n);

/* tests/data/wire-vectors.json parsed (the caller deletes it); it must have
 * a non-empty "vectors" array. */
cJSON *ts_load_vectors(void);

/* The string member key of vector v, which must be there. */
const char *ts_vec_str(const cJSON *v, const char *key);

/* Whether vector v is of the given "kind". */
bool ts_vec_is_kind(const cJSON *v, const char *kind);

/* A field of a vector's "fields" object, or NULL when the vector omits it. */
const cJSON *ts_vec_field(const cJSON *v, const char *key);

/* Equal as messages: a NULL session_id is the empty one, and the version
 * counts only when it is marked present (the encoder ignores it otherwise). */
bool ts_req_equal(const ect_xfer_req_t *a, const ect_xfer_req_t *b);

/* The same bytes (two empty ones are equal whatever their pointers). */
bool ts_bytes_equal(const uint8_t *a, size_t an, const uint8_t *b, size_t bn);

/* Equal as messages, as req_equal. */
bool ts_ack_equal(const ect_xfer_ack_t *a, const ect_xfer_ack_t *b);

/* The hex of a named vector; the caller frees the bytes. */
uint8_t *ts_vector_bytes(const char *name, size_t *len_p);

#endif /* ECT_TESTS_SUPPORT_WIRE_H */
