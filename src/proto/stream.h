/*
 * The P2P data-plane frames (SPEC §8.7): what a consumer sends on ectier's
 * TCP data stream to name the grant it holds, and what the producer answers
 * before the granted bytes.  Pure: no I/O, no state.  The one home of this
 * format; src/p2p/xport_tcp_server.c and xport_tcp_client.c speak it and fuzz/p2p/fuzz_stream.c
 * attacks its decoders.
 *
 * All integers little-endian.
 *
 *   request (consumer -> producer), ECT_STREAM_REQ_FIXED bytes, then (in
 *   versions 2 and 4 only) the stripe fields, then the two strings:
 *      0  "ECTR"
 *      4  u32 version       ECT_STREAM_VERSION (1): the whole grant;
 *                           ECT_STREAM_VERSION_STRIPED (2): one stripe of it;
 *                           3 and 4: as 1 and 2, answered with an aligned
 *                           response (below)
 *      8  u32 session_len   1..ECT_WIRE_MAX_STR
 *     12  u32 hash_len      1..ECT_WIRE_MAX_STR
 *     16  u64 expect_bytes  the whole grant's size the consumer expects (> 0)
 *     24  token[ECT_STREAM_TOKEN_LEN]  the grant token of the XferAck
 *   versions 2 and 4 only:
 *     40  u32 stripe        0..stripes-1
 *     44  u32 stripes       2..ECT_STREAM_MAX_STRIPES
 *     40 (48 in versions 2 and 4)  session_id bytes, mm_hash bytes (no NUL
 *                           byte in either)
 *
 *   response (producer -> consumer), ECT_STREAM_RESP_LEN bytes to a version
 *   1 or 2 request, ECT_STREAM_RESP_ALIGNED_LEN to a version 3 or 4 one
 *   (whatever the status):
 *      0  "ECTS"
 *      4  u32 status (ect_stream_status_t)
 *      8  u64 payload_len  (expect_bytes when OK, else 0)
 *     16  (aligned only) 48 zero bytes
 *   then, when OK, exactly payload_len bytes: the entry's blocks in entry
 *   order, whole blocks (of a stripe: its blocks, ect__stream_stripe_blocks).
 *
 * Aligned responses.  The kernel copies a stream's bytes from the sender's
 * memory into socket buffers and from those into the receiver's, and both
 * copies keep the byte offsets the stream gives them: after a 16-byte
 * header the payload lies 16 bytes off the alignment its blocks have at
 * both ends, and on the AMD EPYC VM CI runs on such copies run at about
 * half speed (1 MiB reads reached 0.34 of a bare transfer, 0.80 with a
 * 64-byte header: docs/performance.md, "Aligned answers").  A block is a token's bytes
 * (hidden size x dtype), a multiple of 64 for every model we know, so
 * with a 64-byte header every payload starts, and the next response
 * follows it, where its blocks' alignment says (a block size that is no
 * such multiple costs speed, never bytes).  A producer that answers
 * versions 3 and 4 says so in its offer (xport_internal.h, kind 4); an
 * older one refuses them, so a consumer sends them only where offered and
 * versions 1 and 2 otherwise, and a producer answers those as before.
 *
 * One stream per grant: a token is good for one stream, or for one stripe
 * group.  After any answer but OK the producer closes the connection; after
 * OK and the payload the connection may carry the next request.
 *
 * Stripes.  A producer whose offer says it takes stripes (xport_internal.h)
 * lets a consumer fetch one grant over up to ECT_STREAM_MAX_STRIPES
 * connections at once, each carrying a block-aligned share, so that one
 * read is not held to what one TCP connection moves.  Every request of the
 * group names the same session, hash, token, expect_bytes and stripes, and
 * its own stripe.  The first one the producer accepts claims the grant; the
 * others join it until the producer's send timeout, counted from that claim,
 * has passed; each stripe is served once.  The grant is released when every
 * stripe has been sent, or, once no stripe is being sent any more, when one
 * failed (the group takes no more stripes then) or the deadline passed with
 * stripes missing.  A request that
 * disagrees with its group (another stripes or expect_bytes, a stripe
 * already taken) is refused and leaves the group as it was.
 */
#ifndef ECT_PROTO_STREAM_H
#define ECT_PROTO_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#include "proto/wire.h"

#define ECT_STREAM_VERSION                 1u
#define ECT_STREAM_VERSION_STRIPED         2u
#define ECT_STREAM_VERSION_ALIGNED         3u
#define ECT_STREAM_VERSION_ALIGNED_STRIPED 4u
#define ECT_STREAM_MAX_STRIPES             4u
#define ECT_STREAM_TOKEN_LEN               16u
#define ECT_STREAM_REQ_FIXED               40u
#define ECT_STREAM_REQ_STRIPE_FIELDS       8u
#define ECT_STREAM_REQ_MAX                                                                         \
    (ECT_STREAM_REQ_FIXED + ECT_STREAM_REQ_STRIPE_FIELDS + 2u * ECT_WIRE_MAX_STR)
#define ECT_STREAM_RESP_LEN         16u
#define ECT_STREAM_RESP_ALIGNED_LEN 64u

/* The producer's answer; values are the wire values. */
typedef enum ect_stream_status {
    ECT_STREAM_OK = 0,
    /* No live grant of that name and token: never granted, forged token,
     * already streamed, lapsed or released.  One answer for all, so a
     * prober learns nothing. */
    ECT_STREAM_DENIED = 1,
    /* The grant is live but expect_bytes is not its size. */
    ECT_STREAM_SIZE_MISMATCH = 2,
} ect_stream_status_t;

/* "ok", "denied", "size_mismatch"; "unknown" otherwise.  Never NULL. */
const char *ect__stream_status_str(uint32_t status);

/* A request.  When decoded, the strings point into the decoded buffer and
 * are NOT NUL-terminated (use the lengths). */
typedef struct ect_stream_req {
    const char *session_id;
    size_t session_len;
    const char *mm_hash;
    size_t hash_len;
    uint64_t expect_bytes;
    uint8_t token[ECT_STREAM_TOKEN_LEN];
    /* 0 and 1 (or 0 and 0): the whole grant, encoded as version 1 (3
     * aligned); stripes 2..ECT_STREAM_MAX_STRIPES: stripe `stripe` of them,
     * version 2 (4 aligned).  A decoded version 1 or 3 request reads 0 and
     * 1. */
    uint32_t stripe;
    uint32_t stripes;
    /* Non-zero: ask for an aligned response (versions 3 and 4). */
    int aligned;
} ect_stream_req_t;

/* The blocks stripe `stripe` of `stripes` carries of a payload of `blocks`
 * whole blocks: [*first_p, *first_p + *count_p), counted in the payload's
 * (the entry's) order.  The stripes tile the payload in order and their
 * counts differ by at most one; a stripe gets no block only when blocks <
 * stripes.  For stripe >= stripes or stripes 0: *first_p = blocks and
 * *count_p = 0. */
void ect__stream_stripe_blocks(uint64_t blocks, uint32_t stripe, uint32_t stripes,
                               uint64_t *first_p, uint64_t *count_p);

/* Bytes the encoding of req takes (ECT_STREAM_REQ_FIXED, the stripe fields
 * when striped, both lengths). */
size_t ect__stream_req_size(const ect_stream_req_t *req);

/* Write req to out (cap bytes).  Returns ECT_OK with *len_p;
 * ECT_ERR_INVALID_ARG (a NULL argument, an empty string or one with a NUL
 * byte, expect_bytes 0, stripes over ECT_STREAM_MAX_STRIPES, a stripe other
 * than 0 that is not below stripes); ECT_ERR_OVERFLOW (a string over
 * ECT_WIRE_MAX_STR bytes, or cap too small). */
ect_status_t ect__stream_req_encode(const ect_stream_req_t *req, uint8_t *out, size_t cap,
                                    size_t *len_p);

/* Check the fixed part of a request (the first ECT_STREAM_REQ_FIXED of len
 * bytes) and say how long the whole request is.  Returns ECT_OK with
 * *total_p; ECT_ERR_PARSE (bad magic or version, a length 0 or over
 * ECT_WIRE_MAX_STR, expect_bytes 0) with a message; ECT_ERR_INVALID_ARG
 * when len < ECT_STREAM_REQ_FIXED. */
ect_status_t ect__stream_req_peek(const uint8_t *buf, size_t len, size_t *total_p);

/* Decode one whole request of exactly len bytes.  *req_p borrows from buf
 * and is written only on success.  Returns ECT_OK or ECT_ERR_PARSE (what
 * req_peek refuses, a length that disagrees with len, a NUL byte in a
 * string, stripe fields out of their bounds). */
ect_status_t ect__stream_req_decode(const uint8_t *buf, size_t len, ect_stream_req_t *req_p);

/* Whether two grant tokens are equal, in time that does not depend on
 * where they differ (a prober learns nothing from timing). */
int ect__stream_token_equal(const uint8_t a[ECT_STREAM_TOKEN_LEN],
                            const uint8_t b[ECT_STREAM_TOKEN_LEN]);

/* The bytes of the response to req: ECT_STREAM_RESP_ALIGNED_LEN when it
 * asks for an aligned one, else ECT_STREAM_RESP_LEN. */
size_t ect__stream_resp_len(const ect_stream_req_t *req);

/* Write a response header to out, aligned (non-zero: the answer to a
 * version 3 or 4 request) or not.  Returns its bytes: ECT_STREAM_RESP_LEN,
 * or ECT_STREAM_RESP_ALIGNED_LEN when aligned. */
size_t ect__stream_resp_encode(ect_stream_status_t status, uint64_t payload_len, int aligned,
                               uint8_t out[ECT_STREAM_RESP_ALIGNED_LEN]);

/* Decode a response header of resp_len bytes (ECT_STREAM_RESP_LEN or
 * ECT_STREAM_RESP_ALIGNED_LEN).  Returns ECT_OK with *status_p (a member
 * of ect_stream_status_t) and *payload_len_p (0 unless OK); ECT_ERR_PARSE
 * for a bad magic, an unknown status, a payload length on a refusal, or a
 * non-zero byte in an aligned header's padding; ECT_ERR_INVALID_ARG for
 * another resp_len or a NULL argument. */
ect_status_t ect__stream_resp_decode(const uint8_t *in, size_t resp_len, uint32_t *status_p,
                                     uint64_t *payload_len_p);

#endif /* ECT_PROTO_STREAM_H */
