/*
 * Fuzz target for the P2P wire decoders (src/proto/wire_decode.c).
 *
 * Every input is offered to both decoders and to the tag peek.  Whatever a
 * decoder accepts must survive encode -> decode unchanged, and encoding the
 * result again must give the same bytes: the decoder accepts only what the
 * encoder can write.  A violation aborts, which is how a fuzzer (or the
 * corpus replay, test_fuzz_wire) reports it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_wire: %s\n", what);
    abort();
}

static bool
same_bytes(const void *a, size_t an, const void *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static void
check_req(const uint8_t *data, size_t size)
{
    ect_xfer_req_t a, b;
    if (ect__wire_decode_req(data, size, &a) != ECT_OK)
        return;
    ect__wire_buf_t e1, e2;
    ect__wire_buf_init(&e1);
    ect__wire_buf_init(&e2);
    if (ect__wire_encode_req(&a, &e1) != ECT_OK)
        fail("a decoded req does not encode");
    if (ect__wire_decode_req(e1.data, e1.len, &b) != ECT_OK)
        fail("an encoded req does not decode");
    if (strcmp(a.mm_hash, b.mm_hash) != 0 ||
        strcmp(a.compatibility_hash, b.compatibility_hash) != 0 ||
        strcmp(a.session_id, b.session_id) != 0 ||
        a.has_connector_version != b.has_connector_version ||
        a.connector_version != b.connector_version)
        fail("req changed across encode/decode");
    if (ect__wire_encode_req(&b, &e2) != ECT_OK || !same_bytes(e1.data, e1.len, e2.data, e2.len))
        fail("req re-encodes differently");
    ect__wire_type_t type;
    if (ect__wire_peek_type(data, size, &type) != ECT_OK || type != ECT_WIRE_REQ)
        fail("peek disagrees with the req decoder");
    ect__xfer_req_cleanup(&a);
    ect__xfer_req_cleanup(&b);
    ect__wire_buf_cleanup(&e1);
    ect__wire_buf_cleanup(&e2);
}

static void
check_ack(const uint8_t *data, size_t size)
{
    ect_xfer_ack_t a, b;
    if (ect__wire_decode_ack(data, size, &a) != ECT_OK)
        return;
    ect__wire_buf_t e1, e2;
    ect__wire_buf_init(&e1);
    ect__wire_buf_init(&e2);
    if (ect__wire_encode_ack(&a, &e1) != ECT_OK)
        fail("a decoded ack does not encode");
    if (ect__wire_decode_ack(e1.data, e1.len, &b) != ECT_OK)
        fail("an encoded ack does not decode");
    if (strcmp(a.mm_hash, b.mm_hash) != 0 || a.status != b.status ||
        strcmp(a.session_id, b.session_id) != 0 ||
        !same_bytes(a.src_block_indices, a.n_src_blocks * sizeof(uint64_t), b.src_block_indices,
                    b.n_src_blocks * sizeof(uint64_t)) ||
        !same_bytes(a.agent_metadata, a.agent_metadata_len, b.agent_metadata,
                    b.agent_metadata_len) ||
        !same_bytes(a.mem_descriptor, a.mem_descriptor_len, b.mem_descriptor, b.mem_descriptor_len))
        fail("ack changed across encode/decode");
    if (ect__wire_encode_ack(&b, &e2) != ECT_OK || !same_bytes(e1.data, e1.len, e2.data, e2.len))
        fail("ack re-encodes differently");
    ect__wire_type_t type;
    if (ect__wire_peek_type(data, size, &type) != ECT_OK || type != ECT_WIRE_ACK)
        fail("peek disagrees with the ack decoder");
    ect__xfer_ack_cleanup(&a);
    ect__xfer_ack_cleanup(&b);
    ect__wire_buf_cleanup(&e1);
    ect__wire_buf_cleanup(&e2);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_req(data, size);
    check_ack(data, size);
    ect__wire_type_t type;
    (void)ect__wire_peek_type(data, size, &type);
    return 0;
}
