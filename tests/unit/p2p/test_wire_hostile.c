/*
 * The P2P wire decoders (src/proto/wire_decode.c, SPEC §8.1, §10) against
 * damaged and hostile input: every truncation and many byte flips of the
 * seed's vectors, and crafted messages that lie about sizes, repeat keys,
 * nest without end or carry the wrong types.  Each must be refused with
 * ECT_ERR_PARSE and a reason, without a crash, a leak or a huge allocation;
 * whatever is accepted must survive encode -> decode unchanged.
 */
#include <msgpack.h>

#include "support/wire.h"

/* Decode bytes as the given type; if that works, the message must survive
 * encode -> decode unchanged and re-encode to the same bytes. */
static ect_status_t
decode_and_recheck(const uint8_t *p, size_t n, bool as_req)
{
    ect__wire_buf_t b1, b2;
    ect__wire_buf_init(&b1);
    ect__wire_buf_init(&b2);
    ect_status_t st;
    if (as_req) {
        ect_xfer_req_t m1, m2;
        st = ect__wire_decode_req(p, n, &m1);
        if (st != ECT_OK)
            return st;
        CHECK_OK(ect__wire_encode_req(&m1, &b1));
        CHECK_OK(ect__wire_decode_req(b1.data, b1.len, &m2));
        CHECK(ts_req_equal(&m1, &m2));
        CHECK_OK(ect__wire_encode_req(&m2, &b2));
        ect__xfer_req_cleanup(&m1);
        ect__xfer_req_cleanup(&m2);
    } else {
        ect_xfer_ack_t m1, m2;
        st = ect__wire_decode_ack(p, n, &m1);
        if (st != ECT_OK)
            return st;
        CHECK_OK(ect__wire_encode_ack(&m1, &b1));
        CHECK_OK(ect__wire_decode_ack(b1.data, b1.len, &m2));
        CHECK(ts_ack_equal(&m1, &m2));
        CHECK_OK(ect__wire_encode_ack(&m2, &b2));
        ect__xfer_ack_cleanup(&m1);
        ect__xfer_ack_cleanup(&m2);
    }
    CHECK(ts_bytes_equal(b1.data, b1.len, b2.data, b2.len));
    ect__wire_buf_cleanup(&b1);
    ect__wire_buf_cleanup(&b2);
    return ECT_OK;
}

/* ---- damaged input ------------------------------------------------------ */

static void
test_truncation_at_every_offset_fails_cleanly(void)
{
    cJSON *root = ts_load_vectors();
    const cJSON *v;
    unsigned tried = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors"))
    {
        if (!ts_vec_is_kind(v, "valid"))
            continue;
        size_t len;
        uint8_t *bytes = ts_hex_decode(ts_vec_str(v, "hex"), &len);
        bool as_req = strcmp(cJSON_GetStringValue(ts_vec_field(v, "type")), "req") == 0;
        for (size_t cut = 0; cut < len; cut++) {
            /* A fresh copy of exactly cut bytes, so ASan sees any read past it. */
            uint8_t *prefix = malloc(cut > 0 ? cut : 1);
            CHECK(prefix != NULL);
            memcpy(prefix, bytes, cut);
            ect_status_t st = decode_and_recheck(prefix, cut, as_req);
            CHECK_MSG(st == ECT_ERR_PARSE, "%s cut at %zu: status %d", ts_vec_str(v, "name"), cut,
                      st);
            ect__wire_type_t type;
            st = ect__wire_peek_type(prefix, cut, &type);
            CHECK(st == ECT_OK || st == ECT_ERR_PARSE);
            free(prefix);
            tried++;
        }
        free(bytes);
    }
    cJSON_Delete(root);
    CHECK(tried > 1000);
    CHECK_NO_LEAKS();
}

static void
test_flipped_bytes_never_crash_and_accepted_ones_round_trip(void)
{
    static const uint8_t masks[] = {0x01, 0x10, 0x80, 0xff};
    cJSON *root = ts_load_vectors();
    const cJSON *v;
    unsigned accepted = 0, refused = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors"))
    {
        size_t len;
        uint8_t *bytes = ts_hex_decode(ts_vec_str(v, "hex"), &len);
        /* Every offset of small vectors; past 2 KiB of a large one the bytes
         * are blob payload, so a stride covers them. */
        for (size_t at = 0; at < len; at += at < 2048 ? 1 : 509) {
            for (size_t m = 0; m < sizeof(masks); m++) {
                bytes[at] ^= masks[m];
                for (int as_req = 0; as_req <= 1; as_req++) {
                    ect_status_t st = decode_and_recheck(bytes, len, as_req);
                    CHECK_MSG(st == ECT_OK || st == ECT_ERR_PARSE, "status %d", st);
                    if (st == ECT_OK)
                        accepted++;
                    else
                        refused++;
                }
                bytes[at] ^= masks[m];
            }
        }
        free(bytes);
    }
    cJSON_Delete(root);
    /* Both outcomes happen: flips inside hashes and blobs still decode,
     * flips in headers and keys do not. */
    CHECK(accepted > 100 && refused > 100);
    CHECK_NO_LEAKS();
}

/* ---- crafted hostile messages ----------------------------------------------- */

/* Pack helpers for crafted messages. */
static void
pk_str(msgpack_packer *pk, const char *s)
{
    msgpack_pack_str(pk, strlen(s));
    msgpack_pack_str_body(pk, s, strlen(s));
}

static void
pk_req_head(msgpack_packer *pk, size_t n_keys)
{
    msgpack_pack_map(pk, n_keys);
    pk_str(pk, "type");
    pk_str(pk, "req");
    pk_str(pk, "mm_hash");
    pk_str(pk, ts_wire_mm_hash);
    pk_str(pk, "compatibility_hash");
    pk_str(pk, ts_wire_compat);
}

static void
pk_ack_head(msgpack_packer *pk, size_t n_keys)
{
    msgpack_pack_map(pk, n_keys);
    pk_str(pk, "type");
    pk_str(pk, "ack");
    pk_str(pk, "mm_hash");
    pk_str(pk, ts_wire_mm_hash);
    pk_str(pk, "status");
    msgpack_pack_uint8(pk, 0);
}

static void
expect_req_parse_error(const msgpack_sbuffer *sb, const char *message)
{
    ect_xfer_req_t req;
    ect_status_t st = ect__wire_decode_req(sb->data, sb->size, &req);
    CHECK_MSG(st == ECT_ERR_PARSE, "status %d, expected a parse error about '%s'", st, message);
    CHECK_CONTAINS(ect_last_error(), message);
}

static void
expect_ack_parse_error(const msgpack_sbuffer *sb, const char *message)
{
    ect_xfer_ack_t ack;
    ect_status_t st = ect__wire_decode_ack(sb->data, sb->size, &ack);
    CHECK_MSG(st == ECT_ERR_PARSE, "status %d, expected a parse error about '%s'", st, message);
    CHECK_CONTAINS(ect_last_error(), message);
}

static void
test_duplicate_keys_are_refused(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pk_req_head(&pk, 4);
    pk_str(&pk, "mm_hash");
    pk_str(&pk, "other");
    expect_req_parse_error(&sb, "key \"mm_hash\" given twice");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "type");
    pk_str(&pk, "req");
    expect_req_parse_error(&sb, "key \"type\" given twice");

    /* An unknown key twice is merely ignored twice. */
    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 5);
    pk_str(&pk, "later");
    msgpack_pack_nil(&pk);
    pk_str(&pk, "later");
    msgpack_pack_true(&pk);
    ect_xfer_req_t req;
    CHECK_OK(ect__wire_decode_req(sb.data, sb.size, &req));
    ect__xfer_req_cleanup(&req);
    msgpack_sbuffer_destroy(&sb);
}

static void
test_malformed_maps_are_refused_with_a_reason(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

    pk_req_head(&pk, 4);
    msgpack_pack_uint8(&pk, 1); /* an int key */
    msgpack_pack_nil(&pk);
    expect_req_parse_error(&sb, "is an int, expected a str");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 3);
    msgpack_sbuffer_write(&sb, "\xc1", 1);
    expect_req_parse_error(&sb, "trailing bytes");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "x");
    msgpack_sbuffer_write(&sb, "\xc1", 1);
    expect_req_parse_error(&sb, "reserved type byte 0xc1");

    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    msgpack_pack_uint8(&pk, 1);
    expect_req_parse_error(&sb, "\"type\" is an int, expected a str");

    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "rex");
    expect_req_parse_error(&sb, "\"type\" is not a known tag, expected \"req\"");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "session_id");
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "a\0b", 3);
    expect_req_parse_error(&sb, "\"session_id\" is not UTF-8 or contains a NUL byte");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "session_id");
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "\xed\xa0\x80", 3); /* a UTF-16 surrogate */
    expect_req_parse_error(&sb, "not UTF-8");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "session_id");
    msgpack_pack_bin(&pk, 2);
    msgpack_pack_bin_body(&pk, "ab", 2);
    expect_req_parse_error(&sb, "\"session_id\" is a bin, expected a str");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "connector_version");
    msgpack_pack_uint64(&pk, (uint64_t)INT64_MAX + 1);
    expect_req_parse_error(&sb, "out of range");

    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "connector_version");
    msgpack_pack_double(&pk, 1.0);
    expect_req_parse_error(&sb, "\"connector_version\" is a float, expected an int");

    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "ack");
    pk_str(&pk, "mm_hash");
    pk_str(&pk, ts_wire_mm_hash);
    pk_str(&pk, "status");
    msgpack_pack_true(&pk);
    expect_ack_parse_error(&sb, "\"status\" is a bool, expected an int");

    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 3);
    pk_str(&pk, "type");
    pk_str(&pk, "ack");
    pk_str(&pk, "mm_hash");
    pk_str(&pk, ts_wire_mm_hash);
    pk_str(&pk, "status");
    msgpack_pack_int8(&pk, -1);
    expect_ack_parse_error(&sb, "unknown status -1");

    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    pk_str(&pk, "type");
    pk_str(&pk, "ack");
    pk_str(&pk, "mm_hash");
    pk_str(&pk, ts_wire_mm_hash);
    expect_ack_parse_error(&sb, "missing required key \"status\"");

    ect_xfer_req_t req;
    CHECK_STATUS(ect__wire_decode_req("", 0, &req), ECT_ERR_PARSE);
    CHECK_STATUS(ect__wire_decode_req(NULL, 0, &req), ECT_ERR_PARSE);
    CHECK_STATUS(ect__wire_decode_req(NULL, 5, &req), ECT_ERR_PARSE);
    CHECK_STATUS(ect__wire_decode_req(sb.data, sb.size, NULL), ECT_ERR_INVALID_ARG);
    msgpack_sbuffer_destroy(&sb);
}

/* The tag may come anywhere, and values of any shape under unknown keys are
 * skipped: what the seed says a decoder tolerates. */
static void
test_tag_anywhere_and_odd_unknown_values_are_accepted(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    pk_str(&pk, "mm_hash");
    pk_str(&pk, ts_wire_mm_hash);
    pk_str(&pk, "u_ext");
    msgpack_pack_ext(&pk, 3, 7);
    msgpack_pack_ext_body(&pk, "abc", 3);
    pk_str(&pk, "u_nested");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_int64(&pk, -100000);
    msgpack_pack_float(&pk, 1.5f);
    msgpack_pack_bin(&pk, 0);
    pk_str(&pk, "status");
    msgpack_pack_int16(&pk, 5); /* a wide signed encoding of a small status */
    pk_str(&pk, "u_fixext");
    msgpack_pack_ext(&pk, 16, 1);
    msgpack_pack_ext_body(&pk, "0123456789abcdef", 16);
    pk_str(&pk, "src_block_indices");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_int32(&pk, 12);
    msgpack_pack_uint64(&pk, 13);
    pk_str(&pk, "type");
    pk_str(&pk, "ack");
    pk_str(&pk, "agent_metadata");
    msgpack_pack_bin(&pk, 0);
    pk_str(&pk, "u_double");
    msgpack_pack_double(&pk, -2.0);
    ect_xfer_ack_t ack;
    CHECK_OK(ect__wire_decode_ack(sb.data, sb.size, &ack));
    CHECK_EQ_INT(ack.status, ECT_XFER_NACK_NOT_READY);
    CHECK_EQ_U64(ack.n_src_blocks, 2);
    CHECK_EQ_U64(ack.src_block_indices[0], 12);
    CHECK_EQ_U64(ack.src_block_indices[1], 13);
    CHECK(ack.agent_metadata == NULL && ack.agent_metadata_len == 0);
    ect__wire_type_t type;
    CHECK_OK(ect__wire_peek_type(sb.data, sb.size, &type));
    CHECK_EQ_INT(type, ECT_WIRE_ACK);
    ect__xfer_ack_cleanup(&ack);
    msgpack_sbuffer_destroy(&sb);
}

static void
test_sizes_beyond_limits_or_input_are_refused_before_allocating(void)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);

    /* Headers claiming 4 GiB of entries or bytes that are not there. */
    static const struct {
        const char *header;
        size_t len;
        const char *message;
    } claims[] = {
        {"\xdd\xff\xff\xff\xff", 5, "array of 4294967295 entries"},
        {"\xdb\xff\xff\xff\xff", 5, "str of 4294967295 bytes"},
        {"\xc6\xff\xff\xff\xff", 5, "bin of 4294967295 bytes"},
        {"\xdf\xff\xff\xff\xff", 5, "map of 4294967295 entries"},
        {"\xc9\xff\xff\xff\xff\x01", 6, "ext of 4294967295 bytes"},
    };
    for (size_t i = 0; i < sizeof(claims) / sizeof(claims[0]); i++) {
        msgpack_sbuffer_clear(&sb);
        pk_ack_head(&pk, 4);
        pk_str(&pk, "src_block_indices");
        msgpack_sbuffer_write(&sb, claims[i].header, claims[i].len);
        expect_ack_parse_error(&sb, claims[i].message);
        msgpack_sbuffer_clear(&sb);
        msgpack_sbuffer_write(&sb, claims[i].header, claims[i].len);
        expect_req_parse_error(&sb, claims[i].message);
    }

    /* One entry more than allowed, with the bytes really present. */
    msgpack_sbuffer_clear(&sb);
    pk_ack_head(&pk, 4);
    pk_str(&pk, "src_block_indices");
    msgpack_pack_array(&pk, ECT_WIRE_MAX_BLOCKS + 1);
    char *zeros = calloc(1, ECT_WIRE_MAX_BLOCKS + 1); /* as many fixint 0 entries */
    CHECK(zeros != NULL);
    msgpack_sbuffer_write(&sb, zeros, ECT_WIRE_MAX_BLOCKS + 1);
    free(zeros);
    expect_ack_parse_error(&sb, "16777217 src_block_indices, at most 16777216");

    msgpack_sbuffer_clear(&sb);
    pk_ack_head(&pk, 4);
    pk_str(&pk, "mem_descriptor");
    msgpack_pack_bin(&pk, ECT_WIRE_MAX_BLOB + 1);
    char *big = calloc(1, ECT_WIRE_MAX_BLOB + 1);
    CHECK(big != NULL);
    msgpack_pack_bin_body(&pk, big, ECT_WIRE_MAX_BLOB + 1);
    expect_ack_parse_error(&sb, "\"mem_descriptor\" is 1048577 bytes, at most 1048576");

    /* A blob exactly at the limit is fine. */
    msgpack_sbuffer_clear(&sb);
    pk_ack_head(&pk, 4);
    pk_str(&pk, "agent_metadata");
    msgpack_pack_bin(&pk, ECT_WIRE_MAX_BLOB);
    msgpack_pack_bin_body(&pk, big, ECT_WIRE_MAX_BLOB);
    ect_xfer_ack_t ack;
    CHECK_OK(ect__wire_decode_ack(sb.data, sb.size, &ack));
    CHECK_EQ_U64(ack.agent_metadata_len, ECT_WIRE_MAX_BLOB);
    ect__xfer_ack_cleanup(&ack);

    char *s = malloc(ECT_WIRE_MAX_STR + 2);
    CHECK(s != NULL);
    memset(s, 'a', ECT_WIRE_MAX_STR + 1);
    s[ECT_WIRE_MAX_STR + 1] = '\0';
    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "session_id");
    pk_str(&pk, s);
    expect_req_parse_error(&sb, "\"session_id\" is 4097 bytes, at most 4096");
    s[ECT_WIRE_MAX_STR] = '\0';
    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "session_id");
    pk_str(&pk, s);
    ect_xfer_req_t req;
    CHECK_OK(ect__wire_decode_req(sb.data, sb.size, &req));
    CHECK_EQ_U64(strlen(req.session_id), ECT_WIRE_MAX_STR);
    ect__xfer_req_cleanup(&req);

    /* Deep nesting under an unknown key. */
    msgpack_sbuffer_clear(&sb);
    pk_req_head(&pk, 4);
    pk_str(&pk, "deep");
    for (int i = 0; i < 100000; i++)
        msgpack_pack_array(&pk, 1);
    msgpack_pack_nil(&pk);
    expect_req_parse_error(&sb, "nested deeper than");

    free(s);
    free(big);
    msgpack_sbuffer_destroy(&sb);
    CHECK_NO_LEAKS();
}

static void
test_encoder_refuses_bad_arguments_and_leaves_buffer_alone(void)
{
    ect__wire_buf_t out;
    ect__wire_buf_init(&out);
    CHECK_OK(ect__wire_buf_append(&out, "prefix", 6));
    static const uint64_t one_block[] = {1};

    ect_xfer_req_t req = {.mm_hash = NULL, .compatibility_hash = ts_wire_compat};
    CHECK_STATUS(ect__wire_encode_req(&req, &out), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "mm_hash is NULL");
    req = (ect_xfer_req_t){.mm_hash = ts_wire_mm_hash, .compatibility_hash = NULL};
    CHECK_STATUS(ect__wire_encode_req(&req, &out), ECT_ERR_INVALID_ARG);
    req = (ect_xfer_req_t){.mm_hash = "\xff", .compatibility_hash = ts_wire_compat};
    CHECK_STATUS(ect__wire_encode_req(&req, &out), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "not valid UTF-8");
    char *long_str = malloc(ECT_WIRE_MAX_STR + 2);
    CHECK(long_str != NULL);
    memset(long_str, 'x', ECT_WIRE_MAX_STR + 1);
    long_str[ECT_WIRE_MAX_STR + 1] = '\0';
    req = (ect_xfer_req_t){
        .mm_hash = ts_wire_mm_hash, .compatibility_hash = ts_wire_compat, .session_id = long_str};
    CHECK_STATUS(ect__wire_encode_req(&req, &out), ECT_ERR_OVERFLOW);
    CHECK_STATUS(ect__wire_encode_req(NULL, &out), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__wire_encode_req(&req, NULL), ECT_ERR_INVALID_ARG);

    ect_xfer_ack_t ack = {.mm_hash = ts_wire_mm_hash, .n_src_blocks = 2};
    CHECK_STATUS(ect__wire_encode_ack(&ack, &out), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "src_block_indices is NULL");
    /* A huge count is refused before the (one-entry) array is read. */
    ack = (ect_xfer_ack_t){.mm_hash = ts_wire_mm_hash,
                           .src_block_indices = one_block,
                           .n_src_blocks = (size_t)ECT_WIRE_MAX_BLOCKS + 1};
    CHECK_STATUS(ect__wire_encode_ack(&ack, &out), ECT_ERR_OVERFLOW);
    ack = (ect_xfer_ack_t){.mm_hash = ts_wire_mm_hash, .agent_metadata_len = 3};
    CHECK_STATUS(ect__wire_encode_ack(&ack, &out), ECT_ERR_INVALID_ARG);
    ack = (ect_xfer_ack_t){.mm_hash = ts_wire_mm_hash,
                           .mem_descriptor = (const uint8_t *)"x",
                           .mem_descriptor_len = (size_t)ECT_WIRE_MAX_BLOB + 1};
    CHECK_STATUS(ect__wire_encode_ack(&ack, &out), ECT_ERR_OVERFLOW);
    ack = (ect_xfer_ack_t){.mm_hash = ts_wire_mm_hash, .session_id = long_str};
    CHECK_STATUS(ect__wire_encode_ack(&ack, &out), ECT_ERR_OVERFLOW);
    ack = (ect_xfer_ack_t){.mm_hash = NULL};
    CHECK_STATUS(ect__wire_encode_ack(&ack, &out), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__wire_encode_ack(NULL, &out), ECT_ERR_INVALID_ARG);

    CHECK_EQ_U64(out.len, 6);
    CHECK(memcmp(out.data, "prefix", 6) == 0);
    free(long_str);
    ect__wire_buf_cleanup(&out);
    ect__wire_buf_cleanup(NULL);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_truncation_at_every_offset_fails_cleanly),
    ECT_CASE(test_flipped_bytes_never_crash_and_accepted_ones_round_trip),
    ECT_CASE(test_duplicate_keys_are_refused),
    ECT_CASE(test_malformed_maps_are_refused_with_a_reason),
    ECT_CASE(test_tag_anywhere_and_odd_unknown_values_are_accepted),
    ECT_CASE(test_sizes_beyond_limits_or_input_are_refused_before_allocating),
    ECT_CASE(test_encoder_refuses_bad_arguments_and_leaves_buffer_alone),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
