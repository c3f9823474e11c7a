/*
 * `ectier consumer`: run one consumer instance that fetches every encoding
 * named in ec_transfer_params through the consumer path (ensure_cache_
 * available, the P2P session, then a load through a worker), optionally
 * checks every byte against the test pattern, and prints one line per item
 * and a summary.  Exit status 0 only if every item was fetched (and
 * verified).
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "instance.h"
#include "pattern.h"

static const char usage[] =
    "usage: ectier consumer --config JSON|@FILE --model NAME --hidden N --dtype D\n"
    "                       [--engine-version V] --params FILE|- [--verify-pattern]\n"
    "                       [--local-input] [--one-at-a-time]\n"
    "  --params          ec_transfer_params: JSON objects, one per line, or one object\n"
    "  --verify-pattern  check every fetched byte against the test pattern\n"
    "  --local-input     the requests still carry their media: an item that cannot be\n"
    "                    fetched falls back to local encoding instead of failing\n"
    "  --one-at-a-time   fetch the items one after another (each latency is then one\n"
    "                    fetch's own, and its read's part is printed too); by default\n"
    "                    all are asked for at once\n"
    "Prints 'ok' with the fetch latency, or the fallback/failure reason, per item and\n"
    "a summary.\n";

enum item_state { ITEM_WAITING, ITEM_FETCHED, ITEM_FALLBACK, ITEM_FAILED };

struct item {
    char *hash;
    char *params; /* {hash: {...}} for this item alone */
    uint64_t tokens;
    enum item_state state;
    char reason[200];
    uint64_t t_start_ns, latency_ns;
    uint64_t read_ns; /* one at a time: the read's part of latency_ns (0: unknown) */
};

/* Nanoseconds of P2P reads the scheduler has recorded so far (the sum of
 * its p2p_read_seconds histogram); 0 if its metrics cannot be read. */
static uint64_t
read_ns_so_far(ect_scheduler_t *sched)
{
    ect_metrics_t m;
    return ect_scheduler_metrics(sched, &m) == ECT_OK ? m.p2p_read_latency.sum_ns : 0;
}

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The last log line that names each item: its failure reason. */
static struct item *log_items;
static size_t log_n_items;

static void
log_sink(ect_log_level_t level, const char *message, void *user)
{
    (void)user;
    for (size_t i = 0; i < log_n_items; i++)
        if (strstr(message, log_items[i].hash) != NULL)
            snprintf(log_items[i].reason, sizeof(log_items[i].reason), "%s", message);
    if (level <= ECT_LOG_WARN)
        fprintf(stderr, "ectier %s: %s\n", ect_log_level_str(level), message);
}

static char *
read_all(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0)
            break;
        if (len + 1 == cap) {
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    if (f != stdin)
        fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

static int
add_items(cJSON *obj, struct item **items, size_t *n, uint64_t block)
{
    if (!cJSON_IsObject(obj))
        return -1;
    for (cJSON *e = obj->child; e != NULL; e = e->next) {
        struct item *grown = realloc(*items, (*n + 1) * sizeof(**items));
        if (grown == NULL)
            return -1;
        *items = grown;
        struct item *it = &(*items)[(*n)++];
        memset(it, 0, sizeof(*it));
        it->hash = strdup(e->string);
        cJSON *one = cJSON_CreateObject();
        cJSON_AddItemToObject(one, e->string, cJSON_Duplicate(e, 1));
        it->params = cJSON_PrintUnformatted(one);
        cJSON_Delete(one);
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(e, "size_bytes");
        if (!cJSON_IsObject(e) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "peer_host"))) {
            it->state = ITEM_FAILED;
            snprintf(it->reason, sizeof(it->reason), "not announced with an address");
        } else if (!cJSON_IsNumber(size) || size->valuedouble <= 0 ||
                   floor(size->valuedouble) != size->valuedouble ||
                   fmod(size->valuedouble, (double)block) != 0) {
            it->state = ITEM_FAILED;
            snprintf(it->reason, sizeof(it->reason),
                     "size_bytes is not a positive multiple of the %llu-byte rows",
                     (unsigned long long)block);
        } else {
            it->tokens = (uint64_t)(size->valuedouble / (double)block);
        }
    }
    return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int
ect_cli_consumer(int argc, char **argv)
{
    struct ect_cli_instance_args a = {.cmd = "consumer"};
    const char *params_path = NULL;
    int verify = 0, local_input = 0, sequential = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(o, "--verify-pattern") == 0) {
            verify = 1;
            continue;
        }
        if (strcmp(o, "--local-input") == 0) {
            local_input = 1;
            continue;
        }
        if (strcmp(o, "--one-at-a-time") == 0) {
            sequential = 1;
            continue;
        }
        if (i + 1 >= argc)
            return ect_cli_usage_error("consumer", usage, "'%s' needs a value or is unknown", o);
        const char **slot = strcmp(o, "--config") == 0           ? &a.config
                            : strcmp(o, "--model") == 0          ? &a.model
                            : strcmp(o, "--hidden") == 0         ? &a.hidden
                            : strcmp(o, "--dtype") == 0          ? &a.dtype
                            : strcmp(o, "--engine-version") == 0 ? &a.engine_version
                            : strcmp(o, "--params") == 0         ? &params_path
                                                                 : NULL;
        if (slot == NULL)
            return ect_cli_usage_error("consumer", usage, "unknown option '%s'", o);
        *slot = argv[++i];
    }
    if (params_path == NULL)
        return ect_cli_usage_error("consumer", usage, "--params FILE|- is required");
    char *text = read_all(params_path);
    if (text == NULL)
        return ect_cli_fail("consumer", "--params %s: %s", params_path, strerror(errno));

    struct ect_cli_instance in;
    int rc = ect_cli_instance_open(&in, &a, usage);
    if (rc != 0) {
        free(text);
        return rc;
    }
    if (!ect_role_consumes(in.cfg.role)) {
        free(text);
        ect_cli_instance_close(&in);
        return ect_cli_usage_error("consumer", usage,
                                   "ec_role must be ec_consumer or ec_both, not %s",
                                   ect_role_str(in.cfg.role));
    }
    /* One object for the whole input, or one per line. */
    struct item *items = NULL;
    size_t n = 0;
    uint64_t block = in.geom.block_size_bytes;
    /* Whole input as one object only if nothing follows it. */
    cJSON *whole = cJSON_ParseWithOpts(text, NULL, 1);
    if (whole != NULL) {
        if (add_items(whole, &items, &n, block) != 0)
            rc = ect_cli_fail("consumer", "--params: not a JSON object of ec_transfer_params");
        cJSON_Delete(whole);
    } else {
        unsigned line_no = 0;
        for (char *line = strtok(text, "\n"); line != NULL && rc == 0; line = strtok(NULL, "\n")) {
            line_no++;
            if (strspn(line, " \t\r") == strlen(line) || strcmp(line, "ready") == 0)
                continue;
            cJSON *obj = cJSON_Parse(line);
            if (obj == NULL || add_items(obj, &items, &n, block) != 0)
                rc = ect_cli_fail("consumer", "--params line %u is not a JSON object", line_no);
            cJSON_Delete(obj);
        }
    }
    free(text);
    if (rc != 0)
        goto out;

    log_items = items;
    log_n_items = n;
    ect_log_set_level(ECT_LOG_INFO);
    ect_log_set_sink(log_sink, NULL);

    /* Admission: ask for every item until it is in the tier or given up. */
    uint64_t t0 = now_ns();
    uint64_t give_up = t0 + (uint64_t)((in.cfg.defer_budget_s + 5.0) * 1e9);
    size_t waiting = 0;
    for (size_t i = 0; i < n; i++) {
        items[i].t_start_ns = sequential ? 0 : t0; /* one at a time: when first asked */
        waiting += items[i].state == ITEM_WAITING;
    }
    uint64_t reads_before = read_ns_so_far(in.sched);
    while (waiting > 0 && now_ns() < give_up) {
        for (size_t i = 0; i < n; i++) {
            struct item *it = &items[i];
            if (it->state != ITEM_WAITING)
                continue;
            if (it->t_start_ns == 0)
                it->t_start_ns = now_ns();
            ect_mm_feature_t f = {.identifier = it->hash,
                                  .mm_hash = it->hash,
                                  .num_tokens = it->tokens,
                                  .has_local_input = local_input};
            ect_request_t req = {.request_id = it->hash,
                                 .features = &f,
                                 .n_features = 1,
                                 .ec_transfer_params_json = it->params};
            int available = 0;
            if (ect_scheduler_ensure_cache_available(in.sched, &req, &available) != ECT_OK) {
                it->state = ITEM_FAILED;
                snprintf(it->reason, sizeof(it->reason), "%s", ect_last_error());
                waiting--;
            } else if (available && ect_scheduler_has_cache_item(in.sched, it->hash)) {
                it->state = ITEM_FETCHED;
                it->latency_ns = now_ns() - it->t_start_ns;
                if (sequential) {
                    /* The only read since the last fetched item. */
                    uint64_t so_far = read_ns_so_far(in.sched);
                    it->read_ns = so_far - reads_before;
                    reads_before = so_far;
                }
                waiting--;
            } else if (available) {
                /* Admitted without a fetch: the engine encodes it here. */
                it->state = ITEM_FALLBACK;
                if (it->reason[0] == '\0')
                    snprintf(it->reason, sizeof(it->reason), "not fetched");
                waiting--;
            }
            if (sequential)
                break; /* the next item only once this one is decided */
        }
        char *ids[64];
        size_t k = ect_scheduler_take_unavailable_requests(in.sched, ids, 64);
        for (size_t j = 0; j < k; j++) {
            for (size_t i = 0; i < n; i++)
                if (items[i].state == ITEM_WAITING && strcmp(items[i].hash, ids[j]) == 0) {
                    items[i].state = ITEM_FAILED;
                    if (items[i].reason[0] == '\0')
                        snprintf(items[i].reason, sizeof(items[i].reason), "unavailable");
                    waiting--;
                }
            ect_free(ids[j]);
        }
        /* One at a time, poll finely enough that the latency is the
         * fetch's, not the sleep's: every 20 us at first, then a tenth of
         * the time the item has waited (at most 1 ms), so that a long
         * read does not share the CPUs with thousands of wake-ups of this
         * thread (the read's own time is measured inside the consumer). */
        if (waiting > 0) {
            useconds_t pause = 200;
            if (sequential) {
                uint64_t waited_us = 0;
                for (size_t i = 0; i < n; i++)
                    if (items[i].state == ITEM_WAITING && items[i].t_start_ns != 0) {
                        waited_us = (now_ns() - items[i].t_start_ns) / 1000;
                        break;
                    }
                pause = waited_us / 10 < 20     ? 20
                        : waited_us / 10 > 1000 ? 1000
                                                : (useconds_t)(waited_us / 10);
            }
            usleep(pause);
        }
    }

    /* Load what arrived through a worker, as an engine would, and check it. */
    uint64_t *lat = calloc(n ? n : 1, sizeof(*lat));
    size_t n_ok = 0;
    uint64_t bytes = 0, t_last = t0;
    for (size_t i = 0; i < n; i++) {
        struct item *it = &items[i];
        if (it->state == ITEM_WAITING) {
            it->state = ITEM_FAILED;
            snprintf(it->reason, sizeof(it->reason), "not fetched within the defer budget");
        }
        if (it->state == ITEM_FETCHED) {
            size_t nbytes = (size_t)(it->tokens * block);
            uint8_t *buf = malloc(nbytes ? nbytes : 1);
            ect_status_t st = buf ? ect_cli_instance_load(&in, it->hash, it->tokens, buf, nbytes)
                                  : ECT_ERR_NO_MEMORY;
            size_t bad = verify && st == ECT_OK ? ect_pattern_check(it->hash, buf, nbytes) : nbytes;
            free(buf);
            if (st != ECT_OK) {
                it->state = ITEM_FAILED;
                snprintf(it->reason, sizeof(it->reason), "load failed: %s", ect_last_error());
            } else if (bad != nbytes) {
                it->state = ITEM_FAILED;
                snprintf(it->reason, sizeof(it->reason), "byte %zu differs from the pattern", bad);
            } else {
                lat[n_ok++] = it->latency_ns;
                bytes += nbytes;
                if (it->t_start_ns + it->latency_ns > t_last)
                    t_last = it->t_start_ns + it->latency_ns;
            }
        }
        ect_mm_feature_t f = {
            .identifier = it->hash, .mm_hash = it->hash, .num_tokens = it->tokens};
        ect_request_t req = {.request_id = it->hash, .features = &f, .n_features = 1};
        char *unused = NULL;
        if (ect_scheduler_request_finished(in.sched, &req, &unused) != ECT_OK)
            fprintf(stderr, "ectier consumer: finishing %s: %s\n", it->hash, ect_last_error());
        ect_free(unused);
        if (it->state == ITEM_FETCHED && it->read_ns > 0)
            printf("ok %s %.3f ms (read %.3f ms)\n", it->hash, (double)it->latency_ns / 1e6,
                   (double)it->read_ns / 1e6);
        else if (it->state == ITEM_FETCHED)
            printf("ok %s %.3f ms\n", it->hash, (double)it->latency_ns / 1e6);
        else if (it->state == ITEM_FALLBACK)
            printf("fallback %s: %s\n", it->hash, it->reason);
        else
            printf("failed %s: %s\n", it->hash, it->reason);
    }
    qsort(lat, n_ok, sizeof(*lat), cmp_u64);
    double secs = (double)(t_last - t0) / 1e9;
    printf("summary: %zu items, %zu fetched%s, %zu failed, %.1f MiB, %.2f GB/s, "
           "fetch latency p50 %.3f ms p99 %.3f ms\n",
           n, n_ok, verify ? " and verified" : "", n - n_ok, (double)bytes / 1048576.0,
           secs > 0 ? (double)bytes / secs / 1e9 : 0.0, n_ok ? (double)lat[n_ok / 2] / 1e6 : 0.0,
           n_ok ? (double)lat[(n_ok * 99) / 100 < n_ok ? (n_ok * 99) / 100 : n_ok - 1] / 1e6 : 0.0);
    free(lat);
    ect_metrics_t m;
    if (ect_scheduler_metrics(in.sched, &m) == ECT_OK)
        printf("metrics: p2p reads %llu, fallbacks %llu, unavailable %llu, ack timeouts %llu, "
               "read timeouts %llu, acks ok %llu, nack_missing %llu, nack_incompat %llu, "
               "nack_version %llu, nack_internal %llu, nack_not_ready %llu\n",
               (unsigned long long)m.p2p_reads_completed, (unsigned long long)m.p2p_fallbacks,
               (unsigned long long)m.p2p_unavailable, (unsigned long long)m.p2p_ack_timeouts,
               (unsigned long long)m.p2p_read_timeouts, (unsigned long long)m.acks_received[0],
               (unsigned long long)m.acks_received[1], (unsigned long long)m.acks_received[2],
               (unsigned long long)m.acks_received[3], (unsigned long long)m.acks_received[4],
               (unsigned long long)m.acks_received[5]);
    rc = n_ok == n && n > 0 ? 0 : 1;
    ect_log_set_sink(NULL, NULL);
out:
    for (size_t i = 0; i < n; i++) {
        free(items[i].hash);
        free(items[i].params);
    }
    free(items);
    ect_cli_instance_close(&in);
    return rc;
}
