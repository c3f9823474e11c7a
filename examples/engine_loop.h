/*
 * The reference engine loop of examples/engine_loop.c, callable from other
 * programs (`ectier demo` runs it on its embedded workload).
 */
#ifndef ECT_EXAMPLES_ENGINE_LOOP_H
#define ECT_EXAMPLES_ENGINE_LOOP_H

#include <stddef.h>
#include <stdint.h>

/* One request: up to 4 media items, each a content id (an "image"). */
#define ECT_LOOP_MAX_ITEMS 4

struct ect_loop_request {
    unsigned n_items;
    unsigned items[ECT_LOOP_MAX_ITEMS];
};

struct ect_loop_workload {
    const struct ect_loop_request *requests;
    unsigned n_requests;
    unsigned requests_per_step; /* admitted together, like a batch */
    uint64_t hidden_dim;        /* bf16 rows: a block is hidden_dim * 2 bytes */
    uint64_t cpu_bytes;         /* size of the CPU tier */
    uint64_t gpu_cache_tokens;  /* capacity of the stand-in GPU encoder cache */
    unsigned encode_work;       /* mixing rounds per 8 bytes of encoder output */
    unsigned tp_size;           /* worker processes (tensor-parallel ranks), 1..8 */
    int show_progress;          /* print a progress line on stderr */
};

struct ect_loop_summary {
    unsigned requests;
    unsigned steps;
    uint64_t items;     /* media items over all requests */
    uint64_t gpu_hits;  /* already in the GPU cache */
    uint64_t cpu_hits;  /* reloaded from the CPU tier */
    uint64_t misses;    /* encoded */
    uint64_t evictions; /* CPU-tier entries evicted to make room */
    uint64_t saves;     /* entries that landed in the CPU tier */
    /* The copies' bytes and time, from the workers' reports (ectier's
     * metrics), summed over the ranks: every rank loads each reloaded item. */
    uint64_t save_bytes, save_ns;
    uint64_t load_bytes, load_ns;
    uint64_t verified;          /* reloaded entries compared with a fresh encode */
    uint64_t mismatches;        /* ... that differed (must be 0) */
    uint64_t encode_ns;         /* time spent encoding misses (rank 0) */
    uint64_t avoided_encode_ns; /* encode time of the reloaded items (measured) */
    uint64_t wall_ns;
};

/* Run the loop: one scheduler (this process) and workload->tp_size worker
 * processes.  Returns 0 on success (every reload verified), else 1 with a
 * message on stderr. */
int ect_loop_run(const struct ect_loop_workload *workload, struct ect_loop_summary *summary);

/* The embedded default workload: requests over a set of images with
 * repeats, sized so the GPU cache drops entries and the CPU tier evicts some. */
void ect_loop_default_workload(struct ect_loop_workload *workload);

/* Measured cost in ms of the encoder stand-in for one item of tokens rows
 * of hidden bf16 elements. */
double ect_loop_encode_ms(uint64_t tokens, uint64_t hidden, unsigned encode_work);

/* Time in ms one rank's load copies took: load_ns over the ranks. */
double ect_loop_load_ms_per_rank(const struct ect_loop_workload *workload,
                                 const struct ect_loop_summary *summary);

/* How many times faster the reloads were than encoding: the measured encode
 * time of the reloaded items (avoided_encode_ns) over one rank's load copy
 * time (ect_loop_load_ms_per_rank).  0 when nothing was reloaded. */
double ect_loop_reload_speedup(const struct ect_loop_workload *workload,
                               const struct ect_loop_summary *summary);

/* A speedup for people: "38×" from 10 up, "4.2×" below. */
void ect_loop_format_speedup(char *buf, size_t len, double speedup);

/* Print a summary on stdout, in lines of at most 100 columns. */
void ect_loop_print_summary(const struct ect_loop_workload *workload,
                            const struct ect_loop_summary *summary);

#endif /* ECT_EXAMPLES_ENGINE_LOOP_H */
