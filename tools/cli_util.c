/*
 * Helpers shared by the `ectier` subcommands (tools/cli.h): error and usage
 * messages in one format.  Kept apart from main() so tests can link them.
 */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

int
ect_cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ectier %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    if (usage != NULL)
        fprintf(stderr, "%s", usage);
    return 2;
}

int
ect_cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ectier %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}
