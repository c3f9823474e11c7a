/*
 * The encoder-cache width and declared dtype of a HuggingFace config.json
 * (ect_hf_config_parse / ect_hf_config_load in include/ectier/geometry.h).
 *
 * The file comes from outside, so nothing about its shape is assumed: every
 * member read is looked up by exact name, type-checked and range-checked, and
 * a key repeated in one object with different values is reported rather than
 * resolved silently (Python's json keeps the last one, cJSON the first; a
 * file that means two things must not get a third meaning here).
 * Results are built in a local ect_hf_model_t and copied out only on success.
 * No state, no locks.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include <ectier/geometry.h>

#include "common/error.h"

/* Layer indexes are small; anything above this is not a layer number. */
#define MAX_LAYER_INDEX 65535

/* transformers' default hidden_size for text model types whose config class
 * fixes one, for sub-configs that omit it (llava-1.5's text_config does). */
static const struct {
    const char *model_type;
    uint64_t hidden_size;
} default_widths[] = {
    {"llama", 4096}, {"mistral", 4096}, {"mixtral", 4096}, {"qwen2", 4096}, {"gemma3_text", 2304},
};

static int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static const char *
json_type_name(const cJSON *item)
{
    if (cJSON_IsObject(item))
        return "an object";
    if (cJSON_IsArray(item))
        return "an array";
    if (cJSON_IsString(item))
        return "a string";
    if (cJSON_IsNumber(item))
        return "a number";
    if (cJSON_IsBool(item))
        return "a boolean";
    if (cJSON_IsNull(item))
        return "null";
    return "an invalid value";
}

/* "key" at the top level, "where.key" inside a sub-object. */
static void
field_name(char *buf, size_t len, const char *where, const char *key)
{
    snprintf(buf, len, "%s%s%s", where, *where ? "." : "", key);
}

/* The member key of obj, or NULL in *item_p if it is absent or null (Python's
 * getattr(..., None) cannot tell those apart either).  A key repeated in one
 * object is an error unless both values are equal scalars; containers are
 * not compared (cJSON_Compare is quadratic on objects, and a file repeating a
 * whole sub-config is broken anyway). */
static ect_status_t
member(const cJSON *obj, const char *where, const char *key, const cJSON **item_p)
{
    const cJSON *found = NULL;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) {
        if (c->string == NULL || strcmp(c->string, key) != 0)
            continue;
        if (found == NULL) {
            found = c;
            continue;
        }
        int scalar = !cJSON_IsObject(c) && !cJSON_IsArray(c) && !cJSON_IsObject(found) &&
                     !cJSON_IsArray(found);
        if (!scalar || !cJSON_Compare(found, c, 1)) {
            char name[96];
            field_name(name, sizeof(name), where, key);
            return ect__error(ECT_ERR_CONFIG, "model config: %s occurs twice in one object with %s",
                              name, scalar ? "different values" : "object or array values");
        }
    }
    *item_p = cJSON_IsNull(found) ? NULL : found;
    return ECT_OK;
}

/* An optional sub-object: absent/null gives NULL, anything but an object is
 * an error. */
static ect_status_t
sub_object(const cJSON *obj, const char *key, const cJSON **sub_p)
{
    const cJSON *item;
    ect_status_t s = member(obj, "", key, &item);
    if (s != ECT_OK)
        return s;
    if (item != NULL && !cJSON_IsObject(item))
        return ect__error(ECT_ERR_CONFIG, "model config: %s must be an object, got %s", key,
                          json_type_name(item));
    *sub_p = item;
    return ECT_OK;
}

/* Copy text that came from the file into a fixed buffer for printing:
 * truncated, with anything but printable ASCII replaced. */
static void
copy_printable(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < len; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
    dst[i] = '\0';
}

/* Check that item is an integer in [lo, hi]; name is for the message. */
static ect_status_t
integer_in_range(const cJSON *item, const char *name, uint64_t lo, uint64_t hi, uint64_t *value_p)
{
    if (!cJSON_IsNumber(item)) {
        if (cJSON_IsString(item)) {
            char text[48];
            copy_printable(text, sizeof(text), item->valuestring ? item->valuestring : "");
            return ect__error(ECT_ERR_CONFIG,
                              "model config: %s must be an integer, got the string \"%s\"", name,
                              text);
        }
        return ect__error(ECT_ERR_CONFIG, "model config: %s must be an integer, got %s", name,
                          json_type_name(item));
    }
    double v = item->valuedouble;
    /* The negated comparisons also catch NaN and infinities (1e999 parses
     * as inf); the bounds are far below 2^53, so the double is exact. */
    if (!(v >= (double)lo && v <= (double)hi) || v != floor(v))
        return ect__error(ECT_ERR_CONFIG,
                          "model config: %s = %.17g is not an integer in %" PRIu64 "..%" PRIu64,
                          name, v, lo, hi);
    *value_p = (uint64_t)v;
    return ECT_OK;
}

/* An optional width field: *value_p = 0 when absent. */
static ect_status_t
width_field(const cJSON *obj, const char *where, const char *key, uint64_t *value_p)
{
    const cJSON *item;
    ect_status_t s = member(obj, where, key, &item);
    if (s != ECT_OK)
        return s;
    if (item == NULL) {
        *value_p = 0;
        return ECT_OK;
    }
    char name[96];
    field_name(name, sizeof(name), where, key);
    return integer_in_range(item, name, 1, ECT_GEOMETRY_MAX_HIDDEN_DIM, value_p);
}

/* An optional string field: NULL when absent. */
static ect_status_t
string_field(const cJSON *obj, const char *where, const char *key, const char **value_p)
{
    const cJSON *item;
    ect_status_t s = member(obj, where, key, &item);
    if (s != ECT_OK)
        return s;
    if (item != NULL && !cJSON_IsString(item)) {
        char name[96];
        field_name(name, sizeof(name), where, key);
        return ect__error(ECT_ERR_CONFIG, "model config: %s must be a string, got %s", name,
                          json_type_name(item));
    }
    *value_p = item != NULL ? item->valuestring : NULL;
    return ECT_OK;
}

/* Width from the deepstack rule, or 0 if it does not apply. */
static ect_status_t
deepstack_width(const cJSON *vision, char *source, size_t source_len, uint64_t *width_p)
{
    *width_p = 0;
    if (vision == NULL)
        return ECT_OK;
    uint64_t out;
    ect_status_t s = width_field(vision, "vision_config", "out_hidden_size", &out);
    if (s != ECT_OK)
        return s;
    const cJSON *list;
    s = member(vision, "vision_config", "deepstack_visual_indexes", &list);
    if (s != ECT_OK)
        return s;
    if (list == NULL)
        return ECT_OK;
    if (!cJSON_IsArray(list))
        return ect__error(ECT_ERR_CONFIG,
                          "model config: vision_config.deepstack_visual_indexes must be an "
                          "array of layer indexes, got %s",
                          json_type_name(list));
    uint64_t n = 0;
    for (const cJSON *e = list->child; e != NULL; e = e->next, n++) {
        char name[96];
        uint64_t index;
        snprintf(name, sizeof(name), "vision_config.deepstack_visual_indexes[%" PRIu64 "]", n);
        s = integer_in_range(e, name, 0, MAX_LAYER_INDEX, &index);
        if (s != ECT_OK)
            return s;
    }
    /* vLLM applies the rule only with both fields and a non-empty list;
     * otherwise the text width stands. */
    if (n == 0 || out == 0)
        return ECT_OK;
    uint64_t width;
    if (__builtin_mul_overflow(out, n + 1, &width) || width > ECT_GEOMETRY_MAX_HIDDEN_DIM)
        return ect__error(ECT_ERR_CONFIG,
                          "model config: vision_config.out_hidden_size %" PRIu64 " x (1 + %" PRIu64
                          " deepstack layers) exceeds the limit of %" PRIu64,
                          out, n, ECT_GEOMETRY_MAX_HIDDEN_DIM);
    snprintf(source, source_len,
             "vision_config.out_hidden_size %" PRIu64 " x (1 + %" PRIu64 " deepstack layers)", out,
             n);
    *width_p = width;
    return ECT_OK;
}

/* The text model's width: hidden_size of the text config, or the default of
 * its model_type.  *width_p = 0 if neither exists; the caller decides whether
 * that matters (not when the deepstack rule applies).  *type_p: the text
 * config's model_type (borrowed from the tree) or NULL, for that message. */
static ect_status_t
text_width(const cJSON *text, const char *where, char *source, size_t source_len, uint64_t *width_p,
           const char **type_p)
{
    uint64_t width;
    const char *type;
    ect_status_t s = width_field(text, where, "hidden_size", &width);
    if (s != ECT_OK)
        return s;
    /* Type-checked even when hidden_size makes it unnecessary. */
    if ((s = string_field(text, where, "model_type", &type)) != ECT_OK)
        return s;
    *type_p = type;
    if (width != 0) {
        field_name(source, source_len, where, "hidden_size");
        *width_p = width;
        return ECT_OK;
    }
    *width_p = 0;
    for (size_t i = 0; type != NULL && i < sizeof(default_widths) / sizeof(default_widths[0]);
         i++) {
        if (strcmp(type, default_widths[i].model_type) == 0) {
            char name[40]; /* "llm_config.model_type" at most */
            field_name(name, sizeof(name), where, "model_type");
            snprintf(source, source_len, "default hidden_size %" PRIu64 " of %s '%s'",
                     default_widths[i].hidden_size, name, default_widths[i].model_type);
            *width_p = default_widths[i].hidden_size;
            break;
        }
    }
    return ECT_OK;
}

/* The dtype one object declares through torch_dtype and/or dtype (the newer
 * transformers name).  *has_p = 0 if neither is present. */
static ect_status_t
object_dtype(const cJSON *obj, const char *where, ect_dtype_t *dtype_p, int *has_p, char *source,
             size_t source_len)
{
    static const char *const keys[] = {"torch_dtype", "dtype"};
    int has = 0;
    ect_dtype_t first = ECT_DTYPE_BF16;
    char first_name[96] = "";
    for (size_t k = 0; k < 2; k++) {
        const char *text;
        ect_status_t s = string_field(obj, where, keys[k], &text);
        if (s != ECT_OK)
            return s;
        if (text == NULL)
            continue;
        char name[96];
        field_name(name, sizeof(name), where, keys[k]);
        ect_dtype_t dtype;
        if (ect_dtype_parse(text, &dtype) != ECT_OK)
            return ect__error(ECT_ERR_CONFIG, "model config: %s: %s", name, ect_last_error());
        if (has && dtype != first)
            return ect__error(ECT_ERR_CONFIG, "model config: %s '%s' contradicts %s '%s'", name,
                              ect_dtype_name(dtype), first_name, ect_dtype_name(first));
        if (!has) {
            has = 1;
            first = dtype;
            snprintf(first_name, sizeof(first_name), "%s", name);
        }
    }
    *has_p = has;
    if (has) {
        *dtype_p = first;
        snprintf(source, source_len, "%s", first_name);
    }
    return ECT_OK;
}

static ect_status_t
resolve(const cJSON *root, ect_hf_model_t *m)
{
    const char *type;
    ect_status_t s = string_field(root, "", "model_type", &type);
    if (s != ECT_OK)
        return s;
    if (type != NULL)
        copy_printable(m->model_type, sizeof(m->model_type), type);

    const cJSON *vision, *text = NULL;
    const char *text_where = "";
    if ((s = sub_object(root, "vision_config", &vision)) != ECT_OK)
        return s;
    if ((s = sub_object(root, "text_config", &text)) != ECT_OK)
        return s;
    if (text != NULL) {
        text_where = "text_config";
    } else {
        /* InternVL names its language model's config llm_config. */
        if ((s = sub_object(root, "llm_config", &text)) != ECT_OK)
            return s;
        text_where = text != NULL ? "llm_config" : "";
    }
    if (text == NULL)
        text = root;

    uint64_t deep, lm;
    const char *lm_type = NULL;
    char deep_source[ECT_HF_SOURCE_LEN] = "", lm_source[ECT_HF_SOURCE_LEN] = "";
    if ((s = deepstack_width(vision, deep_source, sizeof(deep_source), &deep)) != ECT_OK)
        return s;
    if ((s = text_width(text, text_where, lm_source, sizeof(lm_source), &lm, &lm_type)) != ECT_OK)
        return s;
    /* The top-level hidden_size is checked even where the text config's
     * width is the one used, so a broken value never passes unseen. */
    uint64_t top = 0;
    if (text != root && (s = width_field(root, "", "hidden_size", &top)) != ECT_OK)
        return s;
    if (deep != 0) {
        m->hidden_dim = deep;
        snprintf(m->hidden_dim_source, sizeof(m->hidden_dim_source), "%s", deep_source);
    } else {
        if (lm == 0) {
            char name[96], type_name[96], type_text[48];
            field_name(name, sizeof(name), text_where, "hidden_size");
            field_name(type_name, sizeof(type_name), text_where, "model_type");
            copy_printable(type_text, sizeof(type_text), lm_type != NULL ? lm_type : "");
            if (lm_type == NULL)
                return ect__error(ECT_ERR_CONFIG,
                                  "model config: %s is missing and there is no %s to take a "
                                  "default from; cannot tell the encoder-cache width",
                                  name, type_name);
            return ect__error(ECT_ERR_CONFIG,
                              "model config: %s is missing and %s '%s' has no known default "
                              "(known: llama, mistral, mixtral, qwen2, gemma3_text); cannot "
                              "tell the encoder-cache width",
                              name, type_name, type_text);
        }
        if (text != root && top != 0 && top != lm)
            return ect__error(ECT_ERR_CONFIG,
                              "model config: top-level hidden_size %" PRIu64
                              " contradicts the text model's width %" PRIu64 " (%s)",
                              top, lm, lm_source);
        m->hidden_dim = lm;
        snprintf(m->hidden_dim_source, sizeof(m->hidden_dim_source), "%s", lm_source);
    }

    ect_dtype_t top_dtype = ECT_DTYPE_BF16, text_dtype = ECT_DTYPE_BF16;
    int top_has = 0, text_has = 0;
    char top_source[ECT_HF_SOURCE_LEN] = "", text_source[ECT_HF_SOURCE_LEN] = "";
    if ((s = object_dtype(root, "", &top_dtype, &top_has, top_source, sizeof(top_source))) !=
        ECT_OK)
        return s;
    if (text != root && (s = object_dtype(text, text_where, &text_dtype, &text_has, text_source,
                                          sizeof(text_source))) != ECT_OK)
        return s;
    if (top_has && text_has && top_dtype != text_dtype)
        return ect__error(ECT_ERR_CONFIG, "model config: %s '%s' contradicts %s '%s'", top_source,
                          ect_dtype_name(top_dtype), text_source, ect_dtype_name(text_dtype));
    if (top_has || text_has) {
        m->has_dtype = 1;
        m->dtype = top_has ? top_dtype : text_dtype;
        snprintf(m->dtype_source, sizeof(m->dtype_source), "%s",
                 top_has ? top_source : text_source);
    }
    return ECT_OK;
}

/* 1-based line and column of byte offset off, for parse-error messages. */
static void
line_col(const char *text, size_t off, size_t *line_p, size_t *col_p)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    *line_p = line;
    *col_p = col;
}

ect_status_t
ect_hf_config_parse(const char *json, size_t len, ect_hf_model_t *model_p)
{
    if (model_p == NULL || (json == NULL && len > 0))
        return ect__error(ECT_ERR_INVALID_ARG, "model config parse: NULL argument");
    size_t start = 0;
    while (start < len && is_space(json[start]))
        start++;
    if (start == len)
        return ect__error(ECT_ERR_PARSE, "model config is empty");

    /* cJSON gets a private NUL-terminated copy: the caller's bytes need not
     * end in NUL, and any read one past the end then stops at a NUL. */
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "model config: cannot allocate %zu bytes", len + 1);
    memcpy(copy, json, len);
    copy[len] = '\0';

    ect_status_t s;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    if (root == NULL) {
        size_t off = end != NULL && end >= copy && end <= copy + len ? (size_t)(end - copy) : 0;
        size_t line, col;
        line_col(copy, off, &line, &col);
        s = ect__error(ECT_ERR_PARSE,
                       "model config is not valid JSON (error at line %zu, column %zu)", line, col);
        goto out_free_copy;
    }
    size_t off = (size_t)(end - copy);
    while (off < len && is_space(copy[off]))
        off++;
    if (off != len) {
        size_t line, col;
        line_col(copy, off, &line, &col);
        s = ect__error(ECT_ERR_PARSE,
                       "model config has trailing data after the JSON value (line %zu, column %zu)",
                       line, col);
        goto out_delete_root;
    }
    if (!cJSON_IsObject(root)) {
        s = ect__error(ECT_ERR_PARSE, "model config must be a JSON object, got %s",
                       json_type_name(root));
        goto out_delete_root;
    }

    ect_hf_model_t m;
    memset(&m, 0, sizeof(m));
    s = resolve(root, &m);
    if (s == ECT_OK)
        *model_p = m;

out_delete_root:
    cJSON_Delete(root);
out_free_copy:
    free(copy);
    return s;
}

/* Read all of fd, at most ECT_HF_CONFIG_MAX_BYTES.  Reads in a loop rather
 * than trusting st_size, so pipes and /proc-like files work too. */
static ect_status_t
read_all(int fd, const char *path, char **buf_p, size_t *len_p)
{
    size_t cap = 64 * 1024, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: cannot allocate a read buffer", path);
    for (;;) {
        if (len == cap) {
            if (cap > ECT_HF_CONFIG_MAX_BYTES) {
                free(buf);
                return ect__error(ECT_ERR_OVERFLOW,
                                  "%s: larger than the %u MiB limit for a model config", path,
                                  ECT_HF_CONFIG_MAX_BYTES >> 20);
            }
            /* One byte past the limit is enough to tell "too large". */
            size_t ncap = cap * 2 > (size_t)ECT_HF_CONFIG_MAX_BYTES + 1
                              ? (size_t)ECT_HF_CONFIG_MAX_BYTES + 1
                              : cap * 2;
            char *nbuf = realloc(buf, ncap);
            if (nbuf == NULL) {
                free(buf);
                return ect__error(ECT_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes", path, ncap);
            }
            buf = nbuf;
            cap = ncap;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            ect_status_t s = ect__error_errno(ECT_ERR_IO, "%s: read failed", path);
            free(buf);
            return s;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > ECT_HF_CONFIG_MAX_BYTES) {
        free(buf);
        return ect__error(ECT_ERR_OVERFLOW, "%s: larger than the %u MiB limit for a model config",
                          path, ECT_HF_CONFIG_MAX_BYTES >> 20);
    }
    *buf_p = buf;
    *len_p = len;
    return ECT_OK;
}

ect_status_t
ect_hf_config_load(const char *path, ect_hf_model_t *model_p)
{
    if (path == NULL || model_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "model config load: NULL argument");
    char file[4096];
    struct stat st;
    if (snprintf(file, sizeof(file), "%s", path) >= (int)sizeof(file))
        return ect__error(ECT_ERR_INVALID_ARG, "model config path is longer than %zu bytes",
                          sizeof(file) - 1);
    /* A model snapshot directory holds its config as config.json. */
    if (stat(file, &st) == 0 && S_ISDIR(st.st_mode) &&
        snprintf(file, sizeof(file), "%s/config.json", path) >= (int)sizeof(file))
        return ect__error(ECT_ERR_INVALID_ARG, "model config path is longer than %zu bytes",
                          sizeof(file) - 1);

    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return ect__error(ECT_ERR_NOT_FOUND, "%s: no such model config file", file);
        return ect__error_errno(ECT_ERR_IO, "%s: cannot open", file);
    }
    char *buf = NULL;
    size_t len = 0;
    ect_status_t s;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        s = ect__error(ECT_ERR_IO, "%s: is a directory, not a model config file", file);
        goto out_close;
    }
    if ((s = read_all(fd, file, &buf, &len)) != ECT_OK)
        goto out_close;
    s = ect_hf_config_parse(buf, len, model_p);
    if (s != ECT_OK)
        s = ect__error(s, "%s: %s", file, ect_last_error());
    free(buf);
out_close:
    close(fd);
    return s;
}
