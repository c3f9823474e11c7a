/*
 * Copy plans: turn an entry's block runs into copy operations between the
 * engine's buffer and the region (SPEC §7, the worker copy path).
 *
 * An entry's payload of P bytes sits contiguously in engine memory; in the
 * region it occupies the blocks named by its runs, in the runs' order: the
 * entry's k-th block (counting through the runs) holds engine bytes
 * [k*bs, (k+1)*bs).  Only ceil(P / bs) blocks receive bytes, and the last copy
 * is cut to the exact tail, so the rest of the last block and any further
 * blocks are never touched.  Copies whose region and engine sides both
 * continue the previous copy are coalesced into it: consecutive ids inside a
 * run, runs adjacent in id order, and even consecutive entries whose engine
 * buffers abut.  A payload larger than its blocks is ECT_ERR_OVERFLOW, never
 * a truncation.  All address arithmetic is checked in uint64.
 *
 * A plan's op array grows on demand and keeps its capacity across reset, so a
 * worker that reuses one plan per step stops allocating once warm.
 *
 * Locking: none; a plan belongs to one thread at a time.
 */
#ifndef ECT_COPY_PLAN_H
#define ECT_COPY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/copy.h>
#include <ectier/types.h>

/* The region as the plan sees it: block i lives at base + i * block_size,
 * for i < num_blocks. */
typedef struct ect_copy_region_view {
    void *base;
    uint64_t block_size;
    uint64_t num_blocks;
} ect_copy_region_view_t;

/* A reusable list of copy ops; fields are read-only for users. */
typedef struct ect_copy_plan {
    ect_copy_op_t *ops;
    size_t n_ops;
    size_t cap;
} ect_copy_plan_t;

/* Start an empty plan (caller storage; no allocation). */
void ect__copy_plan_init(ect_copy_plan_t *plan);

/* Forget the ops but keep the capacity for the next step. */
void ect__copy_plan_reset(ect_copy_plan_t *plan);

/* Release the op array; the plan is empty and may be reused afterwards. */
void ect__copy_plan_cleanup(ect_copy_plan_t *plan);

/*
 * Append the ops that move one entry: a save copies engine_buf -> region
 * blocks, a load copies region blocks -> engine_buf.
 *   plan:          the plan to append to.
 *   dir:           ECT_COPY_SAVE or ECT_COPY_LOAD.
 *   region:        borrowed; base, block size and block count of the region.
 *   runs, n_runs:  borrowed; the entry's blocks in entry order (ids need not
 *                  ascend; runs of count 0 are allowed).  Block ids must be
 *                  distinct (the cache guarantees it; the plan does not check).
 *   engine_buf:    borrowed; payload_bytes of engine memory (may be NULL
 *                  when payload_bytes is 0).
 * Appends at most n_runs ops.  On failure the plan is unchanged.
 * Returns ECT_OK; ECT_ERR_INVALID_ARG (NULL argument, zero block size, bad
 * direction, a run past the region's last block); ECT_ERR_OVERFLOW (payload
 * larger than its blocks, a run or address computation that overflows);
 * ECT_ERR_NO_MEMORY.
 */
ect_status_t ect__copy_plan_add(ect_copy_plan_t *plan, ect_copy_dir_t dir,
                                const ect_copy_region_view_t *region, const ect_run_t *runs,
                                size_t n_runs, void *engine_buf, uint64_t payload_bytes);

#endif /* ECT_COPY_PLAN_H */
