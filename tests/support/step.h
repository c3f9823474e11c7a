/*
 * Helpers shared by the step-protocol tests (tests/unit/test_scheduler.c,
 * tests/unit/test_worker.c and test_worker_reports.c,
 * tests/integration/test_step_procs.c).
 *
 * Every instance is small and real: hidden 16 x float32 gives 64-byte
 * blocks (the seed's "16 x 64 B region"), the region is a real file in
 * /dev/shm named after a unique instance id (ect_test_unique_name), and
 * reports reach the scheduler as encoded bytes, exactly as worker processes
 * send them.  A case checks that its region file is gone when it has
 * destroyed everything (ts_check_gone).
 */
#ifndef ECT_TESTS_SUPPORT_STEP_H
#define ECT_TESTS_SUPPORT_STEP_H

#include <ectier/ectier.h>

#include "harness.h"
#include "step/scheduler_hooks.h"
#include "support/util.h"

#define TS_STEP_HIDDEN 16u
#define TS_STEP_BLOCK  64u /* TS_STEP_HIDDEN x 4-byte float32 */

/* One instance: its unique id, region path, config and geometry. */
struct ts_step_instance {
    char id[64];
    char path[320];
    ect_config_t cfg;
    ect_geometry_t geom;
};

/* A fresh instance of num_blocks TS_STEP_BLOCK-byte blocks with a unique
 * id; reaper sets its region_reaper. */
void ts_step_instance_init(struct ts_step_instance *in, ect_role_t role, uint64_t num_blocks,
                           bool reaper);

/* The instance's scheduler (load_reports workers report loads); the caller
 * destroys it. */
ect_scheduler_t *ts_scheduler(const struct ts_step_instance *in, unsigned load_reports);

/* A worker of the instance; engine NULL = its own CPU engine. */
ect_worker_t *ts_worker(const struct ts_step_instance *in, unsigned tp_rank, unsigned pcp_rank,
                        ect_copy_engine_t *engine);

/* Join the instance's region from the test itself, to poison and inspect
 * its blocks (the same parameters the scheduler and workers use). */
ect_region_t *ts_region_join(const struct ts_step_instance *in);

/* The region file is gone (a reaper may take a moment after a crash). */
void ts_check_gone(const char *path);

/* A scheduler over a fresh instance (region reaper on, so a failing case
 * leaves nothing behind either). */
struct ts_step_fx {
    struct ts_step_instance in;
    ect_scheduler_t *s;
};

/* Open a fresh instance and its scheduler; its region file must exist. */
void ts_step_fx_open(struct ts_step_fx *fx, ect_role_t role, uint64_t num_blocks,
                     unsigned load_reports);

/* Destroy the scheduler; the region file must then go. */
void ts_step_fx_close(struct ts_step_fx *fx);

/* Whether key has a ready entry, observed without touching it
 * (has_cache_item would pin a hit until the step is built). */
int ts_cached(ect_scheduler_t *s, const char *key);

/* update_state_after_alloc for a one-item request. */
void ts_alloc(ect_scheduler_t *s, const char *identifier, uint64_t tokens);

/* build_connector_meta: the step's metadata, for the caller to destroy. */
ect_step_meta_t *ts_step(ect_scheduler_t *s);

/* The load of key in meta, or NULL. */
const ect_step_item_t *ts_find_load(const ect_step_meta_t *m, const char *key);

/* Two items name the same blocks. */
int ts_same_runs(const ect_step_item_t *a, const ect_step_item_t *b);

/* The metadata encoded into a malloc'd buffer of *len_p bytes. */
void *ts_encode_meta(const ect_step_meta_t *m, size_t *len_p);

/* The report encoded into a malloc'd buffer of *len_p bytes. */
void *ts_encode_report(const ect_step_report_t *r, size_t *len_p);

/* Send a report to the scheduler as encoded bytes. */
void ts_send_report(ect_scheduler_t *s, const ect_step_report_t *r);

/* How a save ended, in a report. */
enum ts_report_kind { TS_SAVED, TS_FAILED };

/* Report one save of key (landed or failed) to the scheduler. */
void ts_report_save(ect_scheduler_t *s, const char *key, enum ts_report_kind kind);

/* Report that the load of transfer tid landed. */
void ts_report_load(ect_scheduler_t *s, uint64_t tid);

/* The scheduler's metrics (fails the case on error). */
ect_metrics_t ts_metrics(ect_scheduler_t *s);

/* Save key (tokens blocks) through a whole step and report it landed.
 * Returns the step's metadata (the save's blocks), for the caller to
 * destroy. */
ect_step_meta_t *ts_store(ect_scheduler_t *s, const char *key, uint64_t tokens);

/* The same, dropping the metadata. */
void ts_store_only(ect_scheduler_t *s, const char *key, uint64_t tokens);

/* ---- a worker over a fresh instance (tests/unit/test_worker*.c) ---- */

/* What every block of a worker fixture's region holds before a case runs. */
#define TS_WORKER_POISON 0xEE

struct ts_worker_fx {
    struct ts_step_instance in;
    ect_copy_engine_t *engine; /* lent to the worker, or NULL */
    ect_worker_t *w;
    ect_region_t *region; /* the test's own view of the region, poisoned */
};

/* A worker of rank (tp, pcp) over a fresh 16-block instance whose blocks
 * are all TS_WORKER_POISON; lend_engine: give it a CPU engine of 2 threads
 * that the test can hold (ect__copy_cpu_hold). */
void ts_worker_fx_open(struct ts_worker_fx *fx, unsigned tp, unsigned pcp, int lend_engine);

/* Destroy the worker, the region view and the engine; the region file
 * must then go. */
void ts_worker_fx_close(struct ts_worker_fx *fx);

/* Block i of the fixture's region, as the test sees it. */
unsigned char *ts_worker_fx_block(struct ts_worker_fx *fx, uint64_t i);

/* n malloc'd bytes (at least 1 allocated) of seed's ts_fill_nonzero
 * pattern; the caller frees. */
unsigned char *ts_payload(size_t n, unsigned seed);

/* Bind m to w as encoded bytes, as a worker process receives it. */
void ts_worker_bind(ect_worker_t *w, const ect_step_meta_t *m);

/* Empty step metadata, for the caller to destroy. */
ect_step_meta_t *ts_meta_new(void);

/* Wait for every copy, then take the report (NULL if nothing finished). */
ect_step_report_t *ts_worker_land(ect_worker_t *w);

/* How often r lists key as saved, key as a failed save, tid as loaded. */
size_t ts_report_count_saves(const ect_step_report_t *r, const char *key);
size_t ts_report_count_failed(const ect_step_report_t *r, const char *key);
size_t ts_report_count_loads(const ect_step_report_t *r, uint64_t tid);

/* A load target (ect_worker_start_load) that records its calls: each gets
 * a zeroed malloc'd buffer; call fail_at (1-based, 0 = none) fails. */
#define TS_MAX_LOADS 8
struct ts_load_target {
    unsigned calls;
    unsigned fail_at;
    char keys[TS_MAX_LOADS][32];
    uint64_t tokens[TS_MAX_LOADS];
    size_t nbytes[TS_MAX_LOADS];
    unsigned char *bufs[TS_MAX_LOADS];
};
ect_status_t ts_load_target_fn(void *user, const char *key, uint64_t n_tokens, size_t nbytes,
                               void **dst_p);
/* Free the buffers the target handed out. */
void ts_load_target_free(struct ts_load_target *t);

#endif /* ECT_TESTS_SUPPORT_STEP_H */
