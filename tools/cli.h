/*
 * The `ectier` command-line tool: one binary, one function per subcommand.
 *
 * Each subcommand gets argc/argv starting at its own name and returns the
 * process exit status: 0 success, 1 failure, 2 usage error.  Usage errors
 * print the subcommand's help to stderr.
 */
#ifndef ECT_TOOLS_CLI_H
#define ECT_TOOLS_CLI_H

struct ect_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

/* Subcommands, one per tools/cmd_<name>.c (registered in tools/ectier.c). */
int ect_cli_bench(int argc, char **argv);
int ect_cli_config(int argc, char **argv);
int ect_cli_settings(int argc, char **argv);
int ect_cli_geometry(int argc, char **argv);
int ect_cli_gc(int argc, char **argv);
int ect_cli_inspect(int argc, char **argv);
int ect_cli_demo(int argc, char **argv);
/* P2P builds only (tools/p2p/). */
int ect_cli_producer(int argc, char **argv);
int ect_cli_consumer(int argc, char **argv);
int ect_cli_keygen(int argc, char **argv);

/* Print "ectier <cmd>: <message>" to stderr and return 2 (usage) or 1. */
int ect_cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ect_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* ECT_TOOLS_CLI_H */
