/*
 * `ectier bench` output, end to end with the real binary: the shape of
 * --json (one object a line, every field of the right type, strings
 * escaped), the files of --plot and what it says without gnuplot, and the
 * usage errors.  No benchmark is run: `--selftest` sends fixed figures
 * through the same output code, so these cases take milliseconds and assert
 * behaviour, never speed.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"

struct result {
    int status; /* exit status; -1 if killed */
    char *out, *err;
};

/* Run the CLI with args (NULL-terminated) and, when path is not NULL, that
 * PATH; stdout and stderr go to files read back afterwards. */
static struct result
run_bench(const char *const *args, const char *path)
{
    char out_path[] = "/tmp/ectt_bench_out_XXXXXX", err_path[] = "/tmp/ectt_bench_err_XXXXXX";
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    CHECK(out_fd >= 0 && err_fd >= 0);
    char *argv[16] = {(char *)ECT_CLI_PATH, (char *)"bench"};
    size_t n = 2;
    for (size_t i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char path_env[512];
    snprintf(path_env, sizeof(path_env), "PATH=%s", path != NULL ? path : getenv("PATH"));
    char *envp[] = {path_env, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    pid_t pid;
    CHECK(posix_spawn(&pid, ECT_CLI_PATH, &fa, NULL, argv, envp) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int ws;
    CHECK(waitpid(pid, &ws, 0) == pid);
    close(out_fd);
    close(err_fd);
    struct result r = {WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, ect_test_read_file(out_path, NULL),
                       ect_test_read_file(err_path, NULL)};
    unlink(out_path);
    unlink(err_path);
    CHECK(r.out != NULL && r.err != NULL);
    return r;
}

static void
result_free(struct result *r)
{
    free(r->out);
    free(r->err);
}

/* The field is a number, or null where allowed. */
static void
check_number(const cJSON *o, const char *key, int may_be_null)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    CHECK_MSG(v != NULL, "no \"%s\"", key);
    CHECK_MSG(cJSON_IsNumber(v) || (may_be_null && cJSON_IsNull(v)), "\"%s\" is not a number%s",
              key, may_be_null ? " or null" : "");
}

static void
check_string(const cJSON *o, const char *key, int may_be_null)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    CHECK_MSG(v != NULL, "no \"%s\"", key);
    CHECK_MSG(cJSON_IsString(v) || (may_be_null && cJSON_IsNull(v)), "\"%s\" is not a string", key);
}

static void
test_json_is_one_well_formed_object_per_figure(void)
{
    struct result r = run_bench((const char *const[]){"--json", "--selftest", NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    /* Headers and notes go to stderr; stdout is only JSON. */
    CHECK_CONTAINS(r.err, "== bench selftest");
    CHECK_CONTAINS(r.err, "nothing is measured");
    size_t lines = 0, met = 0, missed = 0, sized = 0;
    for (char *line = strtok(r.out, "\n"); line != NULL; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        CHECK_MSG(o != NULL && cJSON_IsObject(o), "line %zu is not a JSON object: %s", lines, line);
        check_string(o, "bench", 0);
        CHECK_STR_EQ(cJSON_GetObjectItem(o, "bench")->valuestring, "selftest");
        check_string(o, "name", 0);
        check_number(o, "value", 0);
        check_string(o, "unit", 0);
        check_number(o, "ceiling", 1);
        check_string(o, "ceiling_is", 1);
        check_number(o, "ratio", 1);
        check_number(o, "target", 1);
        check_string(o, "better", 0);
        const char *better = cJSON_GetObjectItem(o, "better")->valuestring;
        CHECK_MSG(strcmp(better, "higher") == 0 || strcmp(better, "lower") == 0, "better: %s",
                  better);
        int lower = strcmp(better, "lower") == 0;
        check_number(o, "bytes", 1);
        check_string(o, "series", 1);
        const cJSON *c = cJSON_GetObjectItem(o, "ceiling"),
                    *ratio = cJSON_GetObjectItem(o, "ratio");
        const cJSON *target = cJSON_GetObjectItem(o, "target"), *m = cJSON_GetObjectItem(o, "met");
        CHECK(m != NULL);
        /* ratio is value / ceiling exactly when there is a ceiling. */
        CHECK(cJSON_IsNull(c) == cJSON_IsNull(ratio));
        if (cJSON_IsNumber(c)) {
            double want = cJSON_GetObjectItem(o, "value")->valuedouble / c->valuedouble;
            CHECK_MSG(ratio->valuedouble > want * 0.999 && ratio->valuedouble < want * 1.001,
                      "ratio %g, value/ceiling %g", ratio->valuedouble, want);
        }
        /* met says whether ratio reached target (stayed at or under it,
         * where lower is better), and is null without one. */
        if (cJSON_IsNull(target)) {
            CHECK(cJSON_IsNull(m));
        } else {
            CHECK(cJSON_IsBool(m));
            CHECK(cJSON_IsTrue(m) == (lower ? ratio->valuedouble <= target->valuedouble
                                            : ratio->valuedouble >= target->valuedouble));
            met += cJSON_IsTrue(m);
            missed += cJSON_IsFalse(m);
        }
        sized += cJSON_IsNumber(cJSON_GetObjectItem(o, "bytes"));
        cJSON_Delete(o);
    }
    CHECK_EQ_U64(lines, 9);
    CHECK_EQ_U64(met, 2); /* one of them: 12 us against 10, at most 1.3 */
    CHECK_EQ_U64(missed, 5);
    CHECK_EQ_U64(sized, 6);
    result_free(&r);
}

/* A text row says which way its target points and whether it was met. */
static void
test_text_rows_say_which_way_a_target_points(void)
{
    struct result r = run_bench((const char *const[]){"--selftest", NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    const char *row = strstr(r.out, "a round trip, lower is better");
    CHECK_MSG(row != NULL, "%s", r.out);
    const char *end = strchr(row, '\n');
    CHECK(end != NULL);
    char line[256];
    snprintf(line, sizeof(line), "%.*s", (int)(end - row), row);
    CHECK_CONTAINS(line, "ratio  1.20  (target <= 1.30)");
    CHECK(strstr(line, "MISSED") == NULL);
    CHECK_CONTAINS(r.out, "(target 0.90, MISSED)");
    result_free(&r);
}

static void
test_json_escapes_names(void)
{
    struct result r = run_bench((const char *const[]){"--json", "--selftest", NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.out, "\"quote \\\" backslash \\\\ tab \\u0009\"");
    char *line = strstr(r.out, "{\"bench\": \"selftest\", \"name\": \"quote");
    CHECK(line != NULL);
    char *end = strchr(line, '\n');
    CHECK(end != NULL);
    *end = '\0';
    cJSON *o = cJSON_Parse(line);
    CHECK(o != NULL);
    CHECK_STR_EQ(cJSON_GetObjectItem(o, "name")->valuestring, "quote \" backslash \\ tab \t");
    cJSON_Delete(o);
    result_free(&r);
}

static char *
make_dir(void)
{
    char name[64];
    static char dir[128];
    ect_test_unique_name(name, sizeof(name), "ectt_plot_");
    snprintf(dir, sizeof(dir), "/tmp/%s", name);
    return dir;
}

static void
remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    char path[512];
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void
test_plot_without_gnuplot_says_so_and_keeps_the_data(void)
{
    const char *dir = make_dir();
    /* A PATH with nothing on it: gnuplot cannot be found. */
    struct result r =
        run_bench((const char *const[]){"--selftest", "--plot", dir, NULL}, "/nonexistent");
    char dat[256], gp[256], png[256];
    snprintf(dat, sizeof(dat), "%s/selftest.dat", dir);
    snprintf(gp, sizeof(gp), "%s/selftest.gp", dir);
    snprintf(png, sizeof(png), "%s/selftest.png", dir);
    char *data = ect_test_read_file(dat, NULL), *script = ect_test_read_file(gp, NULL);
    struct stat st;
    int have_png = stat(png, &st) == 0;
    remove_dir(dir);
    CHECK_EQ_INT(r.status, 1);
    CHECK_CONTAINS(r.err, "gnuplot is not installed");
    CHECK_CONTAINS(r.err, "apt-get install gnuplot-nox");
    CHECK(!have_png);
    /* The text rows still went to stdout. */
    CHECK_CONTAINS(r.out, "save 32 MiB");
    /* Two series (load, save: sorted), three sizes each, MiB value ceiling. */
    CHECK(data != NULL && script != NULL);
    CHECK_STR_EQ(data, "1 9 12\n8 11 13\n32 13 14\n\n\n1 8 12\n8 10 13\n32 12 14\n\n\n");
    CHECK_CONTAINS(script, "set output '");
    CHECK_CONTAINS(script, "index 0 using 1:2");
    CHECK_CONTAINS(script, "index 1 using 1:3");
    CHECK_CONTAINS(script, "title 'save: ceiling'");
    free(data);
    free(script);
    result_free(&r);
}

static void
test_plot_with_gnuplot_draws_a_png(void)
{
    if (access("/usr/bin/gnuplot", X_OK) != 0)
        SKIP("gnuplot is not installed (Debian: gnuplot-nox)");
    const char *dir = make_dir();
    struct result r =
        run_bench((const char *const[]){"--selftest", "--plot", dir, NULL}, "/usr/bin:/bin");
    char png[256];
    snprintf(png, sizeof(png), "%s/selftest.png", dir);
    size_t len = 0;
    char *bytes = ect_test_read_file(png, &len);
    remove_dir(dir);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.err, "wrote ");
    CHECK(bytes != NULL && len > 8);
    CHECK(memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0);
    free(bytes);
    result_free(&r);
}

static void
test_usage_errors(void)
{
    struct result r = run_bench((const char *const[]){"--json", "nosuchbench", NULL}, NULL);
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "no benchmark named 'nosuchbench'");
    CHECK_STR_EQ(r.out, "");
    result_free(&r);
    r = run_bench((const char *const[]){"--plot", NULL}, NULL);
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "--plot needs a directory");
    result_free(&r);
    r = run_bench((const char *const[]){"--jsn", NULL}, NULL);
    CHECK_EQ_INT(r.status, 2);
    CHECK_CONTAINS(r.err, "unknown option '--jsn'");
    result_free(&r);
    r = run_bench((const char *const[]){"--help", NULL}, NULL);
    CHECK_EQ_INT(r.status, 0);
    CHECK_CONTAINS(r.out, "--json");
    CHECK_CONTAINS(r.out, "--plot DIR");
    result_free(&r);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_json_is_one_well_formed_object_per_figure),
    ECT_CASE(test_text_rows_say_which_way_a_target_points),
    ECT_CASE(test_json_escapes_names),
    ECT_CASE(test_plot_without_gnuplot_says_so_and_keeps_the_data),
    ECT_CASE(test_plot_with_gnuplot_draws_a_png),
    ECT_CASE(test_usage_errors),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
