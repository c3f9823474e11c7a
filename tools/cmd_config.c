/*
 * `ectier config` and `ectier settings`.
 *
 * config:   validate an ec_transfer_config (given inline, as @FILE, or @- for
 *           stdin) exactly as the library will, and print the resolved
 *           values one "key = value" per line.  Exit 0 when valid, 1 with
 *           the library's message when not, 2 on a usage error.
 * settings: print the settings reference in Markdown (the README's
 *           "Settings" section is this output, checked by a test).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/config.h>

#include "cli.h"
#include "common/config_internal.h"
#include "common/settings.h"

static const char config_usage[] =
    "usage: ectier config JSON | @FILE | @-\n"
    "  Check an ec_transfer_config (inline JSON, a file, or stdin) and print the\n"
    "  resolved settings, one `key = value` per line.  The side-channel\n"
    "  environment variables are applied as the library does.\n";

static const char settings_usage[] =
    "usage: ectier settings\n"
    "  Print the settings reference (Markdown, as in README.md).\n";

/* Read at most ECT_CONFIG_JSON_MAX + 1 bytes, so the parser can refuse an
 * oversized file with its own message. */
static char *
read_input(const char *path, size_t *len_p)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    size_t cap = (size_t)ECT_CONFIG_JSON_MAX + 1, len;
    char *buf;
    if (f == NULL)
        return NULL;
    buf = malloc(cap);
    if (buf == NULL) {
        if (f != stdin)
            fclose(f);
        errno = ENOMEM;
        return NULL;
    }
    len = fread(buf, 1, cap, f);
    int failed = ferror(f);
    if (f != stdin)
        fclose(f);
    if (failed) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    *len_p = len;
    return buf;
}

static void
print_settings_help(FILE *out)
{
    struct ect__text t = {NULL, 0, 0};
    ect__settings_help(&t);
    char *buf = malloc(t.len + 1);
    if (buf == NULL)
        return;
    t = (struct ect__text){buf, t.len + 1, 0};
    ect__settings_help(&t);
    fprintf(out, "\n%s", buf);
    free(buf);
}

int
ect_cli_config(int argc, char **argv)
{
    const char *arg;
    char *owned = NULL;
    size_t len;
    ect_config_t cfg;

    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("%s", config_usage);
        print_settings_help(stdout);
        return 0;
    }
    if (argc != 2)
        return ect_cli_usage_error("config", config_usage, "expected one argument, got %d",
                                   argc - 1);
    arg = argv[1];
    if (arg[0] == '-')
        return ect_cli_usage_error("config", config_usage, "unknown option '%s'", arg);
    if (arg[0] == '@') {
        if (arg[1] == '\0')
            return ect_cli_usage_error("config", config_usage, "'@' needs a file name");
        owned = read_input(arg + 1, &len);
        if (owned == NULL)
            return ect_cli_fail("config", "cannot read %s: %s", arg + 1, strerror(errno));
        arg = owned;
    } else {
        len = strlen(arg);
    }
    ect_status_t s = ect_config_parse(arg, len, &cfg);
    free(owned);
    if (s != ECT_OK)
        return ect_cli_fail("config", "%s: %s", ect_status_str(s), ect_last_error());

    size_t need;
    if (ect_config_format(&cfg, NULL, 0, &need) != ECT_OK)
        return ect_cli_fail("config", "%s", ect_last_error());
    char *text = malloc(need + 1);
    if (text == NULL)
        return ect_cli_fail("config", "out of memory");
    if (ect_config_format(&cfg, text, need + 1, &need) != ECT_OK) {
        free(text);
        return ect_cli_fail("config", "%s", ect_last_error());
    }
    fputs(text, stdout);
    free(text);
    return 0;
}

int
ect_cli_settings(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("%s", settings_usage);
        return 0;
    }
    if (argc != 1)
        return ect_cli_usage_error("settings", settings_usage, "unexpected argument '%s'", argv[1]);
    size_t need;
    if (ect_config_settings_markdown(NULL, 0, &need) != ECT_OK)
        return ect_cli_fail("settings", "%s", ect_last_error());
    char *text = malloc(need + 1);
    if (text == NULL)
        return ect_cli_fail("settings", "out of memory");
    if (ect_config_settings_markdown(text, need + 1, &need) != ECT_OK) {
        free(text);
        return ect_cli_fail("settings", "%s", ect_last_error());
    }
    fputs(text, stdout);
    free(text);
    return 0;
}
