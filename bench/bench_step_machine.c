/*
 * `ectier bench step`, the lines that tell the machine's share of a save
 * step's gap from ours (see bench/bench_step.c's file comment): the save
 * step against the ceiling's copy into blocks as old as its own, with the
 * engine's copy alone beside it, and the best copy into region pages of
 * several ages.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/ectier.h>

#include "bench_step.h"
#include "common/clock.h"
#include "copy/cpu.h"
#include "step/report.h"
#include "step/scheduler_hooks.h"

/* Evict the destinations of ops from the caches (written back first). */
static void
flush_dst(const ect_copy_op_t *ops, size_t n_ops)
{
    for (size_t k = 0; k < n_ops; k++)
        ect_bench_cold(ops[k].dst, ops[k].len);
}

/* Untimed 64 KiB copies between the engine buffers by the ceiling's
 * winning way for 200 us: its helpers, asleep since the last copy, and
 * their CPUs are busy just before a timed copy, as in a ceiling sample
 * (one way after the other), so that the pacing's idle time does not count
 * against them. */
static void
wake_ceiling(struct step_bench *b)
{
    ect_copy_op_t op = {b->dst, b->src, (size_t)64 << 10};
    uint64_t until = ect__now_ns() + 200000;
    do
        (void)ect_bench_ceiling_copy_best(b->ceiling, &op, 1);
    while (ect__now_ns() < until);
}

/* The blocks a save writes are those of the oldest entry, evicted to make
 * room: last written as many steps before as the region holds entries, so
 * neither their lines nor (for large entries) the page-table entries that
 * translate them are in any cache, and on the project's VMs a page left
 * alone for long costs more to write; while the ceiling beside a figure
 * copies right after the step into the blocks it has just written.  So
 * after the figure, steps go on untimed, paced (by spinning, just before
 * the timed copies) so that the blocks of the oldest entry are as old as
 * the timed save steps' were (their median age, `step_age_s`) and the
 * copying threads as long idle, and each is followed by one copy of
 * the save's bytes into the blocks of the oldest entry still held (the next
 * save's; it holds the same bytes, so nothing changes), met as the save step
 * meets them: flushed from the caches right after they were last written
 * and not touched since (a flush just before the copy would load their
 * translations).  The copy is by turns the ceiling's winning way, its
 * winning way among those that find no thread polling (one thread, or
 * helpers asleep 1 ms or more and woken when the clock starts: the state the
 * engine's threads are in when a step comes), and the copy engine alone
 * (submit to wait, no step around it).  Each step is also followed by the
 * ceiling's copy into the blocks it has just written, flushed first, as the
 * ceiling beside the figure copies.  Prints the save step against the first
 * two copies (its ratio to a ceiling that meets the blocks as the step does,
 * and to one that also meets the threads as the step does) and the first
 * against the engine's (how much of the gap is the engine's copy, how much
 * the step around it), and the round trip against the second copy plus the
 * load's no-polling ceiling (the copies a round trip's two steps meet).
 * Returns 0, or 1 on a failed step or out of memory
 * (message printed). */
int
ect_bench_step_oldest_blocks_line(struct step_bench *b, size_t payload, double save_s,
                                  double load_s, double load_asleep_s, double step_age_s)
{
    enum { REPS = 7 };
    enum kind { BEST, ASLEEP, ENGINE, N_KINDS };
    uint64_t entry_blocks = (payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    uint64_t held = b->geom.num_blocks / entry_blocks; /* entries of this size the region holds */
    if (held < 3)
        return 0;
    size_t depth = (size_t)held - 1, ring = depth + 1;
    struct held_runs {
        ect_run_t runs[MAX_RUNS];
        size_t n;
        char key[64];
    } *h = calloc(ring, sizeof(*h));
    if (h == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        return 1;
    }
    /* The winners of the figure's samples (copy_best and copy_asleep_best
     * copy with them). */
    const char *way, *way_asleep;
    (void)ect_bench_ceiling_gbps(b->ceiling, (double)payload, &way);
    (void)ect_bench_ceiling_asleep_gbps(b->ceiling, (double)payload, &way_asleep);
    /* A step every period (the timed steps' own period): the oldest
     * entry's blocks, written depth steps before, are then as old as the
     * timed steps' were. */
    uint64_t period_ns = (uint64_t)(step_age_s * 1e9 / (double)depth), next_ns = ect__now_ns();
    double t[N_KINDS][REPS], fresh[2 * REPS], age[N_KINDS * REPS];
    unsigned n[N_KINDS] = {0}, nf = 0, n_age = 0, gone = 0;
    int rc = 1;
    for (size_t i = 0;
         (n[BEST] < REPS || n[ASLEEP] < REPS || n[ENGINE] < REPS) && i < depth + 4 * REPS; i++) {
        struct held_runs *cur = &h[i % ring];
        struct stamps s;
        ect_copy_op_t ops[MAX_RUNS];
        struct state st = {.b = b, .ops = ops, .dir = ECT_COPY_SAVE};
        snprintf(cur->key, sizeof(cur->key), "o-%zu-%zu", payload, i);
        ect_bench_warm(b->src, payload);
        if (ect_bench_step_save(b, cur->key, payload, cur->runs, &cur->n, &s) != 0)
            goto out;
        /* Each timed copy below finds no dirty line of another's in the
         * caches (a write-back would be charged to it). */
        flush_dst(ops, ect_bench_step_entry_ops(b, ECT_COPY_SAVE, cur->runs, cur->n, payload, ops));
        /* The pause (spinning: only this thread runs) falls just before
         * the timed copy: the engine's copy threads have then been idle
         * about as long as before a timed step, asleep while the ceiling
         * samples between the timed steps ran (on the GPU host a copy onto
         * CPUs idle 12 ms took 8 MiB from ~320 to ~530 us).  The ceiling's
         * helpers are made busy again first (wake_ceiling) for its best
         * way, as in a sample; its no-polling way lets them sleep. */
        while (ect__now_ns() < next_ns)
            ;
        next_ns = ect__now_ns() + period_ns;
        if (i >= depth) {
            const struct held_runs *old = &h[(i - depth) % ring];
            ect_cache_entry_t e;
            bool found = false;
            if (ect_cache_find(ect__scheduler_cache(b->sched), old->key, &e, &found) != ECT_OK ||
                !found) {
                gone++; /* evicted already (the region held one fewer): no sample */
            } else {
                st.n_ops =
                    ect_bench_step_entry_ops(b, ECT_COPY_SAVE, old->runs, old->n, payload, ops);
                ect_bench_warm(b->src, payload);
                /* The kinds by turns, skipping those with their samples. */
                enum kind k = (enum kind)((n[BEST] + n[ASLEEP] + n[ENGINE]) % N_KINDS);
                while (n[k] >= REPS)
                    k = (enum kind)((k + 1) % N_KINDS);
                age[n_age++] = ect_bench_step_written_age(b, old->runs, old->n, ect__now_ns());
                if (k == BEST) {
                    wake_ceiling(b);
                    t[k][n[k]++] = ect_bench_ceiling_copy_best(b->ceiling, ops, st.n_ops);
                } else if (k == ASLEEP) {
                    t[k][n[k]++] = ect_bench_ceiling_copy_asleep_best(b->ceiling, ops, st.n_ops);
                } else {
                    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = ops, .n_ops = st.n_ops};
                    uint64_t ticket, t0 = ect__now_ns();
                    if (ect_copy_engine_submit(b->engine, &batch, &ticket) != ECT_OK ||
                        ect_copy_engine_wait(b->engine, ticket) != ECT_OK) {
                        fprintf(stderr, "bench step: engine copy: %s\n", ect_last_error());
                        goto out;
                    }
                    t[k][n[k]++] = (double)(ect__now_ns() - t0) / 1e9;
                }
                flush_dst(ops, st.n_ops);
            }
        }
        st.n_ops = ect_bench_step_entry_ops(b, ECT_COPY_SAVE, cur->runs, cur->n, payload, ops);
        if (i >= depth && nf < 2 * REPS) {
            ect_bench_step_prepare(&st);
            wake_ceiling(b);
            fresh[nf++] = ect_bench_ceiling_copy_best(b->ceiling, ops, st.n_ops);
        }
        (void)ect_bench_step_written_age(b, cur->runs, cur->n, ect__now_ns());
        flush_dst(ops, st.n_ops); /* out of the caches until it is the oldest */
    }
    if (n[BEST] == 0 || n[ASLEEP] == 0 || n[ENGINE] == 0) {
        printf("    the best copy into the oldest entry's blocks: not measured (%u of them "
               "evicted first)\n",
               gone);
        rc = 0;
        goto out;
    }
    double a = ect_bench_median(t[BEST], n[BEST]), w = ect_bench_median(t[ASLEEP], n[ASLEEP]),
           g = ect_bench_median(t[ENGINE], n[ENGINE]), f = ect_bench_median(fresh, nf),
           old_s = ect_bench_median(age, n_age);
    /* The same as rows (and --json objects): the save step against the
     * ceiling's copy into blocks as old as its own, and against its copy
     * that also finds no thread polling. */
    char what[112];
    double gb = (double)payload / 1e9;
    snprintf(what, sizeof(what), "  ref: save step %zu MiB vs copy into as old blocks",
             payload >> 20);
    ect_bench_figure(&(ect_bench_fig_t){
        .name = what, .value = gb / save_s, .unit = "GB/s", .ceiling = gb / a, .ceiling_is = way});
    snprintf(what, sizeof(what),
             "  ref: save step %zu MiB vs no thread polling, into as old blocks", payload >> 20);
    ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                        .value = gb / save_s,
                                        .unit = "GB/s",
                                        .ceiling = gb / w,
                                        .ceiling_is = way_asleep});
    /* The round trip likewise: its load reads blocks the save has just
     * written, as the load's no-polling ceiling does, so only the save's
     * half changes. */
    snprintf(what, sizeof(what),
             "  ref: round trip %zu MiB vs no thread polling, save into as old blocks",
             payload >> 20);
    ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                        .value = 2 * gb / (save_s + load_s),
                                        .unit = "GB/s",
                                        .ceiling = 2 * gb / (w + load_asleep_s),
                                        .ceiling_is = "both no-polling ceilings"});
    printf("    the best copy of the save's bytes into the blocks of the oldest entry held (the "
           "next save's, last written %zu steps and %.0f ms before, as the timed save steps' "
           "%.0f ms, and not touched since) %.1f us, the best that finds no thread polling %.1f "
           "us, into blocks a step has just written (as the ceiling beside the figure) %.1f us, "
           "medians of %u / %u / %u: the save step against the first two, ratio %.2f / %.2f; the "
           "engine's copy alone (submit to wait) into such old blocks %.1f us (median of %u), "
           "%.2f of the first, %.2f of the second\n",
           depth, old_s * 1e3, step_age_s * 1e3, a * 1e6, w * 1e6, f * 1e6, n[BEST], n[ASLEEP], nf,
           a / save_s, w / save_s, g * 1e6, n[ENGINE], a / g, w / g);
    rc = 0;
out:
    free(h);
    return rc;
}

/* The prepare of the page-age probe's ceiling: each way copies into an area
 * of its own, all written and flushed at the same time, so that every way
 * meets pages of the same age (the ceiling calls prepare once before each
 * way and reads the ops after it). */
struct aged_areas {
    ect_copy_op_t *op;
    unsigned char *const *area; /* n_areas of them, one per way */
    unsigned n_areas, next;
};

static void
next_area(void *arg)
{
    struct aged_areas *a = arg;
    if (a->next < a->n_areas)
        a->op->dst = a->area[a->next++];
}

/* How a write into region pages costs more the longer ago they were last
 * written (on the project's VMs; see copy/ntcopy.h).  The same 1 MiB copy
 * into region pages written and flushed just before, as long before as a
 * 1 MiB save step's blocks were (their median age, tracked block by block
 * during that figure) and 1 s before (or twice the saves' age, if longer),
 * by every way of the ceiling, each way into an area of its own of that
 * age: the best way is the ceiling for pages of that age.  The ceilings
 * beside the step figures copy right after the step, into pages it has just
 * written; a save step meets blocks last written when an entry since
 * evicted was saved, so this line tells how much of a save's gap is the
 * pages' age.  Returns 0, or 1 when out of memory (message printed). */
int
ect_bench_step_page_age_probe(struct step_bench *b)
{
    enum { REPS = 5, AGES = 3, MAX_AREAS = ECT_BENCH_MAX_WAYS };
    /* The longest age is 1 s, or twice the saves' where a slow machine
     * left those blocks longer than half of that. */
    const double age_s[AGES] = {0, b->save_age_s, b->save_age_s < 0.5 ? 1.0 : 2 * b->save_age_s};
    const size_t mib = (size_t)1 << 20;
    unsigned char *region = ect__worker_region_data(b->worker);
    if ((size_t)(b->geom.num_blocks * BLOCK_BYTES) < (size_t)AGES * MAX_AREAS * mib) {
        printf("  machine: not measured, the region is smaller than the %d MiB the probe "
               "needs\n",
               AGES * MAX_AREAS);
        return 0;
    }
    ect_bench_ceiling_t *ceiling[AGES] = {NULL};
    int rc = 1;
    for (int a = 0; a < AGES; a++)
        if ((ceiling[a] = ect_bench_ceiling_create(ect__copy_cpu_copiers(b->cfg.copy_threads))) ==
            NULL)
            goto destroy;
    for (int r = 0; r < REPS; r++) {
        unsigned char *area[AGES][MAX_AREAS];
        uint64_t t0 = ect__now_ns();
        /* Oldest first: each age's areas are written, flushed, then left
         * alone until the end of the longest age. */
        for (int a = AGES - 1; a >= 0; a--) {
            uint64_t at = t0 + (uint64_t)((age_s[AGES - 1] - age_s[a]) * 1e9);
            while (ect__now_ns() < at)
                ;
            for (int k = 0; k < MAX_AREAS; k++) {
                area[a][k] = region + ((size_t)a * MAX_AREAS + (size_t)k) * mib;
                memcpy(area[a][k], b->src, mib);
                ect_bench_cold(area[a][k], mib);
            }
        }
        ect_bench_warm(b->src, mib);
        for (int a = 0; a < AGES; a++) {
            ect_copy_op_t op = {area[a][0], b->src, mib};
            struct aged_areas aa = {.op = &op, .area = area[a], .n_areas = MAX_AREAS};
            if (ect_bench_ceiling_sample(ceiling[a], &op, 1, next_area, &aa) != 0)
                goto destroy;
        }
    }
    double best_us[AGES];
    const char *way[AGES];
    for (int a = 0; a < AGES; a++)
        best_us[a] = (double)mib / 1e3 / ect_bench_ceiling_gbps(ceiling[a], (double)mib, &way[a]);
    printf("  machine: the best copy of 1 MiB (every way of the ceiling) into region pages "
           "last written 0 / %.1f ms (as long before as a 1 MiB save step's blocks, median) / "
           "%.0f ms before, median of %d: %.1f / %.1f / %.1f us [%s / %s / %s]\n",
           age_s[1] * 1e3, age_s[2] * 1e3, REPS, best_us[0], best_us[1], best_us[2], way[0], way[1],
           way[2]);
    rc = 0;
destroy:
    for (int a = 0; a < AGES; a++)
        ect_bench_ceiling_destroy(ceiling[a]);
    return rc;
}
