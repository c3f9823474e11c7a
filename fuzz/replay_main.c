/*
 * Replays a fuzz target's corpus as an ordinary test program.
 *
 * Every file in ECT_FUZZ_CORPUS_DIR (baked in by the build, or the first
 * argument) is fed once to LLVMFuzzerTestOneInput.  A crash or sanitizer
 * report ends the program without its summary line, which the test runner
 * counts as a failure.  An empty or missing corpus is a failure too: a fuzz
 * target without inputs tests nothing.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ECT_FUZZ_CORPUS_DIR;
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    DIR *d = opendir(dir);
    unsigned passed = 0, failed = 0;
    if (d == NULL) {
        printf("FAIL corpus %s: cannot open\n", dir);
        failed++;
    } else {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            size_t len;
            char *buf = ect_test_read_file(path, &len);
            LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
            free(buf);
            passed++;
        }
        closedir(d);
        if (passed == 0) {
            printf("FAIL corpus %s: empty\n", dir);
            failed++;
        } else {
            printf("PASS %u corpus inputs from %s\n", passed, dir);
        }
    }
    printf("%s: %u passed, %u failed, 0 skipped\n", prog, passed, failed);
    return failed == 0 ? 0 : 1;
}
