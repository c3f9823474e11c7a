/*
 * Configuration: the engine's `ec_transfer_config` JSON, resolved into a
 * plain, copyable struct (SPEC §2).
 *
 * The engine passes the same document it takes as --ec-transfer-config:
 *
 *     {"ec_connector": "ECCPUConnector", "ec_role": "ec_both",
 *      "ec_connector_extra_config": {"ec_cpu_bytes": "8GiB", "ec_enable_nixl": true}}
 *
 * ect_config_parse() checks every value (type, range, allowed words), reads
 * the side-channel environment variables when P2P is on and the role
 * produces, and fills an ect_config_t.  Every key, its type, default and
 * meaning come from one declarative table (src/common/settings.c) that also
 * produces the README's settings section (`ectier settings`).
 *
 * ect_config_t holds no pointers: strings are fixed-size, NUL-terminated
 * arrays, so a config may be copied by assignment and shipped between
 * processes.  Nothing here keeps global state; every function is safe to call
 * from any thread (they read the environment, so do not call setenv()
 * concurrently).
 */
#ifndef ECTIER_CONFIG_H
#define ECTIER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The instance's role (`ec_role`).  A producer saves encodings to the tier
 * and serves them to peers; a consumer loads them (from the tier or a peer). */
typedef enum ect_role {
    ECT_ROLE_PRODUCER = 0, /* "ec_producer" */
    ECT_ROLE_CONSUMER = 1, /* "ec_consumer" */
    ECT_ROLE_BOTH = 2,     /* "ec_both" */
} ect_role_t;

/* The P2P data transport (`transport`). */
typedef enum ect_transport {
    ECT_TRANSPORT_AUTO = 0,      /* "auto": same-host path for local peers, else tcp */
    ECT_TRANSPORT_TCP = 1,       /* "tcp": always ectier's grant-checked TCP stream */
    ECT_TRANSPORT_SAME_HOST = 2, /* "same_host": only peers on this host */
} ect_transport_t;

/* Capacities of the string fields, in bytes without the terminating NUL. */
#define ECT_CONFIG_NAME_MAX 200  /* region_name (the region's own name rule) */
#define ECT_CONFIG_ADDR_MAX 255  /* endpoints, addresses, host names */
#define ECT_CONFIG_PATH_MAX 1023 /* key file paths */

/* ec_cpu_bytes above this is refused: no machine maps more. */
#define ECT_CONFIG_CPU_BYTES_MAX (UINT64_C(1) << 50) /* 1 PiB */

/*
 * The resolved configuration.  ect_config_init() gives the defaults below;
 * the two required values (role, cpu_bytes) have no meaningful default and
 * must be set by the caller or come from ect_config_parse().
 */
typedef struct ect_config {
    ect_role_t role;    /* ec_role (required) */
    uint64_t cpu_bytes; /* ec_cpu_bytes: size of the CPU tier in bytes (required, > 0) */
    bool p2p_enabled;   /* ec_enable_nixl / ec_enable_p2p (false) */

    /* Timeouts and leases, in seconds; all finite and > 0 (announce: >= 0). */
    double consumer_ack_timeout_s; /* consumer waits this long for an XferAck (2.0) */
    double read_timeout_s;         /* one P2P read may take this long (20) */
    double quarantine_s;           /* blocks of a timed-out read stay fenced this long (60) */
    double producer_pin_lease_s;   /* a peer's pin on a producer entry expires after (30) */
    double announce_lease_s;       /* an announced entry is held this long (30; 0 = no hold) */
    double defer_budget_s;         /* a consumer defers one request item at most this long (60) */

    /* Region file name without directory and ".mmap"; "" = the region code's
     * default `ectier_{instance}_dp{rank}`. */
    char region_name[ECT_CONFIG_NAME_MAX + 1];
    ect_transport_t transport; /* P2P data transport (auto) */
    uint16_t data_port;        /* producer: TCP data stream port (0 = a free port) */
    unsigned tcp_stripes;      /* consumer: connections a TCP read uses, 1..4 (0 = one per CPU) */
    unsigned max_grants;       /* producer: grants outstanding at most (4096) */
    unsigned max_grants_per_peer; /* producer: per consumer connection (1024) */
    /* ZeroMQ PUB endpoint for eviction/lifecycle events ("tcp://host:port",
     * "ipc://path", "inproc://name"); "" = no event stream. */
    char events_endpoint[ECT_CONFIG_ADDR_MAX + 1];
    /* ZeroMQ ROUTER endpoint answering replay requests of the event stream
     * (src/p2p/events.h); "" = none.  Needs events_endpoint. */
    char events_replay_endpoint[ECT_CONFIG_ADDR_MAX + 1];
    unsigned events_replay_buffer; /* recent event batches kept for replay (10000) */
    unsigned events_hwm;           /* PUB high-water mark, messages per subscriber (100000) */
    /* "host:port" to serve Prometheus text over HTTP; "" = not served. */
    char metrics_address[ECT_CONFIG_ADDR_MAX + 1];
    /* ZeroMQ CURVE key files for the control plane; "" = off.  Read by the
     * P2P code, not here: parsing never touches the file system. */
    char curve_server_key_file[ECT_CONFIG_PATH_MAX + 1];
    char curve_client_key_file[ECT_CONFIG_PATH_MAX + 1];
    char curve_allowed_clients_file[ECT_CONFIG_PATH_MAX + 1];
    unsigned copy_threads; /* CPU copy-engine threads, 1..64 (2) */
    /* Microseconds a CPU copy thread (or a waiting caller) keeps polling
     * for work before it sleeps, 0..100000 (50); 0 = never polls. */
    unsigned copy_spin_us;
    bool prefault;      /* touch every region page at creation (true) */
    bool region_reaper; /* fork a reaper that unlinks the region after a crash (true) */

    /* Producer side channel (environment, read only when P2P is on and the
     * role produces; otherwise left at the defaults and unused). */
    char side_channel_host[ECT_CONFIG_ADDR_MAX + 1]; /* bind + published host ("localhost") */
    uint16_t side_channel_port;                      /* 5601; 0 = pick a free port */
} ect_config_t;

/* "ec_producer", "ec_consumer", "ec_both"; "?" for a value outside the enum. */
ECT_API const char *ect_role_str(ect_role_t role);

/* Whether the role saves encodings (producer, both) / loads them (consumer,
 * both).  false for a value outside the enum. */
ECT_API bool ect_role_produces(ect_role_t role);
ECT_API bool ect_role_consumes(ect_role_t role);

/* "auto", "tcp", "same_host"; "?" for a value outside the enum. */
ECT_API const char *ect_transport_str(ect_transport_t transport);

/* Fill *cfg with the defaults (role ECT_ROLE_PRODUCER and cpu_bytes 0 as
 * placeholders for the required values).
 * Returns ECT_OK, or ECT_ERR_INVALID_ARG if cfg is NULL. */
ECT_API ECT_MUST_CHECK ect_status_t ect_config_init(ect_config_t *cfg);

/*
 * Parse the engine's ec_transfer_config JSON (len bytes at json; need not be
 * NUL-terminated; borrowed), apply the environment, validate everything and
 * write *cfg_p on success only.
 *
 * Rules (SPEC §2, README "Settings"): ec_connector is "ECCPUConnector" or
 * "ectier"; ec_role is one of the three roles; other top-level keys are
 * ignored, except that a top-level ec_enable_nixl (or any key that belongs
 * in the extra config) is refused; unknown keys in ec_connector_extra_config
 * are refused by name; duplicate keys are refused.
 *
 * Returns ECT_OK; ECT_ERR_PARSE for bytes that are not one JSON value (bad
 * JSON, bad UTF-8, a NUL byte or \u0000 escape, trailing text, over 1 MiB);
 * ECT_ERR_CONFIG for a missing or bad value (the message names the key, the
 * value and what is allowed); ECT_ERR_UNSUPPORTED when P2P (or the event
 * stream) is asked for in a build without it; ECT_ERR_INVALID_ARG for NULL
 * pointers.  Thread safety: safe (reads the environment).
 */
ECT_API ECT_MUST_CHECK ect_status_t ect_config_parse(const char *json, size_t len,
                                                     ect_config_t *cfg_p);

/*
 * Check a config built or edited by hand with the same rules as
 * ect_config_parse (ranges, string contents, cross-field rules, P2P built
 * in).  Returns ECT_OK, ECT_ERR_CONFIG (message names field and value),
 * ECT_ERR_UNSUPPORTED or ECT_ERR_INVALID_ARG.  Thread safety: safe.
 */
ECT_API ECT_MUST_CHECK ect_status_t ect_config_validate(const ect_config_t *cfg);

/*
 * Write the resolved values as text, one "key = value" line per setting (the
 * keys of the extra config and the environment variables' names; strings
 * unquoted, "" printed as nothing after "= ").  buf may be NULL with cap 0
 * to learn the length.  On ECT_OK, *len_p gets the length without the NUL
 * and, if buf is not NULL, buf holds the NUL-terminated text.  Returns
 * ECT_OK, ECT_ERR_NO_SPACE if cap is too small (nothing useful in buf; the
 * message gives the size needed), ECT_ERR_INVALID_ARG.  Thread safety: safe.
 */
ECT_API ECT_MUST_CHECK ect_status_t ect_config_format(const ect_config_t *cfg, char *buf,
                                                      size_t cap, size_t *len_p);

/*
 * The README's settings section in Markdown (top-level keys, extra-config
 * keys and environment variables: key, type, default, meaning), generated
 * from the settings table.  Buffer contract as ect_config_format.
 */
ECT_API ECT_MUST_CHECK ect_status_t ect_config_settings_markdown(char *buf, size_t cap,
                                                                 size_t *len_p);

/*
 * Parse a byte size: a decimal integer with an optional suffix, optionally
 * separated from it by spaces: B; KB, MB, GB, TB (powers of 1000); KiB, MiB, GiB,
 * TiB or K, M, G, T (powers of 1024).  Suffixes are case-insensitive;
 * spaces and tabs around the whole text are ignored.  "8GiB" = 8589934592.
 * Returns ECT_OK and writes *bytes_p; ECT_ERR_PARSE for empty text, a sign,
 * a fraction, an unknown suffix or trailing text; ECT_ERR_OVERFLOW above
 * 2^64 - 1; ECT_ERR_INVALID_ARG for NULL.  Thread safety: safe.
 */
ECT_API ECT_MUST_CHECK ect_status_t ect_size_parse(const char *text, uint64_t *bytes_p);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_CONFIG_H */
