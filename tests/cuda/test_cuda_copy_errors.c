/*
 * The CUDA copy engine's failure paths and registration on a real GPU: bad
 * device pointers give a status and leave the engine usable, host memory
 * that is not (or cannot be) registered falls back to DMA copies with a
 * warning, registration is chunked, reference-counted across engines and
 * fully undone on failure, and the engine is safe to drive from several
 * threads.  Every case skips without CUDA or a usable GPU.
 */
#include "ectier_build_config.h"
#include "harness.h"

#include <ectier/copy.h>

#define CASES(X)                                                                                   \
    X(test_create_on_a_missing_device_is_unsupported)                                              \
    X(test_invalid_device_pointer_is_a_status_and_engine_survives)                                 \
    X(test_unregistered_host_memory_falls_back_to_dma_copies)                                      \
    X(test_register_failure_warns_and_copies_still_land)                                           \
    X(test_register_failure_midway_releases_chunks_already_pinned)                                 \
    X(test_registration_is_chunked_and_runs_cross_chunk_boundaries)                                \
    X(test_registering_one_base_twice_keeps_one_registration)                                      \
    X(test_two_engines_share_one_registration)                                                     \
    X(test_concurrent_submit_wait_query_from_threads)                                              \
    X(test_wait_and_query_race_on_one_ticket)                                                      \
    X(test_caller_current_device_is_restored)

#if ECT_HAVE_CUDA

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "support/cuda.h"

/* Kernel for every mapped batch (descriptors inline when they fit, or
 * always uploaded), or DMA copies for every batch. */
static const struct ect__cuda_plan_policy force_kernel = {1, SIZE_MAX, ECT_GATHER_INLINE_MAX};
static const struct ect__cuda_plan_policy force_upload = {1, SIZE_MAX, 0};
static const struct ect__cuda_plan_policy force_dma = {SIZE_MAX, 0, 0};

static size_t
page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Count occurrences of needle in hay. */
static int
count_in(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void
test_create_on_a_missing_device_is_unsupported(void)
{
    ect_copy_engine_destroy(ts_cuda_engine(NULL));
    int count = 0;
    CHECK_CUDA(cudaGetDeviceCount(&count));
    const int bad[2] = {count, -1};
    for (int i = 0; i < 2; i++) {
        ect_copy_cuda_params_t p = {.device = bad[i], .streams = 2};
        ect_copy_engine_t *e = (ect_copy_engine_t *)(uintptr_t)0x1;
        CHECK_STATUS(ect_copy_engine_create_cuda(&p, &e), ECT_ERR_UNSUPPORTED);
        CHECK_CONTAINS(ect_last_error(), "does not exist");
        CHECK(e == (ect_copy_engine_t *)(uintptr_t)0x1);
    }
}

static void
bad_pointers_with(const struct ect__cuda_plan_policy *policy)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    CHECK_OK(ect__copy_cuda_set_policy(e, policy));
    const size_t n_blocks = 16, len = n_blocks * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    void *good = ts_cuda_dev_alloc(4 * TS_CUDA_BLOCK);
    ts_cuda_dev_fill(good, 4 * TS_CUDA_BLOCK, 31);
    unsigned char *pageable = malloc(4 * TS_CUDA_BLOCK);
    CHECK(pageable != NULL);
    void *const garbage = (void *)(uintptr_t)0x10;

    static const size_t ids[4] = {3, 9, 1, 12};
    ect_copy_op_t ops[4];
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, good, 4 * TS_CUDA_BLOCK, ops);
    uint64_t t = 0;

    /* A garbage device address, a pageable host buffer posing as device
     * memory, and one bad run after a good one. */
    const void *bad_src[3] = {garbage, pageable, NULL};
    for (int v = 0; v < 3; v++) {
        ect_copy_op_t o[4];
        memcpy(o, ops, sizeof(o));
        if (v < 2)
            for (int k = 0; k < 4; k++)
                o[k].src = (const unsigned char *)bad_src[v] + k * TS_CUDA_BLOCK;
        else
            o[1].src = garbage;
        ect_copy_batch_t b = {ECT_COPY_SAVE, o, 4, NULL};
        CHECK_STATUS(ect_copy_engine_submit(e, &b, &t), ECT_ERR_CUDA);
        CHECK_CONTAINS(ect_last_error(), "not device, managed or registered host memory");
        if (v == 2)
            CHECK_CONTAINS(ect_last_error(), "run 1");
    }
    ect_copy_op_t lo[4];
    ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, garbage, 4 * TS_CUDA_BLOCK, lo);
    ect_copy_batch_t lb = {ECT_COPY_LOAD, lo, 4, NULL};
    CHECK_STATUS(ect_copy_engine_submit(e, &lb, &t), ECT_ERR_CUDA);

    /* Nothing was queued or written, and the engine still works. */
    for (size_t b = 0; b < n_blocks; b++)
        ts_cuda_check_block_untouched(region, b);
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches, 0);
    CHECK_EQ_U64(s.slots_in_flight, 0);
    CHECK_EQ_U64(s.slots_free, s.slots_created);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, 4, NULL);
    ts_cuda_check_saved(region, ids, 4 * TS_CUDA_BLOCK, 31);
    free(pageable);
    cudaFree(good);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_invalid_device_pointer_is_a_status_and_engine_survives(void)
{
    bad_pointers_with(&force_kernel);
    bad_pointers_with(&force_upload);
    bad_pointers_with(&force_dma);
}

static void
test_unregistered_host_memory_falls_back_to_dma_copies(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t n = 64, n_blocks = 256, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    size_t ids[64];
    ts_cuda_random_ids(ids, n, n_blocks, 41);
    void *src = ts_cuda_dev_alloc(bytes), *dst = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, 42);
    ect_copy_op_t ops[64];
    ts_cuda_log_capture();

    /* Never registered: many small runs would want the kernel. */
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    ts_cuda_check_saved(region, ids, bytes, 42);
    ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst, bytes, ops);
    ts_cuda_run(e, ECT_COPY_LOAD, ops, n, NULL);
    unsigned char *h = ts_cuda_dev_read(dst, bytes);
    TS_CUDA_CHECK_PATTERN(h, bytes, 42, 0);
    free(h);
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches_unmapped, 2);
    CHECK_EQ_U64(s.batches_kernel, 0);
    CHECK_EQ_U64(s.batches_memcpy, 2);
    CHECK_EQ_INT(count_in(ts_cuda_log_captured(), "not registered"), 1);

    /* Registered in part: a batch touching the other part still falls back. */
    CHECK_OK(ect_copy_engine_register_host(e, region, len / 2));
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches_unmapped, 3);
    CHECK_EQ_U64(s.batches_kernel, 0);
    CHECK_EQ_INT(count_in(ts_cuda_log_captured(), "not registered"), 1);
    cudaFree(src);
    cudaFree(dst);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_register_failure_warns_and_copies_still_land(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t page = page_size();
    /* A /dev/shm mapping with a hole: the driver cannot lock the middle. */
    unsigned char *r = ts_cuda_region_map(3 * page);
    CHECK(munmap(r + page, page) == 0);
    ts_cuda_log_capture();
    CHECK_OK(ect_copy_engine_register_host(e, r, 3 * page));
    CHECK_CONTAINS(ts_cuda_log_captured(), "cudaHostRegister");
    CHECK_CONTAINS(ts_cuda_log_captured(), "slower pageable path");
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.reg_failures, 1);
    CHECK_EQ_U64(s.reg_chunks, 0);
    CHECK_STATUS(ect_copy_engine_unregister_host(e, r), ECT_ERR_NOT_FOUND);

    /* Eight 256-byte ops into the first page still land, by DMA copies. */
    void *dev = ts_cuda_dev_alloc(8 * 256);
    ts_cuda_dev_fill(dev, 8 * 256, 51);
    ect_copy_op_t ops[8];
    for (int k = 0; k < 8; k++)
        ops[k] = (ect_copy_op_t){r + (size_t)k * 512, (unsigned char *)dev + k * 256, 256};
    ts_cuda_run(e, ECT_COPY_SAVE, ops, 8, NULL);
    for (int k = 0; k < 8; k++) {
        TS_CUDA_CHECK_PATTERN(r + (size_t)k * 512, 256, 51, (uint64_t)k * 256);
        TS_CUDA_CHECK_BYTES(r + (size_t)k * 512 + 256, 256, TS_CUDA_POISON);
    }
    CHECK_EQ_U64(ts_cuda_stats(e).batches_unmapped, 1);
    cudaFree(dev);
    ect_copy_engine_destroy(e);
    munmap(r, page);
    munmap(r + 2 * page, page);
}

static void
test_register_failure_midway_releases_chunks_already_pinned(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t page = page_size();
    CHECK_OK(ect__copy_cuda_set_register_chunk(e, page));
    CHECK_STATUS(ect__copy_cuda_set_register_chunk(e, page + 1), ECT_ERR_INVALID_ARG);
    unsigned char *r = ts_cuda_region_map(3 * page);
    CHECK(munmap(r + page, page) == 0);
    ts_cuda_log_capture();
    /* Chunk 0 locks, chunk 1 (the hole) fails: chunk 0 must be let go. */
    CHECK_OK(ect_copy_engine_register_host(e, r, 3 * page));
    CHECK_CONTAINS(ts_cuda_log_captured(), "chunk 1 of 3");
    CHECK_EQ_U64(ts_cuda_stats(e).reg_chunks, 0);
    /* Were chunk 0 still locked, the driver would say "already registered". */
    CHECK_CUDA(cudaHostRegister(r, page, cudaHostRegisterDefault));
    CHECK_CUDA(cudaHostUnregister(r));
    ect_copy_engine_destroy(e);
    munmap(r, page);
    munmap(r + 2 * page, page);
}

static void
test_registration_is_chunked_and_runs_cross_chunk_boundaries(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    CHECK_OK(ect__copy_cuda_set_register_chunk(e, (size_t)1 << 20));
    CHECK_OK(ect__copy_cuda_set_policy(e, &force_kernel));
    /* 1200 blocks of 7 KiB = 8.2 MiB: 9 chunks of 1 MiB, and since 7168
     * does not divide 1 MiB some blocks straddle two chunks. */
    const size_t n = 200, n_blocks = 1200, len = n_blocks * TS_CUDA_BLOCK,
                 bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    CHECK_EQ_U64(ts_cuda_stats(e).reg_chunks, 9);
    size_t ids[200];
    ts_cuda_random_ids(ids, n, n_blocks, 61);
    void *src = ts_cuda_dev_alloc(bytes), *dst = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, 62);
    ect_copy_op_t ops[200];
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, n, NULL);
    ts_cuda_check_saved(region, ids, bytes, 62);
    ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst, bytes, ops);
    ts_cuda_run(e, ECT_COPY_LOAD, ops, n, NULL);
    unsigned char *h = ts_cuda_dev_read(dst, bytes);
    TS_CUDA_CHECK_PATTERN(h, bytes, 62, 0);
    free(h);
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches_kernel, 2);
    CHECK_EQ_U64(s.batches_unmapped, 0);

    CHECK_OK(ect_copy_engine_unregister_host(e, region));
    CHECK_EQ_U64(ts_cuda_stats(e).reg_chunks, 0);
    CHECK_STATUS(ect_copy_engine_unregister_host(e, region), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "not registered");
    /* Every chunk was released: the whole range locks again in one call. */
    CHECK_CUDA(cudaHostRegister(region, len, cudaHostRegisterDefault));
    CHECK_CUDA(cudaHostUnregister(region));
    cudaFree(src);
    cudaFree(dst);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_registering_one_base_twice_keeps_one_registration(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t len = 64 * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    ts_cuda_log_capture();
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    CHECK_CONTAINS(ts_cuda_log_captured(), "already registered");
    CHECK_EQ_U64(ts_cuda_stats(e).reg_chunks, 1);
    CHECK_OK(ect_copy_engine_unregister_host(e, region));
    CHECK_STATUS(ect_copy_engine_unregister_host(e, region), ECT_ERR_NOT_FOUND);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_two_engines_share_one_registration(void)
{
    /* Page-locking is per process: two engines (two GPUs of one process)
     * registering one region share it, and it stays locked until both let go. */
    ect_copy_engine_t *e1 = ts_cuda_engine(NULL), *e2 = ts_cuda_engine(NULL);
    CHECK_OK(ect__copy_cuda_set_policy(e2, &force_kernel));
    const size_t n = 64, n_blocks = 256, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e1, region, len));
    CHECK_OK(ect_copy_engine_register_host(e2, region, len));
    CHECK_EQ_U64(ts_cuda_stats(e1).reg_chunks, 1);
    CHECK_EQ_U64(ts_cuda_stats(e2).reg_chunks, 1);
    CHECK_EQ_U64(ts_cuda_stats(e2).reg_failures, 0);
    ect_copy_engine_destroy(e1);

    size_t ids[64];
    ts_cuda_random_ids(ids, n, n_blocks, 71);
    void *src = ts_cuda_dev_alloc(bytes);
    ts_cuda_dev_fill(src, bytes, 72);
    ect_copy_op_t ops[64];
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, bytes, ops);
    ts_cuda_run(e2, ECT_COPY_SAVE, ops, n, NULL);
    ts_cuda_check_saved(region, ids, bytes, 72);
    CHECK_EQ_U64(ts_cuda_stats(e2).batches_kernel, 1);

    CHECK_OK(ect_copy_engine_unregister_host(e2, region));
    CHECK_CUDA(cudaHostRegister(region, len, cudaHostRegisterDefault));
    CHECK_CUDA(cudaHostUnregister(region));
    cudaFree(src);
    ect_copy_engine_destroy(e2);
    ts_cuda_region_unmap(region, len);
}

enum { THREADS = 4, ROUNDS = 100, PER = 32 };

struct worker {
    ect_copy_engine_t *e;
    unsigned char *region;
    size_t ids[PER];
    void *src, *dst;
    uint64_t seed;
};

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    const size_t bytes = PER * TS_CUDA_BLOCK;
    ect_copy_op_t ops[PER];
    for (int i = 0; i < ROUNDS; i++) {
        /* Saves are polled with query, loads waited for. */
        ts_cuda_entry_ops(ECT_COPY_SAVE, w->region, w->ids, w->src, bytes, ops);
        ect_copy_batch_t b = {ECT_COPY_SAVE, ops, PER, NULL};
        uint64_t t;
        CHECK_OK(ect_copy_engine_submit(w->e, &b, &t));
        ect_status_t st;
        while ((st = ect_copy_engine_query(w->e, t)) == ECT_ERR_BUSY)
            usleep(20);
        CHECK_OK(st);
        ts_cuda_entry_ops(ECT_COPY_LOAD, w->region, w->ids, w->dst, bytes, ops);
        b.dir = ECT_COPY_LOAD;
        CHECK_OK(ect_copy_engine_submit(w->e, &b, &t));
        CHECK_OK(ect_copy_engine_wait(w->e, t));
    }
    return NULL;
}

static void
test_concurrent_submit_wait_query_from_threads(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t n_blocks = THREADS * 64, len = n_blocks * TS_CUDA_BLOCK,
                 bytes = PER * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t all[THREADS * PER];
    ts_cuda_random_ids(all, THREADS * PER, n_blocks, 81);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i].e = e;
        w[i].region = region;
        memcpy(w[i].ids, all + i * PER, sizeof(w[i].ids));
        w[i].src = ts_cuda_dev_alloc(bytes);
        w[i].dst = ts_cuda_dev_alloc(bytes);
        w[i].seed = 90 + (uint64_t)i;
        ts_cuda_dev_fill(w[i].src, bytes, w[i].seed);
    }
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        ts_cuda_check_saved(region, w[i].ids, bytes, w[i].seed);
        unsigned char *h = ts_cuda_dev_read(w[i].dst, bytes);
        TS_CUDA_CHECK_PATTERN(h, bytes, w[i].seed, 0);
        free(h);
        cudaFree(w[i].src);
        cudaFree(w[i].dst);
    }
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.batches, 2 * THREADS * ROUNDS);
    CHECK_EQ_U64(s.slots_in_flight, 0);
    CHECK_EQ_U64(s.slots_free, s.slots_created);
    CHECK(s.slots_created <= THREADS);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

struct waiter {
    ect_copy_engine_t *e;
    uint64_t ticket;
    ect_status_t status;
};

static void *
waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->status = ect_copy_engine_wait(w->e, w->ticket);
    return NULL;
}

static void
test_wait_and_query_race_on_one_ticket(void)
{
    ect_copy_engine_t *e = ts_cuda_engine(NULL);
    const size_t n = 16, n_blocks = 64, len = n_blocks * TS_CUDA_BLOCK, bytes = n * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    size_t ids[16];
    ts_cuda_random_ids(ids, n, n_blocks, 91);
    void *dst = ts_cuda_dev_alloc(bytes);
    cudaStream_t compute;
    CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    ect_copy_op_t ops[16];
    ts_cuda_entry_ops(ECT_COPY_LOAD, region, ids, dst, bytes, ops);
    for (int i = 0; i < 50; i++) {
        /* Keep the load in flight for a few ms behind compute work. */
        CHECK_CUDA(ts_cuda_spin_then_fill(dst, 0, 0, 3 * 1000 * 1000, compute));
        ect_copy_batch_t b = {ECT_COPY_LOAD, ops, n, compute};
        struct waiter w = {e, 0, ECT_ERR_INTERNAL};
        CHECK_OK(ect_copy_engine_submit(e, &b, &w.ticket));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, waiter_main, &w) == 0);
        ect_status_t q;
        while ((q = ect_copy_engine_query(e, w.ticket)) == ECT_ERR_BUSY)
            usleep(i % 7 * 100);
        pthread_join(th, NULL);
        /* Whoever saw the landing retired the ticket; the other saw either
         * the same result or, arriving later, a retired ticket. */
        CHECK(q == ECT_OK || q == ECT_ERR_NOT_FOUND);
        CHECK(w.status == ECT_OK || w.status == ECT_ERR_NOT_FOUND);
        CHECK(q == ECT_OK || w.status == ECT_OK);
        CHECK_STATUS(ect_copy_engine_query(e, w.ticket), ECT_ERR_NOT_FOUND);
    }
    CHECK_CUDA(cudaStreamSynchronize(compute));
    struct ect__cuda_copy_stats s = ts_cuda_stats(e);
    CHECK_EQ_U64(s.slots_in_flight, 0);
    CHECK_EQ_U64(s.slots_free, s.slots_created);
    cudaStreamDestroy(compute);
    cudaFree(dst);
    ect_copy_engine_destroy(e);
    ts_cuda_region_unmap(region, len);
}

static void
test_caller_current_device_is_restored(void)
{
    ect_copy_engine_destroy(ts_cuda_engine(NULL));
    int count = 0;
    CHECK_CUDA(cudaGetDeviceCount(&count));
    if (count < 2)
        SKIP("needs 2 GPUs, this machine has %d", count);
    CHECK_CUDA(cudaSetDevice(0));
    ect_copy_cuda_params_t p = {.device = 1, .streams = 2};
    ect_copy_engine_t *e = ts_cuda_engine(&p);
    int cur = -1;
    CHECK_CUDA(cudaGetDevice(&cur));
    CHECK_EQ_INT(cur, 0);
    const size_t len = 16 * TS_CUDA_BLOCK;
    unsigned char *region = ts_cuda_region_map(len);
    CHECK_OK(ect_copy_engine_register_host(e, region, len));
    CHECK_CUDA(cudaSetDevice(1));
    void *src = ts_cuda_dev_alloc(8 * TS_CUDA_BLOCK);
    ts_cuda_dev_fill(src, 8 * TS_CUDA_BLOCK, 99);
    CHECK_CUDA(cudaSetDevice(0));
    static const size_t ids[8] = {1, 3, 5, 7, 9, 11, 13, 15};
    ect_copy_op_t ops[8];
    ts_cuda_entry_ops(ECT_COPY_SAVE, region, ids, src, 8 * TS_CUDA_BLOCK, ops);
    ts_cuda_run(e, ECT_COPY_SAVE, ops, 8, NULL);
    CHECK_CUDA(cudaGetDevice(&cur));
    CHECK_EQ_INT(cur, 0);
    ts_cuda_check_saved(region, ids, 8 * TS_CUDA_BLOCK, 99);
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
