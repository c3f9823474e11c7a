/*
 * Copy plans (see plan.h): block runs -> coalesced copy ops with an exact
 * tail.  Every check runs before the first op is appended, so a failing call
 * leaves the plan as it was.  No locking: a plan belongs to one thread.
 */
#include <stdlib.h>

#include "common/alloc.h"
#include "common/error.h"
#include "copy/plan.h"

void
ect__copy_plan_init(ect_copy_plan_t *plan)
{
    plan->ops = NULL;
    plan->n_ops = 0;
    plan->cap = 0;
}

void
ect__copy_plan_reset(ect_copy_plan_t *plan)
{
    plan->n_ops = 0;
}

void
ect__copy_plan_cleanup(ect_copy_plan_t *plan)
{
    ect__free(plan->ops);
    ect__copy_plan_init(plan);
}

/* Make room for `more` ops beyond n_ops, growing geometrically. */
static ect_status_t
reserve(ect_copy_plan_t *plan, size_t more)
{
    if (more <= plan->cap - plan->n_ops)
        return ECT_OK;
    if (more > SIZE_MAX / sizeof(ect_copy_op_t) - plan->n_ops)
        return ect__error(ECT_ERR_OVERFLOW, "copy plan: %zu more ops do not fit in memory", more);
    size_t want = plan->n_ops + more;
    size_t cap = plan->cap > 0 ? plan->cap : 16;
    while (cap < want)
        cap = cap > SIZE_MAX / sizeof(ect_copy_op_t) / 2 ? want : cap * 2;
    ect_copy_op_t *ops = ect__realloc(plan->ops, cap * sizeof(*ops));
    if (ops == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy plan: cannot grow to %zu ops", cap);
    plan->ops = ops;
    plan->cap = cap;
    return ECT_OK;
}

/* Append, merging into the previous op when both sides continue it. */
static void
append(ect_copy_plan_t *plan, void *dst, const void *src, size_t len)
{
    if (plan->n_ops > 0) {
        ect_copy_op_t *last = &plan->ops[plan->n_ops - 1];
        if ((char *)last->dst + last->len == (char *)dst &&
            (const char *)last->src + last->len == (const char *)src) {
            last->len += len;
            return;
        }
    }
    plan->ops[plan->n_ops++] = (ect_copy_op_t){.dst = dst, .src = src, .len = len};
}

/* Validate the region view and the runs; on success *total_p is the number
 * of blocks the runs hold. */
static ect_status_t
check_runs(const ect_copy_region_view_t *region, const ect_run_t *runs, size_t n_runs,
           uint64_t *total_p)
{
    uint64_t bs = region->block_size;
    uint64_t total = 0;

    if (region->num_blocks > UINT64_MAX / bs ||
        (uint64_t)(uintptr_t)region->base > UINTPTR_MAX - region->num_blocks * bs)
        return ect__error(ECT_ERR_OVERFLOW,
                          "copy plan: region of %llu blocks of %llu bytes overflows the address "
                          "space",
                          (unsigned long long)region->num_blocks, (unsigned long long)bs);
    for (size_t i = 0; i < n_runs; i++) {
        uint64_t first = runs[i].first, count = runs[i].count;
        if (count > UINT64_MAX - first)
            return ect__error(ECT_ERR_OVERFLOW,
                              "copy plan: block run %zu {first %llu, count %llu} overflows", i,
                              (unsigned long long)first, (unsigned long long)count);
        if (count > 0 && first + count > region->num_blocks)
            return ect__error(ECT_ERR_INVALID_ARG,
                              "copy plan: block run %zu {first %llu, count %llu} runs past the "
                              "region's %llu blocks",
                              i, (unsigned long long)first, (unsigned long long)count,
                              (unsigned long long)region->num_blocks);
        if (count > UINT64_MAX - total)
            return ect__error(ECT_ERR_OVERFLOW, "copy plan: the runs' block counts overflow");
        total += count;
    }
    *total_p = total;
    return ECT_OK;
}

ect_status_t
ect__copy_plan_add(ect_copy_plan_t *plan, ect_copy_dir_t dir, const ect_copy_region_view_t *region,
                   const ect_run_t *runs, size_t n_runs, void *engine_buf, uint64_t payload_bytes)
{
    if (plan == NULL || region == NULL || region->base == NULL || (n_runs > 0 && runs == NULL))
        return ect__error(ECT_ERR_INVALID_ARG, "copy plan: NULL plan, region or runs");
    if (dir != ECT_COPY_SAVE && dir != ECT_COPY_LOAD)
        return ect__error(ECT_ERR_INVALID_ARG, "copy plan: direction %d is not save or load",
                          (int)dir);
    if (region->block_size == 0)
        return ect__error(ECT_ERR_INVALID_ARG, "copy plan: block size is 0; it must be positive");
    if (payload_bytes > 0 && engine_buf == NULL)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "copy plan: NULL engine buffer for a payload of %llu bytes",
                          (unsigned long long)payload_bytes);
    if (payload_bytes > SIZE_MAX || (uint64_t)(uintptr_t)engine_buf > UINTPTR_MAX - payload_bytes)
        return ect__error(ECT_ERR_OVERFLOW,
                          "copy plan: engine buffer of %llu bytes overflows the address space",
                          (unsigned long long)payload_bytes);

    uint64_t bs = region->block_size;
    uint64_t total = 0;
    ect_status_t s = check_runs(region, runs, n_runs, &total);
    if (s != ECT_OK)
        return s;
    /* Blocks that get bytes: ceil(P / bs), computed without overflow. */
    uint64_t need = payload_bytes / bs + (payload_bytes % bs != 0);
    if (need > total)
        return ect__error(ECT_ERR_OVERFLOW,
                          "copy plan: payload of %llu bytes exceeds its %llu blocks of %llu bytes",
                          (unsigned long long)payload_bytes, (unsigned long long)total,
                          (unsigned long long)bs);
    s = reserve(plan, n_runs);
    if (s != ECT_OK)
        return s;

    /* Nothing below can fail: every offset is bounded by the region size or
     * the payload size, both checked above to fit the address space. */
    char *region_base = region->base;
    char *engine = engine_buf;
    uint64_t done = 0; /* blocks of the entry already planned */
    for (size_t i = 0; i < n_runs && done < need; i++) {
        uint64_t take = runs[i].count < need - done ? runs[i].count : need - done;
        if (take == 0)
            continue;
        uint64_t engine_off = done * bs;
        uint64_t len = done + take == need ? payload_bytes - engine_off : take * bs;
        char *region_ptr = region_base + runs[i].first * bs;
        if (dir == ECT_COPY_SAVE)
            append(plan, region_ptr, engine + engine_off, (size_t)len);
        else
            append(plan, engine + engine_off, region_ptr, (size_t)len);
        done += take;
    }
    return ECT_OK;
}
