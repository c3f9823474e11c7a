/*
 * Planning a CUDA copy batch (cuda_plan.h): coalescing, path choice and the
 * gather kernel's descriptor layout.  Pure functions over caller arrays; no
 * CUDA, no locking, built in every configuration.
 */
#include "copy/cuda_plan.h"

size_t
ect__copy_coalesce(const ect_copy_op_t *ops, size_t n_ops, ect_copy_op_t *runs)
{
    size_t n = 0;
    for (size_t i = 0; i < n_ops; i++) {
        const ect_copy_op_t *op = &ops[i];
        if (op->len == 0)
            continue;
        if (n > 0) {
            ect_copy_op_t *last = &runs[n - 1];
            uintptr_t last_dst_end = (uintptr_t)last->dst + last->len;
            uintptr_t last_src_end = (uintptr_t)last->src + last->len;
            if (last_dst_end == (uintptr_t)op->dst && last_src_end == (uintptr_t)op->src) {
                last->len += op->len;
                continue;
            }
        }
        runs[n++] = *op;
    }
    return n;
}

/*
 * The thresholds, from the H200 figures in reference/ceilings-gpu.md:
 *
 * - One cudaMemcpyAsync costs about 2.3 us on top of its bytes (1024 copies
 *   of 7 KiB took 2.365 ms), which is the time PCIe gen 5 needs for ~126 KB.
 *   A 1 MiB copy already runs at 50.9 GB/s, 0.93 of the 55 GB/s ceiling, and
 *   DMA copies do not take SMs from the engine's compute.  So runs averaging
 *   1 MiB or more go to the DMA engines.
 * - The kernel path has a fixed cost of roughly two driver calls (descriptor
 *   upload + launch), so for one to three runs DMA copies are never slower.
 * - Between those bounds the per-copy overhead dominates quickly (256 KiB
 *   runs would reach only ~2/3 of the ceiling by DMA), so the kernel wins.
 * - Descriptors ride inside the launch whenever they fit: uploading them
 *   first costs one more DMA copy and a copy-to-kernel dependency, a few us
 *   that matter for a 1 MiB entry (~19 us of PCIe time).
 */
struct ect__cuda_plan_policy
ect__cuda_plan_policy_default(void)
{
    struct ect__cuda_plan_policy p = {
        .kernel_min_runs = 4,
        .kernel_max_avg_run = (size_t)1 << 20,
        .inline_max = ECT_GATHER_INLINE_MAX,
    };
    return p;
}

ect__cuda_path_t
ect__cuda_choose_path(const struct ect__cuda_plan_policy *policy, size_t n_runs, size_t total,
                      int host_mapped)
{
    if (n_runs == 0 || total == 0)
        return ECT__CUDA_PATH_NONE;
    if (!host_mapped || n_runs < policy->kernel_min_runs)
        return ECT__CUDA_PATH_MEMCPY;
    /* total / n_runs >= max_avg, written so that it cannot overflow. */
    if (total / n_runs >= policy->kernel_max_avg_run)
        return ECT__CUDA_PATH_MEMCPY;
    return ECT__CUDA_PATH_KERNEL;
}

size_t
ect__gather_desc_count(const ect_copy_op_t *runs, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += (size_t)((runs[i].len + ECT_GATHER_PIECE_MAX - 1) / ECT_GATHER_PIECE_MAX);
    return count;
}

ect_status_t
ect__gather_fill(const ect_copy_op_t *runs, size_t n, struct ect__gather_block *block)
{
    uint64_t chunks = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t dst = (uint64_t)(uintptr_t)runs[i].dst, src = (uint64_t)(uintptr_t)runs[i].src;
        for (uint64_t off = 0; off < runs[i].len; off += ECT_GATHER_PIECE_MAX) {
            uint64_t len = runs[i].len - off;
            if (len > ECT_GATHER_PIECE_MAX)
                len = ECT_GATHER_PIECE_MAX;
            if (chunks > UINT32_MAX)
                return ECT_ERR_OVERFLOW;
            block->d[k].dst = dst + off;
            block->d[k].src = src + off;
            block->d[k].len = (uint32_t)len;
            block->d[k].first_chunk = (uint32_t)chunks;
            chunks += ect__gather_chunks(len);
            k++;
        }
    }
    if (chunks > UINT32_MAX)
        return ECT_ERR_OVERFLOW;
    block->n = k;
    block->total_chunks = chunks;
    return ECT_OK;
}
