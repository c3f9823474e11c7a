/*
 * The binding entry points (include/ectier/binding.h): config check,
 * geometry, engine description, requests as JSON, step values as bytes and
 * JSON, loads with flat-array destinations, region listing and gc.  Every
 * instance is real (a region file in a private directory under /dev/shm);
 * every error path is checked to change nothing.
 */
#include <cjson/cJSON.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "support/region.h"

#define CFG_BOTH                                                                                   \
    "{\"ec_connector\": \"ECTierConnector\", \"ec_connector_module_path\": \"ectier.vllm\", "      \
    "\"ec_role\": \"ec_both\", \"ec_connector_extra_config\": {\"ec_cpu_bytes\": 4096, "           \
    "\"region_reaper\": false}}"

/* Parse text (freed with ect_free) as JSON; the tree is the caller's. */
static cJSON *
take_json(char *text)
{
    CHECK(text != NULL);
    cJSON *root = cJSON_Parse(text);
    CHECK_MSG(root != NULL, "not JSON: %s", text);
    ect_free(text);
    return root;
}

static double
num(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    CHECK_MSG(cJSON_IsNumber(v), "%s is not a number", key);
    return v->valuedouble;
}

static const char *
str(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    CHECK_MSG(cJSON_IsString(v), "%s is not a string", key);
    return v->valuestring;
}

static void
test_abi_version_is_the_header_one(void)
{
    CHECK_EQ_INT(ect_abi_version(), ECT_ABI_VERSION);
}

static void
test_config_check_json_resolves_every_setting(void)
{
    char *out = NULL;
    CHECK_OK(ect_config_check_json(CFG_BOTH, strlen(CFG_BOTH), &out));
    cJSON *root = take_json(out);
    CHECK_STR_EQ(str(root, "ec_role"), "ec_both");
    CHECK_EQ_U64(num(root, "ec_cpu_bytes"), 4096);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "ec_enable_nixl")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "region_reaper")));
    CHECK(num(root, "consumer_ack_timeout_s") == 2.0);
    CHECK_STR_EQ(str(root, "transport"), "auto");
    CHECK_STR_EQ(str(root, "region_name"), "");
    /* Only settings: the connector's name and module path are not fields. */
    CHECK(cJSON_GetObjectItemCaseSensitive(root, "ec_connector") == NULL);
    CHECK(cJSON_GetObjectItemCaseSensitive(root, "ec_connector_module_path") == NULL);
    cJSON_Delete(root);
}

static void
test_config_check_json_refuses_bad_configs_and_writes_nothing(void)
{
    static const struct {
        const char *json;
        ect_status_t st;
        const char *msg;
    } cases[] = {
        {"{", ECT_ERR_PARSE, "config is not valid JSON"},
        {"{\"ec_connector\": \"ECTier\", \"ec_role\": \"ec_both\", "
         "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1}}",
         ECT_ERR_CONFIG, "\"ECTierConnector\""},
        {"{\"ec_connector\": \"ECTierConnector\", \"ec_role\": \"ec_both\", "
         "\"ec_connector_extra_config\": {}}",
         ECT_ERR_CONFIG, "ec_cpu_bytes must be specified in ec_connector_extra_config"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = (char *)"untouched";
        CHECK_STATUS(ect_config_check_json(cases[i].json, strlen(cases[i].json), &out),
                     cases[i].st);
        CHECK_CONTAINS(ect_last_error(), cases[i].msg);
        CHECK_STR_EQ(out, "untouched");
    }
    CHECK_STATUS(ect_config_check_json(CFG_BOTH, strlen(CFG_BOTH), NULL), ECT_ERR_INVALID_ARG);
}

static cJSON *
geometry(const char *spec)
{
    char *out = NULL;
    CHECK_OK(ect_geometry_json(spec, strlen(spec), &out));
    return take_json(out);
}

static void
test_geometry_json_from_width_inline_config_and_file(void)
{
    cJSON *g = geometry("{\"hidden_dim\": 3584, \"dtype\": \"bf16\", \"cpu_bytes\": \"1MiB\"}");
    CHECK_EQ_U64(num(g, "block_size_bytes"), 7168);
    CHECK_EQ_U64(num(g, "num_blocks"), (1u << 20) / 7168);
    CHECK_STR_EQ(str(g, "dtype"), "torch.bfloat16");
    CHECK_EQ_U64(num(g, "element_size"), 2);
    CHECK_STR_EQ(str(g, "hidden_dim_source"), "hidden_dim");
    cJSON_Delete(g);

    /* Qwen3-VL's deepstack rule, from an inline config.json. */
    g = geometry("{\"cpu_bytes\": 1048576, \"hf_config\": {\"model_type\": \"qwen3_vl\", "
                 "\"text_config\": {\"hidden_size\": 2048, \"dtype\": \"bfloat16\"}, "
                 "\"vision_config\": {\"out_hidden_size\": 2048, "
                 "\"deepstack_visual_indexes\": [5, 11, 17]}}}");
    CHECK_EQ_U64(num(g, "hidden_dim"), 8192);
    CHECK_STR_EQ(str(g, "dtype"), "torch.bfloat16");
    CHECK_STR_EQ(str(g, "model_type"), "qwen3_vl");
    CHECK_CONTAINS(str(g, "hidden_dim_source"), "deepstack");
    cJSON_Delete(g);

    /* A real model's file; an explicit dtype wins over the declared one. */
    char spec[1024];
    snprintf(spec, sizeof(spec),
             "{\"cpu_bytes\": 1048576, \"dtype\": \"float32\", "
             "\"hf_config_path\": \"%s/hf-configs/Qwen2-VL-7B-Instruct.json\"}",
             ECT_TEST_DATA_DIR);
    g = geometry(spec);
    CHECK_EQ_U64(num(g, "hidden_dim"), 3584);
    CHECK_EQ_U64(num(g, "block_size_bytes"), 3584 * 4);
    CHECK_STR_EQ(str(g, "dtype_source"), "dtype");
    cJSON_Delete(g);
}

static void
test_geometry_json_errors_name_the_problem(void)
{
    static const struct {
        const char *spec;
        ect_status_t st;
        const char *msg;
    } cases[] = {
        {"[1]", ECT_ERR_CONFIG, "must be a JSON object"},
        {"{\"hidden_dim\": 8, \"dtype\": \"bf16\"}", ECT_ERR_CONFIG, "cpu_bytes is missing"},
        {"{\"hidden_dim\": 8, \"cpu_bytes\": 64}", ECT_ERR_CONFIG, "dtype is missing"},
        {"{\"hidden_dim\": 8, \"hf_config\": {}, \"dtype\": \"bf16\", \"cpu_bytes\": 64}",
         ECT_ERR_CONFIG, "exactly one of hidden_dim, hf_config and hf_config_path (2 given)"},
        {"{\"dtype\": \"bf16\", \"cpu_bytes\": 64}", ECT_ERR_CONFIG, "(0 given)"},
        {"{\"hidden_dim\": 0, \"dtype\": \"bf16\", \"cpu_bytes\": 64}", ECT_ERR_CONFIG,
         "hidden_dim = 0"},
        {"{\"hidden_dim\": 8.5, \"dtype\": \"bf16\", \"cpu_bytes\": 64}", ECT_ERR_CONFIG,
         "hidden_dim = 8.5"},
        {"{\"hidden_dim\": 8, \"dtype\": \"int7\", \"cpu_bytes\": 64}", ECT_ERR_INVALID_ARG,
         "int7"},
        {"{\"hidden_dim\": 8, \"dtype\": \"bf16\", \"cpu_bytes\": \"lots\"}", ECT_ERR_CONFIG,
         "cpu_bytes"},
        {"{\"hidden_dim\": 8, \"dtype\": \"bf16\", \"cpu_bytes\": 8}", ECT_ERR_CONFIG,
         "smaller than one block"},
        {"{\"hidden_dim\": 8, \"dtype\": \"bf16\", \"cpu_bytes\": 64, \"model\": \"m\"}",
         ECT_ERR_CONFIG, "unknown key \"model\""},
        {"{\"hidden_dim\": 8, \"hidden_dim\": 8, \"dtype\": \"bf16\", \"cpu_bytes\": 64}",
         ECT_ERR_CONFIG, "twice"},
        /* A model config without the fields the width rule needs. */
        {"{\"cpu_bytes\": 64, \"dtype\": \"bf16\", \"hf_config\": {\"model_type\": \"x\"}}",
         ECT_ERR_CONFIG, "hidden_size"},
        {"{\"cpu_bytes\": 64, \"dtype\": \"bf16\", \"hf_config_path\": \"/nonexistent/c.json\"}",
         ECT_ERR_NOT_FOUND, "/nonexistent/c.json"},
        {"{\"hidden_dim\": 8 \"dtype\": 1}", ECT_ERR_PARSE, "geometry spec is not valid JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = (char *)"untouched";
        ect_status_t st = ect_geometry_json(cases[i].spec, strlen(cases[i].spec), &out);
        CHECK_MSG(st == cases[i].st, "case %zu: status %d, expected %d (%s)", i, st, cases[i].st,
                  ect_last_error());
        CHECK_CONTAINS(ect_last_error(), cases[i].msg);
        CHECK_STR_EQ(out, "untouched");
    }
}

/* ---- instances ---------------------------------------------------------- */

struct fx {
    char dir[256];
    char engine[1024];
    const char *config;
};

/* An engine description over a private region directory; hidden 16 x f32
 * gives 64-byte blocks, so CFG_BOTH's 4096 bytes are 64 blocks. */
static void
fx_open(struct fx *f, const char *extra)
{
    ts_shm_make_dir(f->dir, sizeof(f->dir));
    snprintf(f->engine, sizeof(f->engine),
             "{\"model\": \"m\", \"engine_version\": \"0\", \"hidden_dim\": 16, "
             "\"dtype\": \"float32\", \"instance_id\": \"bind%d\", \"region_dir\": \"%s\"%s%s}",
             (int)getpid(), f->dir, extra ? ", " : "", extra ? extra : "");
    f->config = CFG_BOTH;
}

static ect_scheduler_t *
fx_scheduler(const struct fx *f)
{
    ect_scheduler_t *s = NULL;
    CHECK_OK(
        ect_scheduler_create_json(f->config, strlen(f->config), f->engine, strlen(f->engine), &s));
    return s;
}

static ect_worker_t *
fx_worker(const struct fx *f)
{
    ect_worker_t *w = NULL;
    CHECK_OK(
        ect_worker_create_json(f->config, strlen(f->config), f->engine, strlen(f->engine), &w));
    return w;
}

/* Destroy what a case made (either may be NULL) and check the directory
 * is left empty. */
static void
fx_close(struct fx *f, ect_scheduler_t *s, ect_worker_t *w)
{
    ect_worker_destroy(w);
    ect_scheduler_destroy(s);
    ts_shm_remove_dir(f->dir);
}

static void
request_json(char *buf, size_t cap, const char *rid, const char *key, unsigned tokens)
{
    snprintf(buf, cap,
             "{\"request_id\": \"%s\", \"features\": [{\"identifier\": \"%s\", \"num_tokens\": %u, "
             "\"offset\": 3, \"metadata\": {\"image_grid_thw\": [1, 2, 2]}}]}",
             rid, key, tokens);
}

/* The scheduler's step as bytes, bound on the worker. */
static void
step(ect_scheduler_t *s, ect_worker_t *w)
{
    void *meta = NULL;
    size_t len = 0;
    CHECK_OK(ect_scheduler_build_connector_meta_bytes(s, &meta, &len));
    CHECK(len > 0);
    CHECK_OK(ect_worker_bind_metadata(w, meta, len));
    ect_free(meta);
}

/* The worker's report applied on the scheduler. */
static void
report(ect_scheduler_t *s, ect_worker_t *w)
{
    void *bytes = NULL;
    size_t len = 0;
    ect_status_t copy = ECT_ERR_INTERNAL;
    CHECK_OK(ect_worker_wait(w));
    CHECK_OK(ect_worker_take_report_bytes(w, &bytes, &len, &copy));
    CHECK_OK(copy);
    CHECK_OK(ect_scheduler_update_connector_output(s, bytes, len));
    ect_free(bytes);
}

static void
test_engine_description_drives_a_save_and_a_load(void)
{
    struct fx f;
    fx_open(&f, NULL);
    char *desc = NULL;
    CHECK_OK(
        ect_engine_describe_json(f.config, strlen(f.config), f.engine, strlen(f.engine), &desc));
    cJSON *d = take_json(desc);
    CHECK_EQ_U64(num(d, "num_blocks"), 64);
    CHECK_EQ_U64(num(d, "block_size_bytes"), 64);
    CHECK_STR_EQ(str(d, "role"), "ec_both");
    cJSON_Delete(d);

    ect_scheduler_t *s = fx_scheduler(&f);
    ect_worker_t *w = fx_worker(&f);
    CHECK(ect_worker_is_save_rank(w));
    char req[512];
    request_json(req, sizeof(req), "r1", "img-a", 3);
    int available = 0;
    CHECK_OK(ect_scheduler_ensure_cache_available_json(s, req, strlen(req), &available));
    CHECK_EQ_INT(available, 1);
    CHECK(!ect_scheduler_has_cache_item(s, "img-a"));
    CHECK_OK(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    CHECK(ect_scheduler_has_pending_push_work(s));

    /* Save: the worker sees the step's save as JSON and copies the rows. */
    step(s, w);
    char *mj = NULL;
    CHECK_OK(ect_worker_metadata_json(w, &mj));
    cJSON *m = take_json(mj);
    const cJSON *saves = cJSON_GetObjectItemCaseSensitive(m, "saves");
    CHECK_EQ_INT(cJSON_GetArraySize(saves), 1);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(saves, 0), "key"), "img-a");
    CHECK_EQ_U64(num(cJSON_GetArrayItem(saves, 0), "n_blocks"), 3);
    cJSON_Delete(m);
    float rows[48];
    for (int i = 0; i < 48; i++)
        rows[i] = (float)i * 0.5f;
    int queued = 0;
    CHECK_OK(ect_worker_save(w, "img-a", rows, sizeof(rows), NULL, &queued));
    CHECK_EQ_INT(queued, 1);
    CHECK_OK(ect_worker_get_finished(w));
    report(s, w);
    ect_worker_clear_metadata(w);
    CHECK(!ect_scheduler_has_pending_push_work(s));

    /* Load: destinations as flat arrays, checked before anything moves. */
    CHECK(ect_scheduler_has_cache_item(s, "img-a"));
    CHECK_OK(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    step(s, w);
    float back[48] = {0};
    const char *keys[] = {"img-a"};
    uint64_t addrs[] = {(uint64_t)(uintptr_t)back};
    uint64_t wrong[] = {sizeof(back) - 4}, right[] = {sizeof(back)};
    CHECK_STATUS(ect_worker_start_load_arrays(w, 1, keys, addrs, wrong, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "img-a");
    /* The failed start reported the load: clear, and ask again next step. */
    report(s, w);
    ect_worker_clear_metadata(w);
    CHECK(!ect_scheduler_has_pending_push_work(s));
    CHECK(ect_scheduler_has_cache_item(s, "img-a"));
    CHECK_OK(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    step(s, w);
    CHECK_OK(ect_worker_start_load_arrays(w, 1, keys, addrs, right, 0));
    report(s, w);
    ect_worker_clear_metadata(w);
    CHECK(memcmp(rows, back, sizeof(rows)) == 0);
    CHECK(!ect_scheduler_has_pending_push_work(s));

    char *text = NULL;
    CHECK_OK(ect_scheduler_metrics_prometheus(s, &text));
    CHECK_CONTAINS(text, "ectier_saves_completed_total 1\n");
    CHECK_CONTAINS(text, "ectier_loads_completed_total 2\n");
    ect_free(text);
    char *ids = NULL;
    CHECK_OK(ect_scheduler_take_unavailable_json(s, &ids));
    CHECK_STR_EQ(ids, "[]");
    ect_free(ids);
    char *params = (char *)"untouched";
    CHECK_OK(ect_scheduler_request_finished_json(s, req, strlen(req), &params));
    CHECK(params == NULL); /* no P2P: nothing to announce */
    fx_close(&f, s, w);
}

static void
test_start_load_arrays_refuses_keys_that_are_not_the_steps_loads(void)
{
    struct fx f;
    fx_open(&f, NULL);
    ect_scheduler_t *s = fx_scheduler(&f);
    ect_worker_t *w = fx_worker(&f);
    float buf[16];
    const char *keys[] = {"nope", "nope"};
    uint64_t addrs[] = {(uint64_t)(uintptr_t)buf, (uint64_t)(uintptr_t)buf}, sizes[] = {64, 64};
    CHECK_STATUS(ect_worker_start_load_arrays(w, 0, NULL, NULL, NULL, 0), ECT_ERR_STATE);
    step(s, w); /* an empty step: no loads */
    CHECK_STATUS(ect_worker_start_load_arrays(w, 1, keys, addrs, sizes, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "1 destinations for the step's 0 loads");
    CHECK_OK(ect_worker_start_load_arrays(w, 0, NULL, NULL, NULL, 0));
    ect_worker_clear_metadata(w);

    /* A step with one load: a foreign key, a twice-given key, a NULL address. */
    char req[512];
    request_json(req, sizeof(req), "r1", "k", 1);
    CHECK_OK(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    step(s, w);
    CHECK_OK(ect_worker_save(w, "k", buf, 64, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(w));
    report(s, w);
    ect_worker_clear_metadata(w);
    CHECK(ect_scheduler_has_cache_item(s, "k"));
    CHECK_OK(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    step(s, w);
    CHECK_STATUS(ect_worker_start_load_arrays(w, 1, keys, addrs, sizes, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "'nope' is not a load of this step");
    const char *k1[] = {"k"};
    uint64_t null_addr[] = {0};
    CHECK_STATUS(ect_worker_start_load_arrays(w, 1, k1, null_addr, sizes, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "NULL destination");
    /* Nothing was started: clear_metadata reports the load, and its pin goes. */
    ect_worker_clear_metadata(w);
    report(s, w);
    CHECK(!ect_scheduler_has_pending_push_work(s));
    fx_close(&f, s, w);
}

static void
test_malformed_requests_change_nothing(void)
{
    struct fx f;
    fx_open(&f, NULL);
    ect_scheduler_t *s = fx_scheduler(&f);
    static const struct {
        const char *json;
        ect_status_t st;
        const char *msg;
    } cases[] = {
        {"", ECT_ERR_PARSE, "request is empty"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\", \"num_tokens\": 1}]} x",
         ECT_ERR_PARSE, "text after the JSON value"},
        {"[]", ECT_ERR_CONFIG, "request must be a JSON object"},
        {"{\"features\": []}", ECT_ERR_CONFIG, "request_id is missing"},
        {"{\"request_id\": \"r\", \"prompt\": 1}", ECT_ERR_CONFIG, "unknown key \"prompt\""},
        {"{\"request_id\": \"r\", \"features\": {}}", ECT_ERR_CONFIG, "features = an object"},
        {"{\"request_id\": \"r\", \"features\": [{\"num_tokens\": 1}]}", ECT_ERR_CONFIG,
         "features[0].identifier is missing"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\"}]}", ECT_ERR_CONFIG,
         "features[0].num_tokens is missing"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\", \"num_tokens\": -1}]}",
         ECT_ERR_CONFIG, "num_tokens = -1"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\", \"num_tokens\": 4, "
         "\"length\": 2}]}",
         ECT_ERR_CONFIG, "length 2 is less than num_tokens 4"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"\", \"num_tokens\": 1}]}",
         ECT_ERR_CONFIG, "identifier = \"\""},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\", \"num_tokens\": 1, "
         "\"has_local_input\": 1}]}",
         ECT_ERR_CONFIG, "has_local_input = 1"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\", \"num_tokens\": 1, "
         "\"metadata\": [1]}]}",
         ECT_ERR_CONFIG, "metadata = an array"},
        {"{\"request_id\": \"r\", \"features\": [{\"identifier\": \"a\", \"num_tokens\": 1, "
         "\"size\": 1}]}",
         ECT_ERR_CONFIG, "unknown key \"size\" features[0]."},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *j = cases[i].json;
        int avail = 7;
        ect_status_t st = ect_scheduler_ensure_cache_available_json(s, j, strlen(j), &avail);
        CHECK_MSG(st == cases[i].st, "case %zu: status %d (%s)", i, st, ect_last_error());
        CHECK_CONTAINS(ect_last_error(), cases[i].msg);
        CHECK_EQ_INT(avail, 7);
        CHECK_STATUS(ect_scheduler_update_state_after_alloc_json(s, j, strlen(j), 0), cases[i].st);
        char *params = (char *)"untouched";
        CHECK_STATUS(ect_scheduler_request_finished_json(s, j, strlen(j), &params), cases[i].st);
        CHECK_STR_EQ(params, "untouched");
    }
    /* A feature index past the request's features. */
    char req[512];
    request_json(req, sizeof(req), "r1", "a", 1);
    CHECK_STATUS(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 1),
                 ECT_ERR_INVALID_ARG);
    /* Nothing was queued by any of them. */
    CHECK(!ect_scheduler_has_pending_push_work(s));
    void *meta = NULL;
    size_t len = 0;
    CHECK_OK(ect_scheduler_build_connector_meta_bytes(s, &meta, &len));
    char *mj = NULL;
    CHECK_OK(ect_step_meta_json(meta, len, 64, &mj));
    CHECK_STR_EQ(mj, "{\"saves\":[],\"loads\":[]}");
    ect_free(mj);
    ect_free(meta);
    fx_close(&f, s, NULL);
}

static void
test_engine_description_errors_leave_nothing_behind(void)
{
    struct fx f;
    fx_open(&f, NULL);
    static const struct {
        const char *engine;
        ect_status_t st;
        const char *msg;
    } cases[] = {
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\", \"instance_id\": \"x\", \"tp_size\": 2}",
         ECT_ERR_CONFIG, "unknown key \"tp_size\""},
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\", \"instance_id\": \"x\", \"memory\": \"gpu\"}",
         ECT_ERR_CONFIG, "memory = \"gpu\""},
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\", \"instance_id\": \"x\", "
         "\"reports_per_load\": 0}",
         ECT_ERR_CONFIG, "reports_per_load = 0"},
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\", \"instance_id\": 5}", ECT_ERR_CONFIG,
         "instance_id = 5"},
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\"}", ECT_ERR_CONFIG,
         "neither region_name nor an instance id"},
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\", \"instance_id\": \"x\", "
         "\"region_dir\": \"/nonexistent-ectier\"}",
         ECT_ERR_NOT_FOUND, "/nonexistent-ectier"},
        {"{\"hidden_dim\": 16, \"dtype\": \"f32\", \"instance_id\": \"../x\"}", ECT_ERR_INVALID_ARG,
         "../x"},
        {"nope", ECT_ERR_PARSE, "engine description is not valid JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* Every case names the private directory unless it names its own. */
        char engine[512];
        const char *e = cases[i].engine;
        if (strstr(e, "region_dir") == NULL && e[0] == '{')
            snprintf(engine, sizeof(engine), "{\"region_dir\": \"%s\", %s", f.dir, e + 1);
        else
            snprintf(engine, sizeof(engine), "%s", e);
        ect_scheduler_t *s = (ect_scheduler_t *)&f;
        ect_status_t st =
            ect_scheduler_create_json(f.config, strlen(f.config), engine, strlen(engine), &s);
        CHECK_MSG(st == cases[i].st, "case %zu: status %d (%s)", i, st, ect_last_error());
        CHECK_CONTAINS(ect_last_error(), cases[i].msg);
        CHECK(s == (ect_scheduler_t *)&f);
        ect_worker_t *w = (ect_worker_t *)&f;
        CHECK_STATUS(ect_worker_create_json(f.config, strlen(f.config), engine, strlen(engine), &w),
                     cases[i].st);
        CHECK(w == (ect_worker_t *)&f);
    }
    /* A bad ec_transfer_config is the config parser's error. */
    ect_scheduler_t *s = NULL;
    CHECK_STATUS(ect_scheduler_create_json("{}", 2, f.engine, strlen(f.engine), &s),
                 ECT_ERR_CONFIG);
    CHECK(s == NULL);
    CHECK_EQ_INT(ts_count_prefix(f.dir, ""), 0);
    ts_shm_remove_dir(f.dir);
}

static void
test_a_worker_of_another_geometry_is_refused(void)
{
    struct fx f;
    fx_open(&f, NULL);
    ect_scheduler_t *s = fx_scheduler(&f);
    struct fx other = f;
    snprintf(other.engine, sizeof(other.engine),
             "{\"hidden_dim\": 8, \"dtype\": \"float32\", \"instance_id\": \"bind%d\", "
             "\"region_dir\": \"%s\"}",
             (int)getpid(), f.dir);
    ect_worker_t *w = NULL;
    CHECK_STATUS(ect_worker_create_json(other.config, strlen(other.config), other.engine,
                                        strlen(other.engine), &w),
                 ECT_ERR_INCOMPATIBLE);
    CHECK(w == NULL);
    fx_close(&f, s, NULL);
}

static void
test_step_values_decode_to_json_and_bad_bytes_are_refused(void)
{
    struct fx f;
    fx_open(&f, NULL);
    ect_scheduler_t *s = fx_scheduler(&f);
    ect_worker_t *w = fx_worker(&f);
    char req[512];
    request_json(req, sizeof(req), "r1", "img", 2);
    CHECK_OK(ect_scheduler_update_state_after_alloc_json(s, req, strlen(req), 0));
    void *meta = NULL;
    size_t len = 0;
    CHECK_OK(ect_scheduler_build_connector_meta_bytes(s, &meta, &len));
    char *mj = NULL;
    CHECK_OK(ect_step_meta_json(meta, len, 64, &mj));
    CHECK_STR_EQ(mj,
                 "{\"saves\":[{\"key\":\"img\",\"n_blocks\":2,\"runs\":[[0,2]]}],\"loads\":[]}");
    ect_free(mj);
    /* Blocks outside a smaller region, and cut bytes. */
    CHECK_STATUS(ect_step_meta_json(meta, len, 1, &mj), ECT_ERR_OVERFLOW);
    CHECK_STATUS(ect_step_meta_json(meta, len - 1, 64, &mj), ECT_ERR_PARSE);
    CHECK_STATUS(ect_worker_bind_metadata(w, meta, len - 1), ECT_ERR_PARSE);
    CHECK(ect_worker_metadata(w) == NULL);
    CHECK_STATUS(ect_worker_metadata_json(w, &mj), ECT_ERR_STATE);
    CHECK_OK(ect_worker_bind_metadata(w, meta, len));
    ect_free(meta);
    uint8_t rows[128] = {1};
    CHECK_OK(ect_worker_save(w, "img", rows, sizeof(rows), NULL, NULL));
    CHECK_OK(ect_worker_get_finished(w));
    CHECK_OK(ect_worker_wait(w));
    void *rep = NULL;
    size_t rlen = 0;
    CHECK_OK(ect_worker_take_report_bytes(w, &rep, &rlen, NULL));
    CHECK(rep != NULL);
    /* Two ranks' reports, concatenated. */
    uint8_t two[1024];
    CHECK(2 * rlen <= sizeof(two));
    memcpy(two, rep, rlen);
    memcpy(two + rlen, rep, rlen);
    char *rj = NULL;
    CHECK_OK(ect_step_report_json(two, 2 * rlen, &rj));
    cJSON *r = take_json(rj);
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "saves")), 2);
    CHECK_EQ_U64(num(cJSON_GetObjectItemCaseSensitive(r, "stats"), "save_bytes"), 256);
    cJSON_Delete(r);
    CHECK_STATUS(ect_step_report_json(rep, rlen - 3, &rj), ECT_ERR_PARSE);
    /* Undecodable bytes on the scheduler: an error and nothing applied. */
    CHECK_STATUS(ect_scheduler_update_connector_output(s, rep, rlen - 3), ECT_ERR_PARSE);
    CHECK(ect_scheduler_has_pending_push_work(s));
    CHECK_OK(ect_scheduler_update_connector_output(s, rep, rlen));
    CHECK(!ect_scheduler_has_pending_push_work(s));
    ect_free(rep);
    /* Nothing more finished. */
    ect_worker_clear_metadata(w);
    rep = (void *)&f;
    CHECK_OK(ect_worker_take_report_bytes(w, &rep, &rlen, NULL));
    CHECK(rep == NULL && rlen == 0);
    fx_close(&f, s, w);
}

static void
test_region_list_and_gc_json(void)
{
    struct fx f;
    fx_open(&f, NULL);
    ect_scheduler_t *s = fx_scheduler(&f);
    char *text = NULL;
    CHECK_OK(ect_region_list_json(f.dir, &text));
    cJSON *list = take_json(text);
    CHECK_EQ_INT(cJSON_GetArraySize(list), 1);
    const cJSON *r = cJSON_GetArrayItem(list, 0);
    CHECK_STR_EQ(str(r, "kind"), "region");
    CHECK_EQ_U64(num(r, "num_blocks"), 64);
    CHECK_STR_EQ(str(r, "dtype"), "float32");
    CHECK_EQ_U64(num(r, "holders"), 1);
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "orphaned")));
    cJSON_Delete(list);
    /* A live region is no orphan. */
    CHECK_OK(ect_region_gc_json(f.dir, 0, &text));
    CHECK_STR_EQ(text, "[]");
    ect_free(text);
    /* An orphan (a copy nobody holds) is listed by a dry run, then removed. */
    char src[512], dst[512], cmd[1200];
    snprintf(src, sizeof(src), "%s/ectier_bind%d_dp0.mmap", f.dir, (int)getpid());
    snprintf(dst, sizeof(dst), "%s/ectier_orphan_dp0.mmap", f.dir);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, dst);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_OK(ect_region_gc_json(f.dir, 1, &text));
    list = take_json(text);
    CHECK_EQ_INT(cJSON_GetArraySize(list), 1);
    CHECK_STR_EQ(str(cJSON_GetArrayItem(list, 0), "name"), "ectier_orphan_dp0");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, 0), "removed")));
    cJSON_Delete(list);
    CHECK(ts_exists(dst));
    CHECK_OK(ect_region_gc_json(f.dir, 0, &text));
    ect_free(text);
    CHECK(!ts_exists(dst));
    CHECK_STATUS(ect_region_list_json("/nonexistent-ectier", &text), ECT_ERR_NOT_FOUND);
    fx_close(&f, s, NULL);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_abi_version_is_the_header_one),
    ECT_CASE(test_config_check_json_resolves_every_setting),
    ECT_CASE(test_config_check_json_refuses_bad_configs_and_writes_nothing),
    ECT_CASE(test_geometry_json_from_width_inline_config_and_file),
    ECT_CASE(test_geometry_json_errors_name_the_problem),
    ECT_CASE(test_engine_description_drives_a_save_and_a_load),
    ECT_CASE(test_start_load_arrays_refuses_keys_that_are_not_the_steps_loads),
    ECT_CASE(test_malformed_requests_change_nothing),
    ECT_CASE(test_engine_description_errors_leave_nothing_behind),
    ECT_CASE(test_a_worker_of_another_geometry_is_refused),
    ECT_CASE(test_step_values_decode_to_json_and_bad_bytes_are_refused),
    ECT_CASE(test_region_list_and_gc_json),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
