/*
 * The peer-to-peer half of `ectier demo`: a producer instance and a consumer
 * instance, each its own process (this binary's `producer` and `consumer`
 * commands), on loopback.  The producer encodes a set of items and announces
 * them; the demo passes the announcements to the consumer as an
 * orchestrator would (plus one for an encoding the producer never had, to
 * show the fallback); the consumer pulls them over P2P and checks every byte.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "demo_p2p.h"
#include "pattern.h"

#define ITEMS  24
#define TOKENS 256
#define HIDDEN 3584 /* bf16: 7 KiB rows, 1.75 MiB items */

static const char producer_config[] =
    "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_producer\", "
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"96MiB\", \"ec_enable_nixl\": true}}";
static const char consumer_config[] =
    "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_consumer\", "
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"96MiB\", \"ec_enable_nixl\": true}}";

/* Start this binary with args; its stdin/stdout are pipes to us. */
static pid_t
spawn(char *const args[], FILE **to_p, FILE **from_p)
{
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *to_p = fdopen(in[1], "w");
    *from_p = fdopen(out[0], "r");
    return pid;
}

/* Keep the start of a long line (it is only printed). */
static void
copy_line(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static double
seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

int
ect_demo_p2p(double encode_ms_per_item)
{
    char items[16], tokens[16], hidden[16];
    snprintf(items, sizeof(items), "%d", ITEMS);
    snprintf(tokens, sizeof(tokens), "%d", TOKENS);
    snprintf(hidden, sizeof(hidden), "%d", HIDDEN);
    char *pargs[] = {"ectier",  "producer",    "--config", (char *)producer_config,
                     "--model", "demo/vision", "--hidden", hidden,
                     "--dtype", "bf16",        "--listen", "127.0.0.1:0",
                     "--fill",  items,         "--tokens", tokens,
                     NULL};
    char *cargs[] = {"ectier",           "consumer",      "--config", (char *)consumer_config,
                     "--model",          "demo/vision",   "--hidden", hidden,
                     "--dtype",          "bf16",          "--params", "-",
                     "--verify-pattern", "--local-input", NULL};
    FILE *p_in = NULL, *p_out = NULL, *c_in = NULL, *c_out = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t producer = spawn(pargs, &p_in, &p_out);
    if (producer < 0)
        return ect_cli_fail("demo", "cannot start the producer: %s", strerror(errno));
    /* Collect the announcements until "ready". */
    char **ann = calloc(ITEMS + 2, sizeof(char *));
    size_t n_ann = 0;
    char line[65536];
    int ready = 0;
    while (fgets(line, sizeof(line), p_out) != NULL) {
        if (strncmp(line, "ready", 5) == 0) {
            ready = 1;
            break;
        }
        if (n_ann < ITEMS)
            ann[n_ann++] = strdup(line);
    }
    int rc = 1;
    if (!ready || n_ann != ITEMS) {
        ect_cli_fail("demo", "the producer did not come up (%zu announcements)", n_ann);
        goto stop_producer;
    }
    double produce_s = seconds_since(&t0);
    /* The orchestrator's part: forward every announcement, plus one for an
     * encoding the producer never had (its media stays on the request). */
    char missing[65], real[65];
    ect_pattern_mm_hash(ITEMS + 1000, missing);
    ect_pattern_mm_hash(0, real);
    char *bogus = strdup(ann[0]);
    char *at = strstr(bogus, real);
    if (at != NULL)
        memcpy(at, missing, 64);
    ann[n_ann++] = bogus;

    pid_t consumer = spawn(cargs, &c_in, &c_out);
    if (consumer < 0) {
        ect_cli_fail("demo", "cannot start the consumer: %s", strerror(errno));
        goto stop_producer;
    }
    for (size_t i = 0; i < n_ann; i++)
        fputs(ann[i], c_in);
    fclose(c_in);
    unsigned ok = 0, fallback = 0, failed = 0;
    char summary[1024] = "", metrics[1024] = "";
    while (fgets(line, sizeof(line), c_out) != NULL) {
        if (strncmp(line, "ok ", 3) == 0)
            ok++;
        else if (strncmp(line, "fallback ", 9) == 0)
            fallback++;
        else if (strncmp(line, "failed ", 7) == 0)
            failed++;
        else if (strncmp(line, "summary: ", 9) == 0)
            copy_line(summary, sizeof(summary), line + 9);
        else if (strncmp(line, "metrics: ", 9) == 0)
            copy_line(metrics, sizeof(metrics), line + 9);
    }
    fclose(c_out);
    int st = 0;
    waitpid(consumer, &st, 0);
    double p50 = 0, p99 = 0, gbs = 0, mib = 0;
    const char *lat = strstr(summary, "p50 ");
    if (lat != NULL)
        sscanf(lat, "p50 %lf ms p99 %lf ms", &p50, &p99);
    const char *bw = strstr(summary, "MiB, ");
    if (bw != NULL) {
        sscanf(bw, "MiB, %lf GB/s", &gbs);
        const char *m = bw;
        while (m > summary && m[-1] != ' ')
            m--;
        while (m > summary && m[-1] == ' ')
            m--;
        while (m > summary && m[-1] != ' ')
            m--;
        sscanf(m, "%lf", &mib);
    }
    printf("\npeer-to-peer (producer and consumer processes on 127.0.0.1)\n");
    printf("  announced            %8zu   (%d x %.2f MiB, encoded and saved in %.0f ms)\n",
           n_ann - 1, ITEMS, (double)TOKENS * HIDDEN * 2 / 1048576.0, produce_s * 1e3);
    printf("  P2P reads            %8u   (every byte checked against the producer's output)\n", ok);
    printf("  fallbacks            %8u   (announced but missing: encoded locally)\n", fallback);
    printf("  failures             %8u\n", failed);
    printf("  bytes pulled         %8.1f MiB at %.2f GB/s\n", mib, gbs);
    printf("  fetch latency        p50 %.3f ms, p99 %.3f ms   vs %.1f ms to encode one item\n", p50,
           p99, encode_ms_per_item);
    printf("  consumer counters    %s", metrics[0] ? metrics : "(none)\n");
    rc = ok == ITEMS && fallback == 1 && failed == 0 ? 0 : 1;
    if (rc != 0)
        ect_cli_fail("demo",
                     "peer-to-peer: %u fetched, %u fallbacks, %u failed (expected %d, "
                     "1, 0)",
                     ok, fallback, failed, ITEMS);
stop_producer:
    kill(producer, SIGTERM);
    waitpid(producer, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        ect_cli_fail("demo", "the producer did not shut down cleanly");
        rc = 1;
    }
    fclose(p_in);
    fclose(p_out);
    for (size_t i = 0; i < n_ann; i++)
        free(ann[i]);
    free(ann);
    return rc;
}
