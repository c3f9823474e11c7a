/*
 * Parsing configs and checking tables of bad inputs (see config.h).
 */
#include <stdio.h>

#include "support/config.h"

ect_status_t
ts_parse_text(const char *json, int have_p2p, ect_config_t *cfg)
{
    return ect__config_parse_ex(json, strlen(json), have_p2p, cfg);
}

ect_status_t
ts_parse_extra(const char *members, int have_p2p, ect_config_t *cfg)
{
    char *json = NULL;
    CHECK(asprintf(&json,
                   "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
                   "\"ec_connector_extra_config\": {%s}}",
                   members) > 0);
    ect_status_t s = ts_parse_text(json, have_p2p, cfg);
    free(json);
    return s;
}

void
ts_config_poison(ect_config_t *cfg)
{
    memset(cfg, 0xA5, sizeof(*cfg));
}

int
ts_config_untouched(const ect_config_t *cfg)
{
    const unsigned char *p = (const unsigned char *)cfg;
    for (size_t i = 0; i < sizeof(*cfg); i++)
        if (p[i] != 0xA5)
            return 0;
    return 1;
}

void
ts_check_bad_cases(const struct ts_bad_case *cases, size_t n, int have_p2p)
{
    for (size_t i = 0; i < n; i++) {
        ect_config_t cfg;
        ts_config_poison(&cfg);
        ect_clear_error();
        ect_status_t s = cases[i].members[0] == '{'
                             ? ts_parse_text(cases[i].members, have_p2p, &cfg)
                             : ts_parse_extra(cases[i].members, have_p2p, &cfg);
        CHECK_MSG(s == cases[i].status, "case %zu (%s): status %d, expected %d; message: %s", i,
                  cases[i].members, s, cases[i].status, ect_last_error());
        CHECK_MSG(ts_config_untouched(&cfg), "case %zu (%s) wrote the output", i, cases[i].members);
        CHECK_MSG(strstr(ect_last_error(), cases[i].key) != NULL,
                  "case %zu (%s): message \"%s\" lacks \"%s\"", i, cases[i].members,
                  ect_last_error(), cases[i].key);
        CHECK_MSG(strstr(ect_last_error(), cases[i].value) != NULL,
                  "case %zu (%s): message \"%s\" lacks \"%s\"", i, cases[i].members,
                  ect_last_error(), cases[i].value);
    }
}

char *
ts_repeat(const char *unit, size_t times, const char *tail)
{
    size_t u = strlen(unit), t = strlen(tail);
    char *s = malloc(u * times + t + 1);
    CHECK(s != NULL);
    for (size_t i = 0; i < times; i++)
        memcpy(s + i * u, unit, u);
    memcpy(s + u * times, tail, t + 1);
    return s;
}
