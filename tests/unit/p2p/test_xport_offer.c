/*
 * The data transports' blobs (src/p2p/xport_offer.c): the offer
 * (agent_metadata, "ECTA") and the grant descriptor (mem_descriptor,
 * "ECTD") round-trip, and every malformed blob a peer could send is
 * ECT_ERR_PEER: truncation at every offset, bad magic and version, absurd
 * counts and lengths, duplicates, trailing bytes, and every single-byte
 * corruption decodes or fails cleanly (the sanitizer builds catch an
 * overrun).
 *
 * Counterpart of the seed's unit/test_data.py "accessors and mem-descriptor
 * round trip" (test_offer_and_descriptor_round_trip_*).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "p2p/xport_internal.h"

#include "harness.h"

static const char BOOT[] = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
static const char PATH[] = "/dev/shm/ectier_inst_dp0.mmap";
static const uint8_t INSTANCE[ECT_XPORT_INSTANCE_LEN] = {1, 2,  3,  4,  5,  6,  7,  8,
                                                         9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t TOKEN[ECT_STREAM_TOKEN_LEN] = {0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 7,  8,
                                                    9,    10,   11,   12,   13,   14,   15, 0xff};
#define PORT 40123

static ect_xport_offer_t
sample_offer(unsigned kinds)
{
    ect_xport_offer_t o;
    memset(&o, 0, sizeof(o));
    o.kinds = kinds;
    memcpy(o.instance, INSTANCE, sizeof(INSTANCE));
    o.tcp_port = PORT;
    memcpy(o.boot_id, BOOT, sizeof(BOOT));
    o.path = PATH;
    o.path_len = strlen(PATH);
    o.dev = 0x1234567890abcdefull;
    o.ino = 4242;
    o.data_offset = 4096;
    return o;
}

static const unsigned BOTH = (1u << ECT_XPORT_TCP) | (1u << ECT_XPORT_SAME_HOST);

static ect_xport_desc_t
sample_desc(void)
{
    ect_xport_desc_t d = {.block_size = 7168, .num_blocks = 1000};
    memcpy(d.token, TOKEN, sizeof(TOKEN));
    return d;
}

static void
put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void
put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- round trips --------------------------------------------------------------- */

/* Where the entry after the tcp one begins in a tcp-only offer. */
#define AFTER_TCP_ENTRY (4u + 4u + ECT_XPORT_INSTANCE_LEN + 4u + 12u)

/* The offer blob (len bytes, two entries) whose second entry, a u32 one,
 * starts at AFTER_TCP_ENTRY: that entry twice, or two bytes long, is
 * ECT_ERR_PEER; the short one's message names it (what). */
static void
check_second_entry_twice_or_short_refused(const uint8_t *blob, size_t len, const char *what)
{
    ect_xport_offer_t back;
    uint8_t *edit = malloc(len + 12);
    CHECK(edit != NULL);
    memcpy(edit, blob, len);
    memcpy(edit + len, blob + AFTER_TCP_ENTRY, 12);
    put_u32(edit + 4 + 4 + ECT_XPORT_INSTANCE_LEN, 3);
    CHECK_STATUS(ect__xport_offer_decode(edit, len + 12, &back), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "appears twice");
    memcpy(edit, blob, len);
    put_u32(edit + AFTER_TCP_ENTRY + 4, 2);
    CHECK_STATUS(ect__xport_offer_decode(edit, len - 2, &back), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), what);
    free(edit);
}

/* The tcp_stripes entry: written after the tcp entry only when the stream
 * takes stripes; skipped by what does not know it (its kind is not a
 * transport); a count under 2, a second entry, or a short one refused; and
 * meaningless (read as 0) without a tcp entry. */
static void
test_offer_carries_the_streams_stripes(void)
{
    ect_xport_offer_t o = sample_offer(1u << ECT_XPORT_TCP), back;
    uint8_t *blob;
    size_t len, plain_len;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &plain_len));
    CHECK_OK(ect__xport_offer_decode(blob, plain_len, &back));
    CHECK_EQ_INT(back.tcp_stripes, 0);
    free(blob);
    o.tcp_stripes = 1; /* not worth an entry */
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    CHECK_EQ_U64(len, plain_len);
    free(blob);

    o.tcp_stripes = 4;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    CHECK_EQ_U64(len, plain_len + 12);
    CHECK_OK(ect__xport_offer_decode(blob, len, &back));
    CHECK_EQ_INT(back.tcp_stripes, 4);
    CHECK_EQ_INT(back.kinds, 1u << ECT_XPORT_TCP);
    CHECK_EQ_U64(blob[4 + 4 + ECT_XPORT_INSTANCE_LEN], 2); /* two entries */
    CHECK_EQ_U64(blob[AFTER_TCP_ENTRY], ECT_XPORT_OFFER_TCP_STRIPES);

    /* A newer producer's larger count is read as it is (the consumer caps it). */
    uint8_t *edit = malloc(len + 12);
    CHECK(edit != NULL);
    memcpy(edit, blob, len);
    put_u32(edit + AFTER_TCP_ENTRY + 8, 64);
    CHECK_OK(ect__xport_offer_decode(edit, len, &back));
    CHECK_EQ_INT(back.tcp_stripes, 64);
    for (uint32_t bad = 0; bad < 2; bad++) {
        put_u32(edit + AFTER_TCP_ENTRY + 8, bad);
        CHECK_STATUS(ect__xport_offer_decode(edit, len, &back), ECT_ERR_PEER);
        CHECK_CONTAINS(ect_last_error(), "tcp_stripes entry");
    }
    free(edit);
    check_second_entry_twice_or_short_refused(blob, len, "tcp_stripes entry");
    free(blob);

    /* Without a tcp entry the count means nothing. */
    o = sample_offer(BOTH);
    o.tcp_stripes = 4;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    CHECK_OK(ect__xport_offer_decode(blob, len, &back));
    CHECK_EQ_INT(back.tcp_stripes, 4);
    free(blob);
    o.kinds = 1u << ECT_XPORT_SAME_HOST;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    CHECK_OK(ect__xport_offer_decode(blob, len, &back));
    CHECK_EQ_INT(back.tcp_stripes, 0);
    free(blob);
}

/* The tcp_aligned entry: written after the tcp entry (and the stripes one)
 * only when the stream answers aligned; one u32 that must say 64; refused
 * twice, short or saying another size; and read as absent without a tcp
 * entry. */
static void
test_offer_carries_the_streams_aligned_answers(void)
{
    ect_xport_offer_t o = sample_offer(1u << ECT_XPORT_TCP), back;
    uint8_t *blob;
    size_t len, plain_len;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &plain_len));
    CHECK_OK(ect__xport_offer_decode(blob, plain_len, &back));
    CHECK_EQ_INT(back.tcp_aligned, 0);
    free(blob);

    o.tcp_aligned = 1;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    CHECK_EQ_U64(len, plain_len + 12);
    CHECK_OK(ect__xport_offer_decode(blob, len, &back));
    CHECK_EQ_INT(back.tcp_aligned, 1);
    CHECK_EQ_INT(back.tcp_stripes, 0);
    CHECK_EQ_INT(back.kinds, 1u << ECT_XPORT_TCP);
    CHECK_EQ_U64(blob[AFTER_TCP_ENTRY], ECT_XPORT_OFFER_TCP_ALIGNED);
    CHECK_EQ_U64(blob[AFTER_TCP_ENTRY + 4], 4);
    CHECK_EQ_U64(blob[AFTER_TCP_ENTRY + 8], ECT_STREAM_RESP_ALIGNED_LEN);

    uint8_t *edit = malloc(len);
    CHECK(edit != NULL);
    static const uint32_t other[] = {0, 16, 63, 128, UINT32_MAX};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        memcpy(edit, blob, len);
        put_u32(edit + AFTER_TCP_ENTRY + 8, other[i]);
        CHECK_STATUS(ect__xport_offer_decode(edit, len, &back), ECT_ERR_PEER);
        CHECK_CONTAINS(ect_last_error(), "tcp_aligned entry");
    }
    free(edit);
    check_second_entry_twice_or_short_refused(blob, len, "tcp_aligned entry");
    free(blob);

    /* With the stripes entry too, each is read. */
    o.tcp_stripes = 4;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    CHECK_EQ_U64(len, plain_len + 24);
    CHECK_OK(ect__xport_offer_decode(blob, len, &back));
    CHECK_EQ_INT(back.tcp_aligned, 1);
    CHECK_EQ_INT(back.tcp_stripes, 4);
    free(blob);

    /* Without a tcp entry it is not written, and a hand-made one means
     * nothing. */
    o = sample_offer(1u << ECT_XPORT_SAME_HOST);
    o.tcp_aligned = 1;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &plain_len));
    CHECK_OK(ect__xport_offer_decode(blob, plain_len, &back));
    CHECK_EQ_INT(back.tcp_aligned, 0);
    edit = malloc(plain_len + 12);
    CHECK(edit != NULL);
    memcpy(edit, blob, plain_len);
    put_u32(edit + plain_len, ECT_XPORT_OFFER_TCP_ALIGNED);
    put_u32(edit + plain_len + 4, 4);
    put_u32(edit + plain_len + 8, ECT_STREAM_RESP_ALIGNED_LEN);
    put_u32(edit + 4 + 4 + ECT_XPORT_INSTANCE_LEN, 2);
    CHECK_OK(ect__xport_offer_decode(edit, plain_len + 12, &back));
    CHECK_EQ_INT(back.tcp_aligned, 0);
    CHECK_EQ_INT(back.kinds, 1u << ECT_XPORT_SAME_HOST);
    free(edit);
    free(blob);
}

static void
test_offer_and_descriptor_round_trip_with_both_transports(void)
{
    ect_xport_offer_t o = sample_offer(BOTH);
    uint8_t *blob;
    size_t len;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    ect_xport_offer_t back;
    CHECK_OK(ect__xport_offer_decode(blob, len, &back));
    CHECK_EQ_INT(back.kinds, BOTH);
    CHECK_EQ_INT(back.tcp_port, PORT);
    CHECK(memcmp(back.instance, INSTANCE, sizeof(INSTANCE)) == 0);
    /* Borrowed from the blob, not copied. */
    CHECK((const uint8_t *)back.path >= blob && (const uint8_t *)back.path < blob + len);
    CHECK_STR_EQ(back.boot_id, BOOT);
    CHECK_EQ_U64(back.path_len, strlen(PATH));
    CHECK(memcmp(back.path, PATH, strlen(PATH)) == 0);
    CHECK_EQ_U64(back.dev, o.dev);
    CHECK_EQ_U64(back.ino, o.ino);
    CHECK_EQ_U64(back.data_offset, o.data_offset);
    CHECK(memcmp(blob, "ECTA", 4) == 0);
    free(blob);

    ect_xport_desc_t d = sample_desc(), dback;
    uint8_t db[ECT_XPORT_DESC_LEN];
    size_t dlen = 0;
    CHECK_OK(ect__xport_desc_encode(&d, NULL, 0, db, sizeof(db), &dlen));
    CHECK_EQ_U64(dlen, sizeof(db));
    CHECK(memcmp(db, "ECTD", 4) == 0);
    CHECK_OK(ect__xport_desc_decode(db, sizeof(db), &dback));
    CHECK_EQ_U64(dback.block_size, d.block_size);
    CHECK_EQ_U64(dback.num_blocks, d.num_blocks);
    CHECK(memcmp(dback.token, TOKEN, sizeof(TOKEN)) == 0);
}

static void
test_offer_and_descriptor_round_trip_with_one_transport(void)
{
    for (unsigned kind = ECT_XPORT_TCP; kind <= ECT_XPORT_SAME_HOST; kind++) {
        ect_xport_offer_t o = sample_offer(1u << kind), back;
        uint8_t *blob;
        size_t len;
        CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
        CHECK_OK(ect__xport_offer_decode(blob, len, &back));
        CHECK_EQ_INT(back.kinds, 1u << kind);
        if (kind == ECT_XPORT_TCP)
            CHECK(back.path == NULL && back.boot_id[0] == '\0' && back.tcp_port == PORT);
        else
            CHECK(back.tcp_port == 0 && back.path_len == strlen(PATH));
        free(blob);
    }
}

static void
test_encode_refuses_fields_outside_the_format(void)
{
    uint8_t *blob = NULL;
    size_t len = 0;
    ect_xport_offer_t o = sample_offer(0);
    CHECK_STATUS(ect__xport_offer_encode(&o, &blob, &len), ECT_ERR_INVALID_ARG);
    o = sample_offer(1u << 5);
    CHECK_STATUS(ect__xport_offer_encode(&o, &blob, &len), ECT_ERR_INVALID_ARG);
    o = sample_offer(BOTH);
    o.tcp_port = 0;
    CHECK_STATUS(ect__xport_offer_encode(&o, &blob, &len), ECT_ERR_INVALID_ARG);
    o = sample_offer(BOTH);
    o.path_len = 0;
    CHECK_STATUS(ect__xport_offer_encode(&o, &blob, &len), ECT_ERR_INVALID_ARG);
    o = sample_offer(BOTH);
    o.boot_id[3] = 'Z';
    CHECK_STATUS(ect__xport_offer_encode(&o, &blob, &len), ECT_ERR_INVALID_ARG);
    ect_xport_desc_t d = sample_desc();
    uint8_t db[ECT_XPORT_DESC_LEN];
    size_t dlen = 0;
    d.num_blocks = 0;
    CHECK_STATUS(ect__xport_desc_encode(&d, NULL, 0, db, sizeof(db), &dlen), ECT_ERR_INVALID_ARG);
    d = sample_desc();
    d.num_blocks = UINT64_MAX;
    CHECK_STATUS(ect__xport_desc_encode(&d, NULL, 0, db, sizeof(db), &dlen), ECT_ERR_INVALID_ARG);
    /* Runs outside the region, empty, or not fitting the buffer. */
    d = sample_desc();
    ect_run_t outside = {999, 2}, empty = {3, 0}, fine = {0, 10};
    CHECK_STATUS(ect__xport_desc_encode(&d, &outside, 1, db, sizeof(db) + 16, &dlen),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__xport_desc_encode(&d, &empty, 1, db, sizeof(db) + 16, &dlen),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__xport_desc_encode(&d, &fine, 1, db, sizeof(db), &dlen), ECT_ERR_OVERFLOW);
    CHECK(dlen == 0);
    /* Nothing was handed out. */
    CHECK(blob == NULL && len == 0);
}

/* ---- truncation ---------------------------------------------------------------- */

static void
test_offer_truncated_at_every_offset_is_peer_error(void)
{
    ect_xport_offer_t o = sample_offer(BOTH), out;
    memset(&out, 0x5c, sizeof(out));
    uint8_t *blob;
    size_t len;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    for (size_t cut = 0; cut < len; cut++) {
        /* An exact-size copy, so a read past the end is a sanitizer error. */
        uint8_t *part = malloc(cut ? cut : 1);
        memcpy(part, blob, cut);
        CHECK_MSG(ect__xport_offer_decode(part, cut, &out) == ECT_ERR_PEER,
                  "offer cut at %zu of %zu decoded", cut, len);
        free(part);
    }
    /* The output is written only on success. */
    CHECK_EQ_U64(out.dev, 0x5c5c5c5c5c5c5c5cull);
    free(blob);
}

static void
test_descriptor_truncated_at_every_offset_is_peer_error(void)
{
    ect_xport_desc_t d = sample_desc(), out;
    uint8_t blob[ECT_XPORT_DESC_LEN];
    size_t len = sizeof(blob);
    CHECK_OK(ect__xport_desc_encode(&d, NULL, 0, blob, sizeof(blob), &len));
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *part = malloc(cut ? cut : 1);
        memcpy(part, blob, cut);
        CHECK_MSG(ect__xport_desc_decode(part, cut, &out) == ECT_ERR_PEER,
                  "descriptor cut at %zu of %zu decoded", cut, len);
        free(part);
    }
}

/* ---- malformed offers ------------------------------------------------------------- */

/* Encode the sample offer, let edit change it, and expect ECT_ERR_PEER
 * with a message containing what. */
static void
expect_offer_refused(unsigned kinds, void (*edit)(uint8_t *blob, size_t *len), const char *what)
{
    ect_xport_offer_t o = sample_offer(kinds), out;
    uint8_t *blob;
    size_t len;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, &len));
    uint8_t *big = calloc(1, len + 64);
    memcpy(big, blob, len);
    free(blob);
    edit(big, &len);
    CHECK_STATUS(ect__xport_offer_decode(big, len, &out), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), what);
    free(big);
}

/* Offsets in an offer of one tcp entry (a 4-byte port) and then the
 * same-host entry. */
enum {
    OFF_VERSION = 4,
    OFF_COUNT = 8 + ECT_XPORT_INSTANCE_LEN,
    OFF_E0_KIND = OFF_COUNT + 4,
    OFF_E0_LEN = OFF_E0_KIND + 4,
    OFF_E0_DATA = OFF_E0_LEN + 4,
    OFF_E1_KIND = OFF_E0_DATA + 4,
    OFF_E1_LEN = OFF_E1_KIND + 4,
    OFF_E1_DATA = OFF_E1_LEN + 4,
    OFF_E1_PATHLEN = OFF_E1_DATA + 36 + 24,
    OFF_E1_PATH = OFF_E1_PATHLEN + 4,
};

static void
edit_magic(uint8_t *b, size_t *len)
{
    (void)len;
    b[0] = 'X';
}
static void
edit_version(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_VERSION, 1);
}
static void
edit_zero_entries(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_COUNT, 0);
}
static void
edit_many_entries(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_COUNT, 0xffffffffu);
}
static void
edit_more_entries_than_bytes(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_COUNT, 3);
}
static void
edit_entry_len_past_end(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E0_LEN, 0x7fffffffu);
}
static void
edit_entry_len_wraps(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E0_LEN, 0xffffffffu);
}
static void
edit_tcp_len_zero(uint8_t *b, size_t *len)
{
    /* A zero-length tcp entry, and the blob ends there. */
    put_u32(b + OFF_E0_LEN, 0);
    put_u32(b + OFF_COUNT, 1);
    *len = OFF_E0_DATA;
}
static void
edit_tcp_port_zero(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E0_DATA, 0);
}
static void
edit_tcp_port_huge(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E0_DATA, 65536);
}
static void
edit_duplicate_kind(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E1_KIND, ECT_XPORT_TCP);
}
static void
edit_trailing(uint8_t *b, size_t *len)
{
    (void)b;
    *len += 3;
}
static void
edit_boot_id(uint8_t *b, size_t *len)
{
    (void)len;
    b[OFF_E1_DATA + 5] = 'G';
}
static void
edit_path_nul(uint8_t *b, size_t *len)
{
    (void)len;
    b[OFF_E1_PATH + 3] = '\0';
}
static void
edit_path_len_zero(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E1_PATHLEN, 0);
}
static void
edit_path_len_huge(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E1_PATHLEN, 0xfffffff0u);
}
static void
edit_path_len_short(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + OFF_E1_PATHLEN, 3);
}
static void
edit_shm_entry_short(uint8_t *b, size_t *len)
{
    /* The same-host entry claims 10 bytes and the blob ends there. */
    put_u32(b + OFF_E1_LEN, 10);
    *len = OFF_E1_DATA + 10;
}
static void
edit_only_unknown(uint8_t *b, size_t *len)
{
    put_u32(b + OFF_COUNT, 1);
    put_u32(b + OFF_E0_KIND, 77);
    *len = OFF_E0_DATA + 4;
}

static void
test_offer_with_bad_magic_or_version_is_peer_error(void)
{
    expect_offer_refused(BOTH, edit_magic, "magic");
    expect_offer_refused(BOTH, edit_version, "version 1");
}

static void
test_offer_with_absurd_counts_and_lengths_is_peer_error(void)
{
    expect_offer_refused(BOTH, edit_zero_entries, "0 entries");
    expect_offer_refused(BOTH, edit_many_entries, "entries");
    expect_offer_refused(BOTH, edit_more_entries_than_bytes, "truncated");
    expect_offer_refused(BOTH, edit_entry_len_past_end, "past the end");
    expect_offer_refused(BOTH, edit_entry_len_wraps, "past the end");
    expect_offer_refused(BOTH, edit_tcp_len_zero, "tcp entry");
    expect_offer_refused(BOTH, edit_tcp_port_zero, "tcp entry");
    expect_offer_refused(BOTH, edit_tcp_port_huge, "tcp entry");
    expect_offer_refused(BOTH, edit_path_len_zero, "path length");
    expect_offer_refused(BOTH, edit_path_len_huge, "path length");
    expect_offer_refused(BOTH, edit_path_len_short, "disagrees");
    expect_offer_refused(BOTH, edit_shm_entry_short, "shorter than its fixed part");
}

static void
test_offer_with_bad_fields_is_peer_error(void)
{
    expect_offer_refused(BOTH, edit_duplicate_kind, "twice");
    expect_offer_refused(BOTH, edit_trailing, "trailing");
    expect_offer_refused(BOTH, edit_boot_id, "boot id");
    expect_offer_refused(BOTH, edit_path_nul, "NUL");
    expect_offer_refused(BOTH, edit_only_unknown, "no transport");
}

static void
test_offer_entry_of_unknown_kind_is_skipped(void)
{
    /* A newer producer's extra transport between two known ones. */
    uint8_t blob[256];
    size_t n = 0;
    memcpy(blob, "ECTA", 4);
    put_u32(blob + 4, ECT_XPORT_BLOB_VERSION);
    memcpy(blob + 8, INSTANCE, sizeof(INSTANCE));
    put_u32(blob + OFF_COUNT, 2);
    n = OFF_E0_KIND;
    put_u32(blob + n, 9); /* unknown kind, 5 bytes */
    put_u32(blob + n + 4, 5);
    memcpy(blob + n + 8, "hello", 5);
    n += 13;
    put_u32(blob + n, ECT_XPORT_TCP);
    put_u32(blob + n + 4, 4);
    put_u32(blob + n + 8, PORT);
    n += 12;
    ect_xport_offer_t o;
    CHECK_OK(ect__xport_offer_decode(blob, n, &o));
    CHECK_EQ_INT(o.kinds, 1u << ECT_XPORT_TCP);
    CHECK_EQ_INT(o.tcp_port, PORT);
}

static void
test_empty_or_oversized_blobs_are_peer_errors(void)
{
    ect_xport_offer_t o;
    ect_xport_desc_t d;
    CHECK_STATUS(ect__xport_offer_decode(NULL, 0, &o), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "empty");
    CHECK_STATUS(ect__xport_desc_decode(NULL, 0, &d), ECT_ERR_PEER);
    uint8_t *big = calloc(1, ECT_XPORT_MAX_BLOB + 1);
    memcpy(big, "ECTA", 4);
    CHECK_STATUS(ect__xport_offer_decode(big, ECT_XPORT_MAX_BLOB + 1, &o), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "at most");
    memcpy(big, "ECTD", 4);
    put_u32(big + 4, ECT_XPORT_BLOB_VERSION);
    CHECK_STATUS(ect__xport_desc_decode(big, ECT_XPORT_MAX_BLOB + 1, &d), ECT_ERR_PEER);
    free(big);
    /* The other blob's magic is not accepted either. */
    uint8_t blob[ECT_XPORT_DESC_LEN];
    size_t blen;
    ect_xport_desc_t sd = sample_desc();
    CHECK_OK(ect__xport_desc_encode(&sd, NULL, 0, blob, sizeof(blob), &blen));
    CHECK_STATUS(ect__xport_offer_decode(blob, sizeof(blob), &o), ECT_ERR_PEER);
}

/* ---- malformed descriptors ----------------------------------------------------------- */

enum { D_VERSION = 4, D_BS = 8, D_NB = 16, D_TOKEN = 24 };

static void
expect_desc_refused(void (*edit)(uint8_t *blob, size_t *len), const char *what)
{
    ect_xport_desc_t d = sample_desc(), out;
    uint8_t big[ECT_XPORT_DESC_LEN + 64] = {0};
    size_t len = ECT_XPORT_DESC_LEN;
    CHECK_OK(ect__xport_desc_encode(&d, NULL, 0, big, sizeof(big), &len));
    edit(big, &len);
    CHECK_STATUS(ect__xport_desc_decode(big, len, &out), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), what);
}

static void
dedit_magic(uint8_t *b, size_t *len)
{
    (void)len;
    memcpy(b, "ECTA", 4);
}
static void
dedit_version(uint8_t *b, size_t *len)
{
    (void)len;
    put_u32(b + D_VERSION, 1);
}
static void
dedit_bs_zero(uint8_t *b, size_t *len)
{
    (void)len;
    put_u64(b + D_BS, 0);
}
static void
dedit_nb_zero(uint8_t *b, size_t *len)
{
    (void)len;
    put_u64(b + D_NB, 0);
}
static void
dedit_size_overflow(uint8_t *b, size_t *len)
{
    (void)len;
    put_u64(b + D_NB, 1ull << 62);
}
static void
dedit_trailing(uint8_t *b, size_t *len)
{
    (void)b;
    *len += 1;
}

/* A consumer that takes runs gets them in the descriptor; a peer's runs
 * are checked against the region it describes. */
static void
test_descriptor_runs_round_trip_and_bad_runs_are_peer_errors(void)
{
    ect_xport_desc_t d = sample_desc(), back;
    const ect_run_t runs[] = {{0, 10}, {500, 3}, {990, 10}};
    uint8_t blob[ECT_XPORT_DESC_LEN + 3 * 16];
    size_t len = 0;
    CHECK_OK(ect__xport_desc_encode(&d, runs, 3, blob, sizeof(blob), &len));
    CHECK_EQ_U64(len, ect__xport_desc_size(3));
    CHECK_OK(ect__xport_desc_decode(blob, len, &back));
    CHECK_EQ_U64(back.n_runs, 3);
    for (size_t i = 0; i < 3; i++) {
        ect_run_t r = ect__xport_desc_run(&back, i);
        CHECK_EQ_U64(r.first, runs[i].first);
        CHECK_EQ_U64(r.count, runs[i].count);
    }
    CHECK(memcmp(back.token, TOKEN, sizeof(TOKEN)) == 0);
    /* The token stays the last field. */
    CHECK(memcmp(blob + len - ECT_STREAM_TOKEN_LEN, TOKEN, sizeof(TOKEN)) == 0);
    /* A run past the region's end, an empty one, a count that lies. */
    uint8_t bad[sizeof(blob)];
    memcpy(bad, blob, len);
    put_u64(bad + 28 + 32, 995); /* the third run starts at 995: 995 + 10 > 1000 */
    CHECK_STATUS(ect__xport_desc_decode(bad, len, &back), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "run 2");
    memcpy(bad, blob, len);
    put_u64(bad + 28 + 16 + 8, 0);
    CHECK_STATUS(ect__xport_desc_decode(bad, len, &back), ECT_ERR_PEER);
    memcpy(bad, blob, len);
    put_u32(bad + 24, 0xffffffffu);
    CHECK_STATUS(ect__xport_desc_decode(bad, len, &back), ECT_ERR_PEER);
    put_u32(bad + 24, 2);
    CHECK_STATUS(ect__xport_desc_decode(bad, len, &back), ECT_ERR_PEER);
}

static void
test_descriptor_with_bad_fields_is_peer_error(void)
{
    expect_desc_refused(dedit_magic, "magic");
    expect_desc_refused(dedit_version, "version 1");
    expect_desc_refused(dedit_bs_zero, "non-zero");
    expect_desc_refused(dedit_nb_zero, "non-zero");
    expect_desc_refused(dedit_size_overflow, "64 bits");
    expect_desc_refused(dedit_trailing, "with 0 runs version 2 has 44");
}

/* ---- corruption ------------------------------------------------------------------------ */

static void
test_every_single_byte_corruption_decodes_or_fails_cleanly(void)
{
    ect_xport_offer_t o = sample_offer(BOTH), out;
    ect_xport_desc_t d = sample_desc(), dout;
    uint8_t *ob, db[ECT_XPORT_DESC_LEN];
    size_t olen, dlen = sizeof(db);
    CHECK_OK(ect__xport_offer_encode(&o, &ob, &olen));
    CHECK_OK(ect__xport_desc_encode(&d, NULL, 0, db, sizeof(db), &dlen));
    static const uint8_t values[] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
    unsigned refused = 0;
    for (int which = 0; which < 2; which++) {
        uint8_t *src = which ? db : ob;
        size_t len = which ? dlen : olen;
        uint8_t *copy = malloc(len);
        for (size_t i = 0; i < len; i++)
            for (size_t v = 0; v < sizeof(values); v++) {
                memcpy(copy, src, len);
                copy[i] = values[v];
                ect_status_t st = which ? ect__xport_desc_decode(copy, len, &dout)
                                        : ect__xport_offer_decode(copy, len, &out);
                CHECK_MSG(st == ECT_OK || st == ECT_ERR_PEER, "byte %zu = %u gave status %d", i,
                          values[v], (int)st);
                refused += st == ECT_ERR_PEER;
                /* Whatever decodes stays inside the blob it came from. */
                if (st == ECT_OK && !which && out.path != NULL)
                    CHECK((const uint8_t *)out.path + out.path_len <= copy + len);
            }
        free(copy);
    }
    /* Corrupting magic, counts and lengths must be noticed. */
    CHECK(refused > 20);
    free(ob);
}

static int
token_seen(uint8_t (*seen)[ECT_STREAM_TOKEN_LEN], size_t n, const uint8_t *t)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(seen[i], t, ECT_STREAM_TOKEN_LEN) == 0)
            return 1;
    return 0;
}

static void
test_grant_tokens_never_repeat_across_batches_or_a_fork(void)
{
    /* Tokens are drawn a batch at a time: over several batches none repeats
     * and none is all zero, and a child forked with half a batch left hands
     * out tokens its parent never does (the pool is emptied in the child). */
    enum { N = 200 };
    static uint8_t seen[2 * N][ECT_STREAM_TOKEN_LEN];
    static const uint8_t zero[ECT_STREAM_TOKEN_LEN];
    for (size_t i = 0; i < N; i++) {
        uint8_t t[ECT_STREAM_TOKEN_LEN];
        CHECK_OK(ect__xport_new_token(t));
        CHECK(memcmp(t, zero, sizeof(t)) != 0);
        CHECK_MSG(!token_seen(seen, i, t), "token %zu repeats an earlier one", i);
        memcpy(seen[i], t, sizeof(t));
    }
    int up[2];
    CHECK(pipe(up) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        uint8_t t[ECT_STREAM_TOKEN_LEN];
        for (int i = 0; i < 8; i++)
            if (ect__xport_new_token(t) != ECT_OK || write(up[1], t, sizeof(t)) != sizeof(t))
                _exit(1);
        _exit(0);
    }
    close(up[1]);
    uint8_t child[8][ECT_STREAM_TOKEN_LEN];
    size_t got = 0;
    while (got < sizeof(child)) {
        ssize_t n = read(up[0], (uint8_t *)child + got, sizeof(child) - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(up[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_U64(got, sizeof(child));
    for (size_t i = N; i < 2 * N; i++)
        CHECK_OK(ect__xport_new_token(seen[i]));
    for (int k = 0; k < 8; k++)
        CHECK_MSG(!token_seen(seen, 2 * N, child[k]), "the child's token %d is one of ours", k);
}

static void
test_touch_from_kernel_reads_every_page_and_changes_nothing(void)
{
    /* The touch only reads: a region mapped read-only goes through it, a
     * written one keeps every byte, and lengths that end mid-page or are
     * zero are fine. */
    long page = sysconf(_SC_PAGESIZE);
    enum { PAGES = 2500 }; /* more than one writev's worth */
    size_t len = (size_t)page * PAGES;
    uint8_t *rw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(rw != MAP_FAILED);
    for (size_t i = 0; i < len; i++)
        rw[i] = (uint8_t)(i * 131 + (i >> 12));
    ect__xport_touch_from_kernel(rw, len);
    ect__xport_touch_from_kernel(rw, len - 100);
    ect__xport_touch_from_kernel(rw, 0);
    for (size_t i = 0; i < len; i++)
        if (rw[i] != (uint8_t)(i * 131 + (i >> 12))) {
            CHECK_MSG(0, "byte %zu changed", i);
            break;
        }
    CHECK(mprotect(rw, len, PROT_READ) == 0);
    ect__xport_touch_from_kernel(rw, len);
    CHECK(munmap(rw, len) == 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_offer_and_descriptor_round_trip_with_both_transports),
    ECT_CASE(test_offer_and_descriptor_round_trip_with_one_transport),
    ECT_CASE(test_offer_carries_the_streams_stripes),
    ECT_CASE(test_offer_carries_the_streams_aligned_answers),
    ECT_CASE(test_encode_refuses_fields_outside_the_format),
    ECT_CASE(test_offer_truncated_at_every_offset_is_peer_error),
    ECT_CASE(test_descriptor_truncated_at_every_offset_is_peer_error),
    ECT_CASE(test_offer_with_bad_magic_or_version_is_peer_error),
    ECT_CASE(test_offer_with_absurd_counts_and_lengths_is_peer_error),
    ECT_CASE(test_offer_with_bad_fields_is_peer_error),
    ECT_CASE(test_offer_entry_of_unknown_kind_is_skipped),
    ECT_CASE(test_empty_or_oversized_blobs_are_peer_errors),
    ECT_CASE(test_descriptor_with_bad_fields_is_peer_error),
    ECT_CASE(test_descriptor_runs_round_trip_and_bad_runs_are_peer_errors),
    ECT_CASE(test_every_single_byte_corruption_decodes_or_fails_cleanly),
    ECT_CASE(test_grant_tokens_never_repeat_across_batches_or_a_fork),
    ECT_CASE(test_touch_from_kernel_reads_every_page_and_changes_nothing),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
