/*
 * Copy plans (src/copy/plan.c): block runs -> coalesced ops with an exact
 * tail, and every way a plan request can be wrong.  Plans only compute
 * addresses, so these cases use fixed fake addresses and never touch them;
 * test_copy_cpu.c moves real bytes through plans.
 */
#include <ectier/ectier.h>

#include "copy/plan.h"
#include "harness.h"

#define REGION_BASE ((uintptr_t)0x10000000u)
#define ENGINE_BASE ((uintptr_t)0x70000000u)
#define BS          7168u /* 3584 hidden x bf16, one row of Qwen2.5-VL-7B */

static ect_copy_region_view_t
region_view(uint64_t num_blocks)
{
    return (ect_copy_region_view_t){
        .base = (void *)REGION_BASE, .block_size = BS, .num_blocks = num_blocks};
}

static void
check_op(const ect_copy_op_t *op, uintptr_t dst, uintptr_t src, size_t len)
{
    CHECK_EQ_U64((uintptr_t)op->dst, dst);
    CHECK_EQ_U64((uintptr_t)op->src, src);
    CHECK_EQ_U64(op->len, len);
}

static void
test_consecutive_ids_coalesce_into_one_op(void)
{
    ect_copy_region_view_t rv = region_view(64);
    ect_run_t runs[] = {{3, 6}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 1, (void *)ENGINE_BASE, 6 * BS));
    CHECK_EQ_U64(plan.n_ops, 1);
    check_op(&plan.ops[0], REGION_BASE + 3 * BS, ENGINE_BASE, 6 * BS);
    ect__copy_plan_cleanup(&plan);
}

static void
test_runs_adjacent_in_id_order_coalesce(void)
{
    ect_copy_region_view_t rv = region_view(64);
    ect_run_t runs[] = {{5, 2}, {7, 3}, {10, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 3, (void *)ENGINE_BASE, 6 * BS));
    CHECK_EQ_U64(plan.n_ops, 1);
    check_op(&plan.ops[0], REGION_BASE + 5 * BS, ENGINE_BASE, 6 * BS);
    ect__copy_plan_cleanup(&plan);
}

static void
test_runs_adjacent_in_reverse_order_stay_apart(void)
{
    /* Block 8 holds the entry's first row and block 7 its second: the region
     * side is contiguous only backwards, so no merge is possible. */
    ect_copy_region_view_t rv = region_view(64);
    ect_run_t runs[] = {{8, 1}, {7, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 2, (void *)ENGINE_BASE, 2 * BS));
    CHECK_EQ_U64(plan.n_ops, 2);
    check_op(&plan.ops[0], REGION_BASE + 8 * BS, ENGINE_BASE, BS);
    check_op(&plan.ops[1], REGION_BASE + 7 * BS, ENGINE_BASE + BS, BS);
    ect__copy_plan_cleanup(&plan);
}

static void
test_scattered_ids_map_rows_in_entry_order(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t runs[] = {{7, 1}, {2, 1}, {5, 1}, {0, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 4, (void *)ENGINE_BASE, 4 * BS));
    CHECK_EQ_U64(plan.n_ops, 4);
    const uint64_t ids[] = {7, 2, 5, 0};
    for (int i = 0; i < 4; i++)
        check_op(&plan.ops[i], REGION_BASE + ids[i] * BS, ENGINE_BASE + (uintptr_t)i * BS, BS);
    ect__copy_plan_cleanup(&plan);
}

static void
test_last_op_is_cut_to_the_exact_tail(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t runs[] = {{7, 1}, {2, 1}, {5, 1}, {0, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 4, (void *)ENGINE_BASE, 3 * BS + 100));
    CHECK_EQ_U64(plan.n_ops, 4);
    check_op(&plan.ops[3], REGION_BASE + 0, ENGINE_BASE + 3 * BS, 100);

    /* A payload needing fewer blocks than allocated: blocks past
     * ceil(P / bs) get no op at all. */
    ect__copy_plan_reset(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 4, (void *)ENGINE_BASE, BS + 1));
    CHECK_EQ_U64(plan.n_ops, 2);
    check_op(&plan.ops[0], REGION_BASE + 7 * BS, ENGINE_BASE, BS);
    check_op(&plan.ops[1], REGION_BASE + 2 * BS, ENGINE_BASE + BS, 1);

    /* Inside a coalesced run the cut lands mid-run. */
    ect_run_t one[] = {{4, 5}};
    ect__copy_plan_reset(&plan);
    CHECK_OK(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, one, 1, (void *)ENGINE_BASE, 2 * BS + 3));
    CHECK_EQ_U64(plan.n_ops, 1);
    check_op(&plan.ops[0], REGION_BASE + 4 * BS, ENGINE_BASE, 2 * BS + 3);
    ect__copy_plan_cleanup(&plan);
}

static void
test_load_swaps_source_and_destination(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t runs[] = {{7, 1}, {2, 2}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(
        ect__copy_plan_add(&plan, ECT_COPY_LOAD, &rv, runs, 2, (void *)ENGINE_BASE, 2 * BS + 9));
    CHECK_EQ_U64(plan.n_ops, 2);
    check_op(&plan.ops[0], ENGINE_BASE, REGION_BASE + 7 * BS, BS);
    check_op(&plan.ops[1], ENGINE_BASE + BS, REGION_BASE + 2 * BS, BS + 9);
    ect__copy_plan_cleanup(&plan);
}

static void
test_abutting_entries_merge_but_not_after_a_cut_tail(void)
{
    ect_copy_region_view_t rv = region_view(64);
    ect_run_t a[] = {{10, 2}}, b[] = {{12, 3}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    /* Entry b's engine buffer starts where a's ends and its blocks follow
     * a's: one op moves both. */
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, a, 1, (void *)ENGINE_BASE, 2 * BS));
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, b, 1, (void *)(ENGINE_BASE + 2 * BS),
                                3 * BS));
    CHECK_EQ_U64(plan.n_ops, 1);
    check_op(&plan.ops[0], REGION_BASE + 10 * BS, ENGINE_BASE, 5 * BS);

    /* After a cut tail the next block starts a full block later in the
     * region than the tail ends, so the ops stay apart. */
    ect__copy_plan_reset(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, a, 1, (void *)ENGINE_BASE, BS + 5));
    CHECK_OK(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, b, 1, (void *)(ENGINE_BASE + BS + 5), BS));
    CHECK_EQ_U64(plan.n_ops, 2);
    check_op(&plan.ops[0], REGION_BASE + 10 * BS, ENGINE_BASE, BS + 5);
    check_op(&plan.ops[1], REGION_BASE + 12 * BS, ENGINE_BASE + BS + 5, BS);
    ect__copy_plan_cleanup(&plan);
}

static void
test_empty_payload_and_empty_runs_add_no_ops(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t runs[] = {{3, 0}, {4, 2}, {9, 0}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 3, NULL, 0));
    CHECK_EQ_U64(plan.n_ops, 0);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, NULL, 0, NULL, 0));
    CHECK_EQ_U64(plan.n_ops, 0);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 3, (void *)ENGINE_BASE, BS));
    CHECK_EQ_U64(plan.n_ops, 1);
    check_op(&plan.ops[0], REGION_BASE + 4 * BS, ENGINE_BASE, BS);
    ect__copy_plan_cleanup(&plan);
}

static void
test_payload_larger_than_its_blocks_is_overflow(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t runs[] = {{7, 1}, {2, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_STATUS(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 2, (void *)ENGINE_BASE, 2 * BS + 1),
        ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "payload of 14337 bytes exceeds its 2 blocks of 7168 bytes");
    CHECK_EQ_U64(plan.n_ops, 0);
    /* No blocks at all, some payload. */
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_LOAD, &rv, NULL, 0, (void *)ENGINE_BASE, 1),
                 ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "exceeds its 0 blocks");
    ect__copy_plan_cleanup(&plan);
}

static void
test_zero_block_size_is_rejected(void)
{
    ect_copy_region_view_t rv = region_view(10);
    rv.block_size = 0;
    ect_run_t runs[] = {{1, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 1, (void *)ENGINE_BASE, 10),
                 ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "block size is 0");
    ect__copy_plan_cleanup(&plan);
}

static void
test_overflowing_and_out_of_region_ids_are_rejected(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);

    ect_run_t wraps[] = {{UINT64_MAX - 1, 5}};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, wraps, 1, (void *)ENGINE_BASE, BS),
                 ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "overflows");

    /* Each run fits a huge region, but their counts sum past 2^64. */
    ect_copy_region_view_t huge = {
        .base = (void *)REGION_BASE, .block_size = 1, .num_blocks = UINT64_MAX / 4};
    ect_run_t many[] = {{0, UINT64_MAX / 4},
                        {0, UINT64_MAX / 4},
                        {0, UINT64_MAX / 4},
                        {0, UINT64_MAX / 4},
                        {0, UINT64_MAX / 4}};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &huge, many, 5, (void *)ENGINE_BASE, 1),
                 ECT_ERR_OVERFLOW);

    ect_run_t past[] = {{2, 1}, {9, 2}};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, past, 2, (void *)ENGINE_BASE, BS),
                 ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "block run 1 {first 9, count 2} runs past the region's 10");

    ect_run_t far[] = {{10, 1}};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, far, 1, (void *)ENGINE_BASE, BS),
                 ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(plan.n_ops, 0);
    ect__copy_plan_cleanup(&plan);
}

static void
test_address_math_that_wraps_is_rejected(void)
{
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    ect_run_t runs[] = {{0, 1}};

    /* num_blocks x block_size overflows uint64. */
    ect_copy_region_view_t big = {
        .base = (void *)REGION_BASE, .block_size = 1u << 20, .num_blocks = UINT64_MAX / 1024};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &big, runs, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "overflows the address space");

    /* The region fits uint64 but not above its base. */
    ect_copy_region_view_t high = {
        .base = (void *)(UINTPTR_MAX - 4096), .block_size = 4096, .num_blocks = 2};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &high, runs, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_OVERFLOW);

    /* The engine buffer wraps. */
    ect_copy_region_view_t rv = region_view(4);
    CHECK_STATUS(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 1, (void *)(UINTPTR_MAX - 10), 100),
        ECT_ERR_OVERFLOW);
    CHECK_EQ_U64(plan.n_ops, 0);
    ect__copy_plan_cleanup(&plan);
}

static void
test_failed_add_leaves_earlier_ops_alone(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t ok[] = {{1, 2}}, bad[] = {{5, 1}, {20, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, ok, 1, (void *)ENGINE_BASE, 2 * BS));
    ect_copy_op_t before = plan.ops[0];
    /* The first run of `bad` would even merge into the existing op; the
     * second is out of range, so nothing may change. */
    ect_run_t merge_then_bad[] = {{3, 1}, {20, 1}};
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, merge_then_bad, 2,
                                    (void *)(ENGINE_BASE + 2 * BS), 2 * BS),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, bad, 2, (void *)ENGINE_BASE, BS),
                 ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(plan.n_ops, 1);
    check_op(&plan.ops[0], (uintptr_t)before.dst, (uintptr_t)before.src, before.len);
    ect__copy_plan_cleanup(&plan);
}

static void
test_null_arguments_and_bad_direction_are_rejected(void)
{
    ect_copy_region_view_t rv = region_view(10);
    ect_run_t runs[] = {{1, 1}};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_STATUS(ect__copy_plan_add(NULL, ECT_COPY_SAVE, &rv, runs, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, NULL, runs, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, NULL, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 1, NULL, 1),
                 ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "NULL engine buffer");
    CHECK_STATUS(ect__copy_plan_add(&plan, (ect_copy_dir_t)7, &rv, runs, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "direction 7");
    ect_copy_region_view_t nobase = rv;
    nobase.base = NULL;
    CHECK_STATUS(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &nobase, runs, 1, (void *)ENGINE_BASE, 1),
                 ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(plan.n_ops, 0);
    ect__copy_plan_cleanup(&plan);
}

static void
test_reset_keeps_capacity_for_reuse(void)
{
    ect_copy_region_view_t rv = region_view(1000);
    ect_run_t runs[100];
    for (int i = 0; i < 100; i++)
        runs[i] = (ect_run_t){.first = (uint64_t)(999 - i * 3), .count = 1};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 100, (void *)ENGINE_BASE, 100 * BS));
    CHECK_EQ_U64(plan.n_ops, 100);
    ect_copy_op_t *ops = plan.ops;
    size_t cap = plan.cap;
    CHECK(cap >= 100);
    ect__copy_plan_reset(&plan);
    CHECK_EQ_U64(plan.n_ops, 0);
    CHECK_OK(
        ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 100, (void *)ENGINE_BASE, 100 * BS));
    CHECK(plan.ops == ops);
    CHECK_EQ_U64(plan.cap, cap);
    ect__copy_plan_cleanup(&plan);
    CHECK(plan.ops == NULL && plan.n_ops == 0 && plan.cap == 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_consecutive_ids_coalesce_into_one_op),
    ECT_CASE(test_runs_adjacent_in_id_order_coalesce),
    ECT_CASE(test_runs_adjacent_in_reverse_order_stay_apart),
    ECT_CASE(test_scattered_ids_map_rows_in_entry_order),
    ECT_CASE(test_last_op_is_cut_to_the_exact_tail),
    ECT_CASE(test_load_swaps_source_and_destination),
    ECT_CASE(test_abutting_entries_merge_but_not_after_a_cut_tail),
    ECT_CASE(test_empty_payload_and_empty_runs_add_no_ops),
    ECT_CASE(test_payload_larger_than_its_blocks_is_overflow),
    ECT_CASE(test_zero_block_size_is_rejected),
    ECT_CASE(test_overflowing_and_out_of_region_ids_are_rejected),
    ECT_CASE(test_address_math_that_wraps_is_rejected),
    ECT_CASE(test_failed_add_leaves_earlier_ops_alone),
    ECT_CASE(test_null_arguments_and_bad_direction_are_rejected),
    ECT_CASE(test_reset_keeps_capacity_for_reuse),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
