/*
 * Kernels the CUDA benchmark runs beside the copy engine (built only with
 * ECT_HAVE_CUDA): a gate that holds a stream until the host opens it, so
 * that event timings exclude host-side submission, and a compute-bound
 * stand-in for an encoder.
 */
#ifndef ECT_BENCH_CUDA_KERNELS_H
#define ECT_BENCH_CUDA_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue a one-thread kernel that spins until *flag (mapped pinned host
 * memory, as the device sees it) is non-zero, or 2 s have passed. */
cudaError_t ect_bench_gate(volatile int *flag, cudaStream_t stream);

/* Enqueue a compute-bound kernel: blocks x 256 threads, each running iters
 * dependent multiply-adds and writing one float of out (blocks * 256 floats). */
cudaError_t ect_bench_compute(float *out, unsigned blocks, uint32_t iters, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* ECT_BENCH_CUDA_KERNELS_H */
