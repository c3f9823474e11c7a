/*
 * Helpers shared by the step-protocol tests (tests/unit/test_scheduler.c,
 * tests/unit/test_worker.c, tests/integration/test_step_procs.c).
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

#endif /* ECT_TESTS_SUPPORT_STEP_H */
