/*
 * `ectier keygen`: make a CURVE key pair file for the control plane
 * (SPEC §9.6).  Without a server option it is a producer's key file; with
 * --server-public or --server-key-file it is a consumer's, which also holds
 * the producer's public key.  The file is created with mode 0600 and never
 * replaces an existing one.  The new public key is printed alone on stdout,
 * so `ectier keygen --out c.key >> allowed_clients` builds an allow-list.
 *
 * Exit status: 0 written, 1 failure (file exists, I/O, unreadable server
 * key file), 2 bad arguments (with the usage text).
 */
#include <stdio.h>
#include <string.h>

#include <ectier/status.h>

#include "cli.h"
#include "p2p/control.h"

static const char usage[] =
    "usage: ectier keygen --out FILE [--server-public KEY | --server-key-file FILE]\n"
    "\n"
    "Write a new CURVE key pair to FILE (mode 0600; an existing file is never replaced)\n"
    "and print its public key.\n"
    "\n"
    "  --out FILE              the key file to create\n"
    "  --server-public KEY     make a consumer's key file for the producer whose public\n"
    "                          key is KEY (40 Z85 characters)\n"
    "  --server-key-file FILE  the same, reading the producer's public key from its key file\n";

/* "--name VALUE" or "--name=VALUE" at argv[*i]: the value, or NULL when
 * argv[*i] is another option; *missing when the value is absent. */
static const char *
take_option(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    const char *arg = argv[*i];
    if (strncmp(arg, name, n) != 0)
        return NULL;
    if (arg[n] == '=')
        return arg + n + 1;
    if (arg[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int
ect_cli_keygen(int argc, char **argv)
{
    const char *out = NULL, *server_public = NULL, *server_key_file = NULL;
    for (int i = 1; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s", usage);
            return 0;
        } else if ((v = take_option(argc, argv, &i, "--out", &missing)) != NULL) {
            out = v;
        } else if ((v = take_option(argc, argv, &i, "--server-public", &missing)) != NULL) {
            server_public = v;
        } else if ((v = take_option(argc, argv, &i, "--server-key-file", &missing)) != NULL) {
            server_key_file = v;
        } else if (missing) {
            return ect_cli_usage_error("keygen", usage, "%s needs a value", argv[i]);
        } else {
            return ect_cli_usage_error("keygen", usage, "unknown argument '%s'", argv[i]);
        }
    }
    if (out == NULL || *out == '\0')
        return ect_cli_usage_error("keygen", usage, "--out FILE is required");
    if (server_public != NULL && server_key_file != NULL)
        return ect_cli_usage_error("keygen", usage,
                                   "give --server-public or --server-key-file, not both");
    if (server_public != NULL && strlen(server_public) != 40)
        return ect_cli_usage_error("keygen", usage,
                                   "--server-public must be a 40-character Z85 key (got %zu "
                                   "characters)",
                                   strlen(server_public));
    char server_key[41];
    if (server_key_file != NULL) {
        if (ect__ctl_keyfile_public(server_key_file, server_key) != ECT_OK)
            return ect_cli_fail("keygen", "%s", ect_last_error());
        server_public = server_key;
    }
    ect_status_t st = ect__ctl_keyfile_generate(out, server_public);
    if (st == ECT_ERR_INVALID_ARG)
        return ect_cli_usage_error("keygen", usage, "%s", ect_last_error());
    if (st != ECT_OK)
        return ect_cli_fail("keygen", "%s", ect_last_error());
    char public_key[41];
    if (ect__ctl_keyfile_public(out, public_key) != ECT_OK)
        return ect_cli_fail("keygen", "%s", ect_last_error());
    printf("%s\n", public_key);
    return 0;
}
