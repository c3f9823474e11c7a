/*
 * Planning a CUDA copy batch, without CUDA: coalescing adjacent operations,
 * choosing between one DMA copy per run and one gather/scatter kernel for the
 * whole batch, and laying out the kernel's descriptors.
 *
 * This is pure arithmetic on addresses, kept apart from the engine
 * (src/copy/cuda/) so that it is built and tested in every configuration,
 * sanitizers included, and so that the CUDA kernel (src/copy/cuda/gather.cu)
 * and the C engine share one descriptor layout.  No locking: every function
 * works on caller-owned arrays.
 */
#ifndef ECT_COPY_CUDA_PLAN_H
#define ECT_COPY_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/copy.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The inline helpers below are compiled for the device too, so the kernel
 * runs exactly the code the CPU tests check. */
#ifdef __CUDACC__
#define ECT__HOST_DEVICE __host__ __device__
#else
#define ECT__HOST_DEVICE
#endif

/* The kernel splits every run into chunks of this many bytes and gives each
 * chunk to one warp.  16 KiB is 32 lanes x 32 sixteen-byte accesses: long
 * enough that the per-chunk descriptor lookup is noise, short enough that a
 * large run spreads over many warps (and so many PCIe requests in flight). */
#define ECT_GATHER_CHUNK_BYTES 16384u

/* The longest piece one descriptor covers: longer runs are split.  A
 * multiple of the chunk, so that chunks never straddle two pieces. */
#define ECT_GATHER_PIECE_MAX ((uint64_t)1 << 30)

/* Descriptors passed inside the kernel launch itself (CUDA >= 12.1 allows
 * 32764 bytes of parameters): 16 + 1360 x 24 bytes.  Larger batches upload
 * their descriptor block to device memory first. */
#define ECT_GATHER_INLINE_MAX 1360

/* One kernel descriptor: copy len bytes from src to dst, both addresses the
 * device can use.  first_chunk is the number of chunks of all descriptors
 * before this one (strictly increasing, since len > 0), so a warp finds its
 * descriptor by binary search.  24 bytes, so that a 7 MiB entry of 1024
 * scattered blocks still fits in the launch's parameters. */
struct ect__gather_desc {
    uint64_t dst;
    uint64_t src;
    uint32_t len;         /* <= ECT_GATHER_PIECE_MAX */
    uint32_t first_chunk; /* the batch has < 2^32 chunks (ect__gather_fill checks) */
};

/* A batch's descriptors with their counts.  The same bytes serve as the
 * inline kernel's parameter block (gather.cu mirrors this layout) and, for
 * larger batches, as the block uploaded to device memory. */
struct ect__gather_block {
    uint64_t n;            /* descriptors in d */
    uint64_t total_chunks; /* chunks of all descriptors */
    struct ect__gather_desc d[];
};

/* Bytes of a block with room for n descriptors. */
#define ECT_GATHER_BLOCK_BYTES(n)                                                                  \
    (sizeof(struct ect__gather_block) + (size_t)(n) * sizeof(struct ect__gather_desc))

/* Merge each op into the previous one when both its dst and its src follow
 * on exactly (the order of ops is kept: we never sort), and drop zero-length
 * ops.  runs has room for n_ops entries (may alias nothing in ops).  Returns
 * the number of runs written.  Lengths are summed without overflow because
 * both ranges are contiguous in the address space. */
size_t ect__copy_coalesce(const ect_copy_op_t *ops, size_t n_ops, ect_copy_op_t *runs);

/* How a batch's runs are moved. */
typedef enum ect__cuda_path {
    ECT__CUDA_PATH_NONE = 0,   /* no bytes: lands at once */
    ECT__CUDA_PATH_MEMCPY = 1, /* one cudaMemcpyAsync per run (DMA engines) */
    ECT__CUDA_PATH_KERNEL = 2, /* one gather/scatter kernel through the host mapping */
} ect__cuda_path_t;

/* When the kernel is worth it, and how it gets its descriptors (see
 * ect__cuda_plan_policy_default). */
struct ect__cuda_plan_policy {
    size_t kernel_min_runs;    /* fewer runs than this: DMA copies */
    size_t kernel_max_avg_run; /* average run of at least this many bytes: DMA copies */
    size_t inline_max;         /* up to this many descriptors (capped at
                                  ECT_GATHER_INLINE_MAX) ride in the launch */
};

/* The default thresholds; the reasoning is in cuda_plan.c. */
struct ect__cuda_plan_policy ect__cuda_plan_policy_default(void);

/* Pick the path for n_runs runs moving total bytes.  host_mapped says every
 * host-side range is registered and mapped for the device; without it the
 * kernel cannot reach the host memory and the DMA path is the only one. */
ect__cuda_path_t ect__cuda_choose_path(const struct ect__cuda_plan_policy *policy, size_t n_runs,
                                       size_t total, int host_mapped);

/* Number of kernel chunks for a run of len bytes. */
static inline ECT__HOST_DEVICE uint64_t
ect__gather_chunks(uint64_t len)
{
    return (len + ECT_GATHER_CHUNK_BYTES - 1) / ECT_GATHER_CHUNK_BYTES;
}

/* Number of descriptors for n runs: one per ECT_GATHER_PIECE_MAX piece. */
size_t ect__gather_desc_count(const ect_copy_op_t *runs, size_t n);

/* Fill block (room for ect__gather_desc_count(runs, n) descriptors) from
 * runs whose addresses are already the device's view; zero-length runs must
 * have been dropped.  Sets block->n and block->total_chunks.  Returns ECT_OK,
 * or ECT_ERR_OVERFLOW when the batch has 2^32 chunks or more (64 TiB): the
 * caller then copies by DMA instead. */
ect_status_t ect__gather_fill(const ect_copy_op_t *runs, size_t n, struct ect__gather_block *block);

/* The descriptor holding chunk c: the last i in [lo, n) with
 * descs[i].first_chunk <= c (the caller guarantees descs[lo].first_chunk <= c).
 * A warp's chunks only grow, so it passes the previous answer as lo. */
static inline ECT__HOST_DEVICE size_t
ect__gather_find(const struct ect__gather_desc *descs, size_t lo, size_t n, uint64_t c)
{
    size_t hi = n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (descs[mid].first_chunk <= c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

#ifdef __cplusplus
}
#endif
#endif /* ECT_COPY_CUDA_PLAN_H */
