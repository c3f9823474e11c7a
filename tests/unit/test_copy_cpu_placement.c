/*
 * Where the CPU copy engine (src/copy/cpu.c) copies a batch and how: on
 * the submitting thread or handed to its copy threads, with polling or
 * sleeping threads, by which kernel, and what its counters say about it.
 * The learned choices (copy/learn.h) are driven by real timings, so the
 * cases assert what a choice must do whatever the machine measured (both
 * ways tried, every batch counted once, every byte landed), never which
 * way won.  Data movement through plans and tickets is test_copy_cpu.c.
 */
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "copy/cpu.h"
#include "copy/cpu_internal.h"
#include "copy/learn.h"
#include "copy/ntcopy.h"
#include "harness.h"
#include "support/util.h"

#define POISON 0xEE

static ect_copy_engine_t *
two_thread_engine(void)
{
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&(ect_copy_cpu_params_t){.threads = 2}, &e));
    return e;
}

static void
test_small_batch_lands_inside_submit_unless_held(void)
{
    enum { LEN = 48 * 1024 }; /* below the 64 KiB default */
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN + 1);
    ts_fill_nonzero(src, LEN, 51);
    memset(dst, 0, LEN + 1);
    ect_copy_engine_t *e = two_thread_engine();
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    /* No wait, no sleep: the bytes are there and the first query retires. */
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK(dst[LEN] == 0);
    CHECK_OK(ect_copy_engine_query(e, t));
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches, 1);
    CHECK_EQ_U64(st.batches_inline, 1);
    /* Held, the same batch stays in flight: tests rely on that. */
    memset(dst, 0, LEN);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    CHECK(ts_all_bytes_are(dst, LEN, 0));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches_inline, 1);
    ect_copy_engine_destroy(e);

    /* With inline copies turned off every batch goes to the threads. */
    ect_copy_cpu_params_t params = {.inline_bytes = ECT_COPY_CPU_NO_INLINE};
    CHECK_OK(ect_copy_engine_create_cpu(&params, &e));
    CHECK_OK(ect__copy_cpu_hold(e, true));
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    CHECK_OK(ect__copy_cpu_hold(e, false));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches_inline, 0);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

/* Submit batch, poll it until it lands (never waiting in the engine, so
 * only copy threads copy it), check its bytes. */
static void
hand_off_and_poll(ect_copy_engine_t *e, const ect_copy_batch_t *batch)
{
    uint64_t t;
    memset(batch->ops[0].dst, 0, batch->ops[0].len);
    CHECK_OK(ect_copy_engine_submit(e, batch, &t));
    ect_status_t s;
    while ((s = ect_copy_engine_query(e, t)) == ECT_ERR_BUSY)
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    CHECK_OK(s);
    CHECK(memcmp(batch->ops[0].dst, batch->ops[0].src, batch->ops[0].len) == 0);
}

static void
test_copy_spin_setting_decides_whether_copy_threads_poll(void)
{
    ect_config_t cfg = {.copy_threads = 3, .copy_spin_us = 0};
    ect_copy_cpu_params_t p = ect__copy_cpu_params_of(&cfg);
    CHECK_EQ_INT(p.threads, 3);
    CHECK_EQ_INT(p.spin_us, ECT_COPY_CPU_NO_SPIN); /* 0 in the config: never poll */
    cfg.copy_spin_us = 100000;
    CHECK_EQ_INT(ect__copy_cpu_params_of(&cfg).spin_us, 100000);

    /* A thread that finished a batch polls for up to copy_spin_us: the next
     * batch, 10 ms later, finds it polling; with 0 it sleeps at once. */
    enum { LEN = 256 * 1024 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 57);
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    for (int spin = 0; spin < 2; spin++) {
        cfg.copy_spin_us = spin ? 100000 : 0;
        ect_copy_cpu_params_t params = ect__copy_cpu_params_of(&cfg);
        params.inline_bytes = ECT_COPY_CPU_NO_INLINE;
        ect_copy_engine_t *e;
        CHECK_OK(ect_copy_engine_create_cpu(&params, &e));
        hand_off_and_poll(e, &batch);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        hand_off_and_poll(e, &batch);
        struct ect__copy_cpu_stats st;
        CHECK_OK(ect__copy_cpu_stats(e, &st));
        if (spin)
            CHECK_MSG(st.polls_found_work >= 1, "%llu polls found work",
                      (unsigned long long)st.polls_found_work);
        else
            CHECK_EQ_U64(st.polls_found_work + st.polls_timed_out, 0);
        ect_copy_engine_destroy(e);
    }
    free(dst);
    free(src);
}

static void
test_waiter_shares_a_large_batch_in_pieces(void)
{
    /* 1 MiB is cut into pieces (at least four: two per copier that can run,
     * each at most 256 KiB); with the threads held the waiter copies them
     * all, in order, and every byte lands once. */
    enum { LEN = 1 << 20 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 53);
    memset(dst, 0, LEN);
    ect_copy_engine_t *e = two_thread_engine();
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK(memcmp(dst, src, LEN) == 0);
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_MSG(st.pieces_by_waiters >= 4, "%llu pieces", (unsigned long long)st.pieces_by_waiters);
    CHECK_EQ_U64(st.pieces_by_threads, 0);
    /* Released, the copy threads take pieces of batches nobody waits for,
     * and the hand-off is counted. */
    CHECK_OK(ect__copy_cpu_hold(e, false));
    memset(dst, 0, LEN);
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    ect_status_t s;
    while ((s = ect_copy_engine_query(e, t)) == ECT_ERR_BUSY)
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    CHECK_OK(s);
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK(st.pieces_by_threads >= 4);
    CHECK(st.handoffs_woken + st.handoffs_polling >= 1);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

static void
test_copy_kernels_write_exactly_their_bytes_at_any_alignment(void)
{
    /* The non-temporal kernel copies a 64-byte-aligned middle with vector
     * stores and the ends with memcpy, the string-move kernel one rep movsb:
     * every alignment of both sides and lengths around the step sizes must
     * come out exact, with nothing written outside. */
    enum { MAX = 3 * 4096 + 300 };
    unsigned char *src = ts_xmalloc(MAX + 128), *dst = ts_xmalloc(MAX + 256);
    ts_fill_nonzero(src, MAX + 128, 57);
    static const size_t lens[] = {0, 1, 63, 64, 127, 128, 511, 512, 513, 1000, 4096, 4097, MAX};
    for (size_t so = 0; so < 64; so += 7) {
        for (size_t d0 = 0; d0 < 64; d0 += 5) {
            for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
                size_t n = lens[k];
                for (int kernel = 0; kernel < 2; kernel++) {
                    memset(dst, POISON, MAX + 256);
                    if (kernel == 0) {
                        ect__copy_nt(dst + 64 + d0, src + so, n);
                        ect__copy_nt_fence();
                    } else {
                        ect__copy_movsb(dst + 64 + d0, src + so, n);
                    }
                    CHECK_MSG(memcmp(dst + 64 + d0, src + so, n) == 0,
                              "%s: src+%zu -> dst+%zu, %zu bytes differ", kernel ? "movsb" : "nt",
                              so, d0, n);
                    CHECK_MSG(
                        ts_all_bytes_are(dst, 64 + d0, POISON) &&
                            ts_all_bytes_are(dst + 64 + d0 + n, MAX + 256 - 64 - d0 - n, POISON),
                        "%s: src+%zu -> dst+%zu, %zu bytes wrote outside", kernel ? "movsb" : "nt",
                        so, d0, n);
                }
            }
        }
    }
    free(dst);
    free(src);
}

static void
test_spin_and_inline_params_are_checked(void)
{
    ect_copy_engine_t *e = NULL;
    ect_copy_cpu_params_t too_long = {.spin_us = 100001};
    CHECK_STATUS(ect_copy_engine_create_cpu(&too_long, &e), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "spin_us 100001");
    CHECK(e == NULL);
    /* Never polling is allowed, and batches still land. */
    ect_copy_cpu_params_t never = {.spin_us = ECT_COPY_CPU_NO_SPIN,
                                   .inline_bytes = ECT_COPY_CPU_NO_INLINE};
    CHECK_OK(ect_copy_engine_create_cpu(&never, &e));
    enum { LEN = 600 * 1000 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 59);
    for (int i = 0; i < 20; i++) {
        memset(dst, 0, LEN);
        ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN - (size_t)i * 1000};
        ect_copy_batch_t batch = {.dir = (ect_copy_dir_t)(i & 1), .ops = &op, .n_ops = 1};
        uint64_t t;
        CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
        CHECK_OK(ect_copy_engine_wait(e, t));
        CHECK(memcmp(dst, src, op.len) == 0);
    }
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.polls_found_work + st.polls_timed_out + st.waiter_polls, 0);
    CHECK_STATUS(ect__copy_cpu_stats(NULL, &st), ECT_ERR_INVALID_ARG);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

/* Submit one batch of len bytes (src -> dst) and wait for it; the bytes
 * must arrive. */
static void
copy_and_check(ect_copy_engine_t *e, ect_copy_dir_t dir, unsigned char *dst,
               const unsigned char *src, size_t len)
{
    memset(dst, 0, len);
    ect_copy_op_t op = {.dst = dst, .src = src, .len = len};
    ect_copy_batch_t batch = {.dir = dir, .ops = &op, .n_ops = 1};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK(memcmp(dst, src, len) == 0);
}

/* Wait (at most 5 s) until all `threads` copy threads of e sleep on the
 * work condition. */
static void
wait_until_all_asleep(ect_copy_engine_t *e, unsigned threads)
{
    struct ect__copy_cpu_stats st;
    for (int tries = 0; tries < 5000; tries++) {
        CHECK_OK(ect__copy_cpu_stats(e, &st));
        if (st.threads_asleep == threads)
            return;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    CHECK_MSG(false, "%llu of %u copy threads asleep after 5 s",
              (unsigned long long)st.threads_asleep, threads);
}

static void
test_batches_that_find_the_threads_asleep_are_placed_by_what_they_measured(void)
{
    /* Batches above inline_bytes that find every copy thread asleep: the
     * engine first hands a few off, then copies a few itself, then keeps
     * the faster way per direction and size class while still trying the
     * other now and then.  So over many such batches of one size both ways
     * are taken, every one counted once, and every byte lands (with either
     * kernel). */
    enum { LEN = 1 << 20, N = 48 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 61);
    enum { THREADS = 2 };
    ect_copy_cpu_params_t p = {.threads = THREADS, .spin_us = ECT_COPY_CPU_NO_SPIN};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    for (int i = 0; i < N; i++) {
        /* Every copy thread back asleep first: a hand-off that finds one
         * still on its way to sleep wakes nobody (that thread sees the
         * batch before it sleeps), and on a busy machine under ASan the
         * way back can take milliseconds. */
        wait_until_all_asleep(e, THREADS);
        copy_and_check(e, ECT_COPY_LOAD, dst, src, LEN);
    }
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.learned_inline + st.learned_handoffs, N);
    CHECK_MSG(st.learned_handoffs >= 3 && st.learned_inline >= 3,
              "%llu copied in submit, %llu handed off", (unsigned long long)st.learned_inline,
              (unsigned long long)st.learned_handoffs);
    CHECK_EQ_U64(st.batches_inline, st.learned_inline);
    /* A hand-off found every thread asleep, so it woke one: the signal took
     * the submitter some time, and it is counted. */
    CHECK(st.wakeups >= st.learned_handoffs);
    CHECK(st.wake_signal_ns > 0);
    /* The kernel is learned the same way, where there are two to choose
     * from: each copied a few of the batches. */
    if (ect__copy_nt_available())
        CHECK_MSG(st.batches_nt >= 3 && st.batches - st.batches_nt >= 3,
                  "%llu of %llu batches with non-temporal stores",
                  (unsigned long long)st.batches_nt, (unsigned long long)st.batches);
    else
        CHECK_EQ_U64(st.batches_nt, 0);
    CHECK_EQ_U64(st.saves, 0);
    CHECK_EQ_U64(st.saves_nt, 0);
    /* Every piece of a batch whose kernel is learned is timed, once. */
    CHECK_EQ_U64(st.timed_piece_bytes[1], ect__copy_nt_available() ? (uint64_t)N * LEN : 0);
    CHECK(st.timed_piece_ns[1] > 0 || !ect__copy_nt_available());
    CHECK_EQ_U64(st.timed_piece_bytes[0] + st.timed_piece_ns[0], 0);
    /* Saves learn their kernel apart from loads, and are counted apart. */
    for (int i = 0; i < N; i++) {
        copy_and_check(e, ECT_COPY_SAVE, dst, src, LEN);
        nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
    }
    struct ect__copy_cpu_stats st2;
    CHECK_OK(ect__copy_cpu_stats(e, &st2));
    CHECK_EQ_U64(st2.saves, N);
    CHECK_EQ_U64(st2.timed_piece_bytes[0], ect__copy_nt_available() ? (uint64_t)N * LEN : 0);
    CHECK_EQ_U64(st2.timed_piece_bytes[1], st.timed_piece_bytes[1]);
    CHECK_EQ_U64(st2.batches_nt - st.batches_nt, st2.saves_nt);
    if (ect__copy_nt_available())
        CHECK_MSG(st2.saves_nt >= 3 && st2.saves - st2.saves_nt >= 3,
                  "%llu of %llu saves with non-temporal stores", (unsigned long long)st2.saves_nt,
                  (unsigned long long)st2.saves);
    ect_copy_engine_destroy(e);

    /* Turned off, no batch above inline_bytes is copied in submit. */
    p.inline_max_bytes = ECT_COPY_CPU_NO_INLINE;
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    for (int i = 0; i < 8; i++)
        copy_and_check(e, ECT_COPY_SAVE, dst, src, LEN);
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.learned_inline + st.learned_handoffs + st.batches_inline, 0);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

static void
test_a_batch_submitted_while_the_threads_have_work_is_handed_off(void)
{
    /* Copy threads already at work take a batch without a wake-up, so the
     * engine hands it off whatever it measured: a 1 MiB batch submitted
     * behind a 64 MiB one (above inline_max_bytes: always handed off) goes
     * to the queue, and neither is a learned choice. */
    enum { BIG = 64 << 20, SMALL = 1 << 20 };
    unsigned char *src = ts_xmalloc(BIG), *dst = ts_xmalloc(BIG), *dst2 = ts_xmalloc(SMALL);
    ts_fill_nonzero(src, BIG, 63);
    memset(dst, 0, BIG);
    memset(dst2, 0, SMALL);
    ect_copy_engine_t *e = two_thread_engine();
    ect_copy_op_t big = {.dst = dst, .src = src, .len = BIG};
    ect_copy_op_t small = {.dst = dst2, .src = src, .len = SMALL};
    ect_copy_batch_t b1 = {.dir = ECT_COPY_SAVE, .ops = &big, .n_ops = 1};
    ect_copy_batch_t b2 = {.dir = ECT_COPY_SAVE, .ops = &small, .n_ops = 1};
    uint64_t t1, t2;
    CHECK_OK(ect_copy_engine_submit(e, &b1, &t1));
    CHECK_OK(ect_copy_engine_submit(e, &b2, &t2));
    CHECK_OK(ect_copy_engine_wait(e, t2));
    CHECK_OK(ect_copy_engine_wait(e, t1));
    CHECK(memcmp(dst, src, BIG) == 0);
    CHECK(memcmp(dst2, src, SMALL) == 0);
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches, 2);
    CHECK_EQ_U64(st.batches_inline, 0);
    CHECK_EQ_U64(st.learned_inline + st.learned_handoffs, 0);
    ect_copy_engine_destroy(e);
    free(dst2);
    free(dst);
    free(src);
}

static void
test_a_batch_right_behind_another_is_handed_off_as_part_of_a_burst(void)
{
    /* A caller that submits several entries as a batch each, back to back,
     * would see them copied in submit one after another, never sharing the
     * copy threads.  So a batch submitted within spin_us of the previous one is
     * handed off, not a learned choice, even with every thread asleep (the
     * one before, below inline_bytes, was copied in submit and woke
     * nobody); one submitted later is placed by what the engine measured. */
    enum { SMALL = 16 << 10, LEN = 1 << 20, THREADS = 2 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 67);
    struct ect__copy_cpu_stats st;
    ect_copy_engine_t *e = NULL;
    /* A window far longer than the two submits take, even under a sanitizer. */
    ect_copy_cpu_params_t p = {.threads = THREADS, .spin_us = 100000};
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    wait_until_all_asleep(e, THREADS);
    copy_and_check(e, ECT_COPY_SAVE, dst, src, SMALL);
    copy_and_check(e, ECT_COPY_SAVE, dst, src, LEN);
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches, 2);
    CHECK_EQ_U64(st.batches_inline, 1);
    CHECK_EQ_U64(st.learned_inline + st.learned_handoffs, 0);
    CHECK(st.wakeups >= 1);
    ect_copy_engine_destroy(e);

    /* With a 1 ms window, the same pair 20 ms apart is no burst. */
    p.spin_us = 1000;
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    wait_until_all_asleep(e, THREADS);
    copy_and_check(e, ECT_COPY_SAVE, dst, src, SMALL);
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    copy_and_check(e, ECT_COPY_SAVE, dst, src, LEN);
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches, 2);
    CHECK_EQ_U64(st.learned_inline + st.learned_handoffs, 1);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

static void
test_learned_choice_tries_both_ways_then_keeps_the_faster(void)
{
    /* The rule itself (copy/learn.h): `first` until it has its samples,
     * then the other, then the faster by its recent median, and the slower
     * once in every ECT__LEARN_EXPLORE_EVERY decisions; a change of speed
     * moves the choice over. */
    struct ect__learned l = {0};
    const size_t kib = 1024;
    for (int i = 0; i < ECT__LEARN_MIN; i++) {
        CHECK_EQ_INT(ect__learn_pick(&l, 1), 1);
        ect__learn_record(&l, 1, kib, 500); /* way 1: 500 ns a KiB */
    }
    for (int i = 0; i < ECT__LEARN_MIN; i++) {
        CHECK_EQ_INT(ect__learn_pick(&l, 1), 0);
        ect__learn_record(&l, 0, kib, 100); /* way 0: 100 ns a KiB */
    }
    unsigned slower = 0;
    for (int i = 0; i < 4 * ECT__LEARN_EXPLORE_EVERY; i++)
        slower += ect__learn_pick(&l, 1) == 1;
    CHECK_EQ_INT(slower, 4);
    /* Way 0 becomes slow: after a few samples the choice moves to way 1. */
    for (int i = 0; i < 16; i++)
        ect__learn_record(&l, 0, kib, 5000);
    CHECK_EQ_INT(ect__learn_pick(&l, 1), 1); /* decision 71: not an exploring one */
    unsigned zeros = 0;
    for (int i = 0; i < 2 * ECT__LEARN_EXPLORE_EVERY; i++)
        zeros += ect__learn_pick(&l, 1) == 0;
    CHECK_EQ_INT(zeros, 2);
    /* Size classes: below 2^17 is class 0, each power of two one more, and
     * everything beyond the last class stays in it. */
    CHECK_EQ_INT(ect__learn_class(1), 0);
    CHECK_EQ_INT(ect__learn_class((size_t)1 << 17), 1);
    CHECK_EQ_INT(ect__learn_class(((size_t)1 << 20) + 1), 4);
    CHECK_EQ_INT(ect__learn_class(SIZE_MAX), ECT__LEARN_CLASSES - 1);
}

static void
test_learned_choice_ignores_a_rare_slow_sample(void)
{
    /* A hand-off's time has a long tail.  Way 0 at 100 ns a KiB against
     * way 1 at 130: a sample of way 0 ten times slower, even three in a
     * row, must not move the choice (a running average moved it after one,
     * and kept the slower way until the next exploring decision); a lasting
     * change, more than half the window, does, either way. */
    struct ect__learned l = {0};
    const size_t kib = 1024;
    for (int i = 0; i < ECT__LEARN_WINDOW; i++) {
        ect__learn_record(&l, 0, kib, 100);
        ect__learn_record(&l, 1, kib, 130);
    }
    l.decisions = 1; /* the next pick is not an exploring one */
    for (int slow = 1; slow <= ECT__LEARN_WINDOW / 2 - 1; slow++) {
        ect__learn_record(&l, 0, kib, 1000);
        CHECK_EQ_INT(ect__learn_pick(&l, 1), 0);
    }
    for (int more = 0; more < 2; more++)
        ect__learn_record(&l, 0, kib, 1000); /* five of the last eight: it is slow now */
    l.decisions = 1;
    CHECK_EQ_INT(ect__learn_pick(&l, 1), 1);
    for (int fast = 0; fast < ECT__LEARN_WINDOW / 2 + 1; fast++)
        ect__learn_record(&l, 0, kib, 100); /* and fast again */
    l.decisions = 1;
    CHECK_EQ_INT(ect__learn_pick(&l, 1), 0);
    /* The median of an even count is the mean of the middle two; an odd
     * count (before the window fills) its middle one. */
    struct ect__learned m = {0};
    ect__learn_record(&m, 0, kib, 100);
    ect__learn_record(&m, 0, kib, 900);
    CHECK(m.typical[0] > 499.0f && m.typical[0] < 501.0f);
    ect__learn_record(&m, 0, kib, 200);
    CHECK(m.typical[0] > 199.0f && m.typical[0] < 201.0f);
}

/* Wait (at most 1 s) until the engine's stats count more than `seen`
 * threads woken to poll by a prewake. */
static bool
wait_until_prewoken(ect_copy_engine_t *e, uint64_t seen)
{
    struct ect__copy_cpu_stats st;
    for (int tries = 0; tries < 10000; tries++) {
        CHECK_OK(ect__copy_cpu_stats(e, &st));
        if (st.prewoken > seen)
            return true;
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    }
    return false;
}

static void
test_prewake_has_sleeping_copy_threads_poll_for_the_coming_batch(void)
{
    /* Asleep, the copy threads are woken by the batch (its submit signals
     * one).  After a prewake one polls instead, and takes the batch (a
     * single piece) without a signal.  On a busy machine the polling can
     * run out before the batch comes: the pair is tried up to 20 times. */
    enum { THREADS = 2, LEN = 192 * 1024 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 67);
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    ect_copy_cpu_params_t p = {.threads = THREADS, .inline_bytes = ECT_COPY_CPU_NO_INLINE};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    struct ect__copy_cpu_stats a, b, z;
    wait_until_all_asleep(e, THREADS);
    CHECK_OK(ect__copy_cpu_stats(e, &a));
    hand_off_and_poll(e, &batch);
    CHECK_OK(ect__copy_cpu_stats(e, &b));
    CHECK_EQ_U64(b.wakeups - a.wakeups, 1);
    CHECK_EQ_U64(b.prewakes + b.prewoken, 0);
    bool taken_polling = false;
    for (int try = 0; try < 20 && !taken_polling; try++) {
        wait_until_all_asleep(e, THREADS);
        CHECK_OK(ect__copy_cpu_stats(e, &a));
        CHECK_OK(ect__copy_cpu_prewake(e, ECT_COPY_CPU_PREWAKE_MAX_NS));
        CHECK_OK(ect__copy_cpu_stats(e, &b));
        CHECK(b.prewakes > a.prewakes);
        if (!wait_until_prewoken(e, a.prewoken))
            continue;
        hand_off_and_poll(e, &batch);
        CHECK_OK(ect__copy_cpu_stats(e, &z));
        taken_polling = z.handoffs_polling > b.handoffs_polling && z.wakeups == b.wakeups;
    }
    CHECK_MSG(taken_polling, "no batch after a prewake was taken by a polling thread in 20 tries");
    /* The polling ends: every thread sleeps again. */
    wait_until_all_asleep(e, THREADS);
    /* Held, the threads stay asleep. */
    CHECK_OK(ect__copy_cpu_hold(e, true));
    CHECK_OK(ect__copy_cpu_stats(e, &a));
    CHECK_OK(ect__copy_cpu_prewake(e, ECT_COPY_CPU_PREWAKE_MAX_NS));
    CHECK_OK(ect__copy_cpu_stats(e, &b));
    CHECK_EQ_U64(b.prewakes, a.prewakes);
    CHECK_OK(ect__copy_cpu_hold(e, false));
    ect_copy_engine_destroy(e);

    /* An engine that never polls is not woken by a prewake. */
    p.spin_us = ECT_COPY_CPU_NO_SPIN;
    CHECK_OK(ect_copy_engine_create_cpu(&p, &e));
    wait_until_all_asleep(e, THREADS);
    CHECK_OK(ect__copy_cpu_prewake(e, ECT_COPY_CPU_PREWAKE_MAX_NS));
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    CHECK_OK(ect__copy_cpu_stats(e, &a));
    CHECK_EQ_U64(a.prewakes + a.prewoken, 0);
    CHECK_EQ_U64(a.threads_asleep, THREADS);
    ect_copy_engine_destroy(e);
    CHECK_STATUS(ect__copy_cpu_prewake(NULL, 1000), ECT_ERR_INVALID_ARG);
    free(dst);
    free(src);
}

/* A thread that reads the counters while the test holds the engine's lock. */
struct stats_reader {
    ect_copy_engine_t *engine;
    long tid; /* atomic: set before it asks */
    struct ect__copy_cpu_stats st;
    ect_status_t status;
};

static void *
read_stats_main(void *arg)
{
    struct stats_reader *r = arg;
    __atomic_store_n(&r->tid, (long)syscall(SYS_gettid), __ATOMIC_RELEASE);
    r->status = ect__copy_cpu_stats(r->engine, &r->st);
    return NULL;
}

/* Whether thread tid of this process is asleep in the kernel (state S). */
static bool
thread_sleeps(long tid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* the name may hold spaces */
    return paren != NULL && paren[1] == ' ' && paren[2] == 'S';
}

static void
test_lock_waits_count_acquisitions_that_found_the_lock_held(void)
{
    ect_copy_engine_t *e = two_thread_engine();
    struct ect__copy_cpu_stats a, b;
    /* Both copy threads asleep on their condition: nobody else wants the lock. */
    do {
        CHECK_OK(ect__copy_cpu_stats(e, &a));
    } while (a.threads_asleep != a.threads);
    CHECK_OK(ect__copy_cpu_stats(e, &b));
    CHECK_EQ_U64(b.lock_waits, a.lock_waits); /* a free lock is not a wait */

    /* Hold the lock until the reader sleeps on it (it may spin a while
     * first). */
    struct stats_reader r = {.engine = e};
    pthread_t t;
    CHECK(pthread_mutex_lock(&cpu_of(e)->lock) == 0);
    CHECK(pthread_create(&t, NULL, read_stats_main, &r) == 0);
    long tid;
    while ((tid = __atomic_load_n(&r.tid, __ATOMIC_ACQUIRE)) == 0)
        sched_yield();
    for (int i = 0; i < 10000 && !thread_sleeps(tid); i++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    bool slept = thread_sleeps(tid);
    CHECK(pthread_mutex_unlock(&cpu_of(e)->lock) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_MSG(slept, "the reader never blocked on the held lock");
    CHECK_OK(r.status);
    CHECK_EQ_U64(r.st.lock_waits, b.lock_waits + 1);
    ect_copy_engine_destroy(e);
}

static void
test_a_handed_off_batch_s_timeline_is_counted(void)
{
    /* With the copy threads held, a 1 MiB batch is queued and its waiter
     * copies every piece, one straight after another: one batch landed,
     * one first piece, a gap before every piece but the first, and one
     * look at the landed batch.  It lands after its first piece started. */
    enum { LEN = 1 << 20 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 71);
    ect_copy_engine_t *e = two_thread_engine();
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK(st.pieces_by_waiters >= 4);
    CHECK_EQ_U64(st.handed_landed, 1);
    CHECK_EQ_U64(st.waiter_first_pieces, 1);
    CHECK_EQ_U64(st.waiters_after_landing, 1);
    CHECK_EQ_U64(st.piece_gaps, st.pieces_by_waiters - 1);
    CHECK_MSG(st.handed_landed_ns > st.waiter_first_piece_ns,
              "landed %llu ns after submit, first piece at %llu ns",
              (unsigned long long)st.handed_landed_ns,
              (unsigned long long)st.waiter_first_piece_ns);

    /* A helper that copies the batch and sees it landed counts the look
     * once; the wait that retires the ticket afterwards does not again. */
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect__copy_cpu_help(e, t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK(memcmp(dst, src, LEN) == 0);
    struct ect__copy_cpu_stats z;
    CHECK_OK(ect__copy_cpu_stats(e, &z));
    CHECK_EQ_U64(z.handed_landed, 2);
    CHECK_EQ_U64(z.waiter_first_pieces, 2);
    CHECK_EQ_U64(z.waiters_after_landing, 2);

    /* Released, the copy threads copy a batch nobody waits for (the first
     * learned placement is a hand-off); a wait that begins once it has
     * landed is no look the engine made wait. */
    CHECK_OK(ect__copy_cpu_hold(e, false));
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    for (int i = 0; i < 100000; i++) { /* 10 s at most */
        CHECK_OK(ect__copy_cpu_stats(e, &z));
        if (z.handed_landed == 3)
            break;
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    }
    CHECK_EQ_U64(z.handed_landed, 3);
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK_OK(ect__copy_cpu_stats(e, &z));
    CHECK_EQ_U64(z.waiter_first_pieces, 2);
    CHECK_EQ_U64(z.waiters_after_landing, 2);

    /* A batch copied inside submit was never handed off. */
    op.len = 4096;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK_OK(ect__copy_cpu_stats(e, &st));
    CHECK_EQ_U64(st.batches_inline, z.batches_inline + 1);
    CHECK_EQ_U64(st.handed_landed, 3);
    CHECK_EQ_U64(st.waiter_first_pieces, 2);
    CHECK_EQ_U64(st.waiters_after_landing, 2);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_small_batch_lands_inside_submit_unless_held),
    ECT_CASE(test_waiter_shares_a_large_batch_in_pieces),
    ECT_CASE(test_copy_kernels_write_exactly_their_bytes_at_any_alignment),
    ECT_CASE(test_spin_and_inline_params_are_checked),
    ECT_CASE(test_learned_choice_tries_both_ways_then_keeps_the_faster),
    ECT_CASE(test_learned_choice_ignores_a_rare_slow_sample),
    ECT_CASE(test_batches_that_find_the_threads_asleep_are_placed_by_what_they_measured),
    ECT_CASE(test_a_batch_submitted_while_the_threads_have_work_is_handed_off),
    ECT_CASE(test_a_batch_right_behind_another_is_handed_off_as_part_of_a_burst),
    ECT_CASE(test_copy_spin_setting_decides_whether_copy_threads_poll),
    ECT_CASE(test_prewake_has_sleeping_copy_threads_poll_for_the_coming_batch),
    ECT_CASE(test_lock_waits_count_acquisitions_that_found_the_lock_held),
    ECT_CASE(test_a_handed_off_batch_s_timeline_is_counted),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
