/*
 * CURVE key files and the ZAP allow-list handler (control_curve.h).
 *
 * Parsing is strict and line-numbered: every line is either blank, a '#'
 * comment or one well-formed entry, and the first bad line ends the load
 * with ECT_ERR_CONFIG naming the file and line.  Values of key lines are
 * never echoed in messages (a secret could be on that line); names are.
 *
 * The ZAP thread owns its REP socket from creation to close; the only
 * other state it reads, the allow-list, is written before the thread
 * starts and never again.  Its one counter is updated with atomics only
 * for the debug log, so no lock is needed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/thread.h"
#include "p2p/control.h"
#include "p2p/control_curve.h"

#define LINE_MAX_LEN 4096
#define ALLOW_MAX    65536
#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES   7 /* version, request id, domain, address, identity, mechanism, key */

static const char z85_alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   ".-:+=^!/*?&<>()[]{}@%$#";

bool
ect__ctl_z85_key_valid(const char *text)
{
    if (text == NULL || strlen(text) != ECT_CTL_Z85_KEY_LEN)
        return false;
    for (const char *p = text; *p != '\0'; p++)
        if (strchr(z85_alphabet, *p) == NULL)
            return false;
    /* Every 5-character group must also decode to a value below 2^32;
     * zmq_z85_decode refuses the ones that do not. */
    uint8_t raw[ECT_CTL_CURVE_KEY_BYTES];
    bool ok = zmq_z85_decode(raw, text) != NULL;
    explicit_bzero(raw, sizeof(raw));
    return ok;
}

void
ect__ctl_keys_wipe(ect_ctl_keys_t *keys)
{
    if (keys != NULL)
        explicit_bzero(keys, sizeof(*keys));
}

/* ---- line reading ----------------------------------------------------------- */

struct line_reader {
    const char *path;
    FILE *file;
    char *buf;
    size_t cap;
    unsigned lineno;
};

static ect_status_t
reader_open(struct line_reader *r, const char *path, bool holds_secret)
{
    memset(r, 0, sizeof(*r));
    r->path = path;
    if (path == NULL || *path == '\0')
        return ect__error(ECT_ERR_INVALID_ARG, "control: key file path is empty");
    r->file = fopen(path, "re");
    if (r->file == NULL)
        return ect__error_errno(ECT_ERR_CONFIG, "control: cannot open key file %s", path);
    struct stat st;
    if (fstat(fileno(r->file), &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            fclose(r->file);
            r->file = NULL;
            return ect__error(ECT_ERR_CONFIG, "control: key file %s is not a regular file", path);
        }
        /* Warn rather than refuse: the operator decides, but should know. */
        if (holds_secret && (st.st_mode & 077) != 0)
            ECT_LOG_W("control: key file %s is readable by group or others (mode %03o); "
                      "chmod 600 it",
                      path, (unsigned)(st.st_mode & 0777));
    }
    return ECT_OK;
}

/* Next line that is neither blank nor a '#' comment, trimmed, into
 * *line_p: 1 got one, 0 end of file, or an error status (negative).  '#' is
 * a Z85 character, but never the first of a key: a group's first digit is
 * at most 82 and '#' is digit 84. */
static int
reader_next(struct line_reader *r, char **line_p)
{
    for (;;) {
        errno = 0;
        ssize_t n = getline(&r->buf, &r->cap, r->file);
        if (n < 0) {
            if (errno != 0 && errno != EINVAL)
                return ect__error_errno(ECT_ERR_CONFIG, "control: cannot read key file %s",
                                        r->path);
            return 0;
        }
        r->lineno++;
        if ((size_t)n > LINE_MAX_LEN)
            return ect__error(ECT_ERR_CONFIG, "control: %s:%u: line longer than %d bytes", r->path,
                              r->lineno, LINE_MAX_LEN);
        if (strlen(r->buf) != (size_t)n)
            return ect__error(ECT_ERR_CONFIG, "control: %s:%u: line contains a NUL byte", r->path,
                              r->lineno);
        char *s = r->buf;
        while (*s == ' ' || *s == '\t')
            s++;
        char *end = s + strlen(s);
        while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
            *--end = '\0';
        if (*s == '\0' || *s == '#')
            continue;
        *line_p = s;
        return 1;
    }
}

static void
reader_close(struct line_reader *r)
{
    if (r->buf != NULL) {
        explicit_bzero(r->buf, r->cap); /* it held the secret line */
        /* getline's, from libc's malloc: not ect__free */
        free(r->buf);
    }
    if (r->file != NULL)
        fclose(r->file);
    memset(r, 0, sizeof(*r));
}

/* ---- key files ------------------------------------------------------------------ */

enum { KEY_PUBLIC, KEY_SECRET, KEY_SERVER, KEY_COUNT };
static const char *const key_names[KEY_COUNT] = {"public", "secret", "server"};

/* Parse every line of a key file into keys; seen[i] is the line number of
 * entry i, 0 when absent.  Checks syntax only, not which entries exist. */
static ect_status_t
parse_key_file(const char *path, ect_ctl_keys_t *keys, unsigned seen[KEY_COUNT])
{
    struct line_reader r;
    ect_status_t st = reader_open(&r, path, true);
    if (st != ECT_OK)
        return st;
    memset(keys, 0, sizeof(*keys));
    memset(seen, 0, sizeof(unsigned) * KEY_COUNT);
    char *line;
    int got;
    while ((got = reader_next(&r, &line)) == 1) {
        /* name: lower-case letters; the value may hold '=' (Z85 has it). */
        char *name_end = line + strspn(line, "abcdefghijklmnopqrstuvwxyz");
        char *eq = name_end + strspn(name_end, " \t");
        if (name_end == line || *eq != '=') {
            st = ect__error(ECT_ERR_CONFIG,
                            "control: %s:%u: expected 'name = value' (names: public, secret, "
                            "server)",
                            path, r.lineno);
            goto out;
        }
        *name_end = '\0';
        char *value = eq + 1;
        while (*value == ' ' || *value == '\t')
            value++;
        int k = 0;
        while (k < KEY_COUNT && strcmp(line, key_names[k]) != 0)
            k++;
        if (k == KEY_COUNT) {
            /* The name is not echoed: a mangled line may be key material. */
            st = ect__error(ECT_ERR_CONFIG,
                            "control: %s:%u: unknown name (allowed: public, secret, server)", path,
                            r.lineno);
            goto out;
        }
        if (seen[k] != 0) {
            st = ect__error(ECT_ERR_CONFIG, "control: %s:%u: second '%s' line (first on line %u)",
                            path, r.lineno, key_names[k], seen[k]);
            goto out;
        }
        if (!ect__ctl_z85_key_valid(value)) {
            st = ect__error(ECT_ERR_CONFIG, "control: %s:%u: '%s' is not a %d-character Z85 key",
                            path, r.lineno, key_names[k], ECT_CTL_Z85_KEY_LEN);
            goto out;
        }
        char *dst = k == KEY_PUBLIC   ? keys->public_key
                    : k == KEY_SECRET ? keys->secret_key
                                      : keys->server_key;
        memcpy(dst, value, ECT_CTL_Z85_KEY_LEN + 1);
        seen[k] = r.lineno;
    }
    st = got < 0 ? (ect_status_t)got : ECT_OK;
out:
    if (st != ECT_OK)
        ect__ctl_keys_wipe(keys);
    reader_close(&r);
    return st;
}

ect_status_t
ect__ctl_keys_load(const char *path, bool want_server, ect_ctl_keys_t *keys_p)
{
    if (keys_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL key output");
    if (!zmq_has("curve"))
        return ect__error(ECT_ERR_UNSUPPORTED,
                          "control: key file %s given, but this ZeroMQ has no CURVE support",
                          path != NULL ? path : "(null)");
    ect_ctl_keys_t keys;
    unsigned seen[KEY_COUNT];
    ect_status_t st = parse_key_file(path, &keys, seen);
    if (st != ECT_OK)
        return st;
    char derived[ECT_CTL_Z85_KEY_LEN + 1];
    if (seen[KEY_PUBLIC] == 0 || seen[KEY_SECRET] == 0) {
        st = ect__error(ECT_ERR_CONFIG,
                        "control: %s: no '%s' line (a key file needs both public "
                        "and secret; make one with `ectier keygen`)",
                        path, seen[KEY_PUBLIC] == 0 ? "public" : "secret");
        goto fail;
    }
    if (want_server && seen[KEY_SERVER] == 0) {
        st = ect__error(ECT_ERR_CONFIG,
                        "control: %s: no 'server' line; a consumer's key file needs the "
                        "producer's public key (`ectier keygen --out FILE --server-key-file "
                        "PRODUCER_KEY_FILE`)",
                        path);
        goto fail;
    }
    if (!want_server && seen[KEY_SERVER] != 0) {
        st = ect__error(ECT_ERR_CONFIG,
                        "control: %s:%u: a producer's key file has no 'server' line (this looks "
                        "like a consumer's key file)",
                        path, seen[KEY_SERVER]);
        goto fail;
    }
    if (zmq_curve_public(derived, keys.secret_key) != 0 || strcmp(derived, keys.public_key) != 0) {
        st = ect__error(ECT_ERR_CONFIG,
                        "control: %s:%u: the secret key does not belong to the public key on "
                        "line %u",
                        path, seen[KEY_SECRET], seen[KEY_PUBLIC]);
        goto fail;
    }
    *keys_p = keys;
    ect__ctl_keys_wipe(&keys);
    return ECT_OK;
fail:
    ect__ctl_keys_wipe(&keys);
    return st;
}

ect_status_t
ect__ctl_keyfile_public(const char *path, char out[41])
{
    if (out == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL output for the public key");
    ect_ctl_keys_t keys;
    unsigned seen[KEY_COUNT];
    ect_status_t st = parse_key_file(path, &keys, seen);
    if (st != ECT_OK)
        return st;
    if (seen[KEY_PUBLIC] == 0) {
        ect__ctl_keys_wipe(&keys);
        return ect__error(ECT_ERR_CONFIG, "control: %s: no 'public' line", path);
    }
    memcpy(out, keys.public_key, ECT_CTL_Z85_KEY_LEN + 1);
    ect__ctl_keys_wipe(&keys);
    return ECT_OK;
}

static ect_status_t
write_all(int fd, const char *text, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ECT_ERR_IO;
        text += n;
        len -= (size_t)n;
    }
    return ECT_OK;
}

ect_status_t
ect__ctl_keyfile_generate(const char *path, const char *server_public)
{
    if (path == NULL || *path == '\0')
        return ect__error(ECT_ERR_INVALID_ARG, "control: key file path is empty");
    if (server_public != NULL && !ect__ctl_z85_key_valid(server_public))
        return ect__error(ECT_ERR_INVALID_ARG,
                          "control: server public key must be %d characters of Z85",
                          ECT_CTL_Z85_KEY_LEN);
    if (!zmq_has("curve"))
        return ect__error(ECT_ERR_UNSUPPORTED, "control: this ZeroMQ has no CURVE support");
    char pub[ECT_CTL_Z85_KEY_LEN + 1], sec[ECT_CTL_Z85_KEY_LEN + 1];
    char text[512];
    ect_status_t st = ECT_OK;
    if (zmq_curve_keypair(pub, sec) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "control: zmq_curve_keypair failed: %s",
                        zmq_strerror(zmq_errno()));
        goto wipe;
    }
    int len;
    if (server_public != NULL)
        len = snprintf(text, sizeof(text),
                       "# ectier consumer CURVE key pair and its producer's public key.\n"
                       "# Keep this file private (mode 0600).\n"
                       "public = %s\nsecret = %s\nserver = %s\n",
                       pub, sec, server_public);
    else
        len = snprintf(text, sizeof(text),
                       "# ectier producer CURVE key pair.  Keep this file private (mode 0600);\n"
                       "# consumers need only the public key.\n"
                       "public = %s\nsecret = %s\n",
                       pub, sec);
    /* O_EXCL: overwriting a key pair silently would lock out every peer that
     * trusts the old one. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            st = ect__error(ECT_ERR_EXISTS, "control: key file %s already exists; not replacing it",
                            path);
        else
            st = ect__error_errno(ECT_ERR_IO, "control: cannot create key file %s", path);
        goto wipe;
    }
    /* The umask may only have narrowed 0600; make it exactly that. */
    if (fchmod(fd, 0600) != 0 || write_all(fd, text, (size_t)len) != ECT_OK || fsync(fd) != 0) {
        st = ect__error_errno(ECT_ERR_IO, "control: cannot write key file %s", path);
        goto close_file;
    }
    if (close(fd) != 0) {
        st = ect__error_errno(ECT_ERR_IO, "control: cannot write key file %s", path);
        unlink(path);
    }
    goto wipe;
close_file:
    close(fd);
    unlink(path);
wipe:
    explicit_bzero(sec, sizeof(sec));
    explicit_bzero(text, sizeof(text));
    return st;
}

/* ---- the ZAP handler ----------------------------------------------------------- */

struct ect_ctl_zap {
    void *rep;
    pthread_t thread;
    char *path;
    uint8_t (*keys)[ECT_CTL_CURVE_KEY_BYTES];
    size_t n_keys;
};

ect_status_t
ect__ctl_allow_list_load(const char *path, uint8_t (**keys_p)[ECT_CTL_CURVE_KEY_BYTES], size_t *n_p)
{
    if (keys_p == NULL || n_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL allow-list output");
    struct line_reader r;
    ect_status_t st = reader_open(&r, path, false);
    if (st != ECT_OK)
        return st;
    uint8_t(*keys)[ECT_CTL_CURVE_KEY_BYTES] = NULL;
    size_t n = 0, cap = 0;
    char *line;
    int got;
    while ((got = reader_next(&r, &line)) == 1) {
        if (!ect__ctl_z85_key_valid(line)) {
            st = ect__error(ECT_ERR_CONFIG,
                            "control: %s:%u: not a %d-character Z85 public key (the allow-list "
                            "holds one consumer public key per line)",
                            path, r.lineno, ECT_CTL_Z85_KEY_LEN);
            goto out;
        }
        if (n == ALLOW_MAX) {
            st = ect__error(ECT_ERR_CONFIG, "control: %s:%u: more than %d keys", path, r.lineno,
                            ALLOW_MAX);
            goto out;
        }
        if (n == cap) {
            size_t ncap = cap != 0 ? cap * 2 : 16;
            void *grown = ect__realloc(keys, ncap * ECT_CTL_CURVE_KEY_BYTES);
            if (grown == NULL) {
                st = ect__error(ECT_ERR_NO_MEMORY, "control: allow-list %s: out of memory", path);
                goto out;
            }
            keys = grown;
            cap = ncap;
        }
        zmq_z85_decode(keys[n++], line);
    }
    if (got < 0)
        st = (ect_status_t)got;
    else if (n == 0)
        st = ect__error(ECT_ERR_CONFIG,
                        "control: allow-list %s lists no key, so it would refuse every consumer",
                        path);
out:
    reader_close(&r);
    if (st != ECT_OK) {
        ect__free(keys);
        return st;
    }
    *keys_p = keys;
    *n_p = n;
    return ECT_OK;
}

static bool
zap_allowed(const ect_ctl_zap_t *zap, zmq_msg_t *mechanism, zmq_msg_t *key)
{
    if (zmq_msg_size(mechanism) != 5 || memcmp(zmq_msg_data(mechanism), "CURVE", 5) != 0)
        return false;
    if (zmq_msg_size(key) != ECT_CTL_CURVE_KEY_BYTES)
        return false;
    const void *k = zmq_msg_data(key);
    for (size_t i = 0; i < zap->n_keys; i++)
        if (memcmp(zap->keys[i], k, ECT_CTL_CURVE_KEY_BYTES) == 0)
            return true;
    return false;
}

static int
send_frame(void *sock, const void *data, size_t len, int more)
{
    return zmq_send(sock, data, len, more ? ZMQ_SNDMORE : 0) < 0 ? -1 : 0;
}

/* Answer one ZAP request (RFC 27).  Returns -1 once the context shuts down. */
static int
zap_serve_one(ect_ctl_zap_t *zap)
{
    zmq_msg_t frames[ZAP_FRAMES], extra;
    size_t n = 0;
    int rc = 0, more = 1;
    while (more) {
        /* Frames past the seventh make the request malformed (refused
         * below); they are still read so the REP socket can answer. */
        zmq_msg_t *m = n < ZAP_FRAMES ? &frames[n] : &extra;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, zap->rep, 0) < 0) {
            zmq_msg_close(m);
            if (zmq_errno() == EINTR && n == 0)
                return 0;
            if (zmq_errno() == EINTR)
                continue;
            rc = -1; /* ETERM: the producer is closing */
            goto close_frames;
        }
        more = zmq_msg_more(m);
        if (m == &extra)
            zmq_msg_close(m);
        else
            n++;
    }
    bool ok = n == ZAP_FRAMES && zmq_msg_size(&frames[0]) == 3 &&
              memcmp(zmq_msg_data(&frames[0]), "1.0", 3) == 0 &&
              zap_allowed(zap, &frames[5], &frames[6]);
    if (!ok)
        ECT_LOG_D("control: refused a consumer handshake: not a CURVE key on the allow-list %s",
                  zap->path);
    const char *code = ok ? "200" : "400";
    const char *text = ok ? "OK" : "not on the allow-list";
    /* The request id is echoed; when even it is missing, answer with an
     * empty one so the REP socket's state machine moves on. */
    const void *req_id = n >= 2 ? zmq_msg_data(&frames[1]) : "";
    size_t req_id_len = n >= 2 ? zmq_msg_size(&frames[1]) : 0;
    if (send_frame(zap->rep, "1.0", 3, 1) || send_frame(zap->rep, req_id, req_id_len, 1) ||
        send_frame(zap->rep, code, 3, 1) || send_frame(zap->rep, text, strlen(text), 1) ||
        send_frame(zap->rep, "", 0, 1) || send_frame(zap->rep, "", 0, 0))
        rc = zmq_errno() == EINTR ? 0 : -1;
close_frames:
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    return rc;
}

static void *
zap_main(void *arg)
{
    ect_ctl_zap_t *zap = arg;
    while (zap_serve_one(zap) == 0) {
    }
    zmq_close(zap->rep);
    return NULL;
}

ect_status_t
ect__ctl_zap_start(void *zmq_ctx, const char *path, ect_ctl_zap_t **zap_p)
{
    if (zmq_ctx == NULL || zap_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL argument to the ZAP handler");
    ect_ctl_zap_t *zap = ect__calloc(1, sizeof(*zap));
    if (zap == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
    ect_status_t st = ect__ctl_allow_list_load(path, &zap->keys, &zap->n_keys);
    if (st != ECT_OK)
        goto free_zap;
    zap->path = ect__strdup(path);
    if (zap->path == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
        goto free_zap;
    }
    zap->rep = zmq_socket(zmq_ctx, ZMQ_REP);
    if (zap->rep == NULL) {
        st = ect__error(ECT_ERR_TRANSPORT, "control: cannot make the ZAP socket: %s",
                        zmq_strerror(zmq_errno()));
        goto free_zap;
    }
    int zero = 0;
    zmq_setsockopt(zap->rep, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_bind(zap->rep, ZAP_ENDPOINT) != 0) {
        st = ect__error(ECT_ERR_TRANSPORT, "control: cannot bind the ZAP handler at %s: %s",
                        ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
        goto close_rep;
    }
    if ((st = ect__thread_start(&zap->thread, zap_main, zap, "ect-zap")) != ECT_OK)
        goto close_rep;
    *zap_p = zap;
    return ECT_OK;
close_rep:
    zmq_close(zap->rep);
free_zap:
    ect__free(zap->path);
    ect__free(zap->keys);
    ect__free(zap);
    return st;
}

void
ect__ctl_zap_stop(ect_ctl_zap_t *zap)
{
    if (zap == NULL)
        return;
    pthread_join(zap->thread, NULL);
    ect__free(zap->path);
    ect__free(zap->keys);
    ect__free(zap);
}
