/*
 * The converters every setting's value goes through (the table is in
 * settings.c): text (the environment, a row's default) and JSON into an
 * ect_config_t field, each checked against its row's type and limits, and
 * the checks and comparison of a whole field.
 *
 * Invariants: every message names the key (or variable), the value as given
 * and what is allowed; a field is written only after its value passed every
 * check.  Nothing here has state.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "common/settings.h"

/* Enum fields are written through an int; both enums have int's size. */
_Static_assert(sizeof(ect_role_t) == sizeof(int), "ect_role_t must be int-sized");
_Static_assert(sizeof(ect_transport_t) == sizeof(int), "ect_transport_t must be int-sized");

/* Below this every integer is exact in a double, so a JSON number under it
 * was written as exactly this integer (or with a fraction we can see). */
#define EXACT_INT_LIMIT 9007199254740992.0 /* 2^53 */

static void *
field_of(const struct ect__setting *row, ect_config_t *cfg)
{
    return (char *)cfg + row->offset;
}

static const void *
cfield_of(const struct ect__setting *row, const ect_config_t *cfg)
{
    return (const char *)cfg + row->offset;
}

/* What the row accepts, for messages. */
static const char *
allowed_text(const struct ect__setting *row, char *buf, size_t cap)
{
    struct ect__text t = {buf, cap, 0};
    char lo[32], hi[32];
    switch (row->type) {
    case ECT_SETTING_SIZE:
        ect__text_printf(&t,
                         "a positive number of bytes, at most %s (%s): a JSON integer or a "
                         "string such as \"8GiB\"",
                         ect__format_double(hi, sizeof(hi), row->max),
                         ect__human_size(lo, sizeof(lo), (uint64_t)row->max));
        break;
    case ECT_SETTING_BOOL:
        ect__text_printf(&t, "true or false, or one of the strings \"true\", \"1\", \"yes\", "
                             "\"false\", \"0\", \"no\", \"\"");
        break;
    case ECT_SETTING_SECONDS:
        ect__text_printf(&t, "a number of seconds %s %s and <= %s",
                         row->min_open ? ">" : ">=", ect__format_double(lo, sizeof(lo), row->min),
                         ect__format_double(hi, sizeof(hi), row->max));
        break;
    case ECT_SETTING_UINT:
    case ECT_SETTING_PORT:
        ect__text_printf(&t, "an integer from %s to %s%s",
                         ect__format_double(lo, sizeof(lo), row->min),
                         ect__format_double(hi, sizeof(hi), row->max),
                         row->type == ECT_SETTING_PORT ? " (0 picks a free port)" : "");
        break;
    case ECT_SETTING_STRING:
        ect__text_printf(&t, "a string of at most %zu bytes", row->size - 1);
        break;
    case ECT_SETTING_ENUM:
        ect__text_printf(&t, "one of");
        for (size_t i = 0; i < row->n_choices; i++)
            ect__text_printf(&t, "%s \"%s\"", i ? "," : "", row->choices[i]);
        break;
    case ECT_SETTING_OBJECT:
        ect__text_printf(&t, "a JSON object");
        break;
    }
    return buf;
}

static ect_status_t
not_allowed(const struct ect__setting *row, const char *label, const char *shown, const char *why)
{
    char allowed[256];
    return ect__error(ECT_ERR_CONFIG, "%s = %s %s: use %s", label, shown, why,
                      allowed_text(row, allowed, sizeof(allowed)));
}

/* Numeric limits shared by every source; shown is the value as given. */
static ect_status_t
check_limits(const struct ect__setting *row, const char *label, double v, const char *shown)
{
    bool low_ok = row->min_open ? v > row->min : v >= row->min;
    if (!(low_ok && v <= row->max)) /* also refuses NaN */
        return not_allowed(row, label, shown, "is out of range");
    return ECT_OK;
}

static ect_status_t
missing_value(const struct ect__setting *row, const char *label, const char *shown)
{
    if (row->missing != NULL)
        return ect__error(ECT_ERR_CONFIG,
                          "%s (got %s = %s); give a positive size such as 8589934592 or \"8GiB\"",
                          row->missing, label, shown);
    return not_allowed(row, label, shown, "is not allowed");
}

static ect_status_t
store_size(const struct ect__setting *row, const char *label, uint64_t v, const char *shown,
           ect_config_t *cfg)
{
    char lim[32], human[32];
    if (v == 0)
        return missing_value(row, label, shown);
    if ((double)v > row->max)
        return ect__error(ECT_ERR_CONFIG,
                          "%s = %s (%llu bytes) is above the limit of %s bytes (%s)", label, shown,
                          (unsigned long long)v, ect__format_double(lim, sizeof(lim), row->max),
                          ect__human_size(human, sizeof(human), (uint64_t)row->max));
    memcpy(field_of(row, cfg), &v, sizeof(v));
    return ECT_OK;
}

static ect_status_t
store_integer(const struct ect__setting *row, const char *label, double v, const char *shown,
              ect_config_t *cfg)
{
    ect_status_t s = check_limits(row, label, v, shown);
    if (s != ECT_OK)
        return s;
    if (row->type == ECT_SETTING_PORT) {
        uint16_t port = (uint16_t)v;
        memcpy(field_of(row, cfg), &port, sizeof(port));
    } else {
        unsigned u = (unsigned)v;
        memcpy(field_of(row, cfg), &u, sizeof(u));
    }
    return ECT_OK;
}

/* Trim ASCII white space; returns the start and sets *len_p. */
static const char *
trim(const char *s, size_t *len_p)
{
    size_t len = strlen(s);
    while (len > 0 && isspace((unsigned char)*s)) {
        s++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    *len_p = len;
    return s;
}

/* 1 true, 0 false, -1 neither. */
static int
bool_word(const char *text)
{
    static const char *const yes[] = {"true", "1", "yes"};
    static const char *const no[] = {"false", "0", "no", ""};
    size_t len;
    const char *s = trim(text, &len);
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (len == strlen(yes[i]) && strncasecmp(s, yes[i], len) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (len == strlen(no[i]) && strncasecmp(s, no[i], len) == 0)
            return 0;
    return -1;
}

/* Digits only ("" is not a number); values past 2^64 - 1 saturate, which
 * every limit then refuses. */
static bool
parse_decimal(const char *s, size_t len, uint64_t *v_p)
{
    uint64_t v = 0;
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    *v_p = v;
    return true;
}

/* A decimal number in text (after trimming): digits, sign, point and
 * exponent only, so "inf", "nan" and hex are refused. */
static bool
number_text(const char *text, double *v_p)
{
    char buf[64];
    size_t len;
    const char *s = trim(text, &len);
    if (len == 0 || len >= sizeof(buf))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i]) && strchr("+-.eE", s[i]) == NULL)
            return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + len || !isfinite(v))
        return false;
    *v_p = v;
    return true;
}

/* A value given as text: a JSON string, an environment value or a default. */
static ect_status_t
from_string(const struct ect__setting *row, const char *label, const char *text, ect_config_t *cfg)
{
    char shown[128];
    size_t text_len = strlen(text);
    ect__quote(shown, sizeof(shown), text, text_len);

    switch (row->type) {
    case ECT_SETTING_SIZE: {
        uint64_t v;
        ect_status_t s = ect_size_parse(text, &v);
        if (s != ECT_OK)
            return ect__error(ECT_ERR_CONFIG, "%s = %s is not a valid size: %s", label, shown,
                              ect_last_error());
        return store_size(row, label, v, shown, cfg);
    }
    case ECT_SETTING_BOOL: {
        int b = bool_word(text);
        if (b < 0)
            return not_allowed(row, label, shown, "is not a boolean");
        bool v = b == 1;
        memcpy(field_of(row, cfg), &v, sizeof(v));
        return ECT_OK;
    }
    case ECT_SETTING_SECONDS: {
        double v;
        if (!number_text(text, &v))
            return not_allowed(row, label, shown, "is not a number");
        ect_status_t s = check_limits(row, label, v, shown);
        if (s == ECT_OK)
            memcpy(field_of(row, cfg), &v, sizeof(v));
        return s;
    }
    case ECT_SETTING_UINT:
    case ECT_SETTING_PORT: {
        size_t len;
        const char *s = trim(text, &len);
        uint64_t v;
        if (!parse_decimal(s, len, &v))
            return not_allowed(row, label, shown, "is not a whole number");
        return store_integer(row, label, (double)v, shown, cfg);
    }
    case ECT_SETTING_STRING: {
        if (text_len >= row->size)
            return ect__error(ECT_ERR_CONFIG, "%s = %s is %zu bytes long: use at most %zu bytes",
                              label, shown, text_len, row->size - 1);
        if (row->check != NULL) {
            ect_status_t s = row->check(label, text);
            if (s != ECT_OK)
                return s;
        }
        memcpy(field_of(row, cfg), text, text_len + 1);
        return ECT_OK;
    }
    case ECT_SETTING_ENUM:
        for (size_t i = 0; i < row->n_choices; i++) {
            if (strcmp(text, row->choices[i]) == 0) {
                int idx = (int)i;
                if (row->offset != ECT_SETTING_NO_FIELD)
                    memcpy(field_of(row, cfg), &idx, sizeof(idx));
                return ECT_OK;
            }
        }
        return not_allowed(row, label, shown, "is not allowed");
    case ECT_SETTING_OBJECT:
        break;
    }
    return not_allowed(row, label, shown, "has the wrong type");
}

ect_status_t
ect__setting_from_text(const struct ect__setting *row, const char *label, const char *text,
                       ect_config_t *cfg)
{
    return from_string(row, label, text, cfg);
}

/* A JSON number where a whole number is wanted. */
static ect_status_t
from_json_integer(const struct ect__setting *row, const char *label, double v, const char *shown,
                  ect_config_t *cfg)
{
    const char *why = NULL;
    if (!isfinite(v))
        why = "is not a finite number";
    else if (v < 0)
        why = "is negative";
    else if (v != floor(v))
        why = "is not a whole number";
    else if (v >= EXACT_INT_LIMIT && row->type == ECT_SETTING_SIZE)
        return ect__error(ECT_ERR_CONFIG,
                          "%s = %s is too large for a JSON number to hold exactly (2^53 or more): "
                          "write the size as a string such as \"16TiB\"",
                          label, shown);
    else if (v >= EXACT_INT_LIMIT)
        why = "is out of range";
    if (why != NULL)
        return not_allowed(row, label, shown, why);
    if (row->type == ECT_SETTING_SIZE)
        return store_size(row, label, (uint64_t)v, shown, cfg);
    return store_integer(row, label, v, shown, cfg);
}

ect_status_t
ect__setting_from_json(const struct ect__setting *row, const char *label, const cJSON *item,
                       ect_config_t *cfg)
{
    char shown[128];
    ect__describe_json(shown, sizeof(shown), item);

    if (cJSON_IsString(item))
        return from_string(row, label, item->valuestring, cfg);
    if ((row->flags & ECT_SETTING_REQUIRED) && (cJSON_IsNull(item) || cJSON_IsFalse(item)) &&
        row->missing != NULL)
        return missing_value(row, label, shown);
    if (cJSON_IsNull(item) && !(row->flags & ECT_SETTING_REQUIRED))
        return ect__error(ECT_ERR_CONFIG,
                          "%s = null is not allowed: remove the key to get the default (%s)", label,
                          row->default_text);

    switch (row->type) {
    case ECT_SETTING_SIZE:
    case ECT_SETTING_UINT:
    case ECT_SETTING_PORT:
        if (cJSON_IsNumber(item))
            return from_json_integer(row, label, item->valuedouble, shown, cfg);
        break;
    case ECT_SETTING_BOOL:
        if (cJSON_IsBool(item)) {
            bool v = cJSON_IsTrue(item);
            memcpy(field_of(row, cfg), &v, sizeof(v));
            return ECT_OK;
        }
        break;
    case ECT_SETTING_SECONDS:
        if (cJSON_IsNumber(item)) {
            double v = item->valuedouble;
            if (!isfinite(v))
                return not_allowed(row, label, shown, "is not a finite number");
            ect_status_t s = check_limits(row, label, v, shown);
            if (s == ECT_OK)
                memcpy(field_of(row, cfg), &v, sizeof(v));
            return s;
        }
        break;
    case ECT_SETTING_STRING:
    case ECT_SETTING_ENUM:
    case ECT_SETTING_OBJECT:
        break;
    }
    return not_allowed(row, label, shown, "has the wrong type");
}

ect_status_t
ect__setting_check(const struct ect__setting *row, const ect_config_t *cfg)
{
    char shown[128];
    const void *f;
    if (row->offset == ECT_SETTING_NO_FIELD)
        return ECT_OK;
    f = cfield_of(row, cfg);
    switch (row->type) {
    case ECT_SETTING_SIZE: {
        uint64_t v;
        memcpy(&v, f, sizeof(v));
        snprintf(shown, sizeof(shown), "%llu", (unsigned long long)v);
        if (v == 0)
            return missing_value(row, row->name, shown);
        if ((double)v > row->max)
            return not_allowed(row, row->name, shown, "is out of range");
        return ECT_OK;
    }
    case ECT_SETTING_SECONDS: {
        double v;
        memcpy(&v, f, sizeof(v));
        return check_limits(row, row->name, v, ect__format_double(shown, sizeof(shown), v));
    }
    case ECT_SETTING_UINT: {
        unsigned v;
        memcpy(&v, f, sizeof(v));
        snprintf(shown, sizeof(shown), "%u", v);
        return check_limits(row, row->name, (double)v, shown);
    }
    case ECT_SETTING_PORT:
    case ECT_SETTING_BOOL:
        return ECT_OK; /* every value of the C type is allowed */
    case ECT_SETTING_STRING: {
        const char *s = f;
        if (memchr(s, '\0', row->size) == NULL)
            return ect__error(ECT_ERR_CONFIG, "%s is not NUL-terminated within its %zu bytes",
                              row->name, row->size);
        return row->check != NULL ? row->check(row->name, s) : ECT_OK;
    }
    case ECT_SETTING_ENUM: {
        int v;
        memcpy(&v, f, sizeof(v));
        if (v < 0 || (size_t)v >= row->n_choices) {
            snprintf(shown, sizeof(shown), "%d", v);
            return not_allowed(row, row->name, shown, "is not a valid enum value");
        }
        return ECT_OK;
    }
    case ECT_SETTING_OBJECT:
        break;
    }
    return ECT_OK;
}

bool
ect__setting_equal(const struct ect__setting *row, const ect_config_t *a, const ect_config_t *b)
{
    if (row->offset == ECT_SETTING_NO_FIELD)
        return true;
    if (row->type == ECT_SETTING_STRING)
        return strcmp(cfield_of(row, a), cfield_of(row, b)) == 0;
    return memcmp(cfield_of(row, a), cfield_of(row, b), row->size) == 0;
}
