/*
 * The core library references no transfer library (SPEC §1.1): the seed's
 * "gate-off path imports no transfer libraries" rule, made checkable.  We ask
 * nm for the undefined symbols of libectier_core.a and fail on any ZeroMQ,
 * UCX or msgpack-c symbol.
 */
#include "harness.h"

static const char *const forbidden_prefixes[] = {"zmq_", "ucp_", "uct_",
                                                 "ucs_", "ucm_", "msgpack_"};

static void
test_core_references_no_transfer_library(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "nm -u --format=posix '%s' 2>&1", ECT_CORE_LIB_PATH);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[1024];
    unsigned undefined = 0;
    while (fgets(line, sizeof(line), p) != NULL) {
        char sym[512];
        if (sscanf(line, "%511s", sym) != 1)
            continue;
        undefined++;
        for (size_t i = 0; i < sizeof(forbidden_prefixes) / sizeof(forbidden_prefixes[0]); i++)
            CHECK_MSG(strncmp(sym, forbidden_prefixes[i], strlen(forbidden_prefixes[i])) != 0,
                      "core references %s", sym);
    }
    CHECK_EQ_INT(pclose(p), 0);
    /* The check itself must see something: the core does call libc. */
    CHECK_MSG(undefined > 10, "nm listed only %u undefined symbols", undefined);
}

static void
test_core_has_its_public_symbols(void)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "nm --defined-only --format=posix '%s' | grep -c '^ect_status_str '",
             ECT_CORE_LIB_PATH);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    int count = 0;
    CHECK(fscanf(p, "%d", &count) == 1);
    pclose(p);
    CHECK_EQ_INT(count, 1);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_core_references_no_transfer_library),
    ECT_CASE(test_core_has_its_public_symbols),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
