/*
 * `ectier bench copy`: CPU copy engine save and load of 1, 8 and 32 MiB
 * entries against the machine's best copy of the same bytes between the
 * same buffers in the same run (SPEC §12: target >= 0.9).
 *
 * The ceiling (bench.h) is the best of memcpy, non-temporal stores and rep
 * movsb on 1 thread and on as many threads as copy one batch in the engine
 * (the copy threads it wakes and the caller that waits), its helpers
 * already spinning when the clock starts: a physical limit, so a
 * ratio above 1 would mean the ceiling is wrong.  It copies each entry
 * contiguously on both sides, so a fragmented entry is held to the
 * contiguous ceiling.  Beside each one-entry figure a reference row holds it
 * to a second ceiling, the best copy that finds no thread polling (bench.h:
 * one thread, or helpers asleep when the clock starts and woken by the
 * copying thread): what any engine whose threads sleep between batches
 * could do here, so the row tells the wake-up's share of the gap from ours.
 * Beside a fragmented one-entry figure a third row holds it to the best
 * copy of its own runs (the ops the engine copies, sampled by a second
 * ceiling beside the first) that finds no thread polling, and a line gives
 * what copying in runs costs the machine against the contiguous copy.
 * Two more reference rows time the 1 MiB entry again: once after its copy
 * threads were woken and then slept as long as the ceiling's helpers (so
 * how long they slept is the same on both sides), and once with an engine
 * whose threads keep polling (so there is no wake-up at all).
 *
 * The region side is a real /dev/shm mapping, unlinked as soon as it is
 * mapped (nothing can be left behind) and written once so every page exists
 * before timing: first touch costs 10-40x on these VMs (reference/
 * ceilings.md §4), and the region is pre-faulted in production too.  Cache
 * state, the same before every timed copy (engine or ceiling): the region
 * side is evicted from the caches (a block being saved or loaded was last
 * touched long ago), the engine side is warm (the encoder just wrote it,
 * or will read it next).  Blocks are 7168 bytes (3584 hidden x bf16), so entries end in a partial
 * block as real ones do.  Each entry is timed from planning to landed (plan + submit + wait), in
 * one contiguous run and in 16 scattered runs; engine and ceiling repetitions alternate so both see
 * the same machine, and each figure is the median.  Each timed copy follows an untimed copy of the
 * same batch and then 1 ms or more of the copy threads asleep while the caller spins
 * (ect_bench_rest_copy_threads): the engine's own state as a run of copies leaves it, not as the
 * ceiling's samples between copies do, and wake-ups as after a real pause (bench step times its
 * steps the same way).
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "bench.h"
#include "common/clock.h"
#include "copy/cpu.h"
#include "copy/plan.h"

#define BLOCK_BYTES    7168u
#define FRAGMENTS      16
#define MAX_IN_FLIGHT  32
#define STREAM_BYTES   ((size_t)32 << 20) /* bytes in flight per rep, and the largest entry */
#define ENGINE_THREADS 2u                 /* the engine's default */

struct copy_bench {
    ect_copy_engine_t *engine;
    unsigned char *region;
    size_t region_len;
    uint64_t region_blocks;
    unsigned char *save_src; /* engine memory an entry is saved from */
    unsigned char *load_dst; /* engine memory an entry is loaded into */
    ect_copy_plan_t plan;
    ect_bench_ceiling_t *ceiling;
    ect_bench_ceiling_t *runs_ceiling; /* a fragmented entry's copy of its own runs */
};

static int
fail(const char *what)
{
    fprintf(stderr, "bench copy: %s: %s\n", what, ect_last_error());
    return 1;
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

/* b->plan gets the ops that move entry j of the config (what the engine
 * copies); 0, or 1 with a message printed. */
static int
plan_entry(struct copy_bench *b, ect_copy_dir_t dir, const struct config *c, unsigned j)
{
    ect_copy_region_view_t rv = {
        .base = b->region, .block_size = BLOCK_BYTES, .num_blocks = b->region_blocks};
    unsigned char *engine = dir == ECT_COPY_SAVE ? b->save_src : b->load_dst;
    ect__copy_plan_reset(&b->plan);
    if (ect__copy_plan_add(&b->plan, dir, &rv, c->runs[j], c->n_runs, engine + j * c->payload,
                           c->payload) != ECT_OK)
        return fail("plan");
    return 0;
}

/* Plan and submit every entry of the config, then wait for all. */
static int
engine_copy(struct copy_bench *b, ect_copy_dir_t dir, const struct config *c)
{
    uint64_t tickets[MAX_IN_FLIGHT];
    for (unsigned j = 0; j < c->entries; j++) {
        if (plan_entry(b, dir, c, j) != 0)
            return 1;
        ect_copy_batch_t batch = {.dir = dir, .ops = b->plan.ops, .n_ops = b->plan.n_ops};
        if (ect_copy_engine_submit(b->engine, &batch, &tickets[j]) != ECT_OK)
            return fail("submit");
    }
    for (unsigned j = 0; j < c->entries; j++)
        if (ect_copy_engine_wait(b->engine, tickets[j]) != ECT_OK)
            return fail("wait");
    return 0;
}

/* The ceiling's ops: one per entry, the same bytes between the same buffers,
 * contiguous on both sides. */
static void
ceiling_ops(struct copy_bench *b, ect_copy_dir_t dir, const struct config *c, ect_copy_op_t *ops)
{
    for (unsigned j = 0; j < c->entries; j++) {
        unsigned char *region = b->region + c->runs[j][0].first * BLOCK_BYTES;
        unsigned char *engine = (dir == ECT_COPY_SAVE ? b->save_src : b->load_dst) + j * c->payload;
        ops[j] = dir == ECT_COPY_SAVE ? (ect_copy_op_t){region, engine, c->payload}
                                      : (ect_copy_op_t){engine, region, c->payload};
    }
}

/* The cache state before every timed copy: the region span of the config's
 * entries evicted, the engine side warm. */
struct state {
    struct copy_bench *b;
    const struct config *c;
    ect_copy_dir_t dir;
};

static void
prepare(void *arg)
{
    const struct state *st = arg;
    uint64_t need = (st->c->payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    size_t span = (size_t)layout_span(need, st->c->fragmented) * BLOCK_BYTES;
    ect_bench_cold(st->b->region, span * st->c->entries);
    ect_bench_warm(st->dir == ECT_COPY_SAVE ? st->b->save_src : st->b->load_dst,
                   st->c->payload * st->c->entries);
}

/* How measure times the engine. */
enum mode {
    MODE_PLAIN,   /* after an untimed copy of the same batch and the threads' rest */
    MODE_POLLING, /* an engine whose copy threads poll for work all along */
    MODE_RESTED,  /* copy threads woken, then asleep as long as the no-polling
                   * ceiling's helpers before each rep */
};

/* MODE_RESTED's untimed prelude: an 8 MiB save (more than any engine copies
 * on the caller's thread, so every copy thread gets a piece) into the
 * region's start, then a wait until every copy thread sleeps, and
 * ECT_BENCH_ASLEEP_MIN_NS more, as the ceiling lets its helpers sleep. */
static int
rest_copy_threads(struct copy_bench *b)
{
    ect_copy_op_t op = {b->region, b->save_src, (size_t)8 << 20};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t ticket;
    if (ect_copy_engine_submit(b->engine, &batch, &ticket) != ECT_OK ||
        ect_copy_engine_wait(b->engine, ticket) != ECT_OK)
        return fail("wake the copy threads");
    if (ect_bench_wait_copy_threads_asleep(ect_bench_engine_stats, b->engine, "copy") != 0)
        return 1;
    uint64_t ns = ECT_BENCH_ASLEEP_MIN_NS;
    nanosleep(&(struct timespec){.tv_sec = (time_t)(ns / 1000000000u),
                                 .tv_nsec = (long)(ns % 1000000000u)},
              NULL);
    return 0;
}

/* A fragmented entry's figure (gbps) against the best copy of its own runs
 * that finds no thread polling (a row), and what copying in runs costs the
 * machine itself: the best copy of the runs against the best contiguous copy
 * of the same bytes (ceiling, asleep: the figure's two ceilings). */
static void
runs_rows(struct copy_bench *b, const struct config *c, ect_copy_dir_t dir, double gbps,
          double ceiling, double asleep)
{
    const char *way, *way_asleep;
    double runs = ect_bench_ceiling_gbps(b->runs_ceiling, (double)c->payload, &way);
    double runs_asleep =
        ect_bench_ceiling_asleep_gbps(b->runs_ceiling, (double)c->payload, &way_asleep);
    char what[112];
    snprintf(what, sizeof(what), "  ref: %s %zu MiB, %zu runs, vs the copy of its runs, no polling",
             dir == ECT_COPY_SAVE ? "save" : "load", c->payload >> 20, c->n_runs);
    ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                        .value = gbps,
                                        .unit = "GB/s",
                                        .ceiling = runs_asleep,
                                        .ceiling_is = way_asleep});
    printf("    the best copy of its %zu runs %.1f GB/s [%s], of the same bytes contiguous %.1f; "
           "finding no thread polling %.1f / %.1f\n",
           c->n_runs, runs, way, ceiling, runs_asleep, asleep);
}

/* One figure, or with MODE_POLLING and MODE_RESTED a reference row.  A
 * polling engine's reps all run before the ceiling's, whose helpers would
 * otherwise compete with the polling threads for the CPUs. */
static int
measure(struct copy_bench *b, struct config *c, ect_copy_dir_t dir, unsigned reps, enum mode mode)
{
    bool polling = mode == MODE_POLLING;
    uint64_t need = (c->payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    size_t total = c->payload * c->entries;
    for (unsigned j = 0; j < c->entries; j++)
        c->n_runs = layout(c->runs[j], need, c->fragmented, j);
    double *t_engine = malloc(reps * sizeof(double));
    ect_copy_op_t ops[MAX_IN_FLIGHT];
    struct state st = {.b = b, .c = c, .dir = dir};
    int rc = 1;
    if (t_engine == NULL) {
        fprintf(stderr, "bench copy: out of memory\n");
        return 1;
    }
    ceiling_ops(b, dir, c, ops);
    ect_bench_ceiling_reset(b->ceiling);
    /* A fragmented entry's reference: the same ceiling copying its own runs,
     * the ops the engine copies (the plan appends at most one a run). */
    ect_copy_op_t run_ops[FRAGMENTS];
    size_t n_run_ops = 0;
    bool by_runs = mode == MODE_PLAIN && c->entries == 1 && c->fragmented;
    if (by_runs) {
        if (plan_entry(b, dir, c, 0) != 0) {
            free(t_engine);
            return 1;
        }
        n_run_ops = b->plan.n_ops;
        memcpy(run_ops, b->plan.ops, n_run_ops * sizeof(run_ops[0]));
        ect_bench_ceiling_reset(b->runs_ceiling);
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
    for (unsigned i = 0; i < 3; i++) /* warm the pools */
        if (engine_copy(b, dir, c) != 0)
            goto free_times;
    struct ect__copy_cpu_stats polled_a = {0}, polled_z = {0};
    if (polling && ect__copy_cpu_stats(b->engine, &polled_a) != ECT_OK) {
        fail("read the polling engine's counters");
        goto free_times;
    }
    for (unsigned i = 0; i < reps; i++) {
        if (mode == MODE_RESTED && rest_copy_threads(b) != 0)
            goto free_times;
        /* The copy before (see the file comment). */
        if (mode == MODE_PLAIN &&
            (engine_copy(b, dir, c) != 0 ||
             ect_bench_rest_copy_threads(ect_bench_engine_stats, b->engine, "copy") != 0))
            goto free_times;
        prepare(&st);
        uint64_t t0 = ect__now_ns();
        if (engine_copy(b, dir, c) != 0)
            goto free_times;
        t_engine[i] = (double)(ect__now_ns() - t0) / 1e9;
        if (!polling && ect_bench_ceiling_sample(b->ceiling, ops, c->entries, prepare, &st) != 0)
            goto free_times;
        if (by_runs &&
            ect_bench_ceiling_sample(b->runs_ceiling, run_ops, n_run_ops, prepare, &st) != 0)
            goto free_times;
    }
    if (polling) {
        if (ect__copy_cpu_stats(b->engine, &polled_z) != ECT_OK) {
            fail("read the polling engine's counters");
            goto free_times;
        }
        ect_copy_engine_destroy(b->engine); /* its threads stop polling */
        b->engine = NULL;
        for (unsigned i = 0; i < reps; i++)
            if (ect_bench_ceiling_sample(b->ceiling, ops, c->entries, prepare, &st) != 0)
                goto free_times;
    }
    const char *way;
    double gbps = (double)total / ect_bench_median(t_engine, reps) / 1e9;
    double ceiling = ect_bench_ceiling_gbps(b->ceiling, (double)total, &way);
    char what[96], series[64];
    snprintf(what, sizeof(what), "%s %2zu MiB x%-2u in flight, %2zu run%s",
             dir == ECT_COPY_SAVE ? "save" : "load", c->payload >> 20, c->entries, c->n_runs,
             c->n_runs == 1 ? " " : "s");
    snprintf(series, sizeof(series), "%s, %zu run%s, x%u in flight",
             dir == ECT_COPY_SAVE ? "save" : "load", c->n_runs, c->n_runs == 1 ? "" : "s",
             c->entries);
    if (polling) {
        snprintf(what, sizeof(what), "  ref: %s %zu MiB, copy threads kept polling",
                 dir == ECT_COPY_SAVE ? "save" : "load", c->payload >> 20);
        ect_bench_figure(&(ect_bench_fig_t){
            .name = what, .value = gbps, .unit = "GB/s", .ceiling = ceiling, .ceiling_is = way});
        ect_bench_copy_engine_line("      ", &polled_a, &polled_z);
    } else if (mode == MODE_RESTED) {
        double asleep = ect_bench_ceiling_asleep_gbps(b->ceiling, (double)total, &way);
        snprintf(what, sizeof(what), "  ref: %s %zu MiB, threads asleep %g ms, vs no polling",
                 dir == ECT_COPY_SAVE ? "save" : "load", c->payload >> 20,
                 (double)ECT_BENCH_ASLEEP_MIN_NS / 1e6);
        ect_bench_figure(&(ect_bench_fig_t){
            .name = what, .value = gbps, .unit = "GB/s", .ceiling = asleep, .ceiling_is = way});
    } else {
        ect_bench_copy_figure(what, series, gbps, ceiling, way, (double)c->payload);
        if (c->entries == 1) {
            /* What a copy that finds no thread polling could do here. */
            double asleep = ect_bench_ceiling_asleep_gbps(b->ceiling, (double)total, &way);
            snprintf(what, sizeof(what), "  ref: %s %zu MiB, %zu run%s, vs no thread polling",
                     dir == ECT_COPY_SAVE ? "save" : "load", c->payload >> 20, c->n_runs,
                     c->n_runs == 1 ? "" : "s");
            ect_bench_figure(&(ect_bench_fig_t){
                .name = what, .value = gbps, .unit = "GB/s", .ceiling = asleep, .ceiling_is = way});
            if (by_runs)
                runs_rows(b, c, dir, gbps, ceiling, asleep);
        }
    }
    fflush(stdout);
    rc = 0;
free_times:
    free(t_engine);
    return rc;
}

int
ect_bench_copy(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* One entry in flight (a step's latency), then 32 MiB of smaller
     * entries in flight at once, submitted a batch each (a caller of the
     * engine that copies several entries; the worker would put a step's
     * entries in one batch). */
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
    ect_copy_cpu_params_t params = {.threads = ENGINE_THREADS};
    if (ect_copy_engine_create_cpu(&params, &b.engine) != ECT_OK) {
        fail("create the cpu engine");
        goto cleanup_plan;
    }
    b.ceiling = ect_bench_ceiling_create(ect__copy_cpu_copiers(ENGINE_THREADS));
    b.runs_ceiling = ect_bench_ceiling_create(ect__copy_cpu_copiers(ENGINE_THREADS));
    if (b.ceiling == NULL || b.runs_ceiling == NULL)
        goto destroy_engine;
    ect_bench_ceiling_add_asleep(b.ceiling);
    ect_bench_ceiling_add_asleep(b.runs_ceiling);
    printf("  cpu engine, %u copy threads, default pieces; %u-byte blocks; region: /dev/shm, "
           "%.1f MiB, pre-faulted\n",
           ENGINE_THREADS, BLOCK_BYTES, (double)b.region_len / (1 << 20));
    printf("  figure: median of N reps of plan+submit for every entry, then wait for all\n"
           "  ceiling: %s;\n"
           "    a fragmented entry is held to the contiguous copy (and in a reference row to "
           "the copy of its own runs); reps alternate with the engine's\n"
           "  cache state before every timed copy: region side %s, engine side warm\n"
           "  N = 501, 101, 41 for one entry of 1, 8, 32 MiB; 41 for 32 MiB of entries; each\n"
           "  after an untimed copy of the batch and 1 ms or more of the copy threads asleep\n",
           ect_bench_ceiling_describe(b.ceiling), ect_bench_cold_describe());
    for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++) {
        for (int fragmented = 0; fragmented <= 1; fragmented++) {
            for (int dir = ECT_COPY_SAVE; dir <= ECT_COPY_LOAD; dir++) {
                c.payload = plans[p].payload;
                c.entries = plans[p].entries;
                c.fragmented = fragmented;
                if (measure(&b, &c, (ect_copy_dir_t)dir, plans[p].reps, MODE_PLAIN) != 0)
                    goto destroy_engine;
            }
        }
    }
    /* Whether the engine's threads wake as fast as the ceiling's helpers
     * when they have slept as long: the same 1 MiB batches, each after the
     * copy threads were woken and slept as the helpers do. */
    printf("  reference: the 1 MiB entry again, each rep after an untimed 8 MiB save that wakes "
           "every copy thread, which then sleep %g ms, as the no-polling ceiling's helpers "
           "do\n",
           (double)ECT_BENCH_ASLEEP_MIN_NS / 1e6);
    for (int dir = ECT_COPY_SAVE; dir <= ECT_COPY_LOAD; dir++) {
        c.payload = (size_t)1 << 20;
        c.entries = 1;
        c.fragmented = 0;
        if (measure(&b, &c, (ect_copy_dir_t)dir, 301, MODE_RESTED) != 0)
            goto destroy_engine;
    }
    /* What the hand-off costs: the same 1 MiB batches with an engine whose
     * copy threads never fall asleep between them. */
    printf("  reference: an engine with spin_us = 100000, so that a copy thread is polling when "
           "each batch comes\n");
    ect_copy_engine_destroy(b.engine);
    b.engine = NULL;
    for (int dir = ECT_COPY_SAVE; dir <= ECT_COPY_LOAD; dir++) {
        ect_copy_cpu_params_t polling = {.threads = ENGINE_THREADS, .spin_us = 100000};
        if (ect_copy_engine_create_cpu(&polling, &b.engine) != ECT_OK) {
            fail("create the polling engine");
            goto destroy_engine;
        }
        c.payload = (size_t)1 << 20;
        c.entries = 1;
        c.fragmented = 0;
        if (measure(&b, &c, (ect_copy_dir_t)dir, 301, MODE_POLLING) != 0)
            goto destroy_engine;
    }
    rc = 0;
destroy_engine:
    ect_bench_ceiling_destroy(b.runs_ceiling);
    ect_bench_ceiling_destroy(b.ceiling);
    ect_copy_engine_destroy(b.engine);
cleanup_plan:
    ect__copy_plan_cleanup(&b.plan);
free_buffers:
    free(b.load_dst);
    free(b.save_src);
    munmap(b.region, b.region_len);
    return rc;
}
