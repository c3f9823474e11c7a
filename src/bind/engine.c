/*
 * The engine description of the binding entry points (include/ectier/
 * binding.h): its keys, their checks, the geometry they imply, and the
 * scheduler and worker constructors that take it.
 *
 * One key table serves both documents that name a geometry: the engine
 * description and ect_geometry_json's spec (which adds cpu_bytes and has no
 * engine keys).  Every value is checked against its row before anything is
 * opened; the width rule of a model config is ect_hf_config_parse's, never
 * repeated here.  Nothing here has state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/binding.h>
#include <ectier/region.h>

#include "bind/bind.h"
#include "common/error.h"
#include "common/json.h"
#include "common/settings.h"

unsigned
ect_abi_version(void)
{
    return ECT_ABI_VERSION;
}

enum key_kind { K_STRING, K_UINT, K_OBJECT, K_SIZE, K_MEMORY };

/* Which document a key belongs to. */
#define IN_ENGINE 1u
#define IN_SPEC   2u

static const struct key {
    const char *name;
    enum key_kind kind;
    unsigned in;
    uint64_t min, max; /* K_UINT: value range; K_STRING: longest length in bytes */
} keys[] = {
    {"model", K_STRING, IN_ENGINE, 0, 1024},
    {"engine_version", K_STRING, IN_ENGINE, 0, 256},
    {"hidden_dim", K_UINT, IN_ENGINE | IN_SPEC, 1, ECT_GEOMETRY_MAX_HIDDEN_DIM},
    {"hf_config", K_OBJECT, IN_ENGINE | IN_SPEC, 0, 0},
    {"hf_config_path", K_STRING, IN_ENGINE | IN_SPEC, 1, 4095},
    {"dtype", K_STRING, IN_ENGINE | IN_SPEC, 1, 64},
    {"instance_id", K_STRING, IN_ENGINE, 0, ECT_REGION_INSTANCE_MAX},
    {"dp_rank", K_UINT, IN_ENGINE, 0, 65535},
    {"tp_rank", K_UINT, IN_ENGINE, 0, 65535},
    {"pcp_rank", K_UINT, IN_ENGINE, 0, 65535},
    {"reports_per_load", K_UINT, IN_ENGINE, 1, 65536},
    {"memory", K_MEMORY, IN_ENGINE, 0, 0},
    {"cuda_device", K_UINT, IN_ENGINE, 0, 1023},
    {"region_dir", K_STRING, IN_ENGINE, 1, 4095},
    {"cpu_bytes", K_SIZE, IN_SPEC, 0, 0},
};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

static const struct key *
find_key(const char *name, unsigned in)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if ((keys[i].in & in) && strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

static ect_status_t
unknown_key(const char *what, const char *name, unsigned in)
{
    char q[128], list[512];
    struct ect__text t = {list, sizeof(list), 0};
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].in & in)
            ect__text_printf(&t, "%s%s", t.len ? ", " : "", keys[i].name);
    return ect__error(ECT_ERR_CONFIG, "%s: unknown key %s; the keys are %s", what,
                      ect__quote(q, sizeof(q), name, strlen(name)), list);
}

/* Check one member against its row. */
static ect_status_t
check_member(const char *what, const struct key *k, const cJSON *v)
{
    char shown[128];
    uint64_t n;
    switch (k->kind) {
    case K_STRING:
        if (cJSON_IsString(v) && strlen(v->valuestring) >= k->min &&
            strlen(v->valuestring) <= k->max)
            return ECT_OK;
        return ect__error(ECT_ERR_CONFIG,
                          "%s: %s = %s is not allowed: use a string of %llu to %llu bytes", what,
                          k->name, ect__describe_json(shown, sizeof(shown), v),
                          (unsigned long long)k->min, (unsigned long long)k->max);
    case K_UINT:
        if (ect__json_uint(v, k->min, k->max, &n) == 0)
            return ECT_OK;
        return ect__error(ECT_ERR_CONFIG,
                          "%s: %s = %s is not allowed: use an integer from %llu to %llu", what,
                          k->name, ect__describe_json(shown, sizeof(shown), v),
                          (unsigned long long)k->min, (unsigned long long)k->max);
    case K_OBJECT:
        if (cJSON_IsObject(v))
            return ECT_OK;
        return ect__error(
            ECT_ERR_CONFIG,
            "%s: %s = %s is not allowed: use the model's config.json as a JSON object", what,
            k->name, ect__describe_json(shown, sizeof(shown), v));
    case K_MEMORY:
        if (cJSON_IsString(v) &&
            (strcmp(v->valuestring, "host") == 0 || strcmp(v->valuestring, "cuda") == 0))
            return ECT_OK;
        return ect__error(ECT_ERR_CONFIG,
                          "%s: memory = %s is not allowed: use \"host\" or \"cuda\"", what,
                          ect__describe_json(shown, sizeof(shown), v));
    case K_SIZE:
        return ECT_OK; /* checked by the settings table's converter */
    }
    return ECT_OK;
}

/* Refuse duplicate and unknown keys and values of the wrong type. */
static ect_status_t
check_document(const char *what, const cJSON *root, unsigned in)
{
    char shown[128];
    if (!cJSON_IsObject(root))
        return ect__error(ECT_ERR_CONFIG, "%s must be a JSON object, got %s", what,
                          ect__describe_json(shown, sizeof(shown), root));
    ect_status_t s = ect__json_check_keys(what, root, "at the top level");
    if (s != ECT_OK)
        return s;
    for (const cJSON *it = root->child; it != NULL; it = it->next) {
        const struct key *k = find_key(it->string, in);
        if (k == NULL)
            return unknown_key(what, it->string, in);
        if ((s = check_member(what, k, it)) != ECT_OK)
            return s;
    }
    return ECT_OK;
}

static const char *
member_string(const cJSON *root, const char *name, const char *dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    return v != NULL ? v->valuestring : dflt;
}

static unsigned
member_uint(const cJSON *root, const char *name, unsigned dflt)
{
    uint64_t n;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    return v != NULL && ect__json_uint(v, 0, UINT32_MAX, &n) == 0 ? (unsigned)n : dflt;
}

/* The width and dtype a checked document names, and the geometry of a tier
 * of cpu_bytes. */
static ect_status_t
resolve_geometry(const char *what, const cJSON *root, uint64_t cpu_bytes, ect__engine_t *e)
{
    const cJSON *hidden = cJSON_GetObjectItemCaseSensitive(root, "hidden_dim");
    const cJSON *inline_hf = cJSON_GetObjectItemCaseSensitive(root, "hf_config");
    const char *path = member_string(root, "hf_config_path", NULL);
    const char *dtype_name = member_string(root, "dtype", NULL);
    int given = (hidden != NULL) + (inline_hf != NULL) + (path != NULL);
    if (given != 1)
        return ect__error(ECT_ERR_CONFIG,
                          "%s: give exactly one of hidden_dim, hf_config and hf_config_path "
                          "(%d given)",
                          what, given);
    ect_hf_model_t model;
    memset(&model, 0, sizeof(model));
    ect_status_t s = ECT_OK;
    if (hidden != NULL) {
        model.hidden_dim = (uint64_t)hidden->valuedouble;
        snprintf(model.hidden_dim_source, sizeof(model.hidden_dim_source), "hidden_dim");
    } else if (inline_hf != NULL) {
        char *text = cJSON_PrintUnformatted(inline_hf);
        if (text == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory reading hf_config", what);
        s = ect_hf_config_parse(text, strlen(text), &model);
        cJSON_free(text);
    } else {
        s = ect_hf_config_load(path, &model);
    }
    if (s != ECT_OK)
        return s;
    ect_dtype_t dtype = model.dtype;
    if (dtype_name != NULL) {
        if ((s = ect_dtype_parse(dtype_name, &dtype)) != ECT_OK)
            return s;
        snprintf(e->dtype_source, sizeof(e->dtype_source), "dtype");
    } else if (model.has_dtype) {
        snprintf(e->dtype_source, sizeof(e->dtype_source), "%s", model.dtype_source);
    } else {
        return ect__error(ECT_ERR_CONFIG,
                          "%s: dtype is missing%s: give the model's dtype (e.g. \"bfloat16\")",
                          what, hidden != NULL ? "" : " and the model config declares none");
    }
    if ((s = ect_geometry_init(model.hidden_dim, dtype, cpu_bytes, &e->geom)) != ECT_OK)
        return s;
    snprintf(e->hidden_dim_source, sizeof(e->hidden_dim_source), "%s", model.hidden_dim_source);
    snprintf(e->model_type, sizeof(e->model_type), "%s", model.model_type);
    return ECT_OK;
}

ect_status_t
ect__engine_resolve(const char *config_json, size_t config_len, const char *engine_json,
                    size_t engine_len, ect__engine_t *engine)
{
    static const char what[] = "engine description";
    if (engine == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL argument", what);
    ect__engine_t e;
    memset(&e, 0, sizeof(e));
    ect_status_t s = ect_config_parse(config_json, config_len, &e.cfg);
    if (s != ECT_OK)
        return s;
    if ((s = ect__json_parse(what, engine_json, engine_len, ECT_BIND_JSON_MAX, &e.root)) != ECT_OK)
        return s;
    if ((s = check_document(what, e.root, IN_ENGINE)) != ECT_OK ||
        (s = resolve_geometry(what, e.root, e.cfg.cpu_bytes, &e)) != ECT_OK) {
        cJSON_Delete(e.root);
        return s;
    }
    e.model = member_string(e.root, "model", "");
    e.engine_version = member_string(e.root, "engine_version", "");
    e.instance_id = member_string(e.root, "instance_id", "");
    e.region_dir = member_string(e.root, "region_dir", NULL);
    e.dp_rank = member_uint(e.root, "dp_rank", 0);
    e.tp_rank = member_uint(e.root, "tp_rank", 0);
    e.pcp_rank = member_uint(e.root, "pcp_rank", 0);
    e.reports_per_load = member_uint(e.root, "reports_per_load", 1);
    e.cuda_device = (int)member_uint(e.root, "cuda_device", 0);
    e.memory = strcmp(member_string(e.root, "memory", "host"), "cuda") == 0
                   ? ECT_WORKER_CUDA_MEMORY
                   : ECT_WORKER_HOST_MEMORY;
    *engine = e;
    return ECT_OK;
}

void
ect__engine_cleanup(ect__engine_t *engine)
{
    if (engine != NULL) {
        cJSON_Delete(engine->root);
        engine->root = NULL;
    }
}

ect_status_t
ect__bind_hand_over(cJSON *root, unsigned long mark, const char *what, char **out_p)
{
    char *text = root != NULL ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (text != NULL && ect__alloc_thread_failures() != mark) {
        cJSON_free(text);
        text = NULL;
    }
    if (text == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory writing JSON", what);
    /* cJSON allocates with ect__malloc (alloc.c sets its hooks): ect_free frees it. */
    *out_p = text;
    return ECT_OK;
}

void
ect__engine_geometry_members(const ect__engine_t *e, cJSON *obj)
{
    const ect_geometry_t *g = &e->geom;
    ect__json_put_uint(obj, "hidden_dim", g->hidden_dim);
    cJSON_AddStringToObject(obj, "dtype", ect_dtype_torch_name(g->dtype));
    cJSON_AddNumberToObject(obj, "element_size", (double)ect_dtype_size(g->dtype));
    ect__json_put_uint(obj, "block_size_bytes", g->block_size_bytes);
    ect__json_put_uint(obj, "num_blocks", g->num_blocks);
    ect__json_put_uint(obj, "cpu_bytes", e->cfg.cpu_bytes);
    cJSON_AddStringToObject(obj, "hidden_dim_source", e->hidden_dim_source);
    cJSON_AddStringToObject(obj, "dtype_source", e->dtype_source);
    cJSON_AddStringToObject(obj, "model_type", e->model_type);
}

ect_status_t
ect_geometry_json(const char *spec, size_t len, char **geometry_p)
{
    static const char what[] = "geometry spec";
    if (geometry_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL argument", what);
    ect__engine_t e;
    memset(&e, 0, sizeof(e));
    cJSON *root, *result = NULL;
    ect_status_t s = ect__json_parse(what, spec, len, ECT_BIND_JSON_MAX, &root);
    if (s != ECT_OK)
        return s;
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(root, "cpu_bytes");
    if ((s = check_document(what, root, IN_SPEC)) != ECT_OK)
        goto out_root;
    if (cpu == NULL) {
        s = ect__error(ECT_ERR_CONFIG,
                       "%s: cpu_bytes is missing: give the tier's size (e.g. \"8GiB\")", what);
        goto out_root;
    }
    /* The size converter of ec_cpu_bytes, so sizes read the same everywhere. */
    if ((s = ect_config_init(&e.cfg)) != ECT_OK ||
        (s = ect__setting_from_json(ect__setting_find(ECT_SETTING_EXTRA, "ec_cpu_bytes"),
                                    "cpu_bytes", cpu, &e.cfg)) != ECT_OK ||
        (s = resolve_geometry(what, root, e.cfg.cpu_bytes, &e)) != ECT_OK)
        goto out_root;
    unsigned long mark = ect__alloc_thread_failures();
    if ((result = cJSON_CreateObject()) != NULL)
        ect__engine_geometry_members(&e, result);
    s = ect__bind_hand_over(result, mark, what, geometry_p);
out_root:
    cJSON_Delete(root);
    return s;
}

ect_status_t
ect_engine_describe_json(const char *config_json, size_t config_len, const char *engine_json,
                         size_t engine_len, char **json_p)
{
    if (json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "engine describe: NULL argument");
    ect__engine_t e;
    ect_status_t s = ect__engine_resolve(config_json, config_len, engine_json, engine_len, &e);
    if (s != ECT_OK)
        return s;
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *out = cJSON_CreateObject();
    if (out != NULL) {
        ect__engine_geometry_members(&e, out);
        cJSON_AddStringToObject(out, "role", ect_role_str(e.cfg.role));
        cJSON_AddBoolToObject(out, "p2p_enabled", e.cfg.p2p_enabled);
    }
    ect__engine_cleanup(&e);
    return ect__bind_hand_over(out, mark, "engine describe", json_p);
}

/* Resolve both documents and create the side named by scheduler_p or
 * worker_p (the other is NULL). */
static ect_status_t
create_side(const char *config_json, size_t config_len, const char *engine_json, size_t engine_len,
            ect_scheduler_t **scheduler_p, ect_worker_t **worker_p)
{
    ect__engine_t e;
    ect_status_t s = ect__engine_resolve(config_json, config_len, engine_json, engine_len, &e);
    if (s != ECT_OK)
        return s;
    if (scheduler_p != NULL) {
        ect_scheduler_params_t p = {.config = &e.cfg,
                                    .geometry = &e.geom,
                                    .instance_id = e.instance_id,
                                    .dp_rank = e.dp_rank,
                                    .load_reports = e.reports_per_load,
                                    .region_dir = e.region_dir,
                                    .engine_version = e.engine_version,
                                    .model_name = e.model};
        s = ect_scheduler_create(&p, scheduler_p);
    } else {
        ect_worker_params_t p = {.config = &e.cfg,
                                 .geometry = &e.geom,
                                 .instance_id = e.instance_id,
                                 .dp_rank = e.dp_rank,
                                 .region_dir = e.region_dir,
                                 .tp_rank = e.tp_rank,
                                 .pcp_rank = e.pcp_rank,
                                 .memory = e.memory,
                                 .cuda_device = e.cuda_device};
        s = ect_worker_create(&p, worker_p);
    }
    ect__engine_cleanup(&e);
    return s;
}

ect_status_t
ect_scheduler_create_json(const char *config_json, size_t config_len, const char *engine_json,
                          size_t engine_len, ect_scheduler_t **scheduler_p)
{
    if (scheduler_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler create: NULL argument");
    return create_side(config_json, config_len, engine_json, engine_len, scheduler_p, NULL);
}

ect_status_t
ect_worker_create_json(const char *config_json, size_t config_len, const char *engine_json,
                       size_t engine_len, ect_worker_t **worker_p)
{
    if (worker_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker create: NULL argument");
    return create_side(config_json, config_len, engine_json, engine_len, NULL, worker_p);
}
