/*
 * The CPU copy engine's landed callback and its help call (src/copy/cpu.h:
 * ect__copy_cpu_submit_notify, ect__copy_cpu_help), which let a caller that
 * must not sleep on a copy (a same-host read's session thread) copy its own
 * bytes and be told when the rest lands.  Real threads and real memory; no
 * case asserts timing: batches are kept in flight with ect__copy_cpu_hold,
 * and where the outcome depends on scheduling, every outcome is checked
 * against the contract.  Meant for the thread sanitizer build as much as
 * the plain one: whoever learns "landed" from the callback must see the
 * bytes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/ectier.h>

#include "copy/cpu.h"
#include "harness.h"
#include "support/util.h"

/* What one batch's callback saw. */
struct note {
    int calls;        /* atomic */
    pthread_t thread; /* the thread of the (last) call */
};

static void
on_landed(void *arg)
{
    struct note *n = arg;
    n->thread = pthread_self();
    __atomic_add_fetch(&n->calls, 1, __ATOMIC_RELEASE);
}

static int
calls_of(struct note *n)
{
    return __atomic_load_n(&n->calls, __ATOMIC_ACQUIRE);
}

static unsigned char *
random_bytes(size_t len, unsigned seed)
{
    unsigned char *p = malloc(len);
    CHECK(p != NULL);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len; i++) {
        p[i] = (unsigned char)(ts_xorshift64(&x) % 255 + 1); /* never 0 */
    }
    return p;
}

static unsigned char *
zeroed(size_t len)
{
    unsigned char *p = calloc(1, len);
    CHECK(p != NULL);
    return p;
}

/* Every batch goes to the copy threads (nothing inline), in pieces. */
static ect_copy_engine_t *
handoff_engine(unsigned threads, unsigned spin_us)
{
    ect_copy_cpu_params_t p = {.threads = threads,
                               .split_bytes = 64 * 1024,
                               .spin_us = spin_us,
                               .inline_bytes = ECT_COPY_CPU_NO_INLINE};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    return e;
}

/* The copy threads land a batch: the callback runs once, off the caller's
 * thread, and every byte is there for whoever sees it. */
static void
test_the_callback_runs_once_when_copy_threads_land_the_batch(void)
{
    enum { LEN = 4 << 20 };
    unsigned char *src = random_bytes(LEN, 1), *dst = zeroed(LEN);
    ect_copy_engine_t *e = handoff_engine(2, 50);
    struct note n = {0};
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    uint64_t ticket;
    CHECK_OK(ect__copy_cpu_submit_notify(e, &batch, on_landed, &n, &ticket));
    for (int i = 0; i < 10000 && calls_of(&n) == 0; i++)
        ts_sleep_ms(1);
    CHECK_EQ_INT(calls_of(&n), 1);
    CHECK(!pthread_equal(n.thread, pthread_self()));
    CHECK(memcmp(dst, src, LEN) == 0);
    /* The ticket is still in flight until the owner retires it. */
    CHECK_OK(ect_copy_engine_query(e, ticket));
    CHECK_STATUS(ect_copy_engine_query(e, ticket), ECT_ERR_NOT_FOUND);
    ts_sleep_ms(20);
    CHECK_EQ_INT(calls_of(&n), 1);
    ect_copy_engine_destroy(e);
    free(src);
    free(dst);
}

/* With the copy threads held, help copies every piece on the caller: the
 * batch has landed when it returns, the callback ran on this thread, and
 * the ticket is left for query to retire. */
static void
test_help_copies_every_untaken_piece_on_the_caller(void)
{
    enum { LEN = 3 << 20 };
    unsigned char *src = random_bytes(LEN, 2), *dst = zeroed(LEN);
    ect_copy_engine_t *e = handoff_engine(2, 50);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    struct note n = {0};
    /* Three ops, the middle one empty: pieces cross op boundaries. */
    ect_copy_op_t ops[3] = {
        {dst, src, LEN / 3}, {dst, src, 0}, {dst + LEN / 3, src + LEN / 3, LEN - LEN / 3}};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = ops, .n_ops = 3};
    uint64_t ticket;
    struct ect__copy_cpu_stats before, after;
    CHECK_OK(ect__copy_cpu_stats(e, &before));
    CHECK_OK(ect__copy_cpu_submit_notify(e, &batch, on_landed, &n, &ticket));
    CHECK_EQ_INT(calls_of(&n), 0);
    CHECK_STATUS(ect_copy_engine_query(e, ticket), ECT_ERR_BUSY);
    CHECK_OK(ect__copy_cpu_help(e, ticket));
    CHECK_EQ_INT(calls_of(&n), 1);
    CHECK(pthread_equal(n.thread, pthread_self()));
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK_OK(ect__copy_cpu_stats(e, &after));
    CHECK(after.pieces_by_waiters - before.pieces_by_waiters >= 2);
    CHECK_EQ_U64(after.pieces_by_threads, before.pieces_by_threads);
    /* Helping a landed batch changes nothing and still does not retire. */
    CHECK_OK(ect__copy_cpu_help(e, ticket));
    CHECK_EQ_INT(calls_of(&n), 1);
    CHECK_OK(ect_copy_engine_query(e, ticket));
    CHECK_STATUS(ect__copy_cpu_help(e, ticket), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect__copy_cpu_hold(e, false));
    ect_copy_engine_destroy(e);
    free(src);
    free(dst);
}

/* Copy threads and the caller share a large batch.  Whether help finds it
 * landed (OK) or leaves the last pieces to the threads (BUSY, possible with
 * polling off) depends on scheduling: either way the callback runs exactly
 * once and the bytes are all there when it has. */
static void
test_help_shares_a_batch_with_the_copy_threads(void)
{
    enum { LEN = 16 << 20, ROUNDS = 6 };
    unsigned char *src = random_bytes(LEN, 3), *dst = zeroed(LEN);
    for (unsigned spin = 0; spin < 2; spin++) {
        ect_copy_engine_t *e = handoff_engine(2, spin ? 50 : ECT_COPY_CPU_NO_SPIN);
        for (int round = 0; round < ROUNDS; round++) {
            memset(dst, 0, LEN);
            struct note n = {0};
            ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
            ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
            uint64_t ticket;
            CHECK_OK(ect__copy_cpu_submit_notify(e, &batch, on_landed, &n, &ticket));
            ect_status_t st = ect__copy_cpu_help(e, ticket);
            CHECK(st == ECT_OK || st == ECT_ERR_BUSY);
            /* OK: landed, though the thread that copied the last byte may
             * not have made its call yet. */
            for (int i = 0; i < 10000 && calls_of(&n) == 0; i++)
                ts_sleep_ms(1);
            CHECK_EQ_INT(calls_of(&n), 1);
            CHECK(memcmp(dst, src, LEN) == 0);
            CHECK_OK(ect_copy_engine_query(e, ticket));
        }
        ect_copy_engine_destroy(e);
    }
    free(src);
    free(dst);
}

/* A batch copied inside submit, and an empty one, have landed when submit
 * returns: their callbacks have run, on the caller. */
static void
test_inline_and_empty_batches_call_back_inside_submit(void)
{
    enum { LEN = 10000 };
    unsigned char *src = random_bytes(LEN, 4), *dst = zeroed(LEN);
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(NULL, &e)); /* 64 KiB and less: inline */
    struct note small = {0}, empty = {0};
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    uint64_t t1, t2;
    CHECK_OK(ect__copy_cpu_submit_notify(e, &batch, on_landed, &small, &t1));
    CHECK_EQ_INT(calls_of(&small), 1);
    CHECK(pthread_equal(small.thread, pthread_self()));
    CHECK(memcmp(dst, src, LEN) == 0);
    ect_copy_batch_t none = {.dir = ECT_COPY_LOAD, .ops = NULL, .n_ops = 0};
    CHECK_OK(ect__copy_cpu_submit_notify(e, &none, on_landed, &empty, &t2));
    CHECK_EQ_INT(calls_of(&empty), 1);
    CHECK_OK(ect_copy_engine_query(e, t1));
    CHECK_OK(ect_copy_engine_query(e, t2));
    ect_copy_engine_destroy(e);
    free(src);
    free(dst);
}

/* Destroy lets held batches land: every callback has run when it returns. */
static void
test_destroy_runs_the_callback_of_every_batch_in_flight(void)
{
    enum { N = 5, LEN = 1 << 20 };
    unsigned char *src = random_bytes(LEN, 5), *dst[N];
    struct note n[N];
    memset(n, 0, sizeof(n));
    ect_copy_engine_t *e = handoff_engine(2, 50);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    for (int i = 0; i < N; i++) {
        dst[i] = zeroed(LEN);
        ect_copy_op_t op = {.dst = dst[i], .src = src, .len = LEN};
        ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
        uint64_t ticket;
        CHECK_OK(ect__copy_cpu_submit_notify(e, &batch, on_landed, &n[i], &ticket));
    }
    for (int i = 0; i < N; i++)
        CHECK_EQ_INT(calls_of(&n[i]), 0);
    ect_copy_engine_destroy(e);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(calls_of(&n[i]), 1);
        CHECK(memcmp(dst[i], src, LEN) == 0);
        free(dst[i]);
    }
    free(src);
}

static void
test_bad_arguments_are_refused_without_a_batch(void)
{
    unsigned char a[16] = {1}, b[16];
    ect_copy_op_t op = {.dst = b, .src = a, .len = sizeof(a)};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    struct note n = {0};
    uint64_t ticket = 0;
    CHECK_STATUS(ect__copy_cpu_submit_notify(NULL, &batch, on_landed, &n, &ticket),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_cpu_help(NULL, 1), ECT_ERR_INVALID_ARG);
    ect_copy_engine_t *e = handoff_engine(1, 50);
    CHECK_STATUS(ect__copy_cpu_submit_notify(e, &batch, NULL, &n, &ticket), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_cpu_help(e, 12345), ECT_ERR_NOT_FOUND);
    /* A batch submit refuses (overlapping ranges) never calls back. */
    ect_copy_op_t overlap = {.dst = a + 1, .src = a, .len = 8};
    ect_copy_batch_t bad = {.dir = ECT_COPY_LOAD, .ops = &overlap, .n_ops = 1};
    CHECK(ect__copy_cpu_submit_notify(e, &bad, on_landed, &n, &ticket) != ECT_OK);
    ect_copy_engine_destroy(e);
    CHECK_EQ_INT(calls_of(&n), 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_the_callback_runs_once_when_copy_threads_land_the_batch),
    ECT_CASE(test_help_copies_every_untaken_piece_on_the_caller),
    ECT_CASE(test_help_shares_a_batch_with_the_copy_threads),
    ECT_CASE(test_inline_and_empty_batches_call_back_inside_submit),
    ECT_CASE(test_destroy_runs_the_callback_of_every_batch_in_flight),
    ECT_CASE(test_bad_arguments_are_refused_without_a_batch),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
