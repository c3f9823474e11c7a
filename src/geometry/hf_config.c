/*
 * The encoder-cache width and declared dtype of a HuggingFace config.json
 * (ect_hf_config_parse / ect_hf_config_load in include/ectier/geometry.h).
 *
 * The rules are the engine's (vLLM): its CPU connector sizes a block from the
 * deepstack rule or from ModelConfig.get_inputs_embeds_size() on the text
 * config, and takes the model dtype from the top level first.  Where the
 * engine finds the text config is spelled out in one table (lm_configs) so
 * the order is written down once.
 *
 * The file comes from outside, so nothing about its shape is assumed: every
 * member read is looked up by exact name, type-checked and range-checked, and
 * a key repeated in one object with different values is reported rather than
 * resolved silently (Python's json keeps the last one, cJSON the first; a
 * file that means two things must not get a third meaning here).
 * Results are built in a local ect_hf_model_t and copied out only on success.
 * No state, no locks; the one side effect is a warning through the log sink
 * when the top-level and text-config dtypes disagree.
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

#include "common/alloc.h"
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

#define N_DEFAULT_WIDTHS (sizeof(default_widths) / sizeof(default_widths[0]))

/* Where the engine finds the language model's config, in its order:
 *  - thinker_config.text_config: omni models (Qwen2.5-Omni); vLLM's
 *    get_hf_text_config looks there first and transformers' omni configs
 *    return it from get_text_config();
 *  - text_config: transformers' PretrainedConfig.get_text_config();
 *  - llm_config: InternVL, Ovis, NVLM; vLLM remaps it to text_config when
 *    text_config is absent (_CONFIG_ATTRS_MAPPING);
 *  - language_config: DeepSeek-VL2, Janus; vLLM's own config class builds
 *    text_config from it.
 * A file without any of them is its own text config (Qwen2-VL, MiniCPM-V).
 * transformers' encoder-decoder names (decoder, generator, text_encoder)
 * belong to models the encoder cache does not serve and are not looked at. */
static const struct {
    const char *parent; /* NULL: a member of the top level */
    const char *key;
    const char *name; /* for messages */
} lm_configs[] = {
    {"thinker_config", "text_config", "thinker_config.text_config"},
    {NULL, "text_config", "text_config"},
    {NULL, "llm_config", "llm_config"},
    {NULL, "language_config", "language_config"},
};

#define N_LM_CONFIGS (sizeof(lm_configs) / sizeof(lm_configs[0]))

/* The same list for the message about a file that has none of them. */
#define LM_CONFIG_NAMES "text_config, llm_config, language_config or thinker_config.text_config"

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
sub_object(const cJSON *obj, const char *where, const char *key, const cJSON **sub_p)
{
    const cJSON *item;
    ect_status_t s = member(obj, where, key, &item);
    if (s != ECT_OK)
        return s;
    if (item != NULL && !cJSON_IsObject(item)) {
        char name[96];
        field_name(name, sizeof(name), where, key);
        return ect__error(ECT_ERR_CONFIG, "model config: %s must be an object, got %s", name,
                          json_type_name(item));
    }
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

/* Width from the deepstack rule applied to the vision config at where
 * ("vision_config"), or 0 if the rule does not apply to it. */
static ect_status_t
deepstack_width(const cJSON *vision, const char *where, char *source, size_t source_len,
                uint64_t *width_p)
{
    *width_p = 0;
    if (vision == NULL)
        return ECT_OK;
    uint64_t out;
    ect_status_t s = width_field(vision, where, "out_hidden_size", &out);
    if (s != ECT_OK)
        return s;
    const cJSON *list;
    s = member(vision, where, "deepstack_visual_indexes", &list);
    if (s != ECT_OK)
        return s;
    if (list == NULL)
        return ECT_OK;
    if (!cJSON_IsArray(list))
        return ect__error(ECT_ERR_CONFIG,
                          "model config: %s.deepstack_visual_indexes must be an array of layer "
                          "indexes, got %s",
                          where, json_type_name(list));
    uint64_t n = 0;
    for (const cJSON *e = list->child; e != NULL; e = e->next, n++) {
        char name[96];
        uint64_t index;
        snprintf(name, sizeof(name), "%s.deepstack_visual_indexes[%" PRIu64 "]", where, n);
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
                          "model config: %s.out_hidden_size %" PRIu64 " x (1 + %" PRIu64
                          " deepstack layers) exceeds the limit of %" PRIu64,
                          where, out, n, ECT_GEOMETRY_MAX_HIDDEN_DIM);
    snprintf(source, source_len,
             "%s.out_hidden_size %" PRIu64 " x (1 + %" PRIu64 " deepstack layers)", where, out, n);
    *width_p = width;
    return ECT_OK;
}

/* What one text config says about the width. */
struct text_width {
    uint64_t width;  /* what the engine uses; 0 if the config gives none */
    uint64_t hidden; /* hidden_size or its model_type default; 0 if neither */
    char source[ECT_HF_SOURCE_LEN];
    char hidden_source[ECT_HF_SOURCE_LEN];
    const char *model_type; /* borrowed from the tree, or NULL */
};

/* The text model's width as the engine's get_inputs_embeds_size() gives it:
 * projection_dim, else projection_size (embedding models project their
 * inputs), else hidden_size, else the default hidden_size of its model_type
 * for the few whose default is fixed.  Every one of those fields is
 * type-checked even when an earlier one decides. */
static ect_status_t
text_width(const cJSON *text, const char *where, struct text_width *tw)
{
    uint64_t proj_dim, proj_size;
    ect_status_t s;
    memset(tw, 0, sizeof(*tw));
    if ((s = width_field(text, where, "projection_dim", &proj_dim)) != ECT_OK ||
        (s = width_field(text, where, "projection_size", &proj_size)) != ECT_OK ||
        (s = width_field(text, where, "hidden_size", &tw->hidden)) != ECT_OK ||
        (s = string_field(text, where, "model_type", &tw->model_type)) != ECT_OK)
        return s;
    if (tw->hidden != 0) {
        field_name(tw->hidden_source, sizeof(tw->hidden_source), where, "hidden_size");
    } else {
        for (size_t i = 0; tw->model_type != NULL && i < N_DEFAULT_WIDTHS; i++) {
            if (strcmp(tw->model_type, default_widths[i].model_type) != 0)
                continue;
            char name[64];
            field_name(name, sizeof(name), where, "model_type");
            snprintf(tw->hidden_source, sizeof(tw->hidden_source),
                     "default hidden_size %" PRIu64 " of %s '%s'", default_widths[i].hidden_size,
                     name, default_widths[i].model_type);
            tw->hidden = default_widths[i].hidden_size;
            break;
        }
    }
    if (proj_dim != 0) {
        tw->width = proj_dim;
        field_name(tw->source, sizeof(tw->source), where, "projection_dim");
    } else if (proj_size != 0) {
        tw->width = proj_size;
        field_name(tw->source, sizeof(tw->source), where, "projection_size");
    } else {
        tw->width = tw->hidden;
        snprintf(tw->source, sizeof(tw->source), "%s", tw->hidden_source);
    }
    return ECT_OK;
}

/* The error for a text config that gives no width. */
static ect_status_t
missing_width(const struct text_width *tw, const char *where)
{
    char name[96], type_name[96], type_text[48], known[128] = "";
    field_name(name, sizeof(name), where, "hidden_size");
    field_name(type_name, sizeof(type_name), where, "model_type");
    /* At the top level the width could also have been in a sub-config. */
    const char *elsewhere = *where ? "" : "; nor is there a " LM_CONFIG_NAMES;
    if (tw->model_type == NULL)
        return ect__error(ECT_ERR_CONFIG,
                          "model config: %s is missing and there is no %s to take a default "
                          "from%s; cannot tell the encoder-cache width",
                          name, type_name, elsewhere);
    for (size_t i = 0, off = 0; i < N_DEFAULT_WIDTHS && off < sizeof(known); i++) {
        int n = snprintf(known + off, sizeof(known) - off, "%s%s", i ? ", " : "",
                         default_widths[i].model_type);
        off += n > 0 ? (size_t)n : 0;
    }
    copy_printable(type_text, sizeof(type_text), tw->model_type);
    return ect__error(ECT_ERR_CONFIG,
                      "model config: %s is missing and %s '%s' has no known default (known: "
                      "%s)%s; cannot tell the encoder-cache width",
                      name, type_name, type_text, known, elsewhere);
}

/* The dtype one object declares through torch_dtype and/or dtype (the newer
 * transformers name); has = 0 if neither is present.  The two keys in one
 * object must agree: which one transformers keeps depends on its version. */
struct dtype_decl {
    int has;
    ect_dtype_t dtype;
    char source[ECT_HF_SOURCE_LEN];
};

static ect_status_t
object_dtype(const cJSON *obj, const char *where, struct dtype_decl *d)
{
    static const char *const keys[] = {"torch_dtype", "dtype"};
    memset(d, 0, sizeof(*d));
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
        if (d->has && dtype != d->dtype)
            return ect__error(ECT_ERR_CONFIG, "model config: %s '%s' contradicts %s '%s'", name,
                              ect_dtype_name(dtype), d->source, ect_dtype_name(d->dtype));
        if (!d->has) {
            d->has = 1;
            d->dtype = dtype;
            snprintf(d->source, sizeof(d->source), "%s", name);
        }
    }
    return ECT_OK;
}

/* The model dtype in the engine's order (vLLM's _find_dtype): the top level,
 * then the text config, then vision_config, then encoder_config.  The first
 * declaration wins.  A text config that disagrees with the top level does
 * not make the file unusable (the engine serves it with the top-level
 * dtype), so it is a warning naming both; the later fallbacks are read only
 * when nothing before them declares a dtype. */
static ect_status_t
resolve_dtype(const cJSON *root, const cJSON *text, const char *text_where, const cJSON *vision,
              const char *origin, ect_hf_model_t *m)
{
    struct dtype_decl top, txt, d;
    ect_status_t s;
    if ((s = object_dtype(root, "", &top)) != ECT_OK)
        return s;
    memset(&txt, 0, sizeof(txt));
    if (text != root && (s = object_dtype(text, text_where, &txt)) != ECT_OK)
        return s;
    if (top.has && txt.has && top.dtype != txt.dtype)
        ECT_LOG_W("%s%smodel config: %s '%s' and %s '%s' disagree; using %s '%s', as the "
                  "engine does",
                  origin ? origin : "", origin ? ": " : "", top.source, ect_dtype_name(top.dtype),
                  txt.source, ect_dtype_name(txt.dtype), top.source, ect_dtype_name(top.dtype));
    d = top.has ? top : txt;
    if (!d.has && vision != NULL && (s = object_dtype(vision, "vision_config", &d)) != ECT_OK)
        return s;
    if (!d.has) {
        const cJSON *encoder;
        if ((s = sub_object(root, "", "encoder_config", &encoder)) != ECT_OK)
            return s;
        if (encoder != NULL && (s = object_dtype(encoder, "encoder_config", &d)) != ECT_OK)
            return s;
    }
    if (d.has) {
        m->has_dtype = 1;
        m->dtype = d.dtype;
        snprintf(m->dtype_source, sizeof(m->dtype_source), "%s", d.source);
    }
    return ECT_OK;
}

/* The language model's configs the file has, in the engine's order
 * (lm_configs); the first is the one the engine uses. */
struct lm_found {
    const cJSON *obj;
    const char *where;
};

static ect_status_t
find_lm_configs(const cJSON *root, struct lm_found *found, size_t *n_p)
{
    size_t n = 0;
    for (size_t i = 0; i < N_LM_CONFIGS; i++) {
        const cJSON *parent = root, *sub;
        ect_status_t s;
        if (lm_configs[i].parent != NULL) {
            if ((s = sub_object(root, "", lm_configs[i].parent, &parent)) != ECT_OK)
                return s;
            if (parent == NULL)
                continue;
        }
        const char *where = lm_configs[i].parent != NULL ? lm_configs[i].parent : "";
        if ((s = sub_object(parent, where, lm_configs[i].key, &sub)) != ECT_OK)
            return s;
        if (sub == NULL && parent != root)
            return ect__error(ECT_ERR_CONFIG,
                              "model config: %s has no %s object; cannot find the language "
                              "model's settings",
                              lm_configs[i].parent, lm_configs[i].key);
        if (sub != NULL)
            found[n++] = (struct lm_found){sub, lm_configs[i].name};
    }
    *n_p = n;
    return ECT_OK;
}

static ect_status_t
resolve(const cJSON *root, const char *origin, ect_hf_model_t *m)
{
    const char *type;
    ect_status_t s = string_field(root, "", "model_type", &type);
    if (s != ECT_OK)
        return s;
    if (type != NULL)
        copy_printable(m->model_type, sizeof(m->model_type), type);

    const cJSON *vision;
    struct lm_found found[N_LM_CONFIGS];
    size_t n_found = 0;
    if ((s = sub_object(root, "", "vision_config", &vision)) != ECT_OK)
        return s;
    if ((s = find_lm_configs(root, found, &n_found)) != ECT_OK)
        return s;
    const cJSON *text = n_found > 0 ? found[0].obj : root;
    const char *text_where = n_found > 0 ? found[0].where : "";

    uint64_t deep;
    char deep_source[ECT_HF_SOURCE_LEN] = "";
    struct text_width lm;
    /* The engine reads the deepstack rule from the top-level vision_config
     * only (hf_config.vision_config). */
    if ((s = deepstack_width(vision, "vision_config", deep_source, sizeof(deep_source), &deep)) !=
        ECT_OK)
        return s;
    if ((s = text_width(text, text_where, &lm)) != ECT_OK)
        return s;
    if (deep == 0 && lm.width == 0)
        return missing_width(&lm, text_where);
    /* A second language-model config is harmless only if it agrees. */
    for (size_t i = 1; i < n_found; i++) {
        struct text_width other;
        if ((s = text_width(found[i].obj, found[i].where, &other)) != ECT_OK)
            return s;
        if (other.width != 0 && lm.width != 0 && other.width != lm.width)
            return ect__error(ECT_ERR_CONFIG,
                              "model config: %s and %s both describe the language model and "
                              "disagree on its width: %" PRIu64 " (%s) against %" PRIu64 " (%s)",
                              found[0].where, found[i].where, lm.width, lm.source, other.width,
                              other.source);
    }
    /* An omni model keeps its vision encoder in thinker_config, where the
     * engine's deepstack rule does not look: if that encoder concatenates
     * deepstack features the engine would size rows for the text width
     * alone and cut every encoding short, so refuse rather than follow. */
    if (n_found > 0 && strcmp(found[0].where, "thinker_config.text_config") == 0) {
        const cJSON *thinker, *tvision;
        uint64_t tdeep;
        char tsource[ECT_HF_SOURCE_LEN];
        if ((s = sub_object(root, "", "thinker_config", &thinker)) != ECT_OK ||
            (s = sub_object(thinker, "thinker_config", "vision_config", &tvision)) != ECT_OK ||
            (s = deepstack_width(tvision, "thinker_config.vision_config", tsource, sizeof(tsource),
                                 &tdeep)) != ECT_OK)
            return s;
        if (tdeep != 0 && deep == 0)
            return ect__error(ECT_ERR_CONFIG,
                              "model config: the vision encoder emits rows of %" PRIu64
                              " elements (%s), but the engine reads the deepstack rule from a "
                              "top-level vision_config only and would size rows of %" PRIu64
                              " (%s); refusing the file rather than truncate encodings",
                              tdeep, tsource, lm.width, lm.source);
    }
    /* The top-level hidden_size is checked even where the text config's
     * width is the one used, so a broken value never passes unseen. */
    uint64_t top = 0;
    if (text != root && (s = width_field(root, "", "hidden_size", &top)) != ECT_OK)
        return s;
    if (deep != 0) {
        m->hidden_dim = deep;
        snprintf(m->hidden_dim_source, sizeof(m->hidden_dim_source), "%s", deep_source);
    } else {
        if (text != root && top != 0 && lm.hidden != 0 && top != lm.hidden)
            return ect__error(ECT_ERR_CONFIG,
                              "model config: top-level hidden_size %" PRIu64
                              " contradicts the text model's width %" PRIu64 " (%s)",
                              top, lm.hidden, lm.hidden_source);
        m->hidden_dim = lm.width;
        snprintf(m->hidden_dim_source, sizeof(m->hidden_dim_source), "%s", lm.source);
    }
    return resolve_dtype(root, text, text_where, vision, origin, m);
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

/* ect_hf_config_parse, with origin (the file, or NULL) prefixed to the
 * warnings it logs. */
static ect_status_t
parse(const char *json, size_t len, const char *origin, ect_hf_model_t *model_p)
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
    char *copy = ect__malloc(len + 1);
    if (copy == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "model config: cannot allocate %zu bytes", len + 1);
    memcpy(copy, json, len);
    copy[len] = '\0';

    ect_status_t s;
    const char *end = NULL;
    unsigned long failures = ect__alloc_thread_failures();
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    if (root == NULL && ect__alloc_thread_failures() != failures) {
        s = ect__error(ECT_ERR_NO_MEMORY, "model config: out of memory parsing JSON");
        goto out_free_copy;
    }
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
    s = resolve(root, origin, &m);
    if (s == ECT_OK)
        *model_p = m;

out_delete_root:
    cJSON_Delete(root);
out_free_copy:
    ect__free(copy);
    return s;
}

ect_status_t
ect_hf_config_parse(const char *json, size_t len, ect_hf_model_t *model_p)
{
    return parse(json, len, NULL, model_p);
}

/* Read all of fd, at most ECT_HF_CONFIG_MAX_BYTES.  Reads in a loop rather
 * than trusting st_size, so pipes and /proc-like files work too. */
static ect_status_t
read_all(int fd, const char *path, char **buf_p, size_t *len_p)
{
    size_t cap = 64 * 1024, len = 0;
    char *buf = ect__malloc(cap);
    if (buf == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: cannot allocate a read buffer", path);
    for (;;) {
        if (len == cap) {
            if (cap > ECT_HF_CONFIG_MAX_BYTES) {
                ect__free(buf);
                return ect__error(ECT_ERR_OVERFLOW,
                                  "%s: larger than the %u MiB limit for a model config", path,
                                  ECT_HF_CONFIG_MAX_BYTES >> 20);
            }
            /* One byte past the limit is enough to tell "too large". */
            size_t ncap = cap * 2 > (size_t)ECT_HF_CONFIG_MAX_BYTES + 1
                              ? (size_t)ECT_HF_CONFIG_MAX_BYTES + 1
                              : cap * 2;
            char *nbuf = ect__realloc(buf, ncap);
            if (nbuf == NULL) {
                ect__free(buf);
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
            ect__free(buf);
            return s;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > ECT_HF_CONFIG_MAX_BYTES) {
        ect__free(buf);
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
    s = parse(buf, len, file, model_p);
    if (s != ECT_OK)
        s = ect__error(s, "%s: %s", file, ect_last_error());
    ect__free(buf);
out_close:
    close(fd);
    return s;
}
