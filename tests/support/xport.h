/*
 * Shared by the data-transport tests (test_xport.c, test_xport_stripes.c,
 * test_xport_spread.c, test_xport_peers.c): a producer in its own process that opens a real region,
 * fills it with pseudo-random bytes (never zero), starts a transport server and hands its offer
 * back through a pipe, then serves until it is told to stop (or is killed); and a consumer region
 * in the test process.
 *
 * The producer keeps a small grant table of its own (the real one is in
 * src/p2p/producer.c): the test asks it over a pipe to grant blocks and gets
 * the grant's descriptor back, as a consumer gets it in an XferAck.
 *
 * A producer is the test program itself, forked AND exec'd with
 * TS_XPORT_PRODUCER_ARG (each test program's main dispatches to
 * ts_xport_producer_main): a restarted producer is a fresh process, and the
 * child starts with no threads of the parent.
 *
 * Every region is named "ectt_<case pid>_<n>" by the case's own process,
 * so the TS_SHM_CASE wrapper (support/region.h) can check and clean /dev/shm
 * afterwards.
 */
#ifndef ECT_TESTS_SUPPORT_XPORT_H
#define ECT_TESTS_SUPPORT_XPORT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <ectier/region.h>

#include "p2p/transport.h"
#include "p2p/xport_internal.h"
#include "support/region.h"

/* 7168-byte blocks (1792 x 4 bytes), as an encoder row of bf16 x 3584. */
#define TS_XPORT_HIDDEN 1792u
#define TS_XPORT_BLOCK  (TS_XPORT_HIDDEN * 4u)

/* Does dst hold block `block` of the producer with this seed? */
int ts_xport_block_matches(const uint8_t *dst, uint64_t block_size, uint64_t seed, uint64_t block);

/* Parameters of region name with num_blocks blocks of hidden x 4 bytes. */
void ts_xport_region_params(ect_region_params_t *p, const char *name, uint64_t hidden,
                            uint64_t num_blocks);

/* ---- the producer child ----------------------------------------------------------- */

/* Every grant the fixture's producer makes is in this session. */
#define TS_XPORT_SESSION "xf-session"

struct ts_xport_producer {
    pid_t pid;
    int cmd_fd; /* commands: 'g' grant, 'c' counters, 'q' stop */
    int reply_fd;
    int status; /* its ect__xport_server_start status */
    unsigned kinds;
    uint8_t *agent;
    size_t agent_len;
    char path[512];
    uint64_t seed;
    uint64_t block_size;
    uint64_t num_blocks;
    unsigned next_grant;
};

/* The first argument that makes a test program a producer. */
#define TS_XPORT_PRODUCER_ARG "--xport-test-producer"

/* The producer process (argv: TS_XPORT_PRODUCER_ARG up_fd down_fd region_name
 * hidden num_blocks seed serve_tcp serve_same_host).  Reports back through
 * up_fd, then answers commands until 'q' or end-of-file on down_fd; never
 * returns but with 2 for bad arguments.  Call it from main when argv[1] is
 * TS_XPORT_PRODUCER_ARG. */
int ts_xport_producer_main(int argc, char **argv);

/* Start a producer process serving a fresh region of num_blocks blocks of
 * hidden x 4 bytes named region_name (made by the caller with
 * ect_test_unique_name). */
void ts_xport_producer_start(struct ts_xport_producer *p, const char *region_name, uint64_t hidden,
                             uint64_t num_blocks, uint64_t seed, int serve_tcp,
                             int serve_same_host);

/* Have the producer grant blocks remote[0..n) under a new hash (written to
 * hash, 64 bytes); desc gets the grant's descriptor (ECT_XPORT_DESC_LEN). */
void ts_xport_grant(struct ts_xport_producer *p, const uint64_t *remote, size_t n, char hash[64],
                    uint8_t *desc);

/* The producer's stream counters and its finished grants (sent, cut). */
void ts_xport_producer_counters(struct ts_xport_producer *p, ect_xport_server_counters_t *k,
                                uint64_t fin[2]);

/* The same once the producer has counted `served` streams (or 5 s passed):
 * a consumer can hold every byte of a stream a moment before the
 * producer's thread, back from its last send, counts it. */
void ts_xport_producer_counters_after(struct ts_xport_producer *p, uint64_t served,
                                      ect_xport_server_counters_t *k, uint64_t fin[2]);

/* Tell the producer to stop and wait for it; CHECKs a clean exit. */
void ts_xport_producer_stop(struct ts_xport_producer *p);

/* SIGKILL the producer and reap it. */
void ts_xport_producer_kill(struct ts_xport_producer *p);

/* ---- the consumer ------------------------------------------------------------------- */

struct ts_xport_consumer {
    ect_region_t *region;
    ect_xport_client_t *client;
    uint64_t block_size;
    uint64_t num_blocks;
};

/* Open the consumer's region (every block holding its background bytes) and
 * its transport client preferring `prefer`. */
void ts_xport_consumer_open(struct ts_xport_consumer *c, const char *region_name, uint64_t hidden,
                            uint64_t num_blocks, ect_transport_t prefer, const char *region_dir);

/* Replace the consumer's client by a fresh one (no pooled connection)
 * that uses up to `stripes` connections a tcp read (params.tcp_stripes). */
void ts_xport_consumer_new_client(struct ts_xport_consumer *c, ect_transport_t prefer,
                                  unsigned stripes);

/* Destroy the client and close the region. */
void ts_xport_consumer_close(struct ts_xport_consumer *c);

/* Start a read of the blocks remote[0..n) of p (granted for the occasion)
 * into runs, under the peer key 127.0.0.1:key_port, with the given offer
 * (p's own unless altered).  desc_out (optional) gets the grant's
 * descriptor. */
ect_status_t ts_xport_read_start(struct ts_xport_consumer *c, struct ts_xport_producer *p,
                                 uint16_t key_port, const uint8_t *agent, size_t agent_len,
                                 const uint64_t *remote, size_t n, const ect_run_t *runs,
                                 size_t n_runs, ect_xport_read_t **r_p, ect_xport_kind_t *kind_p);

/* Poll a read until it is no longer PENDING or timeout_s passes. */
ect_xport_read_state_t ts_xport_wait(struct ts_xport_consumer *c, ect_xport_read_t *r,
                                     double timeout_s);

/* Every local block named by runs holds the producer's block named by the
 * matching remote id, and every other local block still holds its own
 * background bytes. */
void ts_xport_check_landed(const struct ts_xport_consumer *c, const struct ts_xport_producer *p,
                           const uint64_t *remote, size_t n_remote, const ect_run_t *runs,
                           size_t n_runs);

/* Every local block still holds its background bytes. */
void ts_xport_check_untouched(const struct ts_xport_consumer *c);

/* ---- log capture ------------------------------------------------------------------------ */

/* The library's log lines, captured from ts_xport_log_capture on. */
struct ts_xport_log {
    pthread_mutex_t lock;
    char text[16384];
    size_t len;
};

/* Send the library's log (info and up) to l. */
void ts_xport_log_capture(struct ts_xport_log *l);

/* How often needle occurs in the captured text. */
unsigned ts_xport_log_count(struct ts_xport_log *l, const char *needle);

#endif /* ECT_TESTS_SUPPORT_XPORT_H */
