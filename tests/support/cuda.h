/*
 * Shared set-up for the CUDA copy-engine tests: an engine (or a skip where no
 * GPU is usable), a real /dev/shm MAP_SHARED region, device buffers, the byte
 * pattern checks and a log capture.  Built only with ECT_HAVE_CUDA.
 *
 * The region's name is unlinked right after it is mapped, so nothing is left
 * in /dev/shm even if a case crashes; the mapping dies with the case's
 * process.
 */
#ifndef ECT_TESTS_SUPPORT_CUDA_H
#define ECT_TESTS_SUPPORT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <ectier/copy.h>

#include "copy/cuda/cuda_engine.h"
#include "support/cuda_kernels.h"
#include "harness.h"

#define CHECK_CUDA(expr)                                                                           \
    do {                                                                                           \
        cudaError_t ts_cuda_e_ = (expr);                                                           \
        if (ts_cuda_e_ != cudaSuccess)                                                             \
            ect_test_fail(__FILE__, __LINE__, "%s: %s", #expr, cudaGetErrorString(ts_cuda_e_));    \
    } while (0)

/* Block size of the tests: one row of hidden 3584 in bf16 (Qwen2-VL-7B). */
#define TS_CUDA_BLOCK   7168u
#define TS_CUDA_POISON  0xEEu /* region bytes nothing should touch */
#define TS_CUDA_DPOISON 0xDDu /* device bytes nothing should touch */

/* Create a CUDA engine with params (NULL for defaults); SKIP with the
 * library's message when there is no usable GPU. */
ect_copy_engine_t *ts_cuda_engine(const ect_copy_cuda_params_t *params);

/* A real /dev/shm MAP_SHARED mapping of len bytes filled with TS_CUDA_POISON. */
unsigned char *ts_cuda_region_map(size_t len);
void ts_cuda_region_unmap(unsigned char *base, size_t len);

/* Device buffer of len bytes filled with TS_CUDA_DPOISON. */
void *ts_cuda_dev_alloc(size_t len);
/* Write ts_cuda_pattern(seed, i) to dev[i]. */
void ts_cuda_dev_fill(void *dev, size_t len, uint64_t seed);
/* A malloc'd copy of len device bytes (cudaMemcpy, synchronous). */
unsigned char *ts_cuda_dev_read(const void *dev, size_t len);

/* Fail unless p[i] == ts_cuda_pattern(seed, first + i) for i < len. */
#define TS_CUDA_CHECK_PATTERN(p, len, seed, first)                                                 \
    ts_cuda_check_pattern(__FILE__, __LINE__, (p), (len), (seed), (first))
void ts_cuda_check_pattern(const char *file, int line, const unsigned char *p, size_t len,
                           uint64_t seed, uint64_t first);
/* Fail unless every p[i] == byte. */
#define TS_CUDA_CHECK_BYTES(p, len, byte)                                                          \
    ts_cuda_check_bytes(__FILE__, __LINE__, (p), (len), (byte))
void ts_cuda_check_bytes(const char *file, int line, const unsigned char *p, size_t len,
                         unsigned char byte);

/* n distinct block ids out of [0, n_blocks) in random order (seeded). */
void ts_cuda_random_ids(size_t *ids, size_t n, size_t n_blocks, uint64_t seed);

/* Ops for one entry of `bytes` payload stored in blocks ids[0..n) of region:
 * block k of the payload (the last one cut to the tail) goes to/from block
 * ids[k].  dev is the entry's device buffer.  Returns the number of ops
 * written to ops (ceil(bytes / TS_CUDA_BLOCK)). */
size_t ts_cuda_entry_ops(ect_copy_dir_t dir, unsigned char *region, const size_t *ids, void *dev,
                         size_t bytes, ect_copy_op_t *ops);

/* Check a saved entry in the region: its blocks hold the payload pattern,
 * the rest of a partial last block is still poison. */
void ts_cuda_check_saved(const unsigned char *region, const size_t *ids, size_t bytes,
                         uint64_t seed);

/* Check that block b of the region was never written (all poison). */
void ts_cuda_check_block_untouched(const unsigned char *region, size_t b);

/* Submit and wait; fails the case on any error. */
void ts_cuda_run(ect_copy_engine_t *e, ect_copy_dir_t dir, const ect_copy_op_t *ops, size_t n,
                 void *compute_stream);

/* Capture warning lines from the library's log from now on. */
void ts_cuda_log_capture(void);
/* Everything captured so far ("" if nothing). */
const char *ts_cuda_log_captured(void);

/* The engine's counters. */
struct ect__cuda_copy_stats ts_cuda_stats(ect_copy_engine_t *e);

#endif /* ECT_TESTS_SUPPORT_CUDA_H */
