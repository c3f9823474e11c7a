/*
 * Helpers shared by the P2P end-to-end tests: whole instances (scheduler +
 * worker + sessions, tools/p2p/instance.h from the ectier_instance library)
 * driven through the engine calls, the test pattern, and the consumer's
 * admission loop.  Each fails the case on an unexpected status.
 */
#ifndef ECT_TESTS_SUPPORT_P2P_H
#define ECT_TESTS_SUPPORT_P2P_H

#include <stdint.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "instance.h"
#include "pattern.h"
#include "support/util.h"

/* An instance with P2P on, listening on 127.0.0.1 (a free port unless
 * ECTIER_SIDE_CHANNEL_PORT is set); extra: more extra-config keys or NULL. */
void ts_p2p_open_instance(struct ect_cli_instance *in, const char *role,
                          unsigned long long cpu_bytes, const char *hidden, const char *extra,
                          const char *model);

/* request_finished on the producer: the announcement (ect_free it). */
char *ts_p2p_announce(struct ect_cli_instance *p, const char *hash, uint64_t tokens);

/* Save the test pattern of entry i (tokens rows of block bytes). */
void ts_p2p_save_pattern(struct ect_cli_instance *p, unsigned i, uint64_t tokens, uint64_t block,
                         char hash[65]);

/* What the consumer decided for an item. */
enum ts_p2p_outcome { TS_P2P_FETCHED, TS_P2P_ENCODE_LOCALLY, TS_P2P_UNAVAILABLE, TS_P2P_DEFERRED };

/* One ensure_cache_available call for a one-item request. */
enum ts_p2p_outcome ts_p2p_ensure_once(struct ect_cli_instance *c, const char *hash,
                                       uint64_t tokens, const char *params, int has_local_input);

/* Ask until the item is decided or timeout_s passes (then TS_P2P_DEFERRED). */
enum ts_p2p_outcome ts_p2p_fetch(struct ect_cli_instance *c, const char *hash, uint64_t tokens,
                                 const char *params, int has_local_input, double timeout_s);

/* request_finished on the consumer for a one-item request. */
void ts_p2p_finish(struct ect_cli_instance *c, const char *hash, uint64_t tokens);

/* Load the entry through the worker and compare it with the pattern. */
void ts_p2p_check_loaded(struct ect_cli_instance *c, const char *hash, uint64_t tokens,
                         uint64_t block);

/* The instance's scheduler metrics. */
ect_metrics_t ts_p2p_metrics(struct ect_cli_instance *in);

/* The producer's port, from an announcement. */
unsigned ts_p2p_params_port(const char *params);

#endif /* ECT_TESTS_SUPPORT_P2P_H */
