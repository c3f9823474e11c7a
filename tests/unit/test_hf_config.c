/*
 * The model-file reader (SPEC §3): the encoder-cache width and dtype read
 * from real HuggingFace config.json files
 * (tests/data/hf-configs, expected values in expected.json) and from
 * malformed ones, each of which must give a status and a message that names
 * the problem and must leave the output untouched; and a model file carried
 * through to a block geometry.  Dtype names and the block arithmetic are in
 * test_geometry.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include <ectier/geometry.h>
#include <ectier/log.h>

#include "harness.h"

#define HF_DIR ECT_TEST_DATA_DIR "/hf-configs"

static ect_hf_model_t
load_data_file(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", HF_DIR, name);
    ect_hf_model_t m;
    CHECK_OK(ect_hf_config_load(path, &m));
    return m;
}

static ect_hf_model_t
parse_text(const char *json)
{
    ect_hf_model_t m;
    CHECK_OK(ect_hf_config_parse(json, strlen(json), &m));
    return m;
}

/* ---- real model files -------------------------------------------------- */

/* Log lines captured by capture_sink, for the cases that check a warning. */
static char captured[4096];

static void
capture_sink(ect_log_level_t level, const char *message, void *user)
{
    (void)user;
    size_t off = strlen(captured);
    snprintf(captured + off, sizeof(captured) - off, "%s: %s\n", ect_log_level_str(level), message);
}

static void
capture_start(void)
{
    captured[0] = '\0';
    ect_log_set_sink(capture_sink, NULL);
}

static void
capture_stop(void)
{
    ect_log_set_sink(NULL, NULL);
}

static void
test_every_listed_model_file_gives_expected_width_and_dtype(void)
{
    char *text = ect_test_read_file(HF_DIR "/expected.json", NULL);
    cJSON *expected = cJSON_Parse(text);
    CHECK(cJSON_IsObject(expected));
    int n = 0, placed = 0;
    for (const cJSON *e = expected->child; e != NULL; e = e->next, n++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", HF_DIR, e->string);
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(e, "error");
        if (cJSON_IsString(err)) {
            /* A real file the rules cannot place: refused with a message
             * naming the file and the missing field. */
            ect_hf_model_t m;
            CHECK_STATUS(ect_hf_config_load(path, &m), ECT_ERR_CONFIG);
            CHECK_CONTAINS(ect_last_error(), path);
            CHECK_CONTAINS(ect_last_error(), err->valuestring);
            continue;
        }
        const cJSON *dim = cJSON_GetObjectItemCaseSensitive(e, "hidden_dim");
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(e, "source");
        const cJSON *dsrc = cJSON_GetObjectItemCaseSensitive(e, "dtype_source");
        CHECK_MSG(cJSON_IsNumber(dim) && cJSON_IsString(dt) && cJSON_IsString(src) &&
                      cJSON_IsString(dsrc),
                  "bad entry for %s", e->string);
        /* A listed file that is missing fails here (load_data_file CHECKs).
         * The files whose top-level and text-config dtypes disagree are
         * marked, and only they may warn. */
        capture_start();
        ect_hf_model_t m = load_data_file(e->string);
        int warned = strstr(captured, "disagree; using") != NULL;
        capture_stop();
        int want_warning = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "dtype_warning"));
        CHECK_MSG(warned == want_warning, "%s: dtype warning %d, expected %d", e->string, warned,
                  want_warning);
        CHECK_MSG(m.hidden_dim == (uint64_t)dim->valuedouble, "%s: hidden_dim %llu, expected %.0f",
                  e->string, (unsigned long long)m.hidden_dim, dim->valuedouble);
        /* Where the width came from, so an equal number from the wrong
         * field cannot pass. */
        CHECK_MSG(strcmp(m.hidden_dim_source, src->valuestring) == 0,
                  "%s: width from \"%s\", expected \"%s\"", e->string, m.hidden_dim_source,
                  src->valuestring);
        ect_dtype_t want;
        CHECK_OK(ect_dtype_parse(dt->valuestring, &want));
        CHECK_MSG(m.has_dtype && m.dtype == want, "%s: dtype %s (has %d), expected %s", e->string,
                  m.has_dtype ? ect_dtype_name(m.dtype) : "none", m.has_dtype, dt->valuestring);
        CHECK_MSG(strcmp(m.dtype_source, dsrc->valuestring) == 0,
                  "%s: dtype from \"%s\", expected \"%s\"", e->string, m.dtype_source,
                  dsrc->valuestring);
        placed++;
    }
    CHECK_MSG(placed >= 40, "expected.json places only %d model files", placed);

    /* The other direction: every model file in the directory has an
     * expectation, so a file added without one cannot go untested. */
    DIR *d = opendir(HF_DIR);
    CHECK(d != NULL);
    struct dirent *de;
    int files = 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".json") != 0 ||
            strcmp(de->d_name, "expected.json") == 0)
            continue;
        files++;
        CHECK_MSG(cJSON_GetObjectItemCaseSensitive(expected, de->d_name) != NULL,
                  "%s has no entry in expected.json", de->d_name);
    }
    closedir(d);
    CHECK_EQ_INT(files, n);
    cJSON_Delete(expected);
    free(text);
}

static void
test_qwen3_vl_width_is_out_hidden_size_times_one_plus_deepstack_layers(void)
{
    const char *files[] = {"Qwen3-VL-2B-Instruct.json", "Qwen3-VL-30B-A3B-Instruct.json"};
    for (size_t i = 0; i < 2; i++) {
        ect_hf_model_t m = load_data_file(files[i]);
        /* text_config.hidden_size is 2048 in both: the plain LM width would
         * under-allocate by a factor of four. */
        CHECK_EQ_U64(m.hidden_dim, 2048 * (1 + 3));
        CHECK_STR_EQ(m.hidden_dim_source,
                     "vision_config.out_hidden_size 2048 x (1 + 3 deepstack layers)");
        CHECK_STR_EQ(m.dtype_source, "text_config.dtype");
        CHECK_EQ_INT(m.dtype, ECT_DTYPE_BF16);
    }
}

static void
test_deepstack_rule_counts_list_length_not_values(void)
{
    ect_hf_model_t m = parse_text("{\"hidden_size\": 7, \"vision_config\": {\"out_hidden_size\": "
                                  "1000, \"deepstack_visual_indexes\": [30, 1]}}");
    CHECK_EQ_U64(m.hidden_dim, 3000);
    m = parse_text("{\"hidden_size\": 7, \"vision_config\": {\"out_hidden_size\": 1000, "
                   "\"deepstack_visual_indexes\": [0]}}");
    CHECK_EQ_U64(m.hidden_dim, 2000);
}

static void
test_deepstack_rule_needs_both_fields(void)
{
    /* vLLM applies the rule only when both are there; otherwise the text
     * model's width stands. */
    ect_hf_model_t m = parse_text("{\"hidden_size\": 7, \"vision_config\": "
                                  "{\"deepstack_visual_indexes\": [1, 2]}}");
    CHECK_EQ_U64(m.hidden_dim, 7);
    CHECK_STR_EQ(m.hidden_dim_source, "hidden_size");
    m = parse_text("{\"hidden_size\": 7, \"vision_config\": {\"out_hidden_size\": 1000}}");
    CHECK_EQ_U64(m.hidden_dim, 7);
    m = parse_text("{\"hidden_size\": 7, \"vision_config\": {\"out_hidden_size\": 1000, "
                   "\"deepstack_visual_indexes\": null}}");
    CHECK_EQ_U64(m.hidden_dim, 7);
}

static void
test_qwen35_empty_deepstack_list_uses_text_width(void)
{
    ect_hf_model_t m = load_data_file("Qwen3.5-27B.json");
    CHECK_EQ_U64(m.hidden_dim, 5120);
    CHECK_STR_EQ(m.hidden_dim_source, "text_config.hidden_size");
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_BF16);
    CHECK_STR_EQ(m.dtype_source, "text_config.dtype");
    CHECK_STR_EQ(m.model_type, "qwen3_5");
}

static void
test_llava_text_config_without_hidden_size_takes_llama_default(void)
{
    ect_hf_model_t m = load_data_file("llava-1.5-7b-hf.json");
    CHECK_EQ_U64(m.hidden_dim, 4096);
    CHECK_STR_EQ(m.hidden_dim_source, "default hidden_size 4096 of text_config.model_type 'llama'");
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F16);
    CHECK_STR_EQ(m.dtype_source, "torch_dtype");
}

static void
test_model_type_defaults_apply_only_to_known_types(void)
{
    ect_hf_model_t m = parse_text("{\"text_config\": {\"model_type\": \"gemma3_text\"}}");
    CHECK_EQ_U64(m.hidden_dim, 2304);
    m = parse_text("{\"model_type\": \"mistral\"}");
    CHECK_EQ_U64(m.hidden_dim, 4096);
    CHECK_STR_EQ(m.hidden_dim_source, "default hidden_size 4096 of model_type 'mistral'");
}

static void
test_internvl_width_comes_from_llm_config(void)
{
    ect_hf_model_t m = load_data_file("InternVL2-1B.json");
    CHECK_EQ_U64(m.hidden_dim, 896);
    CHECK_STR_EQ(m.hidden_dim_source, "llm_config.hidden_size");
    CHECK_STR_EQ(m.model_type, "internvl_chat");
}

static void
test_qwen2_vl_width_comes_from_top_level(void)
{
    ect_hf_model_t m = load_data_file("Qwen2-VL-7B-Instruct.json");
    CHECK_EQ_U64(m.hidden_dim, 3584);
    CHECK_STR_EQ(m.hidden_dim_source, "hidden_size");
    CHECK_STR_EQ(m.dtype_source, "torch_dtype");
}

static void
test_mllama_width_is_text_hidden_size_not_vision_output(void)
{
    ect_hf_model_t m = load_data_file("Llama-3.2-11B-Vision-Instruct.json");
    CHECK_EQ_U64(m.hidden_dim, 4096);
    CHECK_STR_EQ(m.hidden_dim_source, "text_config.hidden_size");
}

/* The real files of each layout (language_config: DeepSeek-VL2, Janus;
 * thinker_config.text_config: Qwen2.5-Omni, whose talker's hidden_size 896 is
 * not the width) are checked with their sources through expected.json; this
 * covers what they do not: the text config's dtype. */
static void
test_language_config_dtype_counts_as_the_text_configs(void)
{
    ect_hf_model_t m =
        parse_text("{\"language_config\": {\"hidden_size\": 64, \"torch_dtype\": \"float16\"}}");
    CHECK_EQ_U64(m.hidden_dim, 64);
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F16);
    CHECK_STR_EQ(m.dtype_source, "language_config.torch_dtype");
    /* thinker_config's own torch_dtype is not one the engine reads. */
    m = parse_text("{\"thinker_config\": {\"text_config\": {\"hidden_size\": 64, \"dtype\": "
                   "\"bf16\"}, \"torch_dtype\": \"float32\"}}");
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_BF16);
    CHECK_STR_EQ(m.dtype_source, "thinker_config.text_config.dtype");
}

static void
test_text_config_is_found_in_the_engines_order(void)
{
    /* thinker_config.text_config, text_config, llm_config, language_config:
     * when several agree the first names the source. */
    static const struct {
        const char *json, *source;
    } cases[] = {
        {"{\"thinker_config\": {\"text_config\": {\"hidden_size\": 8}}, \"text_config\": "
         "{\"hidden_size\": 8}}",
         "thinker_config.text_config.hidden_size"},
        {"{\"language_config\": {\"hidden_size\": 8}, \"llm_config\": {\"hidden_size\": 8}, "
         "\"text_config\": {\"hidden_size\": 8}}",
         "text_config.hidden_size"},
        {"{\"language_config\": {\"hidden_size\": 8}, \"llm_config\": {\"hidden_size\": 8}}",
         "llm_config.hidden_size"},
        {"{\"hidden_size\": 8, \"language_config\": {\"hidden_size\": 8}}",
         "language_config.hidden_size"},
        /* One that gives no width does not contradict one that does. */
        {"{\"text_config\": {\"hidden_size\": 8}, \"llm_config\": {\"vocab_size\": 5}}",
         "text_config.hidden_size"},
        {"{\"hidden_size\": 8}", "hidden_size"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ect_hf_model_t m = parse_text(cases[i].json);
        CHECK_EQ_U64(m.hidden_dim, 8);
        CHECK_MSG(strcmp(m.hidden_dim_source, cases[i].source) == 0, "case %zu: \"%s\"", i,
                  m.hidden_dim_source);
    }
}

static void
test_projection_width_comes_before_hidden_size(void)
{
    /* get_inputs_embeds_size(): projection_dim, then projection_size, then
     * hidden_size of the text config. */
    ect_hf_model_t m = parse_text("{\"text_config\": {\"hidden_size\": 8, \"projection_dim\": 4, "
                                  "\"projection_size\": 2}, \"hidden_size\": 8}");
    CHECK_EQ_U64(m.hidden_dim, 4);
    CHECK_STR_EQ(m.hidden_dim_source, "text_config.projection_dim");
    m = parse_text("{\"hidden_size\": 8, \"projection_size\": 2}");
    CHECK_EQ_U64(m.hidden_dim, 2);
    CHECK_STR_EQ(m.hidden_dim_source, "projection_size");
    /* PaliGemma's top-level projection_dim is not its text config's. */
    m = load_data_file("paligemma-3b-pt-224.json");
    CHECK_EQ_U64(m.hidden_dim, 2048);
    CHECK_STR_EQ(m.hidden_dim_source, "text_config.hidden_size");
}

static void
test_top_level_dtype_wins_over_the_text_configs_with_a_warning(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/VARCO-VISION-14B-HF.json", HF_DIR);
    capture_start();
    ect_hf_model_t m;
    ect_status_t s = ect_hf_config_load(path, &m);
    char log[sizeof(captured)];
    snprintf(log, sizeof(log), "%s", captured);
    capture_stop();
    CHECK_OK(s);
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F16);
    CHECK_STR_EQ(m.dtype_source, "torch_dtype");
    CHECK_CONTAINS(log, "warn: ");
    CHECK_CONTAINS(log, path);
    CHECK_CONTAINS(log, "torch_dtype 'float16' and text_config.torch_dtype 'bfloat16' disagree; "
                        "using torch_dtype 'float16', as the engine does");

    capture_start();
    m = parse_text("{\"dtype\": \"float32\", \"text_config\": {\"hidden_size\": 8, \"dtype\": "
                   "\"bfloat16\"}}");
    snprintf(log, sizeof(log), "%s", captured);
    capture_stop();
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F32);
    CHECK_STR_EQ(m.dtype_source, "dtype");
    CHECK_CONTAINS(log, "model config: dtype 'float32' and text_config.dtype 'bfloat16' disagree");
}

static void
test_agreeing_dtypes_log_nothing(void)
{
    capture_start();
    ect_hf_model_t m = load_data_file("Llama-4-Scout-17B-16E-Instruct.json");
    char log[sizeof(captured)];
    snprintf(log, sizeof(log), "%s", captured);
    capture_stop();
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_BF16);
    CHECK_STR_EQ(log, "");
}

static void
test_dtype_falls_back_to_vision_then_encoder_config(void)
{
    ect_hf_model_t m = parse_text("{\"hidden_size\": 8, \"vision_config\": {\"torch_dtype\": "
                                  "\"float16\"}, \"encoder_config\": {\"dtype\": \"float32\"}}");
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F16);
    CHECK_STR_EQ(m.dtype_source, "vision_config.torch_dtype");
    m = parse_text("{\"hidden_size\": 8, \"encoder_config\": {\"dtype\": \"float32\"}}");
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F32);
    CHECK_STR_EQ(m.dtype_source, "encoder_config.dtype");
    /* A fallback the engine does not reach is not read at all. */
    m = parse_text("{\"hidden_size\": 8, \"torch_dtype\": \"bf16\", \"vision_config\": "
                   "{\"torch_dtype\": \"int8\"}, \"encoder_config\": 3}");
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_BF16);
    CHECK_STR_EQ(m.dtype_source, "torch_dtype");
}

static void
test_real_file_without_a_width_is_refused_naming_field_and_file(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/pathology-llava-wrapper.json", HF_DIR);
    ect_hf_model_t m;
    memset(&m, 0x3C, sizeof(m));
    CHECK_STATUS(ect_hf_config_load(path, &m), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), path);
    CHECK_CONTAINS(ect_last_error(), "hidden_size is missing");
    CHECK_CONTAINS(ect_last_error(), "nor is there a text_config, llm_config, language_config");
    CHECK_EQ_U64(m.hidden_dim, 0x3C3C3C3C3C3C3C3Cull);
}

/* ---- accepted variations ----------------------------------------------- */

static void
test_null_fields_count_as_absent(void)
{
    ect_hf_model_t m = parse_text("{\"hidden_size\": 8, \"torch_dtype\": null, \"text_config\": "
                                  "null, \"vision_config\": null, \"model_type\": null}");
    CHECK_EQ_U64(m.hidden_dim, 8);
    CHECK_EQ_INT(m.has_dtype, 0);
    CHECK_STR_EQ(m.dtype_source, "");
    CHECK_STR_EQ(m.model_type, "");
}

static void
test_agreeing_repeats_are_accepted(void)
{
    ect_hf_model_t m = parse_text("{\"hidden_size\": 8, \"hidden_size\": 8, \"torch_dtype\": "
                                  "\"bfloat16\", \"dtype\": \"bf16\", \"text_config\": "
                                  "{\"hidden_size\": 8, \"torch_dtype\": \"torch.bfloat16\"}}");
    CHECK_EQ_U64(m.hidden_dim, 8);
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_BF16);
    CHECK_STR_EQ(m.dtype_source, "torch_dtype");
    CHECK_STR_EQ(m.hidden_dim_source, "text_config.hidden_size");
}

static void
test_integral_float_width_is_accepted(void)
{
    ect_hf_model_t m = parse_text("{\"hidden_size\": 4.096e3}");
    CHECK_EQ_U64(m.hidden_dim, 4096);
}

static void
test_parse_reads_only_len_bytes(void)
{
    const char *text = "{\"hidden_size\": 8}{garbage";
    ect_hf_model_t m;
    CHECK_OK(ect_hf_config_parse(text, strlen("{\"hidden_size\": 8}"), &m));
    CHECK_EQ_U64(m.hidden_dim, 8);
    /* A buffer without a terminating NUL, exactly as long as the text. */
    const char body[] = "{\"hidden_size\":9}";
    char *exact = malloc(sizeof(body) - 1);
    CHECK(exact != NULL);
    memcpy(exact, body, sizeof(body) - 1);
    CHECK_OK(ect_hf_config_parse(exact, sizeof(body) - 1, &m));
    CHECK_EQ_U64(m.hidden_dim, 9);
    free(exact);
}

static void
test_width_at_the_limit_is_accepted(void)
{
    char json[96];
    snprintf(json, sizeof(json), "{\"hidden_size\": %llu}",
             (unsigned long long)ECT_GEOMETRY_MAX_HIDDEN_DIM);
    ect_hf_model_t m = parse_text(json);
    CHECK_EQ_U64(m.hidden_dim, ECT_GEOMETRY_MAX_HIDDEN_DIM);
}

/* ---- malformed model files --------------------------------------------- */

struct bad_case {
    const char *json;
    ect_status_t status;
    const char *message; /* substring of ect_last_error() */
};

static const struct bad_case bad_cases[] = {
    {"", ECT_ERR_PARSE, "model config is empty"},
    {" \n\t ", ECT_ERR_PARSE, "model config is empty"},
    {"{", ECT_ERR_PARSE, "not valid JSON (error at line 1"},
    {"{\n\"hidden_size\": 8,\n}", ECT_ERR_PARSE, "not valid JSON (error at line 3"},
    {"hidden_size: 8", ECT_ERR_PARSE, "not valid JSON"},
    {"{} x", ECT_ERR_PARSE, "trailing data after the JSON value (line 1, column 4)"},
    {"[1, 2]", ECT_ERR_PARSE, "must be a JSON object, got an array"},
    {"42", ECT_ERR_PARSE, "must be a JSON object, got a number"},
    {"\"config\"", ECT_ERR_PARSE, "must be a JSON object, got a string"},
    {"null", ECT_ERR_PARSE, "must be a JSON object, got null"},
    {"{}", ECT_ERR_CONFIG, "hidden_size is missing and there is no model_type"},
    {"{\"model_type\": \"qwen2_vl\"}", ECT_ERR_CONFIG,
     "hidden_size is missing and model_type 'qwen2_vl' has no known default"},
    {"{\"text_config\": {\"model_type\": \"foo\"}}", ECT_ERR_CONFIG,
     "text_config.hidden_size is missing and text_config.model_type 'foo' has no known default"},
    {"{\"text_config\": {\"vocab_size\": 5}}", ECT_ERR_CONFIG,
     "text_config.hidden_size is missing and there is no text_config.model_type"},
    {"{\"hidden_size\": \"4096\"}", ECT_ERR_CONFIG,
     "hidden_size must be an integer, got the string \"4096\""},
    {"{\"hidden_size\": true}", ECT_ERR_CONFIG, "hidden_size must be an integer, got a boolean"},
    {"{\"hidden_size\": [4096]}", ECT_ERR_CONFIG, "hidden_size must be an integer, got an array"},
    {"{\"hidden_size\": 0}", ECT_ERR_CONFIG, "hidden_size = 0 is not an integer in 1..1048576"},
    {"{\"hidden_size\": -4096}", ECT_ERR_CONFIG, "hidden_size = -4096 is not an integer"},
    {"{\"hidden_size\": 4096.5}", ECT_ERR_CONFIG, "hidden_size = 4096.5 is not an integer"},
    {"{\"hidden_size\": 1048577}", ECT_ERR_CONFIG, "hidden_size = 1048577 is not an integer"},
    {"{\"hidden_size\": 18446744073709551617}", ECT_ERR_CONFIG, "is not an integer in 1..1048576"},
    {"{\"hidden_size\": 1e999}", ECT_ERR_CONFIG, "hidden_size = inf is not an integer"},
    {"{\"text_config\": {\"hidden_size\": 1e300}}", ECT_ERR_CONFIG,
     "text_config.hidden_size = 1.0000000000000001e+300 is not an integer"},
    {"{\"text_config\": [], \"hidden_size\": 8}", ECT_ERR_CONFIG,
     "text_config must be an object, got an array"},
    {"{\"llm_config\": 3, \"hidden_size\": 8}", ECT_ERR_CONFIG,
     "llm_config must be an object, got a number"},
    {"{\"vision_config\": \"siglip\", \"hidden_size\": 8}", ECT_ERR_CONFIG,
     "vision_config must be an object, got a string"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 8, "
     "\"deepstack_visual_indexes\": 3}}",
     ECT_ERR_CONFIG, "vision_config.deepstack_visual_indexes must be an array of layer indexes"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 8, "
     "\"deepstack_visual_indexes\": {\"0\": 5}}}",
     ECT_ERR_CONFIG, "deepstack_visual_indexes must be an array of layer indexes, got an object"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 8, "
     "\"deepstack_visual_indexes\": [5, \"11\"]}}",
     ECT_ERR_CONFIG,
     "vision_config.deepstack_visual_indexes[1] must be an integer, got the string"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 8, "
     "\"deepstack_visual_indexes\": [-1]}}",
     ECT_ERR_CONFIG, "deepstack_visual_indexes[0] = -1 is not an integer in 0..65535"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 8, "
     "\"deepstack_visual_indexes\": [1.5]}}",
     ECT_ERR_CONFIG, "deepstack_visual_indexes[0] = 1.5 is not an integer"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 8, "
     "\"deepstack_visual_indexes\": [null]}}",
     ECT_ERR_CONFIG, "deepstack_visual_indexes[0] must be an integer, got null"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": \"2048\", "
     "\"deepstack_visual_indexes\": [1]}}",
     ECT_ERR_CONFIG, "vision_config.out_hidden_size must be an integer, got the string"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"out_hidden_size\": 524288, "
     "\"deepstack_visual_indexes\": [1, 2]}}",
     ECT_ERR_CONFIG,
     "vision_config.out_hidden_size 524288 x (1 + 2 deepstack layers) exceeds the limit"},
    {"{\"hidden_size\": 4096, \"text_config\": {\"hidden_size\": 2048}}", ECT_ERR_CONFIG,
     "top-level hidden_size 4096 contradicts the text model's width 2048 "
     "(text_config.hidden_size)"},
    {"{\"hidden_size\": 4096, \"text_config\": {\"model_type\": \"gemma3_text\"}}", ECT_ERR_CONFIG,
     "top-level hidden_size 4096 contradicts the text model's width 2304 (default "
     "hidden_size 2304 of text_config.model_type 'gemma3_text')"},
    {"{\"hidden_size\": \"x\", \"text_config\": {\"hidden_size\": 8}, \"vision_config\": "
     "{\"out_hidden_size\": 8, \"deepstack_visual_indexes\": [1]}}",
     ECT_ERR_CONFIG, "model config: hidden_size must be an integer, got the string \"x\""},
    {"{\"hidden_size\": 1, \"hidden_size\": 2}", ECT_ERR_CONFIG,
     "hidden_size occurs twice in one object with different values"},
    {"{\"text_config\": {\"hidden_size\": 8}, \"text_config\": {\"hidden_size\": 8}}",
     ECT_ERR_CONFIG, "text_config occurs twice in one object with object or array values"},
    {"{\"hidden_size\": 8, \"torch_dtype\": \"int8\"}", ECT_ERR_CONFIG,
     "torch_dtype: dtype 'int8' is not one of: bfloat16|bf16|torch.bfloat16"},
    {"{\"hidden_size\": 8, \"torch_dtype\": \"auto\"}", ECT_ERR_CONFIG,
     "dtype 'auto' is not one of"},
    {"{\"hidden_size\": 8, \"dtype\": 16}", ECT_ERR_CONFIG, "dtype must be a string, got a number"},
    {"{\"hidden_size\": 8, \"torch_dtype\": \"bfloat16\", \"dtype\": \"float16\"}", ECT_ERR_CONFIG,
     "dtype 'float16' contradicts torch_dtype 'bfloat16'"},
    {"{\"text_config\": {\"hidden_size\": 8, \"torch_dtype\": \"bf16\", \"dtype\": "
     "\"float16\"}}",
     ECT_ERR_CONFIG, "text_config.dtype 'float16' contradicts text_config.torch_dtype 'bfloat16'"},
    {"{\"hidden_size\": 8, \"vision_config\": {\"torch_dtype\": \"int8\"}}", ECT_ERR_CONFIG,
     "vision_config.torch_dtype: dtype 'int8' is not one of"},
    {"{\"hidden_size\": 8, \"encoder_config\": 3}", ECT_ERR_CONFIG,
     "encoder_config must be an object, got a number"},
    {"{\"language_config\": 7, \"hidden_size\": 8}", ECT_ERR_CONFIG,
     "language_config must be an object, got a number"},
    {"{\"thinker_config\": [], \"hidden_size\": 8}", ECT_ERR_CONFIG,
     "thinker_config must be an object, got an array"},
    {"{\"thinker_config\": {\"text_config\": \"qwen2\"}}", ECT_ERR_CONFIG,
     "thinker_config.text_config must be an object, got a string"},
    {"{\"thinker_config\": {\"vision_config\": {}}, \"hidden_size\": 8}", ECT_ERR_CONFIG,
     "thinker_config has no text_config object; cannot find the language model's settings"},
    /* Qwen3-Omni's shape: the engine would size rows for the text width
     * while the encoder concatenates deepstack features. */
    {"{\"thinker_config\": {\"text_config\": {\"hidden_size\": 2048}, \"vision_config\": "
     "{\"out_hidden_size\": 2048, \"deepstack_visual_indexes\": [8, 16, 24]}}}",
     ECT_ERR_CONFIG,
     "the vision encoder emits rows of 8192 elements (thinker_config.vision_config.out_hidden_size "
     "2048 x (1 + 3 deepstack layers)), but the engine reads the deepstack rule from a top-level "
     "vision_config only and would size rows of 2048 (thinker_config.text_config.hidden_size); "
     "refusing the file rather than truncate encodings"},
    {"{\"thinker_config\": {\"text_config\": {\"hidden_size\": 8}, \"vision_config\": "
     "{\"out_hidden_size\": 8, \"deepstack_visual_indexes\": [\"1\"]}}}",
     ECT_ERR_CONFIG, "thinker_config.vision_config.deepstack_visual_indexes[0] must be an integer"},
    {"{\"text_config\": {\"hidden_size\": 2048}, \"llm_config\": {\"hidden_size\": 4096}}",
     ECT_ERR_CONFIG,
     "text_config and llm_config both describe the language model and disagree on its width: 2048 "
     "(text_config.hidden_size) against 4096 (llm_config.hidden_size)"},
    {"{\"llm_config\": {\"hidden_size\": 8}, \"language_config\": {\"hidden_size\": 9}}",
     ECT_ERR_CONFIG, "llm_config and language_config both describe the language model"},
    {"{\"thinker_config\": {\"text_config\": {\"hidden_size\": 8}}, \"text_config\": "
     "{\"hidden_size\": 9}}",
     ECT_ERR_CONFIG, "thinker_config.text_config and text_config both describe the language model"},
    {"{\"language_config\": {\"model_type\": \"deepseek_v2\"}}", ECT_ERR_CONFIG,
     "language_config.hidden_size is missing and language_config.model_type 'deepseek_v2' has no "
     "known default"},
    {"{\"thinker_config\": {\"text_config\": {\"vocab_size\": 5}}}", ECT_ERR_CONFIG,
     "thinker_config.text_config.hidden_size is missing and there is no "
     "thinker_config.text_config.model_type"},
    {"{\"model_type\": \"pathology-llava\", \"torch_dtype\": \"float16\"}", ECT_ERR_CONFIG,
     "hidden_size is missing and model_type 'pathology-llava' has no known default (known: llama, "
     "mistral, mixtral, qwen2, gemma3_text); nor is there a text_config, llm_config, "
     "language_config or thinker_config.text_config; cannot tell the encoder-cache width"},
    {"{\"text_config\": {\"hidden_size\": 8, \"projection_dim\": \"4\"}}", ECT_ERR_CONFIG,
     "text_config.projection_dim must be an integer, got the string \"4\""},
    {"{\"hidden_size\": 8, \"projection_size\": 0}", ECT_ERR_CONFIG,
     "projection_size = 0 is not an integer in 1..1048576"},
    {"{\"text_config\": {\"hidden_size\": 8, \"dtype\": [\"bfloat16\"]}}", ECT_ERR_CONFIG,
     "text_config.dtype must be a string, got an array"},
    {"{\"hidden_size\": 8, \"model_type\": 7}", ECT_ERR_CONFIG,
     "model_type must be a string, got a number"},
    {"{\"text_config\": {\"hidden_size\": 8, \"model_type\": false}}", ECT_ERR_CONFIG,
     "text_config.model_type must be a string, got a boolean"},
};

static void
test_malformed_model_configs_are_rejected_with_a_message(void)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        ect_hf_model_t m;
        memset(&m, 0xA5, sizeof(m));
        ect_status_t s = ect_hf_config_parse(c->json, strlen(c->json), &m);
        CHECK_MSG(s == c->status, "case %zu %s: status %d, expected %d (%s)", i, c->json, (int)s,
                  (int)c->status, ect_last_error());
        CHECK_MSG(strstr(ect_last_error(), c->message) != NULL,
                  "case %zu %s: message \"%s\" lacks \"%s\"", i, c->json, ect_last_error(),
                  c->message);
        /* Written only on success. */
        CHECK_MSG(m.hidden_dim == 0xA5A5A5A5A5A5A5A5ull, "case %zu: output written", i);
    }
}

static void
test_parse_rejects_null_arguments(void)
{
    ect_hf_model_t m;
    CHECK_STATUS(ect_hf_config_parse(NULL, 3, &m), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_hf_config_parse("{}", 2, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_hf_config_parse(NULL, 0, &m), ECT_ERR_PARSE);
    CHECK_STATUS(ect_hf_config_load(NULL, &m), ECT_ERR_INVALID_ARG);
}

static void
test_control_bytes_from_the_file_are_not_echoed(void)
{
    ect_hf_model_t m;
    const char *json = "{\"hidden_size\": 8, \"torch_dtype\": \"\\u001b[31mred\"}";
    CHECK_STATUS(ect_hf_config_parse(json, strlen(json), &m), ECT_ERR_CONFIG);
    CHECK(strchr(ect_last_error(), 0x1b) == NULL);
    CHECK_CONTAINS(ect_last_error(), "dtype '?[31mred'");
    m = parse_text("{\"hidden_size\": 8, \"model_type\": \"a\\tb\\u00e9\"}");
    CHECK_STR_EQ(m.model_type, "a?b??"); /* é is two UTF-8 bytes */
}

/* ---- loading files ------------------------------------------------------ */

/* A scratch directory under /tmp named for this case; removed by the case
 * itself before it checks anything, so a failed check leaves nothing. */
static void
scratch_dir(char *buf, size_t len)
{
    char name[64];
    snprintf(buf, len, "/tmp/%s", ect_test_unique_name(name, sizeof(name), "ectt_geom_"));
    CHECK(mkdir(buf, 0700) == 0);
}

static int
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
}

static void
test_load_reports_missing_file_with_its_path(void)
{
    ect_hf_model_t m;
    CHECK_STATUS(ect_hf_config_load("/nonexistent/ectier/config.json", &m), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "/nonexistent/ectier/config.json: no such model config file");
}

static void
test_load_of_a_directory_reads_its_config_json(void)
{
    char dir[128], file[192], sub[192], subfile[256];
    scratch_dir(dir, sizeof(dir));
    snprintf(file, sizeof(file), "%s/config.json", dir);
    snprintf(sub, sizeof(sub), "%s/empty", dir);
    snprintf(subfile, sizeof(subfile), "%s/config.json", sub);
    int wrote = write_file(file, "{\"text_config\": {\"hidden_size\": 1536, \"dtype\": \"half\"}}");
    int made = mkdir(sub, 0700);
    ect_hf_model_t m, m2;
    ect_status_t s1 = ect_hf_config_load(dir, &m);
    ect_status_t s2 = ect_hf_config_load(sub, &m2);
    char msg2[1024];
    snprintf(msg2, sizeof(msg2), "%s", ect_last_error());
    unlink(file);
    rmdir(sub);
    rmdir(dir);
    CHECK(wrote == 0 && made == 0);
    CHECK_OK(s1);
    CHECK_EQ_U64(m.hidden_dim, 1536);
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F16);
    CHECK_STATUS(s2, ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(msg2, subfile);
}

static void
test_load_rejects_bad_files_with_path_in_message(void)
{
    char dir[128], empty[192], notjson[192], big[192], dirlike[192], dirlike_cfg[256];
    scratch_dir(dir, sizeof(dir));
    snprintf(empty, sizeof(empty), "%s/empty.json", dir);
    snprintf(notjson, sizeof(notjson), "%s/notjson.json", dir);
    snprintf(big, sizeof(big), "%s/big.json", dir);
    snprintf(dirlike, sizeof(dirlike), "%s/model", dir);
    snprintf(dirlike_cfg, sizeof(dirlike_cfg), "%s/config.json", dirlike);
    int ok = write_file(empty, "") == 0 && write_file(notjson, "<html>not found</html>\n") == 0;
    /* One byte over the limit; sparse, so it costs no disk. */
    int fd = open(big, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ok = ok && fd >= 0 && ftruncate(fd, (off_t)ECT_HF_CONFIG_MAX_BYTES + 1) == 0;
    if (fd >= 0)
        close(fd);
    /* A directory whose config.json is itself a directory. */
    ok = ok && mkdir(dirlike, 0700) == 0 && mkdir(dirlike_cfg, 0700) == 0;

    ect_hf_model_t m;
    memset(&m, 0x5A, sizeof(m));
    char msg[4][1024];
    ect_status_t s[4];
    const char *paths[4] = {empty, notjson, big, dirlike};
    for (int i = 0; i < 4; i++) {
        s[i] = ect_hf_config_load(paths[i], &m);
        snprintf(msg[i], sizeof(msg[i]), "%s", ect_last_error());
    }
    rmdir(dirlike_cfg);
    rmdir(dirlike);
    unlink(big);
    unlink(notjson);
    unlink(empty);
    rmdir(dir);

    CHECK(ok);
    CHECK_STATUS(s[0], ECT_ERR_PARSE);
    CHECK_CONTAINS(msg[0], empty);
    CHECK_CONTAINS(msg[0], "model config is empty");
    CHECK_STATUS(s[1], ECT_ERR_PARSE);
    CHECK_CONTAINS(msg[1], notjson);
    CHECK_CONTAINS(msg[1], "not valid JSON");
    CHECK_STATUS(s[2], ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(msg[2], big);
    CHECK_CONTAINS(msg[2], "larger than the 16 MiB limit");
    CHECK_STATUS(s[3], ECT_ERR_IO);
    CHECK_CONTAINS(msg[3], "is a directory");
    CHECK_EQ_U64(m.hidden_dim, 0x5A5A5A5A5A5A5A5Aull);
}

static void
test_load_accepts_a_file_of_exactly_the_limit(void)
{
    /* A real config padded with trailing whitespace to the limit: the limit
     * is inclusive and the parser tolerates the padding. */
    char dir[128], path[192];
    scratch_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/padded.json", dir);
    const char *body = "{\"hidden_size\": 640, \"torch_dtype\": \"float32\"}";
    size_t n = ECT_HF_CONFIG_MAX_BYTES;
    char *buf = malloc(n);
    int ok = buf != NULL;
    if (ok) {
        memset(buf, ' ', n);
        memcpy(buf, body, strlen(body));
        FILE *f = fopen(path, "w");
        ok = f != NULL && fwrite(buf, 1, n, f) == n;
        if (f != NULL)
            ok = fclose(f) == 0 && ok;
    }
    free(buf);
    ect_hf_model_t m;
    ect_status_t s = ect_hf_config_load(path, &m);
    unlink(path);
    rmdir(dir);
    CHECK(ok);
    CHECK_OK(s);
    CHECK_EQ_U64(m.hidden_dim, 640);
    CHECK_EQ_INT(m.dtype, ECT_DTYPE_F32);
}

static void
test_model_file_to_geometry_end_to_end(void)
{
    ect_hf_model_t m = load_data_file("Qwen3-VL-2B-Instruct.json");
    ect_geometry_t g;
    CHECK_OK(ect_geometry_init(m.hidden_dim, m.dtype, UINT64_C(1) << 30, &g));
    CHECK_EQ_U64(g.block_size_bytes, 16384);
    CHECK_EQ_U64(g.num_blocks, 65536);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_every_listed_model_file_gives_expected_width_and_dtype),
    ECT_CASE(test_qwen3_vl_width_is_out_hidden_size_times_one_plus_deepstack_layers),
    ECT_CASE(test_deepstack_rule_counts_list_length_not_values),
    ECT_CASE(test_deepstack_rule_needs_both_fields),
    ECT_CASE(test_qwen35_empty_deepstack_list_uses_text_width),
    ECT_CASE(test_llava_text_config_without_hidden_size_takes_llama_default),
    ECT_CASE(test_model_type_defaults_apply_only_to_known_types),
    ECT_CASE(test_internvl_width_comes_from_llm_config),
    ECT_CASE(test_qwen2_vl_width_comes_from_top_level),
    ECT_CASE(test_mllama_width_is_text_hidden_size_not_vision_output),
    ECT_CASE(test_language_config_dtype_counts_as_the_text_configs),
    ECT_CASE(test_text_config_is_found_in_the_engines_order),
    ECT_CASE(test_projection_width_comes_before_hidden_size),
    ECT_CASE(test_top_level_dtype_wins_over_the_text_configs_with_a_warning),
    ECT_CASE(test_agreeing_dtypes_log_nothing),
    ECT_CASE(test_dtype_falls_back_to_vision_then_encoder_config),
    ECT_CASE(test_real_file_without_a_width_is_refused_naming_field_and_file),
    ECT_CASE(test_null_fields_count_as_absent),
    ECT_CASE(test_agreeing_repeats_are_accepted),
    ECT_CASE(test_integral_float_width_is_accepted),
    ECT_CASE(test_parse_reads_only_len_bytes),
    ECT_CASE(test_width_at_the_limit_is_accepted),
    ECT_CASE(test_malformed_model_configs_are_rejected_with_a_message),
    ECT_CASE(test_parse_rejects_null_arguments),
    ECT_CASE(test_control_bytes_from_the_file_are_not_echoed),
    ECT_CASE(test_load_reports_missing_file_with_its_path),
    ECT_CASE(test_load_of_a_directory_reads_its_config_json),
    ECT_CASE(test_load_rejects_bad_files_with_path_in_message),
    ECT_CASE(test_load_accepts_a_file_of_exactly_the_limit),
    ECT_CASE(test_model_file_to_geometry_end_to_end),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
