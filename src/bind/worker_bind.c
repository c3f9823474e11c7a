/*
 * The worker side's binding entry points (include/ectier/binding.h): loads
 * with their destinations as flat arrays, the report as bytes, and the step
 * values described as JSON for bindings and tests.
 *
 * start_load_arrays checks every destination against the bound step before
 * the worker copies anything; the worker then asks for each load's
 * destination in block order, which the lookup answers from the arrays.
 */
#include <stdlib.h>
#include <string.h>

#include <ectier/binding.h>

#include "bind/bind.h"
#include "common/alloc.h"
#include "common/error.h"
#include "step/report.h"

static cJSON *
runs_json(const ect_step_item_t *it)
{
    cJSON *runs = cJSON_CreateArray();
    for (size_t r = 0; runs != NULL && r < it->n_runs; r++) {
        double pair[2] = {(double)it->runs[r].first, (double)it->runs[r].count};
        cJSON_AddItemToArray(runs, cJSON_CreateDoubleArray(pair, 2));
    }
    return runs;
}

static cJSON *
items_json(const ect_step_meta_t *meta, int loads)
{
    size_t n = loads ? ect_step_meta_n_loads(meta) : ect_step_meta_n_saves(meta);
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr != NULL && i < n; i++) {
        const ect_step_item_t *it =
            loads ? ect_step_meta_load(meta, i) : ect_step_meta_save(meta, i);
        cJSON *o = cJSON_CreateObject();
        if (o == NULL) {
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddStringToObject(o, "key", it->key);
        if (loads)
            ect__json_put_uint(o, "transfer_id", it->transfer_id);
        ect__json_put_uint(o, "n_blocks", it->n_blocks);
        ect__json_put(o, "runs", runs_json(it));
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static ect_status_t
meta_to_json(const ect_step_meta_t *meta, char **json_p)
{
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *root = cJSON_CreateObject();
    if (root != NULL) {
        ect__json_put(root, "saves", items_json(meta, 0));
        ect__json_put(root, "loads", items_json(meta, 1));
    }
    return ect__bind_hand_over(root, mark, "step metadata", json_p);
}

ect_status_t
ect_step_meta_json(const void *bytes, size_t len, uint64_t num_blocks, char **json_p)
{
    if (json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "step metadata json: NULL argument");
    ect_step_meta_t *meta;
    ect_status_t s = ect_step_meta_decode(bytes, len, num_blocks, &meta);
    if (s != ECT_OK)
        return s;
    s = meta_to_json(meta, json_p);
    ect_step_meta_destroy(meta);
    return s;
}

ect_status_t
ect_worker_metadata_json(const ect_worker_t *worker, char **json_p)
{
    if (worker == NULL || json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker metadata json: NULL argument");
    const ect_step_meta_t *meta = ect_worker_metadata(worker);
    if (meta == NULL)
        return ect__error(ECT_ERR_STATE, "worker metadata json: no metadata bound");
    return meta_to_json(meta, json_p);
}

static cJSON *
keys_json(const ect_step_report_t *r, size_t n,
          const char *(*get)(const ect_step_report_t *, size_t))
{
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr != NULL && i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateString(get(r, i)));
    return arr;
}

ect_status_t
ect_step_report_json(const void *bytes, size_t len, char **json_p)
{
    if (json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report json: NULL argument");
    ect_step_report_t *r;
    ect_status_t s = ect_step_report_decode(bytes, len, &r);
    if (s != ECT_OK)
        return s;
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *root = cJSON_CreateObject(), *loads = cJSON_CreateArray(), *stats = cJSON_CreateObject();
    if (root == NULL || loads == NULL || stats == NULL) {
        cJSON_Delete(loads);
        cJSON_Delete(stats);
        cJSON_Delete(root);
        ect_step_report_destroy(r);
        return ect__error(ECT_ERR_NO_MEMORY, "worker report json: out of memory");
    }
    ect__json_put(root, "saves", keys_json(r, ect_step_report_n_saves(r), ect_step_report_save));
    ect__json_put(root, "failed_saves",
                  keys_json(r, ect_step_report_n_failed_saves(r), ect_step_report_failed_save));
    for (size_t i = 0; i < ect_step_report_n_loads(r); i++)
        ect__json_put(loads, NULL, ect__json_uint_new(ect_step_report_load(r, i)));
    ect__json_put(root, "loads", loads);
    const ect_step_copy_stats_t *cs = ect_step_report_stats(r);
    ect__json_put_uint(stats, "save_bytes", cs->save_bytes);
    ect__json_put_uint(stats, "save_ns", cs->save_ns);
    ect__json_put_uint(stats, "save_batches", cs->save_batches);
    ect__json_put_uint(stats, "load_bytes", cs->load_bytes);
    ect__json_put_uint(stats, "load_ns", cs->load_ns);
    ect__json_put_uint(stats, "load_batches", cs->load_batches);
    ect__json_put(root, "stats", stats);
    ect_step_report_destroy(r);
    return ect__bind_hand_over(root, mark, "worker report json", json_p);
}

/* The destinations of one start_load_arrays call. */
struct targets {
    size_t n;
    const char *const *keys;
    const uint64_t *addrs;
    const uint64_t *n_bytes;
};

/* ect_load_target_fn over the arrays (keys already checked).  The worker
 * resolves every destination before it submits the batch, so a wrong size
 * stops the load before anything is copied. */
static ect_status_t
array_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    const struct targets *t = user;
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->keys[i], key) != 0)
            continue;
        if (t->n_bytes[i] != nbytes)
            return ect__error(ECT_ERR_INVALID_ARG,
                              "worker start_load: '%s' is %llu tokens (%zu bytes) but its "
                              "destination has %llu bytes",
                              key, (unsigned long long)n_tokens, nbytes,
                              (unsigned long long)t->n_bytes[i]);
        *dst_p = (void *)(uintptr_t)t->addrs[i];
        return ECT_OK;
    }
    return ect__error(ECT_ERR_INTERNAL, "worker start_load: no destination for '%s'", key);
}

/* Each load of the bound step exactly once, with an address. */
static ect_status_t
check_targets(const ect_worker_t *w, const struct targets *t)
{
    static const char what[] = "worker start_load";
    const ect_step_meta_t *meta = ect_worker_metadata(w);
    if (meta == NULL)
        return ect__error(ECT_ERR_STATE, "%s: no metadata bound", what);
    if (t->n != ect_step_meta_n_loads(meta))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "%s: %zu destinations for the step's %zu loads: give one per load", what,
                          t->n, ect_step_meta_n_loads(meta));
    for (size_t i = 0; i < t->n; i++) {
        if (t->keys[i] == NULL)
            return ect__error(ECT_ERR_INVALID_ARG, "%s: destination %zu has no key", what, i);
        if (ect_step_meta_find_load(meta, t->keys[i]) == NULL)
            return ect__error(ECT_ERR_INVALID_ARG, "%s: '%s' is not a load of this step", what,
                              t->keys[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->keys[j], t->keys[i]) == 0)
                return ect__error(ECT_ERR_INVALID_ARG, "%s: '%s' is given twice", what, t->keys[i]);
        if (t->addrs[i] == 0 && t->n_bytes[i] > 0)
            return ect__error(ECT_ERR_INVALID_ARG, "%s: '%s' has a NULL destination", what,
                              t->keys[i]);
    }
    return ECT_OK;
}

ect_status_t
ect_worker_start_load_arrays(ect_worker_t *worker, size_t n, const char *const *keys,
                             const uint64_t *addrs, const uint64_t *n_bytes,
                             uint64_t compute_stream)
{
    if (worker == NULL || (n > 0 && (keys == NULL || addrs == NULL || n_bytes == NULL)))
        return ect__error(ECT_ERR_INVALID_ARG, "worker start_load: NULL argument");
    struct targets t = {n, keys, addrs, n_bytes};
    ect_status_t s = check_targets(worker, &t);
    if (s != ECT_OK)
        return s;
    return ect_worker_start_load(worker, array_target, &t, (void *)(uintptr_t)compute_stream);
}

ect_status_t
ect_worker_take_report_bytes(ect_worker_t *worker, void **bytes_p, size_t *len_p,
                             ect_status_t *copy_status_p)
{
    if (worker == NULL || bytes_p == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker take_report: NULL argument");
    ect_step_report_t *r = NULL;
    ect_status_t copy = ect_worker_take_report(worker, &r);
    if (r == NULL && (copy == ECT_ERR_NO_MEMORY || copy == ECT_ERR_INVALID_ARG))
        return copy; /* nothing taken: the completions wait for the next call */
    void *buf = NULL;
    size_t len = 0;
    if (r != NULL) {
        size_t cap = ect_step_report_encoded_size(r);
        ect_status_t s = ECT_OK;
        if ((buf = ect__malloc(cap)) == NULL)
            s = ect__error(ECT_ERR_NO_MEMORY, "worker take_report: out of memory (%zu bytes)", cap);
        else if ((s = ect_step_report_encode(r, buf, cap, &len)) != ECT_OK)
            ect__free(buf);
        if (s != ECT_OK) {
            /* Not lost: the worker hands it out again at the next call
             * (else its saves would stay not ready and its loads pinned on
             * the scheduler until shutdown). */
            ect__worker_give_back_report(worker, r, copy);
            return s;
        }
        ect_worker_recycle_report(worker, r);
    }
    *bytes_p = buf;
    *len_p = len;
    if (copy_status_p != NULL)
        *copy_status_p = copy;
    return ECT_OK;
}
