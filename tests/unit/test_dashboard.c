/*
 * The Grafana dashboard (tools/grafana/ectier-dashboard.json) against what
 * the library exports.  The exported names, their types and their label
 * values come from ect_metrics_format_prometheus itself (parsed by the
 * scraper), never from a list kept here: every ectier_ name a query of the
 * dashboard uses must be one of its samples; rate() only ever wraps a
 * counter or a histogram series and a gauge is never rated; a status the
 * queries match on is one the library writes and every `by (label)` groups
 * by a label that exists; the fetch latency panel takes histogram_quantile
 * over the fetch-latency buckets.  The dashboard itself is checked for
 * shape: unique panel ids, a title, a description and at least one query a
 * panel, a datasource taken from the dashboard's variable.
 */
#include <ctype.h>

#include <cjson/cJSON.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "metrics/scrape.h"

#define DASHBOARD ECT_SOURCE_DIR "/tools/grafana/ectier-dashboard.json"

/* What the library exports: samples, TYPE lines and label text. */
struct exported {
    char *text;
    ect__prom_t prom;
};

static void
exported_load(struct exported *e)
{
    ect_metrics_t m = {0};
    size_t len = 0;
    CHECK_STATUS(ect_metrics_format_prometheus(&m, NULL, 0, &len), ECT_ERR_OVERFLOW);
    e->text = malloc(len + 1);
    CHECK(e->text != NULL);
    CHECK_OK(ect_metrics_format_prometheus(&m, e->text, len + 1, &len));
    CHECK_OK(ect__prom_parse(e->text, len, &e->prom));
    CHECK(e->prom.n > 40);
}

static void
exported_free(struct exported *e)
{
    ect__prom_cleanup(&e->prom);
    free(e->text);
}

static bool
is_sample(const struct exported *e, const char *name)
{
    for (size_t i = 0; i < e->prom.n; i++)
        if (strcmp(e->prom.samples[i].name, name) == 0)
            return true;
    return false;
}

/* The TYPE of the family of sample name ("counter", "gauge",
 * "histogram"), or "" when there is none. */
static void
type_of(const struct exported *e, const char *name, char out[16])
{
    char family[256];
    snprintf(family, sizeof(family), "%s", name);
    out[0] = '\0';
    for (int pass = 0; pass < 2 && out[0] == '\0'; pass++) {
        char want[300];
        snprintf(want, sizeof(want), "\n# TYPE %s ", family);
        const char *t = strstr(e->text, want);
        if (t != NULL)
            sscanf(t + strlen(want), "%15s", out);
        /* A histogram's series: name_bucket, name_sum, name_count. */
        char *us = strrchr(family, '_');
        if (us != NULL &&
            (strcmp(us, "_bucket") == 0 || strcmp(us, "_sum") == 0 || strcmp(us, "_count") == 0))
            *us = '\0';
        else
            break;
    }
}

/* Whether some exported sample has label `name` (="value" when value is
 * not NULL); "instance" is the one Prometheus adds itself. */
static bool
has_label(const struct exported *e, const char *name, const char *value)
{
    if (value == NULL && strcmp(name, "instance") == 0)
        return true;
    char want[160];
    if (value != NULL)
        snprintf(want, sizeof(want), "%s=\"%s\"", name, value);
    else
        snprintf(want, sizeof(want), "%s=\"", name);
    for (size_t i = 0; i < e->prom.n; i++)
        if (strstr(e->prom.samples[i].labels, want) != NULL)
            return true;
    return false;
}

static bool
ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == ':';
}

/* Whether the name at expr[at] is the argument of rate(...) or
 * increase(...). */
static bool
rated(const char *expr, size_t at)
{
    size_t i = at;
    while (i > 0 && expr[i - 1] == ' ')
        i--;
    return (i >= 5 && strncmp(expr + i - 5, "rate(", 5) == 0) ||
           (i >= 9 && strncmp(expr + i - 9, "increase(", 9) == 0);
}

static void
check_expr(const struct exported *e, const char *panel, const char *expr, unsigned *names_p)
{
    for (const char *p = expr; (p = strstr(p, "ectier_")) != NULL;) {
        if (p > expr && ident_char(p[-1])) {
            p++;
            continue;
        }
        size_t n = 0;
        while (ident_char(p[n]))
            n++;
        char name[256];
        CHECK(n < sizeof(name));
        memcpy(name, p, n);
        name[n] = '\0';
        CHECK_MSG(is_sample(e, name), "panel \"%s\" uses %s, which the library does not export",
                  panel, name);
        char type[16];
        type_of(e, name, type);
        CHECK_MSG(type[0] != '\0', "%s has no # TYPE line", name);
        bool counter = strcmp(type, "counter") == 0 || strcmp(type, "histogram") == 0;
        if (rated(expr, (size_t)(p - expr)))
            CHECK_MSG(counter, "panel \"%s\" takes rate() of %s, a %s", panel, name, type);
        else if (strstr(expr, "label_values(") == NULL)
            CHECK_MSG(!counter, "panel \"%s\" shows the counter %s without rate()", panel, name);
        (*names_p)++;
        p += n;
    }
    /* Status matchers name statuses the library writes. */
    for (const char *p = expr; (p = strstr(p, "status")) != NULL; p += 6) {
        const char *q = p + 6;
        if (*q == '!')
            q++;
        if (*q != '=' || q[1] != '"')
            continue;
        char value[64];
        CHECK(sscanf(q + 2, "%63[^\"]", value) == 1);
        CHECK_MSG(has_label(e, "status", value),
                  "panel \"%s\" matches status \"%s\", never written", panel, value);
    }
    /* Groupings are by labels that exist. */
    for (const char *p = expr; (p = strstr(p, "by (")) != NULL; p += 4) {
        char label[64];
        CHECK(sscanf(p + 4, "%63[a-z_]", label) == 1);
        CHECK_MSG(has_label(e, label, NULL), "panel \"%s\" groups by %s, a label nothing has",
                  panel, label);
    }
}

static cJSON *
load_dashboard(void)
{
    char *text = ect_test_read_file(DASHBOARD, NULL);
    cJSON *d = cJSON_Parse(text);
    CHECK_MSG(d != NULL, "%s is not JSON (near: %.40s)", DASHBOARD,
              cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
    free(text);
    return d;
}

static void
test_every_metric_the_dashboard_uses_is_exported(void)
{
    struct exported e;
    exported_load(&e);
    cJSON *d = load_dashboard();
    unsigned names = 0, panels = 0;
    bool quantile = false;
    const cJSON *panel;
    cJSON_ArrayForEach(panel, cJSON_GetObjectItem(d, "panels"))
    {
        const char *title = cJSON_GetStringValue(cJSON_GetObjectItem(panel, "title"));
        const cJSON *targets = cJSON_GetObjectItem(panel, "targets");
        if (targets == NULL)
            continue; /* a row */
        panels++;
        const cJSON *t;
        cJSON_ArrayForEach(t, targets)
        {
            const char *expr = cJSON_GetStringValue(cJSON_GetObjectItem(t, "expr"));
            CHECK_MSG(expr != NULL, "a query of \"%s\" has no expr", title);
            check_expr(&e, title, expr, &names);
            quantile = quantile || strstr(expr, "histogram_quantile(0.99, sum by (le) "
                                                "(rate(ectier_p2p_fetch_seconds_bucket") != NULL;
        }
    }
    /* The instance variable's query too. */
    const cJSON *var;
    cJSON_ArrayForEach(var, cJSON_GetObjectItem(cJSON_GetObjectItem(d, "templating"), "list"))
    {
        const char *def = cJSON_GetStringValue(cJSON_GetObjectItem(var, "definition"));
        if (def != NULL)
            check_expr(&e, "templating", def, &names);
    }
    CHECK_MSG(panels >= 10 && names >= 40, "only %u panels, %u metric uses", panels, names);
    CHECK_MSG(quantile, "no p99 over ectier_p2p_fetch_seconds_bucket");
    cJSON_Delete(d);
    exported_free(&e);
}

static void
test_the_dashboard_is_well_formed(void)
{
    cJSON *d = load_dashboard();
    CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(d, "uid")), "ectier-overview");
    CHECK(cJSON_GetStringValue(cJSON_GetObjectItem(d, "title")) != NULL);
    int ids[128], n_ids = 0;
    const cJSON *panel;
    cJSON_ArrayForEach(panel, cJSON_GetObjectItem(d, "panels"))
    {
        const char *title = cJSON_GetStringValue(cJSON_GetObjectItem(panel, "title"));
        CHECK_MSG(title != NULL && title[0] != '\0', "a panel without a title");
        const cJSON *id = cJSON_GetObjectItem(panel, "id");
        CHECK(cJSON_IsNumber(id) && n_ids < 128);
        for (int i = 0; i < n_ids; i++)
            CHECK_MSG(ids[i] != id->valueint, "panel id %d twice", id->valueint);
        ids[n_ids++] = id->valueint;
        const cJSON *grid = cJSON_GetObjectItem(panel, "gridPos");
        CHECK_MSG(cJSON_IsObject(grid), "\"%s\" has no gridPos", title);
        CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(grid, "x")) +
                  cJSON_GetNumberValue(cJSON_GetObjectItem(grid, "w")) <=
              24);
        const cJSON *targets = cJSON_GetObjectItem(panel, "targets");
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(panel, "type")), "row") == 0)
            continue;
        CHECK_MSG(cJSON_GetArraySize(targets) >= 1, "\"%s\" has no query", title);
        CHECK_MSG(cJSON_GetStringValue(cJSON_GetObjectItem(panel, "description")) != NULL,
                  "\"%s\" has no description", title);
        CHECK_STR_EQ(cJSON_GetStringValue(
                         cJSON_GetObjectItem(cJSON_GetObjectItem(panel, "datasource"), "uid")),
                     "${datasource}");
        const cJSON *t;
        char refs[32] = "";
        cJSON_ArrayForEach(t, targets)
        {
            const char *ref = cJSON_GetStringValue(cJSON_GetObjectItem(t, "refId"));
            CHECK(ref != NULL && strlen(ref) == 1 && strchr(refs, ref[0]) == NULL);
            strncat(refs, ref, 1);
        }
    }
    CHECK(n_ids >= 15);
    cJSON_Delete(d);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_every_metric_the_dashboard_uses_is_exported),
    ECT_CASE(test_the_dashboard_is_well_formed),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
