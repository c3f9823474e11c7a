/*
 * The data-plane request codec (src/proto/stream.c), version 1 and the
 * striped version 2: ect__stream_stripe_blocks tiles a payload of whole
 * blocks into block-aligned stripes in order, at sizes up to
 * UINT64_MAX; requests round-trip byte for byte with the layout stream.h
 * gives (version 2's stripe fields at 40 and 44); the encoder refuses a
 * stripe outside its count and more than ECT_STREAM_MAX_STRIPES; the
 * decoder refuses (ECT_ERR_PARSE) stripe fields out of bounds, truncated
 * ones, a version 1 body sent as version 2, versions outside 1..4, and
 * every cut of a version 2 request; peek's total counts the stripe fields.
 * Versions 3 and 4 are 1 and 2 asking for an aligned answer: responses
 * round-trip in both sizes, an aligned one with 48 zero bytes after the
 * 16 that mean something, and the decoder refuses a non-zero padding byte.
 *
 * Pure codec, no I/O.  The hostile-byte search is the fuzz target's
 * (fuzz/p2p/fuzz_stream.c, corpus fuzz/corpus/stream/).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/stream.h"

#include "harness.h"

static const char SESSION[] = "sess-0123";
static const char HASH[] = "mm-hash-abcdef";
static const uint8_t TOKEN[ECT_STREAM_TOKEN_LEN] = {0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 7,  8,
                                                    9,    10,   11,   12,   13,   14,   15, 0xff};
#define EXPECT 0x0123456789abcdefull
#define LENS   (sizeof(SESSION) - 1 + sizeof(HASH) - 1)

/* Offsets in a request (stream.h). */
enum {
    OFF_VERSION = 4,
    OFF_SESSION_LEN = 8,
    OFF_HASH_LEN = 12,
    OFF_EXPECT = 16,
    OFF_TOKEN = 24,
    OFF_STRIPE = 40,
    OFF_STRIPES = 44,
};

static ect_stream_req_t
sample_req(uint32_t stripe, uint32_t stripes)
{
    ect_stream_req_t r;
    memset(&r, 0, sizeof(r));
    r.session_id = SESSION;
    r.session_len = strlen(SESSION);
    r.mm_hash = HASH;
    r.hash_len = strlen(HASH);
    r.expect_bytes = EXPECT;
    memcpy(r.token, TOKEN, sizeof(TOKEN));
    r.stripe = stripe;
    r.stripes = stripes;
    return r;
}

static uint32_t
get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void
put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Encode req into a malloc'd buffer of exactly its size. */
static uint8_t *
encode(const ect_stream_req_t *req, size_t *len_p)
{
    size_t size = ect__stream_req_size(req);
    uint8_t *buf = malloc(size);
    CHECK(buf != NULL);
    size_t len = 0;
    CHECK_OK(ect__stream_req_encode(req, buf, size, &len));
    CHECK_EQ_U64(len, size);
    *len_p = len;
    return buf;
}

/* Decode len bytes of src from an exact-size copy (so a read past the end
 * is a sanitizer error); *out is left as it was unless ECT_OK. */
static ect_status_t
decode_exact(const uint8_t *src, size_t len, ect_stream_req_t *out)
{
    uint8_t *copy = malloc(len ? len : 1);
    CHECK(copy != NULL);
    memcpy(copy, src, len);
    ect_status_t st = ect__stream_req_decode(copy, len, out);
    free(copy);
    return st;
}

/* ---- ect__stream_stripe_blocks ---------------------------------------------------- */

static const uint64_t BLOCK_COUNTS[] = {
    0, 1, 2, 3, 4, 5, 7, 8, 1023, 1024, 1025, 5000000000ull, UINT64_MAX,
};

static void
test_stripes_tile_the_payload_in_order(void)
{
    for (size_t b = 0; b < sizeof(BLOCK_COUNTS) / sizeof(BLOCK_COUNTS[0]); b++) {
        uint64_t blocks = BLOCK_COUNTS[b];
        for (uint32_t stripes = 1; stripes <= ECT_STREAM_MAX_STRIPES; stripes++) {
            uint64_t next = 0, min = UINT64_MAX, max = 0;
            for (uint32_t s = 0; s < stripes; s++) {
                uint64_t first = 0xdead, count = 0xbeef;
                ect__stream_stripe_blocks(blocks, s, stripes, &first, &count);
                /* Each stripe starts where the one before ended. */
                CHECK_MSG(first == next, "blocks %llu stripe %u of %u starts at %llu, not %llu",
                          (unsigned long long)blocks, s, stripes, (unsigned long long)first,
                          (unsigned long long)next);
                CHECK_MSG(count <= blocks - first,
                          "blocks %llu stripe %u of %u: %llu from %llu runs past the end",
                          (unsigned long long)blocks, s, stripes, (unsigned long long)count,
                          (unsigned long long)first);
                CHECK_MSG(count > 0 || blocks < stripes, "blocks %llu stripe %u of %u is empty",
                          (unsigned long long)blocks, s, stripes);
                /* The larger shares come first. */
                if (s > 0)
                    CHECK_MSG(count <= max, "blocks %llu stripe %u of %u larger than one before",
                              (unsigned long long)blocks, s, stripes);
                next = first + count;
                min = count < min ? count : min;
                max = count > max ? count : max;
            }
            CHECK_MSG(next == blocks, "blocks %llu in %u stripes cover %llu",
                      (unsigned long long)blocks, stripes, (unsigned long long)next);
            CHECK_MSG(max - min <= 1, "blocks %llu in %u stripes: counts %llu..%llu",
                      (unsigned long long)blocks, stripes, (unsigned long long)min,
                      (unsigned long long)max);
        }
    }
}

static void
test_stripes_of_known_payloads(void)
{
    /* Spot values, so the tiling test cannot pass on a consistent but
     * different split. */
    uint64_t first, count;
    ect__stream_stripe_blocks(10, 0, 4, &first, &count);
    CHECK(first == 0 && count == 3);
    ect__stream_stripe_blocks(10, 1, 4, &first, &count);
    CHECK(first == 3 && count == 3);
    ect__stream_stripe_blocks(10, 2, 4, &first, &count);
    CHECK(first == 6 && count == 2);
    ect__stream_stripe_blocks(10, 3, 4, &first, &count);
    CHECK(first == 8 && count == 2);
    ect__stream_stripe_blocks(2, 3, 4, &first, &count);
    CHECK(first == 2 && count == 0);
    ect__stream_stripe_blocks(7, 0, 1, &first, &count);
    CHECK(first == 0 && count == 7);
    /* UINT64_MAX = 4 * 0x3fff...f + 3: the first three take one more. */
    ect__stream_stripe_blocks(UINT64_MAX, 3, 4, &first, &count);
    CHECK_EQ_U64(count, UINT64_MAX / 4);
    CHECK_EQ_U64(first, UINT64_MAX - UINT64_MAX / 4);
    ect__stream_stripe_blocks(UINT64_MAX, 0, 3, &first, &count);
    CHECK_EQ_U64(first, 0);
    CHECK_EQ_U64(count, UINT64_MAX / 3); /* UINT64_MAX is divisible by 3 */
    ect__stream_stripe_blocks(UINT64_MAX, 2, 3, &first, &count);
    CHECK_EQ_U64(first + count, UINT64_MAX);
}

static void
test_stripe_outside_its_count_gets_no_blocks(void)
{
    for (size_t b = 0; b < sizeof(BLOCK_COUNTS) / sizeof(BLOCK_COUNTS[0]); b++) {
        uint64_t blocks = BLOCK_COUNTS[b], first, count;
        static const uint32_t bad[][2] = {
            {0, 0}, {1, 0}, {1, 1},          {2, 2},
            {4, 4}, {5, 4}, {UINT32_MAX, 4}, {UINT32_MAX, UINT32_MAX}};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            count = 0x5c;
            ect__stream_stripe_blocks(blocks, bad[i][0], bad[i][1], &first, &count);
            CHECK_MSG(count == 0, "blocks %llu stripe %u of %u got %llu blocks",
                      (unsigned long long)blocks, bad[i][0], bad[i][1], (unsigned long long)count);
        }
    }
}

/* ---- round trips ----------------------------------------------------------------------- */

static void
check_fields(const ect_stream_req_t *back, const uint8_t *buf, size_t len, uint32_t stripe,
             uint32_t stripes)
{
    CHECK_EQ_U64(back->session_len, strlen(SESSION));
    CHECK_EQ_U64(back->hash_len, strlen(HASH));
    CHECK(memcmp(back->session_id, SESSION, back->session_len) == 0);
    CHECK(memcmp(back->mm_hash, HASH, back->hash_len) == 0);
    /* Borrowed from the buffer, the strings last. */
    CHECK((const uint8_t *)back->session_id == buf + len - LENS);
    CHECK((const uint8_t *)back->mm_hash == buf + len - strlen(HASH));
    CHECK_EQ_U64(back->expect_bytes, EXPECT);
    CHECK(memcmp(back->token, TOKEN, sizeof(TOKEN)) == 0);
    CHECK_EQ_U64(back->stripe, stripe);
    CHECK_EQ_U64(back->stripes, stripes);
}

static void
check_common_header(const uint8_t *buf)
{
    CHECK(memcmp(buf, "ECTR", 4) == 0);
    CHECK_EQ_U64(get_u32(buf + OFF_SESSION_LEN), strlen(SESSION));
    CHECK_EQ_U64(get_u32(buf + OFF_HASH_LEN), strlen(HASH));
    CHECK_EQ_U64(get_u32(buf + OFF_EXPECT), (uint32_t)EXPECT);
    CHECK_EQ_U64(get_u32(buf + OFF_EXPECT + 4), (uint32_t)(EXPECT >> 32));
    CHECK(memcmp(buf + OFF_TOKEN, TOKEN, sizeof(TOKEN)) == 0);
}

/* The len encoded bytes at buf: peek, from the fixed part alone, counts
 * them all (stripe fields included); decode gives the sample's fields with
 * this stripe; and they encode back to the very same bytes. */
static void
check_decodes_back(const uint8_t *buf, size_t len, uint32_t stripe, uint32_t stripes)
{
    size_t total = 0;
    CHECK_OK(ect__stream_req_peek(buf, ECT_STREAM_REQ_FIXED, &total));
    CHECK_EQ_U64(total, len);
    ect_stream_req_t back;
    memset(&back, 0x5c, sizeof(back));
    CHECK_OK(ect__stream_req_decode(buf, len, &back));
    check_fields(&back, buf, len, stripe, stripes);
    uint8_t again[ECT_STREAM_REQ_MAX];
    size_t alen = 0;
    CHECK_OK(ect__stream_req_encode(&back, again, sizeof(again), &alen));
    CHECK(alen == len && memcmp(again, buf, len) == 0);
}

static void
test_whole_grant_requests_are_version_1(void)
{
    /* stripes 0 and 1 both mean the whole grant: version 1, no stripe
     * fields, and a decoded version 1 request reads stripe 0 of 1. */
    for (uint32_t stripes = 0; stripes <= 1; stripes++) {
        ect_stream_req_t req = sample_req(0, stripes);
        CHECK_EQ_U64(ect__stream_req_size(&req), ECT_STREAM_REQ_FIXED + LENS);
        size_t len;
        uint8_t *buf = encode(&req, &len);
        CHECK_EQ_U64(len, ECT_STREAM_REQ_FIXED + LENS);
        check_common_header(buf);
        CHECK_EQ_U64(get_u32(buf + OFF_VERSION), ECT_STREAM_VERSION);
        CHECK(memcmp(buf + ECT_STREAM_REQ_FIXED, SESSION, strlen(SESSION)) == 0);
        check_decodes_back(buf, len, 0, 1);
        free(buf);
    }
}

static void
test_striped_requests_are_version_2_with_every_stripe(void)
{
    for (uint32_t stripes = 2; stripes <= ECT_STREAM_MAX_STRIPES; stripes++)
        for (uint32_t s = 0; s < stripes; s++) {
            ect_stream_req_t req = sample_req(s, stripes);
            size_t want = ECT_STREAM_REQ_FIXED + ECT_STREAM_REQ_STRIPE_FIELDS + LENS;
            CHECK_EQ_U64(ect__stream_req_size(&req), want);
            size_t len;
            uint8_t *buf = encode(&req, &len);
            CHECK_EQ_U64(len, want);
            check_common_header(buf);
            CHECK_EQ_U64(get_u32(buf + OFF_VERSION), ECT_STREAM_VERSION_STRIPED);
            CHECK_EQ_U64(get_u32(buf + OFF_STRIPE), s);
            CHECK_EQ_U64(get_u32(buf + OFF_STRIPES), stripes);
            CHECK(memcmp(buf + ECT_STREAM_REQ_FIXED + ECT_STREAM_REQ_STRIPE_FIELDS, SESSION,
                         strlen(SESSION)) == 0);
            /* From an exact-size copy (a read past the end is a sanitizer
             * error), then in place for the borrowed pointers. */
            ect_stream_req_t back;
            CHECK_EQ_INT(decode_exact(buf, len, &back), ECT_OK);
            check_decodes_back(buf, len, s, stripes);
            free(buf);
        }
}

static void
test_encoder_needs_room_for_the_stripe_fields(void)
{
    ect_stream_req_t req = sample_req(1, 2);
    uint8_t buf[ECT_STREAM_REQ_MAX];
    size_t len = 12345;
    /* Room for the version 1 encoding is not enough. */
    CHECK_STATUS(ect__stream_req_encode(&req, buf, ECT_STREAM_REQ_FIXED + LENS, &len),
                 ECT_ERR_OVERFLOW);
    CHECK_STATUS(ect__stream_req_encode(&req, buf, ect__stream_req_size(&req) - 1, &len),
                 ECT_ERR_OVERFLOW);
    CHECK_EQ_U64(len, 12345);
    CHECK_OK(ect__stream_req_encode(&req, buf, ect__stream_req_size(&req), &len));
}

static void
test_encoder_refuses_stripes_outside_the_format(void)
{
    static const uint32_t bad[][2] = {
        {0, 5}, {4, 5}, {0, UINT32_MAX}, {2, 2}, {3, 2}, {4, 4}, {1, 1}, {1, 0}, {UINT32_MAX, 4},
    };
    uint8_t buf[ECT_STREAM_REQ_MAX];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ect_stream_req_t req = sample_req(bad[i][0], bad[i][1]);
        size_t len = 12345;
        ect_status_t st = ect__stream_req_encode(&req, buf, sizeof(buf), &len);
        CHECK_MSG(st == ECT_ERR_INVALID_ARG, "stripe %u of %u: status %d", bad[i][0], bad[i][1],
                  (int)st);
        CHECK_CONTAINS(ect_last_error(), "stripe");
        CHECK_EQ_U64(len, 12345);
    }
}

/* ---- the decoder refuses ------------------------------------------------------------------ */

/* A version 2 request of stripe 1 of 2, in a buffer with room to spare. */
static size_t
striped_bytes(uint8_t *buf, size_t cap)
{
    ect_stream_req_t req = sample_req(1, 2);
    size_t len = 0;
    CHECK_OK(ect__stream_req_encode(&req, buf, cap, &len));
    return len;
}

static void
expect_parse_error(const uint8_t *buf, size_t len, const char *what, const char *label)
{
    ect_stream_req_t out;
    memset(&out, 0x5c, sizeof(out));
    ect_status_t st = decode_exact(buf, len, &out);
    CHECK_MSG(st == ECT_ERR_PARSE, "%s: status %d", label, (int)st);
    CHECK_CONTAINS(ect_last_error(), what);
    /* The output is written only on success. */
    CHECK_EQ_U64(out.expect_bytes, 0x5c5c5c5c5c5c5c5cull);
}

static void
test_decoder_refuses_stripe_fields_out_of_bounds(void)
{
    static const uint32_t bad[][2] = {
        {0, 0}, {0, 1}, {0, 5}, {0, UINT32_MAX}, {2, 2}, {4, 4}, {3, 3}, {UINT32_MAX, 4}, {5, 4},
    };
    uint8_t good[ECT_STREAM_REQ_MAX], buf[ECT_STREAM_REQ_MAX];
    size_t len = striped_bytes(good, sizeof(good));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memcpy(buf, good, len);
        put_u32(buf + OFF_STRIPE, bad[i][0]);
        put_u32(buf + OFF_STRIPES, bad[i][1]);
        char label[64];
        snprintf(label, sizeof(label), "stripe %u of %u", bad[i][0], bad[i][1]);
        expect_parse_error(buf, len, label, label);
        /* Peek sees only the fixed part: it cannot tell, and says how much
         * to read so that decode can. */
        size_t total = 0;
        CHECK_OK(ect__stream_req_peek(buf, len, &total));
        CHECK_EQ_U64(total, len);
    }
}

static void
test_decoder_refuses_a_striped_request_cut_anywhere(void)
{
    uint8_t buf[ECT_STREAM_REQ_MAX];
    size_t len = striped_bytes(buf, sizeof(buf));
    ect_stream_req_t out;
    for (size_t cut = 0; cut < len; cut++) {
        memset(&out, 0x5c, sizeof(out));
        ect_status_t st = decode_exact(buf, cut, &out);
        CHECK_MSG(st == ECT_ERR_PARSE, "cut at %zu of %zu: status %d", cut, len, (int)st);
        CHECK_EQ_U64(out.stripes, 0x5c5c5c5cu);
    }
    /* Inside the stripe fields, the message says so. */
    for (size_t cut = OFF_STRIPE; cut < OFF_STRIPES + 4; cut++)
        expect_parse_error(buf, cut, "truncated stripe fields", "cut in the stripe fields");
    /* A byte more is refused too. */
    uint8_t more[ECT_STREAM_REQ_MAX + 1];
    memcpy(more, buf, len);
    more[len] = 'x';
    expect_parse_error(more, len + 1, "lengths say", "a trailing byte");
}

static void
test_decoder_refuses_a_version_1_body_sent_as_version_2(void)
{
    /* The stripe fields then eat the first 8 string bytes: the strings no
     * longer add up to the lengths (and here the eaten bytes are no stripe
     * numbers either), so the request is refused, never read as a stripe. */
    ect_stream_req_t req = sample_req(0, 1);
    uint8_t buf[ECT_STREAM_REQ_MAX];
    size_t len = 0;
    CHECK_OK(ect__stream_req_encode(&req, buf, sizeof(buf), &len));
    put_u32(buf + OFF_VERSION, ECT_STREAM_VERSION_STRIPED);
    expect_parse_error(buf, len, "stream request", "v1 body as v2");
    /* Even when those 8 bytes are a valid stripe: the lengths still
     * disagree with what is left. */
    put_u32(buf + OFF_STRIPE, 1);
    put_u32(buf + OFF_STRIPES, 2);
    expect_parse_error(buf, len, "lengths say", "v1 body as v2 with valid stripe bytes");
    /* Strings shorter than the stripe fields: truncated. */
    static const uint8_t tiny_s[] = "a", tiny_h[] = "b";
    req.session_id = (const char *)tiny_s;
    req.session_len = 1;
    req.mm_hash = (const char *)tiny_h;
    req.hash_len = 1;
    CHECK_OK(ect__stream_req_encode(&req, buf, sizeof(buf), &len));
    CHECK_EQ_U64(len, ECT_STREAM_REQ_FIXED + 2);
    put_u32(buf + OFF_VERSION, ECT_STREAM_VERSION_STRIPED);
    expect_parse_error(buf, len, "truncated stripe fields", "tiny v1 body as v2");
    /* And peek, seeing version 2, asks for 8 bytes more than were sent. */
    size_t total = 0;
    CHECK_OK(ect__stream_req_peek(buf, len, &total));
    CHECK_EQ_U64(total, len + ECT_STREAM_REQ_STRIPE_FIELDS);

    /* The other way: a version 2 body sent as version 1 leaves 8 bytes
     * the lengths do not cover. */
    uint8_t v2[ECT_STREAM_REQ_MAX];
    size_t v2len = striped_bytes(v2, sizeof(v2));
    put_u32(v2 + OFF_VERSION, ECT_STREAM_VERSION);
    expect_parse_error(v2, v2len, "lengths say", "v2 body as v1");
}

static void
test_decoder_and_peek_refuse_other_versions(void)
{
    static const uint32_t bad[] = {0, 5, 0x100, UINT32_MAX};
    for (int striped = 0; striped <= 1; striped++) {
        uint8_t buf[ECT_STREAM_REQ_MAX];
        ect_stream_req_t req = sample_req(striped, striped ? 2 : 0);
        size_t len = 0;
        CHECK_OK(ect__stream_req_encode(&req, buf, sizeof(buf), &len));
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            put_u32(buf + OFF_VERSION, bad[i]);
            char what[32];
            snprintf(what, sizeof(what), "version %u;", bad[i]);
            expect_parse_error(buf, len, what, what);
            size_t total = 777;
            CHECK_STATUS(ect__stream_req_peek(buf, len, &total), ECT_ERR_PARSE);
            CHECK_CONTAINS(ect_last_error(), what);
            CHECK_EQ_U64(total, 777);
        }
    }
}

static void
test_aligned_requests_are_versions_3_and_4(void)
{
    /* The same layouts as versions 1 and 2; the version says that the
     * answer's header is the aligned one, and decoding keeps that. */
    for (uint32_t stripes = 1; stripes <= ECT_STREAM_MAX_STRIPES; stripes++) {
        ect_stream_req_t req = sample_req(stripes - 1, stripes);
        CHECK_EQ_U64(ect__stream_resp_len(&req), ECT_STREAM_RESP_LEN);
        size_t plain_len;
        uint8_t *plain = encode(&req, &plain_len);
        req.aligned = 1;
        CHECK_EQ_U64(ect__stream_resp_len(&req), ECT_STREAM_RESP_ALIGNED_LEN);
        size_t len;
        uint8_t *buf = encode(&req, &len);
        CHECK_EQ_U64(len, plain_len);
        CHECK_EQ_U64(get_u32(buf + OFF_VERSION),
                     stripes > 1 ? ECT_STREAM_VERSION_ALIGNED_STRIPED : ECT_STREAM_VERSION_ALIGNED);
        /* Nothing but the version differs from the unaligned request. */
        put_u32(plain + OFF_VERSION, get_u32(buf + OFF_VERSION));
        CHECK(memcmp(plain, buf, len) == 0);
        check_decodes_back(buf, len, stripes - 1, stripes);
        ect_stream_req_t back;
        CHECK_EQ_INT(decode_exact(buf, len, &back), ECT_OK);
        CHECK_EQ_INT(back.aligned, 1);
        CHECK_EQ_U64(ect__stream_resp_len(&back), ECT_STREAM_RESP_ALIGNED_LEN);
        put_u32(buf + OFF_VERSION, stripes > 1 ? ECT_STREAM_VERSION_STRIPED : ECT_STREAM_VERSION);
        CHECK_EQ_INT(decode_exact(buf, len, &back), ECT_OK);
        CHECK_EQ_INT(back.aligned, 0);
        free(plain);
        free(buf);
    }
}

/* Decode resp_len bytes of src from an exact-size copy. */
static ect_status_t
decode_resp_exact(const uint8_t *src, size_t resp_len, uint32_t *status_p, uint64_t *payload_p)
{
    uint8_t *copy = malloc(resp_len);
    CHECK(copy != NULL);
    memcpy(copy, src, resp_len);
    ect_status_t st = ect__stream_resp_decode(copy, resp_len, status_p, payload_p);
    free(copy);
    return st;
}

static void
test_responses_round_trip_in_both_sizes(void)
{
    static const struct {
        ect_stream_status_t status;
        uint64_t payload, on_wire;
    } cases[] = {
        {ECT_STREAM_OK, EXPECT, EXPECT},
        {ECT_STREAM_OK, 1, 1},
        {ECT_STREAM_DENIED, 0, 0},
        {ECT_STREAM_SIZE_MISMATCH, 99, 0}, /* a refusal carries no payload length */
    };
    for (int aligned = 0; aligned < 2; aligned++)
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            uint8_t buf[ECT_STREAM_RESP_ALIGNED_LEN + 1];
            memset(buf, 0xee, sizeof(buf));
            size_t len = ect__stream_resp_encode(cases[i].status, cases[i].payload, aligned, buf);
            CHECK_EQ_U64(len, aligned ? ECT_STREAM_RESP_ALIGNED_LEN : ECT_STREAM_RESP_LEN);
            CHECK_EQ_U64(buf[len], 0xee); /* nothing written past the header */
            CHECK(memcmp(buf, "ECTS", 4) == 0);
            CHECK_EQ_U64(get_u32(buf + 4), (uint32_t)cases[i].status);
            CHECK_EQ_U64(get_u32(buf + 8), (uint32_t)cases[i].on_wire);
            CHECK_EQ_U64(get_u32(buf + 12), (uint32_t)(cases[i].on_wire >> 32));
            for (size_t k = ECT_STREAM_RESP_LEN; k < len; k++)
                CHECK_EQ_U64(buf[k], 0);
            uint32_t status = 77;
            uint64_t payload = 77;
            CHECK_EQ_INT(decode_resp_exact(buf, len, &status, &payload), ECT_OK);
            CHECK_EQ_U64(status, (uint32_t)cases[i].status);
            CHECK_EQ_U64(payload, cases[i].on_wire);
        }
}

static void
test_response_decoder_refuses_padding_that_is_not_zero(void)
{
    uint8_t buf[ECT_STREAM_RESP_ALIGNED_LEN];
    CHECK_EQ_U64(ect__stream_resp_encode(ECT_STREAM_OK, EXPECT, 1, buf),
                 ECT_STREAM_RESP_ALIGNED_LEN);
    for (size_t k = ECT_STREAM_RESP_LEN; k < ECT_STREAM_RESP_ALIGNED_LEN; k++) {
        buf[k] = 1;
        uint32_t status = 77;
        uint64_t payload = 77;
        CHECK_STATUS(decode_resp_exact(buf, sizeof(buf), &status, &payload), ECT_ERR_PARSE);
        CHECK_CONTAINS(ect_last_error(), "padding");
        CHECK_EQ_U64(status, 77);
        CHECK_EQ_U64(payload, 77);
        buf[k] = 0;
    }
    /* The first 16 bytes of it still decode as an unaligned header (a
     * consumer that asked for that reads no further), and no other size
     * decodes at all. */
    uint32_t status;
    uint64_t payload;
    CHECK_EQ_INT(decode_resp_exact(buf, ECT_STREAM_RESP_LEN, &status, &payload), ECT_OK);
    CHECK_EQ_U64(payload, EXPECT);
    static const size_t other[] = {0, 15, 17, 32, 63, 65};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        CHECK_STATUS(ect__stream_resp_decode(buf, other[i], &status, &payload),
                     ECT_ERR_INVALID_ARG);
}

static void
test_peek_counts_the_stripe_fields_from_the_fixed_part_alone(void)
{
    uint8_t buf[ECT_STREAM_REQ_MAX];
    size_t len = striped_bytes(buf, sizeof(buf));
    /* Exactly the fixed part, from an exact-size copy. */
    uint8_t *fixed = malloc(ECT_STREAM_REQ_FIXED);
    memcpy(fixed, buf, ECT_STREAM_REQ_FIXED);
    size_t total = 0;
    CHECK_OK(ect__stream_req_peek(fixed, ECT_STREAM_REQ_FIXED, &total));
    CHECK_EQ_U64(total, ECT_STREAM_REQ_FIXED + ECT_STREAM_REQ_STRIPE_FIELDS + LENS);
    CHECK_EQ_U64(total, len);
    free(fixed);
    /* Fewer than the fixed part is the caller's mistake, not the peer's. */
    total = 777;
    CHECK_STATUS(ect__stream_req_peek(buf, ECT_STREAM_REQ_FIXED - 1, &total), ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(total, 777);
    /* The largest request peek can announce fits ECT_STREAM_REQ_MAX. */
    put_u32(buf + OFF_SESSION_LEN, ECT_WIRE_MAX_STR);
    put_u32(buf + OFF_HASH_LEN, ECT_WIRE_MAX_STR);
    CHECK_OK(ect__stream_req_peek(buf, ECT_STREAM_REQ_FIXED, &total));
    CHECK_EQ_U64(total, ECT_STREAM_REQ_MAX);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_stripes_tile_the_payload_in_order),
    ECT_CASE(test_stripes_of_known_payloads),
    ECT_CASE(test_stripe_outside_its_count_gets_no_blocks),
    ECT_CASE(test_whole_grant_requests_are_version_1),
    ECT_CASE(test_striped_requests_are_version_2_with_every_stripe),
    ECT_CASE(test_encoder_needs_room_for_the_stripe_fields),
    ECT_CASE(test_encoder_refuses_stripes_outside_the_format),
    ECT_CASE(test_decoder_refuses_stripe_fields_out_of_bounds),
    ECT_CASE(test_decoder_refuses_a_striped_request_cut_anywhere),
    ECT_CASE(test_decoder_refuses_a_version_1_body_sent_as_version_2),
    ECT_CASE(test_decoder_and_peek_refuse_other_versions),
    ECT_CASE(test_peek_counts_the_stripe_fields_from_the_fixed_part_alone),
    ECT_CASE(test_aligned_requests_are_versions_3_and_4),
    ECT_CASE(test_responses_round_trip_in_both_sizes),
    ECT_CASE(test_response_decoder_refuses_padding_that_is_not_zero),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
