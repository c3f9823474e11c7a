/*
 * Helpers shared by the config test programs (test_config.c,
 * test_config_hostile.c): parse a document or extra-config members, check a
 * table of bad inputs (status, key and value in the message, output struct
 * untouched).
 */
#ifndef ECT_TESTS_SUPPORT_CONFIG_H
#define ECT_TESTS_SUPPORT_CONFIG_H

#include <ectier/ectier.h>

#include "common/config_internal.h"
#include "harness.h"

#define TS_CPU_MISSING "ec_cpu_bytes must be specified in ec_connector_extra_config"

/* Parse text (NUL-terminated) with the given P2P support. */
ect_status_t ts_parse_text(const char *json, int have_p2p, ect_config_t *cfg);

/* Parse a config with role ec_both and the given extra-config members. */
ect_status_t ts_parse_extra(const char *members, int have_p2p, ect_config_t *cfg);

/* A config struct full of a pattern, to see that failed parses leave it. */
void ts_config_poison(ect_config_t *cfg);

/* Whether cfg still holds poison's pattern in every byte. */
int ts_config_untouched(const ect_config_t *cfg);

/* A bad input and what its refusal must say. */
struct ts_bad_case {
    const char *members; /* extra-config members, or a whole document if it starts with '{' */
    ect_status_t status;
    const char *key;   /* the message must name it */
    const char *value; /* and this rendering of the value */
};

/* Each case is refused with its status, names its key and value in the
 * message, and leaves the output untouched; fails the case otherwise. */
void ts_check_bad_cases(const struct ts_bad_case *cases, size_t n, int have_p2p);

#define CHECK_BAD(cases, have_p2p)                                                                 \
    ts_check_bad_cases(cases, sizeof(cases) / sizeof(cases[0]), have_p2p)

/* unit times times, then tail, in a malloc'd string. */
char *ts_repeat(const char *unit, size_t times, const char *tail);

#endif /* ECT_TESTS_SUPPORT_CONFIG_H */
