/*
 * Helpers shared by the control plane's test programs (test_control.c,
 * test_control_liveness.c, test_control_curve.c): raw ZeroMQ sockets to
 * write and read exact frames, helper processes, scratch directories and
 * polling for dead peers.
 *
 * Helper processes are this same test program run again through
 * /proc/self/exe with "--ctl-helper PARENT_PID MODE ...", so they start clean (no
 * ZeroMQ threads inherited through fork, which ThreadSanitizer forbids).
 * They die with the case that started them (PR_SET_PDEATHSIG), and print
 * "ready PORT" on stdout once they serve:
 *   echo-server HOST PORT [KEYFILE [ALLOWFILE]]  an ectier producer that
 *       answers each message with "echo:" + the message
 *   sender HOST PORT                             an ectier consumer that
 *       sends "hello", then reads whatever comes back
 */
#ifndef ECT_TESTS_SUPPORT_CONTROL_H
#define ECT_TESTS_SUPPORT_CONTROL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"
#include "p2p/control.h"
#include "support/util.h"

/* Liveness bound for dead-peer tests: generous, never a timing assertion. */
#define TS_DEAD_WITHIN_S 15

/* ---- raw ZeroMQ ------------------------------------------------------------------ */

/* A raw socket of type on ctx with linger 0 (the caller closes it). */
void *ts_raw_socket(void *ctx, int type);

/* A raw ROUTER bound on 127.0.0.1 at a free port. */
void *ts_raw_router(void *ctx, uint16_t *port_p);

/* A raw DEALER connected to 127.0.0.1:port. */
void *ts_raw_dealer(void *ctx, uint16_t port);

/* Send n frames given as (pointer, length) pairs. */
void ts_raw_send(void *sock, size_t n, const void *const *data, const size_t *len);

/* One whole message within timeout_ms: its frame count (0 if none), and up
 * to max frames copied (NUL-terminated, at most 255 bytes each) into out. */
struct ts_raw_frame {
    size_t len;
    char data[256];
};

size_t ts_raw_recv(void *sock, int timeout_ms, struct ts_raw_frame *out, size_t max);

/* ---- helper processes ------------------------------------------------------------- */

/* Start this program as a helper; waits for its "ready PORT" line. */
pid_t ts_helper_spawn(const char *const *args, uint16_t *port_p);

/* SIGKILL a helper and reap it. */
void ts_helper_kill(pid_t pid);

/* Call first thing in main: runs a helper when asked, else returns -1. */
int ts_control_helper_main(int argc, char **argv);

#define TS_CONTROL_TEST_MAIN(argc, argv, cases)                                                    \
    do {                                                                                           \
        int helper_rc_ = ts_control_helper_main((argc), (argv));                                   \
        if (helper_rc_ >= 0)                                                                       \
            return helper_rc_;                                                                     \
        return ECT_TEST_MAIN((argc), (argv), (cases));                                             \
    } while (0)

/* ---- polling ------------------------------------------------------------------------ */

/* Wait until the server reports peer dead; returns how many times it was
 * reported (then checks a while more for duplicates when linger_ms > 0). */
int ts_server_wait_dead(ect_ctl_server_t *server, const ect_ctl_peer_t *peer, int linger_ms);

/* Wait until the client reports (host, port) dead; true if it did. */
bool ts_client_wait_dead(ect_ctl_client_t *client, const char *host, uint16_t port);

/* Receive one message on the server within timeout_ms, as a string. */
ect_status_t ts_server_recv_str(ect_ctl_server_t *server, int timeout_ms, ect_ctl_peer_t *peer,
                                char *buf, size_t cap);

/* The same for a client: the message and the (host, port) it came from. */
ect_status_t ts_client_recv_str(ect_ctl_client_t *client, int timeout_ms, char *host,
                                uint16_t *port, char *buf, size_t cap);

/* The same client identity. */
bool ts_peer_eq(const ect_ctl_peer_t *a, const ect_ctl_peer_t *b);

#endif /* ECT_TESTS_SUPPORT_CONTROL_H */
