/*
 * Encode and decode the data-plane frames (the format is in stream.h).
 * The decoders take bytes from a hostile peer: every length is bounded
 * before it is used and the request must end exactly where its strings end.
 * Pure functions; no locking.
 */
#include <string.h>

#include "common/bytes.h"
#include "common/error.h"
#include "proto/stream.h"

#define REQ_MAGIC  "ECTR"
#define RESP_MAGIC "ECTS"
#define MAGIC_LEN  4u

const char *
ect__stream_status_str(uint32_t status)
{
    switch (status) {
    case ECT_STREAM_OK:
        return "ok";
    case ECT_STREAM_DENIED:
        return "denied";
    case ECT_STREAM_SIZE_MISMATCH:
        return "size_mismatch";
    default:
        return "unknown";
    }
}

void
ect__stream_stripe_blocks(uint64_t blocks, uint32_t stripe, uint32_t stripes, uint64_t *first_p,
                          uint64_t *count_p)
{
    if (stripes == 0 || stripe >= stripes) {
        *first_p = blocks;
        *count_p = 0;
        return;
    }
    /* The first blocks % stripes stripes take one block more; no product
     * that could overflow. */
    uint64_t q = blocks / stripes, r = blocks % stripes;
    *first_p = stripe * q + (stripe < r ? stripe : r);
    *count_p = q + (stripe < r ? 1 : 0);
}

static int
striped(const ect_stream_req_t *req)
{
    return req->stripes > 1;
}

size_t
ect__stream_req_size(const ect_stream_req_t *req)
{
    return ECT_STREAM_REQ_FIXED + (striped(req) ? ECT_STREAM_REQ_STRIPE_FIELDS : 0) +
           req->session_len + req->hash_len;
}

static int
string_ok(const char *s, size_t len)
{
    return s != NULL && len > 0 && memchr(s, '\0', len) == NULL;
}

ect_status_t
ect__stream_req_encode(const ect_stream_req_t *req, uint8_t *out, size_t cap, size_t *len_p)
{
    if (req == NULL || out == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "stream request: NULL argument");
    if (req->session_len > ECT_WIRE_MAX_STR || req->hash_len > ECT_WIRE_MAX_STR)
        return ect__error(ECT_ERR_OVERFLOW,
                          "stream request: session id of %zu bytes or hash of %zu bytes (at most "
                          "%u each)",
                          req->session_len, req->hash_len, ECT_WIRE_MAX_STR);
    if (!string_ok(req->session_id, req->session_len) || !string_ok(req->mm_hash, req->hash_len) ||
        req->expect_bytes == 0)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "stream request: session id and hash must be non-empty without NUL "
                          "bytes, and the expected size non-zero");
    if (req->stripes > ECT_STREAM_MAX_STRIPES || (req->stripe != 0 && req->stripe >= req->stripes))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "stream request: stripe %u of %u (at most %u stripes, each below their "
                          "count)",
                          req->stripe, req->stripes, ECT_STREAM_MAX_STRIPES);
    size_t len = ect__stream_req_size(req);
    if (cap < len)
        return ect__error(ECT_ERR_OVERFLOW, "stream request: %zu bytes do not fit %zu", len, cap);
    ect_bytes_writer_t w = {out, out + cap};
    ect__put_bytes(&w, REQ_MAGIC, MAGIC_LEN);
    ect__put_u32(
        &w, striped(req)
                ? (req->aligned ? ECT_STREAM_VERSION_ALIGNED_STRIPED : ECT_STREAM_VERSION_STRIPED)
                : (req->aligned ? ECT_STREAM_VERSION_ALIGNED : ECT_STREAM_VERSION));
    ect__put_u32(&w, (uint32_t)req->session_len);
    ect__put_u32(&w, (uint32_t)req->hash_len);
    ect__put_u64(&w, req->expect_bytes);
    ect__put_bytes(&w, req->token, ECT_STREAM_TOKEN_LEN);
    if (striped(req)) {
        ect__put_u32(&w, req->stripe);
        ect__put_u32(&w, req->stripes);
    }
    ect__put_bytes(&w, req->session_id, req->session_len);
    ect__put_bytes(&w, req->mm_hash, req->hash_len);
    *len_p = len;
    return ECT_OK;
}

/* The fixed fields, validated; r is left after the token.  A version 2 or
 * 4 request reads stripes 2 here (its stripe fields come after the fixed
 * part: decode reads them), a version 1 or 3 request stripe 0 of 1. */
static ect_status_t
read_fixed(ect_bytes_reader_t *r, ect_stream_req_t *req)
{
    const uint8_t *magic = ect__get_bytes(r, MAGIC_LEN);
    if (magic == NULL || memcmp(magic, REQ_MAGIC, MAGIC_LEN) != 0)
        return ect__error(ECT_ERR_PARSE, "stream request: bad magic (expected \"ECTR\")");
    uint32_t version = ect__get_u32(r);
    uint32_t session_len = ect__get_u32(r);
    uint32_t hash_len = ect__get_u32(r);
    uint64_t expect = ect__get_u64(r);
    const uint8_t *token = ect__get_bytes(r, ECT_STREAM_TOKEN_LEN);
    if (r->failed)
        return ect__error(ECT_ERR_PARSE, "stream request: truncated fixed part");
    if (version < ECT_STREAM_VERSION || version > ECT_STREAM_VERSION_ALIGNED_STRIPED)
        return ect__error(ECT_ERR_PARSE, "stream request: version %u; this build speaks %u to %u",
                          version, ECT_STREAM_VERSION, ECT_STREAM_VERSION_ALIGNED_STRIPED);
    if (session_len == 0 || session_len > ECT_WIRE_MAX_STR || hash_len == 0 ||
        hash_len > ECT_WIRE_MAX_STR)
        return ect__error(ECT_ERR_PARSE,
                          "stream request: session id of %u bytes, hash of %u bytes (1..%u each)",
                          session_len, hash_len, ECT_WIRE_MAX_STR);
    if (expect == 0)
        return ect__error(ECT_ERR_PARSE, "stream request: expects 0 bytes");
    req->session_len = session_len;
    req->hash_len = hash_len;
    req->expect_bytes = expect;
    memcpy(req->token, token, ECT_STREAM_TOKEN_LEN);
    req->stripe = 0;
    req->stripes =
        version == ECT_STREAM_VERSION_STRIPED || version == ECT_STREAM_VERSION_ALIGNED_STRIPED ? 2
                                                                                               : 1;
    req->aligned = version >= ECT_STREAM_VERSION_ALIGNED;
    return ECT_OK;
}

ect_status_t
ect__stream_req_peek(const uint8_t *buf, size_t len, size_t *total_p)
{
    if (buf == NULL || total_p == NULL || len < ECT_STREAM_REQ_FIXED)
        return ect__error(ECT_ERR_INVALID_ARG, "stream request: fewer than %u bytes to peek at",
                          ECT_STREAM_REQ_FIXED);
    ect_bytes_reader_t r = {buf, buf + ECT_STREAM_REQ_FIXED, 0};
    ect_stream_req_t req;
    ect_status_t st = read_fixed(&r, &req);
    if (st != ECT_OK)
        return st;
    *total_p = ect__stream_req_size(&req);
    return ECT_OK;
}

ect_status_t
ect__stream_req_decode(const uint8_t *buf, size_t len, ect_stream_req_t *req_p)
{
    if (buf == NULL || req_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "stream request: NULL argument");
    ect_bytes_reader_t r = {buf, buf + len, 0};
    ect_stream_req_t req;
    ect_status_t st = read_fixed(&r, &req);
    if (st != ECT_OK)
        return st;
    if (striped(&req)) {
        req.stripe = ect__get_u32(&r);
        req.stripes = ect__get_u32(&r);
        if (r.failed)
            return ect__error(ECT_ERR_PARSE, "stream request: truncated stripe fields");
        if (req.stripes < 2 || req.stripes > ECT_STREAM_MAX_STRIPES || req.stripe >= req.stripes)
            return ect__error(ECT_ERR_PARSE,
                              "stream request: stripe %u of %u (2..%u stripes, each below their "
                              "count)",
                              req.stripe, req.stripes, ECT_STREAM_MAX_STRIPES);
    }
    if (ect__remaining(&r) != req.session_len + req.hash_len)
        return ect__error(ECT_ERR_PARSE,
                          "stream request: %zu bytes of strings, its lengths say %zu",
                          ect__remaining(&r), req.session_len + req.hash_len);
    req.session_id = (const char *)ect__get_bytes(&r, req.session_len);
    req.mm_hash = (const char *)ect__get_bytes(&r, req.hash_len);
    if (!string_ok(req.session_id, req.session_len) || !string_ok(req.mm_hash, req.hash_len))
        return ect__error(ECT_ERR_PARSE, "stream request: a NUL byte in the session id or hash");
    *req_p = req;
    return ECT_OK;
}

int
ect__stream_token_equal(const uint8_t a[ECT_STREAM_TOKEN_LEN],
                        const uint8_t b[ECT_STREAM_TOKEN_LEN])
{
    uint8_t diff = 0;
    for (size_t i = 0; i < ECT_STREAM_TOKEN_LEN; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

static size_t
resp_len_of(int aligned)
{
    return aligned ? ECT_STREAM_RESP_ALIGNED_LEN : ECT_STREAM_RESP_LEN;
}

size_t
ect__stream_resp_len(const ect_stream_req_t *req)
{
    return resp_len_of(req->aligned);
}

size_t
ect__stream_resp_encode(ect_stream_status_t status, uint64_t payload_len, int aligned,
                        uint8_t out[ECT_STREAM_RESP_ALIGNED_LEN])
{
    size_t resp_len = resp_len_of(aligned);
    memset(out, 0, resp_len);
    ect_bytes_writer_t w = {out, out + resp_len};
    ect__put_bytes(&w, RESP_MAGIC, MAGIC_LEN);
    ect__put_u32(&w, (uint32_t)status);
    ect__put_u64(&w, status == ECT_STREAM_OK ? payload_len : 0);
    return resp_len;
}

ect_status_t
ect__stream_resp_decode(const uint8_t *in, size_t resp_len, uint32_t *status_p,
                        uint64_t *payload_len_p)
{
    if (in == NULL || status_p == NULL || payload_len_p == NULL ||
        (resp_len != ECT_STREAM_RESP_LEN && resp_len != ECT_STREAM_RESP_ALIGNED_LEN))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "stream response: NULL argument or a header of %zu bytes", resp_len);
    ect_bytes_reader_t r = {in, in + resp_len, 0};
    const uint8_t *magic = ect__get_bytes(&r, MAGIC_LEN);
    uint32_t status = ect__get_u32(&r);
    uint64_t payload = ect__get_u64(&r);
    if (memcmp(magic, RESP_MAGIC, MAGIC_LEN) != 0)
        return ect__error(ECT_ERR_PARSE, "stream response: bad magic (expected \"ECTS\")");
    for (size_t i = ECT_STREAM_RESP_LEN; i < resp_len; i++)
        if (in[i] != 0)
            return ect__error(ECT_ERR_PARSE,
                              "stream response: byte %zu of an aligned header's padding is not 0",
                              i);
    if (status > ECT_STREAM_SIZE_MISMATCH)
        return ect__error(ECT_ERR_PARSE, "stream response: unknown status %u", status);
    if (status != ECT_STREAM_OK && payload != 0)
        return ect__error(ECT_ERR_PARSE, "stream response: %s with a payload of %llu bytes",
                          ect__stream_status_str(status), (unsigned long long)payload);
    *status_p = status;
    *payload_len_p = payload;
    return ECT_OK;
}
