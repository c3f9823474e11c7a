/*
 * `ectier demo`: the main job on an embedded workload.  Runs the reference
 * engine loop (examples/engine_loop.c): a scheduler process and two worker
 * processes that offload encoder outputs to the CPU tier and reload them
 * instead of encoding again, every reload checked byte for byte.  Then (P2P
 * builds) a producer and consumer processes on loopback: the consumers pull
 * the producer's encodings instead of encoding them (tools/p2p/demo_p2p.c).
 *
 * It ends with a summary (or, with --json, one JSON object of the same
 * figures) and a verdict computed from them.  What the child processes and
 * the library say on the side (warnings, "shutting down") goes to a log
 * file that the summary names, never into the summary.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "cli.h"
#include "ectier_build_config.h"
#include "engine_loop.h"
#if ECT_HAVE_P2P
#include "p2p/demo_p2p.h"
#endif

static const char usage[] =
    "usage: ectier demo [--no-progress] [--json] [--log FILE]\n"
    "Runs the reference engine loop on an embedded workload, then (P2P builds) a producer\n"
    "and consumers on loopback, and prints a summary with a verdict.\n"
    "  --no-progress  no progress line on the terminal\n"
    "  --json         print the summary's figures as one JSON object instead\n"
    "  --log FILE     where the child processes' messages go (default: a new file\n"
    "                 $TMPDIR/ectier-demo-XXXXXX.log, named in the summary)\n";

/* ectier's own messages (this process and the forked workers) go to the
 * log as well, one write per line. */
static void
log_sink(ect_log_level_t level, const char *message, void *user)
{
    int fd = *(const int *)user; /* static storage: outlives any late line */
    char line[1200];
    int n = snprintf(line, sizeof(line), "ectier %s (pid %d): %s\n", ect_log_level_str(level),
                     (int)getpid(), message);
    if (n > 0 && write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0) {
        /* Nowhere left to say it. */
    }
}

static int
open_log(const char *path, char *name, size_t cap)
{
    if (path != NULL) {
        snprintf(name, cap, "%s", path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            ect_cli_fail("demo", "--log %s: %s", path, strerror(errno));
        return fd;
    }
    const char *dir = getenv("TMPDIR");
    snprintf(name, cap, "%s/ectier-demo-XXXXXX.log", dir != NULL && dir[0] ? dir : "/tmp");
    int fd = mkostemps(name, 4, O_APPEND | O_CLOEXEC);
    if (fd < 0)
        ect_cli_fail("demo", "cannot create a log file %s: %s", name, strerror(errno));
    return fd;
}

static cJSON *
local_json(const struct ect_loop_workload *wl, const struct ect_loop_summary *s)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    double tp = wl->tp_size ? wl->tp_size : 1;
#define N(name, v) cJSON_AddNumberToObject(o, name, (double)(v))
    N("requests", s->requests);
    N("media_items", s->items);
    N("steps", s->steps);
    N("tp", wl->tp_size);
    N("cpu_tier_bytes", wl->cpu_bytes);
    N("gpu_cache_hits", s->gpu_hits);
    N("cpu_tier_hits", s->cpu_hits);
    N("misses", s->misses);
    N("evictions", s->evictions);
    N("saves", s->saves);
    N("save_bytes", s->save_bytes);
    N("save_copy_ms", (double)s->save_ns / 1e6);
    N("save_gb_per_s", s->save_ns ? (double)s->save_bytes / (double)s->save_ns : 0.0);
    N("loads_per_rank", s->cpu_hits);
    N("load_bytes", s->load_bytes);
    N("load_bytes_per_rank", (double)s->load_bytes / tp);
    N("load_copy_ms", (double)s->load_ns / 1e6);
    N("load_copy_ms_per_rank", ect_loop_load_ms_per_rank(wl, s));
    N("load_gb_per_s", s->load_ns ? (double)s->load_bytes / (double)s->load_ns : 0.0);
    N("verified_reloads", s->verified);
    N("mismatches", s->mismatches);
    N("encode_spent_ms", (double)s->encode_ns / 1e6);
    N("encode_avoided_ms", (double)s->avoided_encode_ns / 1e6);
    N("reload_speedup", ect_loop_reload_speedup(wl, s));
    N("wall_ms", (double)s->wall_ns / 1e6);
#undef N
    char instance[32];
    snprintf(instance, sizeof(instance), "loop%d", (int)getpid());
    cJSON_AddStringToObject(o, "instance", instance);
    return o;
}

/* "reloading from the CPU tier: 42× faster than encoding; fetching from a
 * peer: 24× faster" (peer < 0: not in this build). */
static void
verdict_text(char *buf, size_t cap, double cpu, double peer)
{
    char a[32], b[32];
    ect_loop_format_speedup(a, sizeof(a), cpu);
    ect_loop_format_speedup(b, sizeof(b), peer);
    if (peer < 0)
        snprintf(buf, cap,
                 "reloading from the CPU tier: %s faster than encoding; peer to peer: not "
                 "in this build",
                 a);
    else
        snprintf(buf, cap,
                 "reloading from the CPU tier: %s faster than encoding; fetching from a peer: "
                 "%s faster",
                 a, b);
}

int
ect_cli_demo(int argc, char **argv)
{
    struct ect_loop_workload wl;
    ect_loop_default_workload(&wl);
    int json = 0;
    const char *log_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--no-progress") == 0)
            wl.show_progress = 0;
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--log") == 0 && i + 1 < argc)
            log_path = argv[++i];
        else
            return ect_cli_usage_error("demo", usage, "unknown argument '%s'", argv[i]);
    }
    char log_name[4096];
    static int log_fd;
    log_fd = open_log(log_path, log_name, sizeof(log_name));
    if (log_fd < 0)
        return 1;
    ect_log_set_sink(log_sink, &log_fd);
    if (!json)
        printf("ectier demo: %u requests over media items with repeats, a %llu MiB CPU tier, "
               "tp=%u\n",
               wl.n_requests, (unsigned long long)(wl.cpu_bytes >> 20), wl.tp_size);
    struct ect_loop_summary s;
    int rc = ect_loop_run(&wl, &s);
    if (rc != 0)
        ect_cli_fail("demo", "the engine loop failed (see %s)", log_name);
    if (!json)
        ect_loop_print_summary(&wl, &s);
    double cpu = ect_loop_reload_speedup(&wl, &s), peer = -1;
#if ECT_HAVE_P2P
    struct ect_demo_p2p p2p;
    memset(&p2p, 0, sizeof(p2p));
    if (rc == 0) {
        fflush(stdout);
        if (ect_demo_p2p_run(ect_loop_encode_ms(256, 3584, wl.encode_work), log_fd, &p2p) != 0) {
            ect_cli_fail("demo", "peer to peer failed (the children's messages: %s)", log_name);
            rc = 1;
        }
        if (!json)
            ect_demo_p2p_print(&p2p);
        peer = ect_demo_p2p_speedup(&p2p);
    }
#else
    if (!json)
        printf("\npeer to peer: not in this build (install libzmq3-dev libmsgpack-dev "
               "and rebuild)\n");
#endif
    char verdict[256];
    if (rc == 0)
        verdict_text(verdict, sizeof(verdict), cpu, peer);
    else
        snprintf(verdict, sizeof(verdict), "no verdict: the demo failed (see above and the log)");
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ok", rc == 0);
        cJSON_AddStringToObject(o, "log", log_name);
        cJSON_AddItemToObject(o, "local", local_json(&wl, &s));
#if ECT_HAVE_P2P
        cJSON_AddItemToObject(o, "p2p",
                              rc == 0 || p2p.items ? ect_demo_p2p_json(&p2p) : cJSON_CreateNull());
#else
        cJSON_AddNullToObject(o, "p2p");
#endif
        cJSON *v = cJSON_AddObjectToObject(o, "verdict");
        cJSON_AddNumberToObject(v, "cpu_tier_speedup", cpu);
        if (peer >= 0)
            cJSON_AddNumberToObject(v, "peer_speedup", peer);
        else
            cJSON_AddNullToObject(v, "peer_speedup");
        cJSON_AddStringToObject(v, "text", verdict);
        char *text = cJSON_Print(o);
        if (text == NULL) {
            cJSON_Delete(o);
            close(log_fd);
            return ect_cli_fail("demo", "out of memory for the JSON summary");
        }
        printf("%s\n", text);
        cJSON_free(text);
        cJSON_Delete(o);
    } else {
        printf("\n%s\n", verdict);
        if (rc == 0)
            printf("  (CPU tier: load copies against re-encoding the same items%s)\n",
                   ECT_HAVE_P2P ? "; peer: a warm same-host\n   fetch, p50, against encoding "
                                  "one item of its size"
                                : "");
        printf("messages of the producer, consumers and ectier itself: %s\n", log_name);
    }
    ect_log_set_sink(NULL, NULL);
    close(log_fd);
    return rc;
}
