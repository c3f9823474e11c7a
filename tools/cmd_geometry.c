/*
 * `ectier geometry`: the block geometry of a CPU tier for a given model
 * (SPEC §3, §11).  Reads the model's config.json, takes the dtype it declares
 * unless --dtype overrides it, and prints hidden width, block size, number of
 * blocks and the capacity in tokens, each with where it came from; --json
 * prints the same as one JSON object for scripts.  Warnings from reading the
 * file (a text-config dtype that disagrees with the top level) go to stderr
 * through the log sink.
 *
 * Exit status: 0 success, 1 a bad model file or a geometry that does not fit
 * (the library's message), 2 bad arguments (with the usage text).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <ectier/config.h>
#include <ectier/geometry.h>

#include "cli.h"

static const char usage[] =
    "usage: ectier geometry --hf-config FILE [--dtype D] --cpu-bytes N [--json]\n"
    "\n"
    "  --hf-config FILE  the model's HuggingFace config.json (or its snapshot directory)\n"
    "  --dtype D         element type, overriding the one the file declares:\n"
    "                    bfloat16|bf16, float16|half|fp16, float32|float|fp32,\n"
    "                    float8_e4m3fn|fp8, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz\n"
    "                    (torch.<name> spellings too)\n"
    "  --cpu-bytes N     size of the CPU tier (ec_cpu_bytes): a decimal number of bytes,\n"
    "                    optionally with a suffix: KB MB GB TB (powers of 1000),\n"
    "                    KiB MiB GiB TiB or K M G T (powers of 1024); case-insensitive\n"
    "  --json            print one JSON object instead of text\n";

/* "1.00 GiB" for people; exact byte counts are printed next to it. */
static void
human_bytes(char *buf, size_t len, uint64_t n)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " bytes", n);
    else
        snprintf(buf, len, "%.2f %s", v, unit[u]);
}

/* Print s as a JSON string literal. */
static void
json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* The value of option name at argv[*i], as "--name VALUE" or "--name=VALUE";
 * NULL if argv[*i] is not that option.  *missing is set when the option is
 * there without a value. */
static const char *
option_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    const char *arg = argv[*i];
    if (strncmp(arg, name, n) != 0)
        return NULL;
    if (arg[n] == '=')
        return arg + n + 1;
    if (arg[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int
ect_cli_geometry(int argc, char **argv)
{
    const char *config_path = NULL, *dtype_text = NULL, *size_text = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v;
        int missing = 0;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (strcmp(arg, "--json") == 0) {
            json = 1;
        } else if ((v = option_value(argc, argv, &i, "--hf-config", &missing)) != NULL) {
            if (config_path != NULL)
                return ect_cli_usage_error("geometry", usage, "--hf-config given twice");
            config_path = v;
        } else if ((v = option_value(argc, argv, &i, "--dtype", &missing)) != NULL) {
            if (dtype_text != NULL)
                return ect_cli_usage_error("geometry", usage, "--dtype given twice");
            dtype_text = v;
        } else if ((v = option_value(argc, argv, &i, "--cpu-bytes", &missing)) != NULL) {
            if (size_text != NULL)
                return ect_cli_usage_error("geometry", usage, "--cpu-bytes given twice");
            size_text = v;
        } else if (missing) {
            return ect_cli_usage_error("geometry", usage, "%s needs a value", arg);
        } else {
            return ect_cli_usage_error("geometry", usage, "unknown argument '%s'", arg);
        }
    }
    if (config_path == NULL)
        return ect_cli_usage_error("geometry", usage, "--hf-config FILE is required");
    if (size_text == NULL)
        return ect_cli_usage_error("geometry", usage, "--cpu-bytes N is required");
    uint64_t cpu_bytes;
    if (ect_size_parse(size_text, &cpu_bytes) != ECT_OK)
        return ect_cli_usage_error("geometry", usage, "--cpu-bytes: %s", ect_last_error());
    if (cpu_bytes == 0)
        return ect_cli_usage_error("geometry", usage, "--cpu-bytes '%s' must be positive",
                                   size_text);
    ect_dtype_t dtype;
    if (dtype_text != NULL && ect_dtype_parse(dtype_text, &dtype) != ECT_OK)
        return ect_cli_usage_error("geometry", usage, "--dtype: %s", ect_last_error());

    ect_hf_model_t model;
    if (ect_hf_config_load(config_path, &model) != ECT_OK)
        return ect_cli_fail("geometry", "%s", ect_last_error());
    const char *dtype_source = "--dtype";
    if (dtype_text == NULL) {
        if (!model.has_dtype)
            return ect_cli_usage_error("geometry", usage,
                                       "%s declares no dtype (torch_dtype or dtype); pass --dtype",
                                       config_path);
        dtype = model.dtype;
        dtype_source = model.dtype_source;
    }
    ect_geometry_t g;
    if (ect_geometry_init(model.hidden_dim, dtype, cpu_bytes, &g) != ECT_OK)
        return ect_cli_fail("geometry", "%s", ect_last_error());
    uint64_t unused = cpu_bytes - g.num_blocks * g.block_size_bytes;

    if (json) {
        printf("{\"hidden_dim\":%" PRIu64 ",\"dtype\":", g.hidden_dim);
        json_string(stdout, ect_dtype_torch_name(dtype));
        printf(",\"element_size\":%zu,\"block_size_bytes\":%" PRIu64 ",\"num_blocks\":%" PRIu64
               ",\"cpu_bytes\":%" PRIu64 ",\"capacity_tokens\":%" PRIu64 ",\"hidden_dim_source\":",
               ect_dtype_size(dtype), g.block_size_bytes, g.num_blocks, cpu_bytes, g.num_blocks);
        json_string(stdout, model.hidden_dim_source);
        printf(",\"dtype_source\":");
        json_string(stdout, dtype_source);
        printf(",\"model_type\":");
        json_string(stdout, model.model_type);
        printf("}\n");
    } else {
        char h_block[32], h_cpu[32], h_unused[32];
        human_bytes(h_block, sizeof(h_block), g.block_size_bytes);
        human_bytes(h_cpu, sizeof(h_cpu), cpu_bytes);
        human_bytes(h_unused, sizeof(h_unused), unused);
        printf("model config  %s%s%s%s\n", config_path, model.model_type[0] ? " (model_type " : "",
               model.model_type, model.model_type[0] ? ")" : "");
        printf("hidden_dim    %" PRIu64 "  from %s\n", g.hidden_dim, model.hidden_dim_source);
        printf("dtype         %s, %zu byte%s per element  from %s\n", ect_dtype_torch_name(dtype),
               ect_dtype_size(dtype), ect_dtype_size(dtype) == 1 ? "" : "s", dtype_source);
        printf("block_size    %" PRIu64 " bytes (%s): one token's embedding row\n",
               g.block_size_bytes, h_block);
        printf("cpu_bytes     %" PRIu64 " (%s)\n", cpu_bytes, h_cpu);
        printf("num_blocks    %" PRIu64 "\n", g.num_blocks);
        printf("capacity      %" PRIu64 " tokens (%s left over)\n", g.num_blocks, h_unused);
        /* vLLM's --dtype auto downcasts a float32 checkpoint to the
         * platform's half type, so what it serves is not what the file
         * declares. */
        if (dtype_text == NULL && dtype == ECT_DTYPE_F32)
            printf("note          the engine's --dtype auto serves float32 checkpoints in "
                   "bfloat16 (or float16);\n"
                   "              pass --dtype to size the tier for what it serves\n");
    }
    return 0;
}
