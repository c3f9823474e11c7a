/*
 * The gather/scatter kernel: one launch moves all runs of a batch between
 * device memory and registered host memory (through its device mapping), so
 * that a save or load of many scattered blocks costs one driver call instead
 * of one cudaMemcpyAsync per block (SPEC §7; ~17x on the H200 for 7 KiB
 * blocks, reference/ceilings-gpu.md).
 *
 * Work split: every run is cut into ECT_GATHER_CHUNK_BYTES chunks and each
 * warp of a grid-stride loop takes one chunk at a time.  Lanes copy
 * consecutive 16-byte vectors (coalesced), four loads in flight per lane
 * before the stores, which keeps enough PCIe read requests outstanding for a
 * host-to-device load.  A warp's chunk index only grows, so its binary search
 * for the descriptor starts where the previous one ended.
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

namespace
{

/* Copy len bytes with one warp using accesses of type V, given that dst and
 * src have the same misalignment modulo sizeof(V): a few head bytes bring both
 * to alignment, the body moves in V-sized pieces, a few tail bytes finish. */
template <typename V>
__device__ __forceinline__ void
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

/* The grid-stride walk shared by both kernels: warp w takes chunks w,
 * w + grid_warps, ...; descs may live in device memory or in the launch's
 * parameter space. */
__device__ __forceinline__ void
gather_walk(const ect__gather_desc *descs, size_t n, uint64_t total_chunks)
{
    const unsigned lane = threadIdx.x & 31u;
    const uint64_t grid_warps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
    size_t lo = 0;
    for (uint64_t c = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; c < total_chunks;
         c += grid_warps) {
        lo = ect__gather_find(descs, lo, n, c);
        const ect__gather_desc d = descs[lo];
        const uint64_t off = (c - d.first_chunk) * ECT_GATHER_CHUNK_BYTES;
        uint64_t len = d.len - off;
        if (len > ECT_GATHER_CHUNK_BYTES)
            len = ECT_GATHER_CHUNK_BYTES;
        unsigned char *dst = reinterpret_cast<unsigned char *>(d.dst + off);
        const unsigned char *src = reinterpret_cast<const unsigned char *>(d.src + off);
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
