/*
 * `ectier config` and `ectier settings` end to end: the real binary run as
 * a child process, its output and exit status checked (0 ok, 1 bad config,
 * 2 usage).  Temporary files are unique per case and removed.
 */
#include <fcntl.h>
#include <sys/wait.h>

#include <ectier/ectier.h>

#include "harness.h"

struct run {
    int status; /* exit status, or -1 if it did not exit normally */
    char *out;
    char *err;
};

static char *
slurp_and_remove(const char *path)
{
    char *text = ect_test_read_file(path, NULL);
    unlink(path);
    return text;
}

/* Run the CLI with argv (NULL-terminated, without the program); env is
 * "NAME=VALUE" strings to add (NULL-terminated, may be NULL). */
static struct run
run_cli(const char *const *args, const char *const *env)
{
    char out_path[] = "/tmp/ectt_cli_out_XXXXXX";
    char err_path[] = "/tmp/ectt_cli_err_XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    CHECK(out_fd >= 0 && err_fd >= 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        const char *argv[16] = {ECT_CLI_PATH};
        size_t n = 1;
        for (; args[n - 1] != NULL && n < 15; n++)
            argv[n] = args[n - 1];
        argv[n] = NULL;
        for (size_t i = 0; env != NULL && env[i] != NULL; i++)
            putenv((char *)env[i]);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0)
            dup2(null_fd, 0);
        execv(ECT_CLI_PATH, (char *const *)argv);
        _exit(127);
    }
    int wstatus;
    CHECK(waitpid(pid, &wstatus, 0) == pid);
    close(out_fd);
    close(err_fd);
    struct run r = {WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, slurp_and_remove(out_path),
                    slurp_and_remove(err_path)};
    return r;
}

static void
run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

static const char valid_consumer[] =
    "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_consumer\", "
    "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"8GiB\", \"copy_threads\": 4}}";

static void
test_settings_prints_the_generated_markdown(void)
{
    size_t len;
    CHECK_OK(ect_config_settings_markdown(NULL, 0, &len));
    char *md = malloc(len + 1);
    CHECK(md != NULL);
    CHECK_OK(ect_config_settings_markdown(md, len + 1, &len));
    struct run r = run_cli((const char *const[]){"settings", NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_STR_EQ(r.out, md);
    CHECK_STR_EQ(r.err, "");
    run_free(&r);
    free(md);
}

static void
test_settings_with_an_argument_is_a_usage_error(void)
{
    struct run r = run_cli((const char *const[]){"settings", "extra", NULL}, NULL);
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "unexpected argument 'extra'");
    CHECK_CONTAINS(r.err, "usage: ectier settings");
    run_free(&r);
}

static void
test_config_prints_resolved_values_for_a_valid_config(void)
{
    struct run r = run_cli((const char *const[]){"config", valid_consumer, NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.out, "ec_role = ec_consumer\n");
    CHECK_CONTAINS(r.out, "ec_cpu_bytes = 8589934592\n");
    CHECK_CONTAINS(r.out, "copy_threads = 4\n");
    CHECK_CONTAINS(r.out, "consumer_ack_timeout_s = 2\n");
    CHECK_STR_EQ(r.err, "");
    run_free(&r);
}

static void
test_config_reads_a_file_given_with_at(void)
{
    char path[128], name[64];
    snprintf(path, sizeof(path), "/tmp/%s.json", ect_test_unique_name(name, sizeof(name), NULL));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(valid_consumer, f);
    fclose(f);
    char arg[160];
    snprintf(arg, sizeof(arg), "@%s", path);
    struct run r = run_cli((const char *const[]){"config", arg, NULL}, NULL);
    unlink(path);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.out, "ec_cpu_bytes = 8589934592\n");
    run_free(&r);
}

static void
test_config_bad_value_exits_1_with_the_message(void)
{
    struct run r =
        run_cli((const char *const[]){"config",
                                      "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", "
                                      "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 0}}",
                                      NULL},
                NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK_STR_EQ(r.out, "");
    CHECK_CONTAINS(r.err, "ectier config: invalid configuration: ec_cpu_bytes must be specified "
                          "in ec_connector_extra_config");
    run_free(&r);
    r = run_cli((const char *const[]){"config", "{not json", NULL}, NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "malformed input: config is not valid JSON");
    run_free(&r);
}

static void
test_config_usage_errors_exit_2(void)
{
    const char *const *const cases[] = {
        (const char *const[]){"config", NULL},
        (const char *const[]){"config", "--bogus", NULL},
        (const char *const[]){"config", "@", NULL},
        (const char *const[]){"config", "{}", "{}", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run r = run_cli(cases[i], NULL);
        CHECK_MSG(r.status == 2, "case %zu exited %d: %s", i, r.status, r.err);
        CHECK_CONTAINS(r.err, "usage: ectier config");
        run_free(&r);
    }
}

static void
test_config_missing_file_exits_1(void)
{
    struct run r =
        run_cli((const char *const[]){"config", "@/nonexistent/ectier-test.json", NULL}, NULL);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "cannot read /nonexistent/ectier-test.json: No such file");
    run_free(&r);
}

static void
test_config_help_lists_the_settings(void)
{
    struct run r = run_cli((const char *const[]){"config", "--help", NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.out, "usage: ectier config");
    CHECK_CONTAINS(r.out, "ec_cpu_bytes");
    CHECK_CONTAINS(r.out, "VLLM_EC_SIDE_CHANNEL_PORT");
    run_free(&r);
}

static void
test_config_applies_side_channel_env_for_p2p_producers(void)
{
    const char *producer = "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
                           "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1, "
                           "\"ec_enable_nixl\": true}}";
    struct run r = run_cli((const char *const[]){"config", producer, NULL},
                           (const char *const[]){"ECTIER_SIDE_CHANNEL_PORT=7007",
                                                 "VLLM_EC_SIDE_CHANNEL_HOST=10.1.2.3", NULL});
    if (ect_has_p2p()) {
        CHECK_EQ_INT(r.status, 0);
        CHECK_CONTAINS(r.out, "VLLM_EC_SIDE_CHANNEL_PORT = 7007\n");
        CHECK_CONTAINS(r.out, "VLLM_EC_SIDE_CHANNEL_HOST = 10.1.2.3\n");
    } else {
        CHECK_EQ_INT(r.status, 1);
        CHECK_CONTAINS(r.err, "-DECT_WITH_P2P=ON");
    }
    run_free(&r);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_settings_prints_the_generated_markdown),
    ECT_CASE(test_settings_with_an_argument_is_a_usage_error),
    ECT_CASE(test_config_prints_resolved_values_for_a_valid_config),
    ECT_CASE(test_config_reads_a_file_given_with_at),
    ECT_CASE(test_config_bad_value_exits_1_with_the_message),
    ECT_CASE(test_config_usage_errors_exit_2),
    ECT_CASE(test_config_missing_file_exits_1),
    ECT_CASE(test_config_help_lists_the_settings),
    ECT_CASE(test_config_applies_side_channel_env_for_p2p_producers),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
