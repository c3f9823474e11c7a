/*
 * Internals of the P2P data transports (transport.h): the offer and
 * descriptor codec (xport_offer.c), the TCP stream server and client
 * (xport_tcp_server.c, xport_tcp_client.c), the same-host path (xport_shm.c) and the segment list
 * the dispatcher (xport.c) hands to either.
 *
 * Blob formats (all integers little-endian; every length is checked against
 * the bytes left and every count is bounded before use; anything else is
 * ECT_ERR_PEER):
 *
 *   agent_metadata ("ECTA", the offer; fixed for a producer's lifetime)
 *     "ECTA"  u32 version (2)  instance[16]  u32 n_entries (1..8)
 *     n_entries x { u32 kind  u32 len  len bytes }
 *     kind 1 (tcp):        u32 port (1..65535): the producer's data stream
 *                          port, on the host the consumer reached the
 *                          control plane at
 *     kind 2 (same_host):  36-byte boot id text, u64 st_dev, u64 st_ino,
 *                          u64 data_offset, u32 path_len, path bytes
 *     kind 3 (tcp_stripes): u32 max_stripes (>= 2): the tcp stream serves
 *                          a grant in up to that many stripes
 *                          (proto/stream.h); a consumer uses at most
 *                          ECT_STREAM_MAX_STRIPES.  Absent: one stream per
 *                          grant.  Not a transport of its own.
 *     kind 4 (tcp_aligned): u32 64 (ECT_STREAM_RESP_ALIGNED_LEN): the tcp
 *                          stream answers stream requests of versions 3
 *                          and 4 with that many bytes of header, so that
 *                          payloads keep their blocks' alignment
 *                          (proto/stream.h).  Absent: versions 1 and 2
 *                          only.  Not a transport of its own.
 *     instance is random per producer start: a restarted producer on the
 *     same port sends a different offer.  Unknown kinds are skipped (a newer
 *     producer may offer more; an ectier before kind 3 skips it and streams
 *     unstriped, one before kind 4 asks for 16-byte headers); a kind that
 *     appears twice is refused.  The
 *     blob ends exactly after the last entry.  Version 1 (ectier 0.1, UCX
 *     worker addresses) is refused.
 *
 *   mem_descriptor ("ECTD", one grant)
 *     "ECTD"  u32 version (2)  u64 block_size  u64 num_blocks
 *     u32 n_runs  n_runs x { u64 first  u64 count }  token[ECT_STREAM_TOKEN_LEN]
 *     block_size and num_blocks (the producer's region) are non-zero and
 *     their product does not overflow; the runs (only for a consumer that
 *     asked for them with "ectier_runs", else 0 and the ack's
 *     src_block_indices name the blocks) each lie in the region, count > 0,
 *     at most ECT_WIRE_MAX_BLOCKS blocks in all; the token names the grant
 *     on the data stream (proto/stream.h) and is the last field.  Exactly
 *     ect__xport_desc_size(n_runs) bytes.  It carries no address of the
 *     producer's memory.
 *
 * Decoded structs borrow their byte fields from the blob they came from.
 */
#ifndef ECT_P2P_XPORT_INTERNAL_H
#define ECT_P2P_XPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ectier/copy.h>
#include <ectier/status.h>

#include "common/error.h"
#include "p2p/transport.h"
#include "proto/stream.h"

#define ECT_XPORT_BLOB_VERSION 2u
#define ECT_XPORT_MAX_ENTRIES  8u
#define ECT_XPORT_MAX_BLOB     (64u * 1024u)
#define ECT_XPORT_MAX_PATH     4095u
#define ECT_XPORT_BOOT_ID_LEN  36u
#define ECT_XPORT_INSTANCE_LEN 16u
#define ECT_XPORT_POOL_KEY_MAX 360u
/* iovecs one sendmsg/recvmsg of the stream passes (the kernel's UIO_MAXIOV):
 * an entry of one-block runs moves in as few calls as a contiguous one (at
 * 64 a 7 MiB entry of 1024 runs took 16 calls a side and ran 15-25 %
 * slower than one run). */
#define ECT_XPORT_STREAM_IOV 1024u
/* While a tcp read's payload arrives, its socket wakes the receive thread
 * only once enough bytes are queued (SO_RCVLOWAT; the kernel grows the
 * receive buffer to fit, and a closing window still wakes it): up to
 * ECT_XPORT_STREAM_RCVLOWAT_MAX at a time in the middle of a read, then
 * the last ECT_XPORT_STREAM_RCVLOWAT (or all that is left), so what is
 * copied after the last byte lands stays at most that much.  Each wake-up
 * costs the sending side too (the loopback sender's CPU runs the wake), so
 * fewer of them let it send faster.  Waking for every segment, an 8-32 MiB
 * read on the project's VM ran at 1.6-1.9 GB/s; with a mark of 256 KiB
 * all through, 2.0-3.7 GB/s; with 1 MiB in the middle (2 wake-ups for a
 * 1 MiB payload instead of 4, 9 for 8 MiB instead of 32) the medians of 6
 * runs of `ectier bench xport` per build, each build in each place of the
 * order, went from 0.67-0.70 to 0.72-0.92 of the bare TCP ceiling at 8 MiB,
 * 0.46-0.61 to 0.49-0.71 at 1 MiB and 0.93-0.98 to 0.99-1.10 at 32 MiB;
 * four consumers reading 8 MiB at once from 0.95 to 0.87 (eight busy
 * threads on two CPUs).  In the same runs a 2 MiB mark did no better at
 * 8 MiB and worse at 32 MiB (better only for the four consumers), and
 * taking the answer's header with the first mark, instead of waking for
 * the first segment, did worse at 1 and 32 MiB.  A last part of 512 KiB
 * did worse on every single-read row (scripts/bench-ab.py, 4 runs each),
 * one of 128 KiB within noise of 256 KiB. */
#define ECT_XPORT_STREAM_RCVLOWAT     (256u * 1024u)
#define ECT_XPORT_STREAM_RCVLOWAT_MAX (1024u * 1024u)

/* The receive mark for a read with left > 0 bytes still to come (see
 * above): all of them up to ECT_XPORT_STREAM_RCVLOWAT; up to twice that,
 * ECT_XPORT_STREAM_RCVLOWAT; beyond, all but the last
 * ECT_XPORT_STREAM_RCVLOWAT, at most ECT_XPORT_STREAM_RCVLOWAT_MAX.
 * Never 0, never more than left. */
static inline int
ect__xport_stream_rcvlowat(uint64_t left)
{
    if (left <= ECT_XPORT_STREAM_RCVLOWAT)
        return left > 0 ? (int)left : 1;
    if (left <= 2ull * ECT_XPORT_STREAM_RCVLOWAT)
        return (int)ECT_XPORT_STREAM_RCVLOWAT;
    uint64_t middle = left - ECT_XPORT_STREAM_RCVLOWAT;
    return middle < ECT_XPORT_STREAM_RCVLOWAT_MAX ? (int)middle
                                                  : (int)ECT_XPORT_STREAM_RCVLOWAT_MAX;
}

/* The least a stripe of a tcp read carries: a read is striped only where
 * each stripe gets at least this much (smaller ones gain less from another
 * connection than its request and wake-up cost). */
#define ECT_XPORT_STRIPE_MIN_BYTES (1024u * 1024u)

/* Our own region as a server or client is given it: whole blocks that fit
 * this process's address space (a peer's geometry is checked by the
 * descriptor's decoder instead).  ECT_OK, or ECT_ERR_INVALID_ARG naming
 * who. */
static inline ect_status_t
ect__xport_check_own_region(const char *who, uint64_t block_size, uint64_t num_blocks)
{
    if (block_size == 0 || num_blocks == 0 || num_blocks > SIZE_MAX / block_size)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: %llu blocks of %llu bytes is not a region", who,
                          (unsigned long long)num_blocks, (unsigned long long)block_size);
    return ECT_OK;
}

/* The offer entries that are not transports: the stream takes stripes,
 * and it answers aligned (proto/stream.h). */
#define ECT_XPORT_OFFER_TCP_STRIPES 3u
#define ECT_XPORT_OFFER_TCP_ALIGNED 4u

/* A decoded agent_metadata blob.  kinds has bit (1u << kind) per transport
 * entry. */
typedef struct ect_xport_offer {
    unsigned kinds;
    uint8_t instance[ECT_XPORT_INSTANCE_LEN];
    uint16_t tcp_port;
    uint32_t tcp_stripes; /* the tcp_stripes entry's; 0 when absent (written when >= 2) */
    int tcp_aligned;      /* 1: the tcp_aligned entry is there (written when non-zero) */
    char boot_id[ECT_XPORT_BOOT_ID_LEN + 1];
    const char *path; /* borrowed, NOT NUL-terminated: path_len bytes */
    size_t path_len;
    uint64_t dev;
    uint64_t ino;
    uint64_t data_offset;
} ect_xport_offer_t;

/* A decoded mem_descriptor blob. */
typedef struct ect_xport_desc {
    uint64_t block_size;
    uint64_t num_blocks;
    uint8_t token[ECT_STREAM_TOKEN_LEN];
    const uint8_t *runs; /* borrowed from the blob: n_runs packed pairs; NULL when 0 */
    uint32_t n_runs;
} ect_xport_desc_t;

/* Run i (< desc->n_runs) of a decoded descriptor. */
ect_run_t ect__xport_desc_run(const ect_xport_desc_t *desc, size_t i);

/* Encode an offer into a new malloc'd blob (*blob_p, *len_p; freed by the
 * caller).  Only the kinds set in offer->kinds are written.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG (a field out of the format's bounds, no kind),
 * ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_offer_encode(const ect_xport_offer_t *offer, uint8_t **blob_p,
                                     size_t *len_p);

/* Decode and validate an offer; *offer_p borrows from blob.  Returns ECT_OK
 * or ECT_ERR_PEER (the message says what is wrong and where). */
ect_status_t ect__xport_offer_decode(const void *blob, size_t len, ect_xport_offer_t *offer_p);

/* Write a descriptor with desc's geometry and token and the given runs
 * (desc->runs is ignored) into out (cap bytes); *len_p gets its length.
 * Returns ECT_OK; ECT_ERR_INVALID_ARG (zero or overflowing geometry, a run
 * outside the region or empty, too many blocks); ECT_ERR_OVERFLOW (cap too
 * small or beyond ECT_XPORT_MAX_BLOB). */
ect_status_t ect__xport_desc_encode(const ect_xport_desc_t *desc, const ect_run_t *runs,
                                    size_t n_runs, uint8_t *out, size_t cap, size_t *len_p);

ect_status_t ect__xport_desc_decode(const void *blob, size_t len, ect_xport_desc_t *desc_p);

/* This host's boot id (/proc/sys/kernel/random/boot_id without the newline)
 * into out.  Returns ECT_OK or ECT_ERR_IO. */
ect_status_t ect__xport_boot_id(char out[ECT_XPORT_BOOT_ID_LEN + 1]);

/* One contiguous move: remote bytes [remote_off, remote_off + len) from the
 * producer's block 0 into local. */
typedef struct ect_xport_segment {
    uint64_t remote_off;
    void *local;
    size_t len;
} ect_xport_segment_t;

/* ---- TCP stream (xport_tcp_server.c, xport_tcp_client.c) -------------------- */

/* TCP_NODELAY on a socket (best effort). */
void ect__xport_set_nodelay(int fd);

/* Resolve host (an IP address or a name; IPv4 preferred, as the control
 * plane does) and port.  passive: for bind.  Returns ECT_OK or
 * ECT_ERR_TRANSPORT (does not resolve). */
ect_status_t ect__xport_resolve(const char *host, uint16_t port, int passive,
                                struct sockaddr_storage *addr_p, socklen_t *len_p);

typedef struct ect_xport_stream_server ect_xport_stream_server_t;

/* Bind the data stream's listener at params->bind_host:params->tcp_port and
 * start its thread.  Returns ECT_OK, ECT_ERR_INVALID_ARG,
 * ECT_ERR_TRANSPORT (bind failed: the message names the address),
 * ECT_ERR_IO, ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_stream_server_start(const ect_xport_server_params_t *params,
                                            ect_xport_stream_server_t **server_p);

uint16_t ect__xport_stream_server_port(const ect_xport_stream_server_t *server);

void ect__xport_stream_server_counters(ect_xport_stream_server_t *server,
                                       ect_xport_server_counters_t *counters_p);

/* Stop the thread; streams in progress are cut and their grants finished
 * (not sent).  NULL is a no-op. */
void ect__xport_stream_server_stop(ect_xport_stream_server_t *server);

typedef struct ect_xport_stream_client ect_xport_stream_client_t;
typedef struct ect_xport_stream_read ect_xport_stream_read_t;

/* A client with its receive thread.  wake (optional) is called whenever a
 * read settles (DONE or FAILED): from the receive thread, or from the
 * thread in the call that settled it (read_start, cancel, free), always
 * after the client's lock is let go, so it may poll or free reads of this
 * client (from then on the read's state is final).  It must be short: the
 * receive thread receives nothing while it runs. */
ect_status_t ect__xport_stream_client_create(void (*wake)(void *), void *wake_arg,
                                             ect_xport_stream_client_t **client_p);

/* Cut every read still in flight, close pooled connections, stop the
 * thread.  Nothing lands in anyone's memory after it returns.  NULL is a
 * no-op. */
void ect__xport_stream_client_destroy(ect_xport_stream_client_t *client);

/* Send request (req_len bytes, copied) to addr over a pooled connection to
 * pool_key (or a new one), take its answer's header of resp_len bytes (what
 * ect__stream_resp_len says of the request) and receive exactly expect
 * bytes into segs (in order; their local pointers and lengths are used,
 * remote_off ignored).  Returns ECT_OK with *read_p, ECT_ERR_INVALID_ARG,
 * ECT_ERR_TRANSPORT (no socket), ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_stream_read_start(ect_xport_stream_client_t *client,
                                          const struct sockaddr_storage *addr, socklen_t addr_len,
                                          const char *pool_key, const uint8_t *request,
                                          size_t req_len, size_t resp_len,
                                          const ect_xport_segment_t *segs, size_t n_segs,
                                          uint64_t expect, ect_xport_stream_read_t **read_p);

/* The read's state; on FAILED the reason is copied to why (cap bytes). */
ect_xport_read_state_t ect__xport_stream_read_state(ect_xport_stream_client_t *client,
                                                    ect_xport_stream_read_t *read, char *why,
                                                    size_t cap);

/* Cut a PENDING read now: its connection is closed and no byte of it lands
 * after this returns; it is then FAILED.  A settled read is left as is. */
void ect__xport_stream_read_cancel(ect_xport_stream_client_t *client,
                                   ect_xport_stream_read_t *read);

/* Free a read (cancelling it first if it is still PENDING).  NULL is a
 * no-op. */
void ect__xport_stream_read_free(ect_xport_stream_client_t *client, ect_xport_stream_read_t *read);

/* ---- same host (xport_shm.c) ------------------------------------------------ */

typedef struct ect_xport_shm_peer ect_xport_shm_peer_t;

/* Check that the offer's same-host entry is usable from here and map the
 * producer's region read-only: the boot id equals ours (our_boot_id), the
 * path is a plain file name directly inside region_dir, the file is a
 * regular file whose device and inode match, it is a valid ectier region,
 * and its geometry and data offset agree with the offer and descriptor.
 * With touch_pages, a thread then reads one byte of every page of the
 * mapping in the background (see xport_shm.c; joined by close).  Returns ECT_OK,
 * ECT_ERR_UNSUPPORTED (not usable; the message says why), ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_shm_peer_open(const ect_xport_offer_t *offer, const ect_xport_desc_t *desc,
                                      const char *region_dir, const char *our_boot_id,
                                      int touch_pages, ect_xport_shm_peer_t **peer_p);

/* Unmap (drops the shared lock on the producer's file).  NULL is a no-op. */
void ect__xport_shm_peer_close(ect_xport_shm_peer_t *peer);

/* Read one byte of every page of [base, base + len) through the kernel (a
 * writev of one-byte segments into a pipe, drained as it goes), so that
 * the stream's send() and recv(), which reach the region's pages from the
 * kernel, find them ready.  A process's own touch (the region's prefault)
 * is not enough under a hypervisor that shadows page tables: the kernel's
 * first access to each page through the process's mapping traps again,
 * about 5 us a page on the project's VMs, so a stream of pages the kernel
 * had not reached before ran at 0.3 GB/s instead of 1.5-3 (measured with
 * `ectier consumer --one-at-a-time` over TCP, 8 MiB entries: 15-35 ms a
 * fetch before, 2.4-5.8 ms after).  Changes no byte.  Best effort: without
 * a pipe it does nothing (the stream is slower, not wrong).  base must be
 * page-aligned.  Thread safety: safe. */
void ect__xport_touch_from_kernel(const void *base, size_t len);

/* Submit the segments as one copy batch from the mapping to engine (a CPU
 * engine), which calls landed(landed_arg) once on the thread that copies
 * its last byte (maybe inside this call: ect__copy_cpu_submit_notify).
 * Returns ECT_OK with *ticket_p, or the copy engine's failure. */
ect_status_t ect__xport_shm_post(ect_copy_engine_t *engine, const ect_xport_shm_peer_t *peer,
                                 const ect_xport_segment_t *segs, size_t n_segs,
                                 void (*landed)(void *), void *landed_arg, uint64_t *ticket_p);

#endif /* ECT_P2P_XPORT_INTERNAL_H */
