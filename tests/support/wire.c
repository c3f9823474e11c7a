/*
 * The seed's wire vectors, hex and message equality (see wire.h).
 */
#include <stdio.h>

#include "support/wire.h"

const char ts_wire_mm_hash[] = "3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a";
const char ts_wire_compat[] = "e5aa20f73125bdda9864ed0f48a40ab5c1c964812da6acc351d581f1c8b00dd1";
const char ts_wire_session[] = "0d5e8a4c-1b7f-4e29-9c3a-6f2d8b1e7a90";

uint8_t *
ts_hex_decode(const char *hex, size_t *len_p)
{
    size_t n = strlen(hex);
    CHECK_MSG(n % 2 == 0, "odd hex length %zu", n);
    uint8_t *out = malloc(n / 2 + 1);
    CHECK(out != NULL);
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        CHECK(sscanf(hex + 2 * i, "%2x", &v) == 1);
        out[i] = (uint8_t)v;
    }
    *len_p = n / 2;
    return out;
}

char *
ts_hex_encode(const uint8_t *p, size_t n)
{
    char *out = malloc(2 * n + 1);
    CHECK(out != NULL);
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", p[i]);
    out[2 * n] = '\0';
    return out;
}

cJSON *
ts_load_vectors(void)
{
    char *text = ect_test_read_file(ECT_TEST_DATA_DIR "/wire-vectors.json", NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    CHECK_MSG(root != NULL, "wire-vectors.json does not parse");
    cJSON *vectors = cJSON_GetObjectItemCaseSensitive(root, "vectors");
    CHECK(cJSON_IsArray(vectors) && cJSON_GetArraySize(vectors) > 0);
    return root;
}

const char *
ts_vec_str(const cJSON *v, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(v, key);
    CHECK_MSG(cJSON_IsString(item), "vector lacks string \"%s\"", key);
    return item->valuestring;
}

bool
ts_vec_is_kind(const cJSON *v, const char *kind)
{
    return strcmp(ts_vec_str(v, "kind"), kind) == 0;
}

const cJSON *
ts_vec_field(const cJSON *v, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "fields"), key);
}

static const char *
or_empty(const char *s)
{
    return s != NULL ? s : "";
}

bool
ts_req_equal(const ect_xfer_req_t *a, const ect_xfer_req_t *b)
{
    return strcmp(a->mm_hash, b->mm_hash) == 0 &&
           strcmp(a->compatibility_hash, b->compatibility_hash) == 0 &&
           strcmp(or_empty(a->session_id), or_empty(b->session_id)) == 0 &&
           a->has_connector_version == b->has_connector_version &&
           (!a->has_connector_version || a->connector_version == b->connector_version);
}

bool
ts_bytes_equal(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

bool
ts_ack_equal(const ect_xfer_ack_t *a, const ect_xfer_ack_t *b)
{
    return strcmp(a->mm_hash, b->mm_hash) == 0 && a->status == b->status &&
           strcmp(or_empty(a->session_id), or_empty(b->session_id)) == 0 &&
           a->n_src_blocks == b->n_src_blocks &&
           (a->n_src_blocks == 0 || memcmp(a->src_block_indices, b->src_block_indices,
                                           a->n_src_blocks * sizeof(uint64_t)) == 0) &&
           ts_bytes_equal(a->agent_metadata, a->agent_metadata_len, b->agent_metadata,
                          b->agent_metadata_len) &&
           ts_bytes_equal(a->mem_descriptor, a->mem_descriptor_len, b->mem_descriptor,
                          b->mem_descriptor_len);
}

uint8_t *
ts_vector_bytes(const char *name, size_t *len_p)
{
    cJSON *root = ts_load_vectors();
    const cJSON *v;
    uint8_t *out = NULL;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(root, "vectors"))
    {
        if (strcmp(ts_vec_str(v, "name"), name) == 0)
            out = ts_hex_decode(ts_vec_str(v, "hex"), len_p);
    }
    cJSON_Delete(root);
    CHECK_MSG(out != NULL, "no vector named %s", name);
    return out;
}
