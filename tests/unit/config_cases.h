/*
 * Helpers shared by the config test programs (test_config.c,
 * test_config_hostile.c): parse a document or extra-config members, check a
 * table of bad inputs (status, key and value in the message, output struct
 * untouched).
 */
#ifndef ECT_TESTS_CONFIG_CASES_H
#define ECT_TESTS_CONFIG_CASES_H

#include <ectier/ectier.h>

#include "common/config_internal.h"
#include "harness.h"

#define CPU_MISSING "ec_cpu_bytes must be specified in ec_connector_extra_config"

/* Parse text (NUL-terminated) with the given P2P support. */
static inline ect_status_t
parse_text(const char *json, int have_p2p, ect_config_t *cfg)
{
    return ect__config_parse_ex(json, strlen(json), have_p2p, cfg);
}

/* Parse a config with role ec_both and the given extra-config members. */
static inline ect_status_t
parse_extra(const char *members, int have_p2p, ect_config_t *cfg)
{
    char *json = NULL;
    CHECK(asprintf(&json,
                   "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
                   "\"ec_connector_extra_config\": {%s}}",
                   members) > 0);
    ect_status_t s = parse_text(json, have_p2p, cfg);
    free(json);
    return s;
}

/* A config struct full of a pattern, to see that failed parses leave it. */
static inline void
poison(ect_config_t *cfg)
{
    memset(cfg, 0xA5, sizeof(*cfg));
}

static inline int
untouched(const ect_config_t *cfg)
{
    const unsigned char *p = (const unsigned char *)cfg;
    for (size_t i = 0; i < sizeof(*cfg); i++)
        if (p[i] != 0xA5)
            return 0;
    return 1;
}

struct bad_case {
    const char *members; /* extra-config members, or a whole document if it starts with '{' */
    ect_status_t status;
    const char *key;   /* the message must name it */
    const char *value; /* and this rendering of the value */
};

static inline void
check_bad_cases(const struct bad_case *cases, size_t n, int have_p2p)
{
    for (size_t i = 0; i < n; i++) {
        ect_config_t cfg;
        poison(&cfg);
        ect_clear_error();
        ect_status_t s = cases[i].members[0] == '{' ? parse_text(cases[i].members, have_p2p, &cfg)
                                                    : parse_extra(cases[i].members, have_p2p, &cfg);
        CHECK_MSG(s == cases[i].status, "case %zu (%s): status %d, expected %d; message: %s", i,
                  cases[i].members, s, cases[i].status, ect_last_error());
        CHECK_MSG(untouched(&cfg), "case %zu (%s) wrote the output", i, cases[i].members);
        CHECK_MSG(strstr(ect_last_error(), cases[i].key) != NULL,
                  "case %zu (%s): message \"%s\" lacks \"%s\"", i, cases[i].members,
                  ect_last_error(), cases[i].key);
        CHECK_MSG(strstr(ect_last_error(), cases[i].value) != NULL,
                  "case %zu (%s): message \"%s\" lacks \"%s\"", i, cases[i].members,
                  ect_last_error(), cases[i].value);
    }
}

#define CHECK_BAD(cases, have_p2p)                                                                 \
    check_bad_cases(cases, sizeof(cases) / sizeof(cases[0]), have_p2p)

static inline char *
repeat(const char *unit, size_t times, const char *tail)
{
    size_t u = strlen(unit), t = strlen(tail);
    char *s = malloc(u * times + t + 1);
    CHECK(s != NULL);
    for (size_t i = 0; i < times; i++)
        memcpy(s + i * u, unit, u);
    memcpy(s + u * times, tail, t + 1);
    return s;
}

#endif /* ECT_TESTS_CONFIG_CASES_H */
