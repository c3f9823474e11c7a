/*
 * `ectier producer`: run one producer instance for multi-host or black-box
 * use.  With --fill N --tokens T it creates N ready entries of the test
 * pattern (tools/p2p/pattern.h), prints the ec_transfer_params that
 * request_finished returns for each (one JSON object per line), then
 * "ready", and serves consumers until SIGINT or SIGTERM.  With a
 * metrics_address it says on stderr where the metrics are served (the port
 * the system picked for port 0), before "ready", so a black-box user can
 * scrape them; stdout stays "params lines, then ready" for its callers.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "instance.h"
#include "pattern.h"
#include "step/scheduler_hooks.h"

static const char usage[] =
    "usage: ectier producer --config JSON|@FILE --model NAME --hidden N --dtype D\n"
    "                       [--engine-version V] [--listen HOST:PORT] [--fill N --tokens T]\n"
    "  --config          the engine's ec_transfer_config (ec_role ec_producer or ec_both,\n"
    "                    \"ec_enable_nixl\": true)\n"
    "  --model, --hidden, --dtype, --engine-version\n"
    "                    the compatibility hash's inputs and the block geometry\n"
    "  --listen          bind and publish HOST:PORT (overrides VLLM_EC_SIDE_CHANNEL_*);\n"
    "                    port 0 picks a free port\n"
    "  --fill N --tokens T\n"
    "                    create N ready test entries of T tokens each\n"
    "Prints one ec_transfer_params object per line, then 'ready'; serves until\n"
    "SIGINT/SIGTERM, then cleans up and exits 0.  With metrics_address in the config,\n"
    "first says on stderr where the metrics are: 'ectier producer: metrics at\n"
    "http://HOST:PORT/metrics' (the port picked for port 0).\n";

static int
parse_count(const char *text, unsigned long long max, unsigned long long *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end != '\0' || text[0] == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

int
ect_cli_producer(int argc, char **argv)
{
    struct ect_cli_instance_args a = {.cmd = "producer"};
    const char *fill = NULL, *tokens = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return ect_cli_usage_error("producer", usage, "'%s' needs a value or is unknown", o);
        const char **slot = strcmp(o, "--config") == 0           ? &a.config
                            : strcmp(o, "--model") == 0          ? &a.model
                            : strcmp(o, "--hidden") == 0         ? &a.hidden
                            : strcmp(o, "--dtype") == 0          ? &a.dtype
                            : strcmp(o, "--engine-version") == 0 ? &a.engine_version
                            : strcmp(o, "--listen") == 0         ? &a.listen
                            : strcmp(o, "--fill") == 0           ? &fill
                            : strcmp(o, "--tokens") == 0         ? &tokens
                                                                 : NULL;
        if (slot == NULL)
            return ect_cli_usage_error("producer", usage, "unknown option '%s'", o);
        *slot = argv[++i];
    }
    unsigned long long n_fill = 0, n_tokens = 0;
    if ((fill != NULL) != (tokens != NULL))
        return ect_cli_usage_error("producer", usage, "--fill and --tokens go together");
    if (fill != NULL && (parse_count(fill, 1u << 20, &n_fill) != 0 ||
                         parse_count(tokens, 1u << 24, &n_tokens) != 0 || n_tokens == 0))
        return ect_cli_usage_error("producer", usage,
                                   "--fill N (0..1048576) and --tokens T (1..16777216) must be "
                                   "integers");

    /* Signals go to sigwait below: block them before any library thread
     * starts, so every thread inherits the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    struct ect_cli_instance in;
    int rc = ect_cli_instance_open(&in, &a, usage);
    if (rc != 0)
        return rc;
    if (!ect_role_produces(in.cfg.role)) {
        ect_cli_instance_close(&in);
        return ect_cli_usage_error("producer", usage,
                                   "ec_role must be ec_producer or ec_both, not %s",
                                   ect_role_str(in.cfg.role));
    }
    if (in.cfg.metrics_address[0] != '\0') {
        /* HOST as configured, PORT as bound: "127.0.0.1:0" names no port. */
        const char *colon = strrchr(in.cfg.metrics_address, ':');
        int host_len = colon != NULL ? (int)(colon - in.cfg.metrics_address) : 0;
        fprintf(stderr, "ectier producer: metrics at http://%.*s:%u/metrics\n", host_len,
                in.cfg.metrics_address, (unsigned)ect__scheduler_metrics_port(in.sched));
    }
    size_t nbytes = (size_t)(n_tokens * in.geom.block_size_bytes);
    uint8_t *payload = n_fill > 0 ? malloc(nbytes ? nbytes : 1) : NULL;
    if (n_fill > 0 && payload == NULL) {
        ect_cli_instance_close(&in);
        return ect_cli_fail("producer", "out of memory for a %zu-byte entry", nbytes);
    }
    for (unsigned long long i = 0; i < n_fill; i++) {
        char hash[65];
        ect_pattern_mm_hash((unsigned)i, hash);
        ect_pattern_fill(hash, payload, nbytes);
        ect_status_t st = ect_cli_instance_save(&in, hash, n_tokens, payload, nbytes);
        if (st != ECT_OK) {
            rc = ect_cli_fail("producer", "entry %llu (%s): %s%s", i, hash, ect_status_str(st),
                              st == ECT_ERR_NO_SPACE ? ": the region is full" : "");
            goto out;
        }
        ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = n_tokens};
        ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
        char *params = NULL;
        if (ect_scheduler_request_finished(in.sched, &req, &params) != ECT_OK) {
            rc = ect_cli_fail("producer", "announcing %s: %s", hash, ect_last_error());
            goto out;
        }
        printf("%s\n", params != NULL ? params : "{}");
        ect_free(params);
    }
    printf("ready\n");
    fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "ectier producer: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
out:
    free(payload);
    ect_cli_instance_close(&in);
    return rc;
}
