/*
 * What a person reads from the `ectier` tools (issue 14 item 2), from the
 * built binary: every command listed by `ectier --help` shows an example
 * after its own --help, examples fit in 100 columns, the self-contained
 * ones run as printed, and `ectier inspect` names a real region's dtype and
 * prints its sizes in binary units (JSON keeps the exact numbers and adds
 * the dtype's name).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "support/cli.h"
#include "support/step.h"

/* The command names of `ectier --help` ("  name  summary" lines after
 * "commands:"), into names[]; returns how many. */
static int
list_commands(char names[][32], int cap)
{
    struct ts_cli_run r;
    ts_cli_run(&r, 10, "--help", NULL);
    CHECK_CLI_RC(&r, 0);
    const char *p = strstr(r.out, "commands:\n");
    CHECK(p != NULL);
    p += strlen("commands:\n");
    int n = 0;
    while (strncmp(p, "  ", 2) == 0) {
        CHECK(n < cap);
        CHECK(sscanf(p, " %31s", names[n]) == 1);
        n++;
        p = strchr(p, '\n');
        CHECK(p != NULL);
        p++;
    }
    ts_cli_run_free(&r);
    return n;
}

/* The example of `ectier cmd --help` (malloc'd), checked for shape. */
static char *
example_of(const char *cmd)
{
    struct ts_cli_run r;
    ts_cli_run(&r, 10, cmd, "--help", NULL);
    CHECK_CLI_RC(&r, 0);
    const char *ex = strstr(r.out, "\nexample:\n  ");
    CHECK_MSG(ex != NULL, "`ectier %s --help` shows no example:\n%s", cmd, r.out);
    ex += strlen("\nexample:\n  ");
    char want[64];
    snprintf(want, sizeof(want), "ectier %s", cmd);
    CHECK_MSG(strncmp(ex, want, strlen(want)) == 0, "the example of %s is for another command: %s",
              cmd, ex);
    char *copy = strdup(ex);
    CHECK(copy != NULL);
    /* Every printed line of it fits a 100-column terminal. */
    for (const char *line = ex - 2; *line != '\0';) {
        size_t len = strcspn(line, "\n");
        CHECK_MSG(len <= 100, "a line of %s's example has %zu columns", cmd, len);
        line += len + (line[len] == '\n');
    }
    ts_cli_run_free(&r);
    size_t len = strlen(copy);
    while (len > 0 && copy[len - 1] == '\n')
        copy[--len] = '\0';
    return copy;
}

static void
test_every_command_help_shows_an_example(void)
{
    char names[32][32];
    int n = list_commands(names, 32);
    CHECK_MSG(n >= 8, "only %d commands listed", n);
    for (int i = 0; i < n; i++)
        free(example_of(names[i]));
}

/* Run an example as a shell command line, from dir, with the built binary
 * in place of "ectier". */
static void
run_example(struct ts_cli_run *r, const char *dir, const char *example)
{
    char cmd[4096];
    CHECK(strncmp(example, "ectier ", 7) == 0);
    snprintf(cmd, sizeof(cmd), "cd '%s' && '%s' %s", dir, ECT_CLI_PATH, example + 7);
    const char *argv[] = {cmd, NULL};
    ts_cli_exec(r, 30, 1, argv);
}

/* Run cmd's example from dir; it succeeds and prints want. */
static void
check_example(const char *dir, const char *cmd, const char *want)
{
    char *ex = example_of(cmd);
    struct ts_cli_run r;
    run_example(&r, dir, ex);
    CHECK_CLI_RC(&r, 0);
    CHECK_CONTAINS(r.out, want);
    ts_cli_run_free(&r);
    free(ex);
}

static void
test_self_contained_examples_run_as_printed(void)
{
    char dir[] = "/tmp/ectt_examples_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    check_example(dir, "config", "ec_cpu_bytes = 1073741824");
    check_example(dir, "inspect", "[");
    check_example(dir, "version", "ectier ");
    check_example(dir, "settings", ""); /* into settings.md */
    char path[128];
    snprintf(path, sizeof(path), "%s/settings.md", dir);
    char *md = ect_test_read_file(path, NULL);
    CHECK_CONTAINS(md, "`ec_cpu_bytes`");
    free(md);
    CHECK(unlink(path) == 0);
    CHECK(rmdir(dir) == 0);
}

/* Chosen so that every size has a round reading: 3584 x bfloat16 = 7168 B
 * (7.00 KiB) blocks, 160 of them = 1146880 B (1.09 MiB). */
#define HIDDEN 3584u
#define BLOCKS 160u

static void
test_inspect_names_the_dtype_and_prints_sizes_in_units(void)
{
    struct ts_step_instance in;
    ts_step_instance_init(&in, ECT_ROLE_BOTH, 16, true);
    in.cfg.cpu_bytes = (uint64_t)BLOCKS * HIDDEN * 2;
    CHECK_OK(ect_geometry_init(HIDDEN, ECT_DTYPE_BF16, in.cfg.cpu_bytes, &in.geom));
    ect_scheduler_t *s = ts_scheduler(&in, 1);
    char name[128];
    snprintf(name, sizeof(name), "ectier_%s_dp0", in.id);

    struct ts_cli_run r;
    ts_cli_run(&r, 10, "inspect", name, NULL);
    CHECK_CLI_RC(&r, 0);
    CHECK_CONTAINS(r.out, "160 blocks x 7.00 KiB = 1.09 MiB (hidden_dim 3584 x bfloat16, "
                          "2 B/element)");
    CHECK(strstr(r.out, "dtype 1") == NULL);
    CHECK(strstr(r.out, "disagrees") == NULL);
    struct stat st;
    CHECK(stat(in.path, &st) == 0);
    char want[128];
    snprintf(want, sizeof(want), "(%llu B), data at offset ", (unsigned long long)st.st_size);
    CHECK_CONTAINS(r.out, want);
    CHECK_CONTAINS(r.out, "  file 1.");
    CHECK_CONTAINS(r.out, " MiB (");
    ts_cli_run_free(&r);

    ts_cli_run(&r, 10, "inspect", name, "--json", NULL);
    CHECK_CLI_RC(&r, 0);
    cJSON *doc = cJSON_Parse(r.out);
    CHECK_MSG(cJSON_IsArray(doc) && cJSON_GetArraySize(doc) == 1, "%s", r.out);
    cJSON *o = cJSON_GetArrayItem(doc, 0);
    CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(o, "dtype")), "bfloat16");
    CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "dtype_code")), ECT_DTYPE_BF16);
    CHECK_EQ_U64(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "block_size_bytes")), 7168);
    CHECK_EQ_U64(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "num_blocks")), BLOCKS);
    CHECK_EQ_U64(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "file_size")), st.st_size);
    cJSON_Delete(doc);
    /* A nanosecond clock (above 2^53) prints as the exact integer, not as
     * a rounded float in exponent notation. */
    const char *at = strstr(r.out, "\"created_unix_ns\":");
    CHECK_MSG(at != NULL, "%s", r.out);
    at += strlen("\"created_unix_ns\":");
    at += strspn(at, " \t");
    size_t digits = strspn(at, "0123456789");
    CHECK_MSG(digits >= 19 && at[digits] != '\0' && strchr(",}\n", at[digits]) != NULL, "%.40s",
              at);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    uint64_t created = strtoull(at, NULL, 10);
    CHECK(created <= now_ns && now_ns - created < 600ull * 1000000000u);
    ts_cli_run_free(&r);

    ect_scheduler_destroy(s);
    ts_check_gone(in.path);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_every_command_help_shows_an_example),
    ECT_CASE(test_self_contained_examples_run_as_printed),
    ECT_CASE(test_inspect_names_the_dtype_and_prints_sizes_in_units),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
