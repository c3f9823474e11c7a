/*
 * `ectier demo`: the main job on an embedded workload.  Runs the reference
 * engine loop (examples/engine_loop.c): a scheduler process and two worker
 * processes that offload encoder outputs to the CPU tier and reload them
 * instead of encoding again, every reload checked byte for byte.  Then (P2P
 * builds) a producer and a consumer process on loopback: the consumer pulls
 * the producer's encodings instead of encoding them (tools/p2p/demo_p2p.c).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ectier_build_config.h"
#include "engine_loop.h"
#if ECT_HAVE_P2P
#include "p2p/demo_p2p.h"
#endif

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
#if ECT_HAVE_P2P
    if (ect_demo_p2p(ect_loop_encode_ms(256, 3584, wl.encode_work)) != 0)
        return 1;
#else
    printf("\npeer-to-peer: not in this build (install libzmq3-dev libmsgpack-dev "
           "and rebuild)\n");
#endif
    return 0;
}
