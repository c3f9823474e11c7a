/*
 * P2P data transports (SPEC §8.7).
 *
 * The invariant: a peer obtains exactly the bytes of the entries it holds a
 * grant for, while it holds it, and nothing else of the producer's memory
 * can be read, written or made to fault, whatever the peer sends.  So every
 * read is producer-validated: no transport lets a consumer name an address
 * in the producer's memory.  Two kinds behind one interface, chosen per
 * peer by the consumer:
 *
 *   tcp        ectier's own stream (proto/stream.h).  The producer listens
 *              on one TCP port, bound to the control plane's address.  The
 *              consumer names its grant (session id, mm_hash and the
 *              128-bit random token that came only in the XferAck, over the
 *              control plane: encrypted when CURVE is on); the producer
 *              checks it against its grant table (one stream per grant,
 *              only while the grant is live) and sends exactly the entry's
 *              runs, each run one contiguous piece of a writev straight out
 *              of the region; the consumer receives them with readv
 *              straight into its blocks.  The producer's only copy is the
 *              kernel's (region pages to socket buffers).  The data bytes
 *              are NOT encrypted.
 *   same_host  The consumer maps the producer's region file read-only and
 *              copies with memcpy: no producer CPU, no ptrace rights.  Only
 *              possible when both run on one host (same boot id) and see
 *              the same /dev/shm file (device and inode match) and the
 *              consumer may open it (the file is 0600: the same user).
 *              Such a consumer can read the whole region; a process of the
 *              producer's own user can read all of its memory anyway.
 *
 * Why not UCX (ectier 0.1 used ucp_get_nbx against the mapped region): on
 * the transports UCX has without RDMA hardware (tcp, posix/sysv shared
 * memory, cma), UCX serves one-sided operations in software without
 * checking the remote key, so any peer that reaches its listener (bound to
 * every interface) can read and write the whole process and crash it; and
 * Debian's UCX 1.13 aborts the producer when a peer dies with sends
 * pending.  On RDMA hardware one-sided reads against per-grant
 * registrations would keep the invariant; ectier does not offer that path
 * (no such hardware here to test it on).
 *
 * What travels in an OK XferAck (opaque to the control plane, defined in
 * xport_internal.h, validated on receipt, never trusted):
 *   agent_metadata  the producer's offer: its instance id and one entry per
 *                   transport (tcp port; same-host boot id, path, device,
 *                   inode, offset).  Fixed for a producer's lifetime:
 *                   different bytes from the same (host, port) mean it
 *                   restarted, and the consumer drops what it cached for it.
 *   mem_descriptor  the grant: the region's block size and count, and the
 *                   grant's token.
 *
 * Every block index and length from a peer is checked against the region
 * bounds (the remote one from the descriptor, the local one from our own
 * geometry) before any byte moves.
 *
 * Threading: a server runs its own thread; the grant callbacks are called
 * from it.  A client is used by one thread at a time (reads are received on
 * the client's own thread and copies run on its copy threads).
 */
#ifndef ECT_P2P_TRANSPORT_H
#define ECT_P2P_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/config.h>
#include <ectier/copy.h>
#include <ectier/status.h>
#include <ectier/types.h>

#include "proto/stream.h"

typedef enum ect_xport_kind {
    ECT_XPORT_NONE = 0,
    ECT_XPORT_TCP = 1,
    ECT_XPORT_SAME_HOST = 2,
} ect_xport_kind_t;

#define ECT_XPORT_KINDS 3

/* "tcp", "same_host", "none". */
const char *ect__xport_kind_str(ect_xport_kind_t kind);

/* A fresh grant token from a CSPRNG (OpenSSL's DRBG, seeded by the
 * kernel; drawn a batch at a time).  Returns ECT_OK or ECT_ERR_IO (no
 * randomness: no token, never a weak one).  Thread safety: safe.  A forked
 * child never hands out a token its parent drew. */
ect_status_t ect__xport_new_token(uint8_t token[ECT_STREAM_TOKEN_LEN]);

/* ---- producer side ------------------------------------------------------ */

typedef struct ect_xport_server ect_xport_server_t;

/* What a claimed grant lets the stream send: the entry's runs in entry
 * order (borrowed until finish) and their total size in bytes. */
typedef struct ect_xport_grant_view {
    const ect_run_t *runs;
    size_t n_runs;
    uint64_t bytes;
} ect_xport_grant_view_t;

/* The producer's grant table, as the stream server sees it.  Both are
 * called on the server's threads, several at once: they must be
 * thread-safe. */
typedef struct ect_xport_grant_ops {
    void *user;
    /* A peer names a grant (NUL-terminated strings, at most
     * ECT_WIRE_MAX_STR bytes).  ECT_STREAM_OK: *view_p and *grant_p are
     * set, the grant is used up (one stream per grant) and its entry stays
     * pinned until finish.  ECT_STREAM_DENIED: no live grant of that name
     * and token.  ECT_STREAM_SIZE_MISMATCH: live, but expect_bytes is not
     * its size (the grant is used up too). */
    ect_stream_status_t (*claim)(void *user, const char *session_id, const char *mm_hash,
                                 const uint8_t token[ECT_STREAM_TOKEN_LEN], uint64_t expect_bytes,
                                 ect_xport_grant_view_t *view_p, void **grant_p);
    /* The stream of a claimed grant ended: sent says whether every byte was
     * handed to the kernel. */
    void (*finish)(void *user, void *grant, int sent);
} ect_xport_grant_ops_t;

typedef struct ect_xport_server_params {
    void *data; /* the region's block 0 (borrowed for the server's life) */
    uint64_t block_size;
    uint64_t num_blocks;
    const char *region_path;             /* same-host: the region file */
    uint64_t data_offset;                /* same-host: file offset of block 0 */
    const char *bind_host;               /* tcp: the control plane's host (bind address) */
    uint16_t tcp_port;                   /* tcp: 0 = a free port */
    uint64_t send_timeout_ns;            /* tcp: a stream that takes longer is cut */
    const ect_xport_grant_ops_t *grants; /* tcp: required; copied */
    int serve_tcp;
    int serve_same_host;
    /* tcp: read every page of the region once through the kernel at start
     * (the region's `prefault` setting; see ect__xport_touch_from_kernel). */
    int touch_pages;
} ect_xport_server_params_t;

/* Start serving: bind the stream listener and start its thread (tcp),
 * describe the region file (same-host), build the offer.  A transport that
 * fails to start is an error when it was the only one asked for, else
 * logged and left out of the offer.  Returns ECT_OK, ECT_ERR_INVALID_ARG,
 * ECT_ERR_TRANSPORT, ECT_ERR_IO, ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_server_start(const ect_xport_server_params_t *params,
                                     ect_xport_server_t **server_p);

/* The offer every OK ack carries (owned by the server). */
const void *ect__xport_server_agent_metadata(const ect_xport_server_t *server, size_t *len_p);

/* Size of a grant's descriptor (the mem_descriptor blob) without runs;
 * each run adds 16 bytes. */
#define ECT_XPORT_DESC_LEN (4u + 4u + 8u + 8u + 4u + ECT_STREAM_TOKEN_LEN)

/* Bytes of a descriptor with n_runs runs. */
size_t ect__xport_desc_size(size_t n_runs);

/* The descriptor of one grant into out (cap bytes): the region's geometry,
 * the token and, for a consumer that takes runs, the entry's runs (else
 * pass n_runs 0).  *len_p gets its length.  Returns ECT_OK,
 * ECT_ERR_OVERFLOW (cap too small), ECT_ERR_INVALID_ARG (a run outside the
 * region). */
ect_status_t ect__xport_server_descriptor(const ect_xport_server_t *server,
                                          const uint8_t token[ECT_STREAM_TOKEN_LEN],
                                          const ect_run_t *runs, size_t n_runs, uint8_t *out,
                                          size_t cap, size_t *len_p);

/* Which transports the offer contains (bit 1 << kind). */
unsigned ect__xport_server_kinds(const ect_xport_server_t *server);

/* The stream's port (0 when tcp is not served). */
uint16_t ect__xport_server_tcp_port(const ect_xport_server_t *server);

typedef struct ect_xport_server_counters {
    uint64_t connections;    /* connections accepted */
    uint64_t streams_served; /* grants whose bytes were all sent */
    uint64_t streams_denied; /* requests naming no live grant (or a wrong size) */
    uint64_t bad_requests;   /* malformed requests (connection cut) */
    uint64_t bytes_sent;     /* payload bytes of served streams */
    uint64_t conns_refused;  /* connections over the cap, or while out of fds */
    uint64_t timeouts;       /* connections cut for a deadline (request or send), stripe
                              * groups given up at theirs */
    uint64_t send_failures;  /* streams cut by the peer */
    uint64_t streams_moved;  /* unstriped requests moved to a less busy sending thread */
    /* streams (a stripe counts as one) sent in full after the 16-byte
     * header of version 1 and 2 requests: consumers from before aligned
     * answers (proto/stream.h) */
    uint64_t streams_unaligned;
} ect_xport_server_counters_t;

void ect__xport_server_counters(ect_xport_server_t *server,
                                ect_xport_server_counters_t *counters_p);

/* Stop the thread (streams in progress are cut, their grants finished),
 * free.  NULL is a no-op. */
void ect__xport_server_stop(ect_xport_server_t *server);

/* ---- consumer side ------------------------------------------------------ */

typedef struct ect_xport_client ect_xport_client_t;

typedef struct ect_xport_client_params {
    void *data;          /* our region's block 0 (borrowed) */
    uint64_t block_size; /* must equal the producer's */
    uint64_t num_blocks;
    ect_transport_t prefer; /* config `transport`: auto, tcp or same_host */
    const char *region_dir; /* same-host: the only directory a peer's file may be in
                               (NULL = "/dev/shm") */
    /* Called when a read settles, so the caller's thread can poll at once
     * instead of on a timer, with the kind of the read that settled.  For
     * same-host from the thread that copied the last byte (a copy thread),
     * not for a read that settled before its read_start returned (the
     * caller polls every read it starts right after the start, see
     * ect__xport_read_start); it must not call into the client.  For tcp
     * from a stream receive thread (or from the call that settled the read:
     * read_start, cancel, release), with no lock of the client's held: it
     * may poll and release reads itself, so that a read completes where its
     * last byte landed, as long as the client stays used by one thread at a
     * time (the caller's own lock, taken with a trylock: the thread that
     * holds it may be the one calling).  Must be short: the stream's
     * receiving thread receives nothing while it runs. */
    void (*wake)(void *arg, ect_xport_kind_t kind);
    void *wake_arg;
    /* The region's `prefault` setting: unless prefer is same_host, read
     * every page of our region once through the kernel at creation (see
     * ect__xport_touch_from_kernel); and read every page of a same-host
     * producer's region once when it is first mapped. */
    int touch_pages;
    /* The CPU copy engine that same-host reads use, made on first use (the
     * config's copy settings: ect__copy_cpu_params_of; zero = defaults). */
    ect_copy_cpu_params_t copy;
    /* The most connections one tcp read uses at once (the config's
     * `tcp_stripes`; 1..ECT_STREAM_MAX_STRIPES, 0 = 1): a read is split in
     * block-aligned stripes when the producer offers them and each stripe
     * gets ECT_XPORT_STRIPE_MIN_BYTES or more. */
    unsigned tcp_stripes;
} ect_xport_client_params_t;

ect_status_t ect__xport_client_create(const ect_xport_client_params_t *params,
                                      ect_xport_client_t **client_p);

typedef struct ect_xport_read ect_xport_read_t;

typedef enum ect_xport_read_state {
    ECT_XPORT_READ_PENDING = 0,
    ECT_XPORT_READ_DONE = 1,
    ECT_XPORT_READ_FAILED = 2,
} ect_xport_read_state_t;

/* One read: a grant of the producer at (host, port) from an OK ack. */
typedef struct ect_xport_read_params {
    const char *host;       /* the producer's control-plane host: tcp connects there */
    uint16_t port;          /* and port: with host, names the peer */
    const char *session_id; /* the grant's name (the request's) */
    const char *mm_hash;
    const void *agent_metadata;
    size_t agent_len;
    const void *mem_descriptor;
    size_t desc_len;
    /* The ack's src_block_indices, in entry order; empty when the
     * descriptor carries the entry's runs instead ("ectier_runs"). */
    const uint64_t *remote_blocks;
    size_t n_remote;
    const ect_run_t *local_runs; /* our blocks, in entry order; as many blocks */
    size_t n_local_runs;
} ect_xport_read_params_t;

/* Start a read.  Picks the transport from the offer and the client's
 * preference (auto: same-host when possible, else tcp); *kind_p (optional)
 * says which.  The read may have settled by the time this returns (a
 * same-host read copied on the calling thread), and then no wake callback
 * comes for it: poll it before waiting for one.
 * Returns ECT_OK with *read_p; ECT_ERR_PEER (malformed offer or descriptor,
 * block index outside the producer's region, block size mismatch, counts
 * differ: nothing started), ECT_ERR_OVERFLOW (local runs outside our
 * region), ECT_ERR_UNSUPPORTED (no common transport), ECT_ERR_TRANSPORT
 * (connect failed), ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY. */
ect_status_t ect__xport_read_start(ect_xport_client_t *client,
                                   const ect_xport_read_params_t *params, ect_xport_read_t **read_p,
                                   ect_xport_kind_t *kind_p);

/* Report the read's state.  After DONE every byte has landed in our
 * region. */
ect_xport_read_state_t ect__xport_read_poll(ect_xport_client_t *client, ect_xport_read_t *read);

/* Give up on a PENDING read: a tcp read is cut at once (no byte lands after
 * this returns; it is then FAILED); a same-host copy cannot be cut and
 * finishes on its own (it stays PENDING until then). */
void ect__xport_read_cancel(ect_xport_client_t *client, ect_xport_read_t *read);

/* Free a read handle.  A PENDING tcp read is cut first; a PENDING
 * same-host copy is detached (the client frees it once the copy has
 * landed), so the caller must keep that read's blocks fenced until then
 * (it quarantines them).  NULL is a no-op. */
void ect__xport_read_release(ect_xport_client_t *client, ect_xport_read_t *read);

/* Drop cached state for a peer (pooled connections stay until idle; the
 * same-host mapping is closed once unused), e.g. when it died. */
void ect__xport_client_forget_peer(ect_xport_client_t *client, const char *host, uint16_t port);

/* A read from host:port is expected within about budget_ns (the caller
 * has just asked that peer for a grant).  When the peer's reads land
 * through the same-host copy, the copy threads are woken now to poll for it
 * (ect__copy_cpu_prewake), so the read does not wait for them to wake;
 * nothing happens for a peer read over tcp or not read from yet, or when
 * the client's copy threads never poll (copy_spin_us 0).  Call from the
 * thread that starts reads. */
void ect__xport_client_expect_read(ect_xport_client_t *client, const char *host, uint16_t port,
                                   uint64_t budget_ns);

/* Counters: reads by kind, bytes, failures. */
typedef struct ect_xport_counters {
    uint64_t reads[ECT_XPORT_KINDS]; /* by ect_xport_kind_t */
    uint64_t bytes[ECT_XPORT_KINDS];
    uint64_t failures;
    uint64_t peer_restarts;
} ect_xport_counters_t;

void ect__xport_client_counters(const ect_xport_client_t *client, ect_xport_counters_t *counters_p);

/* The counters of the CPU copy engine that lands same-host reads (all zero
 * before the first same-host read creates it), for benchmarks that show how
 * reads were copied.  Call from the thread that starts reads.  Returns
 * ECT_OK, or ECT_ERR_INVALID_ARG for a NULL argument. */
struct ect__copy_cpu_stats;
ect_status_t ect__xport_client_copy_stats(const ect_xport_client_t *client,
                                          struct ect__copy_cpu_stats *stats_p);

/* Wait for (or cut) every read, close connections and mappings.  NULL is a
 * no-op. */
void ect__xport_client_destroy(ect_xport_client_t *client);

#endif /* ECT_P2P_TRANSPORT_H */
