/*
 * Small real instances of the step protocol: schedulers, workers, reports
 * sent as encoded bytes (see step.h).
 */
#include <time.h>

#include "support/step.h"

void
ts_step_instance_init(struct ts_step_instance *in, ect_role_t role, uint64_t num_blocks,
                      bool reaper)
{
    ect_test_unique_name(in->id, sizeof(in->id), "ectt_");
    snprintf(in->path, sizeof(in->path), "/dev/shm/ectier_%s_dp0.mmap", in->id);
    CHECK_OK(ect_config_init(&in->cfg));
    in->cfg.role = role;
    in->cfg.cpu_bytes = num_blocks * TS_STEP_BLOCK;
    in->cfg.region_reaper = reaper;
    CHECK_OK(ect_geometry_init(TS_STEP_HIDDEN, ECT_DTYPE_F32, in->cfg.cpu_bytes, &in->geom));
    CHECK_EQ_U64(in->geom.num_blocks, num_blocks);
}

ect_scheduler_t *
ts_scheduler(const struct ts_step_instance *in, unsigned load_reports)
{
    ect_scheduler_params_t p = {.config = &in->cfg,
                                .geometry = &in->geom,
                                .instance_id = in->id,
                                .load_reports = load_reports};
    ect_scheduler_t *s = NULL;
    CHECK_OK(ect_scheduler_create(&p, &s));
    return s;
}

ect_worker_t *
ts_worker(const struct ts_step_instance *in, unsigned tp_rank, unsigned pcp_rank,
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

ect_region_t *
ts_region_join(const struct ts_step_instance *in)
{
    ect_region_params_t p = {
        .instance_id = in->id, .geometry = in->geom, .flags = ECT_REGION_NO_REAPER};
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    return r;
}

void
ts_check_gone(const char *path)
{
    for (int ms = 0; ms < 5000 && ts_exists(path); ms += 5)
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    CHECK_MSG(!ts_exists(path), "%s is still in /dev/shm", path);
}

void
ts_step_fx_open(struct ts_step_fx *fx, ect_role_t role, uint64_t num_blocks, unsigned load_reports)
{
    ts_step_instance_init(&fx->in, role, num_blocks, true);
    fx->s = ts_scheduler(&fx->in, load_reports);
    CHECK_MSG(ts_exists(fx->in.path), "no region file %s", fx->in.path);
}

void
ts_step_fx_close(struct ts_step_fx *fx)
{
    ect_scheduler_destroy(fx->s);
    fx->s = NULL;
    ts_check_gone(fx->in.path);
}

int
ts_cached(ect_scheduler_t *s, const char *key)
{
    ect_cache_entry_t e;
    return ect_cache_get(ect__scheduler_cache(s), key, &e) == ECT_OK &&
           e.state != ECT_CACHE_ENTRY_NOT_READY;
}

void
ts_alloc(ect_scheduler_t *s, const char *identifier, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = identifier, .num_tokens = tokens, .has_local_input = 1};
    ect_request_t r = {.request_id = "req", .features = &f, .n_features = 1};
    CHECK_OK(ect_scheduler_update_state_after_alloc(s, &r, 0));
}

ect_step_meta_t *
ts_step(ect_scheduler_t *s)
{
    ect_step_meta_t *m = NULL;
    CHECK_OK(ect_scheduler_build_connector_meta(s, &m));
    CHECK(m != NULL);
    return m;
}

const ect_step_item_t *
ts_find_load(const ect_step_meta_t *m, const char *key)
{
    for (size_t i = 0; i < ect_step_meta_n_loads(m); i++)
        if (strcmp(ect_step_meta_load(m, i)->key, key) == 0)
            return ect_step_meta_load(m, i);
    return NULL;
}

int
ts_same_runs(const ect_step_item_t *a, const ect_step_item_t *b)
{
    if (a->n_runs != b->n_runs || a->n_blocks != b->n_blocks)
        return 0;
    for (size_t i = 0; i < a->n_runs; i++)
        if (a->runs[i].first != b->runs[i].first || a->runs[i].count != b->runs[i].count)
            return 0;
    return 1;
}

void *
ts_encode_meta(const ect_step_meta_t *m, size_t *len_p)
{
    size_t cap = ect_step_meta_encoded_size(m);
    void *buf = malloc(cap);
    CHECK(buf != NULL);
    CHECK_OK(ect_step_meta_encode(m, buf, cap, len_p));
    return buf;
}

void *
ts_encode_report(const ect_step_report_t *r, size_t *len_p)
{
    size_t cap = ect_step_report_encoded_size(r);
    void *buf = malloc(cap);
    CHECK(buf != NULL);
    CHECK_OK(ect_step_report_encode(r, buf, cap, len_p));
    return buf;
}

void
ts_send_report(ect_scheduler_t *s, const ect_step_report_t *r)
{
    size_t len;
    void *buf = ts_encode_report(r, &len);
    CHECK_OK(ect_scheduler_update_connector_output(s, buf, len));
    free(buf);
}

void
ts_report_save(ect_scheduler_t *s, const char *key, enum ts_report_kind kind)
{
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    if (kind == TS_SAVED)
        CHECK_OK(ect_step_report_add_save(r, key));
    else
        CHECK_OK(ect_step_report_add_failed_save(r, key));
    ts_send_report(s, r);
    ect_step_report_destroy(r);
}

void
ts_report_load(ect_scheduler_t *s, uint64_t tid)
{
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_load(r, tid));
    ts_send_report(s, r);
    ect_step_report_destroy(r);
}

ect_metrics_t
ts_metrics(ect_scheduler_t *s)
{
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(s, &m));
    return m;
}

ect_step_meta_t *
ts_store(ect_scheduler_t *s, const char *key, uint64_t tokens)
{
    ts_alloc(s, key, tokens);
    ect_step_meta_t *m = ts_step(s);
    CHECK_MSG(ect_step_meta_find_save(m, key) != NULL, "no save of '%s' in the step", key);
    ts_report_save(s, key, TS_SAVED);
    return m;
}

void
ts_store_only(ect_scheduler_t *s, const char *key, uint64_t tokens)
{
    ect_step_meta_destroy(ts_store(s, key, tokens));
}

/* ---- a worker over a fresh instance -------------------------------------- */

void
ts_worker_fx_open(struct ts_worker_fx *fx, unsigned tp, unsigned pcp, int lend_engine)
{
    ts_step_instance_init(&fx->in, ECT_ROLE_BOTH, 16, true);
    fx->engine = NULL;
    if (lend_engine) {
        ect_copy_cpu_params_t cp = {.threads = 2};
        CHECK_OK(ect_copy_engine_create_cpu(&cp, &fx->engine));
    }
    fx->w = ts_worker(&fx->in, tp, pcp, fx->engine);
    fx->region = ts_region_join(&fx->in);
    const ect_geometry_t *g = ect_region_geometry(fx->region);
    memset(ect_region_block_ptr(fx->region, 0), TS_WORKER_POISON,
           g->num_blocks * g->block_size_bytes);
}

void
ts_worker_fx_close(struct ts_worker_fx *fx)
{
    ect_worker_destroy(fx->w);
    ect_region_close(fx->region);
    ect_copy_engine_destroy(fx->engine);
    ts_check_gone(fx->in.path);
}

unsigned char *
ts_worker_fx_block(struct ts_worker_fx *fx, uint64_t i)
{
    return ect_region_block_ptr(fx->region, i);
}

unsigned char *
ts_payload(size_t n, unsigned seed)
{
    unsigned char *p = ts_xmalloc(n ? n : 1);
    ts_fill_nonzero(p, n, seed);
    return p;
}

void
ts_worker_bind(ect_worker_t *w, const ect_step_meta_t *m)
{
    size_t len;
    void *bytes = ts_encode_meta(m, &len);
    CHECK_OK(ect_worker_bind_metadata(w, bytes, len));
    free(bytes);
}

ect_step_meta_t *
ts_meta_new(void)
{
    ect_step_meta_t *m;
    CHECK_OK(ect_step_meta_create(&m));
    return m;
}

ect_step_report_t *
ts_worker_land(ect_worker_t *w)
{
    CHECK_OK(ect_worker_wait(w));
    ect_step_report_t *r = NULL;
    CHECK_OK(ect_worker_take_report(w, &r));
    return r;
}

size_t
ts_report_count_saves(const ect_step_report_t *r, const char *key)
{
    size_t n = 0;
    for (size_t i = 0; i < ect_step_report_n_saves(r); i++)
        n += strcmp(ect_step_report_save(r, i), key) == 0;
    return n;
}

size_t
ts_report_count_failed(const ect_step_report_t *r, const char *key)
{
    size_t n = 0;
    for (size_t i = 0; i < ect_step_report_n_failed_saves(r); i++)
        n += strcmp(ect_step_report_failed_save(r, i), key) == 0;
    return n;
}

size_t
ts_report_count_loads(const ect_step_report_t *r, uint64_t tid)
{
    size_t n = 0;
    for (size_t i = 0; i < ect_step_report_n_loads(r); i++)
        n += ect_step_report_load(r, i) == tid;
    return n;
}

ect_status_t
ts_load_target_fn(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct ts_load_target *t = user;
    unsigned i = t->calls++;
    if (t->fail_at == i + 1)
        return ECT_ERR_NO_MEMORY;
    CHECK(i < TS_MAX_LOADS);
    snprintf(t->keys[i], sizeof(t->keys[i]), "%s", key);
    t->tokens[i] = n_tokens;
    t->nbytes[i] = nbytes;
    t->bufs[i] = malloc(nbytes ? nbytes : 1);
    CHECK(t->bufs[i] != NULL);
    memset(t->bufs[i], 0, nbytes);
    *dst_p = t->bufs[i];
    return ECT_OK;
}

void
ts_load_target_free(struct ts_load_target *t)
{
    for (unsigned i = 0; i < TS_MAX_LOADS; i++)
        free(t->bufs[i]);
}
