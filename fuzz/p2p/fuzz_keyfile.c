/*
 * Fuzz target for the control plane's key-file and allow-list parsers
 * (src/p2p/control_curve.c).
 *
 * The input becomes a file (a memfd, read through /proc/self/fd) and is
 * offered as a producer's key file, a consumer's key file, to the
 * public-key reader and as an allow-list.  Whatever is accepted must hold
 * up: keys are 40 Z85 characters, the secret derives the public key, a
 * consumer's file has the producer's key and a producer's has none, and an
 * allow-list holds at least one key.  A refusal must name the file.  A
 * violation aborts, which is how a fuzzer (or the corpus replay,
 * test_fuzz_keyfile) reports it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include <ectier/status.h>

#include "p2p/control.h"
#include "p2p/control_curve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_keyfile: %s\n", what);
    abort();
}

static void
check_refusal(ect_status_t st, const char *path)
{
    if (st != ECT_ERR_CONFIG)
        fail("a refusal that is not ECT_ERR_CONFIG");
    if (strstr(ect_last_error(), path) == NULL)
        fail("a refusal that does not name the file");
}

static void
check_keys(const char *path, bool want_server)
{
    ect_ctl_keys_t keys;
    ect_status_t st = ect__ctl_keys_load(path, want_server, &keys);
    if (st != ECT_OK) {
        check_refusal(st, path);
        return;
    }
    char derived[41];
    if (!ect__ctl_z85_key_valid(keys.public_key) || !ect__ctl_z85_key_valid(keys.secret_key) ||
        zmq_curve_public(derived, keys.secret_key) != 0 || strcmp(derived, keys.public_key) != 0)
        fail("accepted a key pair that does not hold together");
    if (want_server != ect__ctl_z85_key_valid(keys.server_key))
        fail("a server key present where it must not be, or missing where it must");
    ect__ctl_keys_wipe(&keys);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_keyfile", MFD_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0600) != 0 || (size != 0 && write(fd, data, size) != (ssize_t)size))
        fail("cannot make the input file");
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);

    check_keys(path, false);
    check_keys(path, true);
    char pub[41];
    ect_status_t st = ect__ctl_keyfile_public(path, pub);
    if (st == ECT_OK && !ect__ctl_z85_key_valid(pub))
        fail("public-key reader returned a bad key");
    if (st != ECT_OK)
        check_refusal(st, path);
    uint8_t(*keys)[ECT_CTL_CURVE_KEY_BYTES];
    size_t n;
    st = ect__ctl_allow_list_load(path, &keys, &n);
    if (st == ECT_OK) {
        if (n == 0)
            fail("an allow-list accepted with no key");
        free(keys);
    } else {
        check_refusal(st, path);
    }
    close(fd);
    return 0;
}
