/*
 * Geometry (SPEC §3): dtype names, aliases and sizes, and the block size,
 * block count and entry sizes derived from a width and a dtype.  The model
 * files the width comes from are read in test_hf_config.c.
 */
#include <ectier/geometry.h>

#include "harness.h"

/* ---- dtypes ------------------------------------------------------------- */

static void
test_every_dtype_alias_parses_to_its_type(void)
{
    static const struct {
        const char *name;
        ect_dtype_t dtype;
    } aliases[] = {
        {"bfloat16", ECT_DTYPE_BF16},
        {"bf16", ECT_DTYPE_BF16},
        {"torch.bfloat16", ECT_DTYPE_BF16},
        {"BF16", ECT_DTYPE_BF16},
        {"float16", ECT_DTYPE_F16},
        {"half", ECT_DTYPE_F16},
        {"fp16", ECT_DTYPE_F16},
        {"f16", ECT_DTYPE_F16},
        {"torch.float16", ECT_DTYPE_F16},
        {"float32", ECT_DTYPE_F32},
        {"float", ECT_DTYPE_F32},
        {"fp32", ECT_DTYPE_F32},
        {"f32", ECT_DTYPE_F32},
        {"torch.float32", ECT_DTYPE_F32},
        {"Float32", ECT_DTYPE_F32},
        {"float8_e4m3fn", ECT_DTYPE_F8_E4M3FN},
        {"fp8_e4m3fn", ECT_DTYPE_F8_E4M3FN},
        {"fp8_e4m3", ECT_DTYPE_F8_E4M3FN},
        {"fp8", ECT_DTYPE_F8_E4M3FN},
        {"torch.float8_e4m3fn", ECT_DTYPE_F8_E4M3FN},
        {"float8_e5m2", ECT_DTYPE_F8_E5M2},
        {"fp8_e5m2", ECT_DTYPE_F8_E5M2},
        {"torch.float8_e5m2", ECT_DTYPE_F8_E5M2},
        {"float8_e4m3fnuz", ECT_DTYPE_F8_E4M3FNUZ},
        {"fp8_e4m3fnuz", ECT_DTYPE_F8_E4M3FNUZ},
        {"torch.float8_e4m3fnuz", ECT_DTYPE_F8_E4M3FNUZ},
        {"float8_e5m2fnuz", ECT_DTYPE_F8_E5M2FNUZ},
        {"fp8_e5m2fnuz", ECT_DTYPE_F8_E5M2FNUZ},
        {"torch.float8_e5m2fnuz", ECT_DTYPE_F8_E5M2FNUZ},
    };
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        ect_dtype_t d = (ect_dtype_t)0;
        CHECK_MSG(ect_dtype_parse(aliases[i].name, &d) == ECT_OK, "'%s' rejected: %s",
                  aliases[i].name, ect_last_error());
        CHECK_MSG(d == aliases[i].dtype, "'%s' parsed to %d, expected %d", aliases[i].name, (int)d,
                  (int)aliases[i].dtype);
    }
}

static void
test_dtype_sizes_and_names(void)
{
    static const struct {
        ect_dtype_t dtype;
        size_t size;
        const char *name, *torch;
    } want[] = {
        {ECT_DTYPE_BF16, 2, "bfloat16", "torch.bfloat16"},
        {ECT_DTYPE_F16, 2, "float16", "torch.float16"},
        {ECT_DTYPE_F32, 4, "float32", "torch.float32"},
        {ECT_DTYPE_F8_E4M3FN, 1, "float8_e4m3fn", "torch.float8_e4m3fn"},
        {ECT_DTYPE_F8_E5M2, 1, "float8_e5m2", "torch.float8_e5m2"},
        {ECT_DTYPE_F8_E4M3FNUZ, 1, "float8_e4m3fnuz", "torch.float8_e4m3fnuz"},
        {ECT_DTYPE_F8_E5M2FNUZ, 1, "float8_e5m2fnuz", "torch.float8_e5m2fnuz"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        CHECK_EQ_U64(ect_dtype_size(want[i].dtype), want[i].size);
        CHECK_STR_EQ(ect_dtype_name(want[i].dtype), want[i].name);
        CHECK_STR_EQ(ect_dtype_torch_name(want[i].dtype), want[i].torch);
        /* Both names read back as the same type. */
        ect_dtype_t d;
        CHECK_OK(ect_dtype_parse(want[i].torch, &d));
        CHECK_EQ_INT(d, want[i].dtype);
        CHECK_OK(ect_dtype_parse(want[i].name, &d));
        CHECK_EQ_INT(d, want[i].dtype);
    }
    /* Out-of-range values have no size and no name. */
    const int invalid[] = {0, 8, -1, 1000};
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        CHECK_EQ_U64(ect_dtype_size((ect_dtype_t)invalid[i]), 0);
        CHECK(ect_dtype_name((ect_dtype_t)invalid[i]) == NULL);
        CHECK(ect_dtype_torch_name((ect_dtype_t)invalid[i]) == NULL);
    }
}

static void
test_unknown_dtype_name_is_rejected_with_the_accepted_list(void)
{
    const char *bad[] = {"int8", "", "bfloat", "torch.bfloat16 ", "float64", "torch.", "fp4"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ect_dtype_t d = (ect_dtype_t)42;
        CHECK_STATUS(ect_dtype_parse(bad[i], &d), ECT_ERR_INVALID_ARG);
        CHECK_EQ_INT(d, 42);
        char quoted[64];
        snprintf(quoted, sizeof(quoted), "dtype '%s' is not one of: ", bad[i]);
        CHECK_CONTAINS(ect_last_error(), quoted);
        CHECK_CONTAINS(ect_last_error(), "float16|half|fp16|f16|torch.float16");
        CHECK_CONTAINS(ect_last_error(), "float8_e5m2fnuz|fp8_e5m2fnuz|torch.float8_e5m2fnuz");
    }
    ect_dtype_t d;
    CHECK_STATUS(ect_dtype_parse(NULL, &d), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_dtype_parse("bf16", NULL), ECT_ERR_INVALID_ARG);
}

/* ---- block geometry ----------------------------------------------------- */

static void
test_geometry_block_is_hidden_times_element_size_and_blocks_floor(void)
{
    ect_geometry_t g;
    /* Qwen2-VL-7B, bfloat16, 1 GiB: 7168-byte rows, 149796 whole rows
     * (149796 x 7168 = 1073737728, leaving 4096 bytes unused). */
    CHECK_OK(ect_geometry_init(3584, ECT_DTYPE_BF16, UINT64_C(1) << 30, &g));
    CHECK_EQ_U64(g.hidden_dim, 3584);
    CHECK_EQ_INT(g.dtype, ECT_DTYPE_BF16);
    CHECK_EQ_U64(g.block_size_bytes, 7168);
    CHECK_EQ_U64(g.num_blocks, 149796);
    CHECK_OK(ect_geometry_init(3584, ECT_DTYPE_F32, 14336 * 3 + 14335, &g));
    CHECK_EQ_U64(g.block_size_bytes, 14336);
    CHECK_EQ_U64(g.num_blocks, 3);
    CHECK_OK(ect_geometry_init(3584, ECT_DTYPE_F8_E4M3FN, 3584, &g));
    CHECK_EQ_U64(g.block_size_bytes, 3584);
    CHECK_EQ_U64(g.num_blocks, 1);
    /* The largest width in float32: 4 MiB rows. */
    CHECK_OK(ect_geometry_init(ECT_GEOMETRY_MAX_HIDDEN_DIM, ECT_DTYPE_F32, UINT64_MAX, &g));
    CHECK_EQ_U64(g.block_size_bytes, UINT64_C(4) << 20);
    CHECK_EQ_U64(g.num_blocks, UINT64_MAX / (UINT64_C(4) << 20));
}

static void
test_geometry_smaller_than_one_block_is_a_config_error(void)
{
    ect_geometry_t g;
    memset(&g, 0x11, sizeof(g));
    CHECK_STATUS(ect_geometry_init(3584, ECT_DTYPE_BF16, 7167, &g), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "ec_cpu_bytes 7167 is smaller than one block of 7168 bytes");
    CHECK_CONTAINS(ect_last_error(), "hidden_dim 3584 x 2-byte bfloat16");
    CHECK_CONTAINS(ect_last_error(), "at least 7168 bytes are needed");
    CHECK_STATUS(ect_geometry_init(3584, ECT_DTYPE_BF16, 0, &g), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "ec_cpu_bytes must be specified in ec_connector_extra_config");
    CHECK_EQ_U64(g.num_blocks, 0x1111111111111111ull);
}

static void
test_geometry_rejects_bad_width_and_dtype(void)
{
    ect_geometry_t g;
    memset(&g, 0x22, sizeof(g));
    CHECK_STATUS(ect_geometry_init(0, ECT_DTYPE_BF16, 1 << 20, &g), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "hidden_dim must be positive");
    CHECK_STATUS(ect_geometry_init(ECT_GEOMETRY_MAX_HIDDEN_DIM + 1, ECT_DTYPE_BF16, UINT64_MAX, &g),
                 ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "hidden_dim 1048577 exceeds the limit of 1048576");
    CHECK_STATUS(ect_geometry_init(UINT64_MAX, ECT_DTYPE_F32, UINT64_MAX, &g), ECT_ERR_OVERFLOW);
    CHECK_STATUS(ect_geometry_init(4096, (ect_dtype_t)0, 1 << 20, &g), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "dtype value 0 is not a known dtype");
    CHECK_STATUS(ect_geometry_init(4096, (ect_dtype_t)99, 1 << 20, &g), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_geometry_init(4096, ECT_DTYPE_BF16, 1 << 20, NULL), ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(g.hidden_dim, 0x2222222222222222ull);
}

static void
test_entry_blocks_round_up_partial_rows(void)
{
    ect_geometry_t g;
    CHECK_OK(ect_geometry_init(3584, ECT_DTYPE_BF16, 1 << 30, &g));
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, 0), 0);
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, 1), 1);
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, 7167), 1);
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, 7168), 1);
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, 7169), 2);
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, 7168 * 1000), 1000);
    /* No overflow near the top of the range. */
    CHECK_EQ_U64(ect_geometry_entry_blocks(&g, UINT64_MAX), UINT64_MAX / 7168 + 1);
    CHECK_EQ_U64(ect_geometry_entry_blocks(NULL, 100), 0);
    ect_geometry_t zero = {0};
    CHECK_EQ_U64(ect_geometry_entry_blocks(&zero, 100), 0);
}

static void
test_payload_of_n_tokens_is_n_blocks(void)
{
    ect_geometry_t g;
    CHECK_OK(ect_geometry_init(2048 * 4, ECT_DTYPE_BF16, 1 << 30, &g));
    const uint64_t tokens[] = {0, 1, 2, 255, 1024, 16384};
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        uint64_t bytes = 1;
        CHECK_OK(ect_geometry_payload_bytes(&g, tokens[i], &bytes));
        CHECK_EQ_U64(bytes, tokens[i] * 16384);
        CHECK_EQ_U64(ect_geometry_entry_blocks(&g, bytes), tokens[i]);
    }
    uint64_t bytes = 77;
    CHECK_STATUS(ect_geometry_payload_bytes(&g, UINT64_MAX / 16384 + 1, &bytes), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "overflows");
    CHECK_EQ_U64(bytes, 77);
    CHECK_OK(ect_geometry_payload_bytes(&g, UINT64_MAX / 16384, &bytes));
    CHECK_EQ_U64(bytes, (UINT64_MAX / 16384) * 16384);
    CHECK_STATUS(ect_geometry_payload_bytes(NULL, 1, &bytes), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_geometry_payload_bytes(&g, 1, NULL), ECT_ERR_INVALID_ARG);
    ect_geometry_t zero = {0};
    CHECK_STATUS(ect_geometry_payload_bytes(&zero, 1, &bytes), ECT_ERR_INVALID_ARG);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_every_dtype_alias_parses_to_its_type),
    ECT_CASE(test_dtype_sizes_and_names),
    ECT_CASE(test_unknown_dtype_name_is_rejected_with_the_accepted_list),
    ECT_CASE(test_geometry_block_is_hidden_times_element_size_and_blocks_floor),
    ECT_CASE(test_geometry_smaller_than_one_block_is_a_config_error),
    ECT_CASE(test_geometry_rejects_bad_width_and_dtype),
    ECT_CASE(test_entry_blocks_round_up_partial_rows),
    ECT_CASE(test_payload_of_n_tokens_is_n_blocks),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
