/*
 * Helpers shared by the `ectier` subcommands (tools/cli.h): error and usage
 * messages in one format, and numbers written for people.  Kept apart from
 * main() so tests can link them.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "cli_io.h"

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

/* Three significant digits: 7.00, 14.0, 168. */
static void
three_digits(char *buf, size_t len, double v, const char *unit)
{
    if (v < 9.995)
        snprintf(buf, len, "%.2f %s", v, unit);
    else if (v < 99.95)
        snprintf(buf, len, "%.1f %s", v, unit);
    else
        snprintf(buf, len, "%.0f %s", v, unit);
}

void
ect_cli_format_bytes(char *buf, size_t len, uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%" PRIu64 " B", bytes);
        return;
    }
    double v = (double)bytes;
    size_t u = 0;
    /* Switch units at 1000 of the smaller one, so "1010 KiB" reads "0.99 MiB". */
    while (v >= 1000.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    three_digits(buf, len, v, units[u]);
}

void
ect_cli_format_seconds(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, len, "-");
    else if (s < 1e-6)
        snprintf(buf, len, "%.0f ns", s * 1e9);
    else if (s < 1e-3)
        three_digits(buf, len, s * 1e6, "us");
    else if (s < 1.0)
        three_digits(buf, len, s * 1e3, "ms");
    else if (s < 120.0)
        three_digits(buf, len, s, "s");
    else
        snprintf(buf, len, "%.1f min", s / 60.0);
}

int
ect_cli_write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int
ect_cli_read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}
