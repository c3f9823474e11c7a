/*
 * The peer-compatibility hash (src/proto/compat.c, SPEC §8.2): the JSON text
 * must be what Python's json.dumps prints, byte for byte, or an ectier peer
 * and a Python peer refuse each other.
 *
 * The expected texts and hashes below were produced by /usr/bin/python3
 * (json.dumps(..., separators=(",", ":")), hashlib.sha256) and are committed,
 * so the test stands without Python; one case re-derives them with Python
 * when it is installed.
 */
#include "harness.h"
#include "proto/wire.h"

struct hash_case {
    const char *version, *model, *dtype;
    uint64_t block_size;
    const char *text; /* what Python prints */
    const char *hash;
};

/* The control characters 0x01..0x1f and DEL, in order. */
#define ALL_CONTROLS                                                                               \
    "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16"     \
    "\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f"

static const struct hash_case cases_table[] = {
    /* SPEC §8.2's two examples. */
    {"0.11.0", "Qwen/Qwen2-VL-7B-Instruct", "torch.bfloat16", 7168,
     "[\"0.11.0\",\"Qwen/Qwen2-VL-7B-Instruct\",\"torch.bfloat16\",7168]",
     "e5aa20f73125bdda9864ed0f48a40ab5c1c964812da6acc351d581f1c8b00dd1"},
    {"0.11.0", "Qwen/Qwen2-VL-7B-Instruct", "torch.bfloat16", 7169,
     "[\"0.11.0\",\"Qwen/Qwen2-VL-7B-Instruct\",\"torch.bfloat16\",7169]",
     "8fa983ae6820cf5b19e63270348b536aa45d9f4a644eb1e6dc0a198dc95d94a1"},
    /* é and CJK as \uXXXX with lowercase hex; '/' is not escaped. */
    {"0.11.0", "caf\xc3\xa9/\xe4\xb8\xad\xe6\x96\x87-\xe6\xa8\xa1\xe5\x9e\x8b", "torch.float16", 1,
     "[\"0.11.0\",\"caf\\u00e9/\\u4e2d\\u6587-\\u6a21\\u578b\",\"torch.float16\",1]",
     "fc5cce07442d0b023ac5870da3e1dd0d7e3600a288ca197aa63a5c5f1cbcc899"},
    /* An astral emoji as a surrogate pair; quote and backslash. */
    {"v\xf0\x9f\x98\x80", "a\"b\\c", "torch.float32", 0,
     "[\"v\\ud83d\\ude00\",\"a\\\"b\\\\c\",\"torch.float32\",0]",
     "3d241aa34c81ed5653b9d935cd2df642cc8c829c6f2c2f321baa07f9b928afc0"},
    /* Every control character and DEL (Python escapes DEL too); the
     * largest block size. */
    {ALL_CONTROLS, "m", "torch.bfloat16", UINT64_MAX,
     "[\"\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f"
     "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b"
     "\\u001c\\u001d\\u001e\\u001f\\u007f\",\"m\",\"torch.bfloat16\",18446744073709551615]",
     "e73198d94f3010bca8ab9850c7acbaccd3ca5ff95cedb17563a721d87343156d"},
    /* Empty strings. */
    {"", "", "", 7, "[\"\",\"\",\"\",7]",
     "1f09bdd427c533bb8a4f153ace4ef4f15fa53269ff64b7f653a2df29dd01e316"},
    /* The edges of each UTF-8 length: U+0080, U+07FF, U+0800, U+FFFF,
     * U+10000, U+10FFFF. */
    {"\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", "x", "torch.int8",
     42, "[\"\\u0080\\u07ff\\u0800\\uffff\\ud800\\udc00\\udbff\\udfff\",\"x\",\"torch.int8\",42]",
     "28cf2dd7607ca23fd5cb7e3e2106b6c38c8fa521f5453e49025479406afbdaed"},
};

#define N_CASES (sizeof(cases_table) / sizeof(cases_table[0]))

static void
test_text_is_what_python_json_dumps_prints(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        const struct hash_case *c = &cases_table[i];
        ect__wire_buf_t text;
        ect__wire_buf_init(&text);
        CHECK_OK(ect__compat_text(c->version, c->model, c->dtype, c->block_size, &text));
        CHECK_OK(ect__wire_buf_append(&text, "", 1));
        CHECK_MSG(strcmp((const char *)text.data, c->text) == 0, "case %zu: %s\n  expected %s", i,
                  (const char *)text.data, c->text);
        ect__wire_buf_cleanup(&text);
    }
}

static void
test_hash_is_lowercase_hex_sha256_of_the_text(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        const struct hash_case *c = &cases_table[i];
        char hex[65];
        memset(hex, 'Z', sizeof(hex));
        CHECK_OK(ect__compat_hash(c->version, c->model, c->dtype, c->block_size, hex));
        CHECK_MSG(strcmp(hex, c->hash) == 0, "case %zu: %s\n  expected %s", i, hex, c->hash);
    }
}

/* Any difference in any factor changes the hash. */
static void
test_each_factor_changes_the_hash(void)
{
    char base[65], other[65];
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", 7168, base));
    CHECK_OK(ect__compat_hash("0.11.1", "m", "torch.bfloat16", 7168, other));
    CHECK(strcmp(base, other) != 0);
    CHECK_OK(ect__compat_hash("0.11.0", "n", "torch.bfloat16", 7168, other));
    CHECK(strcmp(base, other) != 0);
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.float16", 7168, other));
    CHECK(strcmp(base, other) != 0);
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", 7167, other));
    CHECK(strcmp(base, other) != 0);
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", 7168, other));
    CHECK_STR_EQ(base, other);
}

static void
test_invalid_utf8_and_null_are_refused_and_output_untouched(void)
{
    static const char *const bad[] = {
        "\x80",             /* lone continuation byte */
        "a\xc0\xaf",        /* overlong '/' */
        "\xc1\xbf",         /* overlong, lead c1 */
        "\xe0\x80\xaf",     /* overlong three-byte */
        "\xf0\x80\x80\xaf", /* overlong four-byte */
        "\xed\xa0\x80",     /* UTF-16 surrogate U+D800 */
        "\xed\xbf\xbf",     /* UTF-16 surrogate U+DFFF */
        "\xf4\x90\x80\x80", /* U+110000 */
        "\xf5\x80\x80\x80", /* lead beyond f4 */
        "\xff",             /* never valid */
        "\xe4\xb8",         /* truncated CJK */
        "\xf0\x9f\x98",     /* truncated emoji */
        "\xc3(",            /* bad continuation */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char hex[65];
        memset(hex, 'Z', sizeof(hex));
        CHECK_STATUS(ect__compat_hash("0.11.0", bad[i], "torch.bfloat16", 1, hex),
                     ECT_ERR_INVALID_ARG);
        CHECK_CONTAINS(ect_last_error(), "model has invalid UTF-8");
        CHECK_STATUS(ect__compat_hash(bad[i], "m", "torch.bfloat16", 1, hex), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect__compat_hash("v", "m", bad[i], 1, hex), ECT_ERR_INVALID_ARG);
        for (size_t j = 0; j < sizeof(hex); j++)
            CHECK(hex[j] == 'Z');
        ect__wire_buf_t text;
        ect__wire_buf_init(&text);
        CHECK_OK(ect__wire_buf_append(&text, "keep", 4));
        CHECK_STATUS(ect__compat_text("v", bad[i], "d", 1, &text), ECT_ERR_INVALID_ARG);
        CHECK_EQ_U64(text.len, 4);
        ect__wire_buf_cleanup(&text);
    }
    char hex[65];
    CHECK_STATUS(ect__compat_hash(NULL, "m", "d", 1, hex), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__compat_hash("v", NULL, "d", 1, hex), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__compat_hash("v", "m", NULL, 1, hex), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__compat_hash("v", "m", "d", 1, NULL), ECT_ERR_INVALID_ARG);
}

static void
append_hex_arg(char *cmd, size_t cap, const char *s)
{
    size_t at = strlen(cmd);
    at += (size_t)snprintf(cmd + at, cap - at, " x");
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++)
        at += (size_t)snprintf(cmd + at, cap - at, "%02x", *p);
    CHECK(at < cap);
}

/* Re-derive the committed values (and a few more) with the real thing. */
static void
test_python_agrees_when_installed(void)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        SKIP("no /usr/bin/python3");
    static const char script[] =
        "import hashlib, json, sys; "
        "a = [bytes.fromhex(x[1:]).decode() for x in sys.argv[1:4]] + [int(sys.argv[4])]; "
        "t = json.dumps(a, separators=(\",\", \":\")); "
        "print(hashlib.sha256(t.encode()).hexdigest())";
    static const struct {
        const char *version, *model, *dtype;
        uint64_t block_size;
    } extra[] = {
        {"1.0.0rc1+cu124", "meta-llama/Llama-3.2-11B-Vision-Instruct", "torch.float8_e4m3fn",
         1u << 20},
        {"\xe2\x80\xa8\xe2\x80\xa9", "tab\there\\\"", "\xef\xbb\xbftorch.bfloat16", 3},
        {"\x7f\x7e\x20\x1f", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "torch.uint8", 9999999999ull},
    };
    size_t total = N_CASES + sizeof(extra) / sizeof(extra[0]);
    for (size_t i = 0; i < total; i++) {
        const char *v, *m, *d;
        uint64_t bs;
        if (i < N_CASES) {
            v = cases_table[i].version, m = cases_table[i].model, d = cases_table[i].dtype;
            bs = cases_table[i].block_size;
        } else {
            v = extra[i - N_CASES].version, m = extra[i - N_CASES].model;
            d = extra[i - N_CASES].dtype, bs = extra[i - N_CASES].block_size;
        }
        /* Arguments travel as hex ("x" keeps an empty one non-empty), so no
         * shell quoting of control characters is involved. */
        char cmd[4096];
        snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c '%s'", script);
        append_hex_arg(cmd, sizeof(cmd), v);
        append_hex_arg(cmd, sizeof(cmd), m);
        append_hex_arg(cmd, sizeof(cmd), d);
        size_t at = strlen(cmd);
        snprintf(cmd + at, sizeof(cmd) - at, " %llu", (unsigned long long)bs);
        FILE *p = popen(cmd, "r");
        CHECK(p != NULL);
        char line[128] = {0};
        CHECK(fgets(line, sizeof(line), p) != NULL);
        CHECK_EQ_INT(pclose(p), 0);
        line[strcspn(line, "\n")] = '\0';
        char ours[65];
        CHECK_OK(ect__compat_hash(v, m, d, bs, ours));
        CHECK_MSG(strcmp(line, ours) == 0, "case %zu: python %s, ours %s", i, line, ours);
        if (i < N_CASES)
            CHECK_STR_EQ(line, cases_table[i].hash);
    }
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_text_is_what_python_json_dumps_prints),
    ECT_CASE(test_hash_is_lowercase_hex_sha256_of_the_text),
    ECT_CASE(test_each_factor_changes_the_hash),
    ECT_CASE(test_invalid_utf8_and_null_are_refused_and_output_untouched),
    ECT_CASE(test_python_agrees_when_installed),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
