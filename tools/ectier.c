/*
 * `ectier`: the command-line entry point.  Dispatches to one function per
 * subcommand (tools/cli.h); each lives in tools/cmd_<name>.c.
 *
 * Before that it raises its soft RLIMIT_NOFILE to the hard limit (at most
 * FD_SOFT_MAX): a producer serves many consumers, each connection a
 * descriptor, and at the soft limit libzmq 4.3 turns every new connection
 * into a busy loop (src/p2p/control.c).  The CLI owns its process, so it
 * may; the library never changes process limits, since it lives in the
 * engine's process, whose limits are the engine's to choose (code that
 * still uses select() breaks above 1024 descriptors).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include <ectier/ectier.h>

#include "cli.h"
#include "ectier_build_config.h"

/* No more: some code walks every possible descriptor (close loops). */
#define FD_SOFT_MAX 65536

static int cli_version(int argc, char **argv);

static void
raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want =
        rl.rlim_max == RLIM_INFINITY || rl.rlim_max > FD_SOFT_MAX ? FD_SOFT_MAX : rl.rlim_max;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = want;
        setrlimit(RLIMIT_NOFILE, &rl); /* best effort: the old limit still works */
    }
}

/* Examples use the files and ports of the README's walk-through. */
#define P2P_ARGS "--model m --hidden 3584 --dtype bf16"

static const struct ect_cli_command commands[] = {
    {"bench", "run the benchmarks, each against its ceiling", ect_cli_bench,
     "ectier bench cache copy"},
    {"config", "check an ec_transfer_config and print the resolved settings", ect_cli_config,
     "ectier config '{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\",\n"
     "      \"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"1GiB\"}}'"},
#if ECT_HAVE_P2P
    {"consumer", "run a consumer instance that fetches announced encodings", ect_cli_consumer,
     "ectier consumer --config @consumer.json " P2P_ARGS " \\\n"
     "      --params params.jsonl --verify-pattern"},
#endif
    {"demo", "run the reference engine loop on an embedded workload", ect_cli_demo,
     "ectier demo --no-progress"},
    {"gc", "remove orphaned regions (no live holder) from /dev/shm", ect_cli_gc,
     "ectier gc --dry-run"},
    {"geometry", "compute the block geometry from a model's config.json", ect_cli_geometry,
     "ectier geometry --hf-config Qwen2-VL-7B-Instruct/config.json --cpu-bytes 8GiB"},
#if ECT_HAVE_P2P
    {"keygen", "make a CURVE key pair file for the control plane", ect_cli_keygen,
     "ectier keygen --out producer.key"},
#endif
    {"inspect", "show the regions in /dev/shm: geometry, holders, age", ect_cli_inspect,
     "ectier inspect --json"},
#if ECT_HAVE_P2P
    {"producer", "run a producer instance that serves encodings to consumers", ect_cli_producer,
     "ectier producer --config @producer.json " P2P_ARGS " \\\n"
     "      --listen 127.0.0.1:0 --fill 16 --tokens 1024 > params.jsonl"},
#endif
    {"stats", "summarise a running instance's metrics endpoint, once or --watch", ect_cli_stats,
     "ectier stats 127.0.0.1:9400 --watch"},
    {"settings", "print the settings reference (Markdown)", ect_cli_settings,
     "ectier settings > settings.md"},
    {"version", "print the version and what this build includes", cli_version, "ectier version"},
};

static const size_t n_commands = sizeof(commands) / sizeof(commands[0]);

static int
cli_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("ectier %s (p2p: %s, cuda: %s)\n", ect_version(), ect_has_p2p() ? "yes" : "no",
           ect_has_cuda() ? "yes" : "no");
    return 0;
}

/* Whether argv asks for help (a command prints its usage for these). */
static int
asks_for_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

/* Run a command; after its help, show the example (one table for all of
 * them, so every command has one). */
static int
run_command(const struct ect_cli_command *c, int argc, char **argv)
{
    int rc = c->run(argc, argv);
    if (rc == 0 && asks_for_help(argc, argv)) {
        printf("\nexample:\n  %s\n", c->example);
        fflush(stdout);
    }
    return rc;
}

static void
print_help(FILE *out)
{
    fprintf(out, "usage: ectier <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < n_commands; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`ectier <command> --help` describes one command.\n");
}

int
main(int argc, char **argv)
{
    raise_fd_limit();
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_help(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0)
        return cli_version(argc - 1, argv + 1);
    for (size_t i = 0; i < n_commands; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return run_command(&commands[i], argc - 1, argv + 1);
    fprintf(stderr, "ectier: unknown command '%s'\n\n", argv[1]);
    print_help(stderr);
    return 2;
}
