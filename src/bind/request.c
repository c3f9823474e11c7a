/*
 * The scheduler side's binding entry points (include/ectier/binding.h):
 * requests read from JSON into ect_request_t, and the step metadata,
 * unavailable requests and metrics handed back as bytes or text.
 *
 * A request is checked completely before the scheduler sees it, so a
 * malformed one changes nothing.  Its strings point into the parsed tree,
 * which lives until the call returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/binding.h>
#include <ectier/metrics.h>

#include "bind/bind.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/json.h"
#include "common/settings.h"
#include "metrics/render.h"

#define EXACT_MAX ((uint64_t)1 << 53)

static const char what[] = "request";

static const char *const request_keys[] = {"request_id", "num_computed_tokens",
                                           "ec_transfer_params", "features"};
static const char *const feature_keys[] = {"identifier", "mm_hash",         "offset",  "length",
                                           "num_tokens", "has_local_input", "metadata"};

static ect_status_t
check_known(const cJSON *obj, const char *where, const char *const *known, size_t n)
{
    char q[128];
    ect_status_t s = ect__json_check_keys(what, obj, where);
    if (s != ECT_OK)
        return s;
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        size_t i = 0;
        while (i < n && strcmp(known[i], it->string) != 0)
            i++;
        if (i == n)
            return ect__error(ECT_ERR_CONFIG, "%s: unknown key %s %s", what,
                              ect__quote(q, sizeof(q), it->string, strlen(it->string)), where);
    }
    return ECT_OK;
}

static ect_status_t
bad_value(const char *where, const char *key, const cJSON *v, const char *allowed)
{
    char shown[128];
    return ect__error(ECT_ERR_CONFIG, "%s: %s%s = %s is not allowed: %s", what, where, key,
                      ect__describe_json(shown, sizeof(shown), v), allowed);
}

/* A string member of 1..max bytes; absent: *out_p = NULL if optional. */
static ect_status_t
get_string(const cJSON *obj, const char *where, const char *key, size_t max, int required,
           const char **out_p)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out_p = NULL;
    if (v == NULL || (!required && cJSON_IsNull(v)))
        return required ? ect__error(ECT_ERR_CONFIG, "%s: %s%s is missing", what, where, key)
                        : ECT_OK;
    if (!cJSON_IsString(v) || v->valuestring[0] == '\0' || strlen(v->valuestring) > max) {
        char allowed[64];
        snprintf(allowed, sizeof(allowed), "use a string of 1 to %zu bytes", max);
        return bad_value(where, key, v, allowed);
    }
    *out_p = v->valuestring;
    return ECT_OK;
}

static ect_status_t
get_uint(const cJSON *obj, const char *where, const char *key, int required, uint64_t dflt,
         uint64_t *out_p)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v == NULL) {
        *out_p = dflt;
        return required ? ect__error(ECT_ERR_CONFIG, "%s: %s%s is missing", what, where, key)
                        : ECT_OK;
    }
    if (ect__json_uint(v, 0, EXACT_MAX, out_p) != 0)
        return bad_value(where, key, v, "use a non-negative integer");
    return ECT_OK;
}

/* Print an optional JSON member (NULL when absent or null). */
static ect_status_t
print_member(const cJSON *obj, const char *key, char **text_p)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *text_p = NULL;
    if (v == NULL || cJSON_IsNull(v))
        return ECT_OK;
    if ((*text_p = cJSON_PrintUnformatted(v)) == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory copying %s", what, key);
    return ECT_OK;
}

static ect_status_t
parse_feature(const cJSON *f, size_t i, ect__request_t *r)
{
    char where[48];
    snprintf(where, sizeof(where), "features[%zu].", i);
    if (!cJSON_IsObject(f))
        return bad_value("", where, f, "each feature is a JSON object");
    ect_status_t s =
        check_known(f, where, feature_keys, sizeof(feature_keys) / sizeof(*feature_keys));
    if (s != ECT_OK)
        return s;
    ect_mm_feature_t *out = &r->features[i];
    uint64_t offset, length, tokens;
    if ((s = get_string(f, where, "identifier", ECT_KEY_MAX, 1, &out->identifier)) != ECT_OK ||
        (s = get_string(f, where, "mm_hash", ECT_KEY_MAX, 0, &out->mm_hash)) != ECT_OK ||
        (s = get_uint(f, where, "num_tokens", 1, 0, &tokens)) != ECT_OK ||
        (s = get_uint(f, where, "offset", 0, 0, &offset)) != ECT_OK ||
        (s = get_uint(f, where, "length", 0, tokens, &length)) != ECT_OK)
        return s;
    if (length < tokens)
        return ect__error(ECT_ERR_CONFIG,
                          "%s: %slength %llu is less than num_tokens %llu: an item's placeholder "
                          "covers at least its encoder rows",
                          what, where, (unsigned long long)length, (unsigned long long)tokens);
    /* The scheduler counts an item as computed once offset + num_tokens
     * <= num_computed_tokens; the engine's rule is offset + length (the
     * placeholder may hold tokens that are not encoder rows).  Shift the
     * start so that both ends agree. */
    out->offset = offset + (length - tokens);
    out->num_tokens = tokens;
    const cJSON *local = cJSON_GetObjectItemCaseSensitive(f, "has_local_input");
    if (local != NULL && !cJSON_IsBool(local))
        return bad_value(where, "has_local_input", local, "use true or false");
    out->has_local_input = local == NULL || cJSON_IsTrue(local);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f, "metadata");
    if (meta != NULL && !cJSON_IsObject(meta) && !cJSON_IsNull(meta))
        return bad_value(where, "metadata", meta, "use a JSON object");
    if ((s = print_member(f, "metadata", &r->metadata[i])) != ECT_OK)
        return s;
    out->metadata_json = r->metadata[i];
    return ECT_OK;
}

void
ect__request_cleanup(ect__request_t *r)
{
    if (r == NULL)
        return;
    if (r->metadata != NULL)
        for (size_t i = 0; i < r->request.n_features; i++)
            cJSON_free(r->metadata[i]);
    ect__free(r->metadata);
    ect__free(r->features);
    cJSON_free(r->params);
    cJSON_Delete(r->root);
    memset(r, 0, sizeof(*r));
}

ect_status_t
ect__request_parse(const char *json, size_t len, ect__request_t *out)
{
    ect__request_t r;
    memset(&r, 0, sizeof(r));
    ect_status_t s = ect__json_parse(what, json, len, ECT_BIND_JSON_MAX, &r.root);
    if (s != ECT_OK)
        return s;
    char shown[128];
    if (!cJSON_IsObject(r.root)) {
        s = ect__error(ECT_ERR_CONFIG, "%s must be a JSON object, got %s", what,
                       ect__describe_json(shown, sizeof(shown), r.root));
        goto err;
    }
    if ((s = check_known(r.root, "at the top level", request_keys,
                         sizeof(request_keys) / sizeof(*request_keys))) != ECT_OK ||
        (s = get_string(r.root, "", "request_id", ECT_KEY_MAX, 1, &r.request.request_id)) !=
            ECT_OK ||
        (s = get_uint(r.root, "", "num_computed_tokens", 0, 0, &r.request.num_computed_tokens)) !=
            ECT_OK ||
        (s = print_member(r.root, "ec_transfer_params", &r.params)) != ECT_OK)
        goto err;
    r.request.ec_transfer_params_json = r.params;
    const cJSON *features = cJSON_GetObjectItemCaseSensitive(r.root, "features");
    if (features != NULL && !cJSON_IsArray(features)) {
        s = bad_value("", "features", features, "use a JSON array of feature objects");
        goto err;
    }
    size_t n = (size_t)cJSON_GetArraySize(features);
    if (n > 0) {
        r.features = ect__calloc(n, sizeof(*r.features));
        r.metadata = ect__calloc(n, sizeof(*r.metadata));
        if (r.features == NULL || r.metadata == NULL) {
            s = ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory for %zu features", what, n);
            goto err;
        }
    }
    r.request.features = r.features;
    size_t i = 0;
    for (const cJSON *f = features != NULL ? features->child : NULL; f != NULL; f = f->next, i++) {
        r.request.n_features = i + 1; /* so cleanup frees what was printed */
        if ((s = parse_feature(f, i, &r)) != ECT_OK)
            goto err;
    }
    *out = r;
    return ECT_OK;

err:
    ect__request_cleanup(&r);
    return s;
}

/* The scheduler calls that take a request. */
enum request_call { CALL_ENSURE, CALL_ALLOC, CALL_FINISHED };

/* Parse the request, make the call, free the request.  out is the call's
 * output (int *available_p, or char **params_json_p). */
static ect_status_t
with_request(ect_scheduler_t *scheduler, const char *json, size_t len, enum request_call call,
             size_t index, void *out)
{
    static const char *const names[] = {"ensure_cache_available", "update_state_after_alloc",
                                        "request_finished"};
    if (scheduler == NULL || (call != CALL_ALLOC && out == NULL))
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL argument", names[call]);
    ect__request_t r;
    ect_status_t s = ect__request_parse(json, len, &r);
    if (s != ECT_OK)
        return s;
    switch (call) {
    case CALL_ENSURE:
        s = ect_scheduler_ensure_cache_available(scheduler, &r.request, out);
        break;
    case CALL_ALLOC:
        s = ect_scheduler_update_state_after_alloc(scheduler, &r.request, index);
        break;
    case CALL_FINISHED:
        s = ect_scheduler_request_finished(scheduler, &r.request, out);
        break;
    }
    ect__request_cleanup(&r);
    return s;
}

ect_status_t
ect_scheduler_ensure_cache_available_json(ect_scheduler_t *scheduler, const char *request_json,
                                          size_t len, int *available_p)
{
    return with_request(scheduler, request_json, len, CALL_ENSURE, 0, available_p);
}

ect_status_t
ect_scheduler_update_state_after_alloc_json(ect_scheduler_t *scheduler, const char *request_json,
                                            size_t len, size_t index)
{
    return with_request(scheduler, request_json, len, CALL_ALLOC, index, NULL);
}

ect_status_t
ect_scheduler_request_finished_json(ect_scheduler_t *scheduler, const char *request_json,
                                    size_t len, char **params_json_p)
{
    return with_request(scheduler, request_json, len, CALL_FINISHED, 0, params_json_p);
}

ect_status_t
ect_scheduler_build_connector_meta_bytes(ect_scheduler_t *scheduler, void **bytes_p, size_t *len_p)
{
    if (scheduler == NULL || bytes_p == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "build_connector_meta: NULL argument");
    ect_step_meta_t *meta;
    ect_status_t s = ect_scheduler_build_connector_meta(scheduler, &meta);
    if (s != ECT_OK)
        return s;
    size_t cap = ect_step_meta_encoded_size(meta), len = 0;
    void *buf = ect__malloc(cap);
    if (buf == NULL)
        s = ect__error(ECT_ERR_NO_MEMORY, "build_connector_meta: out of memory (%zu bytes)", cap);
    else if ((s = ect_step_meta_encode(meta, buf, cap, &len)) != ECT_OK)
        ect__free(buf);
    ect_scheduler_recycle_connector_meta(scheduler, meta);
    if (s != ECT_OK)
        return s;
    *bytes_p = buf;
    *len_p = len;
    return ECT_OK;
}

ect_status_t
ect_scheduler_take_unavailable_json(ect_scheduler_t *scheduler, char **ids_json_p)
{
    if (scheduler == NULL || ids_json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "take_unavailable_requests: NULL argument");
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *ids = cJSON_CreateArray();
    char *batch[64];
    size_t n;
    do {
        n = ect_scheduler_take_unavailable_requests(scheduler, batch, 64);
        for (size_t i = 0; i < n; i++) {
            cJSON *id = ids != NULL ? cJSON_CreateString(batch[i]) : NULL;
            if (id == NULL || !cJSON_AddItemToArray(ids, id)) {
                ECT_LOG_E("take_unavailable_requests: out of memory; request '%s' must fail",
                          batch[i]);
                cJSON_Delete(id);
            }
            ect_free(batch[i]);
        }
    } while (n == 64);
    return ect__bind_hand_over(ids, mark, "take_unavailable_requests", ids_json_p);
}

ect_status_t
ect_scheduler_metrics_prometheus(ect_scheduler_t *scheduler, char **text_p)
{
    if (scheduler == NULL || text_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler metrics: NULL argument");
    ect_metrics_t m;
    size_t len;
    ect_status_t s = ect_scheduler_metrics(scheduler, &m);
    return s != ECT_OK ? s : ect__metrics_render(&m, text_p, &len);
}
