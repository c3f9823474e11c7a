/*
 * Planning of CUDA copy batches (src/copy/cuda_plan.c), checked on the CPU in
 * every build: coalescing, the choice between DMA copies and the
 * gather/scatter kernel, and the kernel's work split (descriptor layout and
 * the per-warp descriptor search, the same inline code the kernel runs).
 */
#include <stdint.h>

#include "copy/cuda_plan.h"
#include "harness.h"
#include "support/util.h"

/* Addresses are only compared, never dereferenced. */
#define A(x) ((void *)(uintptr_t)(x))

static void
test_coalesce_merges_only_when_dst_and_src_both_follow_on(void)
{
    const ect_copy_op_t ops[] = {
        {A(0x1000), A(0x9000), 0x100}, /* run 0 */
        {A(0x1100), A(0x9100), 0x100}, /* both follow: merged into run 0 */
        {A(0x1200), A(0x9300), 0x100}, /* dst follows, src does not: run 1 */
        {A(0x1400), A(0x9400), 0x100}, /* src follows, dst does not: run 2 */
        {A(0x1500), A(0x9500), 0x080}, /* both follow: merged into run 2 */
        {A(0x7000), A(0x7000), 0},     /* zero length: dropped */
        {A(0x1580), A(0x9580), 0x080}, /* follows run 2 across the dropped op */
    };
    ect_copy_op_t runs[7];
    size_t n = ect__copy_coalesce(ops, 7, runs);
    CHECK_EQ_U64(n, 3);
    CHECK(runs[0].dst == A(0x1000) && runs[0].src == A(0x9000));
    CHECK_EQ_U64(runs[0].len, 0x200);
    CHECK(runs[1].dst == A(0x1200) && runs[1].src == A(0x9300));
    CHECK_EQ_U64(runs[1].len, 0x100);
    CHECK(runs[2].dst == A(0x1400) && runs[2].src == A(0x9400));
    CHECK_EQ_U64(runs[2].len, 0x200);
}

static void
test_coalesce_keeps_order_and_never_sorts(void)
{
    /* Blocks 1 and 2 in reverse order are adjacent in memory, but merging
     * them would need a sort: they stay two runs, in the given order. */
    const ect_copy_op_t ops[] = {
        {A(0x2000), A(0x6000), 0x1000},
        {A(0x1000), A(0x5000), 0x1000},
    };
    ect_copy_op_t runs[2];
    CHECK_EQ_U64(ect__copy_coalesce(ops, 2, runs), 2);
    CHECK(runs[0].dst == A(0x2000));
    CHECK(runs[1].dst == A(0x1000));
    CHECK_EQ_U64(ect__copy_coalesce(ops, 0, runs), 0);
}

static void
test_path_choice_follows_the_thresholds(void)
{
    const struct ect__cuda_plan_policy p = ect__cuda_plan_policy_default();
    CHECK_EQ_U64(p.kernel_min_runs, 4);
    CHECK_EQ_U64(p.kernel_max_avg_run, 1u << 20);
    CHECK_EQ_U64(p.inline_max, ECT_GATHER_INLINE_MAX);
    const size_t mib = 1u << 20, blk = 7168;
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 0, 0, 1), ECT__CUDA_PATH_NONE);
    /* 1024 scattered 7 KiB blocks: the kernel, unless the host is unmapped. */
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 1024, 1024 * blk, 1), ECT__CUDA_PATH_KERNEL);
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 1024, 1024 * blk, 0), ECT__CUDA_PATH_MEMCPY);
    /* Few runs: DMA copies whatever their size. */
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 3, 3 * blk, 1), ECT__CUDA_PATH_MEMCPY);
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 4, 4 * blk, 1), ECT__CUDA_PATH_KERNEL);
    /* Large runs: DMA copies, with the boundary at an average of 1 MiB. */
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 8, 8 * mib, 1), ECT__CUDA_PATH_MEMCPY);
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 8, 8 * mib - 1, 1), ECT__CUDA_PATH_KERNEL);
    /* The forcing policies the tests and benchmark use. */
    const struct ect__cuda_plan_policy kernel = {1, SIZE_MAX, 0}, dma = {SIZE_MAX, 0, 0};
    CHECK_EQ_INT(ect__cuda_choose_path(&kernel, 1, 64 * mib, 1), ECT__CUDA_PATH_KERNEL);
    CHECK_EQ_INT(ect__cuda_choose_path(&kernel, 1, 64 * mib, 0), ECT__CUDA_PATH_MEMCPY);
    CHECK_EQ_INT(ect__cuda_choose_path(&dma, 100000, 100000, 1), ECT__CUDA_PATH_MEMCPY);
    /* A saturated total (SIZE_MAX) does not overflow the average. */
    CHECK_EQ_INT(ect__cuda_choose_path(&p, 5, SIZE_MAX, 1), ECT__CUDA_PATH_MEMCPY);
}

/* A heap block with room for n descriptors. */
static struct ect__gather_block *
block_new(size_t n)
{
    struct ect__gather_block *b = calloc(1, ECT_GATHER_BLOCK_BYTES(n));
    CHECK(b != NULL);
    return b;
}

static void
test_gather_fill_lays_out_chunk_prefix(void)
{
    const size_t C = ECT_GATHER_CHUNK_BYTES;
    const ect_copy_op_t runs[] = {
        {A(0x100000), A(0x900000), 1},     /* 1 chunk */
        {A(0x200000), A(0xa00000), C},     /* 1 chunk */
        {A(0x300000), A(0xb00000), C + 1}, /* 2 chunks */
        {A(0x400000), A(0xc00000), 7168},  /* 1 chunk */
        {A(0x500000), A(0xd00000), 5 * C}, /* 5 chunks */
    };
    CHECK_EQ_U64(ect__gather_desc_count(runs, 5), 5);
    struct ect__gather_block *b = block_new(5);
    CHECK_OK(ect__gather_fill(runs, 5, b));
    CHECK_EQ_U64(b->n, 5);
    CHECK_EQ_U64(b->total_chunks, 10);
    const uint64_t first[] = {0, 1, 2, 4, 5};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_U64(b->d[i].first_chunk, first[i]);
        CHECK_EQ_U64(b->d[i].dst, (uintptr_t)runs[i].dst);
        CHECK_EQ_U64(b->d[i].src, (uintptr_t)runs[i].src);
        CHECK_EQ_U64(b->d[i].len, runs[i].len);
    }
    /* The layout the kernel mirrors (gather.cu asserts the same). */
    CHECK_EQ_INT((int)sizeof(struct ect__gather_desc), 24);
    CHECK_EQ_INT((int)sizeof(struct ect__gather_block), 16);
    CHECK(ECT_GATHER_BLOCK_BYTES(ECT_GATHER_INLINE_MAX) <= 32764);
    free(b);
}

static void
test_gather_fill_splits_runs_longer_than_a_piece(void)
{
    /* 2.5 pieces and one byte: four descriptors, each piece's chunks
     * starting where the previous piece's end, addresses advancing. */
    const uint64_t P = ECT_GATHER_PIECE_MAX;
    const ect_copy_op_t runs[] = {
        {A(0x100000000ull), A(0x900000000ull), (size_t)(2 * P + P / 2)},
        {A(0x80000), A(0x90000), 1},
    };
    CHECK_EQ_U64(ect__gather_desc_count(runs, 2), 4);
    struct ect__gather_block *b = block_new(4);
    CHECK_OK(ect__gather_fill(runs, 2, b));
    CHECK_EQ_U64(b->n, 4);
    const uint64_t per_piece = P / ECT_GATHER_CHUNK_BYTES;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_U64(b->d[i].dst, 0x100000000ull + (uint64_t)i * P);
        CHECK_EQ_U64(b->d[i].src, 0x900000000ull + (uint64_t)i * P);
        CHECK_EQ_U64(b->d[i].first_chunk, (uint64_t)i * per_piece);
    }
    CHECK_EQ_U64(b->d[0].len, P);
    CHECK_EQ_U64(b->d[2].len, P / 2);
    CHECK_EQ_U64(b->d[3].len, 1);
    CHECK_EQ_U64(b->d[3].first_chunk, 2 * per_piece + per_piece / 2);
    CHECK_EQ_U64(b->total_chunks, 2 * per_piece + per_piece / 2 + 1);
    free(b);
}

static void
test_gather_fill_refuses_2_to_the_32_chunks(void)
{
    /* 65537 pieces of 1 GiB (2^16 chunks each) = 2^32 + 2^16 chunks: too
     * many for the 32-bit chunk prefix; the engine then uses DMA copies.
     * Addresses only: nothing is dereferenced. */
    const ect_copy_op_t runs[] = {
        {A(0x100000000ull), A(0x90000000000ull), (size_t)(65537 * ECT_GATHER_PIECE_MAX)},
    };
    size_t n = ect__gather_desc_count(runs, 1);
    CHECK_EQ_U64(n, 65537);
    struct ect__gather_block *b = block_new(n);
    CHECK_STATUS(ect__gather_fill(runs, 1, b), ECT_ERR_OVERFLOW);
    free(b);
}

/* Model the kernel's grid-stride walk on the CPU: `warps` warps, each taking
 * chunks w, w + warps, ... and finding its descriptor from the previous one.
 * Every byte of every run must be covered exactly once. */
static void
walk_like_the_kernel(const struct ect__gather_block *b, uint64_t warps)
{
    const struct ect__gather_desc *d = b->d;
    const size_t n = (size_t)b->n;
    const uint64_t total = b->total_chunks;
    uint64_t *covered = calloc(n, sizeof(*covered));
    CHECK(covered != NULL);
    for (uint64_t w = 0; w < warps; w++) {
        size_t lo = 0;
        for (uint64_t c = w; c < total; c += warps) {
            lo = ect__gather_find(d, lo, n, c);
            CHECK(d[lo].first_chunk <= c);
            CHECK(c < d[lo].first_chunk + ect__gather_chunks(d[lo].len));
            uint64_t off = (c - d[lo].first_chunk) * ECT_GATHER_CHUNK_BYTES;
            uint64_t len = d[lo].len - off;
            if (len > ECT_GATHER_CHUNK_BYTES)
                len = ECT_GATHER_CHUNK_BYTES;
            covered[lo] += len;
        }
    }
    /* Each chunk index is visited once (the warps partition them) and maps
     * inside its run's chunk range (checked above), at offset index x chunk:
     * so covering len bytes in total means every byte exactly once. */
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_U64(covered[i], d[i].len);
    free(covered);
}

static void
test_kernel_work_split_covers_every_byte_once(void)
{
    enum { N = 600 };
    ect_copy_op_t runs[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        ts_xorshift64(&x);
        /* Mostly 7 KiB blocks, some tiny, some spanning many chunks. */
        size_t len = i % 10 == 0  ? (size_t)(x % 200000) + 1
                     : i % 7 == 0 ? (size_t)(x % 15) + 1
                                  : 7168;
        runs[i] = (ect_copy_op_t){A(0x10000000u + (uintptr_t)i * 0x100000),
                                  A(0x90000000u + (uintptr_t)i * 0x100000), len};
    }
    struct ect__gather_block *b = block_new(N);
    CHECK_OK(ect__gather_fill(runs, N, b));
    CHECK_EQ_U64(b->n, N);
    const uint64_t warps[] = {1, 7, 32, 1056, 100000};
    for (size_t i = 0; i < sizeof(warps) / sizeof(warps[0]); i++)
        walk_like_the_kernel(b, warps[i]);
    /* A single descriptor. */
    CHECK_OK(ect__gather_fill(runs, 1, b));
    walk_like_the_kernel(b, 3);
    free(b);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_coalesce_merges_only_when_dst_and_src_both_follow_on),
    ECT_CASE(test_coalesce_keeps_order_and_never_sorts),
    ECT_CASE(test_path_choice_follows_the_thresholds),
    ECT_CASE(test_gather_fill_lays_out_chunk_prefix),
    ECT_CASE(test_gather_fill_splits_runs_longer_than_a_piece),
    ECT_CASE(test_gather_fill_refuses_2_to_the_32_chunks),
    ECT_CASE(test_kernel_work_split_covers_every_byte_once),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
