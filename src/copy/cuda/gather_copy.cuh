/*
 * What one warp of the gather/scatter kernel does (gather.cu), written for
 * host and device alike: on the device each lane of a warp runs it in
 * lockstep; on the host a test runs it lane after lane, which gives the same
 * bytes because lanes never read what another lane writes (no shuffles, no
 * synchronisation), so the CPU checks the exact code the GPU runs.
 *
 * Lanes copy consecutive 16-byte vectors (coalesced), four loads in flight
 * per lane before the stores, which keeps enough PCIe read requests
 * outstanding for a host-to-device load.  A warp's chunk index only grows,
 * so its descriptor search starts where the previous one ended.
 */
#ifndef ECT_COPY_CUDA_GATHER_COPY_CUH
#define ECT_COPY_CUDA_GATHER_COPY_CUH

#include <stddef.h>
#include <stdint.h>

#include <vector_types.h>

#include "copy/cuda_plan.h"

namespace ect_gather
{

/* Copy len bytes as lane `lane` of a warp using accesses of type V, given
 * that dst and src have the same misalignment modulo sizeof(V): a few head
 * bytes bring both to alignment, the body moves in V-sized pieces, a few tail
 * bytes finish. */
template <typename V>
__host__ __device__ __forceinline__ void
warp_copy(unsigned char *dst, const unsigned char *src, uint64_t len, unsigned lane)
{
    const uint64_t align = sizeof(V);
    uint64_t head = (align - ((uintptr_t)dst & (align - 1))) & (align - 1);
    if (head > len)
        head = len;
    if (lane < head) /* head < 16 <= 32 lanes */
        dst[lane] = src[lane];
    dst += head;
    src += head;
    len -= head;

    const uint64_t n = len / align;
    V *d = reinterpret_cast<V *>(dst);
    const V *s = reinterpret_cast<const V *>(src);
    uint64_t i = lane;
    for (; i + 96 < n; i += 128) {
        /* All four loads are issued before the first store. */
        V a = s[i], b = s[i + 32], c = s[i + 64], e = s[i + 96];
        d[i] = a;
        d[i + 32] = b;
        d[i + 64] = c;
        d[i + 96] = e;
    }
    for (; i < n; i += 32)
        d[i] = s[i];

    const uint64_t done = n * align;
    if (lane < len - done) /* fewer than 16 bytes left */
        dst[done + lane] = src[done + lane];
}

/* One chunk: the widest access both addresses allow. */
__host__ __device__ __forceinline__ void
chunk_copy(unsigned char *dst, const unsigned char *src, uint64_t len, unsigned lane)
{
    const uintptr_t mis = (uintptr_t)dst ^ (uintptr_t)src;
    if ((mis & 15u) == 0)
        warp_copy<uint4>(dst, src, len, lane);
    else if ((mis & 7u) == 0)
        warp_copy<uint2>(dst, src, len, lane);
    else if ((mis & 3u) == 0)
        warp_copy<unsigned int>(dst, src, len, lane);
    else
        warp_copy<unsigned char>(dst, src, len, lane);
}

/* Lane `lane` of warp `warp` out of grid_warps: chunks warp, warp +
 * grid_warps, ... of the n descriptors. */
__host__ __device__ __forceinline__ void
warp_walk(const ect__gather_desc *descs, size_t n, uint64_t total_chunks, uint64_t warp,
          uint64_t grid_warps, unsigned lane)
{
    size_t lo = 0;
    for (uint64_t c = warp; c < total_chunks; c += grid_warps) {
        lo = ect__gather_find(descs, lo, n, c);
        const ect__gather_desc d = descs[lo];
        const uint64_t off = (c - d.first_chunk) * ECT_GATHER_CHUNK_BYTES;
        uint64_t len = d.len - off;
        if (len > ECT_GATHER_CHUNK_BYTES)
            len = ECT_GATHER_CHUNK_BYTES;
        chunk_copy(reinterpret_cast<unsigned char *>(d.dst + off),
                   reinterpret_cast<const unsigned char *>(d.src + off), len, lane);
    }
}

} // namespace ect_gather

#endif /* ECT_COPY_CUDA_GATHER_COPY_CUH */
