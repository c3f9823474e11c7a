/*
 * Encode and decode the two blobs a producer's OK ack carries: the offer
 * (agent_metadata, "ECTA") and the region descriptor (mem_descriptor,
 * "ECTD").  The formats are in xport_internal.h.
 *
 * Both come from a peer on the consumer side, so the decoders trust
 * nothing: every length is checked against the bytes left before it is
 * used, every count against a fixed bound, the blob must end exactly where
 * its last field ends, and any violation is ECT_ERR_PEER with a message that
 * names the field and the offset.  Decoded structs borrow their byte fields
 * from the blob.
 *
 * Pure functions; no locking.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/bytes.h"
#include "common/error.h"
#include "p2p/xport_internal.h"
#include "proto/wire.h"

#define AGENT_MAGIC "ECTA"
#define DESC_MAGIC  "ECTD"
#define MAGIC_LEN   4u

/* Fixed part of a same-host entry: boot id, dev, ino, data_offset, path_len. */
#define SAME_HOST_FIXED   (ECT_XPORT_BOOT_ID_LEN + 8u + 8u + 8u + 4u)
#define TCP_ENTRY_LEN     4u
#define STRIPES_ENTRY_LEN 4u
#define ALIGNED_ENTRY_LEN 4u
#define KNOWN_KINDS       ((1u << ECT_XPORT_TCP) | (1u << ECT_XPORT_SAME_HOST))

static size_t
offset_of(const ect_bytes_reader_t *r, const uint8_t *start)
{
    return (size_t)(r->p - start);
}

/* A boot id is the kernel's UUID text: 36 characters of [0-9a-f-]. */
static int
boot_id_ok(const uint8_t *s)
{
    for (size_t i = 0; i < ECT_XPORT_BOOT_ID_LEN; i++) {
        uint8_t c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- agent_metadata --------------------------------------------------------- */

static int
offer_fields_ok(const ect_xport_offer_t *o)
{
    if ((o->kinds & ~KNOWN_KINDS) != 0 || o->kinds == 0)
        return 0;
    if ((o->kinds & (1u << ECT_XPORT_TCP)) && o->tcp_port == 0)
        return 0;
    if ((o->kinds & (1u << ECT_XPORT_SAME_HOST)) &&
        (o->path == NULL || o->path_len == 0 || o->path_len > ECT_XPORT_MAX_PATH ||
         memchr(o->path, '\0', o->path_len) != NULL ||
         strlen(o->boot_id) != ECT_XPORT_BOOT_ID_LEN || !boot_id_ok((const uint8_t *)o->boot_id)))
        return 0;
    return 1;
}

ect_status_t
ect__xport_offer_encode(const ect_xport_offer_t *offer, uint8_t **blob_p, size_t *len_p)
{
    if (offer == NULL || blob_p == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "xport offer encode: NULL argument");
    if (!offer_fields_ok(offer))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport offer encode: no transport, or a field outside the format's "
                          "bounds (tcp port 1..65535, path 1..%u bytes, 36-character boot id)",
                          ECT_XPORT_MAX_PATH);
    int has_tcp = (offer->kinds & (1u << ECT_XPORT_TCP)) != 0;
    int has_shm = (offer->kinds & (1u << ECT_XPORT_SAME_HOST)) != 0;
    int has_stripes = has_tcp && offer->tcp_stripes >= 2;
    int has_aligned = has_tcp && offer->tcp_aligned;
    size_t len = MAGIC_LEN + 4 + ECT_XPORT_INSTANCE_LEN + 4;
    if (has_tcp)
        len += 8 + TCP_ENTRY_LEN;
    if (has_stripes)
        len += 8 + STRIPES_ENTRY_LEN;
    if (has_aligned)
        len += 8 + ALIGNED_ENTRY_LEN;
    if (has_shm)
        len += 8 + SAME_HOST_FIXED + offer->path_len;
    uint8_t *blob = ect__malloc(len);
    if (blob == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport offer encode: out of memory");
    ect_bytes_writer_t w = {blob, blob + len};
    ect__put_bytes(&w, AGENT_MAGIC, MAGIC_LEN);
    ect__put_u32(&w, ECT_XPORT_BLOB_VERSION);
    ect__put_bytes(&w, offer->instance, ECT_XPORT_INSTANCE_LEN);
    ect__put_u32(&w, (uint32_t)(has_tcp + has_stripes + has_aligned + has_shm));
    if (has_tcp) {
        ect__put_u32(&w, ECT_XPORT_TCP);
        ect__put_u32(&w, TCP_ENTRY_LEN);
        ect__put_u32(&w, offer->tcp_port);
    }
    if (has_stripes) {
        ect__put_u32(&w, ECT_XPORT_OFFER_TCP_STRIPES);
        ect__put_u32(&w, STRIPES_ENTRY_LEN);
        ect__put_u32(&w, offer->tcp_stripes);
    }
    if (has_aligned) {
        ect__put_u32(&w, ECT_XPORT_OFFER_TCP_ALIGNED);
        ect__put_u32(&w, ALIGNED_ENTRY_LEN);
        ect__put_u32(&w, ECT_STREAM_RESP_ALIGNED_LEN);
    }
    if (has_shm) {
        ect__put_u32(&w, ECT_XPORT_SAME_HOST);
        ect__put_u32(&w, (uint32_t)(SAME_HOST_FIXED + offer->path_len));
        ect__put_bytes(&w, offer->boot_id, ECT_XPORT_BOOT_ID_LEN);
        ect__put_u64(&w, offer->dev);
        ect__put_u64(&w, offer->ino);
        ect__put_u64(&w, offer->data_offset);
        ect__put_u32(&w, (uint32_t)offer->path_len);
        ect__put_bytes(&w, offer->path, offer->path_len);
    }
    *blob_p = blob;
    *len_p = len;
    return ECT_OK;
}

static ect_status_t
peer_error(const char *blob_name, const char *what, size_t at)
{
    return ect__error(ECT_ERR_PEER, "peer %s: %s (at byte %zu)", blob_name, what, at);
}

/* The same-host entry's payload (exactly len bytes). */
static ect_status_t
decode_same_host(const uint8_t *start, const uint8_t *p, size_t len, ect_xport_offer_t *o)
{
    ect_bytes_reader_t r = {p, p + len, 0};
    if (len < SAME_HOST_FIXED)
        return peer_error("agent_metadata", "same-host entry shorter than its fixed part",
                          (size_t)(p - start));
    const uint8_t *boot = ect__get_bytes(&r, ECT_XPORT_BOOT_ID_LEN);
    if (!boot_id_ok(boot))
        return peer_error("agent_metadata", "same-host boot id is not 36 characters of [0-9a-f-]",
                          (size_t)(boot - start));
    memcpy(o->boot_id, boot, ECT_XPORT_BOOT_ID_LEN);
    o->boot_id[ECT_XPORT_BOOT_ID_LEN] = '\0';
    o->dev = ect__get_u64(&r);
    o->ino = ect__get_u64(&r);
    o->data_offset = ect__get_u64(&r);
    uint32_t path_len = ect__get_u32(&r);
    if (path_len == 0 || path_len > ECT_XPORT_MAX_PATH)
        return peer_error("agent_metadata", "same-host path length is 0 or above 4095",
                          offset_of(&r, start) - 4);
    if (path_len != ect__remaining(&r))
        return peer_error("agent_metadata",
                          "same-host path length disagrees with the entry's length",
                          offset_of(&r, start) - 4);
    const uint8_t *path = ect__get_bytes(&r, path_len);
    if (memchr(path, '\0', path_len) != NULL)
        return peer_error("agent_metadata", "same-host path contains a NUL byte",
                          (size_t)(path - start));
    o->path = (const char *)path;
    o->path_len = path_len;
    return ECT_OK;
}

ect_status_t
ect__xport_offer_decode(const void *blob, size_t len, ect_xport_offer_t *offer_p)
{
    if (offer_p == NULL || (blob == NULL && len != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "xport offer decode: NULL argument");
    if (len == 0)
        return ect__error(ECT_ERR_PEER, "peer agent_metadata is empty (not an ectier producer?)");
    if (len > ECT_XPORT_MAX_BLOB)
        return ect__error(ECT_ERR_PEER, "peer agent_metadata is %zu bytes; at most %u allowed", len,
                          ECT_XPORT_MAX_BLOB);
    const uint8_t *start = blob;
    ect_bytes_reader_t r = {start, start + len, 0};
    const uint8_t *magic = ect__get_bytes(&r, MAGIC_LEN);
    if (magic == NULL || memcmp(magic, AGENT_MAGIC, MAGIC_LEN) != 0)
        return peer_error("agent_metadata", "bad magic (expected \"ECTA\")", 0);
    uint32_t version = ect__get_u32(&r);
    if (r.failed)
        return peer_error("agent_metadata", "truncated before the version", offset_of(&r, start));
    if (version != ECT_XPORT_BLOB_VERSION)
        return ect__error(ECT_ERR_PEER, "peer agent_metadata has version %u; this build reads %u",
                          version, ECT_XPORT_BLOB_VERSION);
    ect_xport_offer_t o;
    memset(&o, 0, sizeof(o));
    const uint8_t *instance = ect__get_bytes(&r, ECT_XPORT_INSTANCE_LEN);
    uint32_t n = ect__get_u32(&r);
    if (r.failed)
        return peer_error("agent_metadata", "truncated before the entry count",
                          offset_of(&r, start));
    memcpy(o.instance, instance, ECT_XPORT_INSTANCE_LEN);
    if (n == 0 || n > ECT_XPORT_MAX_ENTRIES)
        return ect__error(ECT_ERR_PEER, "peer agent_metadata has %u entries; 1..%u allowed", n,
                          ECT_XPORT_MAX_ENTRIES);
    unsigned seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t at = offset_of(&r, start);
        uint32_t kind = ect__get_u32(&r);
        uint32_t elen = ect__get_u32(&r);
        if (r.failed)
            return peer_error("agent_metadata", "truncated entry header", at);
        if (elen > ect__remaining(&r))
            return peer_error("agent_metadata", "entry length runs past the end", at + 4);
        const uint8_t *payload = ect__get_bytes(&r, elen);
        if (kind == ECT_XPORT_TCP || kind == ECT_XPORT_SAME_HOST ||
            kind == ECT_XPORT_OFFER_TCP_STRIPES || kind == ECT_XPORT_OFFER_TCP_ALIGNED) {
            if (seen & (1u << kind))
                return peer_error("agent_metadata", "an entry kind appears twice", at);
            seen |= 1u << kind;
        }
        if (kind == ECT_XPORT_TCP) {
            ect_bytes_reader_t e = {payload, payload + elen, 0};
            uint32_t port = ect__get_u32(&e);
            if (elen != TCP_ENTRY_LEN || port == 0 || port > 65535)
                return peer_error("agent_metadata", "tcp entry is not one port in 1..65535",
                                  at + 8);
            o.tcp_port = (uint16_t)port;
        } else if (kind == ECT_XPORT_SAME_HOST) {
            ect_status_t st = decode_same_host(start, payload, elen, &o);
            if (st != ECT_OK)
                return st;
        } else if (kind == ECT_XPORT_OFFER_TCP_STRIPES) {
            ect_bytes_reader_t e = {payload, payload + elen, 0};
            uint32_t stripes = ect__get_u32(&e);
            if (elen != STRIPES_ENTRY_LEN || stripes < 2)
                return peer_error("agent_metadata", "tcp_stripes entry is not one count >= 2",
                                  at + 8);
            o.tcp_stripes = stripes;
        } else if (kind == ECT_XPORT_OFFER_TCP_ALIGNED) {
            ect_bytes_reader_t e = {payload, payload + elen, 0};
            uint32_t resp_len = ect__get_u32(&e);
            if (elen != ALIGNED_ENTRY_LEN || resp_len != ECT_STREAM_RESP_ALIGNED_LEN)
                return peer_error("agent_metadata", "tcp_aligned entry is not one u32 64", at + 8);
            o.tcp_aligned = 1;
        }
        /* Other kinds: a newer producer's transport; skipped. */
    }
    if (ect__remaining(&r) != 0)
        return peer_error("agent_metadata", "trailing bytes after the last entry",
                          offset_of(&r, start));
    seen &= KNOWN_KINDS; /* the transports */
    if (seen == 0)
        return ect__error(ECT_ERR_PEER, "peer agent_metadata offers no transport this build knows");
    if (!(seen & (1u << ECT_XPORT_TCP))) {
        o.tcp_stripes = 0; /* stripes and aligned answers of a stream not offered */
        o.tcp_aligned = 0;
    }
    o.kinds = seen;
    *offer_p = o;
    return ECT_OK;
}

/* ---- mem_descriptor --------------------------------------------------------- */

static int
geometry_ok(uint64_t block_size, uint64_t num_blocks)
{
    return block_size != 0 && num_blocks != 0 && num_blocks <= UINT64_MAX / block_size;
}

size_t
ect__xport_desc_size(size_t n_runs)
{
    return ECT_XPORT_DESC_LEN + 16 * n_runs;
}

ect_run_t
ect__xport_desc_run(const ect_xport_desc_t *desc, size_t i)
{
    ect_bytes_reader_t r = {desc->runs + 16 * i, desc->runs + 16 * i + 16, 0};
    ect_run_t run;
    run.first = ect__get_u64(&r);
    run.count = ect__get_u64(&r);
    return run;
}

/* Runs that lie in a region of num_blocks, none empty, at most
 * ECT_WIRE_MAX_BLOCKS blocks in all. */
static int
runs_ok(const ect_run_t *runs, size_t n, uint64_t num_blocks)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (runs[i].count == 0 || runs[i].first >= num_blocks ||
            runs[i].count > num_blocks - runs[i].first ||
            runs[i].count > ECT_WIRE_MAX_BLOCKS - total)
            return 0;
        total += runs[i].count;
    }
    return 1;
}

ect_status_t
ect__xport_desc_encode(const ect_xport_desc_t *desc, const ect_run_t *runs, size_t n_runs,
                       uint8_t *out, size_t cap, size_t *len_p)
{
    if (desc == NULL || out == NULL || len_p == NULL || (runs == NULL && n_runs != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "xport descriptor encode: NULL argument");
    if (!geometry_ok(desc->block_size, desc->num_blocks))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport descriptor encode: %llu blocks of %llu bytes is not a region",
                          (unsigned long long)desc->num_blocks,
                          (unsigned long long)desc->block_size);
    if (!runs_ok(runs, n_runs, desc->num_blocks))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport descriptor encode: a run is empty or outside the %llu blocks, or "
                          "they hold more than %u blocks",
                          (unsigned long long)desc->num_blocks, ECT_WIRE_MAX_BLOCKS);
    size_t len = ect__xport_desc_size(n_runs);
    if (n_runs > (ECT_XPORT_MAX_BLOB - ECT_XPORT_DESC_LEN) / 16 || len > cap)
        return ect__error(ECT_ERR_OVERFLOW,
                          "xport descriptor encode: %zu runs take %zu bytes (room for %zu, at "
                          "most %u)",
                          n_runs, len, cap, ECT_XPORT_MAX_BLOB);
    ect_bytes_writer_t w = {out, out + len};
    ect__put_bytes(&w, DESC_MAGIC, MAGIC_LEN);
    ect__put_u32(&w, ECT_XPORT_BLOB_VERSION);
    ect__put_u64(&w, desc->block_size);
    ect__put_u64(&w, desc->num_blocks);
    ect__put_u32(&w, (uint32_t)n_runs);
    for (size_t i = 0; i < n_runs; i++) {
        ect__put_u64(&w, runs[i].first);
        ect__put_u64(&w, runs[i].count);
    }
    ect__put_bytes(&w, desc->token, ECT_STREAM_TOKEN_LEN);
    *len_p = len;
    return ECT_OK;
}

ect_status_t
ect__xport_desc_decode(const void *blob, size_t len, ect_xport_desc_t *desc_p)
{
    if (desc_p == NULL || (blob == NULL && len != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "xport descriptor decode: NULL argument");
    if (len == 0)
        return ect__error(ECT_ERR_PEER, "peer mem_descriptor is empty (not an ectier producer?)");
    if (len > ECT_XPORT_MAX_BLOB)
        return ect__error(ECT_ERR_PEER, "peer mem_descriptor is %zu bytes; at most %u allowed", len,
                          ECT_XPORT_MAX_BLOB);
    const uint8_t *start = blob;
    ect_bytes_reader_t r = {start, start + len, 0};
    const uint8_t *magic = ect__get_bytes(&r, MAGIC_LEN);
    if (magic == NULL || memcmp(magic, DESC_MAGIC, MAGIC_LEN) != 0)
        return peer_error("mem_descriptor", "bad magic (expected \"ECTD\")", 0);
    uint32_t version = ect__get_u32(&r);
    if (r.failed)
        return peer_error("mem_descriptor", "truncated before the version", offset_of(&r, start));
    if (version != ECT_XPORT_BLOB_VERSION)
        return ect__error(ECT_ERR_PEER, "peer mem_descriptor has version %u; this build reads %u",
                          version, ECT_XPORT_BLOB_VERSION);
    ect_xport_desc_t d;
    memset(&d, 0, sizeof(d));
    d.block_size = ect__get_u64(&r);
    d.num_blocks = ect__get_u64(&r);
    uint32_t n_runs = ect__get_u32(&r);
    if (r.failed)
        return peer_error("mem_descriptor", "truncated in the fixed fields", offset_of(&r, start));
    if (!geometry_ok(d.block_size, d.num_blocks))
        return ect__error(ECT_ERR_PEER,
                          "peer mem_descriptor has %llu blocks of %llu bytes: both must be "
                          "non-zero and their product fit 64 bits",
                          (unsigned long long)d.num_blocks, (unsigned long long)d.block_size);
    uint64_t want = ECT_XPORT_DESC_LEN + 16ull * n_runs; /* no overflow: n_runs < 2^32 */
    if (len != want)
        return ect__error(ECT_ERR_PEER,
                          "peer mem_descriptor is %zu bytes; with %u runs version %u has %llu", len,
                          n_runs, version, (unsigned long long)want);
    d.runs = n_runs != 0 ? ect__get_bytes(&r, 16 * (size_t)n_runs) : NULL;
    d.n_runs = n_runs;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_runs; i++) {
        ect_run_t run = ect__xport_desc_run(&d, i);
        if (run.count == 0 || run.first >= d.num_blocks || run.count > d.num_blocks - run.first ||
            run.count > ECT_WIRE_MAX_BLOCKS - total)
            return ect__error(ECT_ERR_PEER,
                              "peer mem_descriptor: run %u (blocks %llu + %llu) is empty, lies "
                              "outside its %llu blocks or passes %u blocks in all",
                              i, (unsigned long long)run.first, (unsigned long long)run.count,
                              (unsigned long long)d.num_blocks, ECT_WIRE_MAX_BLOCKS);
        total += run.count;
    }
    memcpy(d.token, ect__get_bytes(&r, ECT_STREAM_TOKEN_LEN), ECT_STREAM_TOKEN_LEN);
    *desc_p = d;
    return ECT_OK;
}
