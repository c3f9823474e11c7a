/*
 * The `ectier` command-line tool: one binary, one function per subcommand.
 *
 * Each subcommand gets argc/argv starting at its own name and returns the
 * process exit status: 0 success, 1 failure, 2 usage error.  Usage errors
 * print the subcommand's help to stderr.
 */
#ifndef ECT_TOOLS_CLI_H
#define ECT_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

struct ect_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
    /* One command line that works as shown (given the files it names);
     * tools/ectier.c prints it after the command's --help. */
    const char *example;
};

/* Subcommands, one per tools/cmd_<name>.c (registered in tools/ectier.c). */
int ect_cli_bench(int argc, char **argv);
int ect_cli_config(int argc, char **argv);
int ect_cli_settings(int argc, char **argv);
int ect_cli_geometry(int argc, char **argv);
int ect_cli_gc(int argc, char **argv);
int ect_cli_inspect(int argc, char **argv);
int ect_cli_demo(int argc, char **argv);
int ect_cli_stats(int argc, char **argv);
/* P2P builds only (tools/p2p/). */
int ect_cli_producer(int argc, char **argv);
int ect_cli_consumer(int argc, char **argv);
int ect_cli_keygen(int argc, char **argv);

/* Print "ectier <cmd>: <message>" to stderr and return 2 (usage) or 1. */
int ect_cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ect_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A byte count for people, three significant digits in binary units:
 * "512 B", "7.00 KiB", "14.0 MiB", "168 GiB".  Always NUL-terminates buf. */
void ect_cli_format_bytes(char *buf, size_t len, uint64_t bytes);

/* A duration for people: "850 ns", "12.3 us", "4.20 ms", "3.50 s", "2.0 min". */
void ect_cli_format_seconds(char *buf, size_t len, double seconds);

#endif /* ECT_TOOLS_CLI_H */
