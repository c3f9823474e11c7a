/*
 * The gather/scatter kernel: one launch moves all runs of a batch between
 * device memory and registered host memory (through its device mapping), so
 * that a save or load of many scattered blocks costs one driver call instead
 * of one cudaMemcpyAsync per block (SPEC §7; ~17x on the H200 for 7 KiB
 * blocks, reference/ceilings-gpu.md).
 *
 * Work split: every run is cut into ECT_GATHER_CHUNK_BYTES chunks and each
 * warp of a grid-stride loop takes one chunk at a time; the per-warp code is
 * in gather_copy.cuh, host-callable so that tests emulate it on the CPU.
 *
 * Descriptors reach the kernel inside the launch's parameters for batches up
 * to ECT_GATHER_INLINE_MAX runs (no upload, no copy-to-kernel dependency),
 * or from device memory, uploaded on the same stream, for larger batches.
 *
 * Invariants (guaranteed by the engine): descriptors have len > 0 and
 * strictly increasing first_chunk; the ranges of different descriptors do not
 * overlap in dst.  No synchronisation between warps is needed.
 */
#include <stddef.h>
#include <stdint.h>

#include "copy/cuda/gather.h"
#include "copy/cuda/gather_copy.cuh"

namespace
{

/* The grid-stride walk shared by both kernels (gather_copy.cuh); descs may
 * live in device memory or in the launch's parameter space. */
__device__ __forceinline__ void
gather_walk(const ect__gather_desc *descs, size_t n, uint64_t total_chunks)
{
    const uint64_t grid_warps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    ect_gather::warp_walk(descs, n, total_chunks, warp, grid_warps, threadIdx.x & 31u);
}

/* Descriptors uploaded to device memory (batches above the inline limit). */
__global__ void
__launch_bounds__(ECT_GATHER_THREADS)
    gather_uploaded(const ect__gather_desc *__restrict__ descs, size_t n, uint64_t total_chunks)
{
    gather_walk(descs, n, total_chunks);
}

/* Descriptors inside the launch: the same layout as struct
 * ect__gather_block with room for CAP descriptors.  __grid_constant__ lets
 * the kernel address the parameter itself (constant bank, broadcast to the
 * warp on the uniform binary search) instead of copying it per thread. */
template <int CAP> struct inline_block {
    uint64_t n;
    uint64_t total_chunks;
    ect__gather_desc d[CAP];
};

template <int CAP>
__global__ void
__launch_bounds__(ECT_GATHER_THREADS) gather_inline(const __grid_constant__ inline_block<CAP> p)
{
    gather_walk(p.d, (size_t)p.n, p.total_chunks);
}

/* Two sizes: one that fits the classic 4 KiB parameter limit (cheaper to
 * launch) and one up to the 32 KiB limit. */
constexpr int SMALL = 160;
constexpr int LARGE = ECT_GATHER_INLINE_MAX;
static_assert(sizeof(inline_block<SMALL>) <= 4096, "small inline block exceeds 4 KiB");
static_assert(sizeof(inline_block<LARGE>) <= 32764, "large inline block exceeds 32764 bytes");
static_assert(sizeof(ect__gather_desc) == 24, "descriptor layout changed");
static_assert(offsetof(inline_block<LARGE>, d) == offsetof(ect__gather_block, d),
              "inline block and ect__gather_block disagree");

} // namespace

extern "C" cudaError_t
ect__gather_launch(const struct ect__gather_block *host_block,
                   const struct ect__gather_block *dev_block, int sm_count, cudaStream_t stream)
{
    const size_t n = (size_t)host_block->n;
    const uint64_t total_chunks = host_block->total_chunks;
    if (n == 0 || total_chunks == 0 || sm_count <= 0 ||
        (dev_block == NULL && n > ECT_GATHER_INLINE_MAX))
        return cudaErrorInvalidValue;
    const uint64_t warps_per_block = ECT_GATHER_THREADS / 32;
    uint64_t blocks = (total_chunks + warps_per_block - 1) / warps_per_block;
    const uint64_t max_blocks = (uint64_t)sm_count * ECT_GATHER_BLOCKS_PER_SM;
    if (blocks > max_blocks)
        blocks = max_blocks;
    const dim3 grid((unsigned)blocks), block(ECT_GATHER_THREADS);
    /* cudaLaunchKernel returns this launch's status directly, unlike <<<>>>
     * followed by cudaGetLastError, which could report an older error.  It
     * copies the parameters before returning. */
    if (dev_block != NULL) {
        const ect__gather_desc *descs = dev_block->d;
        void *args[] = {(void *)&descs, (void *)&n, (void *)&total_chunks};
        return cudaLaunchKernel((const void *)gather_uploaded, grid, block, args, 0, stream);
    }
    /* The parameter is read from host_block as a whole inline_block<CAP>;
     * the caller's buffer has room for LARGE descriptors, of which only the
     * first n are meaningful. */
    void *args[] = {(void *)host_block};
    if (n <= SMALL)
        return cudaLaunchKernel((const void *)gather_inline<SMALL>, grid, block, args, 0, stream);
    return cudaLaunchKernel((const void *)gather_inline<LARGE>, grid, block, args, 0, stream);
}
