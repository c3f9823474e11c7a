/*
 * `ectier bench`: benchmarks, each printing its figures next to a ceiling
 * measured in the same run and the ratio (SPEC §12).  One function per
 * bench/bench_<name>.c, registered in bench/bench.c.
 */
#ifndef ECT_BENCH_BENCH_H
#define ECT_BENCH_BENCH_H

struct ect_bench {
    const char *name;
    const char *summary;
    /* argc/argv start at the bench's name; returns 0, or 1 on failure. */
    int (*run)(int argc, char **argv);
};

/* The benchmarks, one per bench/bench_<name>.c. */
int ect_bench_cache(int argc, char **argv);
int ect_bench_copy(int argc, char **argv);
int ect_bench_cuda(int argc, char **argv);
int ect_bench_region(int argc, char **argv);
int ect_bench_control(int argc, char **argv);
int ect_bench_step(int argc, char **argv);
int ect_bench_session(int argc, char **argv); /* P2P builds only */
int ect_bench_xport(int argc, char **argv);   /* P2P builds only (bench/p2p/) */

/* Print one result row: "<what>  <value> <unit>  ceiling <c> <unit>  ratio <r> (target <t>)". */
void ect_bench_row(const char *what, double value, double ceiling, const char *unit, double target);

#endif /* ECT_BENCH_BENCH_H */
