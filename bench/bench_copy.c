/*
 * `ectier bench copy`: CPU copy engine save and load of 1, 8 and 32 MiB
 * entries against memcpy of the same bytes between the same buffers in the
 * same run (SPEC §12: target >= 0.9 x memcpy).
 *
 * The region side is a real /dev/shm mapping, unlinked as soon as it is
 * mapped (nothing can be left behind) and written once so every page exists
 * before timing: first touch costs 10-40x on these VMs (reference/
 * ceilings.md §4), and the region is pre-faulted in production too.  Engine
 * buffers are warmed the same way.  Blocks are 7168 bytes (3584 hidden x
 * bf16), so entries end in a partial block as real ones do.  Each entry is
 * timed from planning to landed (plan + submit + wait), in one contiguous
 * run and in 16 scattered runs; engine and memcpy repetitions alternate so
 * both see the same machine, and each figure is the median.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "bench.h"
#include "common/clock.h"
#include "copy/plan.h"

#define BLOCK_BYTES   7168u
#define FRAGMENTS     16
#define MAX_IN_FLIGHT 32
#define STREAM_BYTES  ((size_t)32 << 20) /* bytes in flight per rep, and the largest entry */

struct copy_bench {
    ect_copy_engine_t *engine;
    unsigned char *region;
    size_t region_len;
    uint64_t region_blocks;
    unsigned char *save_src; /* engine memory an entry is saved from */
    unsigned char *load_dst; /* engine memory an entry is loaded into */
    ect_copy_plan_t plan;
};

static int
fail(const char *what)
{
    fprintf(stderr, "bench copy: %s: %s\n", what, ect_last_error());
    return 1;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A /dev/shm mapping shaped like a region, every page written. */
static int
map_region(struct copy_bench *b, uint64_t blocks)
{
    char path[96];
    snprintf(path, sizeof(path), "/dev/shm/ectier_bench_copy_%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        perror("bench copy: create /dev/shm file");
        return 1;
    }
    b->region_blocks = blocks;
    b->region_len = (size_t)blocks * BLOCK_BYTES;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)b->region_len) == 0)
        p = mmap(NULL, b->region_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    unlink(path);
    close(fd);
    if (p == MAP_FAILED) {
        perror("bench copy: size or map the /dev/shm file");
        return 1;
    }
    b->region = p;
    memset(b->region, 0x5A, b->region_len);
    return 0;
}

/* Blocks one entry's layout spans in the region. */
static uint64_t
layout_span(uint64_t need, int fragmented)
{
    return fragmented ? FRAGMENTS * (need / FRAGMENTS + 2) : need;
}

/* Entry j's blocks: one run, or FRAGMENTS runs of near-equal length placed
 * out of order with gaps between them, so none coalesce; entry j's span
 * follows entry j-1's. */
static size_t
layout(ect_run_t *runs, uint64_t need, int fragmented, unsigned j)
{
    uint64_t base = j * layout_span(need, fragmented);
    if (!fragmented) {
        runs[0] = (ect_run_t){.first = base, .count = need};
        return 1;
    }
    uint64_t per = need / FRAGMENTS, extra = need % FRAGMENTS;
    for (unsigned i = 0; i < FRAGMENTS; i++) {
        unsigned slot = (i * 7) % FRAGMENTS; /* 7 is coprime with 16: a permutation */
        runs[i] = (ect_run_t){.first = base + slot * (per + 2), .count = per + (i < extra)};
    }
    return FRAGMENTS;
}

struct config {
    size_t payload;   /* bytes per entry */
    unsigned entries; /* entries in flight at once */
    int fragmented;   /* 16 runs per entry instead of 1 */
    ect_run_t runs[MAX_IN_FLIGHT][FRAGMENTS];
    size_t n_runs;
};

/* Plan and submit every entry of the config, then wait for all. */
static int
engine_copy(struct copy_bench *b, ect_copy_dir_t dir, const struct config *c)
{
    ect_copy_region_view_t rv = {
        .base = b->region, .block_size = BLOCK_BYTES, .num_blocks = b->region_blocks};
    unsigned char *engine = dir == ECT_COPY_SAVE ? b->save_src : b->load_dst;
    uint64_t tickets[MAX_IN_FLIGHT];
    for (unsigned j = 0; j < c->entries; j++) {
        ect__copy_plan_reset(&b->plan);
        if (ect__copy_plan_add(&b->plan, dir, &rv, c->runs[j], c->n_runs, engine + j * c->payload,
                               c->payload) != ECT_OK)
            return fail("plan");
        ect_copy_batch_t batch = {.dir = dir, .ops = b->plan.ops, .n_ops = b->plan.n_ops};
        if (ect_copy_submit(b->engine, &batch, &tickets[j]) != ECT_OK)
            return fail("submit");
    }
    for (unsigned j = 0; j < c->entries; j++)
        if (ect_copy_wait(b->engine, tickets[j]) != ECT_OK)
            return fail("wait");
    return 0;
}

/* The ceiling: one memcpy per entry of the same bytes between the same
 * buffers, contiguous on both sides. */
static void
memcpy_copy(struct copy_bench *b, ect_copy_dir_t dir, const struct config *c)
{
    for (unsigned j = 0; j < c->entries; j++) {
        unsigned char *region = b->region + c->runs[j][0].first * BLOCK_BYTES;
        if (dir == ECT_COPY_SAVE)
            memcpy(region, b->save_src + j * c->payload, c->payload);
        else
            memcpy(b->load_dst + j * c->payload, region, c->payload);
    }
}

static int
measure(struct copy_bench *b, struct config *c, ect_copy_dir_t dir, unsigned reps)
{
    uint64_t need = (c->payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    size_t total = c->payload * c->entries;
    for (unsigned j = 0; j < c->entries; j++)
        c->n_runs = layout(c->runs[j], need, c->fragmented, j);
    double *t_engine = malloc(reps * sizeof(double)), *t_memcpy = malloc(reps * sizeof(double));
    int rc = 1;
    if (t_engine == NULL || t_memcpy == NULL) {
        fprintf(stderr, "bench copy: out of memory\n");
        goto free_times;
    }

    /* Correctness first (a fast wrong copy is no result), and it leaves the
     * entries in their blocks for the loads: a round trip in this layout. */
    if (engine_copy(b, ECT_COPY_SAVE, c) != 0)
        goto free_times;
    memset(b->load_dst, 0, total);
    if (engine_copy(b, ECT_COPY_LOAD, c) != 0)
        goto free_times;
    if (memcmp(b->load_dst, b->save_src, total) != 0) {
        fprintf(stderr, "bench copy: round trip of %zu bytes changed them\n", total);
        goto free_times;
    }
    for (unsigned i = 0; i < 3; i++) { /* warm caches and the pools */
        memcpy_copy(b, dir, c);
        if (engine_copy(b, dir, c) != 0)
            goto free_times;
    }
    for (unsigned i = 0; i < reps; i++) {
        uint64_t t0 = ect__now_ns();
        if (engine_copy(b, dir, c) != 0)
            goto free_times;
        uint64_t t1 = ect__now_ns();
        memcpy_copy(b, dir, c);
        uint64_t t2 = ect__now_ns();
        t_engine[i] = (double)(t1 - t0) / 1e9;
        t_memcpy[i] = (double)(t2 - t1) / 1e9;
    }
    double gbps = (double)total / median(t_engine, reps) / 1e9;
    double ceiling = (double)total / median(t_memcpy, reps) / 1e9;
    char what[96];
    snprintf(what, sizeof(what), "%s %2zu MiB x%-2u in flight, %2zu run%s",
             dir == ECT_COPY_SAVE ? "save" : "load", c->payload >> 20, c->entries, c->n_runs,
             c->n_runs == 1 ? " " : "s");
    ect_bench_row(what, gbps, ceiling, "GB/s", 0.9);
    fflush(stdout);
    rc = 0;
free_times:
    free(t_memcpy);
    free(t_engine);
    return rc;
}

int
ect_bench_copy(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* One entry in flight (a step's latency), then 32 MiB of smaller
     * entries in flight at once (a step that saves several items). */
    static const struct {
        size_t payload;
        unsigned entries;
        unsigned reps;
    } plans[] = {
        {(size_t)1 << 20, 1, 501}, {(size_t)8 << 20, 1, 101}, {STREAM_BYTES, 1, 41},
        {(size_t)1 << 20, 32, 41}, {(size_t)8 << 20, 4, 41},
    };
    static struct config c;
    struct copy_bench b = {0};
    int rc = 1;

    /* Room for the widest layout: 32 MiB of entries, fragmented. */
    uint64_t blocks = 0;
    for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++) {
        uint64_t need = (plans[p].payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
        uint64_t span = plans[p].entries * layout_span(need, 1);
        blocks = span > blocks ? span : blocks;
    }
    if (map_region(&b, blocks) != 0)
        return 1;
    b.save_src = malloc(STREAM_BYTES);
    b.load_dst = malloc(STREAM_BYTES);
    if (b.save_src == NULL || b.load_dst == NULL) {
        fprintf(stderr, "bench copy: out of memory\n");
        goto free_buffers;
    }
    /* Non-zero, varied bytes, and every page touched before timing. */
    for (size_t i = 0; i < STREAM_BYTES; i++)
        b.save_src[i] = (unsigned char)(i * 131 + (i >> 12) + 1);
    memset(b.load_dst, 0, STREAM_BYTES);
    ect__copy_plan_init(&b.plan);
    if (ect_copy_engine_create_cpu(NULL, &b.engine) != ECT_OK) {
        fail("create the cpu engine");
        goto cleanup_plan;
    }
    printf("  cpu engine, default params (2 threads, 4 MiB pieces); %u-byte blocks; region: "
           "/dev/shm, %.1f MiB, pre-faulted\n",
           BLOCK_BYTES, (double)b.region_len / (1 << 20));
    printf("  figure: median of N warm reps of plan+submit for every entry, then wait for all\n"
           "  ceiling: memcpy of the same bytes between the same buffers, reps alternating\n"
           "  N = 501, 101, 41 for one entry of 1, 8, 32 MiB; 41 for 32 MiB of entries\n");
    for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++) {
        for (int fragmented = 0; fragmented <= 1; fragmented++) {
            for (int dir = ECT_COPY_SAVE; dir <= ECT_COPY_LOAD; dir++) {
                c.payload = plans[p].payload;
                c.entries = plans[p].entries;
                c.fragmented = fragmented;
                if (measure(&b, &c, (ect_copy_dir_t)dir, plans[p].reps) != 0)
                    goto destroy_engine;
            }
        }
    }
    rc = 0;
destroy_engine:
    ect_copy_engine_destroy(b.engine);
cleanup_plan:
    ect__copy_plan_cleanup(&b.plan);
free_buffers:
    free(b.load_dst);
    free(b.save_src);
    munmap(b.region, b.region_len);
    return rc;
}
