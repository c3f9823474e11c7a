/*
 * P2P control-plane wire codec (SPEC §8.1) and peer-compatibility hash
 * (SPEC §8.2).  Pure: no I/O, no sockets, no global state.
 *
 * Two messages travel between a consumer and a producer, each one msgpack
 * map whose first key is "type" ("req" / "ack"), the other keys in the
 * declaration order below, a field equal to its default omitted.  The bytes
 * are those the seed's msgspec encoder writes (tests/data/wire-vectors.json).
 *
 * ectier adds a third, "done" (consumer -> producer, after a read landed:
 * {"type": "done", "mm_hash": H, "session_id": S}), which releases the
 * producer's grant.  The seed carries that notification inside its data
 * transport; ectier's transports are pluggable, so it rides the control
 * plane for all of them.  Only ectier producers offer ectier transports, so
 * only they ever receive it.
 *
 * Ownership.  The message structs are used two ways:
 *   - built by a caller for ect__wire_encode_*: every pointer is borrowed and
 *     only read during the call; arena_ stays NULL;
 *   - filled by ect__wire_decode_*: every string, blob and block array points
 *     into one heap arena owned by the struct (arena_), so the decoded
 *     message does not depend on the input buffer, which may be freed at
 *     once (a ZeroMQ frame usually is).  Strings are NUL-terminated and
 *     contain no NUL byte (the decoder rejects one), so they are safe to use
 *     as C strings.  Release with ect__xfer_req_cleanup / ect__xfer_ack_cleanup;
 *     cleanup on a caller-built struct (arena_ NULL) frees nothing.
 *
 * Limits.  Everything from the wire is checked before anything is
 * allocated: hashes and session ids are at most ECT_WIRE_MAX_STR bytes,
 * blobs at most ECT_WIRE_MAX_BLOB, block lists at most ECT_WIRE_MAX_BLOCKS
 * entries, and no length may exceed the bytes actually left in the input.
 *
 * Thread safety: every function is reentrant; distinct objects may be used
 * from distinct threads, one object from one thread at a time.
 */
#ifndef ECT_PROTO_WIRE_H
#define ECT_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>
#include <ectier/types.h>

/* The connector version ectier speaks, and the value an absent
 * "connector_version" key stands for (SPEC §8.1). */
#define ECT_WIRE_CONNECTOR_VERSION 1

/* Longest mm_hash, compatibility_hash or session_id accepted, in bytes. */
#define ECT_WIRE_MAX_STR 4096u
/* Largest agent_metadata or mem_descriptor accepted, in bytes.  The seed's
 * own descriptors exceed 64 KiB (the ack_ok_many_blocks vector carries
 * 70000 bytes), so the bound is 1 MiB. */
#define ECT_WIRE_MAX_BLOB (1u << 20)
/* Most src_block_indices entries accepted. */
#define ECT_WIRE_MAX_BLOCKS (1u << 24)

/* ect_xfer_status_t, ECT_XFER_STATUS_COUNT and ect_xfer_status_str are in
 * <ectier/types.h> (the metrics count acks by status too). */

/* Which message a buffer holds. */
typedef enum ect__wire_type {
    ECT_WIRE_REQ = 1,
    ECT_WIRE_ACK = 2,
    ECT_WIRE_DONE = 3,
} ect__wire_type_t;

/* Consumer -> producer: "I want to read mm_hash; pin it and tell me where". */
typedef struct ect_xfer_req {
    const char *mm_hash;            /* required */
    const char *compatibility_hash; /* required; 64 lowercase hex from ect__compat_hash */
    const char *session_id;         /* "" (or NULL when encoding) = absent */
    /* Read by the encoder only when has_connector_version is true; ectier's
     * sender always sets it.  After decoding, has_connector_version says
     * whether the key was present, and connector_version is
     * ECT_WIRE_CONNECTOR_VERSION when it was not. */
    int64_t connector_version;
    bool has_connector_version;
    /* ectier's own key "ectier_runs": true, sent after the seed's keys: this
     * consumer takes the entry's blocks as runs in the mem_descriptor
     * (src/p2p/xport_internal.h) instead of src_block_indices.  A seed
     * producer ignores the key (unknown keys are ignored); false (the
     * default) is never encoded, so seed messages stay byte-exact. */
    bool accepts_runs;
    void *arena_; /* owned storage of a decoded message; NULL otherwise */
} ect_xfer_req_t;

/* Producer -> consumer: the answer to one request. */
typedef struct ect_xfer_ack {
    const char *mm_hash; /* required */
    ect_xfer_status_t status;
    const char *session_id;            /* "" (or NULL when encoding) = absent */
    const uint64_t *src_block_indices; /* NULL when n_src_blocks is 0 */
    size_t n_src_blocks;
    const uint8_t *agent_metadata; /* opaque to the codec; NULL when empty */
    size_t agent_metadata_len;
    const uint8_t *mem_descriptor; /* opaque to the codec; NULL when empty */
    size_t mem_descriptor_len;
    void *arena_; /* owned storage of a decoded message; NULL otherwise */
} ect_xfer_ack_t;

/* Consumer -> producer: the read of mm_hash for session_id has landed. */
typedef struct ect_xfer_done {
    const char *mm_hash;    /* required */
    const char *session_id; /* required */
    void *arena_;           /* owned storage of a decoded message; NULL otherwise */
} ect_xfer_done_t;

/* A growable byte buffer that encoders append to. */
typedef struct ect__wire_buf {
    uint8_t *data; /* owned; NULL until something is appended */
    size_t len;
    size_t cap;
} ect__wire_buf_t;

/* ---- status classification (the one place it is decided) ---------------- */

/* True for a value that is a member of ect_xfer_status_t. */
bool ect__wire_status_valid(int64_t value);

/* Only NACK_NOT_READY is worth retrying: the entry exists and will be
 * readable once its save lands. */
bool ect__wire_status_is_retryable(ect_xfer_status_t status);

/* NACKs that occur in normal operation (NOT_READY, MISSING): log them at
 * info, the others at warning. */
bool ect__wire_status_is_expected(ect_xfer_status_t status);

/* ---- buffers ------------------------------------------------------------- */

/* Initialise an empty buffer in caller storage (no allocation). */
void ect__wire_buf_init(ect__wire_buf_t *buf);

/* Free the buffer's storage and leave it empty; NULL is a no-op. */
void ect__wire_buf_cleanup(ect__wire_buf_t *buf);

/* ---- encode ---------------------------------------------------------------- */

/* Append the msgpack encoding of req to buf.  req and its strings are
 * borrowed.  Strings must be valid UTF-8 without NUL bytes and at most
 * ECT_WIRE_MAX_STR bytes, so that every encoded message decodes.
 * Returns ECT_OK; ECT_ERR_INVALID_ARG (NULL argument or field, bad UTF-8);
 * ECT_ERR_OVERFLOW (a field beyond its limit); ECT_ERR_NO_MEMORY.  On error
 * buf->len is what it was (its storage may have grown). */
ect_status_t ect__wire_encode_req(const ect_xfer_req_t *req, ect__wire_buf_t *buf);

/* Append the msgpack encoding of ack to buf; as ect__wire_encode_req.  status
 * must be a member of ect_xfer_status_t; block and blob pointers may be
 * NULL only when their count is 0; counts are checked against the limits
 * before the arrays are read. */
ect_status_t ect__wire_encode_ack(const ect_xfer_ack_t *ack, ect__wire_buf_t *buf);

/* Append the encoding of done to buf; as ect__wire_encode_req. */
ect_status_t ect__wire_encode_done(const ect_xfer_done_t *done, ect__wire_buf_t *buf);

/* ---- decode ---------------------------------------------------------------- */

/* Decode one XferReq occupying exactly len bytes at data (borrowed, only
 * read during the call).  Unknown keys are ignored.  A non-map, a missing or
 * wrong "type", a missing required key, a wrong value type, a key given
 * twice, a string with invalid UTF-8 or a NUL byte, a value beyond the
 * limits, truncation or trailing bytes -> ECT_ERR_PARSE with a message that
 * names what was wrong.  ECT_ERR_NO_MEMORY if the arena cannot be allocated.
 * *req_p is written only on success and must then be released with
 * ect__xfer_req_cleanup. */
ect_status_t ect__wire_decode_req(const void *data, size_t len, ect_xfer_req_t *req_p);

/* Decode one XferAck; as ect__wire_decode_req.  An unknown status or a
 * negative block index is ECT_ERR_PARSE too.  Release with
 * ect__xfer_ack_cleanup. */
ect_status_t ect__wire_decode_ack(const void *data, size_t len, ect_xfer_ack_t *ack_p);

/* Decode one "done" message; as ect__wire_decode_req.  Release with
 * ect__xfer_done_cleanup. */
ect_status_t ect__wire_decode_done(const void *data, size_t len, ect_xfer_done_t *done_p);

/* Read only the "type" tag of a message, without validating the rest
 * beyond what is needed to find it.  Returns ECT_OK, or ECT_ERR_PARSE when
 * the bytes are not a map or carry no "req"/"ack"/"done" tag. */
ect_status_t ect__wire_peek_type(const void *data, size_t len, ect__wire_type_t *type_p);

/* Free a decoded message's arena and zero the struct.  NULL, a zeroed struct
 * or a caller-built one (arena_ NULL) frees nothing. */
void ect__xfer_req_cleanup(ect_xfer_req_t *req);
void ect__xfer_ack_cleanup(ect_xfer_ack_t *ack);
void ect__xfer_done_cleanup(ect_xfer_done_t *done);

/* ---- compatibility hash ---------------------------------------------------- */

/* Lowercase hex SHA-256 of exactly what Python prints for
 *     json.dumps([engine_version, model, dtype_torch_name, block_size_bytes],
 *                separators=(",", ":"))
 * (ensure_ascii: non-ASCII and DEL as \uXXXX, astral characters as surrogate
 * pairs, the short escapes \" \\ \n \r \t \b \f, other controls \u00XX).
 * The strings are borrowed UTF-8; dtype_torch_name is the "torch.bfloat16"
 * spelling.  hex_p receives 64 hex digits and a NUL, only on success.
 * Returns ECT_OK; ECT_ERR_INVALID_ARG for a NULL argument or invalid UTF-8
 * (overlong, surrogate, beyond U+10FFFF, truncated); ECT_ERR_NO_MEMORY;
 * ECT_ERR_INTERNAL if libcrypto fails. */
ect_status_t ect__compat_hash(const char *engine_version, const char *model,
                              const char *dtype_torch_name, uint64_t block_size_bytes,
                              char hex_p[65]);

/* The JSON text ect__compat_hash hashes, appended to out (for tests and
 * diagnostics).  Same arguments and statuses; out->len is unchanged on
 * error. */
ect_status_t ect__compat_text(const char *engine_version, const char *model,
                              const char *dtype_torch_name, uint64_t block_size_bytes,
                              ect__wire_buf_t *out);

/* ---- internal helpers shared by the proto files -------------------------- */

/* Append n bytes to buf, growing it.  ECT_OK or ECT_ERR_NO_MEMORY. */
ect_status_t ect__wire_buf_append(ect__wire_buf_t *buf, const void *bytes, size_t n);

#endif /* ECT_PROTO_WIRE_H */
