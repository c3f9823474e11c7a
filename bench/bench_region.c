/*
 * `ectier bench region`: what pre-faulting buys, on a 256 MiB region.  A region's first
 * copy pays a page fault per 4 KiB page in every process that maps it
 * (ceilings.md §4: 0.3-3 GB/s against 12-13 GB/s warm), so each process
 * that will copy pre-faults its own mapping at open.  Rows:
 *   - open of a new region (reserve pages + pre-fault), as bytes per second
 *     (no ceiling: an open copies nothing);
 *   - the first copy into it by the creator (one memcpy);
 *   - the first copy by a joiner that did not pre-fault (what a worker
 *     would pay without it);
 *   - the first copy by a joiner that did, and that joiner's open.
 * Each copy row is against the machine's best warm copy into the same region
 * measured in this run (the best of memcpy, non-temporal stores and rep movsb on
 * one thread, bench.h), and the joiners' first copies use that same way, so a
 * row measures what faults cost, not how the bytes are stored.
 * Uses a region in /dev/shm named ectier_bench_<pid>, removed at the end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ectier/region.h>

#include "bench.h"
#include "common/clock.h"

/* GB/s of one copy of len bytes with the ceiling's winning way. */
static double
copy_gbps(ect_bench_ceiling_t *c, void *dst, const void *src, size_t len)
{
    ect_copy_op_t op = {.dst = dst, .src = src, .len = len};
    return (double)len / ect_bench_ceiling_copy_best(c, &op, 1) / 1e9;
}

static int
open_timed(const ect_region_params_t *p, ect_region_t **r, double *gbps, uint64_t bytes)
{
    uint64_t t0 = ect__now_ns();
    if (ect_region_open(p, r) != ECT_OK) {
        fprintf(stderr, "bench region: %s\n", ect_last_error());
        return -1;
    }
    *gbps = (double)bytes / (double)(ect__now_ns() - t0);
    return 0;
}

int
ect_bench_region(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    const unsigned long mib = 256;
    /* One bf16 row of a 3584-wide model per block (Qwen2.5-VL-7B). */
    const uint64_t block = 3584 * 2;
    char name[64];
    snprintf(name, sizeof(name), "ectier_bench_%d", (int)getpid());
    ect_region_params_t p;
    memset(&p, 0, sizeof(p));
    p.name = name;
    p.geometry = (ect_geometry_t){.hidden_dim = 3584,
                                  .dtype = ECT_DTYPE_BF16,
                                  .block_size_bytes = block,
                                  .num_blocks = (uint64_t)mib * 1024 * 1024 / block};
    size_t len = (size_t)(p.geometry.num_blocks * block);

    int rc = 1;
    ect_region_t *creator = NULL, *cold = NULL, *warm = NULL;
    uint8_t *src = malloc(len);
    ect_bench_ceiling_t *c = ect_bench_ceiling_create(1);
    if (src == NULL || c == NULL) {
        fprintf(stderr, "bench region: cannot allocate %zu bytes\n", len);
        free(src);
        ect_bench_ceiling_destroy(c);
        return 1;
    }
    memset(src, 0x5a, len);

    double open_creator, first_creator, open_joiner, first_cold, first_warm, ceiling = 0;
    const char *way = NULL;
    if (open_timed(&p, &creator, &open_creator, len) != 0)
        goto free_src;
    /* The creator's first copy is the warm-up of the ceiling's ways, so it
     * is timed apart: one plain memcpy, as a creator would do it. */
    {
        uint64_t t0 = ect__now_ns();
        memcpy(ect_region_data(creator), src, len);
        first_creator = (double)len / (double)(ect__now_ns() - t0);
    }
    ect_copy_op_t op = {.dst = ect_region_data(creator), .src = src, .len = len};
    for (int rep = 0; rep < 3; rep++)
        if (ect_bench_ceiling_sample(c, &op, 1, NULL, NULL) != 0)
            goto close_regions;
    ceiling = ect_bench_ceiling_gbps(c, (double)len, &way);
    p.flags = ECT_REGION_NO_PREFAULT;
    if (open_timed(&p, &cold, &open_joiner, len) != 0)
        goto close_regions;
    first_cold = copy_gbps(c, ect_region_data(cold), src, len);
    p.flags = 0;
    if (open_timed(&p, &warm, &open_joiner, len) != 0)
        goto close_regions;
    first_warm = copy_gbps(c, ect_region_data(warm), src, len);

    printf("  region of %lu MiB (%llu blocks x %llu B); ceiling of the copies: %s, warm, into "
           "the region;\n"
           "  the joiners' first copies use the ceiling's way (%s); the creator's is one memcpy\n",
           mib, (unsigned long long)p.geometry.num_blocks, (unsigned long long)block,
           ect_bench_ceiling_describe(c), way);
    static const char *const names[] = {
        "creator open (reserve + pre-fault)", "creator first copy (memcpy)",
        "joiner first copy, no pre-fault", "joiner open (pre-fault)",
        "joiner first copy, pre-faulted"};
    const double values[] = {open_creator, first_creator, first_cold, open_joiner, first_warm};
    const double targets[] = {0, 0.9, 0, 0, 0.9};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        /* An open touches pages, it copies nothing: no copy ceiling. */
        int is_copy = i != 0 && i != 3;
        ect_bench_fig_t fig = {.name = names[i],
                               .value = values[i],
                               .unit = "GB/s",
                               .ceiling = is_copy ? ceiling : 0,
                               .ceiling_is = way,
                               .target = targets[i]};
        ect_bench_figure(&fig);
    }
    rc = 0;

close_regions:
    ect_region_close(warm);
    ect_region_close(cold);
    ect_region_close(creator);
free_src:
    ect_bench_ceiling_destroy(c);
    free(src);
    return rc;
}
