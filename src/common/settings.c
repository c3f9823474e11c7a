/*
 * The settings table (its converters are in settings_convert.c).
 *
 * Each row says where a setting lives (top level, extra config, environment),
 * its type, its default as text, its documentation, its field in
 * ect_config_t and its limits.  A value from JSON, from the environment or
 * from a row's own default text is converted by the same code and checked
 * against the same limits, so the documented defaults are exactly what
 * ect_config_init produces (a test parses every default).
 *
 * Invariants: every message names the key (or variable), the value as given
 * and what is allowed; a field is written only after its value passed every
 * check.  The table is constant and nothing here has state.
 */
#include <ctype.h>
#include <string.h>

#include "common/error.h"
#include "common/settings.h"

static const char *const connector_choices[] = {"ECTierConnector", "ECCPUConnector", "ectier"};
static const char *const role_choices[] = {"ec_producer", "ec_consumer", "ec_both"};
static const char *const transport_choices[] = {"auto", "tcp", "same_host"};

/* ---- content rules for strings -------------------------------------------- */

static bool
is_host_char(unsigned char c)
{
    return isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '%' || c == '[' ||
           c == ']';
}

/* Digits only, value <= max; "" is not a number. */
static bool
parse_port_text(const char *s, size_t len, unsigned max, unsigned *v_p)
{
    unsigned v = 0;
    if (len == 0 || len > 5)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > max)
        return false;
    *v_p = v;
    return true;
}

/* "host:port" with host made of host characters ("[::1]" for IPv6, "*" when
 * star_ok) and a port within min_port..65535 (or "*" when star_ok). */
static bool
valid_host_port(const char *s, unsigned min_port, bool star_ok)
{
    const char *colon = strrchr(s, ':');
    unsigned port;
    if (colon == NULL || colon == s)
        return false;
    size_t host_len = (size_t)(colon - s);
    if (!(star_ok && host_len == 1 && s[0] == '*')) {
        for (size_t i = 0; i < host_len; i++)
            if (!is_host_char((unsigned char)s[i]))
                return false;
        /* A bare IPv6 address would make the port ambiguous. */
        if (memchr(s, ':', host_len) != NULL && !(s[0] == '[' && s[host_len - 1] == ']'))
            return false;
    }
    if (star_ok && strcmp(colon + 1, "*") == 0)
        return true;
    return parse_port_text(colon + 1, strlen(colon + 1), 65535, &port) && port >= min_port;
}

static ect_status_t
check_region_name(const char *label, const char *v)
{
    char q[128];
    if (*v == '\0')
        return ECT_OK;
    for (const char *p = v; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || c == '.' || c == '_' || c == '-'))
            return ect__error(ECT_ERR_CONFIG,
                              "%s = %s is not a region name: use 1 to %d characters of A-Z a-z "
                              "0-9 . _ - (not starting with '.', no \"..\"), or \"\" for the "
                              "default",
                              label, ect__quote(q, sizeof(q), v, strlen(v)), ECT_CONFIG_NAME_MAX);
    }
    if (v[0] == '.' || strstr(v, "..") != NULL)
        return ect__error(ECT_ERR_CONFIG,
                          "%s = %s is not a region name: it must not start with '.' or contain "
                          "\"..\"",
                          label, ect__quote(q, sizeof(q), v, strlen(v)));
    return ECT_OK;
}

static ect_status_t
check_endpoint(const char *label, const char *v)
{
    char q[128];
    bool ok = false;
    if (*v == '\0')
        return ECT_OK;
    if (strncmp(v, "tcp://", 6) == 0) {
        ok = valid_host_port(v + 6, 1, true);
    } else if (strncmp(v, "ipc://", 6) == 0 || strncmp(v, "inproc://", 9) == 0) {
        const char *rest = strstr(v, "://") + 3;
        ok = *rest != '\0';
        for (const char *p = rest; *p != '\0'; p++)
            if ((unsigned char)*p < 0x21 || (unsigned char)*p == 0x7f)
                ok = false;
    }
    if (!ok)
        return ect__error(ECT_ERR_CONFIG,
                          "%s = %s is not a ZeroMQ endpoint: use tcp://host:port, ipc://path or "
                          "inproc://name, or \"\" for none",
                          label, ect__quote(q, sizeof(q), v, strlen(v)));
    return ECT_OK;
}

static ect_status_t
check_host_port(const char *label, const char *v)
{
    char q[128];
    if (*v == '\0' || valid_host_port(v, 0, false))
        return ECT_OK;
    return ect__error(ECT_ERR_CONFIG,
                      "%s = %s is not an address: use host:port (port 0 to 65535, [addr]:port "
                      "for IPv6), or \"\" for none",
                      label, ect__quote(q, sizeof(q), v, strlen(v)));
}

static ect_status_t
check_path(const char *label, const char *v)
{
    char q[128];
    for (const char *p = v; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            return ect__error(ECT_ERR_CONFIG,
                              "%s = %s is not a usable path: it contains a control character",
                              label, ect__quote(q, sizeof(q), v, strlen(v)));
    return ECT_OK;
}

static ect_status_t
check_host(const char *label, const char *v)
{
    char q[128];
    bool ok = *v != '\0';
    for (const char *p = v; *p != '\0'; p++)
        if (!is_host_char((unsigned char)*p))
            ok = false;
    if (!ok)
        return ect__error(ECT_ERR_CONFIG,
                          "%s = %s is not a host: use a host name or IP address (letters, digits, "
                          ". - _ : %% [ ])",
                          label, ect__quote(q, sizeof(q), v, strlen(v)));
    return ECT_OK;
}

/* ---- the table ---------------------------------------------------------------- */

#define FIELD(f)   offsetof(ect_config_t, f), sizeof(((ect_config_t *)0)->f)
#define NO_FIELD   ECT_SETTING_NO_FIELD, 0
#define CHOICES(a) a, sizeof(a) / sizeof((a)[0])

static const struct ect__setting table[] = {
    {.name = "ec_connector",
     .where = ECT_SETTING_TOP,
     .type = ECT_SETTING_ENUM,
     .flags = ECT_SETTING_REQUIRED,
     .doc = "The connector the engine loads: `ECTierConnector` with `ec_connector_module_path` "
            "`ectier.vllm` loads ectier's Python connector; ectier also answers to the seed's "
            "name and its own.",
     .offset = NO_FIELD,
     .choices = CHOICES(connector_choices)},
    {.name = "ec_role",
     .where = ECT_SETTING_TOP,
     .type = ECT_SETTING_ENUM,
     .flags = ECT_SETTING_REQUIRED,
     .doc = "`ec_producer` saves encodings and serves them to peers; `ec_consumer` loads them "
            "from the CPU tier or a peer; `ec_both` does both.",
     .offset = FIELD(role),
     .choices = CHOICES(role_choices)},
    {.name = "ec_connector_extra_config",
     .where = ECT_SETTING_TOP,
     .type = ECT_SETTING_OBJECT,
     .flags = ECT_SETTING_REQUIRED,
     .doc = "The keys of the next table; must hold at least `ec_cpu_bytes`.",
     .offset = NO_FIELD},

    {.name = "ec_cpu_bytes",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SIZE,
     .flags = ECT_SETTING_REQUIRED,
     .doc = "Size of this instance's CPU tier (its shared `/dev/shm` region). A JSON integer, or "
            "a string with an optional suffix: `B`; `KB` `MB` `GB` `TB` (powers of 1000); `KiB` "
            "`MiB` `GiB` `TiB` or `K` `M` `G` `T` (powers of 1024), e.g. `\"8GiB\"`.",
     .offset = FIELD(cpu_bytes),
     .min = 1,
     .max = (double)ECT_CONFIG_CPU_BYTES_MAX,
     .missing = "ec_cpu_bytes must be specified in ec_connector_extra_config"},
    {.name = "ec_enable_nixl",
     .alias = "ec_enable_p2p",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_BOOL,
     .default_text = "false",
     .doc = "Turn on peer-to-peer transfer of encodings (ZeroMQ control plane; grant-checked "
            "TCP stream or same-host data plane). Needs a build with P2P.",
     .offset = FIELD(p2p_enabled)},
    {.name = "consumer_ack_timeout_s",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SECONDS,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "2.0",
     .doc = "How long a consumer waits for the producer's XferAck to a read request.",
     .offset = FIELD(consumer_ack_timeout_s),
     .min = 0,
     .min_open = true,
     .max = 3600},
    {.name = "read_timeout_s",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SECONDS,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "20",
     .doc = "How long one P2P read may take; an overdue read is abandoned and its blocks are "
            "quarantined.",
     .offset = FIELD(read_timeout_s),
     .min = 0,
     .min_open = true,
     .max = 3600},
    {.name = "quarantine_s",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SECONDS,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "60",
     .doc = "How long the blocks of an abandoned read stay fenced off (a late write may still "
            "land in them) before they are freed.",
     .offset = FIELD(quarantine_s),
     .min = 0,
     .min_open = true,
     .max = 86400},
    {.name = "producer_pin_lease_s",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SECONDS,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "30",
     .doc = "Lease on a producer entry pinned for a peer's read: the pin is dropped when it "
            "expires even if the peer never reports back.",
     .offset = FIELD(producer_pin_lease_s),
     .min = 0,
     .min_open = true,
     .max = 3600},
    {.name = "data_port",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_PORT,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "0",
     .doc = "Producer: TCP port of the data stream, bound to the side-channel host like the "
            "control plane; 0 picks a free port. Consumers learn it from each XferAck.",
     .offset = FIELD(data_port),
     .min = 0,
     .max = 65535},
    {.name = "max_grants",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "4096",
     .doc = "Producer: most grants (entries pinned for peers' reads) outstanding at once; a "
            "request beyond it is answered NACK_NOT_READY (retried) and counted.",
     .offset = FIELD(max_grants),
     .min = 1,
     .max = 1048576},
    {.name = "max_grants_per_peer",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "1024",
     .doc = "Producer: most grants one consumer connection may hold at once; as `max_grants`.",
     .offset = FIELD(max_grants_per_peer),
     .min = 1,
     .max = 1048576},
    {.name = "announce_lease_s",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SECONDS,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "30",
     .doc = "How long a producer keeps an entry it has announced to consumers safe from "
            "eviction; one expiry per announcement. 0: no hold.",
     .offset = FIELD(announce_lease_s),
     .min = 0,
     .max = 86400},
    {.name = "defer_budget_s",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_SECONDS,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "60",
     .doc = "How long a consumer may defer one request's media item waiting for its encoding "
            "before the request is failed.",
     .offset = FIELD(defer_budget_s),
     .min = 0,
     .min_open = true,
     .max = 3600},
    {.name = "region_name",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .default_text = "",
     .doc = "Name of the region file `/dev/shm/<name>.mmap`: characters `A-Z a-z 0-9 . _ -`, "
            "not starting with `.`, no `..`. Empty: `ectier_<instance>_dp<rank>`. One scheduler "
            "owns a region: a second instance started with the same name is refused, naming the "
            "owner's pid (its workers join).",
     .offset = FIELD(region_name),
     .check = check_region_name},
    {.name = "transport",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_ENUM,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "auto",
     .doc = "Data transport for P2P reads: `auto` takes the same-host path for peers on this "
            "machine (and user) and the TCP stream for the others; `tcp` always the TCP stream; "
            "`same_host` only same-host peers. (`ucx` was removed: see the README's data plane.)",
     .offset = FIELD(transport),
     .choices = CHOICES(transport_choices)},
    {.name = "tcp_stripes",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "0",
     .doc = "The most TCP connections one P2P read uses at once.  A read over the TCP stream is "
            "split in block-aligned stripes, each on its own connection and thread at both ends, "
            "when the producer offers stripes and each stripe gets at least 1 MiB: one "
            "connection moved 2-5 GB/s on the machines measured, four 3-13.  Smaller reads "
            "in flight together are received on up to as many threads.  0: one per CPU of "
            "this machine, 1 to 4.  1: never striped, one receiving thread.",
     .offset = FIELD(tcp_stripes),
     .min = 0,
     .max = 4},
    {.name = "events_endpoint",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .default_text = "",
     .doc = "ZeroMQ PUB endpoint of the event stream (stored, evicted, announced, withdrawn), "
            "e.g. `tcp://127.0.0.1:5610`. Empty: no stream. Needs a build with P2P (ZeroMQ).",
     .offset = FIELD(events_endpoint),
     .check = check_endpoint},
    {.name = "events_replay_endpoint",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .default_text = "",
     .doc = "ZeroMQ ROUTER endpoint that replays the event stream: a subscriber that joined late "
            "or missed batches asks for everything since a sequence number (or a snapshot). "
            "Needs `events_endpoint`. Empty: no replay.",
     .offset = FIELD(events_replay_endpoint),
     .check = check_endpoint},
    {.name = "events_replay_buffer",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .default_text = "10000",
     .doc = "How many recent event batches the replay endpoint keeps (64 MiB at most); older "
            "ones are answered with a snapshot of the entries held.",
     .offset = FIELD(events_replay_buffer),
     .min = 1,
     .max = 1000000},
    {.name = "events_hwm",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .default_text = "100000",
     .doc = "High-water mark of the event stream's PUB socket: messages queued per subscriber "
            "before that subscriber misses batches (counted in "
            "`ectier_events_hwm_drops_total`).",
     .offset = FIELD(events_hwm),
     .min = 1,
     .max = 10000000},
    {.name = "metrics_address",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .default_text = "",
     .doc = "`host:port` to serve Prometheus text metrics over HTTP. Empty: not served.",
     .offset = FIELD(metrics_address),
     .check = check_host_port},
    {.name = "curve_server_key_file",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "",
     .doc = "ZeroMQ CURVE server key file; set, the control plane is authenticated and "
            "encrypted. Empty: plain TCP.",
     .offset = FIELD(curve_server_key_file),
     .check = check_path},
    {.name = "curve_client_key_file",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "",
     .doc = "ZeroMQ CURVE client key file (the consumer's key pair). Empty: off.",
     .offset = FIELD(curve_client_key_file),
     .check = check_path},
    {.name = "curve_allowed_clients_file",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_STRING,
     .flags = ECT_SETTING_P2P_ONLY,
     .default_text = "",
     .doc = "File of the consumer public keys a producer accepts; needs "
            "`curve_server_key_file`. Empty: any client with the server key.",
     .offset = FIELD(curve_allowed_clients_file),
     .check = check_path},
    {.name = "copy_threads",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .default_text = "2",
     .doc = "Threads of the CPU copy engine (saves and loads between engine memory and the "
            "region).",
     .offset = FIELD(copy_threads),
     .min = 1,
     .max = 64},
    {.name = "copy_spin_us",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_UINT,
     .default_text = "50",
     .doc = "Microseconds a CPU copy thread that ran out of work keeps polling for the next "
            "batch before it sleeps (a waiting caller polls as long).  A sleeping thread takes "
            "5-100 us to wake (the most on VMs), about as long as copying 1 MiB; set this above "
            "the time between steps to keep the threads awake, at the price of up to a core "
            "per copy thread while polling.  On hosts with CPUs to spare, a consumer also wakes "
            "its copy threads to poll when it asks a same-host peer for an entry, for up to twice "
            "the usual ack round trip (at most 2 ms).  A batch submitted within this long of "
            "the previous one is part of a burst and always goes to the copy threads.  0: never "
            "poll.",
     .offset = FIELD(copy_spin_us),
     .min = 0,
     .max = 100000},
    {.name = "prefault",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_BOOL,
     .default_text = "true",
     .doc = "Touch every page of a new region, so a full `/dev/shm` fails at start-up instead "
            "of with SIGBUS later, and first copies run at full speed.  With P2P also: the TCP "
            "stream's producer and consumer read every page of their region once through the "
            "kernel at start (where a hypervisor shadows page tables, a stream's first pass "
            "over a page otherwise runs several times slower), and a consumer reads a same-host "
            "producer's pages in the background once it maps them.",
     .offset = FIELD(prefault)},
    {.name = "region_reaper",
     .where = ECT_SETTING_EXTRA,
     .type = ECT_SETTING_BOOL,
     .default_text = "true",
     .doc = "Fork a small reaper process that removes the region file once the last process "
            "using it is gone, even after SIGKILL.",
     .offset = FIELD(region_reaper)},

    {.name = "VLLM_EC_SIDE_CHANNEL_HOST",
     .alias = "ECTIER_SIDE_CHANNEL_HOST",
     .where = ECT_SETTING_ENV,
     .type = ECT_SETTING_STRING,
     .flags = ECT_SETTING_PRODUCER,
     .default_text = "localhost",
     .doc = "Host the producer's control-plane socket binds to and publishes to consumers; it "
            "must be reachable from them (e.g. the pod IP).",
     .offset = FIELD(side_channel_host),
     .check = check_host},
    {.name = "VLLM_EC_SIDE_CHANNEL_PORT",
     .alias = "ECTIER_SIDE_CHANNEL_PORT",
     .where = ECT_SETTING_ENV,
     .type = ECT_SETTING_PORT,
     .flags = ECT_SETTING_PRODUCER,
     .default_text = "5601",
     .doc = "Port of that socket; 0 picks a free port.",
     .offset = FIELD(side_channel_port),
     .min = 0,
     .max = 65535},
};

const struct ect__setting *
ect__settings(size_t *n_p)
{
    *n_p = sizeof(table) / sizeof(table[0]);
    return table;
}

const struct ect__setting *
ect__setting_find(enum ect__setting_where where, const char *name)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (table[i].where != where)
            continue;
        if (strcmp(table[i].name, name) == 0 ||
            (table[i].alias != NULL && strcmp(table[i].alias, name) == 0))
            return &table[i];
    }
    return NULL;
}
