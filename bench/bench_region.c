/*
 * `ectier bench region`: what pre-faulting buys, on a 256 MiB region.  A region's first
 * copy pays a page fault per 4 KiB page in every process that maps it
 * (ceilings.md §4: 0.3-3 GB/s against 12-13 GB/s warm), so each process
 * that will copy pre-faults its own mapping at open.  Rows, each against a
 * warm memcpy into the same region measured in this run:
 *   - open of a new region (reserve pages + pre-fault), as bytes per second;
 *   - the first copy into it by the creator;
 *   - the first copy by a joiner that did not pre-fault (what a worker
 *     would pay without it);
 *   - the first copy by a joiner that did, and that joiner's open.
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

static double
copy_gbps(void *dst, const void *src, size_t len)
{
    uint64_t t0 = ect__now_ns();
    memcpy(dst, src, len);
    uint64_t t1 = ect__now_ns();
    return (double)len / (double)(t1 - t0);
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
    p.hidden_dim = 3584;
    p.dtype_code = 1;
    p.element_size = 2;
    p.block_size_bytes = block;
    p.num_blocks = (uint64_t)mib * 1024 * 1024 / block;
    size_t len = (size_t)(p.num_blocks * block);

    int rc = 1;
    ect_region_t *creator = NULL, *cold = NULL, *warm = NULL;
    uint8_t *src = malloc(len);
    if (src == NULL) {
        fprintf(stderr, "bench region: cannot allocate %zu bytes\n", len);
        return 1;
    }
    memset(src, 0x5a, len);

    double open_creator, first_creator, open_joiner, first_cold, first_warm, ceiling = 0;
    if (open_timed(&p, &creator, &open_creator, len) != 0)
        goto free_src;
    first_creator = copy_gbps(ect_region_data(creator), src, len);
    for (int rep = 0; rep < 3; rep++) {
        double g = copy_gbps(ect_region_data(creator), src, len);
        if (g > ceiling)
            ceiling = g;
    }
    p.flags = ECT_REGION_NO_PREFAULT;
    if (open_timed(&p, &cold, &open_joiner, len) != 0)
        goto close_regions;
    first_cold = copy_gbps(ect_region_data(cold), src, len);
    p.flags = 0;
    if (open_timed(&p, &warm, &open_joiner, len) != 0)
        goto close_regions;
    first_warm = copy_gbps(ect_region_data(warm), src, len);

    printf("  region of %lu MiB (%llu blocks x %llu B); ceiling: warm memcpy into it\n", mib,
           (unsigned long long)p.num_blocks, (unsigned long long)block);
    ect_bench_row("creator open (reserve + pre-fault)", open_creator, ceiling, "GB/s", 0);
    ect_bench_row("creator first copy", first_creator, ceiling, "GB/s", 0.9);
    ect_bench_row("joiner first copy, no pre-fault", first_cold, ceiling, "GB/s", 0);
    ect_bench_row("joiner open (pre-fault)", open_joiner, ceiling, "GB/s", 0);
    ect_bench_row("joiner first copy, pre-faulted", first_warm, ceiling, "GB/s", 0.9);
    rc = 0;

close_regions:
    ect_region_close(warm);
    ect_region_close(cold);
    ect_region_close(creator);
free_src:
    free(src);
    return rc;
}
