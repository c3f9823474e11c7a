/*
 * A region directory entry (ect_region_info_t) as a JSON object: one shape
 * for `ectier inspect --json` and the binding's ect_region_list_json and
 * ect_region_gc_json.
 */
#ifndef ECT_BIND_REGION_JSON_H
#define ECT_BIND_REGION_JSON_H

#include <cjson/cJSON.h>

#include <ectier/region.h>

/* "region", "bad", "foreign", "temp". */
const char *ect__region_kind_str(ect_region_file_kind_t kind);

/* A new object (the caller owns it), or NULL when out of memory. */
cJSON *ect__region_info_json(const ect_region_info_t *info);

#endif /* ECT_BIND_REGION_JSON_H */
