/*
 * Fuzz target for the data-plane frames (src/proto/stream.c), the bytes a
 * hostile consumer sends to a producer's data stream and a hostile
 * producer answers.
 *
 * Every input is offered to the request decoder both whole and through the
 * peek-then-decode path the server takes, and its first 16 bytes to the
 * response decoder.  An accepted request re-encodes to the very same bytes,
 * its strings lie inside the input and hold no NUL; peek and decode agree
 * on the length.  A violation aborts, which is how a fuzzer (or the corpus
 * replay, test_fuzz_stream) reports it.
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

static void
check_request(const uint8_t *data, size_t size)
{
    size_t total = 0;
    int peeked = size >= ECT_STREAM_REQ_FIXED && ect__stream_req_peek(data, size, &total) == ECT_OK;
    if (peeked && (total < ECT_STREAM_REQ_FIXED || total > ECT_STREAM_REQ_MAX))
        fail("peek gave an impossible length");
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
    uint8_t *again = malloc(size);
    size_t len = 0;
    if (again == NULL)
        return;
    if (ect__stream_req_encode(&req, again, size, &len) != ECT_OK || len != size ||
        memcmp(again, data, size) != 0)
        fail("request round trip changed its bytes");
    free(again);
}

static void
check_response(const uint8_t *data, size_t size)
{
    if (size < ECT_STREAM_RESP_LEN)
        return;
    uint32_t status;
    uint64_t payload;
    if (ect__stream_resp_decode(data, &status, &payload) != ECT_OK)
        return;
    uint8_t again[ECT_STREAM_RESP_LEN];
    ect__stream_resp_encode((ect_stream_status_t)status, payload, again);
    if (memcmp(again, data, ECT_STREAM_RESP_LEN) != 0)
        fail("response round trip changed its bytes");
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
