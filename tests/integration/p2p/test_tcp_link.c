/*
 * `ectier-tcp-link` (bench/link/tcp_link.c), the bare TCP ceiling that
 * scripts/bench-two-hosts.sh measures between its two network namespaces,
 * run here over loopback: its two ends move the bytes over one and over
 * several connections and print a bandwidth; a server that refuses the
 * range makes the measuring end fail with a message instead of hanging;
 * bad arguments exit 2 with the usage.  Figures are not asserted, only that
 * a transfer happened.
 */
#include <netinet/in.h>
#include <sys/socket.h>

#include "support/cli.h"
#include "support/util.h"

#define LINK ECT_BUILD_DIR "/ectier-tcp-link"

/* Both ends at once: the server in the background, the measuring end's
 * exit status last (the shell's), the server's output after its own. */
static void
run_pair(struct ts_cli_run *r, const char *serve_bytes, const char *measure_bytes,
         const char *conns)
{
    char cmd[512];
    unsigned port = ts_free_loopback_port();
    snprintf(cmd, sizeof(cmd),
             "%s serve 127.0.0.1 %u %s %s & s=$!; %s measure 127.0.0.1 %u %s 6 %s; rc=$?; "
             "wait $s; echo \"server $?\" >&2; exit $rc",
             LINK, port, serve_bytes, conns, LINK, port, measure_bytes, conns);
    const char *argv[] = {cmd, NULL};
    ts_cli_exec(r, 60, 1, argv);
}

static void
test_both_ends_move_the_bytes_over_one_and_several_connections(void)
{
    const char *conns[] = {"1", "3"};
    for (size_t i = 0; i < 2; i++) {
        struct ts_cli_run r;
        run_pair(&r, "1048576", "1048576", conns[i]);
        CHECK_CLI_RC(&r, 0);
        double gbps = 0;
        char tail = 0;
        CHECK_MSG(sscanf(r.out, "%lf%c", &gbps, &tail) == 2 && tail == '\n' && gbps > 0,
                  "not one bandwidth: '%s'", r.out);
        CHECK_MSG(strstr(r.err, "server 0") != NULL, "the server did not end well: %s", r.err);
        ts_cli_run_free(&r);
    }
}

static void
test_a_refused_range_fails_the_measure_without_hanging(void)
{
    /* The server has 4 KiB and closes on a request past them. */
    struct ts_cli_run r;
    run_pair(&r, "4096", "1048576", "1");
    CHECK_CLI_RC(&r, 1);
    CHECK_MSG(strstr(r.err, "transfer failed") != NULL, "no message: %s", r.err);
    CHECK_MSG(r.out[0] == '\0', "printed a figure: %s", r.out);
    ts_cli_run_free(&r);
}

static void
test_bad_arguments_exit_2_with_the_usage(void)
{
    const char *bad[][9] = {
        {LINK, NULL},
        {LINK, "fetch", "127.0.0.1", "1", "4096", NULL},
        {LINK, "serve", "localhost", "1", "4096", NULL},
        {LINK, "serve", "127.0.0.1", "0", "4096", NULL},
        {LINK, "serve", "127.0.0.1", "70000", "4096", NULL},
        {LINK, "serve", "127.0.0.1", "1", "0", NULL},
        {LINK, "serve", "127.0.0.1", "1", "4k", NULL},
        {LINK, "serve", "127.0.0.1", "1", "4096", "5", NULL},
        {LINK, "measure", "127.0.0.1", "1", "4096", "7", NULL},
        {LINK, "measure", "127.0.0.1", "1", "4096", "2", NULL},
        {LINK, "measure", "127.0.0.1", "1", "4096", "8", "0", NULL},
        {LINK, "measure", "127.0.0.1", "1", "4096", "8", "1", "x", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_cli_run r;
        ts_cli_exec(&r, 10, 0, bad[i]);
        CHECK_CLI_RC(&r, 2);
        CHECK_MSG(strstr(r.err, "usage: ectier-tcp-link serve") != NULL, "case %zu: %s", i, r.err);
        ts_cli_run_free(&r);
    }
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_both_ends_move_the_bytes_over_one_and_several_connections),
    ECT_CASE(test_a_refused_range_fails_the_measure_without_hanging),
    ECT_CASE(test_bad_arguments_exit_2_with_the_usage),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
