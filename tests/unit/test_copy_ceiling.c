/*
 * The benchmarks' CPU copy ceiling (bench/copy_ceiling.c, bench.h): every
 * way it times must copy every byte, or a fast wrong copy would pass for
 * the machine's limit; the targets' ceiling never picks a way whose helpers
 * slept, and the no-polling one picks nothing else but one thread.  Real
 * threads and real copies; no figure is checked for speed (timing belongs
 * to the benchmarks), only what the ceiling reports about its own ways.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "copy/ntcopy.h"
#include "harness.h"

/* What the prepare hook sees: before each way copies, it checks that the
 * previous way left dst equal to src, then clears dst. */
struct verify {
    const unsigned char *src;
    unsigned char *dst;
    size_t len;
    unsigned copies_checked, copies_wrong;
    int armed; /* a way has copied since the last check */
};

static void
verify_then_clear(void *arg)
{
    struct verify *v = arg;
    if (v->armed) {
        v->copies_checked++;
        if (memcmp(v->dst, v->src, v->len) != 0)
            v->copies_wrong++;
    }
    memset(v->dst, 0, v->len);
    v->armed = 1;
}

/* Two zeroed buffers of len bytes and a ceiling of `threads` threads;
 * fixture_free releases them. */
struct fixture {
    unsigned char *src, *dst;
    size_t len;
    ect_bench_ceiling_t *c;
};

static struct fixture
fixture_make(unsigned threads, size_t len)
{
    struct fixture f = {calloc(1, len), calloc(1, len), len, ect_bench_ceiling_create(threads)};
    CHECK(f.src != NULL && f.dst != NULL && f.c != NULL);
    return f;
}

static void
fixture_free(struct fixture *f)
{
    ect_bench_ceiling_destroy(f->c);
    free(f->src);
    free(f->dst);
}

/* Three ops of unequal lengths over one buffer pair, so that shares and
 * pieces cross op boundaries at odd places. */
static void
three_ops(unsigned char *dst, const unsigned char *src, size_t len, ect_copy_op_t ops[3])
{
    size_t a = len / 3 + 1, b = len / 2 + 7;
    ops[0] = (ect_copy_op_t){dst, src, a};
    ops[1] = (ect_copy_op_t){dst + a, src + a, b - a};
    ops[2] = (ect_copy_op_t){dst + b, src + b, len - b};
}

static void
every_way_copies_every_byte(unsigned threads, size_t len)
{
    struct fixture f = fixture_make(threads, len);
    for (size_t i = 0; i < len; i++)
        f.src[i] = (unsigned char)(i * 131 + (i >> 12) + 1);
    ect_copy_op_t ops[3];
    three_ops(f.dst, f.src, len, ops);
    ect_bench_ceiling_add_asleep(f.c);
    struct verify v = {.src = f.src, .dst = f.dst, .len = len};
    enum { SAMPLES = 3 };
    for (int s = 0; s < SAMPLES; s++)
        CHECK_EQ_INT(ect_bench_ceiling_sample(f.c, ops, 3, verify_then_clear, &v), 0);
    verify_then_clear(&v); /* the last way's copy */
    CHECK_MSG(v.copies_wrong == 0, "%u of %u copies of %zu bytes on %u threads were wrong",
              v.copies_wrong, v.copies_checked, len, threads);
    /* Each sample times every way once: a way for each kernel (memcpy, and
     * NT stores and rep movsb where built) on 1 thread, and with more
     * threads one in equal shares, one in pieces and one with sleeping
     * helpers too. */
    unsigned kernels = 1u + (ect__copy_nt_available() != 0) + (ect__copy_movsb_available() != 0);
    CHECK_EQ_INT(v.copies_checked % SAMPLES, 0);
    CHECK_EQ_INT(v.copies_checked / SAMPLES, kernels * (threads > 1 ? 4u : 1u));
    fixture_free(&f);
}

static void
test_every_way_copies_every_byte_on_one_thread(void)
{
    every_way_copies_every_byte(1, 1000);
    every_way_copies_every_byte(1, (1u << 20) + 4097);
}

static void
test_every_way_copies_every_byte_with_helpers_spinning_or_woken(void)
{
    /* Below one piece, a few pieces, and many pieces a thread. */
    static const size_t sizes[] = {1000, (64u << 10) + 1, (1u << 20) + 4097, (5u << 20) + 333};
    for (unsigned threads = 2; threads <= 3; threads++)
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
            every_way_copies_every_byte(threads, sizes[i]);
}

static void
test_the_targets_ceiling_never_picks_a_way_whose_helpers_slept(void)
{
    struct fixture f = fixture_make(3, (2u << 20) + 11);
    ect_copy_op_t ops[3];
    three_ops(f.dst, f.src, f.len, ops);
    CHECK(strstr(ect_bench_ceiling_describe(f.c), "no thread polling") == NULL);
    ect_bench_ceiling_add_asleep(f.c);
    CHECK_CONTAINS(ect_bench_ceiling_describe(f.c), "no thread polling");
    for (int s = 0; s < 3; s++)
        CHECK_EQ_INT(ect_bench_ceiling_sample(f.c, ops, 3, NULL, NULL), 0);
    const char *way = NULL, *asleep_way = NULL;
    double gbps = ect_bench_ceiling_gbps(f.c, (double)f.len, &way);
    double asleep = ect_bench_ceiling_asleep_gbps(f.c, (double)f.len, &asleep_way);
    CHECK(gbps > 0 && asleep > 0);
    CHECK_MSG(strstr(way, "helpers woken") == NULL, "the targets' ceiling picked \"%s\"", way);
    CHECK_MSG(strstr(asleep_way, "helpers woken") != NULL || strstr(asleep_way, "1 thread") != NULL,
              "the no-polling ceiling picked \"%s\"", asleep_way);
    /* The helpers' first pieces: a figure exactly when some helper took one. */
    size_t n;
    double mean, median = ect_bench_ceiling_helper_start_us(f.c, &n, &mean);
    if (n == 0)
        CHECK(median == -1 && mean == -1);
    else
        CHECK(median >= 0 && mean >= 0);
    ect_bench_ceiling_reset(f.c);
    median = ect_bench_ceiling_helper_start_us(f.c, &n, &mean);
    CHECK(n == 0 && median == -1 && mean == -1);
    fixture_free(&f);
}

static void
test_a_one_thread_ceiling_has_one_answer(void)
{
    /* No helpers to wake: adding the no-polling ways adds none, and both
     * ceilings are the best one-thread way, the same figure. */
    struct fixture f = fixture_make(1, 256u << 10);
    ect_copy_op_t op = {f.dst, f.src, f.len};
    ect_bench_ceiling_add_asleep(f.c);
    CHECK(strstr(ect_bench_ceiling_describe(f.c), "no thread polling") == NULL);
    for (int s = 0; s < 3; s++)
        CHECK_EQ_INT(ect_bench_ceiling_sample(f.c, &op, 1, NULL, NULL), 0);
    const char *way, *asleep_way;
    double gbps = ect_bench_ceiling_gbps(f.c, (double)f.len, &way);
    CHECK(gbps > 0);
    CHECK(ect_bench_ceiling_asleep_gbps(f.c, (double)f.len, &asleep_way) == gbps);
    CHECK_STR_EQ(asleep_way, way);
    size_t n;
    double mean;
    CHECK(ect_bench_ceiling_helper_start_us(f.c, &n, &mean) == -1 && n == 0);
    fixture_free(&f);
}

static void
test_no_polling_ways_cannot_be_added_once_sampled(void)
{
    /* Their sample arrays would be missing: the call leaves the ceiling as
     * it was. */
    struct fixture f = fixture_make(2, 64u << 10);
    ect_copy_op_t op = {f.dst, f.src, f.len};
    CHECK_EQ_INT(ect_bench_ceiling_sample(f.c, &op, 1, NULL, NULL), 0);
    ect_bench_ceiling_add_asleep(f.c);
    CHECK(strstr(ect_bench_ceiling_describe(f.c), "no thread polling") == NULL);
    CHECK_EQ_INT(ect_bench_ceiling_sample(f.c, &op, 1, NULL, NULL), 0);
    const char *asleep_way;
    CHECK(ect_bench_ceiling_asleep_gbps(f.c, (double)f.len, &asleep_way) > 0);
    CHECK_CONTAINS(asleep_way, "1 thread");
    fixture_free(&f);
}

static void
test_the_winners_copy_again_every_byte(void)
{
    /* copy_best and copy_asleep_best repeat the winners of the last
     * gbps / asleep_gbps on new ops (bench step's and bench xport's copies
     * into blocks as old as a save's): each must copy every byte. */
    for (unsigned threads = 1; threads <= 3; threads++) {
        struct fixture f = fixture_make(threads, (3u << 20) + 77);
        for (size_t i = 0; i < f.len; i++)
            f.src[i] = (unsigned char)(i * 7 + (i >> 9) + 3);
        ect_copy_op_t ops[3];
        three_ops(f.dst, f.src, f.len, ops);
        ect_bench_ceiling_add_asleep(f.c);
        for (int s = 0; s < 3; s++)
            CHECK_EQ_INT(ect_bench_ceiling_sample(f.c, ops, 3, NULL, NULL), 0);
        CHECK(ect_bench_ceiling_gbps(f.c, (double)f.len, NULL) > 0);
        CHECK(ect_bench_ceiling_asleep_gbps(f.c, (double)f.len, NULL) > 0);
        for (int asleep = 0; asleep < 2; asleep++) {
            memset(f.dst, 0, f.len);
            double t = asleep ? ect_bench_ceiling_copy_asleep_best(f.c, ops, 3)
                              : ect_bench_ceiling_copy_best(f.c, ops, 3);
            CHECK(t > 0);
            CHECK_MSG(memcmp(f.dst, f.src, f.len) == 0,
                      "the %s winner on %u threads left the copy wrong",
                      asleep ? "no-polling" : "targets'", threads);
        }
        fixture_free(&f);
    }
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_the_winners_copy_again_every_byte),
    ECT_CASE(test_every_way_copies_every_byte_on_one_thread),
    ECT_CASE(test_every_way_copies_every_byte_with_helpers_spinning_or_woken),
    ECT_CASE(test_the_targets_ceiling_never_picks_a_way_whose_helpers_slept),
    ECT_CASE(test_a_one_thread_ceiling_has_one_answer),
    ECT_CASE(test_no_polling_ways_cannot_be_added_once_sampled),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
