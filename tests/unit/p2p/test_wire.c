/*
 * The P2P wire codec (src/proto/wire.h, SPEC §8.1) against the seed's byte
 * vectors, hand-built messages, every status, large and empty fields, and a
 * real Python msgpack peer.  Damaged and hostile input: test_wire_hostile.c.
 *
 * tests/data/wire-vectors.json is read at run time, so a vector added there
 * is checked without touching this file.
 */
#include "support/util.h"
#include "support/wire.h"

/* ---- helpers ---------------------------------------------------------------- */

/* Every key of "fields" is one this test knows, so a vector that grows a new
 * field fails here instead of being half-checked. */
static void
check_known_field_names(const cJSON *v, const char *const *names, size_t n)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(v, "fields"))
    {
        size_t i = 0;
        while (i < n && strcmp(f->string, names[i]) != 0)
            i++;
        CHECK_MSG(i < n, "vector %s: field \"%s\" is not checked by this test",
                  ts_vec_str(v, "name"), f->string);
    }
}

static void
check_str_field(const cJSON *v, const char *key, const char *got)
{
    const cJSON *want = ts_vec_field(v, key);
    CHECK_MSG(want == NULL || cJSON_IsString(want), "%s.%s", ts_vec_str(v, "name"), key);
    CHECK_STR_EQ(got, want != NULL ? want->valuestring : "");
}

static void
check_bin_field(const cJSON *v, const char *key, const uint8_t *got, size_t got_len)
{
    const cJSON *want = ts_vec_field(v, key);
    size_t want_len = 0;
    uint8_t *bytes = want != NULL ? ts_hex_decode(want->valuestring, &want_len) : NULL;
    CHECK_MSG(got_len == want_len, "%s.%s: %zu bytes, expected %zu", ts_vec_str(v, "name"), key,
              got_len, want_len);
    CHECK((got_len == 0) == (got == NULL));
    CHECK(want_len == 0 || memcmp(got, bytes, want_len) == 0);
    free(bytes);
}

static void
check_req_fields(const cJSON *v, const ect_xfer_req_t *req)
{
    static const char *const names[] = {"type", "mm_hash", "compatibility_hash", "session_id",
                                        "connector_version"};
    check_known_field_names(v, names, sizeof(names) / sizeof(names[0]));
    CHECK_STR_EQ(cJSON_GetStringValue(ts_vec_field(v, "type")), "req");
    check_str_field(v, "mm_hash", req->mm_hash);
    check_str_field(v, "compatibility_hash", req->compatibility_hash);
    check_str_field(v, "session_id", req->session_id);
    const cJSON *ver = ts_vec_field(v, "connector_version");
    CHECK_EQ_INT(req->has_connector_version, ver != NULL);
    CHECK_EQ_INT(req->connector_version,
                 ver != NULL ? (long long)ver->valuedouble : ECT_WIRE_CONNECTOR_VERSION);
    CHECK(req->arena_ != NULL);
}

static void
check_ack_fields(const cJSON *v, const ect_xfer_ack_t *ack)
{
    static const char *const names[] = {"type",          "mm_hash",           "status",
                                        "session_id",    "src_block_indices", "agent_metadata",
                                        "mem_descriptor"};
    check_known_field_names(v, names, sizeof(names) / sizeof(names[0]));
    CHECK_STR_EQ(cJSON_GetStringValue(ts_vec_field(v, "type")), "ack");
    check_str_field(v, "mm_hash", ack->mm_hash);
    const cJSON *status = ts_vec_field(v, "status");
    CHECK(cJSON_IsNumber(status));
    CHECK_EQ_INT(ack->status, (int)status->valuedouble);
    check_str_field(v, "session_id", ack->session_id);
    const cJSON *blocks = ts_vec_field(v, "src_block_indices");
    size_t n = blocks != NULL ? (size_t)cJSON_GetArraySize(blocks) : 0;
    CHECK_EQ_U64(ack->n_src_blocks, n);
    CHECK((n == 0) == (ack->src_block_indices == NULL));
    for (size_t i = 0; i < n; i++) {
        double want = cJSON_GetArrayItem(blocks, (int)i)->valuedouble;
        CHECK_MSG(want < 9007199254740992.0, "block %zu not exact in a double", i);
        CHECK_EQ_U64(ack->src_block_indices[i], (uint64_t)want);
    }
    check_bin_field(v, "agent_metadata", ack->agent_metadata, ack->agent_metadata_len);
    check_bin_field(v, "mem_descriptor", ack->mem_descriptor, ack->mem_descriptor_len);
    CHECK(ack->arena_ != NULL);
}

/* The number of entries of the top-level map (fixmap, map16 or map32). */
static size_t
map_entries(const uint8_t *p, size_t n)
{
    CHECK(n >= 1);
    if ((p[0] & 0xf0) == 0x80)
        return p[0] & 0x0f;
    if (p[0] == 0xde && n >= 3)
        return (size_t)p[1] << 8 | p[2];
    CHECK_MSG(false, "not a fixmap/map16 header: 0x%02x", p[0]);
    return 0;
}

static size_t
field_count(const cJSON *v)
{
    return (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(v, "fields"));
}

/* Encode, decode and compare; returns the encoding in buf. */
static void
round_trip_ack(const ect_xfer_ack_t *ack, ect__wire_buf_t *buf)
{
    ect__wire_buf_init(buf);
    CHECK_OK(ect__wire_encode_ack(ack, buf));
    ect_xfer_ack_t back;
    CHECK_OK(ect__wire_decode_ack(buf->data, buf->len, &back));
    CHECK(ts_ack_equal(ack, &back));
    ect__xfer_ack_cleanup(&back);
}

static void
round_trip_req(const ect_xfer_req_t *req, ect__wire_buf_t *buf)
{
    ect__wire_buf_init(buf);
    CHECK_OK(ect__wire_encode_req(req, buf));
    ect_xfer_req_t back;
    CHECK_OK(ect__wire_decode_req(buf->data, buf->len, &back));
    CHECK(ts_req_equal(req, &back));
    ect__xfer_req_cleanup(&back);
}

/* ---- the seed's vectors ------------------------------------------------------- */

/* ectier's "ectier_runs" key: encoded last and only when true, read back;
 * any other type is a decode error; a seed request without it decodes as
 * false. */
static void
test_ectier_runs_key_round_trips_and_is_only_a_bool(void)
{
    ect_xfer_req_t req = {.mm_hash = "h",
                          .compatibility_hash = "c",
                          .session_id = "s",
                          .connector_version = 1,
                          .has_connector_version = true,
                          .accepts_runs = true};
    ect__wire_buf_t b, plain;
    ect__wire_buf_init(&b);
    ect__wire_buf_init(&plain);
    CHECK_OK(ect__wire_encode_req(&req, &b));
    req.accepts_runs = false;
    CHECK_OK(ect__wire_encode_req(&req, &plain));
    /* Exactly the seed's bytes plus the key at the end (map header + 1). */
    static const char key[] = "\xab"
                              "ectier_runs"
                              "\xc3";
    CHECK_EQ_U64(b.len, plain.len + sizeof(key) - 1);
    CHECK(memcmp(b.data + plain.len, key, sizeof(key) - 1) == 0);
    CHECK_EQ_INT(b.data[0], plain.data[0] + 1);
    ect_xfer_req_t back;
    CHECK_OK(ect__wire_decode_req(b.data, b.len, &back));
    CHECK(back.accepts_runs);
    ect__xfer_req_cleanup(&back);
    CHECK_OK(ect__wire_decode_req(plain.data, plain.len, &back));
    CHECK(!back.accepts_runs);
    ect__xfer_req_cleanup(&back);
    /* An int where the bool goes. */
    b.data[b.len - 1] = 0x01;
    CHECK_STATUS(ect__wire_decode_req(b.data, b.len, &back), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "\"ectier_runs\" is an int, expected a bool");
    ect__wire_buf_cleanup(&b);
    ect__wire_buf_cleanup(&plain);
}

static void
test_valid_vectors_decode_to_their_fields_and_reencode_exactly(void)
{
    cJSON *root = ts_load_vectors();
    const cJSON *v;
    unsigned n_req = 0, n_ack = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors"))
    {
        if (!ts_vec_is_kind(v, "valid"))
            continue;
        size_t len;
        uint8_t *bytes = ts_hex_decode(ts_vec_str(v, "hex"), &len);
        bool as_req = strcmp(cJSON_GetStringValue(ts_vec_field(v, "type")), "req") == 0;
        ect__wire_buf_t out;
        ect__wire_buf_init(&out);
        if (as_req) {
            ect_xfer_req_t req;
            CHECK_OK(ect__wire_decode_req(bytes, len, &req));
            check_req_fields(v, &req);
            CHECK_OK(ect__wire_encode_req(&req, &out));
            ect__xfer_req_cleanup(&req);
            n_req++;
        } else {
            ect_xfer_ack_t ack;
            CHECK_OK(ect__wire_decode_ack(bytes, len, &ack));
            check_ack_fields(v, &ack);
            CHECK_OK(ect__wire_encode_ack(&ack, &out));
            ect__xfer_ack_cleanup(&ack);
            n_ack++;
        }
        /* A vector whose map holds only its listed fields must come back
         * byte for byte; one with extra (unknown) keys comes back without
         * them, with exactly its fields. */
        if (map_entries(bytes, len) == field_count(v)) {
            CHECK_MSG(ts_bytes_equal(out.data, out.len, bytes, len),
                      "vector %s re-encodes differently", ts_vec_str(v, "name"));
        } else {
            CHECK(map_entries(bytes, len) > field_count(v));
            CHECK_EQ_U64(map_entries(out.data, out.len), field_count(v));
            CHECK(out.len < len);
        }
        ect__wire_buf_cleanup(&out);
        free(bytes);
    }
    cJSON_Delete(root);
    CHECK(n_req >= 3 && n_ack >= 3);
    CHECK_NO_LEAKS();
}

static void
test_invalid_vectors_fail_with_parse_error_and_leave_output_alone(void)
{
    cJSON *root = ts_load_vectors();
    const cJSON *v;
    unsigned n = 0;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors"))
    {
        bool bad_req = ts_vec_is_kind(v, "invalid-req"), bad_ack = ts_vec_is_kind(v, "invalid-ack");
        if (!bad_req && !bad_ack)
            continue;
        size_t len;
        uint8_t *bytes = ts_hex_decode(ts_vec_str(v, "hex"), &len);
        ect_clear_error();
        ect_status_t st;
        if (bad_req) {
            ect_xfer_req_t req;
            memset(&req, 0xa5, sizeof(req));
            st = ect__wire_decode_req(bytes, len, &req);
            for (size_t i = 0; i < sizeof(req); i++)
                CHECK(((uint8_t *)&req)[i] == 0xa5);
        } else {
            ect_xfer_ack_t ack;
            memset(&ack, 0xa5, sizeof(ack));
            st = ect__wire_decode_ack(bytes, len, &ack);
            for (size_t i = 0; i < sizeof(ack); i++)
                CHECK(((uint8_t *)&ack)[i] == 0xa5);
        }
        CHECK_MSG(st == ECT_ERR_PARSE, "vector %s: status %d", ts_vec_str(v, "name"), st);
        CHECK_MSG(strncmp(ect_last_error(), "wire decode ", 12) == 0, "vector %s: message '%s'",
                  ts_vec_str(v, "name"), ect_last_error());
        free(bytes);
        n++;
    }
    cJSON_Delete(root);
    CHECK(n >= 10);
    CHECK_NO_LEAKS();
}

/* The messages say what was wrong, not only that something was. */
static void
test_invalid_vectors_name_their_fault(void)
{
    static const struct {
        const char *vector, *bad_as, *message;
    } expect[] = {
        {"req_missing_tag", "req", "missing key \"type\""},
        {"req_wrong_tag", "req", "\"type\" is \"ack\", expected \"req\""},
        {"req_missing_compat", "req", "missing required key \"compatibility_hash\""},
        {"req_hash_not_str", "req", "\"mm_hash\" is an int, expected a str"},
        {"ack_unknown_status", "ack", "unknown status 9"},
        {"ack_blocks_not_ints", "ack", "src_block_indices[0] is a str"},
        {"ack_negative_block", "ack", "src_block_indices[0] is negative (-1)"},
        {"ack_agent_as_str", "ack", "\"agent_metadata\" is a str, expected a bin"},
        {"not_a_map", "req", "message is an array, expected a map"},
        {"truncated", "req", "str of 36 bytes at byte 182, only 31 bytes left"},
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        size_t len;
        uint8_t *bytes = ts_vector_bytes(expect[i].vector, &len);
        if (strcmp(expect[i].bad_as, "req") == 0) {
            ect_xfer_req_t req;
            CHECK_STATUS(ect__wire_decode_req(bytes, len, &req), ECT_ERR_PARSE);
        } else {
            ect_xfer_ack_t ack;
            CHECK_STATUS(ect__wire_decode_ack(bytes, len, &ack), ECT_ERR_PARSE);
        }
        CHECK_CONTAINS(ect_last_error(), expect[i].message);
        free(bytes);
    }
}

static void
test_each_side_accepts_only_its_own_message_type(void)
{
    cJSON *root = ts_load_vectors();
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors"))
    {
        if (!ts_vec_is_kind(v, "valid"))
            continue;
        size_t len;
        uint8_t *bytes = ts_hex_decode(ts_vec_str(v, "hex"), &len);
        bool is_req = strcmp(cJSON_GetStringValue(ts_vec_field(v, "type")), "req") == 0;
        ect__wire_type_t type;
        CHECK_OK(ect__wire_peek_type(bytes, len, &type));
        CHECK_EQ_INT(type, is_req ? ECT_WIRE_REQ : ECT_WIRE_ACK);
        if (is_req) {
            ect_xfer_ack_t ack;
            CHECK_STATUS(ect__wire_decode_ack(bytes, len, &ack), ECT_ERR_PARSE);
            CHECK_CONTAINS(ect_last_error(), "\"type\" is \"req\", expected \"ack\"");
        } else {
            ect_xfer_req_t req;
            CHECK_STATUS(ect__wire_decode_req(bytes, len, &req), ECT_ERR_PARSE);
            CHECK_CONTAINS(ect_last_error(), "\"type\" is \"ack\", expected \"req\"");
        }
        free(bytes);
    }
    cJSON_Delete(root);
}

static void
test_unknown_key_vector_reencodes_as_req_minimal(void)
{
    size_t n_unknown, n_minimal;
    uint8_t *unknown = ts_vector_bytes("req_unknown_key_ignored", &n_unknown);
    uint8_t *minimal = ts_vector_bytes("req_minimal", &n_minimal);
    ect_xfer_req_t req;
    CHECK_OK(ect__wire_decode_req(unknown, n_unknown, &req));
    ect__wire_buf_t out;
    ect__wire_buf_init(&out);
    CHECK_OK(ect__wire_encode_req(&req, &out));
    CHECK(ts_bytes_equal(out.data, out.len, minimal, n_minimal));
    ect__wire_buf_cleanup(&out);
    ect__xfer_req_cleanup(&req);
    free(unknown);
    free(minimal);
}

/* Built by hand, not decoded: the encoder alone writes the seed's bytes. */
static void
test_hand_built_messages_encode_to_the_vectors(void)
{
    ect__wire_buf_t out;
    size_t n;
    uint8_t *want;

    ect_xfer_req_t req = {.mm_hash = ts_wire_mm_hash,
                          .compatibility_hash = ts_wire_compat,
                          .session_id = ts_wire_session,
                          .connector_version = 1,
                          .has_connector_version = true};
    round_trip_req(&req, &out);
    want = ts_vector_bytes("req_explicit_version", &n);
    CHECK(ts_bytes_equal(out.data, out.len, want, n));
    free(want);
    ect__wire_buf_cleanup(&out);

    /* Without has_connector_version the version is the seed's omitted default,
     * whatever connector_version holds. */
    req.has_connector_version = false;
    req.connector_version = 0;
    ect__wire_buf_init(&out);
    CHECK_OK(ect__wire_encode_req(&req, &out));
    want = ts_vector_bytes("req_with_session", &n);
    CHECK(ts_bytes_equal(out.data, out.len, want, n));
    free(want);
    ect__wire_buf_cleanup(&out);

    static const uint64_t blocks[] = {0,   1,     2,     127,           128,          255,
                                      256, 65535, 65536, 4294967295ull, 4294967296ull};
    static const uint8_t agent[] = {0x00, 0x01, 'p', 'e', 'e', 'r'};
    static const uint8_t desc[] = {0xff, 'd', 'e', 's', 'c'};
    ect_xfer_ack_t ack = {.mm_hash = ts_wire_mm_hash,
                          .status = ECT_XFER_OK,
                          .session_id = ts_wire_session,
                          .src_block_indices = blocks,
                          .n_src_blocks = sizeof(blocks) / sizeof(blocks[0]),
                          .agent_metadata = agent,
                          .agent_metadata_len = sizeof(agent),
                          .mem_descriptor = desc,
                          .mem_descriptor_len = sizeof(desc)};
    round_trip_ack(&ack, &out);
    want = ts_vector_bytes("ack_ok", &n);
    CHECK(ts_bytes_equal(out.data, out.len, want, n));
    free(want);
    ect__wire_buf_cleanup(&out);

    ect_xfer_ack_t nack = {.mm_hash = ts_wire_mm_hash, .status = ECT_XFER_NACK_MISSING};
    round_trip_ack(&nack, &out);
    want = ts_vector_bytes("ack_nack_missing", &n);
    CHECK(ts_bytes_equal(out.data, out.len, want, n));
    free(want);
    ect__wire_buf_cleanup(&out);
}

/* ---- statuses ------------------------------------------------------------------ */

static void
test_every_status_round_trips_with_and_without_payload(void)
{
    static const uint64_t blocks[] = {7, 300, 70000};
    static const uint8_t blob[] = {1, 2, 3};
    for (int s = 0; s < ECT_XFER_STATUS_COUNT; s++) {
        ect_xfer_ack_t bare = {.mm_hash = ts_wire_mm_hash, .status = (ect_xfer_status_t)s};
        ect__wire_buf_t out;
        round_trip_ack(&bare, &out);
        CHECK_EQ_U64(map_entries(out.data, out.len), 3);
        ect__wire_buf_cleanup(&out);

        ect_xfer_ack_t full = {.mm_hash = ts_wire_mm_hash,
                               .status = (ect_xfer_status_t)s,
                               .session_id = ts_wire_session,
                               .src_block_indices = blocks,
                               .n_src_blocks = 3,
                               .agent_metadata = blob,
                               .agent_metadata_len = sizeof(blob),
                               .mem_descriptor = blob,
                               .mem_descriptor_len = 1};
        round_trip_ack(&full, &out);
        CHECK_EQ_U64(map_entries(out.data, out.len), 7);
        ect__wire_buf_cleanup(&out);
    }
    ect_xfer_ack_t bad = {.mm_hash = ts_wire_mm_hash,
                          .status = (ect_xfer_status_t)ECT_XFER_STATUS_COUNT};
    ect__wire_buf_t out;
    ect__wire_buf_init(&out);
    CHECK_STATUS(ect__wire_encode_ack(&bad, &out), ECT_ERR_INVALID_ARG);
    bad.status = (ect_xfer_status_t)-1;
    CHECK_STATUS(ect__wire_encode_ack(&bad, &out), ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(out.len, 0);
    ect__wire_buf_cleanup(&out);
}

static void
test_only_not_ready_is_retryable_and_missing_is_expected(void)
{
    for (int s = 0; s < ECT_XFER_STATUS_COUNT; s++) {
        ect_xfer_status_t st = (ect_xfer_status_t)s;
        CHECK_EQ_INT(ect__wire_status_is_retryable(st), st == ECT_XFER_NACK_NOT_READY);
        CHECK_EQ_INT(ect__wire_status_is_expected(st),
                     st == ECT_XFER_NACK_NOT_READY || st == ECT_XFER_NACK_MISSING);
        CHECK(ect__wire_status_valid(s));
        for (int t = 0; t < s; t++)
            CHECK(strcmp(ect_xfer_status_str(st), ect_xfer_status_str((ect_xfer_status_t)t)) != 0);
    }
    CHECK_STR_EQ(ect_xfer_status_str(ECT_XFER_OK), "ok");
    CHECK_STR_EQ(ect_xfer_status_str(ECT_XFER_NACK_NOT_READY), "nack_not_ready");
    CHECK_STR_EQ(ect_xfer_status_str(6), "unknown");
    CHECK_STR_EQ(ect_xfer_status_str(-1), "unknown");
    CHECK(!ect__wire_status_valid(6) && !ect__wire_status_valid(-1));
}

/* ---- shapes and sizes ----------------------------------------------------------- */

static void
test_large_block_list_round_trips_every_integer_width(void)
{
    size_t n = 200000;
    uint64_t *blocks = malloc(n * sizeof(uint64_t));
    CHECK(blocks != NULL);
    for (size_t i = 0; i < n; i++)
        blocks[i] = (uint64_t)0x9e3779b97f4a7c15ull * (i + 1) >> (i % 64);
    blocks[0] = 0;
    blocks[1] = UINT64_MAX;
    ect_xfer_ack_t ack = {.mm_hash = ts_wire_mm_hash,
                          .status = ECT_XFER_OK,
                          .src_block_indices = blocks,
                          .n_src_blocks = n};
    ect__wire_buf_t out;
    round_trip_ack(&ack, &out);
    ect__wire_buf_cleanup(&out);
    free(blocks);
}

static void
test_empty_strings_and_empty_payloads_round_trip(void)
{
    ect__wire_buf_t out;
    ect_xfer_req_t req = {.mm_hash = "", .compatibility_hash = "", .session_id = ""};
    round_trip_req(&req, &out);
    CHECK_EQ_U64(map_entries(out.data, out.len), 3);
    ect__wire_buf_cleanup(&out);

    ect_xfer_ack_t ack = {.mm_hash = "", .status = ECT_XFER_OK, .session_id = NULL};
    round_trip_ack(&ack, &out);
    CHECK_EQ_U64(map_entries(out.data, out.len), 3);
    ect_xfer_ack_t back;
    CHECK_OK(ect__wire_decode_ack(out.data, out.len, &back));
    CHECK_STR_EQ(back.session_id, "");
    CHECK(back.src_block_indices == NULL && back.agent_metadata == NULL &&
          back.mem_descriptor == NULL);
    ect__xfer_ack_cleanup(&back);
    ect__wire_buf_cleanup(&out);
}

static void
test_non_ascii_strings_and_negative_version_round_trip(void)
{
    ect_xfer_req_t req = {.mm_hash = "caf\xc3\xa9-\xe4\xb8\xad-\xf0\x9f\x98\x80",
                          .compatibility_hash = ts_wire_compat,
                          .session_id = "s\xc3\xa9",
                          .connector_version = -5,
                          .has_connector_version = true};
    ect__wire_buf_t out;
    round_trip_req(&req, &out);
    ect__wire_buf_cleanup(&out);
    req.connector_version = INT64_MIN;
    round_trip_req(&req, &out);
    ect__wire_buf_cleanup(&out);
    req.connector_version = INT64_MAX;
    round_trip_req(&req, &out);
    ect__wire_buf_cleanup(&out);
}

static void
test_encoders_append_and_keep_what_was_there(void)
{
    ect__wire_buf_t out;
    ect__wire_buf_init(&out);
    ect_xfer_req_t req = {.mm_hash = ts_wire_mm_hash, .compatibility_hash = ts_wire_compat};
    ect_xfer_ack_t ack = {.mm_hash = ts_wire_mm_hash, .status = ECT_XFER_NACK_INCOMPAT};
    CHECK_OK(ect__wire_encode_req(&req, &out));
    size_t first = out.len;
    CHECK_OK(ect__wire_encode_ack(&ack, &out));
    ect_xfer_req_t r;
    ect_xfer_ack_t a;
    CHECK_OK(ect__wire_decode_req(out.data, first, &r));
    CHECK_OK(ect__wire_decode_ack(out.data + first, out.len - first, &a));
    CHECK_EQ_INT(a.status, ECT_XFER_NACK_INCOMPAT);
    /* Both messages together are one message with trailing bytes. */
    CHECK_STATUS(ect__wire_decode_req(out.data, out.len, &r), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "trailing bytes");
    ect__xfer_req_cleanup(&r);
    ect__xfer_ack_cleanup(&a);
    ect__wire_buf_cleanup(&out);
}

static void
test_decoded_message_outlives_its_input_buffer(void)
{
    size_t n;
    uint8_t *bytes = ts_vector_bytes("ack_ok", &n);
    ect_xfer_ack_t ack;
    CHECK_OK(ect__wire_decode_ack(bytes, n, &ack));
    memset(bytes, 0, n);
    free(bytes);
    CHECK_STR_EQ(ack.mm_hash, ts_wire_mm_hash);
    CHECK_STR_EQ(ack.session_id, ts_wire_session);
    CHECK_EQ_U64(ack.src_block_indices[10], 4294967296ull);
    CHECK(ack.mem_descriptor_len == 5 && memcmp(ack.mem_descriptor,
                                                "\xff"
                                                "desc",
                                                5) == 0);
    ect__xfer_ack_cleanup(&ack);
    CHECK(ack.arena_ == NULL && ack.mm_hash == NULL);
    ect__xfer_ack_cleanup(&ack); /* twice is harmless: the struct was zeroed */
    ect__xfer_ack_cleanup(NULL);
    ect_xfer_req_t caller_built = {.mm_hash = ts_wire_mm_hash,
                                   .compatibility_hash = ts_wire_compat};
    ect__xfer_req_cleanup(&caller_built); /* frees nothing of the caller's */
    ect__xfer_req_cleanup(NULL);
    CHECK_STR_EQ(ts_wire_mm_hash,
                 "3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a");
    CHECK_NO_LEAKS();
}

/* ---- a real Python msgpack peer --------------------------------------------------------- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint64_t
rng(void)
{
    return ts_xorshift64(&rng_state);
}

/* Python prints, per message: its keys in order, the fields, and its own
 * re-encoding (which must equal ours byte for byte). */
static const char python_reader[] =
    "import json, sys, msgpack\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    for m in msgpack.Unpacker(f, raw=False, strict_map_key=True):\n"
    "        out = {'keys': list(m.keys()), 'repacked': msgpack.packb(m, "
    "use_bin_type=True).hex()}\n"
    "        for k, v in m.items():\n"
    "            out[k] = v.hex() if isinstance(v, bytes) else v\n"
    "        print(json.dumps(out))\n";

static void
test_python_msgpack_reads_our_random_acks(void)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        SKIP("no /usr/bin/python3");
    if (system("/usr/bin/python3 -c 'import msgpack' >/dev/null 2>&1") != 0)
        SKIP("python3-msgpack is not installed");

    enum { N_MSGS = 24 };
    static const char *const sessions[] = {"", "0d5e8a4c-1b7f-4e29-9c3a-6f2d8b1e7a90",
                                           "s\xc3\xa9-\xe4\xb8\xad-\xf0\x9f\x98\x80"};
    ect_xfer_ack_t acks[N_MSGS];
    uint8_t *blobs[N_MSGS];
    char hashes[N_MSGS][65];
    ect__wire_buf_t all;
    ect__wire_buf_init(&all);
    for (int m = 0; m < N_MSGS; m++) {
        ect_xfer_ack_t *a = &acks[m];
        memset(a, 0, sizeof(*a));
        for (int i = 0; i < 64; i++)
            hashes[m][i] = "0123456789abcdef"[rng() % 16];
        hashes[m][64] = '\0';
        a->mm_hash = hashes[m];
        a->status = (ect_xfer_status_t)(rng() % ECT_XFER_STATUS_COUNT);
        a->session_id = sessions[rng() % 3];
        size_t nb = m == 0 ? 70000 : (size_t)(rng() % 40);
        uint64_t *blocks = nb ? malloc(nb * sizeof(uint64_t)) : NULL;
        for (size_t i = 0; i < nb; i++)
            blocks[i] = rng() >> (rng() % 64);
        a->src_block_indices = blocks;
        a->n_src_blocks = nb;
        size_t agent_len = m == 1 ? 70000 : (size_t)(rng() % 300);
        size_t desc_len = (size_t)(rng() % 70);
        uint8_t *blob = malloc(agent_len + desc_len + 1);
        CHECK(blob != NULL && (nb == 0 || blocks != NULL));
        blobs[m] = blob;
        for (size_t i = 0; i < agent_len + desc_len; i++)
            blob[i] = (uint8_t)rng();
        a->agent_metadata = agent_len ? blob : NULL;
        a->agent_metadata_len = agent_len;
        a->mem_descriptor = desc_len ? blob + agent_len : NULL;
        a->mem_descriptor_len = desc_len;
        CHECK_OK(ect__wire_encode_ack(a, &all));
    }

    char name[64], path[128], script_path[128];
    ect_test_unique_name(name, sizeof(name), "ectt_wire_");
    snprintf(path, sizeof(path), "/tmp/%s.msgpack", name);
    snprintf(script_path, sizeof(script_path), "/tmp/%s.py", name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL && fwrite(all.data, 1, all.len, f) == all.len && fclose(f) == 0);
    f = fopen(script_path, "w");
    CHECK(f != NULL && fputs(python_reader, f) >= 0 && fclose(f) == 0);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s", script_path, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);

    size_t line_cap = 1 << 22;
    char *line = malloc(line_cap);
    CHECK(line != NULL);
    size_t offset = 0;
    int seen = 0;
    while (fgets(line, (int)line_cap, p) != NULL) {
        CHECK(seen < N_MSGS);
        const ect_xfer_ack_t *a = &acks[seen];
        ect__wire_buf_t one;
        ect__wire_buf_init(&one);
        CHECK_OK(ect__wire_encode_ack(a, &one));
        cJSON *j = cJSON_Parse(line);
        CHECK_MSG(j != NULL, "python printed: %.200s", line);
        char *ours = ts_hex_encode(one.data, one.len);
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(j, "repacked")), ours);
        CHECK(memcmp(all.data + offset, one.data, one.len) == 0);
        offset += one.len;

        /* Key order: type first, then declaration order, defaults left out. */
        const char *order[7];
        int n_keys = 0;
        order[n_keys++] = "type";
        order[n_keys++] = "mm_hash";
        order[n_keys++] = "status";
        if (a->session_id[0] != '\0')
            order[n_keys++] = "session_id";
        if (a->n_src_blocks > 0)
            order[n_keys++] = "src_block_indices";
        if (a->agent_metadata_len > 0)
            order[n_keys++] = "agent_metadata";
        if (a->mem_descriptor_len > 0)
            order[n_keys++] = "mem_descriptor";
        const cJSON *keys = cJSON_GetObjectItem(j, "keys");
        CHECK_EQ_INT(cJSON_GetArraySize(keys), n_keys);
        for (int k = 0; k < n_keys; k++)
            CHECK_STR_EQ(cJSON_GetArrayItem(keys, k)->valuestring, order[k]);

        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(j, "type")), "ack");
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(j, "mm_hash")), a->mm_hash);
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "status")->valuedouble, a->status);
        if (a->session_id[0] != '\0')
            CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(j, "session_id")), a->session_id);
        if (a->agent_metadata_len > 0) {
            char *hex = ts_hex_encode(a->agent_metadata, a->agent_metadata_len);
            CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(j, "agent_metadata")), hex);
            free(hex);
        }
        if (a->mem_descriptor_len > 0) {
            char *hex = ts_hex_encode(a->mem_descriptor, a->mem_descriptor_len);
            CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(j, "mem_descriptor")), hex);
            free(hex);
        }
        free(ours);
        cJSON_Delete(j);
        ect__wire_buf_cleanup(&one);
        seen++;
    }
    int rc = pclose(p);
    unlink(path);
    unlink(script_path);
    CHECK_MSG(rc == 0, "python exited with %d", rc);
    CHECK_EQ_INT(seen, N_MSGS);
    CHECK_EQ_U64(offset, all.len);
    free(line);
    for (int m = 0; m < N_MSGS; m++) {
        free((void *)acks[m].src_block_indices);
        free(blobs[m]);
    }
    ect__wire_buf_cleanup(&all);
}

/* ectier's own "done" message: round trip, exact bytes, and it is refused
 * where a req or an ack is expected (and they are refused as a done). */
static void
test_done_message_round_trips_and_is_its_own_type(void)
{
    ect_xfer_done_t done = {.mm_hash = "h1", .session_id = "sess"};
    ect__wire_buf_t buf;
    ect__wire_buf_init(&buf);
    CHECK_OK(ect__wire_encode_done(&done, &buf));
    static const uint8_t want[] = {0x83, 0xa4, 't',  'y',  'p', 'e', 0xa4, 'd', 'o', 'n',
                                   'e',  0xa7, 'm',  'm',  '_', 'h', 'a',  's', 'h', 0xa2,
                                   'h',  '1',  0xaa, 's',  'e', 's', 's',  'i', 'o', 'n',
                                   '_',  'i',  'd',  0xa4, 's', 'e', 's',  's'};
    CHECK_EQ_U64(buf.len, sizeof(want));
    CHECK(memcmp(buf.data, want, sizeof(want)) == 0);
    ect__wire_type_t type;
    CHECK_OK(ect__wire_peek_type(buf.data, buf.len, &type));
    CHECK_EQ_INT(type, ECT_WIRE_DONE);
    ect_xfer_done_t back;
    CHECK_OK(ect__wire_decode_done(buf.data, buf.len, &back));
    CHECK_STR_EQ(back.mm_hash, "h1");
    CHECK_STR_EQ(back.session_id, "sess");
    ect__xfer_done_cleanup(&back);
    ect_xfer_req_t req;
    CHECK_STATUS(ect__wire_decode_req(buf.data, buf.len, &req), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "\"done\"");
    /* A done needs its session: without one a producer could not find the grant. */
    ect_xfer_done_t bad = {.mm_hash = "h1", .session_id = ""};
    CHECK_STATUS(ect__wire_encode_done(&bad, &buf), ECT_ERR_INVALID_ARG);
    ect__wire_buf_t req_buf;
    ect__wire_buf_init(&req_buf);
    ect_xfer_req_t r = {.mm_hash = "h1", .compatibility_hash = "c", .session_id = "s"};
    CHECK_OK(ect__wire_encode_req(&r, &req_buf));
    CHECK_STATUS(ect__wire_decode_done(req_buf.data, req_buf.len, &back), ECT_ERR_PARSE);
    /* Truncated anywhere: a clean parse error. */
    for (size_t cut = 0; cut < buf.len; cut++)
        CHECK_STATUS(ect__wire_decode_done(buf.data, cut, &back), ECT_ERR_PARSE);
    ect__wire_buf_cleanup(&buf);
    ect__wire_buf_cleanup(&req_buf);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_done_message_round_trips_and_is_its_own_type),
    ECT_CASE(test_valid_vectors_decode_to_their_fields_and_reencode_exactly),
    ECT_CASE(test_ectier_runs_key_round_trips_and_is_only_a_bool),
    ECT_CASE(test_invalid_vectors_fail_with_parse_error_and_leave_output_alone),
    ECT_CASE(test_invalid_vectors_name_their_fault),
    ECT_CASE(test_each_side_accepts_only_its_own_message_type),
    ECT_CASE(test_unknown_key_vector_reencodes_as_req_minimal),
    ECT_CASE(test_hand_built_messages_encode_to_the_vectors),
    ECT_CASE(test_every_status_round_trips_with_and_without_payload),
    ECT_CASE(test_only_not_ready_is_retryable_and_missing_is_expected),
    ECT_CASE(test_large_block_list_round_trips_every_integer_width),
    ECT_CASE(test_empty_strings_and_empty_payloads_round_trip),
    ECT_CASE(test_non_ascii_strings_and_negative_version_round_trip),
    ECT_CASE(test_encoders_append_and_keep_what_was_there),
    ECT_CASE(test_decoded_message_outlives_its_input_buffer),
    ECT_CASE(test_python_msgpack_reads_our_random_acks),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
