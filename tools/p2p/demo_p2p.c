/*
 * The peer-to-peer half of `ectier demo`: a producer instance and consumer
 * instances, each its own process (this binary's `producer` and `consumer`
 * commands), on loopback.  The producer saves a set of test entries and
 * announces them; the demo passes the announcements to each consumer as an
 * orchestrator would, and every consumer pulls them and checks every byte:
 *
 *   1. one item at a time over the same-host mapping: each latency is one
 *      fetch's own (the first, which opens the connections, is left out);
 *   2. the same over the TCP stream, the path a remote peer takes;
 *   3. all items at once (a burst, from a new consumer), plus one the
 *      producer never had, to show the fallback: its own throughput.
 *
 * Each figure stands next to what it saves: the stand-in encoder's time
 * for an item of the same size.  The children's stderr goes to the demo's
 * log, never into the summary.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "demo_p2p.h"
#include "engine_loop.h"
#include "pattern.h"

#define ITEMS  ECT_DEMO_P2P_ITEMS
#define TOKENS 256
#define HIDDEN 3584 /* bf16: 7 KiB rows, 1.75 MiB items */

static const char producer_config[] =
    "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_producer\", "
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"96MiB\", \"ec_enable_nixl\": true}}";

/* Logging goes through one write per line: the children append to the same
 * file at the same time. */
static void log_line(int log_fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
log_line(int log_fd, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(buf) - 1 ? (size_t)n : sizeof(buf) - 2;
    if (len == 0 || buf[len - 1] != '\n')
        buf[len++] = '\n';
    if (write(log_fd, buf, len) < 0) {
        /* The log is only for reading later; the demo goes on without it. */
    }
}

/* Start this binary with args: its stdin and stdout are pipes to us, its
 * stderr is log_fd. */
static pid_t
spawn(char *const args[], int log_fd, FILE **to_p, FILE **from_p)
{
    int in[2], out[2];
    if (pipe(in) != 0)
        return -1;
    if (pipe(out) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    *to_p = fdopen(in[1], "w");
    *from_p = fdopen(out[0], "r");
    return pid;
}

static double
ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The consumer's "metrics: p2p reads 24, fallbacks 1, ..., nack_not_ready 0"
 * line: "name value" pairs separated by commas. */
static void
parse_counters(const char *line, struct ect_demo_fetches *f)
{
    static const struct {
        const char *name;
        size_t offset;
    } fields[] = {
#define C(n, m) {n, offsetof(struct ect_demo_fetches, m)}
        C("p2p reads", reads),
        C("fallbacks", fallbacks_counted),
        C("unavailable", unavailable),
        C("ack timeouts", ack_timeouts),
        C("read timeouts", read_timeouts),
        C("acks ok", acks[0]),
        C("nack_missing", acks[1]),
        C("nack_incompat", acks[2]),
        C("nack_version", acks[3]),
        C("nack_internal", acks[4]),
        C("nack_not_ready", acks[5]),
#undef C
    };
    unsigned found = 0;
    const char *p = line;
    while (*p != '\0' && *p != '\n') {
        const char *end = strpbrk(p, ",\n");
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *sp = NULL; /* the last space: the value follows it */
        for (size_t i = 0; i < len; i++)
            if (p[i] == ' ')
                sp = p + i;
        if (sp != NULL) {
            for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
                if ((size_t)(sp - p) == strlen(fields[i].name) &&
                    strncmp(p, fields[i].name, (size_t)(sp - p)) == 0) {
                    *(uint64_t *)((char *)f + fields[i].offset) = strtoull(sp + 1, NULL, 10);
                    found++;
                }
        }
        if (end == NULL || *end == '\n')
            break;
        p = end + 1;
        while (*p == ' ')
            p++;
    }
    f->have_counters = found == sizeof(fields) / sizeof(fields[0]);
}

/* Run one consumer process over n_ann announcements and collect what it
 * reports.  Returns 0 if it ran to the end (whatever it fetched). */
static int
run_consumer(struct ect_demo_fetches *f, char **ann, size_t n_ann, int log_fd)
{
    char config[256], hidden[16];
    snprintf(config, sizeof(config),
             "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_consumer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"96MiB\", "
             "\"ec_enable_nixl\": true, \"transport\": \"%s\"}}",
             f->transport);
    snprintf(hidden, sizeof(hidden), "%d", HIDDEN);
    char *args[] = {"ectier",
                    "consumer",
                    "--config",
                    config,
                    "--model",
                    "demo/vision",
                    "--hidden",
                    hidden,
                    "--dtype",
                    "bf16",
                    "--params",
                    "-",
                    "--verify-pattern",
                    "--local-input",
                    f->one_at_a_time ? "--one-at-a-time" : NULL,
                    NULL};
    FILE *to = NULL, *from = NULL;
    f->asked = (unsigned)n_ann;
    f->pid = spawn(args, log_fd, &to, &from);
    if (f->pid < 0)
        return ect_cli_fail("demo", "cannot start a consumer: %s", strerror(errno));
    log_line(log_fd, "== ectier consumer (pid %d): %s, %zu items%s", (int)f->pid, f->transport,
             n_ann, f->one_at_a_time ? ", one at a time" : ", all at once");
    for (size_t i = 0; i < n_ann; i++)
        fputs(ann[i], to);
    fclose(to);
    char line[4096];
    while (fgets(line, sizeof(line), from) != NULL) {
        log_line(log_fd, "consumer %d: %s", (int)f->pid, line);
        double ms = 0;
        if (strncmp(line, "ok ", 3) == 0) {
            const char *sp = strchr(line + 3, ' ');
            if (sp != NULL && sscanf(sp, " %lf ms", &ms) == 1 && f->fetched <= ITEMS)
                f->latency_ms[f->fetched++] = ms;
            else
                f->failed++; /* an "ok" line this demo cannot read is no fetch */
        } else if (strncmp(line, "fallback ", 9) == 0) {
            f->fallbacks++;
        } else if (strncmp(line, "failed ", 7) == 0) {
            f->failed++;
        } else if (strncmp(line, "metrics: ", 9) == 0) {
            parse_counters(line + 9, f);
        }
    }
    fclose(from);
    int st = 0;
    if (waitpid(f->pid, &st, 0) != f->pid || !WIFEXITED(st))
        return ect_cli_fail("demo", "the consumer (pid %d) did not end normally", (int)f->pid);
    /* Its exit status says whether every item was fetched: a burst with
     * the missing item exits 1 by design, so the counts decide. */
    return 0;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least p of the samples at or
 * below it. */
static double
rank(const double *sorted, unsigned n, double p)
{
    unsigned k = (unsigned)ceil(p * n);
    return sorted[k > 0 ? k - 1 : 0];
}

static void
latency_of(const double *ms, unsigned n, struct ect_demo_latency *lat)
{
    memset(lat, 0, sizeof(*lat));
    if (n == 0)
        return;
    double sorted[ITEMS + 1], sum = 0;
    memcpy(sorted, ms, n * sizeof(*ms));
    qsort(sorted, n, sizeof(*sorted), cmp_double);
    for (unsigned i = 0; i < n; i++)
        sum += sorted[i];
    *lat = (struct ect_demo_latency){.n = n,
                                     .p50 = rank(sorted, n, 0.50),
                                     .p99 = rank(sorted, n, 0.99),
                                     .mean = sum / n,
                                     .min = sorted[0],
                                     .max = sorted[n - 1]};
}

void
ect_demo_warm_latency(const struct ect_demo_fetches *f, struct ect_demo_latency *lat)
{
    latency_of(f->latency_ms + 1, f->fetched > 1 ? f->fetched - 1 : 0, lat);
}

double
ect_demo_p2p_speedup(const struct ect_demo_p2p *r)
{
    struct ect_demo_latency lat;
    ect_demo_warm_latency(&r->same_host, &lat);
    return lat.p50 > 0 ? r->encode_ms / lat.p50 : 0.0;
}

/* The burst: from asking for everything to the last item landed. */
static double
burst_ms(const struct ect_demo_fetches *f)
{
    struct ect_demo_latency lat;
    latency_of(f->latency_ms, f->fetched, &lat);
    return lat.max;
}

static int
check_run(const struct ect_demo_fetches *f, unsigned want_fetched, unsigned want_fallbacks)
{
    if (f->fetched == want_fetched && f->fallbacks == want_fallbacks && f->failed == 0 &&
        f->have_counters && f->reads == f->fetched)
        return 1;
    ect_cli_fail("demo",
                 "peer-to-peer (%s%s): %u fetched, %u fallbacks, %u failed, %s p2p reads "
                 "(expected %u, %u, 0, %u)",
                 f->transport, f->one_at_a_time ? ", one at a time" : ", burst", f->fetched,
                 f->fallbacks, f->failed, f->have_counters ? "counted" : "no count of",
                 want_fetched, want_fallbacks, want_fetched);
    return 0;
}

int
ect_demo_p2p_run(double encode_ms, int log_fd, struct ect_demo_p2p *r)
{
    *r = (struct ect_demo_p2p){.items = ITEMS,
                               .tokens = TOKENS,
                               .hidden = HIDDEN,
                               .item_bytes = (uint64_t)TOKENS * HIDDEN * 2,
                               .encode_ms = encode_ms,
                               .missing = 1,
                               .same_host = {.transport = "same_host", .one_at_a_time = 1},
                               .tcp = {.transport = "tcp", .one_at_a_time = 1},
                               .burst = {.transport = "same_host", .one_at_a_time = 0}};
    char items[16], tokens[16], hidden[16];
    snprintf(items, sizeof(items), "%d", ITEMS);
    snprintf(tokens, sizeof(tokens), "%d", TOKENS);
    snprintf(hidden, sizeof(hidden), "%d", HIDDEN);
    char *pargs[] = {"ectier",  "producer",    "--config", (char *)producer_config,
                     "--model", "demo/vision", "--hidden", hidden,
                     "--dtype", "bf16",        "--listen", "127.0.0.1:0",
                     "--fill",  items,         "--tokens", tokens,
                     NULL};
    FILE *p_in = NULL, *p_out = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r->producer_pid = spawn(pargs, log_fd, &p_in, &p_out);
    if (r->producer_pid < 0)
        return ect_cli_fail("demo", "cannot start the producer: %s", strerror(errno));
    log_line(log_fd, "== ectier producer (pid %d): %d items of %d tokens", (int)r->producer_pid,
             ITEMS, TOKENS);
    /* Collect the announcements until "ready". */
    char *ann[ITEMS + 1] = {NULL};
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
    r->producer_ready_ms = ms_since(&t0);

    if (run_consumer(&r->same_host, ann, n_ann, log_fd) != 0 ||
        run_consumer(&r->tcp, ann, n_ann, log_fd) != 0)
        goto stop_producer;
    /* The orchestrator's part for the burst: every announcement, plus one
     * for an encoding the producer never had (its media stays on the
     * request, so the consumer encodes it instead). */
    char missing[65], real[65];
    ect_pattern_mm_hash(ITEMS + 1000, missing);
    ect_pattern_mm_hash(0, real);
    char *bogus = strdup(ann[0]);
    char *at = bogus != NULL ? strstr(bogus, real) : NULL;
    if (at == NULL) {
        free(bogus);
        ect_cli_fail("demo", "the producer's first announcement does not name its entry");
        goto stop_producer;
    }
    memcpy(at, missing, 64);
    ann[n_ann++] = bogus;
    if (run_consumer(&r->burst, ann, n_ann, log_fd) != 0)
        goto stop_producer;
    int ok = check_run(&r->same_host, ITEMS, 0);
    ok &= check_run(&r->tcp, ITEMS, 0);
    ok &= check_run(&r->burst, ITEMS, r->missing);
    rc = ok ? 0 : 1;

stop_producer:
    kill(r->producer_pid, SIGTERM);
    int st = 0;
    waitpid(r->producer_pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        ect_cli_fail("demo", "the producer did not shut down cleanly");
        rc = 1;
    }
    fclose(p_in);
    fclose(p_out);
    for (size_t i = 0; i < n_ann; i++)
        free(ann[i]);
    r->ok = rc == 0;
    return rc;
}

/* ---- the figures ------------------------------------------------------------------- */

static void
print_one_at_a_time(const struct ect_demo_p2p *r, const struct ect_demo_fetches *f,
                    const char *path)
{
    struct ect_demo_latency lat;
    ect_demo_warm_latency(f, &lat);
    char speedup[32];
    ect_loop_format_speedup(speedup, sizeof(speedup), lat.p50 > 0 ? r->encode_ms / lat.p50 : 0);
    printf("    %-18s p50 %.3f ms, p99 %.3f ms, mean %.3f ms over %u fetches: %s faster\n", path,
           lat.p50, lat.p99, lat.mean, lat.n, speedup);
}

void
ect_demo_p2p_print(const struct ect_demo_p2p *r)
{
    const struct ect_demo_fetches *b = &r->burst;
    double mib = (double)r->item_bytes / 1048576.0;
    printf("\npeer to peer: a producer and 3 consumer processes on 127.0.0.1, %u items of "
           "%.2f MiB\n",
           r->items, mib);
    printf("  producer           %u test entries of %u tokens x %u bf16 saved and announced, "
           "in %.0f ms\n",
           r->items, r->tokens, r->hidden, r->producer_ready_ms);
    printf("  encoding one item  %.1f ms with the stand-in encoder (median of 5): what a fetch "
           "saves\n",
           r->encode_ms);
    printf("  one at a time      each fetch alone, on warm connections (each run's first left "
           "out)\n");
    print_one_at_a_time(r, &r->same_host, "same-host mapping");
    print_one_at_a_time(r, &r->tcp, "TCP stream");
    printf("    %-18s %.3f ms (same host), %.3f ms (TCP): connecting included\n", "first fetches",
           r->same_host.fetched ? r->same_host.latency_ms[0] : 0.0,
           r->tcp.fetched ? r->tcp.latency_ms[0] : 0.0);
    struct ect_demo_latency lat;
    latency_of(b->latency_ms, b->fetched, &lat);
    double all_ms = burst_ms(b), encode_all = r->encode_ms * b->fetched;
    char speedup[32];
    ect_loop_format_speedup(speedup, sizeof(speedup), all_ms > 0 ? encode_all / all_ms : 0);
    printf("  burst              %u asked at once by a new consumer (same host): %.1f MiB in "
           "%.1f ms\n",
           b->fetched, mib * b->fetched, all_ms);
    printf("                     %.2f GB/s; each landed by p50 %.1f ms, p99 %.1f ms after the "
           "ask\n",
           all_ms > 0 ? (double)r->item_bytes * b->fetched / (all_ms * 1e6) : 0.0, lat.p50,
           lat.p99);
    printf("                     encoding the %u instead takes %.0f ms: the burst is %s faster\n",
           b->fetched, encode_all, speedup);
    printf("  fallback           %u announced item the producer never had: NACK missing, "
           "encoded here\n",
           b->fallbacks);
    printf("  burst's P2P reads  %" PRIu64 " = %u announced - %u missing; every byte checked in "
           "all runs: %u bad\n",
           b->reads, b->asked, r->missing, b->failed + r->same_host.failed + r->tcp.failed);
    printf("  burst's acks       ok %" PRIu64 ", nack_missing %" PRIu64 ", other NACKs %" PRIu64
           "; timeouts: ack %" PRIu64 ", read %" PRIu64 "\n",
           b->acks[0], b->acks[1], b->acks[2] + b->acks[3] + b->acks[4] + b->acks[5],
           b->ack_timeouts, b->read_timeouts);
}

static cJSON *
latency_json(const struct ect_demo_latency *lat)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", lat->n);
    cJSON_AddNumberToObject(o, "p50_ms", lat->p50);
    cJSON_AddNumberToObject(o, "p99_ms", lat->p99);
    cJSON_AddNumberToObject(o, "mean_ms", lat->mean);
    cJSON_AddNumberToObject(o, "min_ms", lat->min);
    cJSON_AddNumberToObject(o, "max_ms", lat->max);
    return o;
}

static cJSON *
fetches_json(const struct ect_demo_p2p *r, const struct ect_demo_fetches *f)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "transport", f->transport);
    cJSON_AddNumberToObject(o, "consumer_pid", f->pid);
    cJSON_AddNumberToObject(o, "announced", f->asked);
    cJSON_AddNumberToObject(o, "fetched", f->fetched);
    cJSON_AddNumberToObject(o, "fallbacks", f->fallbacks);
    cJSON_AddNumberToObject(o, "failed", f->failed);
    cJSON_AddItemToObject(o, "latency_ms", cJSON_CreateDoubleArray(f->latency_ms, (int)f->fetched));
    struct ect_demo_latency lat;
    if (f->one_at_a_time) {
        ect_demo_warm_latency(f, &lat);
        cJSON_AddBoolToObject(o, "first_excluded", 1);
        cJSON_AddNumberToObject(o, "first_ms", f->fetched ? f->latency_ms[0] : 0.0);
        cJSON_AddItemToObject(o, "warm", latency_json(&lat));
        cJSON_AddNumberToObject(o, "speedup", lat.p50 > 0 ? r->encode_ms / lat.p50 : 0.0);
    } else {
        latency_of(f->latency_ms, f->fetched, &lat);
        double all_ms = burst_ms(f), encode_all = r->encode_ms * f->fetched;
        uint64_t bytes = r->item_bytes * f->fetched;
        cJSON_AddNumberToObject(o, "missing", r->missing);
        cJSON_AddNumberToObject(o, "bytes", (double)bytes);
        cJSON_AddNumberToObject(o, "all_landed_ms", all_ms);
        cJSON_AddNumberToObject(o, "gb_per_s", all_ms > 0 ? (double)bytes / (all_ms * 1e6) : 0);
        cJSON_AddItemToObject(o, "landed", latency_json(&lat));
        cJSON_AddNumberToObject(o, "encode_all_ms", encode_all);
        cJSON_AddNumberToObject(o, "speedup", all_ms > 0 ? encode_all / all_ms : 0.0);
    }
    if (f->have_counters) {
        cJSON *c = cJSON_AddObjectToObject(o, "counters");
        cJSON_AddNumberToObject(c, "p2p_reads", (double)f->reads);
        cJSON_AddNumberToObject(c, "fallbacks", (double)f->fallbacks_counted);
        cJSON_AddNumberToObject(c, "unavailable", (double)f->unavailable);
        cJSON_AddNumberToObject(c, "ack_timeouts", (double)f->ack_timeouts);
        cJSON_AddNumberToObject(c, "read_timeouts", (double)f->read_timeouts);
        static const char *const acks[6] = {"ok",           "nack_missing",  "nack_incompat",
                                            "nack_version", "nack_internal", "nack_not_ready"};
        cJSON *a = cJSON_AddObjectToObject(c, "acks");
        for (int i = 0; i < 6; i++)
            cJSON_AddNumberToObject(a, acks[i], (double)f->acks[i]);
    }
    return o;
}

cJSON *
ect_demo_p2p_json(const struct ect_demo_p2p *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddBoolToObject(o, "ok", r->ok);
    cJSON_AddNumberToObject(o, "items", r->items);
    cJSON_AddNumberToObject(o, "tokens", r->tokens);
    cJSON_AddNumberToObject(o, "hidden", r->hidden);
    cJSON_AddStringToObject(o, "dtype", "bfloat16");
    cJSON_AddNumberToObject(o, "item_bytes", (double)r->item_bytes);
    cJSON_AddNumberToObject(o, "encode_ms_per_item", r->encode_ms);
    cJSON_AddNumberToObject(o, "producer_pid", r->producer_pid);
    cJSON_AddNumberToObject(o, "producer_ready_ms", r->producer_ready_ms);
    cJSON *seq = cJSON_AddObjectToObject(o, "one_at_a_time");
    cJSON_AddItemToObject(seq, "same_host", fetches_json(r, &r->same_host));
    cJSON_AddItemToObject(seq, "tcp", fetches_json(r, &r->tcp));
    cJSON_AddItemToObject(o, "burst", fetches_json(r, &r->burst));
    return o;
}
