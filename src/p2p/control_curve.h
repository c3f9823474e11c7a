/*
 * CURVE key files and the ZAP allow-list handler of the control plane
 * (SPEC §9.6); internal to src/p2p, used by control.c.
 *
 * A key file is text: "name = value" lines, blank lines and '#' comments.
 * Names are "public" and "secret" (a key pair, both 40-character Z85) and,
 * in a consumer's file only, "server" (the producer's public key).  The
 * secret must belong to the public key.  An allow-list file holds one Z85
 * public key per line, with blank lines and '#' comments.
 *
 * Secret keys never appear in a log line or an error message.  A loaded
 * key set is wiped with ect__ctl_keys_wipe once it has been handed to
 * ZeroMQ.
 *
 * The ZAP handler is a REP socket bound at inproc://zeromq.zap.01 in the
 * producer's context and served by its own thread, so handshakes are
 * answered even while the thread that owns the ROUTER is busy.  It accepts
 * a CURVE handshake whose client key is on the list ("200") and refuses
 * anything else ("400").  The list is read-only once the thread runs, so it
 * needs no lock.
 */
#ifndef ECT_P2P_CONTROL_CURVE_H
#define ECT_P2P_CONTROL_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#define ECT_CTL_Z85_KEY_LEN     40
#define ECT_CTL_CURVE_KEY_BYTES 32 /* a decoded key */

typedef struct ect_ctl_keys {
    char public_key[ECT_CTL_Z85_KEY_LEN + 1];
    char secret_key[ECT_CTL_Z85_KEY_LEN + 1];
    char server_key[ECT_CTL_Z85_KEY_LEN + 1]; /* "" unless the file has one */
} ect_ctl_keys_t;

/* Load the key file at path (borrowed).  want_server: true for a
 * consumer's file, which must have a "server" line; false for a producer's,
 * which must not.  Returns ECT_OK; ECT_ERR_CONFIG naming the file and line
 * (unreadable, malformed, duplicate or missing line, a secret that does not
 * match the public key); ECT_ERR_UNSUPPORTED when ZeroMQ lacks CURVE.
 * *keys_p is written only on success.  Thread safety: safe. */
ect_status_t ect__ctl_keys_load(const char *path, bool want_server, ect_ctl_keys_t *keys_p);

/* Overwrite keys (secret included) with zeros.  NULL is a no-op. */
void ect__ctl_keys_wipe(ect_ctl_keys_t *keys);

/* True when text is exactly ECT_CTL_Z85_KEY_LEN characters of Z85. */
bool ect__ctl_z85_key_valid(const char *text);

/* Load the allow-list at path (borrowed): *keys_p gets the *n_p decoded
 * keys (owned by the caller: ect__free).  Returns ECT_OK; ECT_ERR_CONFIG
 * (unreadable, a line that is not a key, more than 65536 keys, or no key at
 * all, naming the file and line); ECT_ERR_NO_MEMORY.  Outputs are written
 * only on success.  Thread safety: safe. */
ect_status_t ect__ctl_allow_list_load(const char *path, uint8_t (**keys_p)[ECT_CTL_CURVE_KEY_BYTES],
                                      size_t *n_p);

typedef struct ect_ctl_zap ect_ctl_zap_t;

/* Load the allow-list at path (borrowed) and start the ZAP handler in
 * zmq_ctx (borrowed; it must outlive the handler).  Call it before any
 * socket of the context binds.  Returns ECT_OK; ECT_ERR_CONFIG (unreadable
 * or malformed list, or one with no key, naming the file and line);
 * ECT_ERR_TRANSPORT (the ZAP endpoint could not be bound); ECT_ERR_IO (no
 * thread); ECT_ERR_NO_MEMORY. */
ect_status_t ect__ctl_zap_start(void *zmq_ctx, const char *path, ect_ctl_zap_t **zap_p);

/* Join the handler's thread and free it.  The caller must first have
 * called zmq_ctx_shutdown on its context, which is what wakes the thread.
 * NULL is a no-op. */
void ect__ctl_zap_stop(ect_ctl_zap_t *zap);

#endif /* ECT_P2P_CONTROL_CURVE_H */
