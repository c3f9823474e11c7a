/*
 * Internals of the P2P data transports (transport.h): the offer and
 * descriptor codec (xport_offer.c), the UCX server and client
 * (xport_ucx.c), the same-host path (xport_shm.c) and the segment list the
 * dispatcher (xport.c) hands to either.
 *
 * Blob formats (all integers little-endian; every length is checked against
 * the bytes left and every count is bounded before use; anything else is
 * ECT_ERR_PEER):
 *
 *   agent_metadata ("ECTA", the offer)
 *     "ECTA"  u32 version (1)  u32 n_entries (1..ECT_XPORT_MAX_ENTRIES)
 *     n_entries x { u32 kind  u32 len  len bytes }
 *     kind 1 (ucx):        the producer's UCX worker address
 *     kind 2 (same_host):  36-byte boot id text, u64 st_dev, u64 st_ino,
 *                          u64 data_offset, u32 path_len, path bytes
 *     Unknown kinds are skipped (a newer producer may offer more); a kind
 *     that appears twice is refused.  The blob ends exactly after the last
 *     entry.
 *
 *   mem_descriptor ("ECTD", the region)
 *     "ECTD"  u32 version (1)  u64 base  u64 block_size  u64 num_blocks
 *     u32 rkey_len (0 when UCX is not offered)  rkey bytes
 *     block_size and num_blocks are non-zero, and base + block_size *
 *     num_blocks does not overflow.  The blob ends exactly after the key.
 *
 * Decoded structs borrow their byte fields from the blob they came from.
 */
#ifndef ECT_P2P_XPORT_INTERNAL_H
#define ECT_P2P_XPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/copy.h>
#include <ectier/status.h>

#include "p2p/transport.h"

#define ECT_XPORT_BLOB_VERSION 1u
#define ECT_XPORT_MAX_ENTRIES  8u
#define ECT_XPORT_MAX_BLOB     (64u * 1024u)
#define ECT_XPORT_MAX_UCX_ADDR (16u * 1024u)
#define ECT_XPORT_MAX_RKEY     4096u
#define ECT_XPORT_MAX_PATH     4095u
#define ECT_XPORT_BOOT_ID_LEN  36u

/* A decoded agent_metadata blob.  kinds has bit (1u << kind) per entry. */
typedef struct ect_xport_offer {
    unsigned kinds;
    const uint8_t *ucx_address; /* borrowed from the blob */
    size_t ucx_address_len;
    char boot_id[ECT_XPORT_BOOT_ID_LEN + 1];
    const char *path; /* borrowed, NOT NUL-terminated: path_len bytes */
    size_t path_len;
    uint64_t dev;
    uint64_t ino;
    uint64_t data_offset;
} ect_xport_offer_t;

/* A decoded mem_descriptor blob. */
typedef struct ect_xport_desc {
    uint64_t base;
    uint64_t block_size;
    uint64_t num_blocks;
    const uint8_t *rkey; /* borrowed from the blob; NULL when rkey_len is 0 */
    size_t rkey_len;
} ect_xport_desc_t;

/* Encode an offer into a new malloc'd blob (*blob_p, *len_p; freed by the
 * caller).  Only the kinds set in offer->kinds are written.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG (a field out of the format's bounds, no kind),
 * ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_offer_encode(const ect_xport_offer_t *offer, uint8_t **blob_p,
                                     size_t *len_p);

/* Decode and validate an offer; *offer_p borrows from blob.  Returns ECT_OK
 * or ECT_ERR_PEER (the message says what is wrong and where). */
ect_status_t ect__xport_offer_decode(const void *blob, size_t len, ect_xport_offer_t *offer_p);

ect_status_t ect__xport_desc_encode(const ect_xport_desc_t *desc, uint8_t **blob_p, size_t *len_p);

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

/* Completion state of one read's operations, updated by their callbacks
 * (UCX) on the client's thread. */
typedef struct ect_xport_completion {
    size_t outstanding;  /* operations posted and not yet completed */
    ect_status_t status; /* ECT_OK, or the first failure */
    char why[160];       /* the first failure, for the log */
} ect_xport_completion_t;

/* ---- UCX (xport_ucx.c) ---------------------------------------------------- */

typedef struct ect_xport_ucx_server ect_xport_ucx_server_t;

/* Create a UCX context and worker, map [data, data + len) (the memory is
 * ours: no UCP_MEM_MAP_ALLOCATE), pack its remote key, and start the
 * progress thread.  Returns ECT_OK, ECT_ERR_TRANSPORT, ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_ucx_server_start(void *data, size_t len, ect_xport_ucx_server_t **server_p);

/* The worker address and packed remote key (owned by the server). */
const uint8_t *ect__xport_ucx_server_address(const ect_xport_ucx_server_t *server, size_t *len_p);
const uint8_t *ect__xport_ucx_server_rkey(const ect_xport_ucx_server_t *server, size_t *len_p);

/* Stop the progress thread, unmap, release.  NULL is a no-op. */
void ect__xport_ucx_server_stop(ect_xport_ucx_server_t *server);

typedef struct ect_xport_ucx_client ect_xport_ucx_client_t;
typedef struct ect_xport_ucx_peer ect_xport_ucx_peer_t;

ect_status_t ect__xport_ucx_client_create(ect_xport_ucx_client_t **client_p);

/* Close every remaining endpoint (forcing: operations still in flight
 * complete as cancelled) and release the worker and context.  NULL is a
 * no-op. */
void ect__xport_ucx_client_destroy(ect_xport_ucx_client_t *client);

/* Drive the client's worker until it has nothing more to do right now. */
void ect__xport_ucx_client_progress(ect_xport_ucx_client_t *client);

/* Connect to a producer: an endpoint to its worker address (error handling
 * mode PEER, so a dead producer fails operations instead of hanging them)
 * and its unpacked remote key.  peer_name is for messages.  Returns ECT_OK,
 * ECT_ERR_PEER (the key does not unpack), ECT_ERR_TRANSPORT, ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_ucx_peer_connect(ect_xport_ucx_client_t *client, const char *peer_name,
                                         const ect_xport_offer_t *offer,
                                         const ect_xport_desc_t *desc,
                                         ect_xport_ucx_peer_t **peer_p);

/* Non-zero once the endpoint reported an error (it is then useless). */
int ect__xport_ucx_peer_failed(const ect_xport_ucx_peer_t *peer);

/* Release the key and close the endpoint, waiting a bounded time: forcing
 * when force is set or the endpoint failed (operations still in flight then
 * complete as cancelled; their callbacks run during the close), else
 * gracefully.  NULL is a no-op. */
void ect__xport_ucx_peer_close(ect_xport_ucx_client_t *client, ect_xport_ucx_peer_t *peer,
                               int force);

/* Post one ucp_get_nbx per segment; each completion decrements
 * done->outstanding.  Returns ECT_OK when every segment was posted (or
 * completed at once); ECT_ERR_TRANSPORT when the first post failed (nothing
 * is in flight).  A later post failing is recorded in done->status and the
 * segments already posted stay in flight; ECT_OK is returned. */
ect_status_t ect__xport_ucx_post(ect_xport_ucx_client_t *client, ect_xport_ucx_peer_t *peer,
                                 const ect_xport_segment_t *segs, size_t n_segs,
                                 ect_xport_completion_t *done);

/* ---- same host (xport_shm.c) ------------------------------------------------ */

typedef struct ect_xport_shm_peer ect_xport_shm_peer_t;

/* Check that the offer's same-host entry is usable from here and map the
 * producer's region read-only: the boot id equals ours (our_boot_id), the
 * path is a plain file name directly inside region_dir, the file is a
 * regular file whose device and inode match, it is a valid ectier region,
 * and its geometry and data offset agree with the offer and descriptor.
 * Returns ECT_OK, ECT_ERR_UNSUPPORTED (not usable; the message says why),
 * ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_shm_peer_open(const ect_xport_offer_t *offer, const ect_xport_desc_t *desc,
                                      const char *region_dir, const char *our_boot_id,
                                      ect_xport_shm_peer_t **peer_p);

/* Unmap (drops the shared lock on the producer's file).  NULL is a no-op. */
void ect__xport_shm_peer_close(ect_xport_shm_peer_t *peer);

/* Submit the segments as one batch of memcpys from the mapping.  Returns
 * ECT_OK with *ticket_p, or the copy engine's failure. */
/* Copy the segments from the peer's mapping now, on the calling thread
 * (segments already validated against both regions). */
void ect__xport_shm_copy_now(const ect_xport_shm_peer_t *peer, const ect_xport_segment_t *segs,
                             size_t n_segs);

ect_status_t ect__xport_shm_post(ect_copy_engine_t *engine, const ect_xport_shm_peer_t *peer,
                                 const ect_xport_segment_t *segs, size_t n_segs,
                                 uint64_t *ticket_p);

#endif /* ECT_P2P_XPORT_INTERNAL_H */
