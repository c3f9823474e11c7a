/*
 * `ectier demo` end to end: the reference engine loop (examples/engine_loop.c)
 * runs a scheduler and two worker processes over a real /dev/shm region,
 * reloads entries from the CPU tier, verifies every reload against a fresh
 * encode, and leaves nothing behind.
 */
#include <dirent.h>
#include <sys/wait.h>

#include "harness.h"

static size_t
count_loop_regions(void)
{
    DIR *d = opendir("/dev/shm");
    CHECK(d != NULL);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "ectier_loop", 11) == 0)
            n++;
    closedir(d);
    return n;
}

static unsigned long long
field(const char *out, const char *label)
{
    const char *at = strstr(out, label);
    CHECK_MSG(at != NULL, "no '%s' in the demo's output:\n%s", label, out);
    return strtoull(at + strlen(label), NULL, 10);
}

static void
test_demo_reloads_from_the_cpu_tier_and_verifies_every_byte(void)
{
    size_t before = count_loop_regions();
    FILE *p = popen(ECT_CLI_PATH " demo --no-progress 2>&1", "r");
    CHECK(p != NULL);
    static char out[65536];
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    int st = pclose(p);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "demo failed:\n%s", out);
    CHECK(field(out, "CPU-tier hits") > 0);
    CHECK(field(out, "CPU-tier evictions") > 0);
    CHECK(field(out, "verified reloads") > 0);
    CHECK_CONTAINS(out, "; 0 mismatches)");
    /* Every rank verifies every reload. */
    CHECK_EQ_U64(field(out, "verified reloads"), 2 * field(out, "CPU-tier hits"));
    CHECK_EQ_U64(count_loop_regions(), before);
}

static void
test_demo_rejects_unknown_arguments(void)
{
    int st = system(ECT_CLI_PATH " demo --bogus >/dev/null 2>&1");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_demo_reloads_from_the_cpu_tier_and_verifies_every_byte),
    ECT_CASE(test_demo_rejects_unknown_arguments),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
