/*
 * `ectier demo`: the main job on an embedded workload.  Runs the reference
 * engine loop (examples/engine_loop.c): a scheduler process and two worker
 * processes that offload encoder outputs to the CPU tier and reload them
 * instead of encoding again, every reload checked byte for byte.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "engine_loop.h"

static const char usage[] = "usage: ectier demo [--no-progress]\n"
                            "Runs the reference engine loop on an embedded workload and prints "
                            "a summary.\n";

int
ect_cli_demo(int argc, char **argv)
{
    struct ect_loop_workload wl;
    ect_loop_default_workload(&wl);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--no-progress") == 0)
            wl.show_progress = 0;
        else
            return ect_cli_usage_error("demo", usage, "unknown argument '%s'", argv[i]);
    }
    printf("ectier demo: %u requests over media items with repeats, a %llu MiB CPU tier, "
           "tp=%u\n",
           wl.n_requests, (unsigned long long)(wl.cpu_bytes >> 20), wl.tp_size);
    struct ect_loop_summary s;
    int rc = ect_loop_run(&wl, &s);
    ect_loop_print_summary(&wl, &s);
    if (rc != 0)
        return ect_cli_fail("demo", "the engine loop failed");
    return 0;
}
