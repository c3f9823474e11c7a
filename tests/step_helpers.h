/*
 * Helpers shared by the step-protocol tests (tests/unit/test_scheduler.c,
 * tests/unit/test_worker.c, tests/integration/test_step_procs.c).
 *
 * Every instance is small and real: hidden 16 x float32 gives 64-byte
 * blocks (the seed's "16 x 64 B region"), the region is a real file in
 * /dev/shm named after a unique instance id (ect_test_unique_name), and
 * reports reach the scheduler as encoded bytes, exactly as worker processes
 * send them.  A case checks that its region file is gone when it has
 * destroyed everything (sh_check_gone).
 */
#ifndef ECT_TESTS_STEP_HELPERS_H
#define ECT_TESTS_STEP_HELPERS_H

#include <errno.h>
#include <sys/stat.h>
#include <time.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "step/scheduler_hooks.h"

#define SH_HIDDEN 16u
#define SH_BLOCK  64u /* SH_HIDDEN x 4-byte float32 */

/* One instance: its unique id, region path, config and geometry. */
struct sh_instance {
    char id[64];
    char path[320];
    ect_config_t cfg;
    ect_geometry_t geom;
};

static inline void
sh_instance_init(struct sh_instance *in, ect_role_t role, uint64_t num_blocks, bool reaper)
{
    ect_test_unique_name(in->id, sizeof(in->id), "ectt_");
    snprintf(in->path, sizeof(in->path), "/dev/shm/ectier_%s_dp0.mmap", in->id);
    CHECK_OK(ect_config_init(&in->cfg));
    in->cfg.role = role;
    in->cfg.cpu_bytes = num_blocks * SH_BLOCK;
    in->cfg.region_reaper = reaper;
    CHECK_OK(ect_geometry_init(SH_HIDDEN, ECT_DTYPE_F32, in->cfg.cpu_bytes, &in->geom));
    CHECK_EQ_U64(in->geom.num_blocks, num_blocks);
}

static inline ect_scheduler_t *
sh_scheduler(const struct sh_instance *in, unsigned load_reports)
{
    ect_scheduler_params_t p = {.config = &in->cfg,
                                .geometry = &in->geom,
                                .instance_id = in->id,
                                .load_reports = load_reports};
    ect_scheduler_t *s = NULL;
    CHECK_OK(ect_scheduler_create(&p, &s));
    return s;
}

/* A worker of the instance; engine NULL = its own CPU engine. */
static inline ect_worker_t *
sh_worker(const struct sh_instance *in, unsigned tp_rank, unsigned pcp_rank,
          ect_copy_engine_t *engine)
{
    ect_worker_params_t p = {.config = &in->cfg,
                             .geometry = &in->geom,
                             .instance_id = in->id,
                             .tp_rank = tp_rank,
                             .pcp_rank = pcp_rank,
                             .engine = engine};
    ect_worker_t *w = NULL;
    CHECK_OK(ect_worker_create(&p, &w));
    return w;
}

/* Join the instance's region from the test itself, to poison and inspect
 * its blocks (the same parameters the scheduler and workers use). */
static inline ect_region_t *
sh_region_join(const struct sh_instance *in)
{
    ect_region_params_t p = {.instance_id = in->id,
                             .geometry = in->geom,
                             .flags = ECT_REGION_NO_REAPER};
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    return r;
}

static inline int
sh_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The region file is gone (a reaper may take a moment after a crash). */
static inline void
sh_check_gone(const char *path)
{
    for (int ms = 0; ms < 5000 && sh_exists(path); ms += 5)
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    CHECK_MSG(!sh_exists(path), "%s is still in /dev/shm", path);
}

/* A scheduler over a fresh instance (region reaper on, so a failing case
 * leaves nothing behind either). */
struct sh_fx {
    struct sh_instance in;
    ect_scheduler_t *s;
};

static inline void
sh_fx_open(struct sh_fx *fx, ect_role_t role, uint64_t num_blocks, unsigned load_reports)
{
    sh_instance_init(&fx->in, role, num_blocks, true);
    fx->s = sh_scheduler(&fx->in, load_reports);
    CHECK_MSG(sh_exists(fx->in.path), "no region file %s", fx->in.path);
}

static inline void
sh_fx_close(struct sh_fx *fx)
{
    ect_scheduler_destroy(fx->s);
    fx->s = NULL;
    sh_check_gone(fx->in.path);
}

/* Whether key has a ready entry, observed without touching it
 * (has_cache_item would pin a hit until the step is built). */
static inline int
sh_cached(ect_scheduler_t *s, const char *key)
{
    ect_cache_entry_t e;
    return ect_cache_get(ect__scheduler_cache(s), key, &e) == ECT_OK &&
           e.state != ECT_CACHE_ENTRY_NOT_READY;
}

/* update_state_after_alloc for a one-item request. */
static inline void
sh_alloc(ect_scheduler_t *s, const char *identifier, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = identifier, .num_tokens = tokens, .has_local_input = 1};
    ect_request_t r = {.request_id = "req", .features = &f, .n_features = 1};
    CHECK_OK(ect_scheduler_update_state_after_alloc(s, &r, 0));
}

static inline ect_step_meta_t *
sh_step(ect_scheduler_t *s)
{
    ect_step_meta_t *m = NULL;
    CHECK_OK(ect_scheduler_build_connector_meta(s, &m));
    CHECK(m != NULL);
    return m;
}

/* The load of key in meta, or NULL. */
static inline const ect_step_item_t *
sh_find_load(const ect_step_meta_t *m, const char *key)
{
    for (size_t i = 0; i < ect_step_meta_n_loads(m); i++)
        if (strcmp(ect_step_meta_load(m, i)->key, key) == 0)
            return ect_step_meta_load(m, i);
    return NULL;
}

/* Two items name the same blocks. */
static inline int
sh_same_runs(const ect_step_item_t *a, const ect_step_item_t *b)
{
    if (a->n_runs != b->n_runs || a->n_blocks != b->n_blocks)
        return 0;
    for (size_t i = 0; i < a->n_runs; i++)
        if (a->runs[i].first != b->runs[i].first || a->runs[i].count != b->runs[i].count)
            return 0;
    return 1;
}

static inline void *
sh_encode_meta(const ect_step_meta_t *m, size_t *len_p)
{
    size_t cap = ect_step_meta_encoded_size(m);
    void *buf = malloc(cap);
    CHECK(buf != NULL);
    CHECK_OK(ect_step_meta_encode(m, buf, cap, len_p));
    return buf;
}

static inline void *
sh_encode_report(const ect_step_report_t *r, size_t *len_p)
{
    size_t cap = ect_step_report_encoded_size(r);
    void *buf = malloc(cap);
    CHECK(buf != NULL);
    CHECK_OK(ect_step_report_encode(r, buf, cap, len_p));
    return buf;
}

/* Send a report to the scheduler as encoded bytes. */
static inline void
sh_send_report(ect_scheduler_t *s, const ect_step_report_t *r)
{
    size_t len;
    void *buf = sh_encode_report(r, &len);
    CHECK_OK(ect_scheduler_update_connector_output(s, buf, len));
    free(buf);
}

enum sh_report_kind { SH_SAVED, SH_FAILED };

static inline void
sh_report_save(ect_scheduler_t *s, const char *key, enum sh_report_kind kind)
{
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    if (kind == SH_SAVED)
        CHECK_OK(ect_step_report_add_save(r, key));
    else
        CHECK_OK(ect_step_report_add_failed_save(r, key));
    sh_send_report(s, r);
    ect_step_report_destroy(r);
}

static inline void
sh_report_load(ect_scheduler_t *s, uint64_t tid)
{
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_load(r, tid));
    sh_send_report(s, r);
    ect_step_report_destroy(r);
}

static inline ect_metrics_t
sh_metrics(ect_scheduler_t *s)
{
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(s, &m));
    return m;
}

/* Save key (tokens blocks) through a whole step and report it landed.
 * Returns the step's metadata (the save's blocks), for the caller to
 * destroy. */
static inline ect_step_meta_t *
sh_store(ect_scheduler_t *s, const char *key, uint64_t tokens)
{
    sh_alloc(s, key, tokens);
    ect_step_meta_t *m = sh_step(s);
    CHECK_MSG(ect_step_meta_find_save(m, key) != NULL, "no save of '%s' in the step", key);
    sh_report_save(s, key, SH_SAVED);
    return m;
}

/* The same, dropping the metadata. */
static inline void
sh_store_only(ect_scheduler_t *s, const char *key, uint64_t tokens)
{
    ect_step_meta_destroy(sh_store(s, key, tokens));
}

#endif /* ECT_TESTS_STEP_HELPERS_H */
