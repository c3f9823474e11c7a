/*
 * ec_transfer_params (SPEC §8.5, §8.6): what a producer's request_finished
 * returns and an orchestrator hands to the consumer's request.  The one
 * codec: the producer encodes with it, the consumer decodes with it, and
 * fuzz/p2p/fuzz_params.c attacks the decoder.
 *
 *   {"<mm_hash>": {"metadata": {...}, "peer_host": "<host>", "peer_port": <1..65535>,
 *                  "size_bytes": <bytes>},
 *    "<mm_hash>": {"metadata": {}}, ...}
 *
 * An item is announced with both halves (its metadata and the producer's
 * address and size) or neither (only metadata: the producer cannot serve
 * it; the consumer encodes it itself).  Decoding is strict: the text goes
 * through common/json.c's checks (UTF-8, no NUL, nesting, numbers, one
 * value), keys are unique, hashes 1 .. ECT_KEY_MAX bytes (what the encoder
 * takes, so whatever decodes re-encodes).
 *
 * Pure functions; a decoded value is immutable and may be read from any
 * thread.
 */
#ifndef ECT_PROTO_PARAMS_H
#define ECT_PROTO_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

/* The most text a request's ec_transfer_params may be. */
#define ECT_PARAMS_MAX_BYTES (4u << 20)

/* One item.  Encoding: every pointer borrowed; metadata_json is a JSON
 * object's text or NULL ({}); the address fields count only when served.
 * Decoding: the strings point into the decoded value. */
typedef struct ect_params_item {
    const char *mm_hash;
    const char *metadata_json;
    int served; /* both halves: peer_host, peer_port, size_bytes */
    const char *peer_host;
    uint16_t peer_port;
    uint64_t size_bytes;
} ect_params_item_t;

/* The JSON text of n items (ect__malloc'd, NUL-terminated; ect__free it) into
 * *json_p.  Metadata that is not a JSON object is published as {} (with a
 * warning).  Returns ECT_OK, ECT_ERR_INVALID_ARG (an empty hash, a served
 * item without host, port or size, a size above 2^53), ECT_ERR_NO_MEMORY. */
ect_status_t ect__params_encode(const ect_params_item_t *items, size_t n, char **json_p);

typedef struct ect_params ect_params_t;

/* Decode a request's ec_transfer_params.  Returns ECT_OK with *params_p
 * (destroy with ect__params_destroy), ECT_ERR_PARSE (not JSON, not an
 * object, a duplicate or over-long key, over ECT_PARAMS_MAX_BYTES: the
 * message says which), ECT_ERR_NO_MEMORY. */
ect_status_t ect__params_decode(const char *json, ect_params_t **params_p);

/* The announcement of mm_hash.  Returns ECT_OK with *item_p (served or not;
 * strings borrowed from params), ECT_ERR_NOT_FOUND (not announced),
 * ECT_ERR_PARSE (an announcement of the wrong shape: not an object, one
 * half without the other, a port or size out of range, the wrong types;
 * the message names the field). */
ect_status_t ect__params_find(const ect_params_t *params, const char *mm_hash,
                              ect_params_item_t *item_p);

/* NULL is a no-op. */
void ect__params_destroy(ect_params_t *params);

#endif /* ECT_PROTO_PARAMS_H */
