/*
 * The ec_transfer_params codec (params.h).  Encoding builds the object with
 * cJSON; decoding parses strictly (common/json.c), refuses duplicate and
 * over-long keys, and checks one announcement only when it is looked up,
 * so a bad item fails only the item (and its request) that names it.
 */
#include <stdlib.h>
#include <string.h>

#include <ectier/types.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/json.h"
#include "proto/params.h"

/* Largest integer exact in a double: sizes and ports beyond it are not
 * numbers JSON carries faithfully. */
#define EXACT_MAX 9007199254740991ull

struct ect_params {
    cJSON *root;
};

static cJSON *
metadata_object(const ect_params_item_t *it)
{
    if (it->metadata_json == NULL)
        return cJSON_CreateObject();
    cJSON *m = cJSON_Parse(it->metadata_json);
    if (m == NULL || !cJSON_IsObject(m)) {
        ECT_LOG_W("params: metadata of '%s' is not a JSON object; announcing {}", it->mm_hash);
        cJSON_Delete(m);
        return cJSON_CreateObject();
    }
    return m;
}

ect_status_t
ect__params_encode(const ect_params_item_t *items, size_t n, char **json_p)
{
    if (json_p == NULL || (items == NULL && n != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "params encode: NULL argument");
    for (size_t i = 0; i < n; i++) {
        const ect_params_item_t *it = &items[i];
        if (it->mm_hash == NULL || it->mm_hash[0] == '\0')
            return ect__error(ECT_ERR_INVALID_ARG, "params encode: item %zu has no mm_hash", i);
        if (it->served && (it->peer_host == NULL || it->peer_host[0] == '\0' ||
                           it->peer_port == 0 || it->size_bytes > EXACT_MAX))
            return ect__error(ECT_ERR_INVALID_ARG,
                              "params encode: item '%s' is served without a host, a port or a "
                              "size JSON can carry",
                              it->mm_hash);
    }
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        const ect_params_item_t *it = &items[i];
        cJSON *item = cJSON_CreateObject();
        cJSON *meta = item != NULL ? metadata_object(it) : NULL;
        ok = item != NULL && meta != NULL && cJSON_AddItemToObject(item, "metadata", meta);
        if (!ok)
            cJSON_Delete(meta);
        /* Both halves or neither: the address only with the metadata. */
        if (ok && it->served)
            ok = cJSON_AddStringToObject(item, "peer_host", it->peer_host) != NULL &&
                 cJSON_AddNumberToObject(item, "peer_port", it->peer_port) != NULL &&
                 ect__json_put_uint(item, "size_bytes", it->size_bytes);
        if (ok)
            ok = ect__json_put(root, it->mm_hash, item);
        else
            cJSON_Delete(item);
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "params encode: out of memory");
    *json_p = text;
    return ECT_OK;
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Top-level keys: 1 .. ECT_KEY_MAX bytes (an mm_hash, as the encoder
 * takes), none twice.  (Any number of them: a request may have many media
 * items.) */
static ect_status_t
check_top_keys(const cJSON *root)
{
    size_t n = 0;
    for (const cJSON *e = root->child; e != NULL; e = e->next) {
        size_t len = strlen(e->string);
        if (len == 0 || len > ECT_KEY_MAX)
            return ect__error(ECT_ERR_PARSE,
                              "ec_transfer_params: a key of %zu bytes (an mm_hash is 1 .. %u)", len,
                              ECT_KEY_MAX);
        n++;
    }
    if (n < 2)
        return ECT_OK;
    const char **names = ect__malloc(n * sizeof(*names));
    if (names == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "ec_transfer_params: out of memory");
    size_t k = 0;
    for (const cJSON *e = root->child; e != NULL; e = e->next)
        names[k++] = e->string;
    qsort(names, n, sizeof(*names), cmp_names);
    ect_status_t st = ECT_OK;
    for (size_t i = 1; i < n && st == ECT_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            st =
                ect__error(ECT_ERR_PARSE, "ec_transfer_params: \"%.80s\" is given twice", names[i]);
    ect__free(names);
    return st;
}

ect_status_t
ect__params_decode(const char *json, ect_params_t **params_p)
{
    if (json == NULL || params_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "ec_transfer_params: NULL argument");
    cJSON *root = NULL;
    ect_status_t st =
        ect__json_parse("ec_transfer_params", json, strlen(json), ECT_PARAMS_MAX_BYTES, &root);
    if (st != ECT_OK)
        return st;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ect__error(ECT_ERR_PARSE, "ec_transfer_params is not a JSON object");
    }
    if ((st = check_top_keys(root)) != ECT_OK) {
        cJSON_Delete(root);
        return st;
    }
    ect_params_t *p = ect__malloc(sizeof(*p));
    if (p == NULL) {
        cJSON_Delete(root);
        return ect__error(ECT_ERR_NO_MEMORY, "ec_transfer_params: out of memory");
    }
    p->root = root;
    *params_p = p;
    return ECT_OK;
}

static ect_status_t
bad_item(const char *mm_hash, const char *what)
{
    return ect__error(ECT_ERR_PARSE, "ec_transfer_params of '%.80s': %s", mm_hash, what);
}

ect_status_t
ect__params_find(const ect_params_t *params, const char *mm_hash, ect_params_item_t *item_p)
{
    if (params == NULL || mm_hash == NULL || item_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "ec_transfer_params: NULL argument");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(params->root, mm_hash);
    if (e == NULL)
        return ECT_ERR_NOT_FOUND;
    if (!cJSON_IsObject(e))
        return bad_item(mm_hash, "the announcement is not an object");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(e, "metadata");
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(e, "peer_host");
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(e, "peer_port");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(e, "size_bytes");
    if (meta != NULL && !cJSON_IsObject(meta))
        return bad_item(mm_hash, "\"metadata\" is not an object");
    ect_params_item_t it = {.mm_hash = mm_hash};
    if (host == NULL && port == NULL && size == NULL) {
        *item_p = it; /* neither half: the producer cannot serve it */
        return ECT_OK;
    }
    if (!cJSON_IsString(host) || host->valuestring[0] == '\0')
        return bad_item(mm_hash, "\"peer_host\" is missing, empty or not a string");
    uint64_t v = 0;
    if (ect__json_uint(port, 1, 65535, &v) != 0)
        return bad_item(mm_hash, "\"peer_port\" is not a port number");
    it.peer_port = (uint16_t)v;
    if (ect__json_uint(size, 0, EXACT_MAX, &v) != 0)
        return bad_item(mm_hash, "\"size_bytes\" is not a non-negative integer");
    it.size_bytes = v;
    it.peer_host = host->valuestring;
    it.served = 1;
    *item_p = it;
    return ECT_OK;
}

void
ect__params_destroy(ect_params_t *params)
{
    if (params == NULL)
        return;
    cJSON_Delete(params->root);
    ect__free(params);
}
