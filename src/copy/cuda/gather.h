/*
 * The gather/scatter kernel of the CUDA copy engine, seen from C: one launch
 * copies every run of a batch, each run described by a struct
 * ect__gather_desc (src/copy/cuda_plan.h) whose addresses the device can use
 * (device memory, and host memory through its registered mapping).
 */
#ifndef ECT_COPY_CUDA_GATHER_H
#define ECT_COPY_CUDA_GATHER_H

#include <cuda_runtime_api.h>

#include "copy/cuda_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the kernel (8 warps). */
#define ECT_GATHER_THREADS 256
/* Blocks per multiprocessor at most: half of an SM's 2048 threads, so the
 * copy leaves room for compute kernels that run beside it. */
#define ECT_GATHER_BLOCKS_PER_SM 4

/* Enqueue the kernel on stream for the batch described by host_block (host
 * memory holding room for at least ECT_GATHER_INLINE_MAX descriptors, with
 * n >= 1).  With dev_block NULL the descriptors are copied into the launch's
 * parameters (n <= ECT_GATHER_INLINE_MAX) and host_block may be reused as
 * soon as this returns; otherwise dev_block is the device copy of the block,
 * already queued on stream.  sm_count sizes the grid.  Returns the launch
 * status (a fault during the copy shows up later, in the batch's end
 * event). */
cudaError_t ect__gather_launch(const struct ect__gather_block *host_block,
                               const struct ect__gather_block *dev_block, int sm_count,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* ECT_COPY_CUDA_GATHER_H */
