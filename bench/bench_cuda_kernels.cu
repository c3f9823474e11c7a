/*
 * Kernels for the CUDA benchmark (see bench_cuda_kernels.h).
 */
#include "bench_cuda_kernels.h"

namespace
{

__global__ void
gate(volatile int *flag)
{
    /* Give up after 2 s of GPU time, so that a host that never opens the
     * gate (a bug) shows as an absurd figure instead of a hang. */
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (*flag == 0 && t - t0 < 2000000000ull);
}

__global__ void
compute(float *out, uint32_t iters)
{
    /* Four independent chains keep the FMA pipes busy; the result is stored
     * so that the compiler cannot drop the loop. */
    float a = threadIdx.x * 1e-3f, b = a + 1.f, c = a + 2.f, d = a + 3.f;
    for (uint32_t i = 0; i < iters; i++) {
        a = fmaf(a, 0.999f, 1e-3f);
        b = fmaf(b, 0.999f, 2e-3f);
        c = fmaf(c, 0.999f, 3e-3f);
        d = fmaf(d, 0.999f, 4e-3f);
    }
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

} // namespace

extern "C" cudaError_t
ect_bench_gate(volatile int *flag, cudaStream_t stream)
{
    void *args[] = {(void *)&flag};
    return cudaLaunchKernel((const void *)gate, dim3(1), dim3(1), args, 0, stream);
}

extern "C" cudaError_t
ect_bench_compute(float *out, unsigned blocks, uint32_t iters, cudaStream_t stream)
{
    void *args[] = {(void *)&out, (void *)&iters};
    return cudaLaunchKernel((const void *)compute, dim3(blocks), dim3(256), args, 0, stream);
}
