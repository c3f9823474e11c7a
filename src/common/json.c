/*
 * Strict reading of outside JSON text (common/json.h): the byte checks
 * before cJSON, the parse, duplicate keys and exact integers.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/json.h"
#include "common/settings.h"
#include "common/utf8.h"

/* Length of the JSON number at s (RFC 8259: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?),
 * or 0 if the text there is not one.  cJSON alone would take "0123" or "1.". */
static size_t
json_number_len(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i < n && s[i] == '0') {
        i++;
    } else if (i < n && s[i] >= '1' && s[i] <= '9') {
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
    } else {
        return 0;
    }
    if (i < n && s[i] == '.') {
        size_t start = ++i;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
        if (i == start)
            return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t start = i;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
        if (i == start)
            return 0;
    }
    /* A number runs until a delimiter; "01" or "1.2.3" leave junk here. */
    if (i < n && (isalnum((unsigned char)s[i]) || s[i] == '.' || s[i] == '+' || s[i] == '-'))
        return 0;
    return i;
}

static ect_status_t
precheck(const char *what, const char *json, size_t len, size_t max_len)
{
    size_t bad;
    bool in_string = false, escaped = false;
    unsigned depth = 0;

    if (len == 0)
        return ect__error(ECT_ERR_PARSE, "%s is empty: expected a JSON object", what);
    if (len > max_len)
        return ect__error(ECT_ERR_PARSE, "%s is %zu bytes: at most %zu are accepted", what, len,
                          max_len);
    if (!ect__utf8_valid(json, len, &bad))
        return ect__error(ECT_ERR_PARSE, "%s is not valid UTF-8: bad byte 0x%02x at offset %zu",
                          what, (unsigned char)json[bad], bad);
    for (size_t i = 0; i < len; i++) {
        char c = json[i];
        if (c == '\0')
            return ect__error(ECT_ERR_PARSE, "%s has a NUL byte at offset %zu", what, i);
        if (in_string) {
            if (escaped) {
                escaped = false;
                if (c == 'u' && len - i > 4 && memcmp(json + i + 1, "0000", 4) == 0)
                    return ect__error(ECT_ERR_PARSE,
                                      "%s has an escaped NUL (\\u0000) in a string at offset "
                                      "%zu: not allowed in keys or values",
                                      what, i - 1);
            } else if (c == '\\') {
                escaped = true;
            } else if (c == '"') {
                in_string = false;
            } else if ((unsigned char)c < 0x20) {
                return ect__error(ECT_ERR_PARSE,
                                  "%s is not valid JSON: raw control character 0x%02x in a "
                                  "string at offset %zu (write it as an escape)",
                                  what, (unsigned char)c, i);
            }
        } else if (c == '-' || isdigit((unsigned char)c)) {
            size_t k = json_number_len(json + i, len - i);
            if (k == 0)
                return ect__error(ECT_ERR_PARSE,
                                  "%s is not valid JSON: malformed number at offset %zu", what, i);
            i += k - 1;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > ECT_JSON_DEPTH_MAX)
                return ect__error(ECT_ERR_PARSE,
                                  "%s nests arrays or objects more than %d deep (offset %zu)", what,
                                  ECT_JSON_DEPTH_MAX, i);
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return ECT_OK;
}

static ect_status_t
parse_json(const char *what, const char *json, size_t len, cJSON **root_p)
{
    const char *end = NULL;
    char q[128];
    unsigned long failures = ect__alloc_thread_failures();
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (root == NULL && ect__alloc_thread_failures() != failures)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory parsing JSON", what);
    if (root == NULL) {
        size_t off = end != NULL && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return ect__error(ECT_ERR_PARSE, "%s is not valid JSON: error at offset %zu near %s", what,
                          off,
                          ect__quote(q, sizeof(q), json + off, len - off > 20 ? 20 : len - off));
    }
    /* cJSON stops after the first value; anything but white space after it
     * is a second value or garbage. */
    size_t off = (size_t)(end - json);
    while (off < len && strchr(" \t\r\n", json[off]) != NULL)
        off++;
    if (off < len) {
        cJSON_Delete(root);
        return ect__error(ECT_ERR_PARSE, "%s has text after the JSON value at offset %zu: %s", what,
                          off,
                          ect__quote(q, sizeof(q), json + off, len - off > 20 ? 20 : len - off));
    }
    *root_p = root;
    return ECT_OK;
}

ect_status_t
ect__json_check_keys(const char *what, const cJSON *obj, const char *where)
{
    size_t count = 0;
    char q[128];
    for (const cJSON *a = obj->child; a != NULL; a = a->next) {
        if (++count > ECT_JSON_KEYS_MAX)
            return ect__error(ECT_ERR_CONFIG, "%s has more than %d keys %s", what,
                              ECT_JSON_KEYS_MAX, where);
        for (const cJSON *b = obj->child; b != a; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                return ect__error(ECT_ERR_CONFIG, "%s has the key %s twice %s: give each key once",
                                  what, ect__quote(q, sizeof(q), a->string, strlen(a->string)),
                                  where);
    }
    return ECT_OK;
}

ect_status_t
ect__json_parse(const char *what, const char *json, size_t len, size_t max_len, cJSON **root_p)
{
    if ((json == NULL && len != 0) || root_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL argument", what);
    ect_status_t s = precheck(what, json, len, max_len);
    return s != ECT_OK ? s : parse_json(what, json, len, root_p);
}

bool
ect__json_put(cJSON *obj, const char *key, cJSON *item)
{
    if (item == NULL)
        return false;
    if (obj != NULL &&
        (key != NULL ? cJSON_AddItemToObject(obj, key, item) : cJSON_AddItemToArray(obj, item)))
        return true;
    cJSON_Delete(item);
    return false;
}

cJSON *
ect__json_uint_new(uint64_t v)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return cJSON_CreateRaw(text);
}

bool
ect__json_put_uint(cJSON *obj, const char *key, uint64_t v)
{
    return ect__json_put(obj, key, ect__json_uint_new(v));
}

int
ect__json_uint(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *v_p)
{
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return -1;
    double v = item->valuedouble;
    if (v < (double)lo || v > (double)hi || floor(v) != v)
        return -1;
    *v_p = (uint64_t)v;
    return 0;
}
