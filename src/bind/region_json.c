/*
 * Region directory entries as JSON (bind/region_json.h) and the binding's
 * listing and garbage collection (include/ectier/binding.h).
 */
#include <string.h>

#include <ectier/binding.h>
#include <ectier/geometry.h>

#include "bind/bind.h"
#include "bind/region_json.h"
#include "common/error.h"

const char *
ect__region_kind_str(ect_region_file_kind_t kind)
{
    switch (kind) {
    case ECT_REGION_FILE_REGION:
        return "region";
    case ECT_REGION_FILE_BAD:
        return "bad";
    case ECT_REGION_FILE_FOREIGN:
        return "foreign";
    case ECT_REGION_FILE_TEMP:
        return "temp";
    }
    return "unknown";
}

static cJSON *
pid_array(unsigned n, const int32_t *pids)
{
    cJSON *a = cJSON_CreateArray();
    for (unsigned i = 0; a != NULL && i < n && i < ECT_REGION_MAX_PIDS; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(pids[i]));
    return a;
}

cJSON *
ect__region_info_json(const ect_region_info_t *i)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "name", i->name);
    cJSON_AddStringToObject(o, "path", i->path);
    cJSON_AddStringToObject(o, "kind", ect__region_kind_str(i->kind));
    if (i->problem[0])
        cJSON_AddStringToObject(o, "problem", i->problem);
    ect__json_put_uint(o, "file_size", i->file_size);
    cJSON_AddNumberToObject(o, "age_s", i->age_s);
    cJSON_AddNumberToObject(o, "holders", i->n_holders);
    ect__json_put(o, "holder_pids", pid_array(i->n_holders, i->holder_pids));
    cJSON_AddNumberToObject(o, "waiters", i->n_waiters);
    ect__json_put(o, "waiter_pids", pid_array(i->n_waiters, i->waiter_pids));
    cJSON_AddNumberToObject(o, "owner_pid", i->owner_pid);
    /* Only what gc really removes is called orphaned (ect_region_gc and
     * gc_eligible share one rule). */
    cJSON_AddBoolToObject(o, "orphaned", i->n_holders == 0 && i->gc_eligible);
    cJSON_AddBoolToObject(o, "gc_eligible", i->gc_eligible);
    if (i->kind == ECT_REGION_FILE_REGION) {
        cJSON_AddNumberToObject(o, "layout_version", i->layout_version);
        ect__json_put_uint(o, "hidden_dim", i->hidden_dim);
        cJSON_AddNumberToObject(o, "dtype_code", i->dtype_code);
        const char *dtype = ect_dtype_name((ect_dtype_t)i->dtype_code);
        if (dtype != NULL)
            cJSON_AddStringToObject(o, "dtype", dtype);
        else
            cJSON_AddNullToObject(o, "dtype");
        cJSON_AddNumberToObject(o, "element_size", i->element_size);
        ect__json_put_uint(o, "block_size_bytes", i->block_size_bytes);
        ect__json_put_uint(o, "num_blocks", i->num_blocks);
        ect__json_put_uint(o, "data_offset", i->data_offset);
        cJSON_AddNumberToObject(o, "creator_pid", i->creator_pid);
        ect__json_put_uint(o, "created_unix_ns", i->created_unix_ns);
        cJSON_AddStringToObject(o, "instance_id", i->instance_id);
    }
    return o;
}

static int
on_file(const ect_region_info_t *info, void *user)
{
    cJSON *o = ect__region_info_json(info);
    if (o != NULL)
        cJSON_AddItemToArray(user, o);
    return 0;
}

static void
on_orphan(const ect_region_info_t *info, ect_status_t outcome, void *user)
{
    cJSON *o = ect__region_info_json(info);
    if (o == NULL)
        return;
    cJSON_AddBoolToObject(o, "removed", outcome == ECT_OK);
    if (outcome != ECT_OK)
        cJSON_AddStringToObject(o, "error", info->problem);
    cJSON_AddItemToArray(user, o);
}

ect_status_t
ect_region_list_json(const char *dir, char **json_p)
{
    if (json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "region list: NULL argument");
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *arr = cJSON_CreateArray();
    if (arr == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "region list: out of memory");
    ect_status_t s = ect_region_list(dir, on_file, arr);
    if (s != ECT_OK) {
        cJSON_Delete(arr);
        return s;
    }
    return ect__bind_hand_over(arr, mark, "region list", json_p);
}

ect_status_t
ect_region_gc_json(const char *dir, int dry_run, char **json_p)
{
    if (json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "region gc: NULL argument");
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *arr = cJSON_CreateArray();
    if (arr == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "region gc: out of memory");
    ect_status_t s = ect_region_gc(dir, dry_run, on_orphan, arr, NULL);
    if (s != ECT_OK) {
        cJSON_Delete(arr);
        return s;
    }
    return ect__bind_hand_over(arr, mark, "region gc", json_p);
}
