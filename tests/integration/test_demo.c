/*
 * `ectier demo` end to end, as a person runs it: the reference engine loop
 * (examples/engine_loop.c) with a scheduler and two worker processes over a
 * real /dev/shm region, then (P2P builds) a producer and three consumer
 * processes on loopback.  The figures are read from `--json`, never parsed
 * out of the text, and checked against each other: hits add up, every
 * reload was verified, P2P reads = announced - missing, latencies are
 * positive, and the verdict's ratios are the encode times over the fetch
 * and copy times of the same JSON.  The text summary is checked for what a
 * reader sees: lines of at most 100 columns, the verdict, the log it names,
 * and no child's message in it.  Each case removes its log and checks that
 * no region of the processes it ran is left.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include "support/cli.h"
#include "ectier_build_config.h"
#include "harness.h"

#define DEADLINE_S 600.0

/* No region of the instance whose id starts with id is left in /dev/shm
 * (regions are named ectier_<instance id>_dp<rank>). */
static void
check_no_region_of(const char *id)
{
    char prefix[128];
    snprintf(prefix, sizeof(prefix), "ectier_%s", id);
    DIR *d = opendir("/dev/shm");
    CHECK(d != NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        CHECK_MSG(strncmp(de->d_name, prefix, strlen(prefix)) != 0, "the demo left /dev/shm/%s",
                  de->d_name);
    closedir(d);
}

#if ECT_HAVE_P2P
static char *
slurp_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}
#endif

static const cJSON *
get(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    CHECK_MSG(v != NULL, "no \"%s\" in the demo's JSON", name);
    return v;
}

static double
num(const cJSON *o, const char *name)
{
    const cJSON *v = get(o, name);
    CHECK_MSG(cJSON_IsNumber(v), "\"%s\" is not a number", name);
    return v->valuedouble;
}

/* a == b up to rounding in the last digits. */
#define CHECK_CLOSE(a, b)                                                                          \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        CHECK_MSG(fabs(a_ - b_) <= 1e-9 * fmax(fabs(a_), fabs(b_)), "%s = %.17g, %s = %.17g", #a,  \
                  a_, #b, b_);                                                                     \
    } while (0)

static void
speedup_text(char *buf, size_t cap, double v)
{
    snprintf(buf, cap, v >= 10 ? "%.0f\u00d7" : "%.1f\u00d7", v);
}

#if ECT_HAVE_P2P /* the demo has a peer-to-peer part only in P2P builds */
static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank p of the array's values from index from on; *max_p the
 * largest of them. */
static double
rank_of(const cJSON *arr, int from, double p, double *max_p)
{
    double v[64];
    int n = 0;
    for (int i = from; i < cJSON_GetArraySize(arr); i++) {
        CHECK(n < 64);
        v[n++] = cJSON_GetArrayItem(arr, i)->valuedouble;
    }
    CHECK(n > 0);
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    *max_p = v[n - 1];
    int k = (int)ceil(p * n);
    return v[k > 0 ? k - 1 : 0];
}

static void
check_one_at_a_time(const cJSON *run, double items, double encode_ms)
{
    CHECK_EQ_INT((int)num(run, "announced"), (int)items);
    CHECK_EQ_INT((int)num(run, "fetched"), (int)items);
    CHECK_EQ_INT((int)num(run, "fallbacks"), 0);
    CHECK_EQ_INT((int)num(run, "failed"), 0);
    const cJSON *lat = get(run, "latency_ms");
    CHECK_EQ_INT(cJSON_GetArraySize(lat), (int)items);
    const cJSON *l;
    cJSON_ArrayForEach(l, lat)
    {
        CHECK(l->valuedouble > 0);
    }
    /* Warm: the first fetch, which opened the connections, is left out. */
    CHECK(cJSON_IsTrue(get(run, "first_excluded")));
    CHECK_CLOSE(num(run, "first_ms"), cJSON_GetArrayItem(lat, 0)->valuedouble);
    const cJSON *warm = get(run, "warm");
    CHECK_EQ_INT((int)num(warm, "count"), (int)items - 1);
    double max = 0;
    CHECK_CLOSE(num(warm, "p50_ms"), rank_of(lat, 1, 0.50, &max));
    CHECK_CLOSE(num(warm, "p99_ms"), rank_of(lat, 1, 0.99, &max));
    CHECK_CLOSE(num(warm, "max_ms"), max);
    CHECK(num(warm, "min_ms") > 0 && num(warm, "min_ms") <= num(warm, "p50_ms"));
    CHECK(num(warm, "p50_ms") <= num(warm, "p99_ms"));
    CHECK_CLOSE(num(run, "speedup"), encode_ms / num(warm, "p50_ms"));
    const cJSON *c = get(run, "counters");
    CHECK_EQ_INT((int)num(c, "p2p_reads"), (int)items);
    CHECK_EQ_INT((int)num(get(c, "acks"), "ok"), (int)items);
}

static void
check_p2p(const cJSON *p2p, double *peer_speedup_p)
{
    CHECK(cJSON_IsTrue(get(p2p, "ok")));
    double items = num(p2p, "items"), item_bytes = num(p2p, "item_bytes");
    double encode_ms = num(p2p, "encode_ms_per_item");
    CHECK(items > 1 && encode_ms > 0);
    CHECK_EQ_U64((uint64_t)item_bytes, (uint64_t)num(p2p, "tokens") * num(p2p, "hidden") * 2);
    const cJSON *seq = get(p2p, "one_at_a_time");
    check_one_at_a_time(get(seq, "same_host"), items, encode_ms);
    check_one_at_a_time(get(seq, "tcp"), items, encode_ms);
    CHECK_STR_EQ(cJSON_GetStringValue(get(get(seq, "tcp"), "transport")), "tcp");

    const cJSON *b = get(p2p, "burst");
    double fetched = num(b, "fetched"), missing = num(b, "missing");
    CHECK(missing >= 1);
    CHECK_EQ_INT((int)fetched, (int)(num(b, "announced") - missing));
    CHECK_EQ_INT((int)fetched, (int)items);
    CHECK_EQ_INT((int)num(b, "fallbacks"), (int)missing);
    CHECK_EQ_INT((int)num(b, "failed"), 0);
    const cJSON *c = get(b, "counters");
    CHECK_EQ_INT((int)num(c, "p2p_reads"), (int)fetched);
    CHECK_EQ_INT((int)num(c, "fallbacks"), (int)missing);
    CHECK_EQ_INT((int)num(get(c, "acks"), "ok"), (int)fetched);
    CHECK_EQ_INT((int)num(get(c, "acks"), "nack_missing"), (int)missing);
    const cJSON *lat = get(b, "latency_ms");
    CHECK_EQ_INT(cJSON_GetArraySize(lat), (int)fetched);
    double max = 0, p50 = rank_of(lat, 0, 0.50, &max);
    CHECK(p50 > 0);
    CHECK_CLOSE(num(get(b, "landed"), "p50_ms"), p50);
    CHECK_CLOSE(num(b, "all_landed_ms"), max);
    CHECK_CLOSE(num(b, "bytes"), fetched * item_bytes);
    CHECK_CLOSE(num(b, "gb_per_s"), num(b, "bytes") / (max * 1e6));
    CHECK_CLOSE(num(b, "encode_all_ms"), encode_ms * fetched);
    CHECK_CLOSE(num(b, "speedup"), num(b, "encode_all_ms") / max);
    *peer_speedup_p = encode_ms / num(get(get(seq, "same_host"), "warm"), "p50_ms");
}
#endif

static void
check_no_region_left(const cJSON *o)
{
    char id[64];
    snprintf(id, sizeof(id), "%s_", cJSON_GetStringValue(get(get(o, "local"), "instance")));
    check_no_region_of(id);
    const cJSON *p2p = get(o, "p2p");
    if (cJSON_IsNull(p2p))
        return;
    snprintf(id, sizeof(id), "producer%d-", (int)num(p2p, "producer_pid"));
    check_no_region_of(id);
    const char *runs[3][2] = {
        {"one_at_a_time", "same_host"}, {"one_at_a_time", "tcp"}, {"burst", NULL}};
    for (int i = 0; i < 3; i++) {
        const cJSON *r = get(p2p, runs[i][0]);
        if (runs[i][1] != NULL)
            r = get(r, runs[i][1]);
        snprintf(id, sizeof(id), "consumer%d-", (int)num(r, "consumer_pid"));
        check_no_region_of(id);
    }
}

static void
test_demo_json_figures_agree_with_each_other(void)
{
    char log[128];
    snprintf(log, sizeof(log), "/tmp/ectt_demo_%d.log", (int)getpid());
    struct ts_cli_run r;
    ts_cli_run(&r, DEADLINE_S, "demo", "--json", "--no-progress", "--log", log, NULL);
    CHECK_CLI_RC(&r, 0);
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(r.out, &end, 1);
    CHECK_MSG(o != NULL, "stdout is not one JSON object:\n%s", r.out);
    CHECK(cJSON_IsTrue(get(o, "ok")));
    CHECK_STR_EQ(cJSON_GetStringValue(get(o, "log")), log);

    const cJSON *l = get(o, "local");
    double tp = num(l, "tp"), hits = num(l, "cpu_tier_hits");
    CHECK(hits > 0 && num(l, "misses") > 0 && num(l, "evictions") > 0);
    CHECK_CLOSE(num(l, "gpu_cache_hits") + hits + num(l, "misses"), num(l, "media_items"));
    /* Every rank verified every reload, and none differed. */
    CHECK_CLOSE(num(l, "verified_reloads"), tp * hits);
    CHECK_EQ_INT((int)num(l, "mismatches"), 0);
    CHECK(num(l, "saves") > 0 && num(l, "saves") <= num(l, "misses"));
    CHECK(num(l, "save_copy_ms") > 0 && num(l, "load_copy_ms") > 0);
    CHECK_CLOSE(num(l, "save_gb_per_s"), num(l, "save_bytes") / (num(l, "save_copy_ms") * 1e6));
    CHECK_CLOSE(num(l, "load_gb_per_s"), num(l, "load_bytes") / (num(l, "load_copy_ms") * 1e6));
    CHECK_CLOSE(num(l, "load_bytes_per_rank") * tp, num(l, "load_bytes"));
    CHECK_CLOSE(num(l, "load_copy_ms_per_rank") * tp, num(l, "load_copy_ms"));
    CHECK_EQ_INT((int)num(l, "loads_per_rank"), (int)hits);
    CHECK(num(l, "encode_spent_ms") > 0 && num(l, "encode_avoided_ms") > 0);
    double cpu = num(l, "encode_avoided_ms") / num(l, "load_copy_ms_per_rank");
    CHECK_CLOSE(num(l, "reload_speedup"), cpu);
    /* The claim the demo makes: a reload costs less than the encode it
     * avoids (the copies are timed alone, not with the encoding). */
    CHECK_MSG(cpu > 1, "reloads were no faster than encoding: %.2f", cpu);

    const cJSON *v = get(o, "verdict");
    CHECK_CLOSE(num(v, "cpu_tier_speedup"), cpu);
    char want[256], a[32], b[32];
    speedup_text(a, sizeof(a), cpu);
#if ECT_HAVE_P2P
    double peer = 0;
    check_p2p(get(o, "p2p"), &peer);
    CHECK_CLOSE(num(v, "peer_speedup"), peer);
    speedup_text(b, sizeof(b), peer);
    snprintf(want, sizeof(want),
             "reloading from the CPU tier: %s faster than encoding; fetching from a peer: %s "
             "faster",
             a, b);
    /* The children's messages are in the log, not on the demo's outputs. */
    CHECK_CONTAINS(slurp_file(log), "ectier producer: SIGTERM, shutting down");
#else
    CHECK(cJSON_IsNull(get(o, "p2p")));
    (void)b;
    snprintf(want, sizeof(want),
             "reloading from the CPU tier: %s faster than encoding; peer to peer: not in this "
             "build",
             a);
#endif
    CHECK_STR_EQ(cJSON_GetStringValue(get(v, "text")), want);
    CHECK_MSG(strstr(r.err, "shutting down") == NULL, "a child wrote to the demo's stderr:\n%s",
              r.err);
    check_no_region_left(o);
    cJSON_Delete(o);
    ts_cli_run_free(&r);
    CHECK(unlink(log) == 0);
}

/* Columns of a UTF-8 line: its code points (the summary has no wide ones). */
static size_t
columns(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static void
test_demo_text_fits_100_columns_and_names_its_log(void)
{
    /* The default log goes to $TMPDIR: a directory of this test's own. */
    char dir[] = "/tmp/ectt_demo_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "TMPDIR=%s exec " ECT_CLI_PATH " demo --no-progress", dir);
    const char *argv[] = {cmd, NULL};
    struct ts_cli_run r;
    ts_cli_exec(&r, DEADLINE_S, 1, argv);
    CHECK_CLI_RC(&r, 0);
    for (const char *line = r.out; *line != '\0';) {
        const char *nl = strchr(line, '\n');
        size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
        CHECK_MSG(columns(line, len) <= 100, "a line of %zu columns:\n%.*s", columns(line, len),
                  (int)len, line);
        line += len + (nl != NULL);
    }
    CHECK_CONTAINS(r.out, "\nreloading from the CPU tier: ");
    CHECK_CONTAINS(r.out, "\u00d7 faster than encoding; ");
#if ECT_HAVE_P2P
    CHECK_CONTAINS(r.out, "; fetching from a peer: ");
    CHECK_CONTAINS(r.out, "warm connections (each run's first left out)");
#endif
    CHECK_MSG(strstr(r.out, "shutting down") == NULL && strstr(r.err, "shutting down") == NULL,
              "a child's message reached the summary:\n%s\n%s", r.out, r.err);
    /* The summary names the log, in $TMPDIR. */
    const char *label = "messages of the producer, consumers and ectier itself: ";
    const char *at = strstr(r.out, label);
    CHECK_MSG(at != NULL, "the summary names no log:\n%s", r.out);
    char log[256];
    CHECK(sscanf(at + strlen(label), "%255s", log) == 1);
    CHECK_MSG(strncmp(log, dir, strlen(dir)) == 0 && log[strlen(dir)] == '/', "log %s not in %s",
              log, dir);
    struct stat st;
    CHECK_MSG(stat(log, &st) == 0 && S_ISREG(st.st_mode), "no log file %s", log);
#if ECT_HAVE_P2P
    CHECK_CONTAINS(slurp_file(log), "ectier producer: SIGTERM, shutting down");
#endif
    CHECK(unlink(log) == 0);
    CHECK(rmdir(dir) == 0);
    ts_cli_run_free(&r);
}

static void
test_demo_rejects_bad_arguments(void)
{
    struct ts_cli_run r;
    ts_cli_run(&r, 30, "demo", "--bogus", NULL);
    CHECK_CLI_RC(&r, 2);
    CHECK_CONTAINS(r.err, "unknown argument '--bogus'");
    ts_cli_run_free(&r);
    ts_cli_run(&r, 30, "demo", "--log", NULL);
    CHECK_CLI_RC(&r, 2);
    ts_cli_run_free(&r);
    /* A log it cannot write stops it before anything runs. */
    ts_cli_run(&r, 30, "demo", "--log", "/nonexistent-ectier-dir/demo.log", NULL);
    CHECK_CLI_RC(&r, 1);
    CHECK_CONTAINS(r.err, "--log /nonexistent-ectier-dir/demo.log: No such file or directory");
    CHECK_MSG(r.out[0] == '\0', "it ran anyway:\n%s", r.out);
    ts_cli_run_free(&r);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_demo_json_figures_agree_with_each_other),
    ECT_CASE(test_demo_text_fits_100_columns_and_names_its_log),
    ECT_CASE(test_demo_rejects_bad_arguments),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
