/*
 * Test kernels for the CUDA copy-engine tests (see cuda_kernels.h).
 */
#include "copy/cuda/gather_copy.cuh"
#include "support/cuda_kernels.h"

namespace
{

__device__ __forceinline__ uint64_t
global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void
spin_then_fill(unsigned char *dev, size_t len, uint64_t seed, uint64_t spin_ns)
{
    /* The global timer counts nanoseconds whatever the SM clock does, so the
     * spin lasts spin_ns even when the GPU boosts or throttles. */
    const uint64_t t0 = global_ns();
    while (global_ns() - t0 < spin_ns) {
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        dev[i] = ts_cuda_pattern(seed, i);
}

} // namespace

extern "C" cudaError_t
ts_cuda_spin_then_fill(void *dev, size_t len, uint64_t seed, uint64_t spin_ns, cudaStream_t stream)
{
    unsigned char *p = static_cast<unsigned char *>(dev);
    void *args[] = {(void *)&p, (void *)&len, (void *)&seed, (void *)&spin_ns};
    return cudaLaunchKernel((const void *)spin_then_fill, dim3(64), dim3(256), args, 0, stream);
}

extern "C" void
ts_cuda_gather_on_host(const struct ect__gather_block *block, uint64_t grid_warps)
{
    for (uint64_t w = 0; w < grid_warps; w++)
        for (unsigned lane = 0; lane < 32; lane++)
            ect_gather::warp_walk(block->d, (size_t)block->n, block->total_chunks, w, grid_warps,
                                  lane);
}
