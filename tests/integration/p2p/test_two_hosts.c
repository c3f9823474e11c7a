/*
 * Two "hosts" on one machine (issue 11): a producer (`ectier producer`) in
 * one network namespace and a consumer instance in another, joined by a
 * veth pair shaped with tc's token bucket, so a large read takes long
 * enough to be cut.  With the link taken down in the middle of a read, the
 * read times out, its blocks are quarantined and freed once the cut stream
 * settles, and the item falls back to local encoding, exactly as SPEC §8.5
 * says; with the link back, the next fetch succeeds without restarting
 * anything.
 *
 * Needs root (ip netns, tc): skips with a message otherwise.  The addresses
 * (10.202.0.0/30) exist only inside the namespaces the test creates, and
 * the test removes them and the producer whatever way it ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "support/p2p.h"

#define HIDDEN "4096" /* bf16: 8 KiB rows */
#define BLOCK  8192u
#define TOKENS 12800u /* 100 MiB: 0.8 s at 1 Gbit/s */

struct netpair {
    char ns_p[32], ns_c[32], dev_p[16], dev_c[16];
    int up;
    pid_t janitor;
    int janitor_fd; /* closing it lets the janitor clean up */
};

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char quiet[600];
    snprintf(quiet, sizeof(quiet), "%s >/dev/null 2>&1", cmd);
    int st = system(quiet);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void
netpair_down(struct netpair *n)
{
    if (!n->up)
        return;
    if (n->janitor > 0) {
        close(n->janitor_fd);
        waitpid(n->janitor, NULL, 0);
        n->janitor = 0;
    } else {
        sh("ip netns del %s", n->ns_p);
        sh("ip netns del %s", n->ns_c);
    }
    n->up = 0;
}

/* Two namespaces, a veth between them, 10.202.0.1 (producer) and
 * 10.202.0.2 (consumer); egress shaped to rate.  Skips the case when the
 * machine does not allow it. */
static void
netpair_up(struct netpair *n, const char *rate)
{
    memset(n, 0, sizeof(*n));
    if (geteuid() != 0)
        SKIP("needs root for ip netns and tc");
    int id = (int)getpid() % 100000;
    snprintf(n->ns_p, sizeof(n->ns_p), "ectt%dp", id);
    snprintf(n->ns_c, sizeof(n->ns_c), "ectt%dc", id);
    snprintf(n->dev_p, sizeof(n->dev_p), "et%da", id);
    snprintf(n->dev_c, sizeof(n->dev_c), "et%db", id);
    if (sh("ip netns add %s", n->ns_p) != 0)
        SKIP("cannot create network namespaces here");
    n->up = 1;
    int ok = sh("ip netns add %s", n->ns_c) == 0 &&
             sh("ip link add %s type veth peer name %s", n->dev_p, n->dev_c) == 0 &&
             sh("ip link set %s netns %s", n->dev_p, n->ns_p) == 0 &&
             sh("ip link set %s netns %s", n->dev_c, n->ns_c) == 0 &&
             sh("ip -n %s addr add 10.202.0.1/30 dev %s", n->ns_p, n->dev_p) == 0 &&
             sh("ip -n %s addr add 10.202.0.2/30 dev %s", n->ns_c, n->dev_c) == 0 &&
             sh("ip -n %s link set lo up", n->ns_p) == 0 &&
             sh("ip -n %s link set lo up", n->ns_c) == 0 &&
             sh("ip -n %s link set %s up", n->ns_p, n->dev_p) == 0 &&
             sh("ip -n %s link set %s up", n->ns_c, n->dev_c) == 0;
    if (ok && rate != NULL)
        ok = sh("tc -n %s qdisc add dev %s root tbf rate %s burst 256kb latency 50ms", n->ns_p,
                n->dev_p, rate) == 0 &&
             sh("tc -n %s qdisc add dev %s root tbf rate %s burst 256kb latency 50ms", n->ns_c,
                n->dev_c, rate) == 0;
    if (!ok) {
        netpair_down(n);
        SKIP("cannot set up a veth pair with tc shaping here");
    }
    /* A janitor removes the namespaces (and with them the veth) when this
     * process ends, whatever way: a failed CHECK exits at once. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t janitor = fork();
    CHECK(janitor >= 0);
    if (janitor == 0) {
        close(fds[1]);
        char c;
        while (read(fds[0], &c, 1) > 0) {
        }
        sh("ip netns del %s", n->ns_p);
        sh("ip netns del %s", n->ns_c);
        _exit(0);
    }
    close(fds[0]);
    n->janitor = janitor;
    n->janitor_fd = fds[1];
}

/* Move this process (the case's own) into the consumer's namespace. */
static void
enter_consumer_ns(const struct netpair *n)
{
    char path[64];
    snprintf(path, sizeof(path), "/var/run/netns/%s", n->ns_c);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
    CHECK_MSG(setns(fd, CLONE_NEWNET) == 0, "setns: %s", strerror(errno));
    close(fd);
}

/* `ectier producer` in the producer's namespace with n test entries;
 * their announcements go to params (one line each). */
static pid_t
spawn_producer(const struct netpair *np, unsigned n, char params[][4096])
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    char cfg[512], fill[16], tok[16];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"read_timeout_s\": 5}}",
             (unsigned long long)n * TOKENS * BLOCK + (1u << 20));
    snprintf(fill, sizeof(fill), "%u", n);
    snprintf(tok, sizeof(tok), "%u", TOKENS);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        setenv("ECTIER_SIDE_CHANNEL_HOST", "10.202.0.1", 1);
        setenv("ECTIER_SIDE_CHANNEL_PORT", "0", 1);
        execlp("ip", "ip", "netns", "exec", np->ns_p, ECT_CLI_PATH, "producer", "--config", cfg,
               "--model", "m", "--hidden", HIDDEN, "--dtype", "bf16", "--engine-version", "0.11.0",
               "--fill", fill, "--tokens", tok, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    for (unsigned i = 0; i < n; i++)
        CHECK_MSG(fgets(params[i], 4096, f) != NULL && params[i][0] == '{',
                  "the producer did not announce entry %u", i);
    char ready[16] = "";
    CHECK(fgets(ready, sizeof(ready), f) != NULL && strncmp(ready, "ready", 5) == 0);
    fclose(f);
    return pid;
}

static void
hash_of(const char *params, char out[65])
{
    CHECK(sscanf(params, "{\"%64[0-9a-f]\"", out) == 1);
}

static void
test_link_down_mid_read_times_out_falls_back_and_a_restored_link_serves_again(void)
{
    struct netpair np;
    netpair_up(&np, "1gbit");
    char params[2][4096];
    pid_t producer = spawn_producer(&np, 2, params);
    enter_consumer_ns(&np);
    struct ect_cli_instance c;
    ts_p2p_open_instance(&c, "ec_consumer", 2ull * TOKENS * BLOCK + (1u << 20), HIDDEN,
                         "\"transport\": \"tcp\", \"read_timeout_s\": 1, \"quarantine_s\": 30, "
                         "\"consumer_ack_timeout_s\": 2",
                         "m");
    char h0[65], h1[65];
    hash_of(params[0], h0);
    hash_of(params[1], h1);
    /* Start the first read, then cut the link under it. */
    uint64_t end = ts_now_ns() + 10ull * 1000000000ull;
    while (ts_p2p_metrics(&c).p2p_reads_started == 0 && ts_now_ns() < end)
        CHECK_EQ_INT(ts_p2p_ensure_once(&c, h0, TOKENS, params[0], 1), TS_P2P_DEFERRED);
    CHECK_MSG(ts_p2p_metrics(&c).p2p_reads_started == 1, "the read never started");
    usleep(200 * 1000);
    CHECK(sh("ip link set %s down", np.dev_c) == 0);
    uint64_t t0 = ts_now_ns();
    CHECK_EQ_INT(ts_p2p_fetch(&c, h0, TOKENS, params[0], 1, 15), TS_P2P_ENCODE_LOCALLY);
    double waited = (double)(ts_now_ns() - t0) / 1e9;
    ect_metrics_t m = ts_p2p_metrics(&c);
    CHECK_MSG(m.p2p_reads_completed == 0, "the 100 MiB read finished before the cut: inconclusive");
    CHECK_EQ_U64(m.p2p_read_timeouts, 1);
    CHECK_EQ_U64(m.p2p_fallbacks, 1);
    CHECK_MSG(waited < 5.0, "fell back only after %.1f s (read timeout 1 s)", waited);
    ts_p2p_finish(&c, h0, TOKENS);
    /* The cut stream settles the read: the quarantined blocks come back
     * without waiting the 30 s quarantine. */
    end = ts_now_ns() + 5ull * 1000000000ull;
    while (ts_p2p_metrics(&c).cache.entries_not_ready != 0 && ts_now_ns() < end)
        usleep(10 * 1000);
    CHECK_EQ_U64(ts_p2p_metrics(&c).cache.entries_not_ready, 0);
    CHECK_EQ_U64(ts_p2p_metrics(&c).cache.entries, 0);
    /* The link comes back: the next fetch works, nothing restarted. */
    CHECK(sh("ip link set %s up", np.dev_c) == 0);
    CHECK_EQ_INT(ts_p2p_fetch(&c, h1, TOKENS, params[1], 0, 30), TS_P2P_FETCHED);
    ts_p2p_check_loaded(&c, h1, TOKENS, BLOCK);
    ts_p2p_finish(&c, h1, TOKENS);
    CHECK_EQ_U64(ts_p2p_metrics(&c).p2p_reads_completed, 1);
    ect_cli_instance_close(&c);
    kill(producer, SIGTERM);
    int st;
    CHECK(waitpid(producer, &st, 0) == producer);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the producer ended with status %d", st);
    netpair_down(&np);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_link_down_mid_read_times_out_falls_back_and_a_restored_link_serves_again),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
