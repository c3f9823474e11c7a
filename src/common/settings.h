/*
 * The declarative settings table: one row per configuration key or
 * environment variable (name, type, default, doc, where it lives in
 * ect_config_t, limits or allowed words, content rule).
 *
 * The table drives everything that would otherwise drift apart: the defaults
 * (ect_config_init applies each row's default text through the same
 * converter as user input), parsing and validation (config.c walks the JSON
 * and hands each value to its row), `ectier config --help`, the resolved
 * "key = value" listing and the README's settings section.
 *
 * The table is constant; nothing here has state.  Messages go to the
 * thread's last-error buffer through ect__error.
 */
#ifndef ECT_COMMON_SETTINGS_H
#define ECT_COMMON_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include <ectier/config.h>

enum ect__setting_type {
    ECT_SETTING_SIZE,    /* uint64_t: JSON integer or size string ("8GiB") */
    ECT_SETTING_BOOL,    /* bool: JSON bool or "true"/"1"/"yes"/"false"/"0"/"no"/"" */
    ECT_SETTING_SECONDS, /* double: finite JSON number or numeric string */
    ECT_SETTING_UINT,    /* unsigned: JSON integer or decimal string */
    ECT_SETTING_PORT,    /* uint16_t: JSON integer or decimal string, 0..65535 */
    ECT_SETTING_STRING,  /* char[size]: JSON string */
    ECT_SETTING_ENUM,    /* int-sized enum (index into choices), or no field */
    ECT_SETTING_OBJECT,  /* the extra-config object itself (no field) */
};

enum ect__setting_where {
    ECT_SETTING_TOP,   /* top level of ec_transfer_config */
    ECT_SETTING_EXTRA, /* inside ec_connector_extra_config */
    ECT_SETTING_ENV,   /* environment variable */
};

#define ECT_SETTING_REQUIRED 0x1u /* no default: must be given */
#define ECT_SETTING_P2P_ONLY 0x2u /* only has an effect with P2P on */
#define ECT_SETTING_PRODUCER 0x4u /* env: read only when P2P is on and the role produces */

#define ECT_SETTING_NO_FIELD ((size_t)-1)

struct ect__setting;

/* Content rule for a string value (already known to fit the field).  label
 * names the value in messages ("region_name", "environment variable X"). */
typedef ect_status_t (*ect__setting_check_fn)(const char *label, const char *value);

struct ect__setting {
    const char *name;  /* key or environment variable */
    const char *alias; /* extra: an accepted synonym; env: the ECTIER_ name, which wins */
    enum ect__setting_where where;
    enum ect__setting_type type;
    unsigned flags;
    const char *default_text; /* applied by ect_config_init; NULL when required */
    const char *doc;          /* one sentence or two for the README, no '|' */
    size_t offset;            /* into ect_config_t, or ECT_SETTING_NO_FIELD */
    size_t size;              /* of the field (string capacity including the NUL) */
    double min, max;          /* numeric limits: min <= v (or min < v if min_open), v <= max */
    bool min_open;
    const char *const *choices; /* ENUM: the allowed words; the value is the index */
    size_t n_choices;
    ect__setting_check_fn check; /* STRING: content rule, or NULL */
    const char *missing;         /* REQUIRED: the message when missing, zero, false or null */
};

/* The table, in documentation order.  Never NULL. */
const struct ect__setting *ect__settings(size_t *n_p);

/* The row for name (or its alias) at where, or NULL. */
const struct ect__setting *ect__setting_find(enum ect__setting_where where, const char *name);

/* Convert a JSON value for row into its field of *cfg and check its limits.
 * label is the key as written (the alias if that was used).  Returns ECT_OK,
 * ECT_ERR_CONFIG with a message naming label, the value and what is allowed. */
ect_status_t ect__setting_from_json(const struct ect__setting *row, const char *label,
                                    const cJSON *item, ect_config_t *cfg);

/* Same from text (a default or an environment value). */
ect_status_t ect__setting_from_text(const struct ect__setting *row, const char *label,
                                    const char *text, ect_config_t *cfg);

/* Check the value already in row's field of *cfg against the row's limits
 * (for configs built by hand).  Returns ECT_OK or ECT_ERR_CONFIG. */
ect_status_t ect__setting_check(const struct ect__setting *row, const ect_config_t *cfg);

/* Whether row's field holds the same value in a and b. */
bool ect__setting_equal(const struct ect__setting *row, const ect_config_t *a,
                        const ect_config_t *b);

/*
 * Text built into a caller's buffer: appends past the capacity are counted
 * but not stored, so one pass gives both the text (when it fits) and the size
 * needed.  buf may be NULL with cap 0.
 */
struct ect__text {
    char *buf;
    size_t cap;
    size_t len; /* length of the whole text so far, stored or not */
};

void ect__text_printf(struct ect__text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Finish: ECT_OK and *len_p = length if it fit (buf NUL-terminated), else
 * ECT_ERR_NO_SPACE with a message naming what and the bytes needed. */
ect_status_t ect__text_finish(const struct ect__text *t, const char *what, size_t *len_p);

/* Writers driven by the table. */
void ect__settings_markdown(struct ect__text *t);
void ect__settings_help(struct ect__text *t);
void ect__settings_format(const ect_config_t *cfg, struct ect__text *t);

/* A value quoted for a message: "text" with control bytes, quotes and
 * backslashes escaped, cut after about 60 bytes with "... (N bytes)".
 * Always NUL-terminates buf (cap >= 16). Returns buf. */
const char *ect__quote(char *buf, size_t cap, const char *s, size_t len);

/* A JSON value described for a message: true, null, 1.5, "text", an array. */
const char *ect__describe_json(char *buf, size_t cap, const cJSON *item);

/* A byte count in the largest binary unit that divides it ("1 PiB",
 * "1536 KiB", "7 B"). */
const char *ect__human_size(char *buf, size_t cap, uint64_t bytes);

/* A double written briefly but exactly ("2", "0.1", "9007199254740993"). */
const char *ect__format_double(char *buf, size_t cap, double v);

#endif /* ECT_COMMON_SETTINGS_H */
