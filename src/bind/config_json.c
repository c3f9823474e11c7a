/*
 * ect_config_check_json (include/ectier/binding.h): a checked
 * ec_transfer_config described as JSON, one member per field of the settings
 * table, so the binding shows exactly what the library resolved.  Driven by
 * the table (common/settings.h) like the text listing of ect_config_format.
 */
#include <stdbool.h>
#include <string.h>

#include <ectier/binding.h>

#include "bind/bind.h"
#include "common/error.h"
#include "common/settings.h"

static cJSON *
field_json(const struct ect__setting *row, const ect_config_t *cfg)
{
    const char *f = (const char *)cfg + row->offset;
    switch (row->type) {
    case ECT_SETTING_SIZE: {
        uint64_t v;
        memcpy(&v, f, sizeof(v));
        return ect__json_uint_new(v);
    }
    case ECT_SETTING_BOOL: {
        bool v;
        memcpy(&v, f, sizeof(v));
        return cJSON_CreateBool(v);
    }
    case ECT_SETTING_SECONDS: {
        double v;
        memcpy(&v, f, sizeof(v));
        return cJSON_CreateNumber(v);
    }
    case ECT_SETTING_UINT: {
        unsigned v;
        memcpy(&v, f, sizeof(v));
        return cJSON_CreateNumber(v);
    }
    case ECT_SETTING_PORT: {
        uint16_t v;
        memcpy(&v, f, sizeof(v));
        return cJSON_CreateNumber(v);
    }
    case ECT_SETTING_STRING:
        return cJSON_CreateString(f);
    case ECT_SETTING_ENUM: {
        int v;
        memcpy(&v, f, sizeof(v));
        return cJSON_CreateString(v >= 0 && (size_t)v < row->n_choices ? row->choices[v] : "?");
    }
    case ECT_SETTING_OBJECT:
        break;
    }
    return cJSON_CreateNull();
}

ect_status_t
ect_config_check_json(const char *json, size_t len, char **resolved_p)
{
    if (resolved_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "config check: NULL argument");
    ect_config_t cfg;
    ect_status_t s = ect_config_parse(json, len, &cfg);
    if (s != ECT_OK)
        return s;
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    unsigned long mark = ect__alloc_thread_failures();
    cJSON *out = cJSON_CreateObject();
    for (size_t i = 0; out != NULL && i < n; i++) {
        if (rows[i].offset == ECT_SETTING_NO_FIELD)
            continue;
        cJSON *v = field_json(&rows[i], &cfg);
        if (v == NULL || !cJSON_AddItemToObject(out, rows[i].name, v)) {
            cJSON_Delete(v);
            cJSON_Delete(out);
            out = NULL;
        }
    }
    return ect__bind_hand_over(out, mark, "config check", resolved_p);
}
