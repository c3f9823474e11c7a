/*
 * `ectier geometry` end to end: runs the built binary (ECT_CLI_PATH) on the
 * real model files and on bad arguments and files, and checks its output and
 * exit status (0 success, 1 bad file or geometry, 2 bad arguments + usage).
 * The child's stdout and stderr go to memfds, so nothing is left on disk;
 * the few scratch files a case writes are removed before it checks anything.
 */
#include <stdarg.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "support/cli.h"

#define HF_DIR ECT_TEST_DATA_DIR "/hf-configs"

struct run {
    int rc; /* exit status, 128 + signal, or -1 when killed at the deadline */
    char out[16384];
    char err[16384];
};

/* Run `ectier geometry ARGS...` (NULL-terminated) through ts_cli_exec, its
 * outputs cut to fit r. */
static void
run_geometry(struct run *r, const char *arg0, ...)
{
    const char *argv[32];
    int argc = 0;
    argv[argc++] = ECT_CLI_PATH;
    argv[argc++] = "geometry";
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a != NULL && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    struct ts_cli_run cr;
    ts_cli_exec(&cr, 60, 0, argv);
    r->rc = cr.rc;
    snprintf(r->out, sizeof(r->out), "%s", cr.out);
    snprintf(r->err, sizeof(r->err), "%s", cr.err);
    ts_cli_run_free(&cr);
}

#define CHECK_RUN(r, want_rc)                                                                      \
    CHECK_MSG((r)->rc == (want_rc), "exit %d, expected %d\nstdout: %s\nstderr: %s", (r)->rc,       \
              (want_rc), (r)->out, (r)->err)

/* Parse the --json output: exactly one object and a newline. */
static cJSON *
parse_json_output(const struct run *r)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(r->out, &end, 0);
    CHECK_MSG(cJSON_IsObject(j), "not a JSON object: %s", r->out);
    CHECK_MSG(strcmp(end, "\n") == 0, "output after the JSON object: '%s'", end);
    return j;
}

static double
num(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    CHECK_MSG(cJSON_IsNumber(v), "key %s missing or not a number", key);
    return v->valuedouble;
}

static const char *
str(const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    CHECK_MSG(cJSON_IsString(v), "key %s missing or not a string", key);
    return v->valuestring;
}

static void
test_text_output_explains_qwen3_vl_deepstack_width(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", HF_DIR "/Qwen3-VL-2B-Instruct.json", "--cpu-bytes", "1GiB",
                 NULL);
    CHECK_RUN(&r, 0);
    CHECK_CONTAINS(r.out, "(model_type qwen3_vl)");
    CHECK_CONTAINS(r.out, "hidden_dim    8192  from vision_config.out_hidden_size 2048 x (1 + 3 "
                          "deepstack layers)");
    CHECK_CONTAINS(r.out, "torch.bfloat16, 2 bytes per element  from text_config.dtype");
    CHECK_CONTAINS(r.out, "block_size    16384 bytes (16.00 KiB)");
    CHECK_CONTAINS(r.out, "cpu_bytes     1073741824 (1.00 GiB)");
    CHECK_CONTAINS(r.out, "num_blocks    65536\n");
    CHECK_CONTAINS(r.out, "capacity      65536 tokens");
    CHECK_STR_EQ(r.err, "");
}

static void
test_json_output_has_the_documented_keys(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes",
                 "1073741824", "--json", NULL);
    CHECK_RUN(&r, 0);
    cJSON *j = parse_json_output(&r);
    CHECK_EQ_U64(num(j, "hidden_dim"), 3584);
    CHECK_STR_EQ(str(j, "dtype"), "torch.bfloat16");
    CHECK_EQ_U64(num(j, "element_size"), 2);
    CHECK_EQ_U64(num(j, "block_size_bytes"), 7168);
    CHECK_EQ_U64(num(j, "num_blocks"), 149796);
    CHECK_EQ_U64(num(j, "cpu_bytes"), 1073741824);
    CHECK_EQ_U64(num(j, "capacity_tokens"), 149796);
    CHECK_STR_EQ(str(j, "hidden_dim_source"), "hidden_size");
    CHECK_STR_EQ(str(j, "dtype_source"), "torch_dtype");
    CHECK_STR_EQ(str(j, "model_type"), "qwen2_vl");
    cJSON_Delete(j);
}

static void
test_every_model_file_through_the_cli_matches_expected_json(void)
{
    char *text = ect_test_read_file(HF_DIR "/expected.json", NULL);
    cJSON *expected = cJSON_Parse(text);
    CHECK(cJSON_IsObject(expected));
    int n = 0;
    for (const cJSON *e = expected->child; e != NULL; e = e->next) {
        char path[1024], want_dtype[64];
        snprintf(path, sizeof(path), "%s/%s", HF_DIR, e->string);
        struct run r;
        run_geometry(&r, "--hf-config", path, "--cpu-bytes", "64MiB", "--json", NULL);
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(e, "error");
        if (cJSON_IsString(error)) {
            /* Refused: exit 1, the file and the missing field named. */
            CHECK_RUN(&r, 1);
            CHECK_CONTAINS(r.err, path);
            CHECK_CONTAINS(r.err, error->valuestring);
            CHECK_STR_EQ(r.out, "");
            continue;
        }
        n++;
        CHECK_RUN(&r, 0);
        /* The dtype warning reaches stderr through the default log sink. */
        int warned = strstr(r.err, "disagree; using") != NULL;
        CHECK_MSG(warned == cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "dtype_warning")),
                  "%s: stderr \"%s\"", e->string, r.err);
        cJSON *j = parse_json_output(&r);
        double dim = num(e, "hidden_dim");
        CHECK_MSG(num(j, "hidden_dim") == dim, "%s: hidden_dim %.0f, expected %.0f", e->string,
                  num(j, "hidden_dim"), dim);
        snprintf(want_dtype, sizeof(want_dtype), "torch.%s", str(e, "dtype"));
        CHECK_STR_EQ(str(j, "dtype"), want_dtype);
        CHECK_EQ_U64(num(j, "block_size_bytes"), dim * num(j, "element_size"));
        CHECK_EQ_U64(num(j, "num_blocks"), (64u << 20) / (uint64_t)num(j, "block_size_bytes"));
        CHECK_STR_EQ(str(j, "hidden_dim_source"), str(e, "source"));
        CHECK_STR_EQ(str(j, "dtype_source"), str(e, "dtype_source"));
        cJSON_Delete(j);
    }
    CHECK(n >= 40);
    cJSON_Delete(expected);
    free(text);
}

static void
test_dtype_option_overrides_the_declared_dtype(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", HF_DIR "/llava-1.5-7b-hf.json", "--dtype", "fp32",
                 "--cpu-bytes=1MiB", "--json", NULL);
    CHECK_RUN(&r, 0);
    cJSON *j = parse_json_output(&r);
    CHECK_STR_EQ(str(j, "dtype"), "torch.float32");
    CHECK_EQ_U64(num(j, "element_size"), 4);
    CHECK_EQ_U64(num(j, "block_size_bytes"), 4096 * 4);
    CHECK_EQ_U64(num(j, "num_blocks"), 64);
    CHECK_STR_EQ(str(j, "dtype_source"), "--dtype");
    cJSON_Delete(j);
    run_geometry(&r, "--hf-config", HF_DIR "/llava-1.5-7b-hf.json", "--dtype=fp8", "--cpu-bytes",
                 "1MiB", NULL);
    CHECK_RUN(&r, 0);
    CHECK_CONTAINS(r.out, "torch.float8_e4m3fn, 1 byte per element  from --dtype");
    CHECK_CONTAINS(r.out, "num_blocks    256\n");
}

static void
test_cpu_bytes_accepts_decimal_and_binary_suffixes(void)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } sizes[] = {
        {"8192", 8192},
        {"1GB", 1000000000},
        {"1gb", 1000000000},
        {"3kB", 3000},
        {"2MB", 2000000},
        {"1TB", 1000000000000ull},
        {"1GiB", 1073741824},
        {"1gib", 1073741824},
        {"1g", 1073741824},
        {"2K", 2048},
        {"5m", 5242880},
        {"1T", 1099511627776ull},
        {"2TiB", 2199023255552ull},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct run r;
        /* InternVL2-1B (896 wide) in fp8: 896-byte blocks, so every size fits. */
        run_geometry(&r, "--hf-config", HF_DIR "/InternVL2-1B.json", "--dtype", "fp8",
                     "--cpu-bytes", sizes[i].text, "--json", NULL);
        CHECK_RUN(&r, 0);
        cJSON *j = parse_json_output(&r);
        CHECK_MSG(num(j, "cpu_bytes") == (double)sizes[i].bytes, "'%s' gave %.0f, expected %llu",
                  sizes[i].text, num(j, "cpu_bytes"), (unsigned long long)sizes[i].bytes);
        CHECK_EQ_U64(num(j, "num_blocks"), sizes[i].bytes / 896);
        cJSON_Delete(j);
    }
}

static void
test_bad_cpu_bytes_is_a_usage_error(void)
{
    /* Only spellings that no reading of the size rules accepts. */
    const char *bad[] = {"",
                         "0",
                         "-1",
                         "GiB",
                         "12XB",
                         "0x10",
                         "1GiBs",
                         "1KiK",
                         "18446744073709551616",
                         "16777216TiB",
                         "18446744073709551615K"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct run r;
        run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", bad[i],
                     NULL);
        CHECK_MSG(r.rc == 2, "'%s': exit %d\n%s%s", bad[i], r.rc, r.out, r.err);
        CHECK_CONTAINS(r.err, "--cpu-bytes");
        if (bad[i][0] != '\0') {
            char want[128];
            snprintf(want, sizeof(want), "'%s'", bad[i]);
            CHECK_CONTAINS(r.err, want);
        }
        CHECK_CONTAINS(r.err, "usage: ectier geometry");
        CHECK_STR_EQ(r.out, "");
    }
}

static void
test_bad_arguments_exit_2_with_usage(void)
{
    struct run r;
    run_geometry(&r, "--cpu-bytes", "1GiB", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "--hf-config FILE is required");
    CHECK_CONTAINS(r.err, "usage: ectier geometry");

    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "--cpu-bytes N is required");

    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", "1GiB",
                 "--frobnicate", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "unknown argument '--frobnicate'");

    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", "1GiB",
                 "extra", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "unknown argument 'extra'");

    run_geometry(&r, "--cpu-bytes", "1GiB", "--hf-config", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "--hf-config needs a value");

    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", "1GiB",
                 "--cpu-bytes", "2GiB", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "--cpu-bytes given twice");

    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", "1GiB",
                 "--dtype", "int4", NULL);
    CHECK_RUN(&r, 2);
    CHECK_CONTAINS(r.err, "--dtype: dtype 'int4' is not one of: bfloat16|bf16|torch.bfloat16");
    CHECK_CONTAINS(r.err, "usage: ectier geometry");
    CHECK_STR_EQ(r.out, "");
}

static void
test_help_prints_usage_and_succeeds(void)
{
    struct run r;
    run_geometry(&r, "--help", NULL);
    CHECK_RUN(&r, 0);
    CHECK_CONTAINS(r.out, "usage: ectier geometry --hf-config FILE [--dtype D] --cpu-bytes N");
    CHECK_CONTAINS(r.out, "KiB MiB GiB TiB");
    CHECK_STR_EQ(r.err, "");
}

static void
test_geometry_is_listed_in_top_level_help(void)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' --help", ECT_CLI_PATH);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, p);
    buf[n] = '\0';
    CHECK_EQ_INT(pclose(p), 0);
    CHECK_CONTAINS(buf, "  geometry ");
}

static void
test_bad_model_files_exit_1_with_the_message(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", "/nonexistent/ectier-model/config.json", "--cpu-bytes", "1GiB",
                 NULL);
    CHECK_RUN(&r, 1);
    CHECK_CONTAINS(r.err, "ectier geometry: /nonexistent/ectier-model/config.json: no such model "
                          "config file");
    CHECK(strstr(r.err, "usage:") == NULL);

    /* expected.json is JSON but not a model config. */
    run_geometry(&r, "--hf-config", HF_DIR "/expected.json", "--cpu-bytes", "1GiB", NULL);
    CHECK_RUN(&r, 1);
    CHECK_CONTAINS(r.err, "expected.json: model config: hidden_size is missing");

    /* SOURCES.md is not JSON at all. */
    run_geometry(&r, "--hf-config", HF_DIR "/SOURCES.md", "--cpu-bytes", "1GiB", NULL);
    CHECK_RUN(&r, 1);
    CHECK_CONTAINS(r.err, "SOURCES.md: model config is not valid JSON (error at line 1");
    CHECK_STR_EQ(r.out, "");
}

static void
test_too_small_cpu_bytes_exit_1_with_minimum(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", "7KB",
                 NULL);
    CHECK_RUN(&r, 1);
    CHECK_CONTAINS(r.err, "ec_cpu_bytes 7000 is smaller than one block of 7168 bytes");
    CHECK_CONTAINS(r.err, "at least 7168 bytes are needed");
    run_geometry(&r, "--hf-config", HF_DIR "/Qwen2-VL-7B-Instruct.json", "--cpu-bytes", "7K",
                 "--json", NULL);
    CHECK_RUN(&r, 0);
    cJSON *j = parse_json_output(&r);
    CHECK_EQ_U64(num(j, "num_blocks"), 1);
    cJSON_Delete(j);
}

static void
test_file_without_dtype_needs_the_dtype_option(void)
{
    char name[64], path[128];
    snprintf(path, sizeof(path), "/tmp/%s.json",
             ect_test_unique_name(name, sizeof(name), "ectt_geomcli_"));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    int wrote = fputs("{\"hidden_size\": 1024, \"model_type\": \"custom\"}\n", f) >= 0;
    wrote = fclose(f) == 0 && wrote;
    struct run without, with;
    run_geometry(&without, "--hf-config", path, "--cpu-bytes", "1MiB", NULL);
    run_geometry(&with, "--hf-config", path, "--cpu-bytes", "1MiB", "--dtype", "half", "--json",
                 NULL);
    unlink(path);
    CHECK(wrote);
    CHECK_RUN(&without, 2);
    CHECK_CONTAINS(without.err, "declares no dtype (torch_dtype or dtype); pass --dtype");
    CHECK_RUN(&with, 0);
    cJSON *j = parse_json_output(&with);
    CHECK_EQ_U64(num(j, "block_size_bytes"), 2048);
    CHECK_EQ_U64(num(j, "num_blocks"), 512);
    CHECK_STR_EQ(str(j, "model_type"), "custom");
    cJSON_Delete(j);
}

static void
test_dtype_disagreement_warns_and_uses_the_top_level(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", HF_DIR "/VARCO-VISION-14B-HF.json", "--cpu-bytes", "1GiB",
                 NULL);
    CHECK_RUN(&r, 0);
    CHECK_CONTAINS(r.out, "torch.float16, 2 bytes per element  from torch_dtype");
    CHECK_CONTAINS(r.out, "hidden_dim    5120  from text_config.hidden_size");
    CHECK_CONTAINS(r.err, "ectier warn: ");
    CHECK_CONTAINS(r.err, "VARCO-VISION-14B-HF.json: model config: torch_dtype 'float16' and "
                          "text_config.torch_dtype 'bfloat16' disagree");
}

static void
test_float32_checkpoint_gets_a_note_about_the_served_dtype(void)
{
    struct run r;
    run_geometry(&r, "--hf-config", HF_DIR "/Molmo-7B-D-0924.json", "--cpu-bytes", "1GiB", NULL);
    CHECK_RUN(&r, 0);
    CHECK_CONTAINS(r.out, "torch.float32, 4 bytes per element  from torch_dtype");
    CHECK_CONTAINS(r.out, "serves float32 checkpoints in bfloat16");
    /* Not with --dtype, nor for a half-precision file. */
    run_geometry(&r, "--hf-config", HF_DIR "/Molmo-7B-D-0924.json", "--dtype", "bf16",
                 "--cpu-bytes", "1GiB", NULL);
    CHECK_RUN(&r, 0);
    CHECK(strstr(r.out, "note") == NULL);
    run_geometry(&r, "--hf-config", HF_DIR "/Janus-1.3B.json", "--cpu-bytes", "1GiB", NULL);
    CHECK_RUN(&r, 0);
    CHECK(strstr(r.out, "note") == NULL);
    CHECK_CONTAINS(r.out, "hidden_dim    2048  from language_config.hidden_size");
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_text_output_explains_qwen3_vl_deepstack_width),
    ECT_CASE(test_json_output_has_the_documented_keys),
    ECT_CASE(test_every_model_file_through_the_cli_matches_expected_json),
    ECT_CASE(test_dtype_option_overrides_the_declared_dtype),
    ECT_CASE(test_cpu_bytes_accepts_decimal_and_binary_suffixes),
    ECT_CASE(test_bad_cpu_bytes_is_a_usage_error),
    ECT_CASE(test_bad_arguments_exit_2_with_usage),
    ECT_CASE(test_help_prints_usage_and_succeeds),
    ECT_CASE(test_geometry_is_listed_in_top_level_help),
    ECT_CASE(test_bad_model_files_exit_1_with_the_message),
    ECT_CASE(test_too_small_cpu_bytes_exit_1_with_minimum),
    ECT_CASE(test_file_without_dtype_needs_the_dtype_option),
    ECT_CASE(test_dtype_disagreement_warns_and_uses_the_top_level),
    ECT_CASE(test_float32_checkpoint_gets_a_note_about_the_served_dtype),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
