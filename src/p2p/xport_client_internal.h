/*
 * What the consumer's transport client's two files share: xport.c (the
 * client's creation and destruction, its reads, the entry points of
 * transport.h) and xport_peer.c (the peers it caches, the transport it
 * picks for each, the check of a read's blocks).  Each file's opening
 * comment says what it holds and why.
 *
 * Kept apart from xport_internal.h, which is the transports' common
 * internals (codec, stream, same-host) and is included by the server side,
 * the stream client, tests, benchmarks and the fuzzer: the client's own
 * structs concern these two files only.
 *
 * Threading: a client is used by one thread at a time (transport.h) and
 * nothing below is locked.  Only that thread touches a peer or the
 * client's fields; the stream clients' and copy engine's threads touch the
 * bytes and state of their own reads (xport.c).
 */
#ifndef ECT_P2P_XPORT_CLIENT_INTERNAL_H
#define ECT_P2P_XPORT_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ectier/copy.h>
#include <ectier/status.h>

#include "p2p/transport.h"
#include "p2p/xport_internal.h"

#define PEER_KEY_MAX 300

struct peer {
    char key[PEER_KEY_MAX + 1];
    char host[PEER_KEY_MAX + 1];
    uint8_t *agent; /* the bytes this peer was made from; offer borrows them */
    size_t agent_len;
    ect_xport_offer_t offer;
    int tcp_resolved; /* tcp_addr is valid */
    struct sockaddr_storage tcp_addr;
    socklen_t tcp_addr_len;
    char pool_key[ECT_XPORT_POOL_KEY_MAX + 1];
    ect_xport_shm_peer_t *shm;
    int shm_tried; /* shm_status/shm_why hold the outcome */
    ect_status_t shm_status;
    char shm_why[320];
    ect_xport_kind_t logged; /* the transport last logged for this peer */
    unsigned busy;           /* same-host reads in flight */
    int retired;             /* off the lookup list; freed when busy reaches 0 */
    struct peer *next;       /* active or retired list */
};

struct ect_xport_client {
    void *data;
    uint64_t block_size;
    uint64_t num_blocks;
    ect_transport_t prefer;
    char region_dir[ECT_XPORT_MAX_PATH + 1];
    char boot_id[ECT_XPORT_BOOT_ID_LEN + 1];
    int have_boot_id;
    int touch_pages;                        /* the params' */
    ect_copy_cpu_params_t copy_params;      /* the params' */
    void (*wake)(void *, ect_xport_kind_t); /* the params' */
    void *wake_arg;
    struct peer *peers;   /* active, by key */
    struct peer *retired; /* replaced or forgotten, still busy */
    ect_xport_read_t *reads;
    unsigned tcp_stripes; /* the params', 1..ECT_STREAM_MAX_STRIPES */
    /* Stream client k (made on first use) receives stripe k of every
     * striped read, on its own thread, and unstriped reads when it has the
     * fewest (tcp_reads[k]: reads on it not yet freed). */
    ect_xport_stream_client_t *tcp[ECT_STREAM_MAX_STRIPES];
    unsigned tcp_reads[ECT_STREAM_MAX_STRIPES];
    ect_copy_engine_t *copy; /* created on first same-host read */
    /* The same-host read inside read_start, while it is (atomic; xport.c). */
    ect_xport_read_t *starting_read;
    ect_xport_counters_t counters;
};

/* ---- xport_peer.c: peers ----------------------------------------------------
 * Every function below runs on the thread that uses the client and takes
 * no lock (see the top of this file). */

/* Free p: close its same-host mapping, free its offer bytes.  p must be on
 * neither of the client's lists and no read may use it (busy == 0). */
void ect__xport_peer_free(struct peer *p);

/* Take an active peer off the client's lookup list (forgotten, or replaced
 * by a restart); free it now if no same-host read uses it, else keep it on
 * the retired list until ect__xport_peer_unbusy frees it. */
void ect__xport_peer_retire(ect_xport_client_t *c, struct peer *p);

/* A same-host read of p has settled: drop its use of p, and free p when it
 * was retired and this was its last read. */
void ect__xport_peer_unbusy(ect_xport_client_t *c, struct peer *p);

/* The active peer of key ("host:port"), or NULL.  Borrowed: valid until the
 * peer is retired (forget_peer, or new offer bytes for key). */
struct peer *ect__xport_peer_find(ect_xport_client_t *c, const char *key);

/* The peer to read from: the cached one of key if agent (agent_len bytes,
 * borrowed, already validated by ect__xport_offer_decode) is the same
 * bytes, else a new one made from a copy of them; an old peer of that key
 * is then retired and counted in peer_restarts.  Returns ECT_OK with
 * *peer_p (the client's; borrowed as ect__xport_peer_find's), or
 * ECT_ERR_NO_MEMORY (the cache is as it was). */
ect_status_t ect__xport_peer_get(ect_xport_client_t *c, const char *key, const char *host,
                                 const void *agent, size_t agent_len, struct peer **peer_p);

/* ---- xport_peer.c: choosing and checking ------------------------------------ */

/* The transport to read desc's grant from p over, by the client's
 * preference (the top of xport_peer.c); the first time same-host is
 * considered for p its mapping is opened (and kept) or the reason it is
 * not usable recorded.  Logs (info) when p's transport changes.  Returns
 * ECT_OK with *kind_p, or ECT_ERR_UNSUPPORTED (the message says why). */
ect_status_t ect__xport_choose(ect_xport_client_t *c, struct peer *p, const ect_xport_desc_t *desc,
                               ect_xport_kind_t *kind_p);

/* Check every index and length of a read, then cut it into segments:
 * maximal stretches contiguous on both sides.  remote (n_remote) are the
 * ack's block indices, or empty when desc carries runs; runs (n_runs) are
 * our blocks in entry order; all borrowed.  Nothing moves here.  Returns
 * ECT_OK with *segs_p (malloc'd, the caller frees; NULL when empty),
 * *n_segs_p and *bytes_p (the read's size); ECT_ERR_PEER (block size
 * differs from ours, both indices and runs, an index outside the
 * producer's region, block counts differ); ECT_ERR_OVERFLOW (a local run
 * outside our region); ECT_ERR_NO_MEMORY.  peer_key only names the peer in
 * messages. */
ect_status_t ect__xport_plan_segments(const ect_xport_client_t *c, const char *peer_key,
                                      const ect_xport_desc_t *desc, const uint64_t *remote,
                                      size_t n_remote, const ect_run_t *runs, size_t n_runs,
                                      ect_xport_segment_t **segs_p, size_t *n_segs_p,
                                      uint64_t *bytes_p);

#endif /* ECT_P2P_XPORT_CLIENT_INTERNAL_H */
