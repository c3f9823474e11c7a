/*
 * Test kernels for the CUDA copy-engine tests (tests/support/cuda_kernels.cu) and the
 * byte pattern they share with the host.  Built only with ECT_HAVE_CUDA.
 */
#ifndef ECT_TESTS_SUPPORT_CUDA_KERNELS_H
#define ECT_TESTS_SUPPORT_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "copy/cuda_plan.h"

#ifdef __CUDACC__
#define TS_CUDA_HD __host__ __device__
#else
#define TS_CUDA_HD
#endif

/* Byte i of the pattern for seed: well mixed and never zero, so that a copy
 * that moved nothing, or the wrong bytes, cannot match by accident. */
static inline TS_CUDA_HD uint8_t
ts_cuda_pattern(uint64_t seed, uint64_t i)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + i;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)(x % 255u + 1u);
}

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue on stream a kernel that spins for spin_ns nanoseconds of GPU time
 * (the global timer) and then writes ts_cuda_pattern(seed, i) to dev[i] for
 * i < len: the last thing it does is produce the bytes a save must see. */
cudaError_t ts_cuda_spin_then_fill(void *dev, size_t len, uint64_t seed, uint64_t spin_ns,
                                   cudaStream_t stream);

/* Run the gather kernel's warp code (copy/cuda/gather_copy.cuh) on the CPU
 * for a grid of grid_warps warps, lane after lane, on host addresses.  Needs
 * no GPU. */
void ts_cuda_gather_on_host(const struct ect__gather_block *block, uint64_t grid_warps);

#ifdef __cplusplus
}
#endif
#endif /* ECT_TESTS_SUPPORT_CUDA_KERNELS_H */
