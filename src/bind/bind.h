/*
 * Internals of the binding entry points (include/ectier/binding.h): the
 * engine description resolved into the values the scheduler and worker
 * constructors take, requests read from JSON, and the hand-over of JSON
 * results to the caller.
 *
 * Ownership: an ect__engine_t and an ect__request_t own what they point to
 * (a cJSON tree and printed texts); their cleanup functions free it.
 */
#ifndef ECT_BIND_BIND_H
#define ECT_BIND_BIND_H

#include <cjson/cJSON.h>

#include <ectier/binding.h>
#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/scheduler.h>
#include <ectier/worker.h>

#include "common/alloc.h"
#include "common/json.h"

/* An engine description resolved against an ec_transfer_config. */
typedef struct ect__engine {
    ect_config_t cfg;
    ect_geometry_t geom;
    const char *model;          /* never NULL */
    const char *engine_version; /* never NULL */
    const char *instance_id;    /* never NULL; "" when not given */
    const char *region_dir;     /* NULL: /dev/shm */
    unsigned dp_rank, tp_rank, pcp_rank, reports_per_load;
    ect_worker_memory_t memory;
    int cuda_device;
    cJSON *root; /* owns the strings above */
    char hidden_dim_source[ECT_HF_SOURCE_LEN];
    char dtype_source[ECT_HF_SOURCE_LEN];
    char model_type[ECT_HF_SOURCE_LEN];
} ect__engine_t;

/* Parse and check both documents.  On ECT_OK *engine is filled (release
 * with ect__engine_cleanup); on error nothing needs releasing. */
ect_status_t ect__engine_resolve(const char *config_json, size_t config_len,
                                 const char *engine_json, size_t engine_len, ect__engine_t *engine);
void ect__engine_cleanup(ect__engine_t *engine);

/* A request read from its JSON text; request.features points into it. */
typedef struct ect__request {
    ect_request_t request;
    ect_mm_feature_t *features;
    char **metadata; /* printed per feature, NULL for none */
    char *params;    /* printed ec_transfer_params, NULL for none */
    cJSON *root;
} ect__request_t;

/* Parse a request (binding.h).  On ECT_OK release with
 * ect__request_cleanup; on error nothing needs releasing. */
ect_status_t ect__request_parse(const char *json, size_t len, ect__request_t *req);
void ect__request_cleanup(ect__request_t *req);

/* Print root (always deleted) into *out_p for the caller to ect_free.
 * mark: ect__alloc_thread_failures() taken before root was built; if any
 * allocation of this thread failed since, a member is missing (cJSON's
 * cJSON_Add* calls drop it), so nothing is handed over.  Returns ECT_OK or
 * ECT_ERR_NO_MEMORY (with what in the message); a NULL root (a failed
 * allocation while building it) is ECT_ERR_NO_MEMORY. */
ect_status_t ect__bind_hand_over(cJSON *root, unsigned long mark, const char *what, char **out_p);

/* The geometry members of a description (ect_geometry_json) added to obj. */
void ect__engine_geometry_members(const ect__engine_t *engine, cJSON *obj);

#endif /* ECT_BIND_BIND_H */
