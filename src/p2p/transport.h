/*
 * P2P data transports (SPEC §8.7): a consumer reads block runs straight out
 * of a producer's region into its own region; the producer never pushes.
 *
 * Two kinds behind one interface, chosen per peer by the consumer:
 *   ucx        The producer maps its region with UCX once (ucp_mem_map on
 *              the memory we mapped ourselves) and packs a remote key.  The
 *              consumer connects to the producer's worker address and issues
 *              one ucp_get_nbx per pair of contiguous runs.  Over TCP (and
 *              for user-mapped memory over shm) UCX serves a get from the
 *              target's progress, so the producer runs a progress thread
 *              (reference/ceilings.md §6).
 *   same_host  The consumer maps the producer's region file read-only and
 *              copies with memcpy on a copy thread: no UCX, no ptrace rights.
 *              Only possible when both run on one host (same boot id) and
 *              see the same /dev/shm file (device and inode match).
 *
 * What travels in an OK XferAck (both opaque to the control plane, defined
 * here, validated on receipt, never trusted):
 *   agent_metadata  the producer's offer: magic "ECTA", version, then one
 *                   entry per transport it serves (UCX worker address;
 *                   same-host boot id, file path, device, inode, offset).
 *   mem_descriptor  the region: magic "ECTD", version, base address, block
 *                   size, block count, UCX remote key.
 * Both blobs are fixed for a producer's lifetime; different bytes from the
 * same (host, port) mean the producer restarted, and the consumer drops its
 * cached endpoint, key and mapping for that peer and uses the new ones
 * without an extra round trip.
 *
 * Every block index and length from a peer is checked against the region
 * bounds (the remote one from the descriptor, the local one from our own
 * geometry) before any byte moves.
 *
 * Threading: a server runs its own progress thread; its other functions may
 * be called from any one thread.  A client is used by one thread at a time
 * (it drives its UCX worker from read_poll and runs copies on its own
 * threads).
 */
#ifndef ECT_P2P_TRANSPORT_H
#define ECT_P2P_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/config.h>
#include <ectier/status.h>
#include <ectier/types.h>

typedef enum ect_xport_kind {
    ECT_XPORT_NONE = 0,
    ECT_XPORT_UCX = 1,
    ECT_XPORT_SAME_HOST = 2,
} ect_xport_kind_t;

/* "ucx", "same_host", "none". */
const char *ect__xport_kind_str(ect_xport_kind_t kind);

/* ---- producer side ------------------------------------------------------ */

typedef struct ect_xport_server ect_xport_server_t;

typedef struct ect_xport_server_params {
    void *data; /* the region's block 0 (borrowed for the server's life) */
    uint64_t block_size;
    uint64_t num_blocks;
    const char *region_path; /* same-host: the region file */
    uint64_t data_offset;    /* same-host: file offset of block 0 */
    int serve_ucx;           /* offer UCX */
    int serve_same_host;     /* offer the same-host path */
} ect_xport_server_params_t;

/* Start serving: map the region with UCX (if asked), start the progress
 * thread, build the offer and descriptor.  UCX failing to start is not
 * fatal when the same-host path is served (logged; the offer then lacks
 * UCX).  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_TRANSPORT (no
 * transport could be started), ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_server_start(const ect_xport_server_params_t *params,
                                     ect_xport_server_t **server_p);

/* The blobs every OK ack carries (owned by the server). */
const void *ect__xport_server_agent_metadata(const ect_xport_server_t *server, size_t *len_p);
const void *ect__xport_server_mem_descriptor(const ect_xport_server_t *server, size_t *len_p);

/* Which transports the offer contains (bit 1 << kind). */
unsigned ect__xport_server_kinds(const ect_xport_server_t *server);

/* Stop the progress thread, unmap, free.  Reads in flight from consumers
 * fail on their side.  NULL is a no-op. */
void ect__xport_server_stop(ect_xport_server_t *server);

/* ---- consumer side ------------------------------------------------------ */

typedef struct ect_xport_client ect_xport_client_t;

typedef struct ect_xport_client_params {
    void *data;          /* our region's block 0 (borrowed) */
    uint64_t block_size; /* must equal the producer's */
    uint64_t num_blocks;
    ect_transport_t prefer; /* config `transport`: auto, ucx or same_host */
    const char *region_dir; /* same-host: the only directory a peer's file may be in
                               (NULL = "/dev/shm") */
} ect_xport_client_params_t;

ect_status_t ect__xport_client_create(const ect_xport_client_params_t *params,
                                      ect_xport_client_t **client_p);

typedef struct ect_xport_read ect_xport_read_t;

typedef enum ect_xport_read_state {
    ECT_XPORT_READ_PENDING = 0,
    ECT_XPORT_READ_DONE = 1,
    ECT_XPORT_READ_FAILED = 2,
} ect_xport_read_state_t;

/* Start reading the producer's blocks remote_blocks[0..n_remote) (the ack's
 * src_block_indices, in entry order) into our blocks given by local_runs
 * (in entry order; the same number of blocks).  peer names the producer
 * ("host:port") for the endpoint cache.  Picks the transport from the offer
 * and the client's preference (auto: same-host when possible, else UCX);
 * *kind_p (optional) says which.
 * Returns ECT_OK with *read_p; ECT_ERR_PEER (malformed offer or descriptor,
 * block index outside the producer's region, block size mismatch, counts
 * differ: nothing started), ECT_ERR_OVERFLOW (local runs outside our
 * region), ECT_ERR_UNSUPPORTED (no common transport), ECT_ERR_TRANSPORT
 * (connect or post failed), ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_read_start(ect_xport_client_t *client, const char *peer,
                                   const void *agent_metadata, size_t agent_len,
                                   const void *mem_descriptor, size_t desc_len,
                                   const uint64_t *remote_blocks, size_t n_remote,
                                   const ect_run_t *local_runs, size_t n_local_runs,
                                   ect_xport_read_t **read_p, ect_xport_kind_t *kind_p);

/* Progress the client and report the read's state.  After DONE every byte
 * has landed in our region. */
ect_xport_read_state_t ect__xport_read_poll(ect_xport_client_t *client, ect_xport_read_t *read);

/* Free a read handle.  A PENDING read cannot be aborted (a DMA may still
 * land): releasing one only detaches it, and its local blocks must stay
 * fenced (the caller quarantines them).  NULL is a no-op. */
void ect__xport_read_release(ect_xport_client_t *client, ect_xport_read_t *read);

/* Drop cached state for a peer (endpoint, key, mapping), e.g. when it died. */
void ect__xport_client_forget_peer(ect_xport_client_t *client, const char *peer);

/* Counters: reads by kind, bytes, failures. */
typedef struct ect_xport_counters {
    uint64_t reads[3]; /* by ect_xport_kind_t */
    uint64_t bytes[3];
    uint64_t failures;
    uint64_t peer_restarts;
} ect_xport_counters_t;

void ect__xport_client_counters(const ect_xport_client_t *client, ect_xport_counters_t *counters_p);

/* Wait for (or detach) every read, close endpoints and mappings.  NULL is a
 * no-op. */
void ect__xport_client_destroy(ect_xport_client_t *client);

#endif /* ECT_P2P_TRANSPORT_H */
