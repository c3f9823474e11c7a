/*
 * Allocation failure sweep (issue 13): every header promises "nothing is
 * left behind on error"; this proves it for ECT_ERR_NO_MEMORY.
 *
 * Each case runs one path of the library (config parse, model config and
 * geometry, region open, cache operations, a scheduler step, a worker step
 * through the CPU copy engine, the binding entry points, metrics) again and
 * again under the allocator's failure injector (src/common/alloc.h): run n
 * fails allocation n, in one sweep together with every later one (so retry
 * and cleanup paths run out of memory too), in another alone (so the path
 * goes on after an absorbed failure, and a report or pin lost to it shows
 * up in the end state).  Every run must end with ECT_OK or
 * ECT_ERR_NO_MEMORY, with the library's live allocation count back where it
 * was and nothing of the case left in /dev/shm.  A sweep ends at the first
 * n that the path completes without an injected failure.  Allocations made
 * by third-party libraries (cJSON's are ours: alloc.c hooks it) are not
 * counted and never fail.
 *
 * Only the public API and the internal alloc.h are used; the sweep driver
 * is tests/support/sweep.c (shared with the P2P sweep,
 * tests/integration/p2p/test_alloc_sweep_p2p.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "ectier_build_config.h"
#include "harness.h"
#include "support/sweep.h"
#include "metrics/scrape.h"
#include "step/scheduler_hooks.h"

/* ---- config -------------------------------------------------------------- */

#if ECT_HAVE_P2P
#define P2P_SETTINGS                                                                               \
    "\"ec_enable_nixl\": true, \"consumer_ack_timeout_s\": 0.5, \"read_timeout_s\": \"7.25\", "    \
    "\"quarantine_s\": 90, \"producer_pin_lease_s\": 12, \"announce_lease_s\": 0, "                \
    "\"defer_budget_s\": 5, \"transport\": \"same_host\", "                                        \
    "\"events_endpoint\": \"tcp://127.0.0.1:5610\", "                                              \
    "\"curve_server_key_file\": \"/etc/ectier/server.key\", "                                      \
    "\"curve_client_key_file\": \"client.key\", "                                                  \
    "\"curve_allowed_clients_file\": \"/etc/ectier/allowed\", "
#else
#define P2P_SETTINGS ""
#endif

static const char full_config[] =
    "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"3MiB\", " P2P_SETTINGS
    "\"region_name\": \"ectier_test-1.x\", \"metrics_address\": \"0.0.0.0:9100\", "
    "\"copy_threads\": \"8\", \"prefault\": \"no\", \"region_reaper\": false}}";

static ect_status_t
path_config_parse(struct ts_sweep_run *r)
{
    (void)r;
    ect_config_t cfg;
    ect_status_t st = ect_config_parse(full_config, strlen(full_config), &cfg);
    if (st == ECT_OK)
        CHECK_EQ_U64(cfg.cpu_bytes, 3ull << 20);
    return st;
}

static void
test_sweep_config_parse(void)
{
    ts_sweep("config parse", path_config_parse);
}

static ect_status_t
path_config_check_json(struct ts_sweep_run *r)
{
    (void)r;
    char *out = NULL;
    ect_status_t st = ect_config_check_json(full_config, strlen(full_config), &out);
    if (st == ECT_OK) {
        CHECK_CONTAINS(out, "\"ec_cpu_bytes\"");
        ect_free(out);
    } else {
        CHECK(out == NULL);
    }
    return st;
}

static void
test_sweep_config_check_json(void)
{
    ts_sweep("config check json", path_config_check_json);
}

/* ---- model config and geometry -------------------------------------------- */

#define HF_CONFIG ECT_TEST_DATA_DIR "/hf-configs/Qwen2.5-VL-7B-Instruct.json"

static ect_status_t
path_hf_config_load(struct ts_sweep_run *r)
{
    (void)r;
    ect_hf_model_t m;
    return ect_hf_config_load(HF_CONFIG, &m);
}

static void
test_sweep_hf_config_load(void)
{
    ts_sweep("hf config load", path_hf_config_load);
}

static ect_status_t
path_geometry_json(struct ts_sweep_run *r)
{
    (void)r;
    static const char spec[] = "{\"cpu_bytes\": \"1MiB\", \"hf_config_path\": \"" HF_CONFIG "\"}";
    char *out = NULL;
    ect_status_t st = ect_geometry_json(spec, strlen(spec), &out);
    if (st == ECT_OK) {
        CHECK_CONTAINS(out, "\"num_blocks\"");
        ect_free(out);
    }
    return st;
}

static void
test_sweep_geometry_json(void)
{
    ts_sweep("geometry json", path_geometry_json);
}

/* ---- region ---------------------------------------------------------------- */

static ect_status_t
region_open(struct ts_sweep_run *r, uint32_t flags)
{
    ect_region_params_t p = {.instance_id = r->id, .flags = flags};
    ect_status_t st = ect_geometry_init(16, ECT_DTYPE_F32, 64 * 64, &p.geometry);
    if (st != ECT_OK)
        return st;
    ect_region_t *region = NULL;
    if ((st = ect_region_open(&p, &region)) != ECT_OK)
        return st;
    CHECK(ect_region_is_creator(region));
    memset(ect_region_data(region), 1, 64 * 64);
    ect_region_close(region);
    return ECT_OK;
}

static ect_status_t
path_region_open(struct ts_sweep_run *r)
{
    return region_open(r, ECT_REGION_NO_REAPER | ECT_REGION_OWNER);
}

static void
test_sweep_region_open(void)
{
    ts_sweep("region open", path_region_open);
}

static ect_status_t
path_region_open_reaper(struct ts_sweep_run *r)
{
    return region_open(r, 0);
}

static void
test_sweep_region_open_with_reaper(void)
{
    ts_sweep("region open with reaper", path_region_open_reaper);
}

/* The binding's region listing and (dry-run) gc over a region the case
 * holds open. */
static ect_status_t
path_region_list_json(struct ts_sweep_run *r)
{
    ect_region_params_t p = {.instance_id = r->id, .flags = ECT_REGION_NO_REAPER};
    CHECK_OK(ect_geometry_init(16, ECT_DTYPE_F32, 64 * 64, &p.geometry));
    ect_region_t *region = NULL;
    char *text = NULL;
    ect_status_t st = ect_region_open(&p, &region);
    if (st != ECT_OK)
        return st;
    TS_TRY(ect_region_list_json(NULL, &text));
    CHECK_CONTAINS(text, r->id);
    ect_free(text);
    text = NULL;
    TS_TRY(ect_region_gc_json(NULL, 1, &text));
    ect_free(text);
    text = NULL;
out:
    ect_region_close(region);
    return st;
}

static void
test_sweep_region_list_json(void)
{
    ts_sweep("region list json", path_region_list_json);
}

/* ---- cache ------------------------------------------------------------------ */

static ect_status_t
path_cache(struct ts_sweep_run *r)
{
    (void)r;
    ect_cache_t *c = NULL;
    ect_status_t st = ect_cache_create(256, &c);
    if (st != ECT_OK)
        return st;
    char key[64];
    uint64_t holds[8];
    size_t n_holds = 0;
    /* More blocks than the cache has, so ready entries are evicted. */
    for (unsigned i = 0; i < 120; i++) {
        /* Long keys (over the pooled size) for some. */
        snprintf(key, sizeof(key), i % 3 ? "k%u" : "a-rather-long-cache-key-%u-with-padding-xx", i);
        st = ect_cache_alloc(c, key, 1 + i % 7);
        if (st == ECT_ERR_NO_SPACE)
            continue; /* what is left is pinned, held or not ready */
        if (st != ECT_OK)
            goto out;
        if (i % 4 != 3)
            TS_TRY(ect_cache_mark_ready(c, key));
        if (i % 8 == 0 && n_holds < 8)
            TS_TRY(ect_cache_hold(c, key, 0, &holds[n_holds++]));
        if (i % 8 == 1)
            TS_TRY(ect_cache_pin(c, key));
    }
    ect_cache_entry_t e;
    TS_TRY(ect_cache_get(c, "k1", &e));
    ect_run_t runs[16];
    size_t n_runs = 0;
    TS_TRY(ect_cache_get_runs(c, "k1", runs, 16, &n_runs));
    ect_pin_result_t pr;
    TS_TRY(ect_cache_pin_if_ready(c, "k2", &pr));
    if (pr == ECT_PIN_PINNED)
        TS_TRY(ect_cache_unpin(c, "k2"));
    TS_TRY(ect_cache_discard(c, "k7"));
    size_t expired = 0;
    TS_TRY(ect_cache_expire_holds(c, 1, &expired));
    ect_cache_stats_t stats;
    TS_TRY(ect_cache_stats(c, &stats));
    if (ect__alloc_failed() == 0) { /* nothing failed so far */
        CHECK(stats.evicted_entries > 0);
    }
out:
    ect_cache_destroy(c);
    return st;
}

static void
test_sweep_cache(void)
{
    ts_sweep("cache", path_cache);
}

/* ---- scheduler and worker ------------------------------------------------------ */

struct instance {
    ect_config_t cfg;
    ect_geometry_t geom;
};

/* The case's instance, 64 blocks of 64 bytes (16 x f32), and its
 * scheduler. */
static ect_status_t
open_scheduler(const struct ts_sweep_run *r, struct instance *in, ect_scheduler_t **s_p)
{
    CHECK_OK(ect_config_init(&in->cfg));
    in->cfg.role = ECT_ROLE_BOTH;
    in->cfg.cpu_bytes = 64 * 64;
    in->cfg.region_reaper = false;
    in->cfg.copy_threads = 2;
    CHECK_OK(ect_geometry_init(16, ECT_DTYPE_F32, in->cfg.cpu_bytes, &in->geom));
    ect_scheduler_params_t p = {.config = &in->cfg, .geometry = &in->geom, .instance_id = r->id};
    return ect_scheduler_create(&p, s_p);
}

static ect_status_t
alloc_item(ect_scheduler_t *s, const char *rid, const char *key, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = key, .num_tokens = tokens, .has_local_input = 1};
    ect_request_t q = {.request_id = rid, .features = &f, .n_features = 1};
    int available = 0;
    ect_status_t st = ect_scheduler_ensure_cache_available(s, &q, &available);
    if (st != ECT_OK)
        return st;
    return ect_scheduler_update_state_after_alloc(s, &q, 0);
}

/* The scheduler alone: saves queued, a step built, the workers' reports
 * (made here) applied, then loads of the saved entries. */
static ect_status_t
path_scheduler(struct ts_sweep_run *r)
{
    struct instance in;
    ect_scheduler_t *s = NULL;
    ect_step_meta_t *meta = NULL;
    ect_step_report_t *rep = NULL;
    void *bytes = NULL;
    ect_status_t st = open_scheduler(r, &in, &s);
    if (st != ECT_OK)
        return st;
    char key[32];
    for (unsigned i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "img-%u", i);
        TS_TRY(alloc_item(s, "r1", key, 2 + i));
    }
    TS_TRY(ect_scheduler_build_connector_meta(s, &meta));
    TS_TRY(ect_step_report_create(&rep));
    for (size_t i = 0; i < ect_step_meta_n_saves(meta); i++) {
        const char *k = ect_step_meta_save(meta, i)->key;
        TS_TRY(i % 2 ? ect_step_report_add_failed_save(rep, k) : ect_step_report_add_save(rep, k));
    }
    size_t len = ect_step_report_encoded_size(rep);
    bytes = ect__malloc(len);
    if (bytes == NULL) {
        st = ECT_ERR_NO_MEMORY;
        goto out;
    }
    TS_TRY(ect_step_report_encode(rep, bytes, len, &len));
    TS_TRY(ect_scheduler_update_connector_output(s, bytes, len));
    ect_step_meta_destroy(meta);
    meta = NULL;
    if (ect__alloc_failed() == 0) { /* nothing failed so far */
        CHECK(!ect_scheduler_has_pending_push_work(s));
    }
    /* Loads of what was saved. */
    for (unsigned i = 0; i < 4; i += 2) {
        snprintf(key, sizeof(key), "img-%u", i);
        if (ect_scheduler_has_cache_item(s, key))
            TS_TRY(alloc_item(s, "r2", key, 2 + i));
    }
    TS_TRY(ect_scheduler_build_connector_meta(s, &meta));
    ect_step_report_destroy(rep);
    rep = NULL;
    TS_TRY(ect_step_report_create(&rep));
    for (size_t i = 0; i < ect_step_meta_n_loads(meta); i++)
        TS_TRY(ect_step_report_add_load(rep, ect_step_meta_load(meta, i)->transfer_id));
    TS_TRY(ect_scheduler_apply_report(s, rep));
    CHECK_MSG(!ect_scheduler_has_pending_push_work(s), "pending push work after every report");
    ect_metrics_t m;
    TS_TRY(ect_scheduler_metrics(s, &m));
    char text[16384];
    size_t tlen = 0;
    TS_TRY(ect_metrics_format_prometheus(&m, text, sizeof(text), &tlen));
out:
    ect__free(bytes);
    ect_step_report_destroy(rep);
    ect_step_meta_destroy(meta);
    ect_scheduler_destroy(s);
    return st;
}

static void
test_sweep_scheduler_step(void)
{
    ts_sweep("scheduler step", path_scheduler);
}

struct target {
    unsigned char buf[4][64 * 8];
    size_t used;
};

static ect_status_t
load_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct target *t = user;
    (void)key;
    (void)n_tokens;
    CHECK(t->used < 4 && nbytes <= sizeof(t->buf[0]));
    *dst_p = t->buf[t->used++];
    return ECT_OK;
}

/* A scheduler and an in-process worker with its own CPU copy engine: two
 * entries saved through the step protocol, then loaded back and compared.
 * Whatever fails, once the path has driven the protocol to its end no
 * entry may stay pinned or not ready (a lost report would). */
static ect_status_t
path_worker(struct ts_sweep_run *r)
{
    struct instance in;
    ect_scheduler_t *s = NULL;
    ect_worker_t *w = NULL;
    static struct target t;
    unsigned char rows[2][64 * 3];
    for (size_t i = 0; i < sizeof(rows); i++)
        ((unsigned char *)rows)[i] = (unsigned char)(i * 7 + 1);
    ect_status_t st = open_scheduler(r, &in, &s);
    if (st != ECT_OK)
        return st;
    ect_worker_params_t wp = {.config = &in.cfg,
                              .geometry = &in.geom,
                              .instance_id = r->id,
                              .memory = ECT_WORKER_HOST_MEMORY};
    TS_TRY(ect_worker_create(&wp, &w));
    TS_TRY(alloc_item(s, "r1", "img-a", 3));
    TS_TRY(alloc_item(s, "r1", "img-b", 3));
    TS_TRY(ts_sweep_bind_step(s, w));
    int queued = 0;
    ect_status_t sa = ect_worker_save(w, "img-a", rows[0], sizeof(rows[0]), NULL, &queued);
    ect_status_t sb = ect_worker_save(w, "img-b", rows[1], sizeof(rows[1]), NULL, &queued);
    ect_status_t gf = ect_worker_get_finished(w);
    ect_worker_clear_metadata(w);
    TS_TRY(ts_sweep_report_step(s, w));
    TS_TRY(sa);
    TS_TRY(sb);
    TS_TRY(gf);
    CHECK_MSG(!ect_scheduler_has_pending_push_work(s), "a save is still pending after its report");

    memset(&t, 0, sizeof(t));
    int loading = 0;
    if (ect_scheduler_has_cache_item(s, "img-a")) {
        TS_TRY(alloc_item(s, "r2", "img-a", 3));
        loading = 1;
    }
    TS_TRY(ts_sweep_bind_step(s, w));
    ect_status_t sl = ect_worker_start_load(w, load_target, &t, NULL);
    ect_worker_clear_metadata(w);
    TS_TRY(ts_sweep_report_step(s, w));
    TS_TRY(sl);
    CHECK_MSG(!ect_scheduler_has_pending_push_work(s), "a load is still pinned after its report");
    if (loading)
        CHECK(memcmp(t.buf[0], rows[0], sizeof(rows[0])) == 0);
    if (ect__alloc_failed() == 0) { /* nothing failed so far */
        CHECK(loading);
    }
out:
    ect_worker_destroy(w);
    ect_scheduler_destroy(s);
    return st;
}

static void
test_sweep_worker_step(void)
{
    ts_sweep("worker step", path_worker);
}

/* ---- the binding entry points ----------------------------------------------------- */

#define CFG_BOTH                                                                                   \
    "{\"ec_connector\": \"ECTierConnector\", \"ec_role\": \"ec_both\", "                           \
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 4096, \"region_reaper\": false, "           \
    "\"copy_threads\": 2}}"

static ect_status_t
path_binding(struct ts_sweep_run *r)
{
    char engine[512], req[512];
    snprintf(engine, sizeof(engine),
             "{\"model\": \"m\", \"engine_version\": \"0\", \"hidden_dim\": 16, "
             "\"dtype\": \"float32\", \"instance_id\": \"%s\"}",
             r->id);
    snprintf(
        req, sizeof(req),
        "{\"request_id\": \"r1\", \"features\": [{\"identifier\": \"img-a\", \"num_tokens\": 3, "
        "\"offset\": 3, \"metadata\": {\"image_grid_thw\": [1, 2, 2]}}]}");
    ect_scheduler_t *s = NULL;
    ect_worker_t *w = NULL;
    char *text = NULL;
    ect_status_t st =
        ect_engine_describe_json(CFG_BOTH, strlen(CFG_BOTH), engine, strlen(engine), &text);
    if (st != ECT_OK)
        return st;
    ect_free(text);
    text = NULL;
    TS_TRY(ect_scheduler_create_json(CFG_BOTH, strlen(CFG_BOTH), engine, strlen(engine), &s));
    TS_TRY(ect_worker_create_json(CFG_BOTH, strlen(CFG_BOTH), engine, strlen(engine), &w));
    int available = 0;
    TS_TRY(ect_scheduler_ensure_cache_available_json(s, req, strlen(req), &available));
    TS_TRY(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    TS_TRY(ts_sweep_bind_step(s, w));
    TS_TRY(ect_worker_metadata_json(w, &text));
    ect_free(text);
    text = NULL;
    float rows[48];
    for (int i = 0; i < 48; i++)
        rows[i] = (float)i;
    int queued = 0;
    ect_status_t sa = ect_worker_save(w, "img-a", rows, sizeof(rows), NULL, &queued);
    ect_status_t gf = ect_worker_get_finished(w);
    ect_worker_clear_metadata(w);
    TS_TRY(ts_sweep_report_step(s, w));
    TS_TRY(sa);
    TS_TRY(gf);
    CHECK_MSG(!ect_scheduler_has_pending_push_work(s), "a save is still pending after its report");
    float back[48] = {0};
    int loading = 0;
    if (ect_scheduler_has_cache_item(s, "img-a")) {
        TS_TRY(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
        loading = 1;
    }
    TS_TRY(ts_sweep_bind_step(s, w));
    const char *keys[] = {"img-a"};
    uint64_t addrs[] = {(uint64_t)(uintptr_t)back}, sizes[] = {sizeof(back)};
    ect_status_t sl = ECT_OK;
    if (loading)
        sl = ect_worker_start_load_arrays(w, 1, keys, addrs, sizes, 0);
    ect_worker_clear_metadata(w);
    TS_TRY(ts_sweep_report_step(s, w));
    TS_TRY(sl);
    CHECK_MSG(!ect_scheduler_has_pending_push_work(s), "a load is still pinned after its report");
    if (loading)
        CHECK(memcmp(rows, back, sizeof(rows)) == 0);
    TS_TRY(ect_scheduler_metrics_prometheus(s, &text));
    ect_free(text);
    text = NULL;
    TS_TRY(ect_scheduler_take_unavailable_json(s, &text));
    ect_free(text);
    text = NULL;
    TS_TRY(ect_scheduler_request_finished_json(s, req, strlen(req), &text));
    ect_free(text);
    text = NULL;
out:
    ect_worker_destroy(w);
    ect_scheduler_destroy(s);
    return st;
}

static void
test_sweep_binding(void)
{
    ts_sweep("binding", path_binding);
}

/* ---- metrics over HTTP ----------------------------------------------------------- */

/* A scheduler serving its metrics on a free loopback port, scraped and
 * parsed (as `ectier stats` does).  The server's own failures reach the
 * scraper as a 500 or a closed connection (ECT_ERR_PEER or ECT_ERR_IO),
 * which is fine when an allocation failed. */
static ect_status_t
path_metrics_http(struct ts_sweep_run *r)
{
    struct instance in;
    ect_scheduler_t *s = NULL;
    char *body = NULL;
    ect__prom_t prom = {0};
    CHECK_OK(ect_config_init(&in.cfg));
    in.cfg.role = ECT_ROLE_BOTH;
    in.cfg.cpu_bytes = 64 * 64;
    in.cfg.region_reaper = false;
    snprintf(in.cfg.metrics_address, sizeof(in.cfg.metrics_address), "127.0.0.1:0");
    CHECK_OK(ect_geometry_init(16, ECT_DTYPE_F32, in.cfg.cpu_bytes, &in.geom));
    ect_scheduler_params_t p = {.config = &in.cfg, .geometry = &in.geom, .instance_id = r->id};
    ect_status_t st = ect_scheduler_create(&p, &s);
    if (st != ECT_OK)
        return st;
    TS_TRY(alloc_item(s, "r1", "img-a", 2));
    char address[64];
    snprintf(address, sizeof(address), "127.0.0.1:%u", ect__scheduler_metrics_port(s));
    size_t len = 0;
    st = ect__http_get(address, "/metrics", 5000, 1 << 20, &body, &len);
    if ((st == ECT_ERR_PEER || st == ECT_ERR_IO) && ect__alloc_failed() > 0)
        st = ECT_ERR_NO_MEMORY;
    if (st != ECT_OK)
        goto out;
    TS_TRY(ect__prom_parse(body, len, &prom));
    double v = 0;
    CHECK(ect__prom_get(&prom, "ectier_misses_total", "", &v) || ect__alloc_failed() > 0);
out:
    ect__prom_cleanup(&prom);
    ect__free(body);
    ect_scheduler_destroy(s);
    return st;
}

static void
test_sweep_metrics_http(void)
{
    ts_sweep("metrics http", path_metrics_http);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_sweep_config_parse),     ECT_CASE(test_sweep_config_check_json),
    ECT_CASE(test_sweep_hf_config_load),   ECT_CASE(test_sweep_geometry_json),
    ECT_CASE(test_sweep_region_open),      ECT_CASE(test_sweep_region_open_with_reaper),
    ECT_CASE(test_sweep_region_list_json), ECT_CASE(test_sweep_cache),
    ECT_CASE(test_sweep_scheduler_step),   ECT_CASE(test_sweep_worker_step),
    ECT_CASE(test_sweep_binding),          ECT_CASE(test_sweep_metrics_http),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
