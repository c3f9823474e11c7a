/*
 * Internal entry points of the config parser, for tests: the same code as
 * ect_config_parse / ect_config_validate with the build's P2P support passed
 * in, so both the P2P and the non-P2P paths are tested in every build.
 */
#ifndef ECT_COMMON_CONFIG_INTERNAL_H
#define ECT_COMMON_CONFIG_INTERNAL_H

#include <ectier/config.h>

/* The largest config document accepted, in bytes. */
#define ECT_CONFIG_JSON_MAX (1024 * 1024)
/* Nesting and key limits: ECT_JSON_DEPTH_MAX, ECT_JSON_KEYS_MAX (common/json.h). */

ect_status_t ect__config_parse_ex(const char *json, size_t len, int have_p2p, ect_config_t *cfg_p);

ect_status_t ect__config_validate_ex(const ect_config_t *cfg, int have_p2p);

#endif /* ECT_COMMON_CONFIG_INTERNAL_H */
