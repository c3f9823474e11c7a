/*
 * Text made from the settings table: the README's Markdown section, the
 * `ectier config --help` list and the resolved "key = value" listing, plus
 * the small formatters every config message uses (quoted values, described
 * JSON values, exact doubles).
 *
 * Output goes through struct ect__text, which writes into a caller's buffer
 * and keeps counting past its end, so callers learn the size they need.
 * No state, no allocation.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/settings.h"
#include "common/utf8.h"

/* How many bytes of a value a message shows before cutting it. */
#define QUOTE_SHOWN_MAX 60

void
ect__text_printf(struct ect__text *t, const char *fmt, ...)
{
    va_list ap;
    size_t room = t->buf != NULL && t->len < t->cap ? t->cap - t->len : 0;
    va_start(ap, fmt);
    int n = vsnprintf(room > 0 ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n;
}

ect_status_t
ect__text_finish(const struct ect__text *t, const char *what, size_t *len_p)
{
    if (t->buf != NULL && t->len >= t->cap)
        return ect__error(ECT_ERR_NO_SPACE, "%s needs %zu bytes, the buffer has %zu", what,
                          t->len + 1, t->cap);
    *len_p = t->len;
    return ECT_OK;
}

const char *
ect__quote(char *buf, size_t cap, const char *s, size_t len)
{
    struct ect__text t = {buf, cap, 0};
    size_t shown = ect__utf8_cut(s, len, QUOTE_SHOWN_MAX);
    ect__text_printf(&t, "\"");
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            ect__text_printf(&t, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            ect__text_printf(&t, "\\x%02x", c);
        else
            ect__text_printf(&t, "%c", c);
    }
    ect__text_printf(&t, "\"");
    if (shown < len)
        ect__text_printf(&t, "... (%zu bytes)", len);
    return buf;
}

const char *
ect__format_double(char *buf, size_t cap, double v)
{
    /* The shorter form when it reads back exactly, else all the digits. */
    snprintf(buf, cap, "%.15g", v);
    if (isfinite(v) && strtod(buf, NULL) != v)
        snprintf(buf, cap, "%.17g", v);
    return buf;
}

const char *
ect__human_size(char *buf, size_t cap, uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    size_t u = 0;
    while (bytes != 0 && bytes % 1024 == 0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, cap, "%llu %s", (unsigned long long)bytes, units[u]);
    return buf;
}

const char *
ect__describe_json(char *buf, size_t cap, const cJSON *item)
{
    if (cJSON_IsString(item))
        return ect__quote(buf, cap, item->valuestring, strlen(item->valuestring));
    if (cJSON_IsNumber(item))
        return ect__format_double(buf, cap, item->valuedouble);
    if (cJSON_IsTrue(item))
        snprintf(buf, cap, "true");
    else if (cJSON_IsFalse(item))
        snprintf(buf, cap, "false");
    else if (cJSON_IsNull(item))
        snprintf(buf, cap, "null");
    else if (cJSON_IsArray(item))
        snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(item))
        snprintf(buf, cap, "an object");
    else
        snprintf(buf, cap, "an invalid value");
    return buf;
}

/* ---- Markdown ------------------------------------------------------------------ */

/* The type column; tick is "`" for Markdown code spans, "" for plain text. */
static void
type_cell(struct ect__text *t, const struct ect__setting *row, const char *tick)
{
    char lo[32], hi[32];
    ect__format_double(lo, sizeof(lo), row->min);
    ect__format_double(hi, sizeof(hi), row->max);
    switch (row->type) {
    case ECT_SETTING_SIZE:
        ect__text_printf(t, "size, 1 B to 1 PiB");
        break;
    case ECT_SETTING_BOOL:
        ect__text_printf(t, "bool");
        break;
    case ECT_SETTING_SECONDS:
        ect__text_printf(t, "seconds, %s %s, <= %s", row->min_open ? ">" : ">=", lo, hi);
        break;
    case ECT_SETTING_UINT:
        ect__text_printf(t, "integer, %s to %s", lo, hi);
        break;
    case ECT_SETTING_PORT:
        ect__text_printf(t, "port, %s to %s", lo, hi);
        break;
    case ECT_SETTING_STRING:
        ect__text_printf(t, "string, <= %zu bytes", row->size - 1);
        break;
    case ECT_SETTING_ENUM:
        ect__text_printf(t, "one of");
        for (size_t i = 0; i < row->n_choices; i++)
            ect__text_printf(t, "%s %s%s%s", i ? "," : "", tick, row->choices[i], tick);
        break;
    case ECT_SETTING_OBJECT:
        ect__text_printf(t, "object");
        break;
    }
}

static void
default_cell(struct ect__text *t, const struct ect__setting *row)
{
    if (row->default_text == NULL)
        ect__text_printf(t, "required");
    else if (row->default_text[0] == '\0')
        ect__text_printf(t, "empty");
    else
        ect__text_printf(t, "`%s`", row->default_text);
}

static void
table_rows(struct ect__text *t, enum ect__setting_where where)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    ect__text_printf(t, "| %s | type | default | meaning |\n|---|---|---|---|\n",
                     where == ECT_SETTING_ENV ? "variable" : "key");
    for (size_t i = 0; i < n; i++) {
        const struct ect__setting *row = &rows[i];
        if (row->where != where)
            continue;
        ect__text_printf(t, "| `%s`", row->name);
        if (row->alias != NULL)
            ect__text_printf(t, where == ECT_SETTING_ENV ? " or `%s`" : " (alias `%s`)",
                             row->alias);
        ect__text_printf(t, " | ");
        type_cell(t, row, "`");
        ect__text_printf(t, " | ");
        default_cell(t, row);
        ect__text_printf(t, " | %s |\n", row->doc);
    }
}

void
ect__settings_markdown(struct ect__text *t)
{
    ect__text_printf(
        t,
        "The configuration is the JSON document the engine passes as `--ec-transfer-config`:\n"
        "`{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
        "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"8GiB\"}}`.\n"
        "`ectier config JSON` (or `@FILE`) checks one exactly as the library does and prints the "
        "resolved\nvalues. A bad value is an error naming the key, the value and what is allowed; "
        "duplicate keys are\nrefused. Booleans are JSON booleans or strings that, trimmed and "
        "lower-cased, are `true`, `1`, `yes`\n(true) or `false`, `0`, `no`, empty (false); "
        "numbers are JSON numbers or numeric strings.\n\n");
    ect__text_printf(t, "### Top-level keys\n\n");
    table_rows(t, ECT_SETTING_TOP);
    ect__text_printf(
        t, "\nOther top-level keys of the engine's config (`engine_id`, `ec_buffer_device`, "
           "`ec_buffer_size`,\n`ec_ip`, `ec_port`, `ec_rank`, `ec_parallel_size`, "
           "`ec_connector_module_path`, ...) are accepted and\nignored. A key that belongs in "
           "`ec_connector_extra_config` is refused at the top level, notably\n`ec_enable_nixl` "
           "(llm-d#2535).\n\n");
    ect__text_printf(t, "### Keys in `ec_connector_extra_config`\n\n");
    ect__text_printf(t, "Unknown keys are refused by name, with the closest known key when "
                        "there is one. The timeouts,\n`transport` and the `curve_*` files only "
                        "matter with P2P on (a warning is logged when they are set\nwithout "
                        "it).\n\n");
    table_rows(t, ECT_SETTING_EXTRA);
    ect__text_printf(t, "\n### Environment variables\n\n");
    ect__text_printf(t, "Read only when P2P is on and the role produces (`ec_producer`, "
                        "`ec_both`). The `ECTIER_` name wins\nwhen both are set; an empty value "
                        "counts as unset.\n\n");
    table_rows(t, ECT_SETTING_ENV);
}

/* ---- help and the resolved listing ------------------------------------------------ */

void
ect__settings_help(struct ect__text *t)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    static const char *const titles[] = {"top-level keys", "keys in ec_connector_extra_config",
                                         "environment (P2P producers)"};
    for (int where = ECT_SETTING_TOP; where <= ECT_SETTING_ENV; where++) {
        ect__text_printf(t, "%s:\n", titles[where]);
        for (size_t i = 0; i < n; i++) {
            const struct ect__setting *row = &rows[i];
            if ((int)row->where != where)
                continue;
            ect__text_printf(t, "  %-28s ", row->name);
            type_cell(t, row, "");
            if (row->default_text == NULL)
                ect__text_printf(t, "; required\n");
            else
                ect__text_printf(t, "; default \"%s\"\n", row->default_text);
        }
    }
}

void
ect__settings_format(const ect_config_t *cfg, struct ect__text *t)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    for (size_t i = 0; i < n; i++) {
        const struct ect__setting *row = &rows[i];
        const char *f = (const char *)cfg + row->offset;
        char num[40];
        if (row->offset == ECT_SETTING_NO_FIELD)
            continue;
        ect__text_printf(t, "%s = ", row->name);
        switch (row->type) {
        case ECT_SETTING_SIZE: {
            uint64_t v;
            memcpy(&v, f, sizeof(v));
            ect__text_printf(t, "%llu\n", (unsigned long long)v);
            break;
        }
        case ECT_SETTING_BOOL: {
            bool v;
            memcpy(&v, f, sizeof(v));
            ect__text_printf(t, "%s\n", v ? "true" : "false");
            break;
        }
        case ECT_SETTING_SECONDS: {
            double v;
            memcpy(&v, f, sizeof(v));
            ect__text_printf(t, "%s\n", ect__format_double(num, sizeof(num), v));
            break;
        }
        case ECT_SETTING_UINT: {
            unsigned v;
            memcpy(&v, f, sizeof(v));
            ect__text_printf(t, "%u\n", v);
            break;
        }
        case ECT_SETTING_PORT: {
            uint16_t v;
            memcpy(&v, f, sizeof(v));
            ect__text_printf(t, "%u\n", (unsigned)v);
            break;
        }
        case ECT_SETTING_STRING:
            ect__text_printf(t, "%.*s\n", (int)strnlen(f, row->size), f);
            break;
        case ECT_SETTING_ENUM: {
            int v;
            memcpy(&v, f, sizeof(v));
            ect__text_printf(t, "%s\n",
                             v >= 0 && (size_t)v < row->n_choices ? row->choices[v] : "?");
            break;
        }
        case ECT_SETTING_OBJECT:
            ect__text_printf(t, "\n");
            break;
        }
    }
}
