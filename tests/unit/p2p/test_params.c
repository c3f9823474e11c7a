/*
 * The ec_transfer_params codec (src/proto/params.c): what the producer
 * announces decodes back to the same items; the decoder refuses what is
 * not JSON, not an object, a duplicate or over-long key; an announcement of
 * the wrong shape fails only the lookup of its own hash, naming the field.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/types.h>

#include "proto/params.h"

#include "harness.h"

static void
test_encoded_items_decode_to_the_same_fields(void)
{
    ect_params_item_t items[] = {
        {.mm_hash = "aa",
         .metadata_json = "{\"offset\": 3, \"length\": 9}",
         .served = 1,
         .peer_host = "10.0.0.7",
         .peer_port = 5601,
         .size_bytes = 7168 * 9},
        {.mm_hash = "bb", .served = 0},
        {.mm_hash = "cc",
         .metadata_json = "[not an object",
         .served = 1,
         .peer_host = "h",
         .peer_port = 1,
         .size_bytes = 0},
    };
    char *json = NULL;
    CHECK_OK(ect__params_encode(items, 3, &json));
    CHECK_CONTAINS(json, "\"bb\":{\"metadata\":{}}");
    CHECK_CONTAINS(json, "\"offset\":3");
    ect_params_t *p = NULL;
    CHECK_OK(ect__params_decode(json, &p));
    ect_params_item_t it;
    CHECK_OK(ect__params_find(p, "aa", &it));
    CHECK(it.served);
    CHECK_STR_EQ(it.peer_host, "10.0.0.7");
    CHECK_EQ_INT(it.peer_port, 5601);
    CHECK_EQ_U64(it.size_bytes, 7168 * 9);
    CHECK_OK(ect__params_find(p, "bb", &it));
    CHECK(!it.served); /* neither half */
    CHECK_OK(ect__params_find(p, "cc", &it));
    CHECK(it.served && it.size_bytes == 0);
    CHECK_STATUS(ect__params_find(p, "dd", &it), ECT_ERR_NOT_FOUND);
    ect__params_destroy(p);
    free(json);
    /* Nothing at all is an empty object. */
    CHECK_OK(ect__params_encode(NULL, 0, &json));
    CHECK_STR_EQ(json, "{}");
    free(json);
}

/* Sizes up to 2^53 - 1 come back exactly: cJSON's own number printing
 * rounds integers above 2^51 to 15 digits (the fuzzer found
 * 9007199254704869 coming back as 9007199254704870). */
static void
test_sizes_up_to_two_to_the_53_come_back_exactly(void)
{
    static const uint64_t sizes[] = {(1ull << 51) + 1, 9007199254704869ull, 1000000000000001ull,
                                     (1ull << 53) - 1};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        ect_params_item_t item = {
            .mm_hash = "h", .served = 1, .peer_host = "h", .peer_port = 8, .size_bytes = sizes[i]};
        char *json = NULL;
        CHECK_OK(ect__params_encode(&item, 1, &json));
        char want[64];
        snprintf(want, sizeof(want), "\"size_bytes\":%llu}", (unsigned long long)sizes[i]);
        CHECK_CONTAINS(json, want);
        ect_params_t *p = NULL;
        CHECK_OK(ect__params_decode(json, &p));
        ect_params_item_t back;
        CHECK_OK(ect__params_find(p, "h", &back));
        CHECK_EQ_U64(back.size_bytes, sizes[i]);
        ect__params_destroy(p);
        free(json);
    }
}

static void
test_encode_refuses_items_it_cannot_announce(void)
{
    char *json = (char *)"untouched";
    ect_params_item_t no_hash = {.mm_hash = ""};
    CHECK_STATUS(ect__params_encode(&no_hash, 1, &json), ECT_ERR_INVALID_ARG);
    ect_params_item_t no_host = {.mm_hash = "a", .served = 1, .peer_port = 1};
    CHECK_STATUS(ect__params_encode(&no_host, 1, &json), ECT_ERR_INVALID_ARG);
    ect_params_item_t no_port = {.mm_hash = "a", .served = 1, .peer_host = "h"};
    CHECK_STATUS(ect__params_encode(&no_port, 1, &json), ECT_ERR_INVALID_ARG);
    ect_params_item_t huge = {
        .mm_hash = "a", .served = 1, .peer_host = "h", .peer_port = 1, .size_bytes = UINT64_MAX};
    CHECK_STATUS(ect__params_encode(&huge, 1, &json), ECT_ERR_INVALID_ARG);
    CHECK_STR_EQ(json, "untouched");
}

static void
test_decode_refuses_what_is_not_one_object_with_unique_short_keys(void)
{
    static const char *const bad[] = {
        "",
        "[1, 2]",
        "\"text\"",
        "{\"a\": 1",
        "{\"a\": {}} {}",
        "{\"a\": {}, \"a\": {}}",
        "{\"\\u0000\": {}}",
        "{\"a\": \"\xff\"}",
        "{\"a\": 0123}",
        "{\"\": {}}", /* no mm_hash is empty (the encoder refuses one) */
        "{\"a\": {}, \"\": {\"metadata\": {}, \"peer_host\": \"h\", \"peer_port\": 1, "
        "\"size_bytes\": 1}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ect_params_t *p = (ect_params_t *)(uintptr_t)1;
        CHECK_MSG(ect__params_decode(bad[i], &p) == ECT_ERR_PARSE, "case %zu decoded", i);
        CHECK(p == (ect_params_t *)(uintptr_t)1);
    }
    CHECK_STATUS(ect__params_decode("{\"a\": {}, \"a\": {}}", &(ect_params_t *){NULL}),
                 ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "\"a\" is given twice");
    /* A key longer than any mm_hash. */
    size_t n = ECT_KEY_MAX + 16;
    char *json = malloc(n + 16);
    json[0] = '{';
    json[1] = '"';
    memset(json + 2, 'k', ECT_KEY_MAX + 1);
    strcpy(json + 3 + ECT_KEY_MAX, "\": {}}");
    ect_params_t *p = NULL;
    CHECK_STATUS(ect__params_decode(json, &p), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "a key of 1025 bytes (an mm_hash is 1 .. 1024)");
    free(json);
    /* Many items are fine (a request may carry hundreds of images). */
    char *many = malloc(1000 * 24 + 8);
    size_t len = 0;
    many[len++] = '{';
    for (int i = 0; i < 1000; i++)
        len += (size_t)sprintf(many + len, "%s\"h%d\": {}", i ? ", " : "", i);
    strcpy(many + len, "}");
    CHECK_OK(ect__params_decode(many, &p));
    ect_params_item_t it;
    CHECK_OK(ect__params_find(p, "h999", &it));
    ect__params_destroy(p);
    free(many);
}

static void
test_an_announcement_of_the_wrong_shape_fails_only_its_own_lookup(void)
{
    const char *json = "{\"ok\": {\"metadata\": {}, \"peer_host\": \"h\", \"peer_port\": 9, "
                       "\"size_bytes\": 128},"
                       "\"half\": {\"metadata\": {}, \"peer_host\": \"h\"},"
                       "\"port\": {\"peer_host\": \"h\", \"peer_port\": 70000, \"size_bytes\": 1},"
                       "\"size\": {\"peer_host\": \"h\", \"peer_port\": 9, \"size_bytes\": -1},"
                       "\"frac\": {\"peer_host\": \"h\", \"peer_port\": 9.5, \"size_bytes\": 1},"
                       "\"str\": {\"peer_host\": \"h\", \"peer_port\": \"9\", \"size_bytes\": 1},"
                       "\"host\": {\"peer_host\": 7, \"peer_port\": 9, \"size_bytes\": 1},"
                       "\"meta\": {\"metadata\": [1]},"
                       "\"num\": 123}";
    ect_params_t *p = NULL;
    CHECK_OK(ect__params_decode(json, &p));
    ect_params_item_t it;
    CHECK_OK(ect__params_find(p, "ok", &it));
    CHECK(it.served && it.peer_port == 9 && it.size_bytes == 128);
    static const struct {
        const char *hash, *why;
    } cases[] = {
        {"half", "peer_port"}, {"port", "peer_port"},    {"size", "size_bytes"},
        {"frac", "peer_port"}, {"str", "peer_port"},     {"host", "peer_host"},
        {"meta", "metadata"},  {"num", "not an object"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CHECK_MSG(ect__params_find(p, cases[i].hash, &it) == ECT_ERR_PARSE, "'%s' decoded",
                  cases[i].hash);
        CHECK_CONTAINS(ect_last_error(), cases[i].why);
        CHECK_CONTAINS(ect_last_error(), cases[i].hash);
    }
    ect__params_destroy(p);
    ect__params_destroy(NULL);
}

static const struct ect_test_case test_cases[] = {
    ECT_CASE(test_encoded_items_decode_to_the_same_fields),
    ECT_CASE(test_sizes_up_to_two_to_the_53_come_back_exactly),
    ECT_CASE(test_encode_refuses_items_it_cannot_announce),
    ECT_CASE(test_decode_refuses_what_is_not_one_object_with_unique_short_keys),
    ECT_CASE(test_an_announcement_of_the_wrong_shape_fails_only_its_own_lookup),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, test_cases);
}
