/*
 * ect_config_parse / ect_config_validate: every rule of SPEC §2, the
 * defaults, the environment, P2P support (hostile bytes are in
 * test_config_hostile.c).  Each error case checks the
 * status, that the message names the key and the value, and that the output
 * struct was left untouched.
 */
#include <pthread.h>

#include <ectier/ectier.h>

#include "support/config.h"

/* ---- valid configs and defaults -------------------------------------------------- */

static void
test_minimal_config_gives_documented_defaults(void)
{
    ect_config_t cfg;
    ts_config_poison(&cfg);
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1073741824", 1, &cfg));
    CHECK_EQ_INT(cfg.role, ECT_ROLE_BOTH);
    CHECK_EQ_U64(cfg.cpu_bytes, 1073741824);
    CHECK(!cfg.p2p_enabled);
    CHECK(cfg.consumer_ack_timeout_s == 2.0);
    CHECK(cfg.read_timeout_s == 20.0);
    CHECK(cfg.quarantine_s == 60.0);
    CHECK(cfg.producer_pin_lease_s == 30.0);
    CHECK(cfg.announce_lease_s == 30.0);
    CHECK(cfg.defer_budget_s == 60.0);
    CHECK_STR_EQ(cfg.region_name, "");
    CHECK_EQ_INT(cfg.transport, ECT_TRANSPORT_AUTO);
    CHECK_EQ_INT(cfg.tcp_stripes, 0);
    CHECK_STR_EQ(cfg.events_endpoint, "");
    CHECK_STR_EQ(cfg.metrics_address, "");
    CHECK_STR_EQ(cfg.curve_server_key_file, "");
    CHECK_STR_EQ(cfg.curve_client_key_file, "");
    CHECK_STR_EQ(cfg.curve_allowed_clients_file, "");
    CHECK_EQ_INT(cfg.copy_threads, 2);
    CHECK_EQ_INT(cfg.copy_spin_us, 50);
    CHECK(cfg.prefault);
    CHECK(cfg.region_reaper);
    CHECK_STR_EQ(cfg.side_channel_host, "localhost");
    CHECK_EQ_INT(cfg.side_channel_port, 5601);
}

static void
test_init_matches_parsed_defaults(void)
{
    ect_config_t a, b;
    CHECK_OK(ect_config_init(&a));
    CHECK_EQ_U64(a.cpu_bytes, 0);
    CHECK_EQ_INT(a.role, ECT_ROLE_PRODUCER);
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 5", 1, &b));
    a.role = b.role;
    a.cpu_bytes = b.cpu_bytes;
    CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    CHECK_STATUS(ect_config_init(NULL), ECT_ERR_INVALID_ARG);
}

static void
test_each_role_and_connector_name_is_accepted(void)
{
    static const char *const roles[] = {"ec_producer", "ec_consumer", "ec_both"};
    static const char *const connectors[] = {"ECTierConnector", "ECCPUConnector", "ectier"};
    for (int c = 0; c < 3; c++) {
        for (int r = 0; r < 3; r++) {
            char json[256];
            ect_config_t cfg;
            snprintf(json, sizeof(json),
                     "{\"ec_connector\": \"%s\", \"ec_role\": \"%s\", "
                     "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 4096}}",
                     connectors[c], roles[r]);
            CHECK_OK(ts_parse_text(json, 1, &cfg));
            CHECK_EQ_INT(cfg.role, r);
            CHECK_STR_EQ(ect_role_str(cfg.role), roles[r]);
        }
    }
}

static void
test_role_helpers_say_who_produces_and_consumes(void)
{
    CHECK(ect_role_produces(ECT_ROLE_PRODUCER) && !ect_role_consumes(ECT_ROLE_PRODUCER));
    CHECK(!ect_role_produces(ECT_ROLE_CONSUMER) && ect_role_consumes(ECT_ROLE_CONSUMER));
    CHECK(ect_role_produces(ECT_ROLE_BOTH) && ect_role_consumes(ECT_ROLE_BOTH));
    CHECK(!ect_role_produces((ect_role_t)7) && !ect_role_consumes((ect_role_t)7));
    CHECK_STR_EQ(ect_role_str((ect_role_t)7), "?");
    CHECK_STR_EQ(ect_transport_str(ECT_TRANSPORT_AUTO), "auto");
    CHECK_STR_EQ(ect_transport_str(ECT_TRANSPORT_TCP), "tcp");
    CHECK_STR_EQ(ect_transport_str(ECT_TRANSPORT_SAME_HOST), "same_host");
    CHECK_STR_EQ(ect_transport_str((ect_transport_t)-1), "?");
}

static void
test_cpu_bytes_accepts_number_decimal_string_and_suffixes(void)
{
    static const struct {
        const char *json;
        uint64_t bytes;
    } cases[] = {
        {"1073741824", 1073741824},
        {"\"1073741824\"", 1073741824},
        {"\"1GiB\"", 1ull << 30},
        {"\" 1 gib \"", 1ull << 30},
        {"\"512MB\"", 512000000},
        {"\"8G\"", 8ull << 30},
        {"1125899906842624", 1ull << 50},
        {"1e3", 1000},
        {"4096.0", 4096},
        {"\"1024TiB\"", 1ull << 50},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char members[128];
        ect_config_t cfg;
        snprintf(members, sizeof(members), "\"ec_cpu_bytes\": %s", cases[i].json);
        CHECK_MSG(ts_parse_extra(members, 1, &cfg) == ECT_OK, "%s: %s", cases[i].json,
                  ect_last_error());
        CHECK_EQ_U64(cfg.cpu_bytes, cases[i].bytes);
    }
}

static void
test_engine_top_level_keys_are_ignored(void)
{
    ect_config_t cfg;
    CHECK_OK(ts_parse_text(
        "{\"engine_id\": \"e-1\", \"ec_buffer_device\": \"cuda\", \"ec_buffer_size\": 1e9, "
        "\"ec_ip\": \"127.0.0.1\", \"ec_port\": 14579, \"ec_rank\": null, "
        "\"ec_parallel_size\": 1, \"ec_connector_module_path\": null, "
        "\"something_new\": [1, {\"x\": [true]}], \"EC_ROLE\": 5, "
        "\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_consumer\", "
        "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"2GiB\"}}",
        1, &cfg));
    CHECK_EQ_INT(cfg.role, ECT_ROLE_CONSUMER);
    CHECK_EQ_U64(cfg.cpu_bytes, 2ull << 30);
}

static void
test_every_extra_key_reaches_its_field(void)
{
    ect_config_t cfg;
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": \"3MiB\", \"ec_enable_nixl\": true, "
                            "\"consumer_ack_timeout_s\": 0.5, \"read_timeout_s\": \"7.25\", "
                            "\"quarantine_s\": 90, \"producer_pin_lease_s\": 12, "
                            "\"announce_lease_s\": 0, \"defer_budget_s\": 5, "
                            "\"region_name\": \"ectier_test-1.x\", \"transport\": \"same_host\", "
                            "\"events_endpoint\": \"tcp://127.0.0.1:5610\", "
                            "\"metrics_address\": \"0.0.0.0:9100\", "
                            "\"curve_server_key_file\": \"/etc/ectier/server.key\", "
                            "\"curve_client_key_file\": \"client.key\", "
                            "\"curve_allowed_clients_file\": \"/etc/ectier/allowed\", "
                            "\"copy_threads\": \"8\", \"copy_spin_us\": 0, \"prefault\": \"no\", "
                            "\"region_reaper\": false, \"tcp_stripes\": 3",
                            1, &cfg));
    CHECK_EQ_U64(cfg.cpu_bytes, 3ull << 20);
    CHECK(cfg.p2p_enabled);
    CHECK(cfg.consumer_ack_timeout_s == 0.5);
    CHECK(cfg.read_timeout_s == 7.25);
    CHECK(cfg.quarantine_s == 90);
    CHECK(cfg.producer_pin_lease_s == 12);
    CHECK(cfg.announce_lease_s == 0);
    CHECK(cfg.defer_budget_s == 5);
    CHECK_STR_EQ(cfg.region_name, "ectier_test-1.x");
    CHECK_EQ_INT(cfg.transport, ECT_TRANSPORT_SAME_HOST);
    CHECK_STR_EQ(cfg.events_endpoint, "tcp://127.0.0.1:5610");
    CHECK_STR_EQ(cfg.metrics_address, "0.0.0.0:9100");
    CHECK_STR_EQ(cfg.curve_server_key_file, "/etc/ectier/server.key");
    CHECK_STR_EQ(cfg.curve_client_key_file, "client.key");
    CHECK_STR_EQ(cfg.curve_allowed_clients_file, "/etc/ectier/allowed");
    CHECK_EQ_INT(cfg.copy_threads, 8);
    CHECK_EQ_INT(cfg.copy_spin_us, 0);
    CHECK(!cfg.prefault);
    CHECK(!cfg.region_reaper);
    CHECK_EQ_INT(cfg.tcp_stripes, 3);
}

static void
test_bool_accepts_json_bools_and_documented_words(void)
{
    static const struct {
        const char *json;
        bool value;
    } cases[] = {
        {"true", true},          {"false", false},  {"\"true\"", true}, {"\" TRUE \"", true},
        {"\"1\"", true},         {"\"yes\"", true}, {"\"Yes\"", true},  {"\"false\"", false},
        {"\"0\"", false},        {"\"no\"", false}, {"\"\"", false},    {"\"  \"", false},
        {"\"\\tNo\\n\"", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char members[128];
        ect_config_t cfg;
        snprintf(members, sizeof(members), "\"ec_cpu_bytes\": 1, \"prefault\": %s", cases[i].json);
        CHECK_MSG(ts_parse_extra(members, 1, &cfg) == ECT_OK, "%s: %s", cases[i].json,
                  ect_last_error());
        CHECK_MSG(cfg.prefault == cases[i].value, "%s gave %d", cases[i].json, cfg.prefault);
    }
}

static void
test_enable_p2p_is_an_alias_and_both_must_agree(void)
{
    ect_config_t cfg;
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1, \"ec_enable_p2p\": \"yes\"", 1, &cfg));
    CHECK(cfg.p2p_enabled);
    CHECK_OK(ts_parse_extra(
        "\"ec_cpu_bytes\": 1, \"ec_enable_p2p\": true, \"ec_enable_nixl\": \"1\"", 1, &cfg));
    CHECK(cfg.p2p_enabled);
    ts_config_poison(&cfg);
    CHECK_STATUS(
        ts_parse_extra("\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": true, \"ec_enable_p2p\": \"no\"",
                       1, &cfg),
        ECT_ERR_CONFIG);
    CHECK(ts_config_untouched(&cfg));
    CHECK_CONTAINS(ect_last_error(), "ec_enable_nixl and ec_enable_p2p");
    CHECK_CONTAINS(ect_last_error(), "different values");
}

static void
test_length_is_respected_without_nul_terminator(void)
{
    const char *doc = "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
                      "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 77}}";
    size_t len = strlen(doc);
    char *buf = malloc(len + 8);
    CHECK(buf != NULL);
    memcpy(buf, doc, len);
    memcpy(buf + len, "garbage", 7); /* no NUL anywhere */
    ect_config_t cfg;
    CHECK_OK(ect__config_parse_ex(buf, len, 1, &cfg));
    CHECK_EQ_U64(cfg.cpu_bytes, 77);
    CHECK_STATUS(ect__config_parse_ex(buf, len + 7, 1, &cfg), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "\"garbage\"");
    free(buf);
}

static void
test_escaped_unicode_in_values_is_decoded(void)
{
    ect_config_t cfg;
    CHECK_OK(
        ts_parse_text(" \n{\"ec_connector\": \"ect\\u0069er\", \"ec_role\": \"ec_b\\u006fth\", "
                      "\"ec_connector_extra_config\": {\"region_name\": \"r\\u005f1\", "
                      "\"ec_cpu_bytes\": 1}}\r\n\t ",
                      1, &cfg));
    CHECK_EQ_INT(cfg.role, ECT_ROLE_BOTH);
    CHECK_STR_EQ(cfg.region_name, "r_1");
}

/* ---- error paths: status, key and value in the message, output untouched ---------- */

static void
test_connector_and_role_errors_name_allowed_values(void)
{
    static const struct ts_bad_case cases[] = {
        {"{\"ec_role\": \"ec_both\", \"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1}}",
         ECT_ERR_CONFIG, "ec_connector is missing",
         "\"ECTierConnector\", \"ECCPUConnector\", \"ectier\""},
        {"{\"ec_connector\": \"SHMConnector\", \"ec_role\": \"ec_both\"}", ECT_ERR_CONFIG,
         "ec_connector", "\"SHMConnector\""},
        {"{\"ec_connector\": 5, \"ec_role\": \"ec_both\"}", ECT_ERR_CONFIG, "ec_connector", "= 5"},
        {"{\"ec_connector\": \"eccpuconnector\", \"ec_role\": \"ec_both\"}", ECT_ERR_CONFIG,
         "\"eccpuconnector\"", "\"ECCPUConnector\""},
        {"{\"ec_connector\": \"ectier\"}", ECT_ERR_CONFIG, "ec_role is missing",
         "\"ec_producer\", \"ec_consumer\", \"ec_both\""},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"producer\"}", ECT_ERR_CONFIG,
         "ec_role = \"producer\"", "\"ec_producer\", \"ec_consumer\", \"ec_both\""},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": null}", ECT_ERR_CONFIG, "ec_role", "null"},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": [\"ec_both\"]}", ECT_ERR_CONFIG, "ec_role",
         "an array"},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"\"}", ECT_ERR_CONFIG, "ec_role", "= \"\""},
    };
    CHECK_BAD(cases, 1);
}

static void
test_missing_or_zero_cpu_bytes_says_must_be_specified(void)
{
    static const struct ts_bad_case cases[] = {
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\"}", ECT_ERR_CONFIG, TS_CPU_MISSING,
         "ec_connector_extra_config is missing"},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", "
         "\"ec_connector_extra_config\": null}",
         ECT_ERR_CONFIG, TS_CPU_MISSING, "null"},
        {"", ECT_ERR_CONFIG, TS_CPU_MISSING, "missing"},
        {"\"ec_enable_nixl\": false", ECT_ERR_CONFIG, TS_CPU_MISSING, "missing"},
        {"\"ec_cpu_bytes\": 0", ECT_ERR_CONFIG, TS_CPU_MISSING, "ec_cpu_bytes = 0"},
        {"\"ec_cpu_bytes\": false", ECT_ERR_CONFIG, TS_CPU_MISSING, "ec_cpu_bytes = false"},
        {"\"ec_cpu_bytes\": null", ECT_ERR_CONFIG, TS_CPU_MISSING, "ec_cpu_bytes = null"},
        {"\"ec_cpu_bytes\": \"0\"", ECT_ERR_CONFIG, TS_CPU_MISSING, "ec_cpu_bytes = \"0\""},
        {"\"ec_cpu_bytes\": \"0GiB\"", ECT_ERR_CONFIG, TS_CPU_MISSING, "\"0GiB\""},
        {"\"ec_cpu_bytes\": -0.0", ECT_ERR_CONFIG, TS_CPU_MISSING, "ec_cpu_bytes = -0"},
    };
    CHECK_BAD(cases, 1);
}

static void
test_bad_cpu_bytes_values_are_named(void)
{
    static const struct ts_bad_case cases[] = {
        {"\"ec_cpu_bytes\": -1", ECT_ERR_CONFIG, "ec_cpu_bytes = -1", "negative"},
        {"\"ec_cpu_bytes\": 1.5", ECT_ERR_CONFIG, "ec_cpu_bytes = 1.5", "whole number"},
        {"\"ec_cpu_bytes\": 1e400", ECT_ERR_CONFIG, "ec_cpu_bytes = inf", "finite"},
        {"\"ec_cpu_bytes\": -1e400", ECT_ERR_CONFIG, "ec_cpu_bytes = -inf", "finite"},
        {"\"ec_cpu_bytes\": 9007199254740992", ECT_ERR_CONFIG, "ec_cpu_bytes = 9007199254740992",
         "as a string"},
        {"\"ec_cpu_bytes\": 18446744073709551616", ECT_ERR_CONFIG,
         "ec_cpu_bytes = 1.8446744073709552e+19", "as a string"},
        {"\"ec_cpu_bytes\": true", ECT_ERR_CONFIG, "ec_cpu_bytes = true", "\"8GiB\""},
        {"\"ec_cpu_bytes\": [1]", ECT_ERR_CONFIG, "ec_cpu_bytes = an array", "bytes"},
        {"\"ec_cpu_bytes\": {}", ECT_ERR_CONFIG, "ec_cpu_bytes = an object", "bytes"},
        {"\"ec_cpu_bytes\": \"abc\"", ECT_ERR_CONFIG, "ec_cpu_bytes = \"abc\"", "digit"},
        {"\"ec_cpu_bytes\": \"-1\"", ECT_ERR_CONFIG, "ec_cpu_bytes = \"-1\"", "sign"},
        {"\"ec_cpu_bytes\": \"1.5GiB\"", ECT_ERR_CONFIG, "\"1.5GiB\"", "fraction"},
        {"\"ec_cpu_bytes\": \"8 XB\"", ECT_ERR_CONFIG, "\"8 XB\"", "unknown suffix 'XB'"},
        {"\"ec_cpu_bytes\": \"18446744073709551616\"", ECT_ERR_CONFIG, "\"18446744073709551616\"",
         "2^64 - 1"},
        {"\"ec_cpu_bytes\": \"2048TiB\"", ECT_ERR_CONFIG, "ec_cpu_bytes = \"2048TiB\"",
         "limit of 1125899906842624 bytes (1 PiB)"},
        {"\"ec_cpu_bytes\": 2251799813685248", ECT_ERR_CONFIG, "2251799813685248", "1 PiB"},
    };
    CHECK_BAD(cases, 1);
}

static void
test_misplaced_top_level_keys_are_refused(void)
{
    static const struct ts_bad_case cases[] = {
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", \"ec_enable_nixl\": true, "
         "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1}}",
         ECT_ERR_CONFIG, "ec_enable_nixl is a top-level key", "llm-d#2535"},
        {"{\"ec_enable_nixl\": false}", ECT_ERR_CONFIG, "ec_enable_nixl",
         "belongs in ec_connector_extra_config"},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", \"ec_cpu_bytes\": 5, "
         "\"ec_connector_extra_config\": {}}",
         ECT_ERR_CONFIG, "ec_cpu_bytes is a top-level key", "ec_connector_extra_config"},
        {"{\"ec_enable_p2p\": true}", ECT_ERR_CONFIG, "ec_enable_p2p", "top-level"},
    };
    CHECK_BAD(cases, 1);
}

static void
test_unknown_extra_keys_are_named_with_suggestions(void)
{
    static const struct ts_bad_case cases[] = {
        {"\"ec_cpu_byte\": 5", ECT_ERR_CONFIG,
         "unknown key in ec_connector_extra_config: "
         "\"ec_cpu_byte\"",
         "did you mean \"ec_cpu_bytes\"?"},
        {"\"ec_cpu_bytes\": 5, \"cpu_bytes\": 5", ECT_ERR_CONFIG, "\"cpu_bytes\"",
         "did you mean \"ec_cpu_bytes\"?"},
        {"\"ec_cpu_bytes\": 5, \"Read_Timeout_S\": 5", ECT_ERR_CONFIG, "\"Read_Timeout_S\"",
         "did you mean \"read_timeout_s\"?"},
        {"\"ec_cpu_bytes\": 5, \"ec_enable_nxil\": true", ECT_ERR_CONFIG, "\"ec_enable_nxil\"",
         "did you mean \"ec_enable_nixl\"?"},
        {"\"ec_cpu_bytes\": 5, \"num_ec_blocks\": 100000", ECT_ERR_CONFIG, "\"num_ec_blocks\"",
         "an old key"},
        {"\"ec_cpu_bytes\": 5, \"default_encoder_node\": \"h:1\"", ECT_ERR_CONFIG,
         "\"default_encoder_node\"", "ec_transfer_params"},
        {"\"a1\": 1, \"a2\": 2, \"ec_cpu_bytes\": 5, \"a3\": 3, \"a4\": 4, \"a5\": 5, \"a6\": 6",
         ECT_ERR_CONFIG,
         "unknown keys in ec_connector_extra_config: \"a1\", \"a2\", \"a3\", "
         "\"a4\"",
         "and 2 more"},
    };
    CHECK_BAD(cases, 1);
    ect_config_t cfg;
    CHECK_STATUS(ts_parse_extra("\"ec_cpu_bytes\": 5, \"zebra\": 1", 1, &cfg), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "\"zebra\"");
    CHECK_MSG(strstr(ect_last_error(), "did you mean") == NULL, "'zebra' got a suggestion: %s",
              ect_last_error());
}

static void
test_bad_bools_timeouts_and_counts_are_named(void)
{
    static const struct ts_bad_case cases[] = {
        {"\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": \"maybe\"", ECT_ERR_CONFIG,
         "ec_enable_nixl = \"maybe\"", "\"yes\""},
        {"\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": 1", ECT_ERR_CONFIG, "ec_enable_nixl = 1",
         "true or false"},
        {"\"ec_cpu_bytes\": 1, \"ec_enable_p2p\": \"on\"", ECT_ERR_CONFIG, "ec_enable_p2p = \"on\"",
         "true or false"},
        {"\"ec_cpu_bytes\": 1, \"prefault\": null", ECT_ERR_CONFIG, "prefault = null",
         "default (true)"},
        {"\"ec_cpu_bytes\": 1, \"consumer_ack_timeout_s\": \"abc\"", ECT_ERR_CONFIG,
         "consumer_ack_timeout_s = \"abc\"", "> 0 and <= 3600"},
        {"\"ec_cpu_bytes\": 1, \"consumer_ack_timeout_s\": -1", ECT_ERR_CONFIG,
         "consumer_ack_timeout_s = -1", "out of range"},
        {"\"ec_cpu_bytes\": 1, \"consumer_ack_timeout_s\": 0", ECT_ERR_CONFIG,
         "consumer_ack_timeout_s = 0", "> 0"},
        {"\"ec_cpu_bytes\": 1, \"read_timeout_s\": 3601", ECT_ERR_CONFIG, "read_timeout_s = 3601",
         "<= 3600"},
        {"\"ec_cpu_bytes\": 1, \"read_timeout_s\": 1e400", ECT_ERR_CONFIG, "read_timeout_s = inf",
         "finite"},
        {"\"ec_cpu_bytes\": 1, \"quarantine_s\": \"nan\"", ECT_ERR_CONFIG, "quarantine_s = \"nan\"",
         "not a number"},
        {"\"ec_cpu_bytes\": 1, \"quarantine_s\": \"inf\"", ECT_ERR_CONFIG, "quarantine_s = \"inf\"",
         "not a number"},
        {"\"ec_cpu_bytes\": 1, \"quarantine_s\": \"1e999\"", ECT_ERR_CONFIG,
         "quarantine_s = \"1e999\"", "not a number"},
        {"\"ec_cpu_bytes\": 1, \"producer_pin_lease_s\": \"0x10\"", ECT_ERR_CONFIG,
         "producer_pin_lease_s = \"0x10\"", "seconds"},
        {"\"ec_cpu_bytes\": 1, \"announce_lease_s\": -0.001", ECT_ERR_CONFIG,
         "announce_lease_s = -0.001", ">= 0"},
        {"\"ec_cpu_bytes\": 1, \"defer_budget_s\": true", ECT_ERR_CONFIG, "defer_budget_s = true",
         "seconds"},
        {"\"ec_cpu_bytes\": 1, \"defer_budget_s\": null", ECT_ERR_CONFIG, "defer_budget_s = null",
         "default (60)"},
        {"\"ec_cpu_bytes\": 1, \"copy_threads\": 0", ECT_ERR_CONFIG, "copy_threads = 0",
         "from 1 to 64"},
        {"\"ec_cpu_bytes\": 1, \"copy_threads\": 65", ECT_ERR_CONFIG, "copy_threads = 65",
         "from 1 to 64"},
        {"\"ec_cpu_bytes\": 1, \"copy_threads\": 2.5", ECT_ERR_CONFIG, "copy_threads = 2.5",
         "whole number"},
        {"\"ec_cpu_bytes\": 1, \"copy_threads\": \"two\"", ECT_ERR_CONFIG, "copy_threads = \"two\"",
         "whole number"},
        {"\"ec_cpu_bytes\": 1, \"copy_threads\": \"99999999999999999999999\"", ECT_ERR_CONFIG,
         "\"99999999999999999999999\"", "out of range"},
        {"\"ec_cpu_bytes\": 1, \"copy_threads\": -3", ECT_ERR_CONFIG, "copy_threads = -3",
         "negative"},
        {"\"ec_cpu_bytes\": 1, \"copy_spin_us\": 100001", ECT_ERR_CONFIG, "copy_spin_us = 100001",
         "from 0 to 100000"},
        {"\"ec_cpu_bytes\": 1, \"transport\": \"ucx\"", ECT_ERR_CONFIG, "transport = \"ucx\"",
         "\"auto\", \"tcp\", \"same_host\""},
        {"\"ec_cpu_bytes\": 1, \"transport\": 1", ECT_ERR_CONFIG, "transport = 1", "\"auto\""},
        {"\"ec_cpu_bytes\": 1, \"tcp_stripes\": 5", ECT_ERR_CONFIG, "tcp_stripes = 5",
         "from 0 to 4"},
    };
    CHECK_BAD(cases, 1);
}

static void
test_bad_strings_are_named(void)
{
    static const struct ts_bad_case cases[] = {
        {"\"ec_cpu_bytes\": 1, \"region_name\": \"../x\"", ECT_ERR_CONFIG, "region_name = \"../x\"",
         "region name"},
        {"\"ec_cpu_bytes\": 1, \"region_name\": \".hidden\"", ECT_ERR_CONFIG,
         "region_name = \".hidden\"", "'.'"},
        {"\"ec_cpu_bytes\": 1, \"region_name\": \"a..b\"", ECT_ERR_CONFIG, "region_name = \"a..b\"",
         "\"..\""},
        {"\"ec_cpu_bytes\": 1, \"region_name\": \"a/b\"", ECT_ERR_CONFIG, "region_name = \"a/b\"",
         "A-Z a-z 0-9 . _ -"},
        {"\"ec_cpu_bytes\": 1, \"region_name\": \"a b\"", ECT_ERR_CONFIG, "region_name = \"a b\"",
         "region name"},
        {"\"ec_cpu_bytes\": 1, \"region_name\": \"caf\xc3\xa9\"", ECT_ERR_CONFIG,
         "region_name = \"caf\xc3\xa9\"", "region name"},
        {"\"ec_cpu_bytes\": 1, \"region_name\": \"tab\\there\"", ECT_ERR_CONFIG,
         "region_name = \"tab\\x09here\"", "region name"},
        {"\"ec_cpu_bytes\": 1, \"region_name\": 5", ECT_ERR_CONFIG, "region_name = 5",
         "a string of at most 200 bytes"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"foo\"", ECT_ERR_CONFIG,
         "events_endpoint = \"foo\"", "tcp://host:port"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"tcp://host\"", ECT_ERR_CONFIG,
         "\"tcp://host\"", "ZeroMQ endpoint"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"tcp://h:70000\"", ECT_ERR_CONFIG,
         "\"tcp://h:70000\"", "ZeroMQ endpoint"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"ipc://\"", ECT_ERR_CONFIG, "\"ipc://\"",
         "ipc://path"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"tcp://::1:5\"", ECT_ERR_CONFIG,
         "\"tcp://::1:5\"", "ZeroMQ endpoint"},
        {"\"ec_cpu_bytes\": 1, \"events_replay_endpoint\": \"ipc:///tmp/r\"", ECT_ERR_CONFIG,
         "events_replay_endpoint = \"ipc:///tmp/r\"", "needs events_endpoint"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"ipc:///tmp/e\", "
         "\"events_replay_endpoint\": \"ipc:///tmp/e\"",
         ECT_ERR_CONFIG, "events_replay_endpoint = \"ipc:///tmp/e\"", "an endpoint of its own"},
        {"\"ec_cpu_bytes\": 1, \"events_replay_endpoint\": \"tcp://h\"", ECT_ERR_CONFIG,
         "events_replay_endpoint = \"tcp://h\"", "ZeroMQ endpoint"},
        {"\"ec_cpu_bytes\": 1, \"events_replay_buffer\": 0", ECT_ERR_CONFIG,
         "events_replay_buffer = 0", "1"},
        {"\"ec_cpu_bytes\": 1, \"events_hwm\": -1", ECT_ERR_CONFIG, "events_hwm = -1", "1"},
        {"\"ec_cpu_bytes\": 1, \"metrics_address\": \"9100\"", ECT_ERR_CONFIG,
         "metrics_address = \"9100\"", "host:port"},
        {"\"ec_cpu_bytes\": 1, \"metrics_address\": \":9100\"", ECT_ERR_CONFIG,
         "metrics_address = \":9100\"", "host:port"},
        {"\"ec_cpu_bytes\": 1, \"metrics_address\": \"h:x\"", ECT_ERR_CONFIG,
         "metrics_address = \"h:x\"", "host:port"},
        {"\"ec_cpu_bytes\": 1, \"metrics_address\": \"a b:1\"", ECT_ERR_CONFIG, "\"a b:1\"",
         "host:port"},
        {"\"ec_cpu_bytes\": 1, \"curve_server_key_file\": \"a\\nb\"", ECT_ERR_CONFIG,
         "curve_server_key_file = \"a\\x0ab\"", "control character"},
        {"\"ec_cpu_bytes\": 1, \"curve_allowed_clients_file\": \"/etc/allowed\"", ECT_ERR_CONFIG,
         "curve_allowed_clients_file = \"/etc/allowed\"", "needs curve_server_key_file"},
        {"\"ec_cpu_bytes\": 1, \"curve_client_key_file\": false", ECT_ERR_CONFIG,
         "curve_client_key_file = false", "string"},
    };
    CHECK_BAD(cases, 1);
}

static void
test_valid_endpoint_and_address_forms_are_accepted(void)
{
    static const char *const endpoints[] = {
        "tcp://127.0.0.1:5610",     "tcp://*:5610",    "tcp://[::1]:5610", "tcp://host.example:1",
        "ipc:///tmp/ectier.events", "inproc://events", "tcp://eth0:*"};
    static const char *const addresses[] = {"localhost:9100", "0.0.0.0:0", "[::1]:9100",
                                            "10.1.2.3:65535"};
    ect_config_t cfg;
    char members[256];
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
        snprintf(members, sizeof(members), "\"ec_cpu_bytes\": 1, \"events_endpoint\": \"%s\"",
                 endpoints[i]);
        CHECK_MSG(ts_parse_extra(members, 1, &cfg) == ECT_OK, "%s: %s", endpoints[i],
                  ect_last_error());
        CHECK_STR_EQ(cfg.events_endpoint, endpoints[i]);
    }
    for (size_t i = 0; i < sizeof(addresses) / sizeof(addresses[0]); i++) {
        snprintf(members, sizeof(members), "\"ec_cpu_bytes\": 1, \"metrics_address\": \"%s\"",
                 addresses[i]);
        CHECK_MSG(ts_parse_extra(members, 1, &cfg) == ECT_OK, "%s: %s", addresses[i],
                  ect_last_error());
        CHECK_STR_EQ(cfg.metrics_address, addresses[i]);
    }
}

static void
test_region_name_of_exactly_the_limit_fits(void)
{
    char members[400];
    char name[ECT_CONFIG_NAME_MAX + 2];
    ect_config_t cfg;
    memset(name, 'n', ECT_CONFIG_NAME_MAX);
    name[ECT_CONFIG_NAME_MAX] = '\0';
    snprintf(members, sizeof(members), "\"ec_cpu_bytes\": 1, \"region_name\": \"%s\"", name);
    CHECK_OK(ts_parse_extra(members, 1, &cfg));
    CHECK_STR_EQ(cfg.region_name, name);
    strcat(name, "n");
    snprintf(members, sizeof(members), "\"ec_cpu_bytes\": 1, \"region_name\": \"%s\"", name);
    ts_config_poison(&cfg);
    CHECK_STATUS(ts_parse_extra(members, 1, &cfg), ECT_ERR_CONFIG);
    CHECK(ts_config_untouched(&cfg));
    CHECK_CONTAINS(ect_last_error(), "region_name = \"nnnn");
    CHECK_CONTAINS(ect_last_error(), "is 201 bytes long: use at most 200 bytes");
}

/* ---- environment ---------------------------------------------------------------------- */

static const char *const p2p_producer =
    "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": true}}";

static void
test_side_channel_env_is_read_for_p2p_producers(void)
{
    ect_config_t cfg;
    setenv("VLLM_EC_SIDE_CHANNEL_HOST", "10.0.0.5", 1);
    setenv("VLLM_EC_SIDE_CHANNEL_PORT", "6000", 1);
    CHECK_OK(ts_parse_text(p2p_producer, 1, &cfg));
    CHECK_STR_EQ(cfg.side_channel_host, "10.0.0.5");
    CHECK_EQ_INT(cfg.side_channel_port, 6000);
    /* ec_both produces too. */
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": true", 1, &cfg));
    CHECK_STR_EQ(cfg.side_channel_host, "10.0.0.5");
    setenv("VLLM_EC_SIDE_CHANNEL_PORT", "0", 1);
    CHECK_OK(ts_parse_text(p2p_producer, 1, &cfg));
    CHECK_EQ_INT(cfg.side_channel_port, 0);
}

static void
test_ectier_env_names_win_over_vllm_names(void)
{
    ect_config_t cfg;
    setenv("VLLM_EC_SIDE_CHANNEL_HOST", "vllm-host", 1);
    setenv("VLLM_EC_SIDE_CHANNEL_PORT", "not-even-a-port", 1);
    setenv("ECTIER_SIDE_CHANNEL_HOST", "[fd00::1]", 1);
    setenv("ECTIER_SIDE_CHANNEL_PORT", " 7001 ", 1);
    CHECK_OK(ts_parse_text(p2p_producer, 1, &cfg));
    CHECK_STR_EQ(cfg.side_channel_host, "[fd00::1]");
    CHECK_EQ_INT(cfg.side_channel_port, 7001);
    /* An empty ECTIER_ value counts as unset: the VLLM_ one applies. */
    setenv("ECTIER_SIDE_CHANNEL_HOST", "", 1);
    CHECK_OK(ts_parse_text(p2p_producer, 1, &cfg));
    CHECK_STR_EQ(cfg.side_channel_host, "vllm-host");
}

static void
test_side_channel_env_is_ignored_unless_p2p_producer(void)
{
    ect_config_t cfg;
    setenv("VLLM_EC_SIDE_CHANNEL_HOST", "bad host", 1);
    setenv("VLLM_EC_SIDE_CHANNEL_PORT", "99999", 1);
    /* Consumer with P2P. */
    CHECK_OK(ts_parse_text("{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_consumer\", "
                           "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1, "
                           "\"ec_enable_nixl\": true}}",
                           1, &cfg));
    CHECK_STR_EQ(cfg.side_channel_host, "localhost");
    CHECK_EQ_INT(cfg.side_channel_port, 5601);
    /* Producer without P2P. */
    CHECK_OK(ts_parse_text("{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
                           "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1}}",
                           1, &cfg));
    CHECK_EQ_INT(cfg.side_channel_port, 5601);
}

static void
test_bad_side_channel_env_names_variable_and_value(void)
{
    static const struct {
        const char *var, *value, *message;
    } cases[] = {
        {"VLLM_EC_SIDE_CHANNEL_PORT", "abc",
         "environment variable VLLM_EC_SIDE_CHANNEL_PORT = "
         "\"abc\" is not a whole number"},
        {"VLLM_EC_SIDE_CHANNEL_PORT", "70000",
         "VLLM_EC_SIDE_CHANNEL_PORT = \"70000\" is out of "
         "range: use an integer from 0 to 65535"},
        {"VLLM_EC_SIDE_CHANNEL_PORT", "-1", "VLLM_EC_SIDE_CHANNEL_PORT = \"-1\""},
        {"VLLM_EC_SIDE_CHANNEL_PORT", "5601x", "VLLM_EC_SIDE_CHANNEL_PORT = \"5601x\""},
        {"ECTIER_SIDE_CHANNEL_PORT", "65536", "ECTIER_SIDE_CHANNEL_PORT = \"65536\""},
        {"VLLM_EC_SIDE_CHANNEL_HOST", "bad host",
         "VLLM_EC_SIDE_CHANNEL_HOST = \"bad host\" is "
         "not a host"},
        {"ECTIER_SIDE_CHANNEL_HOST", "tcp://h", "ECTIER_SIDE_CHANNEL_HOST = \"tcp://h\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ect_config_t cfg;
        unsetenv("VLLM_EC_SIDE_CHANNEL_HOST");
        unsetenv("VLLM_EC_SIDE_CHANNEL_PORT");
        unsetenv("ECTIER_SIDE_CHANNEL_HOST");
        unsetenv("ECTIER_SIDE_CHANNEL_PORT");
        setenv(cases[i].var, cases[i].value, 1);
        ts_config_poison(&cfg);
        CHECK_MSG(ts_parse_text(p2p_producer, 1, &cfg) == ECT_ERR_CONFIG, "%s=%s accepted",
                  cases[i].var, cases[i].value);
        CHECK(ts_config_untouched(&cfg));
        CHECK_CONTAINS(ect_last_error(), cases[i].message);
    }
}

/* ---- P2P support in the build ------------------------------------------------------- */

static void
test_p2p_without_p2p_build_is_unsupported_with_how_to(void)
{
    static const struct ts_bad_case cases[] = {
        {"\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": true", ECT_ERR_UNSUPPORTED,
         "ec_enable_nixl is true", "libzmq3-dev libmsgpack-dev"},
        {"\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": \"yes\"", ECT_ERR_UNSUPPORTED,
         "scripts/install-deps.sh", "-DECT_WITH_P2P=ON"},
        {"\"ec_cpu_bytes\": 1, \"ec_enable_p2p\": \"1\"", ECT_ERR_UNSUPPORTED,
         "ec_enable_p2p is true", "remove ec_enable_p2p"},
        {"\"ec_cpu_bytes\": 1, \"events_endpoint\": \"tcp://127.0.0.1:5610\"", ECT_ERR_UNSUPPORTED,
         "events_endpoint = \"tcp://127.0.0.1:5610\"", "-DECT_WITH_P2P=ON"},
    };
    CHECK_BAD(cases, 0);
    ect_config_t cfg;
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1, \"ec_enable_nixl\": false", 0, &cfg));
    CHECK(!cfg.p2p_enabled);
}

static void
test_public_parse_follows_this_builds_p2p_support(void)
{
    ect_config_t cfg;
    const char *doc = "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_consumer\", "
                      "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1, "
                      "\"ec_enable_nixl\": true}}";
    ect_status_t s = ect_config_parse(doc, strlen(doc), &cfg);
    CHECK_EQ_INT(s, ect_has_p2p() ? ECT_OK : ECT_ERR_UNSUPPORTED);
}

struct captured {
    int warnings;
    char last[512];
};

static void
capture(ect_log_level_t level, const char *message, void *user)
{
    struct captured *c = user;
    if (level == ECT_LOG_WARN) {
        c->warnings++;
        snprintf(c->last, sizeof(c->last), "%s", message);
    }
}

static void
test_p2p_only_keys_warn_when_p2p_is_off(void)
{
    struct captured c = {0};
    ect_config_t cfg;
    ect_log_set_sink(capture, &c);
    ect_log_set_level(ECT_LOG_WARN);
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1, \"read_timeout_s\": 5", 1, &cfg));
    CHECK_EQ_INT(c.warnings, 1);
    CHECK_CONTAINS(c.last, "read_timeout_s has no effect while P2P is off");
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1, \"read_timeout_s\": 5, \"ec_enable_nixl\": true",
                            1, &cfg));
    CHECK_EQ_INT(c.warnings, 1);
    CHECK_OK(ts_parse_extra("\"ec_cpu_bytes\": 1, \"copy_threads\": 4", 1, &cfg));
    CHECK_EQ_INT(c.warnings, 1);
    ect_log_set_sink(NULL, NULL);
}

/* ---- validate (configs built by hand) ------------------------------------------------- */

static void
test_validate_accepts_init_plus_required_values(void)
{
    ect_config_t cfg;
    CHECK_OK(ect_config_init(&cfg));
    CHECK_STATUS(ect_config_validate(&cfg), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), TS_CPU_MISSING);
    cfg.cpu_bytes = 1 << 20;
    cfg.role = ECT_ROLE_CONSUMER;
    CHECK_OK(ect_config_validate(&cfg));
    ect_config_t copy = cfg; /* plain assignment is a full copy */
    CHECK_OK(ect_config_validate(&copy));
}

static void
test_validate_refuses_each_bad_field(void)
{
    ect_config_t good, cfg;
    CHECK_OK(ect_config_init(&good));
    good.cpu_bytes = 4096;

    cfg = good;
    cfg.read_timeout_s = -1;
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "read_timeout_s = -1");
    cfg = good;
    cfg.quarantine_s = 0.0 / 0.0;
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "quarantine_s = ");
    cfg = good;
    cfg.copy_threads = 0;
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "copy_threads = 0");
    cfg = good;
    cfg.role = (ect_role_t)7;
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "ec_role = 7");
    cfg = good;
    cfg.transport = (ect_transport_t)3;
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "transport = 3");
    cfg = good;
    cfg.cpu_bytes = ECT_CONFIG_CPU_BYTES_MAX + 1;
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "ec_cpu_bytes = 1125899906842625");
    cfg = good;
    memset(cfg.region_name, 'a', sizeof(cfg.region_name));
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "region_name is not NUL-terminated");
    cfg = good;
    strcpy(cfg.region_name, "../etc");
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "region_name = \"../etc\"");
    cfg = good;
    strcpy(cfg.curve_allowed_clients_file, "/k");
    CHECK_STATUS(ect__config_validate_ex(&cfg, 1), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "needs curve_server_key_file");
    cfg = good;
    cfg.p2p_enabled = true;
    CHECK_OK(ect__config_validate_ex(&cfg, 1));
    CHECK_STATUS(ect__config_validate_ex(&cfg, 0), ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "-DECT_WITH_P2P=ON");
}

/* ---- threads ---------------------------------------------------------------------------- */

static void *
parse_many(void *arg)
{
    int role = *(const int *)arg;
    static const char *const roles[] = {"ec_producer", "ec_consumer", "ec_both"};
    char json[256];
    snprintf(json, sizeof(json),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"%s\", \"ec_connector_extra_config\": "
             "{\"ec_cpu_bytes\": \"%dMiB\", \"copy_threads\": %d}}",
             roles[role % 3], role + 1, role + 1);
    for (int i = 0; i < 300; i++) {
        ect_config_t cfg;
        if (ect_config_parse(json, strlen(json), &cfg) != ECT_OK)
            return (void *)1;
        if ((int)cfg.role != role % 3 || cfg.cpu_bytes != (uint64_t)(role + 1) << 20 ||
            cfg.copy_threads != (unsigned)role + 1)
            return (void *)1;
    }
    return NULL;
}

static void
test_parse_is_safe_from_many_threads(void)
{
    pthread_t t[4];
    int ids[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, parse_many, &ids[i]) == 0);
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        failed += r != NULL;
    }
    CHECK_EQ_INT(failed, 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_minimal_config_gives_documented_defaults),
    ECT_CASE(test_init_matches_parsed_defaults),
    ECT_CASE(test_each_role_and_connector_name_is_accepted),
    ECT_CASE(test_role_helpers_say_who_produces_and_consumes),
    ECT_CASE(test_cpu_bytes_accepts_number_decimal_string_and_suffixes),
    ECT_CASE(test_engine_top_level_keys_are_ignored),
    ECT_CASE(test_every_extra_key_reaches_its_field),
    ECT_CASE(test_bool_accepts_json_bools_and_documented_words),
    ECT_CASE(test_enable_p2p_is_an_alias_and_both_must_agree),
    ECT_CASE(test_length_is_respected_without_nul_terminator),
    ECT_CASE(test_escaped_unicode_in_values_is_decoded),
    ECT_CASE(test_connector_and_role_errors_name_allowed_values),
    ECT_CASE(test_missing_or_zero_cpu_bytes_says_must_be_specified),
    ECT_CASE(test_bad_cpu_bytes_values_are_named),
    ECT_CASE(test_misplaced_top_level_keys_are_refused),
    ECT_CASE(test_unknown_extra_keys_are_named_with_suggestions),
    ECT_CASE(test_bad_bools_timeouts_and_counts_are_named),
    ECT_CASE(test_bad_strings_are_named),
    ECT_CASE(test_valid_endpoint_and_address_forms_are_accepted),
    ECT_CASE(test_region_name_of_exactly_the_limit_fits),
    ECT_CASE(test_side_channel_env_is_read_for_p2p_producers),
    ECT_CASE(test_ectier_env_names_win_over_vllm_names),
    ECT_CASE(test_side_channel_env_is_ignored_unless_p2p_producer),
    ECT_CASE(test_bad_side_channel_env_names_variable_and_value),
    ECT_CASE(test_p2p_without_p2p_build_is_unsupported_with_how_to),
    ECT_CASE(test_public_parse_follows_this_builds_p2p_support),
    ECT_CASE(test_p2p_only_keys_warn_when_p2p_is_off),
    ECT_CASE(test_validate_accepts_init_plus_required_values),
    ECT_CASE(test_validate_refuses_each_bad_field),
    ECT_CASE(test_parse_is_safe_from_many_threads),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
