/*
 * Fuzz target for the data transports' blobs (src/p2p/xport_offer.c).
 *
 * Every input is offered to both decoders.  An accepted offer re-encodes
 * (known kinds only; unknown entries are dropped by design) to bytes that
 * decode to the same fields, and an accepted descriptor re-encodes to the
 * very same bytes.  Every borrowed field must lie inside the input.  A
 * violation aborts, which is how a fuzzer (or the corpus replay,
 * test_fuzz_xport_offer) reports it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2p/xport_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_xport_offer: %s\n", what);
    abort();
}

static int
inside(const void *p, size_t n, const uint8_t *data, size_t size)
{
    const uint8_t *b = p;
    return b >= data && n <= size && b + n <= data + size;
}

static void
check_offer(const uint8_t *data, size_t size)
{
    ect_xport_offer_t o, again;
    if (ect__xport_offer_decode(data, size, &o) != ECT_OK)
        return;
    if (o.kinds == 0 || (o.kinds & ~((1u << ECT_XPORT_TCP) | (1u << ECT_XPORT_SAME_HOST))))
        fail("accepted offer has no known kind");
    if ((o.kinds & (1u << ECT_XPORT_TCP)) && o.tcp_port == 0)
        fail("accepted tcp entry has port 0");
    if ((o.kinds & (1u << ECT_XPORT_SAME_HOST)) && !inside(o.path, o.path_len, data, size))
        fail("path outside the input");
    uint8_t *blob;
    size_t len;
    if (ect__xport_offer_encode(&o, &blob, &len) != ECT_OK)
        fail("accepted offer does not encode");
    if (ect__xport_offer_decode(blob, len, &again) != ECT_OK || again.kinds != o.kinds)
        fail("re-encoded offer does not decode");
    if (memcmp(again.instance, o.instance, sizeof(o.instance)) != 0 || again.tcp_port != o.tcp_port)
        fail("instance or tcp port changed in a round trip");
    if ((o.kinds & (1u << ECT_XPORT_SAME_HOST)) &&
        (again.path_len != o.path_len || memcmp(again.path, o.path, o.path_len) != 0 ||
         strcmp(again.boot_id, o.boot_id) != 0 || again.dev != o.dev || again.ino != o.ino ||
         again.data_offset != o.data_offset))
        fail("same-host entry changed in a round trip");
    free(blob);
}

static void
check_desc(const uint8_t *data, size_t size)
{
    ect_xport_desc_t d;
    if (ect__xport_desc_decode(data, size, &d) != ECT_OK)
        return;
    if (d.block_size == 0 || d.num_blocks == 0 || d.num_blocks > UINT64_MAX / d.block_size)
        fail("accepted descriptor has an impossible geometry");
    if (d.n_runs != 0 && (d.runs < data || d.runs + 16 * (size_t)d.n_runs > data + size))
        fail("runs outside the input");
    ect_run_t *runs = malloc((d.n_runs ? d.n_runs : 1) * sizeof(*runs));
    uint8_t *blob = malloc(size);
    if (runs == NULL || blob == NULL)
        fail("out of memory");
    for (uint32_t i = 0; i < d.n_runs; i++) {
        runs[i] = ect__xport_desc_run(&d, i);
        if (runs[i].count == 0 || runs[i].first >= d.num_blocks ||
            runs[i].count > d.num_blocks - runs[i].first)
            fail("accepted run outside the region");
    }
    size_t len = 0;
    if (ect__xport_desc_encode(&d, runs, d.n_runs, blob, size, &len) != ECT_OK)
        fail("accepted descriptor does not encode");
    if (len != size || memcmp(blob, data, size) != 0)
        fail("descriptor round trip changed its bytes");
    free(blob);
    free(runs);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so a read past the end is a sanitizer error. */
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    check_offer(copy, size);
    check_desc(copy, size);
    free(copy);
    return 0;
}
