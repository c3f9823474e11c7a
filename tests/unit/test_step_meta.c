/*
 * Step metadata and worker reports: values, byte round trips, and decoding
 * of malformed bytes (SPEC §6, issue 3 item 4).
 */
#include <ectier/step.h>

#include "harness.h"

static ect_step_meta_t *
sample_meta(void)
{
    ect_step_meta_t *m;
    CHECK_OK(ect_step_meta_create(&m));
    ect_run_t a[] = {{0, 3}, {7, 1}};
    ect_run_t b[] = {{3, 4}};
    ect_run_t c[] = {{10, 2}, {20, 5}};
    CHECK_OK(ect_step_meta_add_save(m, "hash-a", a, 2));
    CHECK_OK(ect_step_meta_add_save(m, "hash-b", b, 1));
    CHECK_OK(ect_step_meta_add_load(m, "hash-c", 41, c, 2));
    return m;
}

static void *
encode_meta(const ect_step_meta_t *m, size_t *len_p)
{
    size_t cap = ect_step_meta_encoded_size(m);
    void *buf = malloc(cap);
    CHECK_OK(ect_step_meta_encode(m, buf, cap, len_p));
    CHECK_EQ_U64(*len_p, cap);
    return buf;
}

static void
test_meta_round_trip_keeps_saves_loads_and_runs(void)
{
    ect_step_meta_t *m = sample_meta(), *d;
    size_t len;
    void *buf = encode_meta(m, &len);
    CHECK_OK(ect_step_meta_decode(buf, len, 64, &d));
    CHECK_EQ_U64(ect_step_meta_n_saves(d), 2);
    CHECK_EQ_U64(ect_step_meta_n_loads(d), 1);
    const ect_step_item_t *a = ect_step_meta_find_save(d, "hash-a");
    CHECK(a != NULL);
    CHECK_EQ_U64(a->n_runs, 2);
    CHECK_EQ_U64(a->n_blocks, 4);
    CHECK_EQ_U64(a->runs[1].first, 7);
    const ect_step_item_t *c = ect_step_meta_load(d, 0);
    CHECK_STR_EQ(c->key, "hash-c");
    CHECK_EQ_U64(c->transfer_id, 41);
    CHECK_EQ_U64(c->n_blocks, 7);
    CHECK(ect_step_meta_find_save(d, "hash-c") == NULL);
    CHECK(ect_step_meta_find_load(d, "hash-c") == c);
    CHECK(ect_step_meta_find_load(d, "hash-a") == NULL);
    CHECK(ect_step_meta_save(d, 2) == NULL);
    free(buf);
    ect_step_meta_destroy(m);
    ect_step_meta_destroy(d);
}

/* Items with no runs, a few, and more than fit the decoder's and the
 * scheduler's small buffers (16): every run and key comes back in order,
 * whichever item came before (a long one, then short ones reusing the
 * decoder's buffer). */
static void
test_meta_round_trip_of_short_and_long_run_lists(void)
{
    static const size_t counts[] = {40, 0, 1, 16, 17, 3, 100};
    enum { N = sizeof(counts) / sizeof(counts[0]) };
    ect_step_meta_t *m, *d;
    CHECK_OK(ect_step_meta_create(&m));
    ect_run_t runs[100];
    uint64_t next = 0;
    for (size_t i = 0; i < N; i++) {
        for (size_t r = 0; r < counts[i]; r++) {
            runs[r] = (ect_run_t){next, 1 + r % 3};
            next += runs[r].count + 1; /* gaps: no two runs merge */
        }
        char key[32];
        snprintf(key, sizeof(key), "k%zu", i);
        CHECK_OK(i % 2 ? ect_step_meta_add_load(m, key, 100 + i, runs, counts[i])
                       : ect_step_meta_add_save(m, key, runs, counts[i]));
    }
    size_t len;
    void *buf = encode_meta(m, &len);
    CHECK_OK(ect_step_meta_decode(buf, len, next, &d));
    for (size_t i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%zu", i);
        const ect_step_item_t *a =
            i % 2 ? ect_step_meta_find_load(m, key) : ect_step_meta_find_save(m, key);
        const ect_step_item_t *b =
            i % 2 ? ect_step_meta_find_load(d, key) : ect_step_meta_find_save(d, key);
        CHECK(a != NULL && b != NULL);
        CHECK_STR_EQ(b->key, key);
        CHECK_EQ_U64(b->n_runs, counts[i]);
        CHECK_EQ_U64(b->n_blocks, a->n_blocks);
        CHECK_EQ_U64(b->transfer_id, a->transfer_id);
        for (size_t r = 0; r < counts[i]; r++) {
            CHECK_EQ_U64(b->runs[r].first, a->runs[r].first);
            CHECK_EQ_U64(b->runs[r].count, a->runs[r].count);
        }
    }
    free(buf);
    ect_step_meta_destroy(m);
    ect_step_meta_destroy(d);
}

static void
test_meta_empty_round_trip(void)
{
    ect_step_meta_t *m, *d;
    CHECK_OK(ect_step_meta_create(&m));
    size_t len;
    void *buf = encode_meta(m, &len);
    CHECK_OK(ect_step_meta_decode(buf, len, 1, &d));
    CHECK_EQ_U64(ect_step_meta_n_saves(d) + ect_step_meta_n_loads(d), 0);
    free(buf);
    ect_step_meta_destroy(m);
    ect_step_meta_destroy(d);
}

static void
test_meta_many_items_find_each(void)
{
    ect_step_meta_t *m;
    CHECK_OK(ect_step_meta_create(&m));
    char key[32];
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%u", i);
        ect_run_t r = {i * 2, 1};
        CHECK_OK(ect_step_meta_add_save(m, key, &r, 1));
    }
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%u", i);
        const ect_step_item_t *it = ect_step_meta_find_save(m, key);
        CHECK(it != NULL);
        CHECK_EQ_U64(it->runs[0].first, i * 2);
    }
    ect_step_meta_destroy(m);
}

/* A value cleared and filled again, many times and with keys long enough
 * that its arena moves while it fills: every item's key and runs stay
 * right (they point into the arena), a cleared value finds none of its old
 * keys, and decode_into leaves exactly the decoded step, or nothing on bad
 * bytes. */
static void
test_meta_clear_and_decode_into_reuse_the_value(void)
{
    ect_step_meta_t *m, *d;
    CHECK_OK(ect_step_meta_create(&m));
    CHECK_OK(ect_step_meta_create(&d));
    char key[300];
    for (int round = 0; round < 3; round++) {
        size_t n = 50 + 100 * (size_t)round;
        for (size_t i = 0; i < n; i++) {
            snprintf(key, sizeof(key), "r%d-%zu-%0*d", round, i, (int)(i % 250), 0);
            ect_run_t runs[2] = {{i * 8, 1}, {i * 8 + 2, 1 + (uint64_t)round}};
            CHECK_OK(i % 3 ? ect_step_meta_add_save(m, key, runs, 2)
                           : ect_step_meta_add_load(m, key, i, runs, 1));
        }
        for (size_t i = 0; i < n; i++) {
            snprintf(key, sizeof(key), "r%d-%zu-%0*d", round, i, (int)(i % 250), 0);
            const ect_step_item_t *it =
                i % 3 ? ect_step_meta_find_save(m, key) : ect_step_meta_find_load(m, key);
            CHECK_MSG(it != NULL, "round %d: '%s' lost", round, key);
            CHECK_STR_EQ(it->key, key);
            CHECK_EQ_U64(it->runs[0].first, i * 8);
            CHECK_EQ_U64(it->n_blocks, i % 3 ? 2 + (uint64_t)round : 1);
        }
        /* Decoded into a value holding the previous round: only this one. */
        size_t len;
        void *buf = encode_meta(m, &len);
        CHECK_OK(ect_step_meta_decode_into(d, buf, len, 1 << 20));
        CHECK_EQ_U64(ect_step_meta_n_saves(d) + ect_step_meta_n_loads(d), n);
        CHECK_EQ_U64(ect_step_meta_n_saves(d), ect_step_meta_n_saves(m));
        snprintf(key, sizeof(key), "r%d-%zu-%0*d", round, (size_t)1, 1, 0);
        CHECK(ect_step_meta_find_save(d, key) != NULL);
        snprintf(key, sizeof(key), "r%d-%zu-%0*d", round - 1, (size_t)1, 1, 0);
        CHECK(ect_step_meta_find_save(d, key) == NULL);
        /* Bad bytes: an error, and the value is empty, not half-filled. */
        CHECK_STATUS(ect_step_meta_decode_into(d, buf, len - 1, 1 << 20), ECT_ERR_PARSE);
        CHECK_EQ_U64(ect_step_meta_n_saves(d) + ect_step_meta_n_loads(d), 0);
        CHECK_STATUS(ect_step_meta_decode_into(d, buf, len, 10), ECT_ERR_OVERFLOW);
        CHECK_EQ_U64(ect_step_meta_n_saves(d) + ect_step_meta_n_loads(d), 0);
        free(buf);
        ect_step_meta_clear(m);
        CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
        snprintf(key, sizeof(key), "r%d-%zu-%0*d", round, (size_t)1, 1, 0);
        CHECK(ect_step_meta_find_save(m, key) == NULL);
        CHECK(ect_step_meta_save(m, 0) == NULL);
    }
    CHECK_STATUS(ect_step_meta_decode_into(NULL, "x", 1, 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_step_meta_decode_into(d, NULL, 1, 1), ECT_ERR_INVALID_ARG);
    ect_step_meta_clear(NULL);
    ect_step_meta_destroy(m);
    ect_step_meta_destroy(d);
}

static void
test_meta_add_rejects_caller_errors(void)
{
    ect_step_meta_t *m;
    CHECK_OK(ect_step_meta_create(&m));
    ect_run_t ok[] = {{0, 2}};
    ect_run_t zero[] = {{0, 0}};
    ect_run_t descending[] = {{5, 1}, {2, 1}};
    ect_run_t overlapping[] = {{0, 3}, {2, 1}};
    CHECK_STATUS(ect_step_meta_add_save(m, "", ok, 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_step_meta_add_save(m, "k", zero, 1), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "zero blocks");
    CHECK_STATUS(ect_step_meta_add_save(m, "k", descending, 2), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_step_meta_add_save(m, "k", overlapping, 2), ECT_ERR_INVALID_ARG);
    CHECK_OK(ect_step_meta_add_save(m, "k", ok, 1));
    CHECK_STATUS(ect_step_meta_add_save(m, "k", ok, 1), ECT_ERR_EXISTS);
    CHECK_CONTAINS(ect_last_error(), "'k'");
    char *long_key = malloc(ECT_KEY_MAX + 2);
    memset(long_key, 'x', ECT_KEY_MAX + 1);
    long_key[ECT_KEY_MAX + 1] = '\0';
    CHECK_STATUS(ect_step_meta_add_load(m, long_key, 1, ok, 1), ECT_ERR_INVALID_ARG);
    free(long_key);
    /* The failed adds changed nothing. */
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 0);
    size_t len;
    char small[8];
    CHECK_STATUS(ect_step_meta_encode(m, small, sizeof(small), &len), ECT_ERR_OVERFLOW);
    ect_step_meta_destroy(m);
}

static void
test_meta_decode_rejects_blocks_outside_region(void)
{
    ect_step_meta_t *m = sample_meta(), *d = NULL;
    size_t len;
    void *buf = encode_meta(m, &len);
    /* Highest block is 24 (20 + 5 - 1): a region of 24 blocks is too small. */
    CHECK_STATUS(ect_step_meta_decode(buf, len, 24, &d), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "outside the region");
    CHECK(d == NULL);
    CHECK_OK(ect_step_meta_decode(buf, len, 25, &d));
    ect_step_meta_destroy(d);
    free(buf);
    ect_step_meta_destroy(m);
}

static void
test_meta_decode_rejects_every_truncation(void)
{
    ect_step_meta_t *m = sample_meta();
    size_t len;
    uint8_t *buf = encode_meta(m, &len);
    for (size_t cut = 0; cut < len; cut++) {
        ect_step_meta_t *d = NULL;
        ect_status_t st = ect_step_meta_decode(buf, cut, 64, &d);
        CHECK_MSG(st == ECT_ERR_PARSE, "cut at %zu: status %d", cut, st);
        CHECK(d == NULL);
    }
    free(buf);
    ect_step_meta_destroy(m);
}

static void
test_meta_decode_rejects_trailing_and_garbage(void)
{
    ect_step_meta_t *m = sample_meta(), *d = NULL;
    size_t len;
    uint8_t *buf = encode_meta(m, &len);
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, buf, len);
    longer[len] = 0;
    CHECK_STATUS(ect_step_meta_decode(longer, len + 1, 64, &d), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "trailing");
    /* A report is not metadata. */
    CHECK_STATUS(ect_step_meta_decode("ECTR\1\0\0\0\0\0\0\0\0\0\0\0", 16, 64, &d), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "magic");
    /* Future layout version. */
    buf[4] = 2;
    CHECK_STATUS(ect_step_meta_decode(buf, len, 64, &d), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "version");
    /* Flip every byte of the body in turn: never a crash, and a success
     * still satisfies the value's invariants. */
    buf[4] = 1;
    for (size_t i = 16; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            if (ect_step_meta_decode(buf, len, 64, &d) == ECT_OK) {
                for (size_t k = 0; k < ect_step_meta_n_saves(d); k++) {
                    const ect_step_item_t *it = ect_step_meta_save(d, k);
                    for (size_t r = 0; r < it->n_runs; r++)
                        CHECK(it->runs[r].first + it->runs[r].count <= 64);
                }
                ect_step_meta_destroy(d);
                d = NULL;
            }
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    free(longer);
    free(buf);
    ect_step_meta_destroy(m);
}

static void
test_meta_decode_rejects_overlapping_saves_across_keys(void)
{
    /* Build bytes by hand: two saves that share block 5. */
    ect_step_meta_t *m;
    CHECK_OK(ect_step_meta_create(&m));
    ect_run_t a = {4, 2}, b = {9, 1};
    CHECK_OK(ect_step_meta_add_save(m, "a", &a, 1));
    CHECK_OK(ect_step_meta_add_save(m, "b", &b, 1));
    size_t len;
    uint8_t *buf = encode_meta(m, &len);
    /* b's run "first" is the last 16 bytes' first 8: set it to 5. */
    buf[len - 16] = 5;
    ect_step_meta_t *d = NULL;
    CHECK_STATUS(ect_step_meta_decode(buf, len, 64, &d), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "overlap");
    free(buf);
    ect_step_meta_destroy(m);
}

static void *
encode_report(const ect_step_report_t *r, size_t *len_p)
{
    size_t cap = ect_step_report_encoded_size(r);
    void *buf = malloc(cap);
    CHECK_OK(ect_step_report_encode(r, buf, cap, len_p));
    return buf;
}

static void
test_report_round_trip_and_concatenation_of_ranks(void)
{
    ect_step_report_t *r0, *r1, *d;
    CHECK_OK(ect_step_report_create(&r0));
    CHECK_OK(ect_step_report_create(&r1));
    CHECK_OK(ect_step_report_add_save(r0, "saved-by-rank0"));
    CHECK_OK(ect_step_report_add_load(r0, 7));
    CHECK_OK(ect_step_report_add_load(r1, 7));
    CHECK_OK(ect_step_report_add_failed_save(r1, "lost-on-rank1"));
    ect_step_copy_stats_t s = {
        .save_bytes = 100, .save_ns = 5, .save_batches = 1, .load_bytes = 40};
    ect_step_report_add_stats(r0, &s);
    ect_step_report_add_stats(r1, &s);
    size_t l0, l1;
    uint8_t *b0 = encode_report(r0, &l0), *b1 = encode_report(r1, &l1);
    uint8_t *both = malloc(l0 + l1);
    memcpy(both, b0, l0);
    memcpy(both + l0, b1, l1);
    CHECK_OK(ect_step_report_decode(both, l0 + l1, &d));
    CHECK_EQ_U64(ect_step_report_n_saves(d), 1);
    CHECK_STR_EQ(ect_step_report_save(d, 0), "saved-by-rank0");
    /* Each rank contributes its own copy of the transfer id. */
    CHECK_EQ_U64(ect_step_report_n_loads(d), 2);
    CHECK_EQ_U64(ect_step_report_load(d, 0), 7);
    CHECK_EQ_U64(ect_step_report_load(d, 1), 7);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(d), 1);
    CHECK_STR_EQ(ect_step_report_failed_save(d, 0), "lost-on-rank1");
    CHECK_EQ_U64(ect_step_report_stats(d)->save_bytes, 200);
    CHECK_EQ_U64(ect_step_report_stats(d)->load_bytes, 80);
    ect_step_report_destroy(d);
    /* Empty input is an empty report. */
    CHECK_OK(ect_step_report_decode(NULL, 0, &d));
    CHECK_EQ_U64(ect_step_report_n_saves(d) + ect_step_report_n_loads(d), 0);
    ect_step_report_destroy(d);
    free(b0);
    free(b1);
    free(both);
    ect_step_report_destroy(r0);
    ect_step_report_destroy(r1);
}

static void
test_report_decode_rejects_truncation_and_absurd_counts(void)
{
    ect_step_report_t *r, *d = NULL;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_save(r, "k1"));
    CHECK_OK(ect_step_report_add_load(r, 3));
    size_t len;
    uint8_t *buf = encode_report(r, &len);
    for (size_t cut = 1; cut < len; cut++)
        CHECK_STATUS(ect_step_report_decode(buf, cut, &d), ECT_ERR_PARSE);
    /* n_loads = 0xffffffff with nothing behind it (header 16, n_saves 4). */
    buf[20] = buf[21] = buf[22] = buf[23] = 0xff;
    CHECK_STATUS(ect_step_report_decode(buf, len, &d), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "cannot fit");
    CHECK(d == NULL);
    free(buf);
    ect_step_report_destroy(r);
}

/* A report cleared and refilled keeps nothing of before (keys, loads,
 * stats); decode_into leaves exactly the decoded reports, or nothing. */
static void
test_report_clear_and_decode_into_reuse_the_report(void)
{
    ect_step_report_t *r, *d;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_create(&d));
    ect_step_copy_stats_t s = {.save_bytes = 10, .load_ns = 3};
    char key[200];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 40 * (round + 1); i++) {
            snprintf(key, sizeof(key), "r%d-%d-%0*d", round, i, i * 3 % 150, 0);
            CHECK_OK(i % 4 ? ect_step_report_add_save(r, key)
                           : ect_step_report_add_failed_save(r, key));
            CHECK_OK(ect_step_report_add_load(r, (uint64_t)(round * 1000 + i)));
        }
        ect_step_report_add_stats(r, &s);
        size_t len;
        uint8_t *buf = encode_report(r, &len);
        CHECK_OK(ect_step_report_decode_into(d, buf, len));
        CHECK_EQ_U64(ect_step_report_n_loads(d), 40 * (round + 1));
        CHECK_EQ_U64(ect_step_report_load(d, 0), round * 1000);
        CHECK_EQ_U64(ect_step_report_n_saves(d), 30 * (round + 1));
        snprintf(key, sizeof(key), "r%d-%d-%0*d", round, 1, 3, 0);
        CHECK_STR_EQ(ect_step_report_save(d, 0), key);
        CHECK_EQ_U64(ect_step_report_stats(d)->save_bytes, 10);
        CHECK_STATUS(ect_step_report_decode_into(d, buf, len - 1), ECT_ERR_PARSE);
        CHECK_EQ_U64(ect_step_report_n_saves(d) + ect_step_report_n_loads(d) +
                         ect_step_report_n_failed_saves(d),
                     0);
        CHECK_EQ_U64(ect_step_report_stats(d)->save_bytes, 0);
        free(buf);
        ect_step_report_clear(r);
        CHECK_EQ_U64(ect_step_report_n_saves(r) + ect_step_report_n_loads(r) +
                         ect_step_report_n_failed_saves(r),
                     0);
        CHECK_EQ_U64(ect_step_report_stats(r)->save_bytes, 0);
        CHECK(ect_step_report_save(r, 0) == NULL);
    }
    CHECK_STATUS(ect_step_report_decode_into(NULL, NULL, 0), ECT_ERR_INVALID_ARG);
    ect_step_report_clear(NULL);
    ect_step_report_destroy(r);
    ect_step_report_destroy(d);
}

/* What step.h promises for NULL reports, indexes out of range, refused
 * additions and a buffer too small. */
static void
test_report_contracts_at_the_edges(void)
{
    CHECK_EQ_U64(ect_step_report_n_saves(NULL) + ect_step_report_n_loads(NULL) +
                     ect_step_report_n_failed_saves(NULL) + ect_step_report_encoded_size(NULL),
                 0);
    CHECK(ect_step_report_save(NULL, 0) == NULL && ect_step_report_stats(NULL) == NULL);
    ect_step_report_add_stats(NULL, NULL);
    CHECK_STATUS(ect_step_report_create(NULL), ECT_ERR_INVALID_ARG);

    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_save(r, "a"));
    CHECK_OK(ect_step_report_add_load(r, 9));
    CHECK(ect_step_report_save(r, 1) == NULL && ect_step_report_failed_save(r, 0) == NULL);
    CHECK_EQ_U64(ect_step_report_load(r, 1), 0);
    /* A refused key changes nothing and says which key is wrong. */
    char long_key[ECT_KEY_MAX + 2];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    CHECK_STATUS(ect_step_report_add_save(r, long_key), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_step_report_add_failed_save(r, ""), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_step_report_add_save(r, NULL), ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 1);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(r), 0);
    /* Too small a buffer: OVERFLOW, not one byte written. */
    size_t need = ect_step_report_encoded_size(r), len = 0;
    uint8_t *buf = malloc(need);
    CHECK(buf != NULL);
    memset(buf, 0xab, need);
    CHECK_STATUS(ect_step_report_encode(r, buf, need - 1, &len), ECT_ERR_OVERFLOW);
    for (size_t i = 0; i < need; i++)
        CHECK(buf[i] == 0xab);
    CHECK_OK(ect_step_report_encode(r, buf, need, &len));
    CHECK_EQ_U64(len, need);
    /* Merging into itself doubles every list. */
    CHECK_OK(ect_step_report_merge(r, r));
    CHECK_EQ_U64(ect_step_report_n_saves(r), 2);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    CHECK_STATUS(ect_step_report_merge(r, NULL), ECT_ERR_INVALID_ARG);
    free(buf);
    ect_step_report_destroy(r);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_meta_round_trip_keeps_saves_loads_and_runs),
    ECT_CASE(test_meta_round_trip_of_short_and_long_run_lists),
    ECT_CASE(test_meta_empty_round_trip),
    ECT_CASE(test_meta_many_items_find_each),
    ECT_CASE(test_meta_clear_and_decode_into_reuse_the_value),
    ECT_CASE(test_meta_add_rejects_caller_errors),
    ECT_CASE(test_meta_decode_rejects_blocks_outside_region),
    ECT_CASE(test_meta_decode_rejects_every_truncation),
    ECT_CASE(test_meta_decode_rejects_trailing_and_garbage),
    ECT_CASE(test_meta_decode_rejects_overlapping_saves_across_keys),
    ECT_CASE(test_report_round_trip_and_concatenation_of_ranks),
    ECT_CASE(test_report_decode_rejects_truncation_and_absurd_counts),
    ECT_CASE(test_report_clear_and_decode_into_reuse_the_report),
    ECT_CASE(test_report_contracts_at_the_edges),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
