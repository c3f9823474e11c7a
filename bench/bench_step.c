/*
 * `ectier bench step`: the whole step protocol in one process — a scheduler
 * and a worker (CPU copy engine) over a real /dev/shm region — saving and
 * reloading 1, 8 and 32 MiB entries, against the machine's best copy of the
 * same bytes between the same buffer and blocks in the same run (SPEC §12:
 * CPU-tier save/load of >= 1 MiB entries >= 0.9 x the copy).
 *
 * A save step is timed from update_state_after_alloc to the worker's report
 * applied by the scheduler: build and encode the step metadata, bind it,
 * save, submit, wait until landed, take and encode the report, apply it.  A
 * load step likewise, from has_cache_item to the applied report.  So the
 * figure includes every cost the protocol adds to the copy itself; a
 * breakdown line gives the median of each part, and what the copy threads'
 * hand-offs cost (a woken thread starts late: that is the VM's wake-up).
 *
 * The ceiling (bench.h) is the best of memcpy, non-temporal stores and rep
 * movsb on 1 thread and on as many threads as copy one batch in the engine
 * (the copy threads it wakes and the caller that waits), helpers
 * already spinning: a physical limit.  Cache state, the same before every
 * timed step and ceiling copy: the region's blocks evicted from the caches
 * (a new entry's blocks, and an entry's blocks when it is loaded, were last
 * touched long ago), the engine buffer warm.  Each rep saves and loads two
 * new entries and times the second pair: the first pair leaves the
 * scheduler's, worker's and engine's own state as a run of steps leaves it,
 * not as the ceilings' samples of the rep before do (their helpers asleep
 * 1 ms or more, some 20 MiB copied), which are not part of the workload; a
 * reference row gives the first pair's saves, which meet that state, against
 * the same ceiling.  Between the pairs the copy threads sleep as long as the
 * no-polling ceiling's helpers do (1 ms or more) while the caller spins, as
 * the engine's own thread stays busy between steps.  The ceiling copies through the worker's own
 * mapping of the region, right after the timed pair (whose load has just read the blocks): the page
 * translations the steps loaded are still there (not cleared: on the project's VMs clearing them
 * sets off the hypervisor's own page-table refills, which hit the engine's hand-offs far harder
 * than a plain copy), so if anything the ceiling is favoured.  Every step pair saves a new entry;
 * the region holds a few, so older ones are evicted as in production. Blocks are 7168 bytes (3584
 * hidden x bf16): entries end in a partial block.  The region is pre-faulted and the engine's pools
 * warm before timing.  A first line gives the fixed cost of a step, with a 1000-byte entry, and a
 * second the same after 64 MiB of other data were read (the scheduler's and worker's own state then
 * comes from memory, as it does after a large entry's copy: the small parts of the 8 and 32 MiB
 * breakdowns grow by that much).
 *
 * Then references that tell the machine's share from ours.  Two rows per
 * size hold the save and load steps to the best copy that finds no thread
 * polling (bench.h: one thread, or helpers asleep when the clock starts and
 * woken by the copying thread), sampled beside the first ceiling: the
 * figure an engine whose threads sleep between steps could reach; a third
 * holds the round trip to both.  After each
 * size's figures (bench/bench_step_machine.c), a line times the ceiling's winning way copying the
 * save's bytes into the blocks of the oldest entry the region holds (the blocks the next save gets:
 * with steps paced so that they are as old as the timed steps' blocks were, and untouched since
 * they were flushed, as a save step meets them), its winning way among those that find no thread
 * polling copying into such blocks (the copy that meets both the blocks and the threads as a save
 * step does), and into blocks a step has just written (what the ceiling beside the figure meets),
 * and gives the save step's ratio to the first two (also as rows of their own, "ref: save step N
 * MiB vs copy into as old blocks" and "... vs no thread polling, into as old blocks", and the
 * round trip against the latter plus the load's no-polling ceiling), and the
 * engine's copy alone into such old blocks.  A line
 * times 1 MiB copied into region pages last written 0 s, as long before as
 * the 1 MiB save steps' blocks were (their median age, tracked block by
 * block) and 1 s before, by every way of the ceiling.  The 1, 8 and 32 MiB
 * rows run again with each save's blocks written (and evicted) just before
 * the step, untimed ("fresh blocks"): the ceilings beside the figures copy
 * right after the step, into pages it has just written, while a save step
 * writes blocks last written when an entry since evicted was saved, whose
 * translations are no longer cached (on a VM, a walk of two levels of page
 * tables per 4 KiB page) and which, on the project's VMs, cost more to
 * write the longer they were left alone.  And where every copy thread the
 * engine runs at once can have a CPU of its own beside the caller's, the
 * 1 MiB rows run with the copy threads kept polling between batches
 * (copy_spin_us at its most): the figure a deployment that gives the
 * engine its cores gets, with no wake-up in it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "bench.h"
#include "bench_step.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "copy/cpu.h"
#include "ectier_build_config.h"
#include "step/report.h"

/* The parts' names, in enum part's order. */
static const char *const PART_NAMES[N_PARTS] = {"schedule", "metadata", "bind", "submit",
                                                "copy",     "report",   "apply"};

static int
fail(const char *what)
{
    fprintf(stderr, "bench step: %s: %s\n", what, ect_last_error());
    return 1;
}

static int
grow(struct step_bench *b, size_t need)
{
    if (need <= b->buf_cap)
        return 0;
    unsigned char *p = realloc(b->buf, need);
    if (p == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        return 1;
    }
    b->buf = p;
    b->buf_cap = need;
    return 0;
}

static ect_status_t
load_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct step_bench *b = user;
    (void)key;
    (void)n_tokens;
    if (nbytes > MAX_PAYLOAD + BLOCK_BYTES)
        return ECT_ERR_OVERFLOW;
    *dst_p = b->dst;
    return ECT_OK;
}

/* Scheduler -> worker: build and encode the step (META), bind it on the
 * worker (BIND).  The step's value goes back to the scheduler once encoded
 * and the report to the worker, as an engine in C does: steps then
 * allocate nothing (the fixed-cost line counts). */
static int
ship_meta(struct step_bench *b, struct stamps *s)
{
    ect_step_meta_t *m;
    size_t len;
    if (ect_scheduler_build_connector_meta(b->sched, &m) != ECT_OK)
        return fail("build_connector_meta");
    int rc = grow(b, ect_step_meta_encoded_size(m)) != 0 ||
             ect_step_meta_encode(m, b->buf, b->buf_cap, &len) != ECT_OK;
    ect_scheduler_recycle_connector_meta(b->sched, m);
    if (rc)
        return fail("encode the step metadata");
    s->t[META + 1] = ect__now_ns();
    if (ect_worker_bind_metadata(b->worker, b->buf, len) != ECT_OK)
        return fail("bind the step metadata");
    s->t[BIND + 1] = ect__now_ns();
    return 0;
}

/* Worker -> scheduler: wait until landed (COPY), end the step, take and
 * encode the report (REPORT), apply it (APPLY). */
static int
ship_report(struct step_bench *b, struct stamps *s)
{
    ect_step_report_t *r = NULL;
    size_t len = 0;
    if (ect_worker_wait(b->worker) != ECT_OK)
        return fail("worker wait");
    s->t[COPY + 1] = ect__now_ns();
    ect_worker_clear_metadata(b->worker);
    if (ect_worker_take_report(b->worker, &r) != ECT_OK || r == NULL)
        return fail("take_report");
    int rc = grow(b, ect_step_report_encoded_size(r)) != 0 ||
             ect_step_report_encode(r, b->buf, b->buf_cap, &len) != ECT_OK;
    ect_worker_recycle_report(b->worker, r);
    s->t[REPORT + 1] = ect__now_ns();
    rc = rc || ect_scheduler_update_connector_output(b->sched, b->buf, len) != ECT_OK;
    s->t[APPLY + 1] = ect__now_ns();
    return rc ? fail("apply the report") : 0;
}

static int
update(struct step_bench *b, const char *key, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = key, .num_tokens = tokens, .has_local_input = 1};
    ect_request_t req = {.request_id = "bench", .features = &f, .n_features = 1};
    return ect_scheduler_update_state_after_alloc(b->sched, &req, 0) != ECT_OK
               ? fail("update_state_after_alloc")
               : 0;
}

/* For the fresh-blocks rows: write the blocks the save was given and
 * evict them again (the cache state the figures start from), then warm the
 * source again; the time this takes is moved out of the step's stamps so
 * far.  What is left different from a normal save is only that the blocks'
 * pages were written a moment ago: their translations are cached (and on
 * the project's VMs, the first-write cost of a page left alone is paid). */
static void
refresh_blocks(struct step_bench *b, const ect_run_t *runs, size_t n_runs, size_t payload,
               struct stamps *s)
{
    uint64_t t0 = ect__now_ns();
    unsigned char *region = ect__worker_region_data(b->worker);
    size_t off = 0;
    for (size_t i = 0; i < n_runs && off < payload; i++) {
        size_t len = (size_t)runs[i].count * BLOCK_BYTES;
        if (len > payload - off)
            len = payload - off;
        unsigned char *blk = region + runs[i].first * BLOCK_BYTES;
        memcpy(blk, b->src + off, len);
        ect_bench_cold(blk, len);
        off += len;
    }
    ect_bench_warm(b->src, payload);
    uint64_t d = ect__now_ns() - t0;
    for (int p = 0; p <= BIND + 1; p++)
        s->t[p] += d;
}

/* One save step of key; runs and n_runs get its blocks (for the ceiling). */
int
ect_bench_step_save(struct step_bench *b, const char *key, size_t payload, ect_run_t *runs,
                    size_t *n_runs, struct stamps *s)
{
    uint64_t tokens = (payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    s->t[0] = ect__now_ns();
    if (update(b, key, tokens) != 0)
        return 1;
    s->t[SCHEDULE + 1] = ect__now_ns();
    if (ship_meta(b, s) != 0)
        return 1;
    const ect_step_item_t *it = ect_step_meta_find_save(ect_worker_metadata(b->worker), key);
    if (it == NULL || it->n_runs > MAX_RUNS) {
        fprintf(stderr, "bench step: no save of %s in the step (region too small?)\n", key);
        return 1;
    }
    memcpy(runs, it->runs, it->n_runs * sizeof(*runs));
    *n_runs = it->n_runs;
    if (b->fresh_blocks)
        refresh_blocks(b, runs, it->n_runs, payload, s);
    if (ect_worker_save(b->worker, key, b->src, payload, NULL, NULL) != ECT_OK ||
        ect_worker_get_finished(b->worker) != ECT_OK)
        return fail("save");
    s->t[SUBMIT + 1] = ect__now_ns();
    return ship_report(b, s);
}

static int
load_step(struct step_bench *b, const char *key, size_t payload, struct stamps *s)
{
    uint64_t tokens = (payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    s->t[0] = ect__now_ns();
    if (!ect_scheduler_has_cache_item(b->sched, key)) {
        fprintf(stderr, "bench step: %s is not in the CPU tier after its save\n", key);
        return 1;
    }
    if (update(b, key, tokens) != 0)
        return 1;
    s->t[SCHEDULE + 1] = ect__now_ns();
    if (ship_meta(b, s) != 0)
        return 1;
    int rc = ect_step_meta_n_loads(ect_worker_metadata(b->worker)) != 1 ||
             ect_worker_start_load(b->worker, load_target, b, NULL) != ECT_OK;
    s->t[SUBMIT + 1] = ect__now_ns();
    if (rc)
        return fail("start_load");
    return ship_report(b, s);
}

/* The entry's bytes as copy ops between the engine buffer and its blocks. */
size_t
ect_bench_step_entry_ops(struct step_bench *b, ect_copy_dir_t dir, const ect_run_t *runs,
                         size_t n_runs, size_t payload, ect_copy_op_t *ops)
{
    size_t off = 0, n = 0;
    for (size_t i = 0; i < n_runs && off < payload; i++) {
        size_t len = (size_t)runs[i].count * BLOCK_BYTES;
        if (len > payload - off)
            len = payload - off;
        unsigned char *blk =
            (unsigned char *)ect__worker_region_data(b->worker) + runs[i].first * BLOCK_BYTES;
        ops[n++] = dir == ECT_COPY_SAVE ? (ect_copy_op_t){blk, b->src + off, len}
                                        : (ect_copy_op_t){b->dst + off, blk, len};
        off += len;
    }
    return n;
}

void
ect_bench_step_prepare(void *arg)
{
    const struct state *st = arg;
    for (size_t i = 0; i < st->n_ops; i++) {
        const ect_copy_op_t *op = &st->ops[i];
        ect_bench_cold(st->dir == ECT_COPY_SAVE ? op->dst : op->src, op->len);
        ect_bench_warm(st->dir == ECT_COPY_SAVE ? op->src : op->dst, op->len);
    }
}

struct samples {
    double *save, *load; /* seconds per step */
    double *part[2][N_PARTS];
};

/* Room for reps steps each way in sm; the caller frees the returned block. */
static double *
samples_alloc(struct samples *sm, unsigned reps)
{
    double *mem = malloc((2 * (N_PARTS + 1)) * (size_t)reps * sizeof(double));
    if (mem == NULL)
        return NULL;
    sm->save = mem;
    sm->load = mem + reps;
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < N_PARTS; p++)
            sm->part[d][p] = mem + (2 + (size_t)d * N_PARTS + (size_t)p) * reps;
    return mem;
}

static void
keep(struct samples *sm, int is_load, unsigned i, const struct stamps *s)
{
    double total = (double)(s->t[N_PARTS] - s->t[0]) / 1e9;
    (is_load ? sm->load : sm->save)[i] = total;
    for (int p = 0; p < N_PARTS; p++)
        sm->part[is_load][p][i] = (double)(s->t[p + 1] - s->t[p]) / 1e9;
}

static void
print_breakdown(struct samples *sm, int is_load, unsigned reps, const char *what, double copy_s)
{
    printf("    %s, median us:", what);
    double sum = 0;
    for (int p = 0; p < N_PARTS; p++) {
        double us = ect_bench_median(sm->part[is_load][p], reps) * 1e6;
        sum += us;
        printf(" %s %.1f", PART_NAMES[p], us);
        if (p == COPY && copy_s > 0)
            printf(" (best copy %.1f)", copy_s * 1e6);
    }
    printf("; parts add to %.1f\n", sum);
}

/* How long ago the blocks of runs were last written (the oldest, in
 * seconds), and mark them written at `now`: the step's copy writes them,
 * and so do the ceiling's after it. */
double
ect_bench_step_written_age(struct step_bench *b, const ect_run_t *runs, size_t n_runs, uint64_t now)
{
    uint64_t oldest = now;
    for (size_t i = 0; i < n_runs; i++) {
        for (uint64_t k = runs[i].first; k < runs[i].first + runs[i].count; k++) {
            if (b->written[k] < oldest)
                oldest = b->written[k];
            b->written[k] = now;
        }
    }
    return (double)(now - oldest) / 1e9;
}

/* The library's allocations so far (common/alloc.h counts every one), or
 * UINT64_MAX in a build without the counter. */
static uint64_t
library_allocations(void)
{
#if ECT_TEST_HOOKS
    return ect__alloc_count();
#else
    return UINT64_MAX;
#endif
}

/* One save step of a new entry key and one load step of it, each in the
 * cache state of the file comment: the blocks evicted from the caches, the
 * engine buffer warm (and with cold_state, 64 MiB read first).  sv and ld
 * get the steps' stamps, runs and *n_runs the entry's blocks, *age_s how
 * long before the save they were last written.  Leaves the blocks evicted.
 * Returns 0, or 1 with a message printed. */
static int
save_and_load(struct step_bench *b, const char *key, size_t payload, ect_run_t *runs,
              size_t *n_runs, double *age_s, struct stamps *sv, struct stamps *ld)
{
    if (b->cold_state)
        ect_bench_warm(b->dst, MAX_PAYLOAD);
    ect_bench_warm(b->src, b->cold_state ? MAX_PAYLOAD : payload);
    if (ect_bench_step_save(b, key, payload, runs, n_runs, sv) != 0)
        return 1;
    *age_s = ect_bench_step_written_age(b, runs, *n_runs, sv->t[SUBMIT]);
    ect_copy_op_t ops[MAX_RUNS];
    struct state st = {.b = b, .ops = ops, .dir = ECT_COPY_LOAD};
    st.n_ops = ect_bench_step_entry_ops(b, ECT_COPY_LOAD, runs, *n_runs, payload, ops);
    ect_bench_step_prepare(&st);
    if (b->cold_state) {
        ect_bench_warm(b->src, MAX_PAYLOAD);
        ect_bench_warm(b->dst, MAX_PAYLOAD);
    }
    if (load_step(b, key, payload, ld) != 0)
        return 1;
    ect_bench_step_prepare(&st); /* leaves the blocks cold for whichever entry reuses them */
    return 0;
}

/* The ceilings' samples for the entry in runs: the save's bytes into its
 * blocks (cs) and its blocks into the load's buffer (cl), each way in the
 * cache state of the file comment.  Leaves the blocks evicted. */
static int
sample_ceilings(struct step_bench *b, ect_bench_ceiling_t *cs, ect_bench_ceiling_t *cl,
                const ect_run_t *runs, size_t n_runs, size_t payload)
{
    ect_copy_op_t ops[MAX_RUNS];
    struct state st = {.b = b, .ops = ops, .dir = ECT_COPY_SAVE};
    st.n_ops = ect_bench_step_entry_ops(b, ECT_COPY_SAVE, runs, n_runs, payload, ops);
    if (ect_bench_ceiling_sample(cs, ops, st.n_ops, ect_bench_step_prepare, &st) != 0)
        return 1;
    (void)ect_bench_step_written_age(b, runs, n_runs, ect__now_ns());
    st.dir = ECT_COPY_LOAD;
    st.n_ops = ect_bench_step_entry_ops(b, ECT_COPY_LOAD, runs, n_runs, payload, ops);
    if (ect_bench_ceiling_sample(cl, ops, st.n_ops, ect_bench_step_prepare, &st) != 0)
        return 1;
    ect_bench_step_prepare(&st);
    return 0;
}

/* The save steps that came right after the ceilings' copies (the first of
 * each rep's two), against the same ceiling: the state those copies leave
 * (helpers asleep for 1 ms or more, some 20 MiB copied) instead of a run
 * of steps'.  Loads always follow their save, so they have no such row. */
static void
after_ceilings_row(struct samples *sm, unsigned reps, size_t payload, double ceil_s,
                   const char *way_s)
{
    double gb = (double)payload / 1e9;
    char what[96];
    snprintf(what, sizeof(what), "  ref: save step %zu MiB after the ceilings' copies",
             payload >> 20);
    ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                        .value = gb / ect_bench_median(sm->save, reps),
                                        .unit = "GB/s",
                                        .ceiling = ceil_s,
                                        .ceiling_is = way_s});
    print_breakdown(sm, 0, reps, "save after the ceilings' copies", 0);
}

/* reps times: a pair of steps (save and load of a new entry) that the
 * figures do not count, the timed pair, then the ceilings' samples on the
 * timed entry's blocks (see the file comment). */
static int
measure(struct step_bench *b, size_t payload, unsigned reps)
{
    struct samples sm, before_sm;
    double *mem = samples_alloc(&sm, reps), *before_mem = samples_alloc(&before_sm, reps);
    double *age = malloc(reps * sizeof(double));
    ect_bench_ceiling_t *cs = b->ceiling;
    ect_bench_ceiling_t *cl = ect_bench_ceiling_create(ect__copy_cpu_copiers(b->cfg.copy_threads));
    int rc = 1;
    if (mem == NULL || before_mem == NULL || age == NULL || cl == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        goto free_samples;
    }
    ect_bench_ceiling_add_asleep(cl);
    ect_run_t runs[MAX_RUNS];
    size_t n_runs = 0;
    char key[64];
    ect_bench_ceiling_reset(cs);
    /* Warm-up, with a byte-for-byte check (a fast wrong copy is no result). */
    struct stamps sv, ld;
    double unused_age;
    for (unsigned i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "warm-%zu%s-%u", payload, b->cold_state ? "c" : "", i);
        memset(b->dst, 0, payload);
        if (save_and_load(b, key, payload, runs, &n_runs, &unused_age, &sv, &ld) != 0)
            goto free_samples;
        if (memcmp(b->dst, b->src, payload) != 0) {
            fprintf(stderr, "bench step: a %zu-byte entry came back changed\n", payload);
            goto free_samples;
        }
    }
    struct ect__copy_cpu_stats before, after;
    ect__copy_cpu_stats(b->engine, &before);
    uint64_t allocs = library_allocations();
    for (unsigned i = 0; i < reps; i++) {
        /* The pair before: the timed pair then finds the state a run of
         * steps leaves behind, not the one the ceilings' copies leave. */
        snprintf(key, sizeof(key), "p-%zu%s-%u", payload, b->cold_state ? "c" : "", i);
        if (save_and_load(b, key, payload, runs, &n_runs, &unused_age, &sv, &ld) != 0)
            goto free_samples;
        keep(&before_sm, 0, i, &sv);
        keep(&before_sm, 1, i, &ld);
        /* Unless the engine keeps its threads polling through the pause. */
        bool polls_through = (uint64_t)b->cfg.copy_spin_us * 1000u >= ECT_BENCH_ASLEEP_MIN_NS;
        if (ect_bench_rest_copy_threads(polls_through ? NULL : ect_bench_engine_stats, b->engine,
                                        "step") != 0)
            goto free_samples;
        snprintf(key, sizeof(key), "e-%zu%s-%u", payload, b->cold_state ? "c" : "", i);
        if (save_and_load(b, key, payload, runs, &n_runs, &age[i], &sv, &ld) != 0)
            goto free_samples;
        keep(&sm, 0, i, &sv);
        keep(&sm, 1, i, &ld);
        if (sample_ceilings(b, cs, cl, runs, n_runs, payload) != 0)
            goto free_samples;
    }
    ect__copy_cpu_stats(b->engine, &after);
    if (allocs != UINT64_MAX)
        allocs = library_allocations() - allocs;
    double step_age_s = ect_bench_median(age, reps);
    if (payload == ((size_t)1 << 20) && b->save_age_s == 0)
        b->save_age_s = step_age_s;
    double ms = ect_bench_median(sm.save, reps), ml = ect_bench_median(sm.load, reps);
    double gb = (double)payload / 1e9;
    if (payload < BLOCK_BYTES) {
        /* No copy worth the name: what a step costs by itself. */
        printf("  fixed cost of a step (one %zu-byte entry%s): save %.1f us, load %.1f us", payload,
               b->cold_state ? ", 64 MiB of other data read before it" : "", ms * 1e6, ml * 1e6);
        if (allocs != UINT64_MAX)
            printf("; library allocations per step %.2f", (double)allocs / (4.0 * reps));
        printf("\n");
        print_breakdown(&sm, 0, reps, "save", 0);
        print_breakdown(&sm, 1, reps, "load", 0);
        rc = 0;
        goto free_samples;
    }
    const char *way_s, *way_l;
    double ceil_s = ect_bench_ceiling_gbps(cs, (double)payload, &way_s);
    double ceil_l = ect_bench_ceiling_gbps(cl, (double)payload, &way_l);
    char what[96], series[64];
    snprintf(what, sizeof(what), "save step %2zu MiB%s (schedule..report applied)", payload >> 20,
             b->label);
    snprintf(series, sizeof(series), "save step%s", b->label);
    ect_bench_copy_figure(what, series, gb / ms, ceil_s, way_s, (double)payload);
    snprintf(what, sizeof(what), "load step %2zu MiB%s (hit..report applied)", payload >> 20,
             b->label);
    snprintf(series, sizeof(series), "load step%s", b->label);
    ect_bench_copy_figure(what, series, gb / ml, ceil_l, way_l, (double)payload);
    snprintf(what, sizeof(what), "round trip %2zu MiB%s (save + load steps)", payload >> 20,
             b->label);
    snprintf(series, sizeof(series), "round trip%s", b->label);
    ect_bench_copy_figure(what, series, 2 * gb / (ms + ml), 2 * gb / (gb / ceil_s + gb / ceil_l),
                          "both ceilings", (double)payload);
    double asleep[2] = {0, 0}; /* GB/s: the no-polling ceilings, save and load */
    if (b->label[0] == '\0') {
        /* The same steps against what a copy that finds no thread polling
         * could do here: the share of the gap a wake-up must cost, and the
         * round trip against both. */
        for (int d = 0; d < 2; d++) {
            const char *way;
            asleep[d] = ect_bench_ceiling_asleep_gbps(d == 0 ? cs : cl, (double)payload, &way);
            snprintf(what, sizeof(what), "  ref: %s step %zu MiB vs no thread polling",
                     d == 0 ? "save" : "load", payload >> 20);
            ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                                .value = gb / (d == 0 ? ms : ml),
                                                .unit = "GB/s",
                                                .ceiling = asleep[d],
                                                .ceiling_is = way});
        }
        snprintf(what, sizeof(what), "  ref: round trip %zu MiB vs no thread polling",
                 payload >> 20);
        ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                            .value = 2 * gb / (ms + ml),
                                            .unit = "GB/s",
                                            .ceiling = 2 * gb / (gb / asleep[0] + gb / asleep[1]),
                                            .ceiling_is = "both no-polling ceilings"});
    }
    print_breakdown(&sm, 0, reps, "save", gb / ceil_s);
    print_breakdown(&sm, 1, reps, "load", gb / ceil_l);
    ect_bench_copy_engine_line("    ", &before, &after);
    if (b->label[0] == '\0')
        after_ceilings_row(&before_sm, reps, payload, ceil_s, way_s);
    if (b->label[0] == '\0') {
        size_t n_s, n_l;
        double mean_s, mean_l;
        double us_s = ect_bench_ceiling_helper_start_us(cs, &n_s, &mean_s),
               us_l = ect_bench_ceiling_helper_start_us(cl, &n_l, &mean_l);
        if (n_s > 0 && n_l > 0)
            printf("    the no-polling ceilings' helpers, asleep 1 ms or more and woken as the "
                   "engine wakes its copy threads, took their first piece %.1f / %.1f us after "
                   "the wake (save / load; mean, median %.1f / %.1f; of the %zu / %zu that took "
                   "one)\n",
                   mean_s, mean_l, us_s, us_l, n_s, n_l);
    }
    /* Once per size: the other rows change the blocks or the threads. */
    if (b->label[0] == '\0' &&
        ect_bench_step_oldest_blocks_line(b, payload, ms, ml, gb / asleep[1], step_age_s) != 0)
        goto free_samples;
    fflush(stdout);
    rc = 0;
free_samples:
    ect_bench_ceiling_destroy(cl);
    free(age);
    free(before_mem);
    free(mem);
    return rc;
}

/* The fixed cost with nothing between the steps: pairs of a 1000-byte
 * entry's save and load back to back, so that the step's own state stays in
 * the CPU's caches.  What the line above pays beyond this is memory misses;
 * this is what the step's instructions cost. */
static int
back_to_back_line(struct step_bench *b)
{
    enum { PAIRS = 20000, PAYLOAD = 1000 };
    struct stamps sv, ld;
    ect_run_t runs[MAX_RUNS];
    size_t n_runs = 0;
    char(*key)[16] = malloc(PAIRS * sizeof(*key)); /* formatted before the clock starts */
    if (key == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < PAIRS; i++)
        snprintf(key[i], sizeof(key[i]), "b2b-%u", i);
    uint64_t t0 = ect__now_ns();
    for (unsigned i = 0; i < PAIRS; i++) {
        if (ect_bench_step_save(b, key[i], PAYLOAD, runs, &n_runs, &sv) != 0 ||
            load_step(b, key[i], PAYLOAD, &ld) != 0) {
            free(key);
            return 1;
        }
    }
    double pair_us = (double)(ect__now_ns() - t0) / 1e3 / PAIRS;
    free(key);
    printf("  fixed cost of a step, back to back (a %d-byte entry saved and loaded, %d pairs, "
           "nothing between them): %.2f us a pair\n",
           PAYLOAD, PAIRS, pair_us);
    return 0;
}

/* The engine a worker would make for itself (the config's copy settings),
 * made here so that the bench can read its counters, and the worker. */
static int
make_worker(struct step_bench *b)
{
    ect_copy_cpu_params_t cp = ect__copy_cpu_params_of(&b->cfg);
    if (ect_copy_engine_create_cpu(&cp, &b->engine) != ECT_OK)
        return fail("create the copy engine");
    ect_worker_params_t wp = {
        .config = &b->cfg, .geometry = &b->geom, .instance_id = b->instance, .engine = b->engine};
    if (ect_worker_create(&wp, &b->worker) != ECT_OK) {
        fail("create the worker");
        ect_copy_engine_destroy(b->engine);
        b->engine = NULL;
        return 1;
    }
    return 0;
}

int
ect_bench_step(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static const struct {
        size_t payload;
        unsigned reps;
    } plans[] = {{1000, 301}, {(size_t)1 << 20, 301}, {(size_t)8 << 20, 61}, {MAX_PAYLOAD, 21}};
    struct step_bench b = {0};
    int rc = 1;
    uint64_t blocks = KEEP * ((MAX_PAYLOAD + BLOCK_BYTES - 1) / BLOCK_BYTES + 1);
    char json[256];
    snprintf(json, sizeof(json),
             "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu}}",
             (unsigned long long)(blocks * BLOCK_BYTES));
    if (ect_config_parse(json, strlen(json), &b.cfg) != ECT_OK ||
        ect_geometry_init(HIDDEN, ECT_DTYPE_BF16, b.cfg.cpu_bytes, &b.geom) != ECT_OK)
        return fail("config");
    snprintf(b.instance, sizeof(b.instance), "bench_step_%d", (int)getpid());
    ect_scheduler_params_t sp = {
        .config = &b.cfg, .geometry = &b.geom, .instance_id = b.instance, .load_reports = 1};
    if (ect_scheduler_create(&sp, &b.sched) != ECT_OK)
        return fail("create the scheduler");
    b.label = "";
    if (make_worker(&b) != 0)
        goto destroy_scheduler;
    b.ceiling = ect_bench_ceiling_create(ect__copy_cpu_copiers(b.cfg.copy_threads));
    if (b.ceiling != NULL)
        ect_bench_ceiling_add_asleep(b.ceiling);
    b.src = malloc(MAX_PAYLOAD);
    b.dst = malloc(MAX_PAYLOAD + BLOCK_BYTES);
    b.written = calloc(b.geom.num_blocks, sizeof(*b.written));
    if (b.ceiling == NULL || b.src == NULL || b.dst == NULL || b.written == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        goto free_buffers;
    }
    for (uint64_t k = 0, now = ect__now_ns(); k < b.geom.num_blocks; k++)
        b.written[k] = now; /* the worker's region was pre-faulted just before */
    for (size_t i = 0; i < MAX_PAYLOAD; i++)
        b.src[i] = (unsigned char)(i * 131 + (i >> 12) + 1);
    memset(b.dst, 0, MAX_PAYLOAD + BLOCK_BYTES);
    ect_bench_cold(ect__worker_region_data(b.worker), (size_t)(b.geom.num_blocks * BLOCK_BYTES));
    printf("  scheduler + worker in one process, cpu engine (%u copy threads); %u-byte blocks; "
           "region: /dev/shm, %.1f MiB, pre-faulted\n",
           b.cfg.copy_threads, BLOCK_BYTES, (double)(b.geom.num_blocks * BLOCK_BYTES) / (1 << 20));
    printf("  figure: median step time, from the scheduler's call to the worker's report applied\n"
           "  ceiling: %s\n"
           "  cache state before every timed step and ceiling copy: region blocks %s, engine "
           "buffer warm\n"
           "  N = 301, 61, 21 reps for 1, 8, 32 MiB; a rep saves and loads two new entries and "
           "times the second pair, after 1 ms or more of the copy threads asleep (evictions "
           "included)\n",
           ect_bench_ceiling_describe(b.ceiling), ect_bench_cold_describe());
    for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++) {
        if (measure(&b, plans[p].payload, plans[p].reps) != 0)
            goto free_buffers;
        if (p > 0)
            continue;
        if (back_to_back_line(&b) != 0)
            goto free_buffers;
        /* The fixed cost again with the step's own state out of the CPU
         * caches, as after a large entry's copy: what makes the small parts
         * of the 8 and 32 MiB breakdowns grow. */
        b.cold_state = true;
        int failed = measure(&b, plans[p].payload, plans[p].reps);
        b.cold_state = false;
        if (failed)
            goto free_buffers;
    }
    if (ect_bench_step_page_age_probe(&b) != 0)
        goto free_buffers;
    /* The copies again with each save's blocks written just before it: what
     * the pages' state (translations cached or not, and age) costs. */
    b.fresh_blocks = true;
    b.label = ", fresh blocks";
    for (size_t p = 1; p < sizeof(plans) / sizeof(plans[0]); p++)
        if (measure(&b, plans[p].payload, plans[p].reps) != 0)
            goto free_buffers;
    b.fresh_blocks = false;
    /* 1 MiB again with the copy threads kept polling between batches
     * (copy_spin_us at its most): no wake-up, so what is left is the step
     * and the copy.  Only where every copy thread the engine runs at once
     * (at most one fewer than the CPUs) has a CPU of its own beside the
     * caller's: polling on a shared CPU slows the caller. */
    unsigned cpus = ect__copy_cpu_usable_cpus();
    if (cpus >= ect__copy_cpu_copiers(b.cfg.copy_threads)) {
        ect_worker_destroy(b.worker);
        ect_copy_engine_destroy(b.engine);
        b.worker = NULL;
        b.engine = NULL;
        b.cfg.copy_spin_us = 100000;
        b.label = ", polling";
        if (make_worker(&b) != 0 || measure(&b, (size_t)1 << 20, 301) != 0)
            goto free_buffers;
    } else {
        printf("  1 MiB with the copy threads kept polling (copy_spin_us 100000): not run, %u "
               "CPU%s: no copy thread could poll beside the caller\n",
               cpus, cpus == 1 ? "" : "s");
    }
    rc = 0;
free_buffers:
    ect_bench_ceiling_destroy(b.ceiling);
    free(b.written);
    free(b.dst);
    free(b.src);
    free(b.buf);
    ect_worker_destroy(b.worker);
    ect_copy_engine_destroy(b.engine);
destroy_scheduler:
    ect_scheduler_destroy(b.sched);
    return rc;
}
