/*
 * `ectier bench`: benchmarks, each printing its figures next to a ceiling
 * measured in the same run and the ratio (SPEC §12).  One function per
 * bench/bench_<name>.c, registered in bench/bench.c.
 *
 * bench/bench.c (with bench/copy_ceiling.c, the copy ceiling, and
 * bench/median.c) is the one home of what the benchmarks share:
 *   - figures: every result goes through ect_bench_figure (or its short form
 *     ect_bench_row), which prints the text row, or one JSON object a line
 *     (`ectier bench --json`), and keeps it for the charts of
 *     `ectier bench --plot DIR`;
 *   - the CPU copy ceiling: the machine's best copy of the same bytes, the
 *     best of memcpy, non-temporal stores and rep movsb (each thread's pages
 *     prefetched first, as the engine's are), on one thread and on as many
 *     threads as the engine copies with, in equal shares or in pieces taken
 *     as they come (helpers already spinning when the
 *     clock starts, so the hand-off costs a cache line, not a wake-up), and
 *     beside it, where a bench asks, the best copy that finds no thread
 *     polling (one thread, or helpers woken when the clock starts);
 *   - cache state: ect_bench_cold / ect_bench_warm put the bytes of both
 *     sides of a copy in a stated state before each timed copy, the same for
 *     the engine and its ceiling;
 *   - medians.
 *
 * Benchmarks are single-threaded drivers; none of this is thread-safe
 * except where a comment says so.
 */
#ifndef ECT_BENCH_BENCH_H
#define ECT_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/copy.h>

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

/* ---- figures ------------------------------------------------------------------ */

typedef struct ect_bench_fig {
    const char *name;       /* what was measured, one line (borrowed) */
    double value;           /* in unit */
    const char *unit;       /* "GB/s", "Mop/s", "us", ... */
    double ceiling;         /* in unit; <= 0: none */
    const char *ceiling_is; /* what the ceiling was, e.g. "NT stores, 2 threads"; may be NULL */
    double target;          /* the ratio value/ceiling must reach (at most, with
                             * lower_is_better); <= 0: none */
    int lower_is_better;    /* a time or a cost: the ratio must stay at or below target */
    double bytes;           /* entry size it was measured at (x axis of --plot); 0: none */
    const char *series;     /* the chart line it belongs to, e.g. "save, 1 run"; NULL: name */
} ect_bench_fig_t;

/* Report one figure: a text row "<name> <value> <unit> ceiling <c> ratio <r>
 * (target [<= ]<t>[, MISSED])", or under --json one object on stdout:
 * {"bench", "name", "value", "unit", "ceiling", "ceiling_is", "ratio",
 *  "target", "better", "met", "bytes", "series"} (null where a field does
 * not apply; "better" is "higher" or "lower", and says which side of the
 * target "met" is on).
 * fig and its strings are borrowed; under --plot it is copied. */
void ect_bench_figure(const ect_bench_fig_t *fig);

/* A CPU-tier copy figure: GB/s at an entry size against the copy ceiling,
 * with the SPEC §12 target of 0.9. */
void ect_bench_copy_figure(const char *name, const char *series, double gbps, double ceiling,
                           const char *ceiling_is, double bytes);

/* Short form without a size or ceiling description. */
void ect_bench_row(const char *what, double value, double ceiling, const char *unit, double target);

/* ---- medians ---------------------------------------------------------------------- */

/* Median of v[0 .. n) (n > 0); sorts v. */
double ect_bench_median(double *v, size_t n);

/* One line (after indent) saying how a CPU copy engine copied between two
 * snapshots of its counters a and z: pieces by copy threads and by waiting
 * callers, batches copied inside submit and handed off, wake-ups, and how
 * late a woken or polling copy thread took its first piece. */
struct ect__copy_cpu_stats;
void ect_bench_copy_engine_line(const char *indent, const struct ect__copy_cpu_stats *a,
                                const struct ect__copy_cpu_stats *z);

/* ---- cache state -------------------------------------------------------------------- */

/* Evict [p, p + len) from every cache level (written back if dirty), so the
 * next copy finds it in memory, as it finds a region block nobody touched
 * for a long time.  x86-64 only; elsewhere a no-op (figures are then
 * cache-warm: the header of each bench says which). */
void ect_bench_cold(const void *p, size_t len);

/* Read every cache line of [p, p + len), so that it is in the cache, as the
 * engine's own buffers usually are. */
void ect_bench_warm(const void *p, size_t len);

/* 1 when ect_bench_cold really evicts on this machine. */
int ect_bench_cold_works(void);

/* What ect_bench_cold does on this machine, for a bench's header
 * ("evicted from the caches (clflushopt)"). */
const char *ect_bench_cold_describe(void);

/* ---- the CPU copy ceiling -------------------------------------------------------------- */

#define ECT_BENCH_MAX_WAYS 12

typedef struct ect_bench_ceiling ect_bench_ceiling_t;

/* A ceiling for copies done by up to `threads` threads (as many as copy
 * one batch in the engine: ect__copy_cpu_copiers; at least 1).  It measures
 * every way of copying the same ops: memcpy, non-temporal stores and rep
 * movsb (where built), on 1 thread and on `threads` threads, each thread
 * taking an equal share of the bytes or, in a second way of each, pieces
 * as it comes (eight a thread, at least 64 KiB).  The helper threads sleep except
 * while a ceiling copy is being timed.  NULL on failure (message printed).
 * Release with ect_bench_ceiling_destroy. */
ect_bench_ceiling_t *ect_bench_ceiling_create(unsigned threads);
void ect_bench_ceiling_destroy(ect_bench_ceiling_t *c);

/* Forget the samples of the previous figure. */
void ect_bench_ceiling_reset(ect_bench_ceiling_t *c);

/* One sample of every way: prepare(arg) (may be NULL) runs untimed before
 * each, to set the cache state; then the ops are copied and timed.  Each
 * way reads the ops after its prepare, so prepare may also change them (the
 * caller's array): to give each way a destination of its own, say.  The
 * order of the ways rotates from call to call.  Returns 0, or -1 when out of
 * memory (message printed). */
int ect_bench_ceiling_sample(ect_bench_ceiling_t *c, const ect_copy_op_t *ops, size_t n_ops,
                             void (*prepare)(void *arg), void *arg);

/* The ceiling in GB/s for `bytes` bytes a sample: the best over the ways of
 * the median time of that way.  *way_p (may be NULL) gets the winner's name
 * ("NT stores, 2 threads"), valid while c lives. */
double ect_bench_ceiling_gbps(ect_bench_ceiling_t *c, double bytes, const char **way_p);

/*
 * A second, lower ceiling beside the first, for a figure whose copy may find
 * no thread polling: every multi-threaded way again, its helpers asleep
 * when the clock starts (for at least 1 ms, longer than the kernel's and
 * the hypervisor's idle polling), woken by the copying thread as a copy engine wakes
 * its threads (one condition-variable broadcast), each thread taking
 * pieces (eight a thread, at least 64 KiB) as it comes.  So the wake-up's
 * cost to the waker and the helpers' late start are in its time, and
 * nothing else is.  Call before the first sample; afterwards each sample
 * times these ways too.  A no-op on a one-thread ceiling, or once sampled.
 * ect_bench_ceiling_gbps never picks these ways.
 */
void ect_bench_ceiling_add_asleep(ect_bench_ceiling_t *c);

/* How long the helpers of those ways have slept at least when the clock
 * starts: longer than the kernel's and the hypervisor's idle polling (about
 * 200 us by default), which would wake a CPU that has just gone idle at
 * once.  A copy engine's threads between steps often sleep far longer, and
 * on some hosts wake the slower for it (bench copy's "threads asleep" rows
 * time the engine after the same sleep). */
#define ECT_BENCH_ASLEEP_MIN_NS ((uint64_t)1000 * 1000)

/* A CPU copy engine's counters (copy/cpu.h), wherever the engine lives:
 * fills *st from arg and returns 0, or nonzero when they cannot be had. */
struct ect__copy_cpu_stats;
typedef int (*ect_bench_copy_stats_fn)(const void *arg, struct ect__copy_cpu_stats *st);

/* ect_bench_copy_stats_fn of a CPU copy engine (arg: the ect_copy_engine_t). */
int ect_bench_engine_stats(const void *engine, struct ect__copy_cpu_stats *st);

/* Wait until stats(arg) reports every copy thread asleep: their last batch
 * done and their copy_spin_us spent.  Returns 0, or 1 with a message
 * naming bench when one is still awake 1 s later. */
int ect_bench_wait_copy_threads_asleep(ect_bench_copy_stats_fn stats, const void *arg,
                                       const char *bench);

/* Let the copy threads rest as between an engine's steps before a timed
 * operation: wait until they sleep (skipped when stats is NULL: an engine
 * that keeps them polling), then ECT_BENCH_ASLEEP_MIN_NS more, as long as
 * the no-polling ceiling lets its helpers sleep, with the calling thread
 * spinning on its CPU meanwhile, as the engine's own thread stays busy.
 * So a timed operation's wake-ups cost what they cost after a real pause.
 * Returns 0, or 1 with a message as above. */
int ect_bench_rest_copy_threads(ect_bench_copy_stats_fn stats, const void *arg, const char *bench);

/* The best, in GB/s for `bytes` a sample, of the ways that need no thread
 * polling before the clock starts: one thread, or helpers woken (where
 * ect_bench_ceiling_add_asleep added them).  *way_p as for
 * ect_bench_ceiling_gbps; it does not change which way copy_best uses. */
double ect_bench_ceiling_asleep_gbps(ect_bench_ceiling_t *c, double bytes, const char **way_p);

/* The median delay, in microseconds, from the copying thread beginning to
 * wake the sleeping helpers to a helper taking its first piece, over the
 * helpers that took one since the last reset (*n_p gets how many, *mean_p
 * their mean); -1 with none.  Beside a copy engine's own first-piece delay,
 * it tells whether the engine's threads wake later than the machine wakes
 * a thread.  A helper that woke after the copying thread took the last
 * piece is not counted, so with few pieces (small copies) the figure leans
 * early; compare sizes where every helper finds work. */
double ect_bench_ceiling_helper_start_us(ect_bench_ceiling_t *c, size_t *n_p, double *mean_p);

/* Copy the ops once with the way that won the last ect_bench_ceiling_gbps
 * (for a figure that must copy the way its ceiling did); returns seconds. */
double ect_bench_ceiling_copy_best(ect_bench_ceiling_t *c, const ect_copy_op_t *ops, size_t n_ops);

/* The same with the way that won the last ect_bench_ceiling_asleep_gbps
 * (one thread, or helpers asleep ECT_BENCH_ASLEEP_MIN_NS or more and woken
 * when the clock starts: the caller may sleep that long first, untimed). */
double ect_bench_ceiling_copy_asleep_best(ect_bench_ceiling_t *c, const ect_copy_op_t *ops,
                                          size_t n_ops);

/* A line for a bench's header: what the ceiling is. */
const char *ect_bench_ceiling_describe(const ect_bench_ceiling_t *c);

#endif /* ECT_BENCH_BENCH_H */
