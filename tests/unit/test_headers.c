/*
 * Every installed header (every header under include/ectier) compiles on its own, included
 * twice, as C11 and as C++17, with the warnings a strict user turns on made
 * errors.  A user includes the one header they need; this keeps each one
 * self-contained (its own includes, guards, extern "C") as headers change.
 * The compilers are the system's `cc` and `c++` (scripts/install-deps.sh
 * installs gcc and g++), as a user of the installed library would run them.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define INCLUDE_DIR ECT_SOURCE_DIR "/include"

static const char c_flags[] = "-std=c11 -Wall -Wextra -Wpedantic -Wstrict-prototypes "
                              "-Wmissing-prototypes -Wshadow -Werror -fsyntax-only";
static const char cxx_flags[] = "-std=c++17 -Wall -Wextra -Wpedantic -Wshadow -Werror "
                                "-fsyntax-only";

/* The installed headers' names, sorted; returns how many (at most cap). */
static size_t
list_headers(char names[][64], size_t cap)
{
    char dir_path[] = INCLUDE_DIR "/ectier";
    DIR *d = opendir(dir_path);
    CHECK_MSG(d != NULL, "cannot open %s", dir_path);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h") != 0)
            continue;
        CHECK_MSG(n < cap && len < 64, "too many headers or name too long: %s", e->d_name);
        snprintf(names[n++], 64, "%s", e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(names[0]), (int (*)(const void *, const void *))strcmp);
    return n;
}

/* Compile a file that includes header twice with compiler and flags; on
 * failure the test fails with the compiler's words. */
static void
compile_alone(const char *compiler, const char *flags, const char *suffix, const char *header)
{
    char dir[] = "/tmp/ect_headers_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char src[128];
    snprintf(src, sizeof(src), "%s/probe%s", dir, suffix);
    FILE *f = fopen(src, "w");
    CHECK(f != NULL);
    fprintf(f, "#include <ectier/%s>\n#include <ectier/%s>\n", header, header);
    /* Something to compile besides the header, in the language's own terms. */
    fprintf(f, "%s",
            strcmp(suffix, ".c") == 0 ? "int probe(void);\nint probe(void) { return 0; }\n"
                                      : "int main() { return 0; }\n");
    CHECK(fclose(f) == 0);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s %s -I%s %s 2>&1", compiler, flags, INCLUDE_DIR, src);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char out[4096];
    size_t len = fread(out, 1, sizeof(out) - 1, p);
    out[len] = '\0';
    int rc = pclose(p);
    unlink(src);
    rmdir(dir);
    CHECK_MSG(rc == 0, "<ectier/%s> does not compile alone with `%s %s`:\n%s", header, compiler,
              flags, out);
}

static void
require_compiler(const char *compiler)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", compiler);
    CHECK_MSG(system(cmd) == 0, "no `%s` on PATH: run scripts/install-deps.sh (gcc, g++)",
              compiler);
}

static void
test_every_header_compiles_alone_as_c11(void)
{
    require_compiler("cc");
    char names[64][64];
    size_t n = list_headers(names, 64);
    CHECK_MSG(n >= 10, "only %zu headers under %s/ectier", n, INCLUDE_DIR);
    for (size_t i = 0; i < n; i++)
        compile_alone("cc", c_flags, ".c", names[i]);
}

static void
test_every_header_compiles_alone_as_cxx17(void)
{
    require_compiler("c++");
    char names[64][64];
    size_t n = list_headers(names, 64);
    CHECK(n >= 10);
    for (size_t i = 0; i < n; i++)
        compile_alone("c++", cxx_flags, ".cpp", names[i]);
}

/* The probe is not vacuous: a header with an error is caught. */
static void
test_a_broken_header_is_caught(void)
{
    require_compiler("cc");
    char dir[] = "/tmp/ect_headers_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char src[128];
    snprintf(src, sizeof(src), "%s/probe.c", dir);
    FILE *f = fopen(src, "w");
    CHECK(f != NULL);
    /* An old-style declaration: legal C, refused by -Wstrict-prototypes. */
    fprintf(f, "#include <ectier/status.h>\nint probe();\n");
    CHECK(fclose(f) == 0);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cc %s -I%s %s >/dev/null 2>&1", c_flags, INCLUDE_DIR, src);
    int rc = system(cmd);
    unlink(src);
    rmdir(dir);
    CHECK_MSG(rc != 0, "the flags let an old-style declaration through");
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_every_header_compiles_alone_as_c11),
    ECT_CASE(test_every_header_compiles_alone_as_cxx17),
    ECT_CASE(test_a_broken_header_is_caught),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
