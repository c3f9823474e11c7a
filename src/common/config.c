/*
 * ect_config_parse: the engine's ec_transfer_config JSON to an ect_config_t.
 *
 * The bytes are checked before cJSON sees them (size, NUL bytes, UTF-8,
 * \u0000 escapes, nesting: common/json.c), because cJSON accepts bad UTF-8,
 * silently cuts strings at an escaped NUL and ignores trailing text.  The document is then
 * walked key by key: every key is looked up in the settings table
 * (settings.c; settings_convert.c converts and checks its value); what the table does not
 * know is refused by name inside the extra config and ignored at the top
 * level.  Duplicate keys are refused (cJSON would keep both and we would
 * silently use one).
 *
 * Invariants: the result is built in a local copy and written to *cfg_p only
 * when everything passed; the cJSON tree is freed on every path.  No global
 * state; the environment is only read.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <ectier/ectier.h>

#include "common/config_internal.h"
#include "common/error.h"
#include "common/json.h"
#include "common/settings.h"

/* Settings rows fit a fixed "seen" array. */
#define ROWS_MAX 64

/* Keys of older designs, with what to do instead. */
static const struct {
    const char *key;
    const char *hint;
} legacy_keys[] = {
    {"num_ec_blocks", "size the tier in bytes with ec_cpu_bytes instead"},
    {"default_encoder_node",
     "consumers learn a producer's address from each request's ec_transfer_params"},
};

#define P2P_HOW_TO                                                                                 \
    "install libzmq3-dev libmsgpack-dev (scripts/install-deps.sh) and rebuild with "               \
    "-DECT_WITH_P2P=ON"

const char *
ect_role_str(ect_role_t role)
{
    switch (role) {
    case ECT_ROLE_PRODUCER:
        return "ec_producer";
    case ECT_ROLE_CONSUMER:
        return "ec_consumer";
    case ECT_ROLE_BOTH:
        return "ec_both";
    }
    return "?";
}

bool
ect_role_produces(ect_role_t role)
{
    return role == ECT_ROLE_PRODUCER || role == ECT_ROLE_BOTH;
}

bool
ect_role_consumes(ect_role_t role)
{
    return role == ECT_ROLE_CONSUMER || role == ECT_ROLE_BOTH;
}

const char *
ect_transport_str(ect_transport_t transport)
{
    switch (transport) {
    case ECT_TRANSPORT_AUTO:
        return "auto";
    case ECT_TRANSPORT_TCP:
        return "tcp";
    case ECT_TRANSPORT_SAME_HOST:
        return "same_host";
    }
    return "?";
}

ect_status_t
ect_config_init(ect_config_t *cfg)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    ect_config_t tmp;

    if (cfg == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "config init: NULL config");
    memset(&tmp, 0, sizeof(tmp));
    for (size_t i = 0; i < n; i++) {
        if (rows[i].offset == ECT_SETTING_NO_FIELD || rows[i].default_text == NULL)
            continue;
        /* A default the table's own converter refuses is a bug in the table. */
        if (ect__setting_from_text(&rows[i], rows[i].name, rows[i].default_text, &tmp) != ECT_OK)
            return ect__error(ECT_ERR_INTERNAL, "settings table: bad default for %s: %s",
                              rows[i].name, ect_last_error());
    }
    *cfg = tmp;
    return ECT_OK;
}

/* ---- keys ------------------------------------------------------------------------ */

/* Edit distance, ignoring case; both strings are short (the caller checks). */
static size_t
distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t prev[80], cur[80];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] +
                         (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(size_t));
    }
    return prev[lb];
}

/* The known extra-config key closest to key, if close enough to be a typo. */
static const char *
suggest(const char *key)
{
    size_t n, best = (size_t)-1;
    const char *best_name = NULL;
    const struct ect__setting *rows = ect__settings(&n);
    if (strlen(key) > 64)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *names[2] = {rows[i].name, rows[i].alias};
        if (rows[i].where != ECT_SETTING_EXTRA)
            continue;
        for (int k = 0; k < 2; k++) {
            if (names[k] == NULL)
                continue;
            size_t d = distance(key, names[k]);
            if (d < best && d <= 3 && d * 3 <= strlen(names[k])) {
                best = d;
                best_name = names[k];
            }
        }
    }
    return best_name;
}

static ect_status_t
refuse_unknown_keys(const cJSON *extra)
{
    char msg[900], q[128];
    struct ect__text t = {msg, sizeof(msg), 0};
    size_t unknown = 0;
    for (const cJSON *it = extra->child; it != NULL; it = it->next) {
        if (ect__setting_find(ECT_SETTING_EXTRA, it->string) != NULL)
            continue;
        if (++unknown > 4)
            continue;
        ect__text_printf(&t, "%s%s", unknown > 1 ? ", " : "",
                         ect__quote(q, sizeof(q), it->string, strlen(it->string)));
        const char *hint = NULL;
        for (size_t i = 0; i < sizeof(legacy_keys) / sizeof(legacy_keys[0]); i++)
            if (strcmp(it->string, legacy_keys[i].key) == 0)
                hint = legacy_keys[i].hint;
        const char *close = hint == NULL ? suggest(it->string) : NULL;
        if (hint != NULL)
            ect__text_printf(&t, " (an old key: %s)", hint);
        else if (close != NULL)
            ect__text_printf(&t, " (did you mean \"%s\"?)", close);
    }
    if (unknown == 0)
        return ECT_OK;
    if (unknown > 4)
        ect__text_printf(&t, " and %zu more", unknown - 4);
    return ect__error(ECT_ERR_CONFIG,
                      "unknown key%s in ec_connector_extra_config: %s; `ectier settings` lists "
                      "the keys",
                      unknown > 1 ? "s" : "", msg);
}

/* Keys of the extra config written at the top level would be ignored
 * silently by a lenient parser; llm-d#2535 is that bug for ec_enable_nixl. */
static ect_status_t
refuse_misplaced_keys(const cJSON *root)
{
    for (const cJSON *it = root->child; it != NULL; it = it->next) {
        if (ect__setting_find(ECT_SETTING_EXTRA, it->string) == NULL)
            continue;
        return ect__error(ECT_ERR_CONFIG,
                          "%s is a top-level key, but it belongs in ec_connector_extra_config%s: "
                          "move it to {\"ec_connector_extra_config\": {\"%s\": ...}}",
                          it->string,
                          strcmp(it->string, "ec_enable_nixl") == 0
                              ? " (a top-level ec_enable_nixl is refused, llm-d#2535)"
                              : "",
                          it->string);
    }
    return ECT_OK;
}

/* ---- the document ---------------------------------------------------------------- */

struct parse_state {
    ect_config_t cfg;
    bool seen[ROWS_MAX];   /* rows given explicitly */
    const char *p2p_label; /* the key that turned P2P on, for messages */
    const cJSON *extra;
};

static size_t
row_index(const struct ect__setting *row)
{
    size_t n;
    return (size_t)(row - ect__settings(&n));
}

static ect_status_t
apply_top(const cJSON *root, struct parse_state *st)
{
    static const char *const keys[] = {"ec_connector", "ec_role"};
    char allowed[160];
    for (size_t k = 0; k < 2; k++) {
        const struct ect__setting *row = ect__setting_find(ECT_SETTING_TOP, keys[k]);
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
        if (item == NULL) {
            struct ect__text t = {allowed, sizeof(allowed), 0};
            for (size_t i = 0; i < row->n_choices; i++)
                ect__text_printf(&t, "%s\"%s\"", i ? ", " : "", row->choices[i]);
            return ect__error(ECT_ERR_CONFIG, "%s is missing from the config: use one of %s",
                              keys[k], allowed);
        }
        ect_status_t s = ect__setting_from_json(row, keys[k], item, &st->cfg);
        if (s != ECT_OK)
            return s;
        st->seen[row_index(row)] = true;
    }
    return ECT_OK;
}

static ect_status_t
apply_extra(const cJSON *extra, struct parse_state *st)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    ect_status_t s;

    if ((s = ect__json_check_keys("config", extra, "in ec_connector_extra_config")) != ECT_OK)
        return s;
    if ((s = refuse_unknown_keys(extra)) != ECT_OK)
        return s;
    for (const cJSON *it = extra->child; it != NULL; it = it->next) {
        const struct ect__setting *row = ect__setting_find(ECT_SETTING_EXTRA, it->string);
        size_t idx = row_index(row);
        if (!st->seen[idx]) {
            if ((s = ect__setting_from_json(row, it->string, it, &st->cfg)) != ECT_OK)
                return s;
            st->seen[idx] = true;
            if (row->offset == offsetof(ect_config_t, p2p_enabled))
                st->p2p_label = it->string;
            continue;
        }
        /* The other name of a key given already: fine if they agree. */
        ect_config_t other = st->cfg;
        if ((s = ect__setting_from_json(row, it->string, it, &other)) != ECT_OK)
            return s;
        if (!ect__setting_equal(row, &st->cfg, &other))
            return ect__error(ECT_ERR_CONFIG,
                              "%s and %s are both given with different values: give one of them",
                              row->name, row->alias);
    }
    for (size_t i = 0; i < n; i++)
        if (rows[i].where == ECT_SETTING_EXTRA && (rows[i].flags & ECT_SETTING_REQUIRED) &&
            !st->seen[i])
            return ect__error(ECT_ERR_CONFIG, "%s (it is missing)", rows[i].missing);
    return ECT_OK;
}

/* The ECTIER_ name wins over the VLLM_ one; an empty value counts as unset. */
static ect_status_t
apply_env(ect_config_t *cfg)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    for (size_t i = 0; i < n; i++) {
        if (rows[i].where != ECT_SETTING_ENV)
            continue;
        const char *names[2] = {rows[i].alias, rows[i].name};
        for (int k = 0; k < 2; k++) {
            const char *v = names[k] != NULL ? getenv(names[k]) : NULL;
            if (v == NULL || *v == '\0')
                continue;
            char label[96];
            snprintf(label, sizeof(label), "environment variable %s", names[k]);
            ect_status_t s = ect__setting_from_text(&rows[i], label, v, cfg);
            if (s != ECT_OK)
                return s;
            break;
        }
    }
    return ECT_OK;
}

static ect_status_t
check_build(const ect_config_t *cfg, int have_p2p, const char *p2p_label)
{
    char q[128];
    if (have_p2p)
        return ECT_OK;
    if (cfg->p2p_enabled)
        return ect__error(
            ECT_ERR_UNSUPPORTED,
            "%s is true, but this libectier was built without P2P support: " P2P_HOW_TO
            ", or remove %s from ec_connector_extra_config",
            p2p_label, p2p_label);
    if (cfg->events_endpoint[0] != '\0')
        return ect__error(
            ECT_ERR_UNSUPPORTED,
            "events_endpoint = %s needs ZeroMQ, which this build lacks: " P2P_HOW_TO
            ", or remove events_endpoint",
            ect__quote(q, sizeof(q), cfg->events_endpoint, strlen(cfg->events_endpoint)));
    return ECT_OK;
}

ect_status_t
ect__config_validate_ex(const ect_config_t *cfg, int have_p2p)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    ect_status_t s;
    char q[128];

    if (cfg == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "config validate: NULL config");
    for (size_t i = 0; i < n; i++)
        if ((s = ect__setting_check(&rows[i], cfg)) != ECT_OK)
            return s;
    if (cfg->events_replay_endpoint[0] != '\0' && cfg->events_endpoint[0] == '\0')
        return ect__error(ECT_ERR_CONFIG,
                          "events_replay_endpoint = %s needs events_endpoint: it replays that "
                          "stream",
                          ect__quote(q, sizeof(q), cfg->events_replay_endpoint,
                                     strlen(cfg->events_replay_endpoint)));
    if (cfg->events_replay_endpoint[0] != '\0' &&
        strcmp(cfg->events_replay_endpoint, cfg->events_endpoint) == 0)
        return ect__error(ECT_ERR_CONFIG,
                          "events_replay_endpoint = %s is events_endpoint too: give the replay "
                          "socket an endpoint of its own",
                          ect__quote(q, sizeof(q), cfg->events_replay_endpoint,
                                     strlen(cfg->events_replay_endpoint)));
    if (cfg->curve_allowed_clients_file[0] != '\0' && cfg->curve_server_key_file[0] == '\0')
        return ect__error(ECT_ERR_CONFIG,
                          "curve_allowed_clients_file = %s needs curve_server_key_file: an "
                          "allow-list of clients only works with CURVE on",
                          ect__quote(q, sizeof(q), cfg->curve_allowed_clients_file,
                                     strlen(cfg->curve_allowed_clients_file)));
    return check_build(cfg, have_p2p, "ec_enable_nixl");
}

ect_status_t
ect_config_validate(const ect_config_t *cfg)
{
    return ect__config_validate_ex(cfg, ect_has_p2p());
}

static ect_status_t
apply_document(const cJSON *root, int have_p2p, struct parse_state *st)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    const struct ect__setting *cpu = ect__setting_find(ECT_SETTING_EXTRA, "ec_cpu_bytes");
    char shown[128];
    ect_status_t s;

    if (!cJSON_IsObject(root))
        return ect__error(ECT_ERR_CONFIG,
                          "config must be a JSON object with ec_connector, ec_role and "
                          "ec_connector_extra_config; got %s",
                          ect__describe_json(shown, sizeof(shown), root));
    if ((s = ect__json_check_keys("config", root, "at the top level")) != ECT_OK)
        return s;
    if ((s = refuse_misplaced_keys(root)) != ECT_OK)
        return s;
    if ((s = apply_top(root, st)) != ECT_OK)
        return s;

    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "ec_connector_extra_config");
    if (extra == NULL || cJSON_IsNull(extra))
        return ect__error(ECT_ERR_CONFIG, "%s (ec_connector_extra_config is %s)", cpu->missing,
                          extra == NULL ? "missing" : "null");
    if (!cJSON_IsObject(extra))
        return ect__error(ECT_ERR_CONFIG,
                          "ec_connector_extra_config = %s is not allowed: use a JSON object such "
                          "as {\"ec_cpu_bytes\": \"8GiB\"}",
                          ect__describe_json(shown, sizeof(shown), extra));
    if ((s = apply_extra(extra, st)) != ECT_OK)
        return s;

    if ((s = check_build(&st->cfg, have_p2p, st->p2p_label)) != ECT_OK)
        return s;
    if (st->cfg.p2p_enabled && ect_role_produces(st->cfg.role) &&
        (s = apply_env(&st->cfg)) != ECT_OK)
        return s;
    if ((s = ect__config_validate_ex(&st->cfg, have_p2p)) != ECT_OK)
        return s;

    if (!st->cfg.p2p_enabled)
        for (size_t i = 0; i < n; i++)
            if (st->seen[i] && (rows[i].flags & ECT_SETTING_P2P_ONLY))
                ECT_LOG_W("config: %s has no effect while P2P is off (ec_enable_nixl is false)",
                          rows[i].name);
    return ECT_OK;
}

ect_status_t
ect__config_parse_ex(const char *json, size_t len, int have_p2p, ect_config_t *cfg_p)
{
    struct parse_state st;
    cJSON *root = NULL;
    ect_status_t s;
    size_t n;

    if ((json == NULL && len != 0) || cfg_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "config parse: NULL argument");
    ect__settings(&n);
    if (n > ROWS_MAX)
        return ect__error(ECT_ERR_INTERNAL, "settings table has %zu rows, more than %d", n,
                          ROWS_MAX);
    memset(&st, 0, sizeof(st));
    st.p2p_label = "ec_enable_nixl";
    if ((s = ect_config_init(&st.cfg)) != ECT_OK)
        return s;
    if ((s = ect__json_parse("config", json, len, ECT_CONFIG_JSON_MAX, &root)) != ECT_OK)
        return s;
    s = apply_document(root, have_p2p, &st);
    cJSON_Delete(root);
    if (s != ECT_OK)
        return s;
    *cfg_p = st.cfg;
    return ECT_OK;
}

ect_status_t
ect_config_parse(const char *json, size_t len, ect_config_t *cfg_p)
{
    return ect__config_parse_ex(json, len, ect_has_p2p(), cfg_p);
}

ect_status_t
ect_config_format(const ect_config_t *cfg, char *buf, size_t cap, size_t *len_p)
{
    if (cfg == NULL || len_p == NULL || (buf == NULL && cap != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "config format: NULL argument");
    struct ect__text t = {buf, cap, 0};
    ect__settings_format(cfg, &t);
    return ect__text_finish(&t, "config text", len_p);
}

ect_status_t
ect_config_settings_markdown(char *buf, size_t cap, size_t *len_p)
{
    if (len_p == NULL || (buf == NULL && cap != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "settings markdown: NULL argument");
    struct ect__text t = {buf, cap, 0};
    ect__settings_markdown(&t);
    return ect__text_finish(&t, "settings markdown", len_p);
}
