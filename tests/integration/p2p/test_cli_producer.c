/*
 * `ectier producer` as a black-box user sees it: with metrics_address
 * 127.0.0.1:0 it says on stderr, before "ready", which port it got, and the
 * producer's own metrics are served there; stdout stays "params lines, then
 * ready".  Without metrics_address it says nothing of the kind.  Every
 * producer is stopped with SIGTERM and must exit 0.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"
#include "support/cli.h"
#include "metrics/scrape.h"

#define HIDDEN "64"

struct producer {
    pid_t pid;
    FILE *out, *err;
};

static void
start(struct producer *p, int with_metrics)
{
    char cfg[512];
    snprintf(
        cfg, sizeof(cfg),
        "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
        "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 65536, \"ec_enable_nixl\": true%s}}",
        with_metrics ? ", \"metrics_address\": \"127.0.0.1:0\"" : "");
    const char *const argv[] = {"ectier",   "producer",    "--config", cfg,       "--model",
                                "m",        "--hidden",    HIDDEN,     "--dtype", "bf16",
                                "--listen", "127.0.0.1:0", "--fill",   "3",       "--tokens",
                                "2",        NULL};
    p->pid = ts_cli_spawn(argv, &p->out, &p->err);
}

/* Read stdout up to "ready": exactly n params objects before it. */
static void
expect_params_then_ready(struct producer *p, unsigned n)
{
    char line[4096];
    unsigned params = 0;
    for (;;) {
        CHECK_MSG(fgets(line, sizeof(line), p->out) != NULL, "stdout ended before 'ready'");
        if (strcmp(line, "ready\n") == 0)
            break;
        CHECK_MSG(line[0] == '{', "not a params line on stdout: %s", line);
        params++;
    }
    CHECK_EQ_INT(params, n);
}

/* What stderr holds now, without waiting for more. */
static void
read_ready_stderr(struct producer *p, char *buf, size_t cap)
{
    int fd = fileno(p->err);
    int flags = fcntl(fd, F_GETFL);
    CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0);
    ssize_t n = read(fd, buf, cap - 1);
    buf[n > 0 ? n : 0] = '\0';
    CHECK(fcntl(fd, F_SETFL, flags) == 0);
}

/* SIGTERM; exit 0; the rest of stderr into rest. */
static void
stop(struct producer *p, char *rest, size_t cap)
{
    CHECK(kill(p->pid, SIGTERM) == 0);
    size_t n = fread(rest, 1, cap - 1, p->err);
    rest[n] = '\0';
    int st;
    CHECK(waitpid(p->pid, &st, 0) == p->pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the producer ended with status %d: %s", st,
              rest);
    fclose(p->out);
    fclose(p->err);
}

static void
test_producer_says_which_metrics_port_it_got(void)
{
    struct producer p;
    start(&p, 1);
    expect_params_then_ready(&p, 3);
    /* Written before "ready": in the pipe already, no waiting for it. */
    char line[512];
    read_ready_stderr(&p, line, sizeof(line));
    unsigned port = 0;
    char tail[32] = "";
    CHECK_MSG(sscanf(line, "ectier producer: metrics at http://127.0.0.1:%u%31s", &port, tail) ==
                      2 &&
                  strcmp(tail, "/metrics") == 0 && port > 0 && port < 65536,
              "not the metrics line: %s", line);
    /* The port is this producer's endpoint: its three announcements. */
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%u", port);
    char *body = NULL;
    size_t len = 0;
    CHECK_OK(ect__http_get(address, "/metrics", 3000, 1 << 20, &body, &len));
    ect__prom_t prom;
    CHECK_OK(ect__prom_parse(body, len, &prom));
    double announced = -1;
    CHECK(ect__prom_get(&prom, "ectier_announcements_total", "", &announced));
    CHECK_MSG(announced == 3, "ectier_announcements_total %g, expected 3", announced);
    ect__prom_cleanup(&prom);
    free(body);
    char rest[4096];
    stop(&p, rest, sizeof(rest));
    CHECK_CONTAINS(rest, "ectier producer: SIGTERM, shutting down");
}

static void
test_producer_without_metrics_says_nothing_of_them(void)
{
    struct producer p;
    start(&p, 0);
    expect_params_then_ready(&p, 3);
    char line[512];
    read_ready_stderr(&p, line, sizeof(line));
    CHECK_MSG(line[0] == '\0', "stderr before any signal: %s", line);
    char rest[4096];
    stop(&p, rest, sizeof(rest));
    CHECK_MSG(strstr(rest, "metrics at") == NULL, "stderr: %s", rest);
    CHECK_CONTAINS(rest, "ectier producer: SIGTERM, shutting down");
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_producer_says_which_metrics_port_it_got),
    ECT_CASE(test_producer_without_metrics_says_nothing_of_them),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
