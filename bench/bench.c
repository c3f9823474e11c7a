/*
 * `ectier bench [NAME...]`: runs the registered benchmarks (all by default).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "ectier_build_config.h"

static const struct ect_bench benches[] = {
    {"cache", "cache ops at 1K vs 1M entries; runs per entry after 1M random ops", ect_bench_cache},
    {"copy", "cpu copy engine save/load of 1-32 MiB entries vs memcpy", ect_bench_copy},
    {"cuda", "CUDA copy engine: save/load vs one pinned copy; overlap with compute",
     ect_bench_cuda},
    {"region", "first copies into a region with and without pre-fault", ect_bench_region},
    {"step", "scheduler+worker save/load steps of 1-32 MiB entries vs memcpy", ect_bench_step},
#if ECT_HAVE_P2P
    {"control", "control-plane round trip vs bare ZeroMQ DEALER/ROUTER", ect_bench_control},
    {"session", "producer XferReq->XferAck round trip vs bare ZeroMQ; acks/s with 8 consumers",
     ect_bench_session},
    {"xport", "P2P reads of 1-32 MiB entries: the TCP stream vs bare TCP, same-host vs memcpy",
     ect_bench_xport},
#endif
    {NULL, NULL, NULL},
};

void
ect_bench_row(const char *what, double value, double ceiling, const char *unit, double target)
{
    double ratio = ceiling > 0 ? value / ceiling : 0.0;
    printf("  %-44s %10.3f %-6s ceiling %10.3f %-6s ratio %5.2f", what, value, unit, ceiling, unit,
           ratio);
    if (target > 0)
        printf("  (target %.2f%s)", target, ratio >= target ? "" : ", MISSED");
    printf("\n");
}

int
ect_cli_bench(int argc, char **argv)
{
    static const char usage[] = "usage: ectier bench [NAME...]\n";
    int rc = 0, ran = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%sbenchmarks:\n", usage);
            for (const struct ect_bench *b = benches; b->name != NULL; b++)
                printf("  %-12s %s\n", b->name, b->summary);
            return 0;
        }
    }
    for (const struct ect_bench *b = benches; b->name != NULL; b++) {
        int wanted = argc < 2;
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], b->name) == 0)
                wanted = 1;
        if (!wanted)
            continue;
        printf("== bench %s: %s\n", b->name, b->summary);
        fflush(stdout);
        ran++;
        if (b->run(1, (char *[]){(char *)b->name, NULL}) != 0)
            rc = 1;
    }
    if (ran == 0 && argc >= 2)
        return ect_cli_usage_error("bench", usage, "no benchmark named '%s'", argv[1]);
    return rc;
}
