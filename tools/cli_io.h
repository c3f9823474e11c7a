/*
 * Whole reads and writes on a descriptor, for the CLI, its benchmarks and
 * the test helpers that drive child processes over pipes and sockets
 * (tools/cli_util.c; its own header so that it does not clash with
 * tests/support/cli.h).
 */
#ifndef ECT_TOOLS_CLI_IO_H
#define ECT_TOOLS_CLI_IO_H

#include <stddef.h>

/* Write (read) all len bytes of buf to (from) fd, retrying short transfers
 * and EINTR.  Returns 0, or -1 on an error or (reading) end of file. */
int ect_cli_write_full(int fd, const void *buf, size_t len);
int ect_cli_read_full(int fd, void *buf, size_t len);

#endif /* ECT_TOOLS_CLI_IO_H */
