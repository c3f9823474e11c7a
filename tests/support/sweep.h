/*
 * The allocation failure sweep (issue 13), used by tests/unit/test_alloc_sweep.c
 * and tests/integration/p2p/test_alloc_sweep_p2p.c.
 *
 * ts_sweep(what, path) runs path once cleanly, then for n = 1, 2, ... with
 * the allocator's injector (src/common/alloc.h) failing allocation n and
 * every later one, then again failing allocation n alone, until a run meets
 * no injected failure.  Each run must return ECT_OK or ECT_ERR_NO_MEMORY,
 * bring the library's live allocation count back where it was, and leave
 * no /dev/shm entry that carries the case's unique name (the run's id,
 * which the path must put in every region name).  ECT_SWEEP_DENSE=1 in the
 * environment makes a strided sweep take every n; ECT_SWEEP_LOG=1 keeps
 * the library's log lines.  A path frees whatever it got, on every outcome,
 * and may CHECK its own end state.
 */
#ifndef ECT_TESTS_SUPPORT_SWEEP_H
#define ECT_TESTS_SUPPORT_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/ectier.h>

/* Past `dense` runs a sweep steps n by `stride` (ts_sweep uses these; the
 * unit paths stay well below it, it only bounds the runtime should a path
 * grow). */
#define TS_SWEEP_DENSE  2000
#define TS_SWEEP_STRIDE 7

enum ts_sweep_mode { TS_FAIL_FROM_N, TS_FAIL_ONLY_N };

/* What a path sees: its case's unique name and the sweep's mode. */
struct ts_sweep_run {
    const char *id;
    enum ts_sweep_mode mode;
};

typedef ect_status_t (*ts_sweep_path_fn)(struct ts_sweep_run *r);

/* Skip the case when the library was built without the injector. */
void ts_sweep_require_hooks(void);

/* How many /dev/shm entries carry id in their name; the first one's name
 * goes to first[0 .. cap) when first is not NULL. */
size_t ts_sweep_shm_entries(const char *id, char *first, size_t cap);

/* Sweep fn in both modes (see the top); fails the case on a broken promise
 * and prints the n at which each mode completed. */
void ts_sweep_strided(const char *what, ts_sweep_path_fn fn, uint64_t dense, uint64_t stride);
void ts_sweep(const char *what, ts_sweep_path_fn fn);

/* The workers' report of the step, applied on the scheduler; a report
 * that could not be taken is asked for again (as the engine does at its
 * next step), a few times. */
ect_status_t ts_sweep_report_step(ect_scheduler_t *s, ect_worker_t *w);

/* The scheduler's step metadata, bound on the worker. */
ect_status_t ts_sweep_bind_step(ect_scheduler_t *s, ect_worker_t *w);

/* In a path with `ect_status_t st` and a label `out`: stop at the first
 * failed status. */
#define TS_TRY(expr)                                                                               \
    do {                                                                                           \
        if ((st = (expr)) != ECT_OK)                                                               \
            goto out;                                                                              \
    } while (0)

#endif /* ECT_TESTS_SUPPORT_SWEEP_H */
