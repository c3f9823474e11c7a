/*
 * Fuzz target for the data-plane frames (src/proto/stream.c), the bytes a
 * hostile consumer sends to a producer's data stream and a hostile
 * producer answers.
 *
 * Every input is offered to the request decoder both whole and through the
 * peek-then-decode path the server takes, and its first 16 bytes to the
 * response decoder.  An accepted request re-encodes to the very same bytes,
 * its strings lie inside the input and hold no NUL; peek and decode agree
 * on the length.  Its stripe fields agree with its version: a version 1
 * request reads stripe 0 of 1, a version 2 one 2..ECT_STREAM_MAX_STRIPES
 * stripes and a stripe below them, and its stripes (ect__stream_stripe_blocks,
 * with expect_bytes as the block count) tile the payload.  A violation
 * aborts, which is how a fuzzer (or the corpus replay, test_fuzz_stream)
 * reports it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_stream: %s\n", what);
    abort();
}

static uint32_t
get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* An accepted request's stripe fields: what its version allows, and on the
 * wire where stream.h puts them. */
static void
check_stripes(const uint8_t *data, const ect_stream_req_t *req)
{
    uint32_t version = get_u32(data + 4);
    if ((req->aligned != 0) !=
        (version == ECT_STREAM_VERSION_ALIGNED || version == ECT_STREAM_VERSION_ALIGNED_STRIPED))
        fail("a request's aligned flag disagrees with its version");
    if (ect__stream_resp_len(req) !=
        (req->aligned ? ECT_STREAM_RESP_ALIGNED_LEN : ECT_STREAM_RESP_LEN))
        fail("a request's response length disagrees with its version");
    if (version == ECT_STREAM_VERSION || version == ECT_STREAM_VERSION_ALIGNED) {
        if (req->stripe != 0 || req->stripes != 1)
            fail("a version 1 or 3 request is not stripe 0 of 1");
    } else if (version == ECT_STREAM_VERSION_STRIPED ||
               version == ECT_STREAM_VERSION_ALIGNED_STRIPED) {
        /* Its size (which peek's total and decode matched) counts them. */
        if (ect__stream_req_size(req) !=
            ECT_STREAM_REQ_FIXED + ECT_STREAM_REQ_STRIPE_FIELDS + req->session_len + req->hash_len)
            fail("a version 2 or 4 request's size leaves out its stripe fields");
        if (req->stripes < 2 || req->stripes > ECT_STREAM_MAX_STRIPES ||
            req->stripe >= req->stripes)
            fail("an accepted version 2 or 4 request with its stripe out of bounds");
        if (get_u32(data + ECT_STREAM_REQ_FIXED) != req->stripe ||
            get_u32(data + ECT_STREAM_REQ_FIXED + 4) != req->stripes)
            fail("decoded stripe fields are not the bytes at 40 and 44");
    } else {
        fail("a request of another version accepted");
    }
    /* Its stripes tile a payload of expect_bytes blocks, in order. */
    uint64_t next = 0, first, count;
    for (uint32_t i = 0; i < req->stripes; i++) {
        ect__stream_stripe_blocks(req->expect_bytes, i, req->stripes, &first, &count);
        if (first != next || count > req->expect_bytes - first)
            fail("stripes do not tile the payload");
        next = first + count;
    }
    if (next != req->expect_bytes)
        fail("stripes do not cover the payload");
}

static void
check_request(const uint8_t *data, size_t size)
{
    size_t total = 0;
    int peeked = size >= ECT_STREAM_REQ_FIXED && ect__stream_req_peek(data, size, &total) == ECT_OK;
    if (peeked && (total < ECT_STREAM_REQ_FIXED || total > ECT_STREAM_REQ_MAX))
        fail("peek gave an impossible length");
    /* The server peeks at the fixed part alone: the same answer. */
    size_t fixed_total = 0;
    if (peeked && (ect__stream_req_peek(data, ECT_STREAM_REQ_FIXED, &fixed_total) != ECT_OK ||
                   fixed_total != total))
        fail("peek at the fixed part alone disagrees");
    ect_stream_req_t req;
    if (ect__stream_req_decode(data, size, &req) != ECT_OK)
        return;
    if (!peeked || total != size)
        fail("decode accepted what peek refused, or a different length");
    const uint8_t *s = (const uint8_t *)req.session_id, *h = (const uint8_t *)req.mm_hash;
    if (s < data || s + req.session_len > data + size || h < data || h + req.hash_len > data + size)
        fail("a string outside the input");
    if (memchr(s, 0, req.session_len) != NULL || memchr(h, 0, req.hash_len) != NULL)
        fail("a NUL byte in an accepted string");
    check_stripes(data, &req);
    uint8_t *again = malloc(size);
    size_t len = 0;
    if (again == NULL)
        return;
    if (ect__stream_req_encode(&req, again, size, &len) != ECT_OK || len != size ||
        memcmp(again, data, size) != 0)
        fail("request round trip changed its bytes");
    free(again);
}

/* Both header sizes a response can have: what decodes encodes back to the
 * same bytes. */
static void
check_response(const uint8_t *data, size_t size)
{
    for (int aligned = 0; aligned < 2; aligned++) {
        size_t len = aligned ? ECT_STREAM_RESP_ALIGNED_LEN : ECT_STREAM_RESP_LEN;
        if (size < len)
            return;
        uint32_t status;
        uint64_t payload;
        if (ect__stream_resp_decode(data, len, &status, &payload) != ECT_OK)
            continue;
        uint8_t again[ECT_STREAM_RESP_ALIGNED_LEN];
        if (ect__stream_resp_encode((ect_stream_status_t)status, payload, aligned, again) != len ||
            memcmp(again, data, len) != 0)
            fail("response round trip changed its bytes");
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so a read past the end is a sanitizer error. */
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    check_request(copy, size);
    check_response(copy, size);
    free(copy);
    return 0;
}
