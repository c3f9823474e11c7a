/*
 * `ectier bench step`'s pieces shared between bench/bench_step.c (the
 * figures: timed steps beside the copy ceiling) and
 * bench/bench_step_machine.c (the lines that tell the machine's share of a
 * gap from ours: copies into blocks as old as a save's, and into pages of
 * several ages).  Not a library interface: one benchmark in two files.
 */
#ifndef ECT_BENCH_STEP_H
#define ECT_BENCH_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/ectier.h>

#include "bench.h"

#define HIDDEN      3584u
#define BLOCK_BYTES (HIDDEN * 2u)
#define MAX_PAYLOAD ((size_t)32 << 20)
#define KEEP        3 /* largest entries the region holds at once */
#define MAX_RUNS    64

/* The parts of a step, in order; a step's time is their sum. */
enum part { SCHEDULE, META, BIND, SUBMIT, COPY, REPORT, APPLY, N_PARTS };

struct step_bench {
    ect_config_t cfg;
    ect_geometry_t geom;
    char instance[64];
    ect_scheduler_t *sched;
    ect_worker_t *worker;
    ect_copy_engine_t *engine; /* the worker's, borrowed by it; ours for its counters */
    ect_bench_ceiling_t *ceiling;
    unsigned char *src; /* engine memory saved from */
    unsigned char *dst; /* engine memory loaded into */
    unsigned char *buf; /* encoded metadata / report */
    size_t buf_cap;
    const char *label; /* after the entry size in figure names ("" by default) */
    bool cold_state;   /* read both buffers (64 MiB) before each step: the scheduler's and
                        * worker's own state leaves the CPU caches, as after large copies */
    bool fresh_blocks; /* write and evict a save's blocks just before it (untimed) */
    uint64_t *written; /* per region block: the clock when it was last written (pre-faulted,
                        * or by a save step and the ceiling copies after it) */
    double save_age_s; /* median age of a 1 MiB save step's blocks (the first 1 MiB figure) */
};

/* One timed step: the clock at the start and after each part. */
struct stamps {
    uint64_t t[N_PARTS + 1];
};

/* The cache state before every timed copy (see the file comment). */
struct state {
    struct step_bench *b;
    const ect_copy_op_t *ops;
    size_t n_ops;
    ect_copy_dir_t dir;
};

/* One save step of key, timed part by part into *s; runs and *n_runs get
 * its blocks (at most MAX_RUNS).  Returns 0, or 1 with a message printed. */
int ect_bench_step_save(struct step_bench *b, const char *key, size_t payload, ect_run_t *runs,
                        size_t *n_runs, struct stamps *s);

/* The entry's bytes as copy ops (at most MAX_RUNS) between the engine
 * buffer and its blocks; returns how many. */
size_t ect_bench_step_entry_ops(struct step_bench *b, ect_copy_dir_t dir, const ect_run_t *runs,
                                size_t n_runs, size_t payload, ect_copy_op_t *ops);

/* The cache state before a timed copy (arg: a struct state): the blocks
 * evicted from the caches, the engine buffer warm. */
void ect_bench_step_prepare(void *arg);

/* How long ago the blocks of runs were last written (the oldest, in
 * seconds); marks them written at `now`. */
double ect_bench_step_written_age(struct step_bench *b, const ect_run_t *runs, size_t n_runs,
                                  uint64_t now);

/* After a size's figures: the save step against the ceiling's copy into
 * blocks as old as its own (rows and a line; bench_step_machine.c says
 * how), and the round trip against that copy's no-polling way plus the
 * load's no-polling ceiling.  save_s, load_s: the save and load steps'
 * medians; load_asleep_s: the load's no-polling ceiling, in seconds; step_age_s: the save's blocks'
 * median age.  Returns 0, or 1 on a failed step or out of memory (message printed). */
int ect_bench_step_oldest_blocks_line(struct step_bench *b, size_t payload, double save_s,
                                      double load_s, double load_asleep_s, double step_age_s);

/* The best copy of 1 MiB into region pages last written 0 s, as long
 * before as the 1 MiB saves' blocks and 1 s before.  Returns 0, or 1 when
 * out of memory (message printed). */
int ect_bench_step_page_age_probe(struct step_bench *b);

#endif /* ECT_BENCH_STEP_H */
