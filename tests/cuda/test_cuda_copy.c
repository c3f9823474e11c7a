/*
 * The CUDA copy engine's data path on a real GPU: round trips through a real
 * /dev/shm region registered with ect_copy_engine_register_host, both paths (DMA
 * copies and the gather/scatter kernel), ordering against the compute stream,
 * loads on several "rank" streams, and pool reuse.  Every case skips where
 * the build has no CUDA or the machine no usable GPU (the skip line carries
 * the library's message); errors and registration are in
 * test_cuda_copy_errors.c.
 *
 * Payload bytes come from ts_cuda_pattern (never zero, different per seed);
 * region bytes start as TS_CUDA_POISON and device bytes as TS_CUDA_DPOISON, so a
 * copy that writes too much, too little or the wrong bytes is caught.
 */
#include "ectier_build_config.h"
#include "harness.h"

#include <ectier/copy.h>

#define CASES(X)                                                                                   \
    X(test_round_trip_exact_fit_and_partial_entries_default_path)                                  \
    X(test_round_trip_forced_kernel_path)                                                          \
    X(test_round_trip_forced_kernel_path_with_uploaded_descriptors)                                \
    X(test_round_trip_forced_dma_path)                                                             \
    X(test_many_small_scattered_ops_take_one_kernel)                                               \
    X(test_batch_beyond_the_inline_limit_uploads_its_descriptors)                                  \
    X(test_few_large_ops_take_dma_copies)                                                          \
    X(test_contiguous_block_ids_coalesce_into_one_run)                                             \
    X(test_misaligned_ops_copy_exact_bytes_on_kernel_path)                                         \
    X(test_kernel_warp_code_emulated_on_the_cpu_copies_exact_bytes)                                \
    X(test_loads_of_one_entry_on_several_rank_streams)                                             \
    X(test_save_lands_only_after_queued_compute)                                                   \
    X(test_load_waits_for_queued_compute_and_compute_waits_for_load)                               \
    X(test_pool_reused_across_1000_batches)                                                        \
    X(test_pool_grows_only_to_peak_in_flight)                                                      \
    X(test_empty_batch_lands_at_once_and_tickets_increase)                                         \
    X(test_device_pointers_and_streams_as_plain_integers)

#if ECT_HAVE_CUDA

#include <stdint.h>
#include <unistd.h>

#include "support/cuda.h"

/* Kernel for every mapped batch (descriptors inline when they fit, or
 * always uploaded), or DMA copies for every batch. */
static const struct ect__cuda_plan_policy force_kernel = {1, SIZE_MAX, ECT_GATHER_INLINE_MAX};
static const struct ect__cuda_plan_policy force_upload = {1, SIZE_MAX, 0};
static const struct ect__cuda_plan_policy force_dma = {SIZE_MAX, 0, 0};

/* Three entries in one batch, as the worker would send them: A fills blocks
 * 7, 2, 5, 0 exactly (the seed's test ids); B is 2 blocks + 1000 bytes in
 * contiguous blocks 11..13; C is 101 bytes in block 20.  Saved, checked in
 * the region, loaded back into fresh buffers and checked there. */
static void
round_trip(const struct ect__cuda_plan_policy *policy, uint64_t want_kernel, uint64_t want_uploaded,
           uint64_t want_dma)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    if (policy != NULL)
        CHECK_OK(ect__copy_cuda_set_policy(e, policy));
    const size_t n_blocks = 32, len = n_blocks * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));

    static const size_t ids[3][4] = {{7, 2, 5, 0}, {11, 12, 13}, {20}};
    const size_t bytes[3] = {4 * TS_CUDA_BLOCK, 2 * TS_CUDA_BLOCK + 1000, 101};
    const size_t cap[3] = {4 * TS_CUDA_BLOCK, 3 * TS_CUDA_BLOCK, TS_CUDA_BLOCK};
    const uint64_t seed[3] = {11, 22, 33};
    void *src[3], *dst[3];
    ect_copy_op_t ops[16];
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        src[k] = ts_cuda_dev_alloc(cap[k]);
        ts_cuda_dev_fill(src[k], bytes[k], seed[k]);
        n += ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids[k], src[k], bytes[k], ops + n);
    }
    CHECK_EQ_U64(n, 8);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    for (int k = 0; k < 3; k++)
        ts_cuda_check_saved(region, ids[k], bytes[k], seed[k]);
    static const size_t untouched[] = {1, 3, 4, 6, 8, 9, 10, 14, 19, 21, 31};
    for (size_t i = 0; i < sizeof(untouched) / sizeof(untouched[0]); i++)
        ts_cuda_check_block_untouched(region, untouched[i]);

    n = 0;
    for (int k = 0; k < 3; k++) {
        dst[k] = ts_cuda_dev_alloc(cap[k]);
        n += ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids[k], dst[k], bytes[k], ops + n);
    }
    ts_cuda_run(e, ECT_COPY_LOAD, ops, n, NULL);
    for (int k = 0; k < 3; k++) {
        unsigned char *h = ts_cuda_dev_read(dst[k], cap[k]);
        TS_CUDA_CHECK_PATTERN(h, bytes[k], seed[k], 0);
        TS_CUDA_CHECK_BYTES(h + bytes[k], cap[k] - bytes[k], TS_CUDA_DPOISON);
        free(h);
    }

    /* A's four blocks are not adjacent, B's three coalesce, C is one run. */
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches, 2);
    CHECK_EQ_U64(s.ops, 16);
    CHECK_EQ_U64(s.runs, 12);
    CHECK_EQ_U64(s.batches_kernel, want_kernel);
    CHECK_EQ_U64(s.batches_uploaded, want_uploaded);
    CHECK_EQ_U64(s.batches_memcpy, want_dma);
    CHECK_EQ_U64(s.batches_unmapped, 0);
    for (int k = 0; k < 3; k++) {
        cudaFree(src[k]);
        cudaFree(dst[k]);
    }
    CHECK_OK(ect_copy_engine_unregister_host(e, region));
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_round_trip_exact_fit_and_partial_entries_default_path(void)
{
    /* 6 runs averaging ~8 KiB: the default policy picks the kernel, with
     * the descriptors inside the launch. */
    round_trip(NULL, 2, 0, 0);
}

static void
test_round_trip_forced_kernel_path(void)
{
    round_trip(&force_kernel, 2, 0, 0);
}

static void
test_round_trip_forced_kernel_path_with_uploaded_descriptors(void)
{
    round_trip(&force_upload, 2, 2, 0);
}

static void
test_round_trip_forced_dma_path(void)
{
    round_trip(&force_dma, 0, 0, 2);
}

/* Save and load one entry of n blocks at random ids of an n_blocks region;
 * returns the engine's counters. */
static struct ect__cuda_copy_stats
scattered_round_trip(size_t n, size_t n_blocks, uint64_t seed)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t *ids = malloc(n * sizeof(*ids));
    ect_copy_op_t *ops = malloc(n * sizeof(*ops));
    unsigned char *used = calloc(n_blocks, 1);
    CHECK(ids != NULL && ops != NULL && used != NULL);
    ts_cuda_random_ids(ids, n, n_blocks, seed);
    void *src = ts_cuda_dev_alloc(bytes), *dst = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, seed);

    CHECK_EQ_U64(ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops), n);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    ts_cuda_check_saved(region, ids, bytes, seed);
    for (size_t i = 0; i < n; i++)
        used[ids[i]] = 1;
    for (size_t b = 0; b < n_blocks; b++)
        if (!used[b])
            ts_cuda_check_block_untouched(region, b);

    ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst, bytes, ops);
    ts_cuda_run(e, ECT_COPY_LOAD, ops, n, NULL);
    unsigned char *h = ts_cuda_dev_read(dst, bytes);
    TS_CUDA_CHECK_PATTERN(h, bytes, seed, 0);

    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    free(h);
    free(used);
    free(ops);
    free(ids);
    cudaFree(src);
    cudaFree(dst);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
    return s;
}

static void
test_many_small_scattered_ops_take_one_kernel(void)
{
    /* 1024 blocks of 7 KiB at random places: a fragmented 7 MiB entry. */
    struct ect__cuda_copy_stats s = scattered_round_trip(1024, 4096, 5);
    CHECK_EQ_U64(s.batches_kernel, 2);
    CHECK_EQ_U64(s.batches_uploaded, 0);
    CHECK_EQ_U64(s.batches_memcpy, 0);
    CHECK_EQ_U64(s.ops, 2048);
    CHECK_MSG(s.runs > 2 * 900, "only %llu runs: the ids were not scattered",
              (unsigned long long)s.runs);
}

static void
test_batch_beyond_the_inline_limit_uploads_its_descriptors(void)
{
    /* 2000 scattered blocks (14 MiB): more descriptors than fit in a launch. */
    struct ect__cuda_copy_stats s = scattered_round_trip(2000, 8192, 6);
    CHECK_MSG(s.runs > 2 * ECT_GATHER_INLINE_MAX, "only %llu runs", (unsigned long long)s.runs);
    CHECK_EQ_U64(s.batches_kernel, 2);
    CHECK_EQ_U64(s.batches_uploaded, 2);
}

static void
test_few_large_ops_take_dma_copies(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    /* Four entries of 220 blocks (~1.5 MiB) in separate contiguous ranges:
     * four runs, but each large enough for the DMA engines. */
    const size_t per = 220, n_blocks = 4 * 256, len = n_blocks * TS_CUDA_BLOCK;
    const size_t bytes = per * TS_CUDA_BLOCK - 333;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t ids[4][220];
    void *src[4], *dst[4];
    ect_copy_op_t ops[4 * 220];
    size_t n = 0;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < per; i++)
            ids[k][i] = (size_t)k * 256 + 17 + i;
        src[k] = ts_cuda_dev_alloc(per * TS_CUDA_BLOCK);
        ts_cuda_dev_fill(src[k], bytes, 100 + (uint64_t)k);
        n += ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids[k], src[k], bytes, ops + n);
    }
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    for (int k = 0; k < 4; k++) {
        ts_cuda_check_saved(region, ids[k], bytes, 100 + (uint64_t)k);
        ts_cuda_check_block_untouched(region, (size_t)k * 256 + 16);
        ts_cuda_check_block_untouched(region, (size_t)k * 256 + 17 + per);
    }
    n = 0;
    for (int k = 0; k < 4; k++) {
        dst[k] = ts_cuda_dev_alloc(per * TS_CUDA_BLOCK);
        n += ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids[k], dst[k], bytes, ops + n);
    }
    ts_cuda_run(e, ECT_COPY_LOAD, ops, n, NULL);
    for (int k = 0; k < 4; k++) {
        unsigned char *h = ts_cuda_dev_read(dst[k], per * TS_CUDA_BLOCK);
        TS_CUDA_CHECK_PATTERN(h, bytes, 100 + (uint64_t)k, 0);
        TS_CUDA_CHECK_BYTES(h + bytes, 333, TS_CUDA_DPOISON);
        free(h);
    }
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.runs, 8);
    CHECK_EQ_U64(s.batches_memcpy, 2);
    CHECK_EQ_U64(s.batches_kernel, 0);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_contiguous_block_ids_coalesce_into_one_run(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t n_blocks = 256, len = n_blocks * TS_CUDA_BLOCK, n = 64, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t ids[64];
    for (size_t i = 0; i < n; i++)
        ids[i] = 100 + i;
    void *src = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, 9);
    ect_copy_op_t ops[64];
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    ts_cuda_check_saved(region, ids, bytes, 9);
    ts_cuda_check_block_untouched(region, 99);
    ts_cuda_check_block_untouched(region, 164);
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.ops, 64);
    CHECK_EQ_U64(s.runs, 1);
    CHECK_EQ_U64(s.batches_memcpy, 1);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

/* Offsets chosen so that the kernel takes each of its access widths: same
 * misalignment mod 16 (head bytes + 16-byte body + tail), mod 8, mod 4, odd
 * (bytes), tiny runs, and a run spanning several 16 KiB chunks. */
static const struct {
    size_t region_off, dev_off, len;
} odd_ops[] = {
    {1, 1, 40000},       {50003, 40010, 20001},    {80004, 70008, 30002},   {120008, 110000, 17},
    {130001, 120007, 3}, {140005, 130005, 100000}, {250000, 240013, 16385},
};

static void
misaligned_round_trip(const struct ect__cuda_plan_policy *policy)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    CHECK_OK(ect__copy_cuda_set_policy(e, policy));
    const size_t len = 300000, n = sizeof(odd_ops) / sizeof(odd_ops[0]);
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    void *dev = ts_cuda_dev_alloc(len);
    ts_cuda_dev_fill(dev, len, 77);
    unsigned char *dev_host = ts_cuda_dev_read(dev, len);
    unsigned char *want = malloc(len);
    CHECK(want != NULL);

    ect_copy_op_t ops[8];
    memset(want, TS_CUDA_POISON, len);
    for (size_t i = 0; i < n; i++) {
        ops[i] = (ect_copy_op_t){region + odd_ops[i].region_off,
                                 (unsigned char *)dev + odd_ops[i].dev_off, odd_ops[i].len};
        memcpy(want + odd_ops[i].region_off, dev_host + odd_ops[i].dev_off, odd_ops[i].len);
    }
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    for (size_t i = 0; i < len; i++)
        CHECK_MSG(region[i] == want[i], "save: region byte %zu is 0x%02x, expected 0x%02x", i,
                  region[i], want[i]);

    /* The other way: a fresh pattern in the region, poison on the device. */
    for (size_t i = 0; i < len; i++)
        region[i] = ts_cuda_pattern(78, i);
    CHECK_CUDA(cudaMemset(dev, TS_CUDA_DPOISON, len));
    CHECK_CUDA(cudaDeviceSynchronize());
    memset(want, TS_CUDA_DPOISON, len);
    for (size_t i = 0; i < n; i++) {
        ops[i] = (ect_copy_op_t){(unsigned char *)dev + odd_ops[i].dev_off,
                                 region + odd_ops[i].region_off, odd_ops[i].len};
        memcpy(want + odd_ops[i].dev_off, region + odd_ops[i].region_off, odd_ops[i].len);
    }
    ts_cuda_run(e, ECT_COPY_LOAD, ops, n, NULL);
    unsigned char *got = ts_cuda_dev_read(dev, len);
    for (size_t i = 0; i < len; i++)
        CHECK_MSG(got[i] == want[i], "load: device byte %zu is 0x%02x, expected 0x%02x", i, got[i],
                  want[i]);
    CHECK_EQ_U64(ts_cuda_stats(e).batches_kernel, 2);
    free(got);
    free(want);
    free(dev_host);
    cudaFree(dev);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_misaligned_ops_copy_exact_bytes_on_kernel_path(void)
{
    misaligned_round_trip(&force_kernel);
    misaligned_round_trip(&force_upload);
}

static void
test_kernel_warp_code_emulated_on_the_cpu_copies_exact_bytes(void)
{
    /* No GPU needed: the kernel's per-warp code run lane by lane on host
     * buffers, for the same awkward runs plus a train of 7 KiB blocks, under
     * several grid sizes. */
    const size_t len = 300000, n_odd = sizeof(odd_ops) / sizeof(odd_ops[0]);
    unsigned char *src = malloc(len), *dst = malloc(len), *want = malloc(len);
    CHECK(src != NULL && dst != NULL && want != NULL);
    for (size_t i = 0; i < len; i++)
        src[i] = ts_cuda_pattern(90, i);
    ect_copy_op_t ops[16];
    memset(want, TS_CUDA_POISON, len);
    for (size_t i = 0; i < n_odd; i++) {
        ops[i] =
            (ect_copy_op_t){dst + odd_ops[i].region_off, src + odd_ops[i].dev_off, odd_ops[i].len};
        memcpy(want + odd_ops[i].region_off, src + odd_ops[i].dev_off, odd_ops[i].len);
    }
    size_t n = n_odd;
    for (size_t k = 0; k < 4; k++, n++) {
        /* Half blocks, adjacent in dst but in reverse order in src. */
        size_t d_off = 270000 + k * 7168 / 2, s_off = 270000 - k * 7168 / 2;
        ops[n] = (ect_copy_op_t){dst + d_off, src + s_off, 7168 / 2};
        memcpy(want + d_off, src + s_off, 7168 / 2);
    }
    struct ect__gather_block *b = malloc(ECT_GATHER_BLOCK_BYTES(n));
    CHECK(b != NULL);
    CHECK_OK(ect__gather_fill(ops, n, b));
    const uint64_t grids[] = {1, 3, 32, 1056};
    for (size_t g = 0; g < sizeof(grids) / sizeof(grids[0]); g++) {
        memset(dst, TS_CUDA_POISON, len);
        ts_cuda_gather_on_host(b, grids[g]);
        for (size_t i = 0; i < len; i++)
            CHECK_MSG(dst[i] == want[i], "grid of %llu warps: byte %zu is 0x%02x, expected 0x%02x",
                      (unsigned long long)grids[g], i, dst[i], want[i]);
    }
    free(b);
    free(want);
    free(dst);
    free(src);
}

static void
test_loads_of_one_entry_on_several_rank_streams(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    enum { RANKS = 4 };
    const size_t n = 1024, n_blocks = 2048, len = n_blocks * TS_CUDA_BLOCK,
                 bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t *ids = malloc(n * sizeof(*ids));
    ect_copy_op_t *ops = malloc(n * sizeof(*ops));
    CHECK(ids != NULL && ops != NULL);
    ts_cuda_random_ids(ids, n, n_blocks, 4);
    void *src = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, 44);
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);

    /* Every rank loads the same entry into its own buffer on its own compute
     * stream, all in flight together; each rank's compute stream then reads
     * its buffer, which must see the loaded bytes because the compute stream
     * waits for its load. */
    cudaStream_t streams[RANKS];
    void *dst[RANKS];
    unsigned char *seen[RANKS];
    uint64_t tickets[RANKS];
    for (int r = 0; r < RANKS; r++) {
        CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        dst[r] = ts_cuda_dev_alloc(bytes);
        CHECK_CUDA(cudaHostAlloc((void **)&seen[r], bytes, cudaHostAllocDefault));
        memset(seen[r], 0, bytes);
    }
    for (int r = 0; r < RANKS; r++) {
        ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst[r], bytes, ops);
        ect_copy_batch_t b = {ECT_COPY_LOAD, ops, n, streams[r]};
        CHECK_OK(ect_copy_engine_submit(e, &b, &tickets[r]));
        CHECK_CUDA(cudaMemcpyAsync(seen[r], dst[r], bytes, cudaMemcpyDeviceToHost, streams[r]));
    }
    for (int r = 0; r < RANKS; r++) {
        CHECK_CUDA(cudaStreamSynchronize(streams[r]));
        TS_CUDA_CHECK_PATTERN(seen[r], bytes, 44, 0);
        CHECK_OK(ect_copy_engine_wait(e, tickets[r]));
    }
    for (int r = 0; r < RANKS; r++) {
        cudaFreeHost(seen[r]);
        cudaFree(dst[r]);
        cudaStreamDestroy(streams[r]);
    }
    cudaFree(src);
    free(ops);
    free(ids);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

#define SPIN_NS (200ull * 1000 * 1000)

/* One batch of the same shape, submitted and waited for, so the engine's
 * stream, event and descriptor pools exist before the timing-sensitive part. */
static void
warm_engine(ect_copy_engine_t *e, ect_copy_dir_t dir, const ect_copy_op_t *ops, size_t n)
{
    ect_copy_batch_t warm = {dir, ops, n, NULL};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &warm, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
}

static void
save_after_compute(const struct ect__cuda_plan_policy *policy)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    CHECK_OK(ect__copy_cuda_set_policy(e, policy));
    const size_t n = 64, n_blocks = 256, len = n_blocks * TS_CUDA_BLOCK,
                 bytes = n * TS_CUDA_BLOCK - 5;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t ids[64];
    ts_cuda_random_ids(ids, n, n_blocks, 8);
    void *src = ts_cuda_dev_alloc(n * TS_CUDA_BLOCK);
    cudaStream_t compute;
    CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    ect_copy_op_t ops[64];
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    /* Warm the engine's pools first: growing them (cudaHostAlloc) may
     * synchronise the device, which would hide the ordering under test. */
    warm_engine(e, ECT_COPY_SAVE, ops, n);
    memset(region, TS_CUDA_POISON, len);

    /* The "encoder" spins for 200 ms and only then writes its output. */
    CHECK_CUDA(ts_cuda_spin_then_fill(src, bytes, 123, SPIN_NS, compute));
    ect_copy_batch_t b = {ECT_COPY_SAVE, ops, n, compute};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &b, &t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    usleep(50 * 1000);
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    ts_cuda_check_block_untouched(region, ids[0]);
    CHECK_OK(ect_copy_engine_wait(e, t));
    ts_cuda_check_saved(region, ids, bytes, 123);
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_NOT_FOUND);
    cudaStreamDestroy(compute);
    cudaFree(src);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_save_lands_only_after_queued_compute(void)
{
    save_after_compute(&force_kernel);
    save_after_compute(&force_upload);
    save_after_compute(&force_dma);
}

static void
load_around_compute(const struct ect__cuda_plan_policy *policy)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    CHECK_OK(ect__copy_cuda_set_policy(e, policy));
    const size_t n = 64, n_blocks = 256, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t ids[64];
    ts_cuda_random_ids(ids, n, n_blocks, 9);
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < TS_CUDA_BLOCK; i++)
            region[ids[k] * TS_CUDA_BLOCK + i] = ts_cuda_pattern(55, k * TS_CUDA_BLOCK + i);
    void *dst = ts_cuda_dev_alloc(bytes);
    cudaStream_t compute;
    CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    ect_copy_op_t ops[64];
    ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst, bytes, ops);
    warm_engine(e, ECT_COPY_LOAD, ops, n);

    /* Work already queued on the compute stream still writes the buffer the
     * load fills (memory a stream-ordered allocator handed out again): the
     * load must land after it, or the spin kernel's bytes would win. */
    CHECK_CUDA(ts_cuda_spin_then_fill(dst, bytes, 66, SPIN_NS, compute));
    ect_copy_batch_t b = {ECT_COPY_LOAD, ops, n, compute};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &b, &t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    /* Compute work queued after the submit must see the loaded bytes. */
    unsigned char *seen;
    CHECK_CUDA(cudaHostAlloc((void **)&seen, bytes, cudaHostAllocDefault));
    CHECK_CUDA(cudaMemcpyAsync(seen, dst, bytes, cudaMemcpyDeviceToHost, compute));
    CHECK_CUDA(cudaStreamSynchronize(compute));
    TS_CUDA_CHECK_PATTERN(seen, bytes, 55, 0);
    CHECK_OK(ect_copy_engine_wait(e, t));
    cudaFreeHost(seen);
    cudaStreamDestroy(compute);
    cudaFree(dst);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_load_waits_for_queued_compute_and_compute_waits_for_load(void)
{
    load_around_compute(&force_kernel);
    load_around_compute(&force_upload);
    load_around_compute(&force_dma);
}

static void
test_pool_reused_across_1000_batches(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t n = 64, n_blocks = 256, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t scattered[64], contiguous[64];
    ts_cuda_random_ids(scattered, n, 128, 10);
    for (size_t i = 0; i < n; i++)
        contiguous[i] = 150 + i;
    void *src = ts_cuda_dev_alloc(bytes), *dst = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, 1);
    ect_copy_op_t ops[64];
    struct ect__cuda_copy_stats warm = {0};
    for (int i = 0; i < 1000; i++) {
        const size_t *ids = i % 4 < 2 ? scattered : contiguous;
        ect_copy_dir_t dir = i % 2 == 0 ? ECT_COPY_SAVE : ECT_COPY_LOAD;
        ts_cuda_entry_ops(dir, region, ids, dir == ECT_COPY_SAVE ? src : dst, bytes, ops);
        ts_cuda_run(e, dir, ops, n, NULL);
        if (i == 3)
            warm = ts_cuda_stats(e);
    }
    unsigned char *h = ts_cuda_dev_read(dst, bytes);
    TS_CUDA_CHECK_PATTERN(h, bytes, 1, 0);
    free(h);

    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches, 1000);
    CHECK_EQ_U64(s.batches_kernel, 500);
    CHECK_EQ_U64(s.batches_memcpy, 500);
    /* One batch at a time needs one slot: two events, one scratch and one
     * pinned descriptor block (64 runs ride inside the launch, so no device
     * block), all made in the first batches. */
    CHECK_EQ_U64(s.slots_created, 1);
    CHECK_EQ_U64(s.events_created, 2);
    CHECK_EQ_U64(s.slots_free, 1);
    CHECK_EQ_U64(s.slots_in_flight, 0);
    CHECK_EQ_U64(s.desc_allocs, warm.desc_allocs);
    CHECK_EQ_U64(s.scratch_allocs, warm.scratch_allocs);
    CHECK_EQ_U64(s.desc_allocs, 1);
    CHECK_EQ_U64(s.scratch_allocs, 1);
    cudaFree(src);
    cudaFree(dst);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_pool_grows_only_to_peak_in_flight(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    enum { PEAK = 8 };
    const size_t n = 32, n_blocks = 128, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t ids[32];
    ts_cuda_random_ids(ids, n, n_blocks, 12);
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < TS_CUDA_BLOCK; i++)
            region[ids[k] * TS_CUDA_BLOCK + i] = ts_cuda_pattern(3, k * TS_CUDA_BLOCK + i);
    void *dst[PEAK];
    ect_copy_op_t ops[PEAK][32];
    for (int j = 0; j < PEAK; j++) {
        dst[j] = ts_cuda_dev_alloc(bytes);
        ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst[j], bytes, ops[j]);
    }
    for (int round = 0; round < 100; round++) {
        uint64_t t[PEAK];
        for (int j = 0; j < PEAK; j++) {
            ect_copy_batch_t b = {ECT_COPY_LOAD, ops[j], n, NULL};
            CHECK_OK(ect_copy_engine_submit(e, &b, &t[j]));
        }
        /* Retire in an order unlike submission: even by wait, odd by query. */
        for (int j = PEAK - 1; j >= 0; j--) {
            if (j % 2 == 0) {
                CHECK_OK(ect_copy_engine_wait(e, t[j]));
            } else {
                ect_status_t st;
                while ((st = ect_copy_engine_query(e, t[j])) == ECT_ERR_BUSY)
                    usleep(50);
                CHECK_OK(st);
            }
        }
    }
    for (int j = 0; j < PEAK; j++) {
        unsigned char *h = ts_cuda_dev_read(dst[j], bytes);
        TS_CUDA_CHECK_PATTERN(h, bytes, 3, 0);
        free(h);
        cudaFree(dst[j]);
    }
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches, 100 * PEAK);
    CHECK_EQ_U64(s.slots_created, PEAK);
    CHECK_EQ_U64(s.events_created, 2 * PEAK);
    CHECK_EQ_U64(s.slots_free, PEAK);
    CHECK_EQ_U64(s.slots_in_flight, 0);
    CHECK_EQ_U64(s.desc_allocs, PEAK);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_empty_batch_lands_at_once_and_tickets_increase(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    ect_copy_batch_t empty = {ECT_COPY_SAVE, NULL, 0, NULL};
    uint64_t t1, t2, t3;
    CHECK_OK(ect_copy_engine_submit(e, &empty, &t1));
    CHECK_OK(ect_copy_engine_query(e, t1));
    CHECK_STATUS(ect_copy_engine_query(e, t1), ECT_ERR_NOT_FOUND);
    /* Zero-length ops (even with NULL pointers) move nothing. */
    ect_copy_op_t zero[3] = {{NULL, NULL, 0}, {NULL, NULL, 0}, {NULL, NULL, 0}};
    ect_copy_batch_t zeros = {ECT_COPY_LOAD, zero, 3, NULL};
    CHECK_OK(ect_copy_engine_submit(e, &zeros, &t2));
    CHECK(t2 > t1);
    CHECK_OK(ect_copy_engine_wait(e, t2));
    CHECK_STATUS(ect_copy_engine_wait(e, t2), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "not in flight");
    CHECK_OK(ect_copy_engine_submit(e, &empty, &t3));
    CHECK(t3 > t2);
    CHECK_STATUS(ect_copy_engine_wait(e, t3 + 1000), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect_copy_engine_wait(e, t3));
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches, 0);
    CHECK_EQ_U64(s.slots_in_flight, 0);
    ect_copy_engine_destroy(e);
}

static void
test_device_pointers_and_streams_as_plain_integers(void)
{
    /* The worker passes PyTorch's data_ptr() and cuda_stream through ctypes:
     * plain integers.  Streams: one of the caller's, the legacy default
     * stream (0) and the per-thread default stream. */
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t n = 16, n_blocks = 64, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    cudaStream_t own;
    CHECK_CUDA(cudaStreamCreate(&own));
    const uint64_t stream_ints[3] = {(uint64_t)(uintptr_t)own, 0,
                                     (uint64_t)(uintptr_t)cudaStreamPerThread};
    for (int v = 0; v < 3; v++) {
        void *src = ts_cuda_dev_alloc(bytes), *dst = ts_cuda_dev_alloc(bytes);
        const uint64_t src_int = (uint64_t)(uintptr_t)src, dst_int = (uint64_t)(uintptr_t)dst;
        ts_cuda_dev_fill(src, bytes, 200 + (uint64_t)v);
        size_t ids[16];
        ts_cuda_random_ids(ids, n, n_blocks, 20 + (uint64_t)v);
        ect_copy_op_t ops[16];
        for (size_t k = 0; k < n; k++)
            ops[k] = (ect_copy_op_t){region + ids[k] * TS_CUDA_BLOCK,
                                     (const void *)(uintptr_t)(src_int + k * TS_CUDA_BLOCK),
                                     TS_CUDA_BLOCK};
        ts_cuda_run(e, ECT_COPY_SAVE, ops, n, (void *)(uintptr_t)stream_ints[v]);
        for (size_t k = 0; k < n; k++)
            ops[k] = (ect_copy_op_t){(void *)(uintptr_t)(dst_int + k * TS_CUDA_BLOCK),
                                     region + ids[k] * TS_CUDA_BLOCK, TS_CUDA_BLOCK};
        ts_cuda_run(e, ECT_COPY_LOAD, ops, n, (void *)(uintptr_t)stream_ints[v]);
        unsigned char *h = ts_cuda_dev_read(dst, bytes);
        TS_CUDA_CHECK_PATTERN(h, bytes, 200 + (uint64_t)v, 0);
        free(h);
        cudaFree(src);
        cudaFree(dst);
    }
    cudaStreamDestroy(own);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

#else /* !ECT_HAVE_CUDA */

#define DEFINE_SKIP(name)                                                                          \
    static void name(void)                                                                         \
    {                                                                                              \
        SKIP("this build has no CUDA support (ECT_HAVE_CUDA is 0)");                               \
    }
CASES(DEFINE_SKIP)

#endif

#define AS_CASE(name) ECT_CASE(name),
static const struct ect_test_case cases[] = {CASES(AS_CASE)};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
