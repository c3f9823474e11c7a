/*
 * CURVE on the control plane (SPEC §9.6; src/p2p/control_curve.c): keyed
 * consumers reach a keyed producer, everyone else gets nothing through;
 * key files and allow-lists are parsed strictly, with errors that name the
 * file and line and never show a secret; `ectier keygen` end to end.
 *
 * Each case works in its own scratch directory, made before and removed
 * after a forked body runs, so nothing is left behind even when a check
 * fails.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <ectier/log.h>

#include <zmq.h>

#include "common/clock.h"
#include "support/control.h"
#include "p2p/control_curve.h"

extern char **environ;

static const char *const lo = "127.0.0.1";

/* ---- scratch directories and files -------------------------------------------------- */

static void
remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path); /* the cases make plain files only */
    }
    closedir(d);
    rmdir(dir);
}

/* Run body(dir) in a child with a fresh scratch directory; the directory
 * goes whatever the body does. */
static void
in_scratch_dir(void (*body)(const char *dir))
{
    char name[64], dir[128];
    snprintf(dir, sizeof(dir), "/tmp/%s_XXXXXX",
             ect_test_unique_name(name, sizeof(name), "ectt_ctl_"));
    CHECK(mkdtemp(dir) != NULL);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        body(dir);
        fflush(NULL);
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        CHECK(errno == EINTR);
    remove_tree(dir);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "case body failed (status %d)", st);
}

static const char *
path_in(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

static void
write_text(const char *path, const char *text, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    CHECK(fd >= 0);
    CHECK(write(fd, text, len) == (ssize_t)len);
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

static void
write_str(const char *path, const char *text)
{
    write_text(path, text, strlen(text), 0600);
}

/* A producer key file and a consumer key file for it; their public keys. */
struct keyset {
    char server_file[256], client_file[256];
    char server_pub[41], client_pub[41];
};

static void
make_keyset(struct keyset *k, const char *dir, const char *tag)
{
    char name[64];
    snprintf(name, sizeof(name), "%s-producer.key", tag);
    path_in(k->server_file, sizeof(k->server_file), dir, name);
    snprintf(name, sizeof(name), "%s-consumer.key", tag);
    path_in(k->client_file, sizeof(k->client_file), dir, name);
    CHECK_OK(ect__ctl_keyfile_generate(k->server_file, NULL));
    CHECK_OK(ect__ctl_keyfile_public(k->server_file, k->server_pub));
    CHECK_OK(ect__ctl_keyfile_generate(k->client_file, k->server_pub));
    CHECK_OK(ect__ctl_keyfile_public(k->client_file, k->client_pub));
}

/* ---- talking through CURVE ----------------------------------------------------------- */

/* Send from client to server; true if the server got it (then it answers
 * and the client must get the answer). */
static bool
gets_through(ect_ctl_server_t *server, ect_ctl_client_t *client)
{
    uint16_t port = ect__ctl_server_port(server);
    CHECK_OK(ect__ctl_client_send(client, lo, port, "secret-plan", 11));
    ect_ctl_peer_t peer;
    char buf[32];
    ect_status_t st = ts_server_recv_str(server, 1500, &peer, buf, sizeof(buf));
    if (st == ECT_ERR_TIMEOUT)
        return false;
    CHECK_OK(st);
    CHECK_STR_EQ(buf, "secret-plan");
    CHECK_OK(ect__ctl_server_send(server, &peer, "ack", 3));
    char host[ECT_CTL_HOST_MAX + 1];
    uint16_t from;
    CHECK_OK(ts_client_recv_str(client, 5000, host, &from, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "ack");
    return true;
}

/* A refused consumer: nothing received or counted as received by the
 * producer; the consumer reports the producer and counts its request. */
static void
check_refused(ect_ctl_server_t *server, ect_ctl_client_t *client)
{
    CHECK(!gets_through(server, client));
    CHECK(ts_client_wait_dead(client, lo, ect__ctl_server_port(server)));
    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK_EQ_U64(c.received, 0);
    CHECK_EQ_U64(c.dropped, 0);
    CHECK(c.handshake_failed >= 1);
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.received, 0);
    CHECK_EQ_U64(c.sent, 0);
    CHECK_EQ_U64(c.send_failed, 1);
}

static void
body_keyed_client_on_allow_list(const char *dir)
{
    struct keyset k, other;
    make_keyset(&k, dir, "a");
    make_keyset(&other, dir, "b");
    char allow[256], text[256];
    snprintf(text, sizeof(text), "# consumers\n\n%s\n  %s  \n", other.client_pub, k.client_pub);
    write_str(path_in(allow, sizeof(allow), dir, "allowed"), text);
    ect_ctl_security_t ssec = {k.server_file, allow, NULL}, csec = {NULL, NULL, k.client_file};
    ect_ctl_server_t *server;
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_server_open(lo, 0, &ssec, &server));
    CHECK_OK(ect__ctl_client_create(&csec, &client));
    CHECK(gets_through(server, client));
    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK_EQ_U64(c.handshake_failed, 0);
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

static void
test_curve_keyed_client_on_allow_list_talks_to_keyed_server(void)
{
    in_scratch_dir(body_keyed_client_on_allow_list);
}

static void
body_any_keyed_client(const char *dir)
{
    struct keyset k;
    make_keyset(&k, dir, "a");
    ect_ctl_security_t ssec = {k.server_file, "", NULL}, csec = {NULL, NULL, k.client_file};
    ect_ctl_server_t *server;
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_server_open(lo, 0, &ssec, &server));
    CHECK_OK(ect__ctl_client_create(&csec, &client));
    CHECK(gets_through(server, client));
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
}

static void
test_curve_without_allow_list_accepts_any_keyed_client(void)
{
    in_scratch_dir(body_any_keyed_client);
}

static void
body_unkeyed_client(const char *dir)
{
    struct keyset k;
    make_keyset(&k, dir, "a");
    ect_ctl_security_t ssec = {k.server_file, NULL, NULL};
    ect_ctl_server_t *server;
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_server_open(lo, 0, &ssec, &server));
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    check_refused(server, client);
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
}

static void
test_curve_unkeyed_client_gets_nothing_through(void)
{
    in_scratch_dir(body_unkeyed_client);
}

static void
body_client_not_on_allow_list(const char *dir)
{
    struct keyset k, other;
    make_keyset(&k, dir, "a");
    make_keyset(&other, dir, "b");
    char allow[256], text[64];
    snprintf(text, sizeof(text), "%s\n", other.client_pub);
    write_str(path_in(allow, sizeof(allow), dir, "allowed"), text);
    ect_ctl_security_t ssec = {k.server_file, allow, NULL}, csec = {NULL, NULL, k.client_file};
    ect_ctl_server_t *server;
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_server_open(lo, 0, &ssec, &server));
    CHECK_OK(ect__ctl_client_create(&csec, &client));
    check_refused(server, client);
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

static void
test_curve_client_not_on_allow_list_gets_nothing_through(void)
{
    in_scratch_dir(body_client_not_on_allow_list);
}

static void
body_wrong_server_key(const char *dir)
{
    struct keyset k, other;
    make_keyset(&k, dir, "a");
    make_keyset(&other, dir, "b");
    /* The consumer trusts producer b's key but talks to producer a. */
    ect_ctl_security_t ssec = {k.server_file, NULL, NULL}, csec = {NULL, NULL, other.client_file};
    ect_ctl_server_t *server;
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_server_open(lo, 0, &ssec, &server));
    CHECK_OK(ect__ctl_client_create(&csec, &client));
    check_refused(server, client);
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
}

static void
test_curve_client_trusting_another_producer_gets_nothing_through(void)
{
    in_scratch_dir(body_wrong_server_key);
}

/* ---- key files ------------------------------------------------------------------------ */

static void
body_malformed_key_files(const char *dir)
{
    char pub[41], sec[41], pub2[41], sec2[41];
    /* '=' is a Z85 digit: a key holding one would turn "no equals" and
     * "bare secret" below into a line with a name and a value (about one
     * key pair in three). */
    for (int tries = 0;; tries++) {
        CHECK(tries < 1000);
        CHECK(zmq_curve_keypair(pub, sec) == 0);
        if (strchr(pub, '=') == NULL && strchr(sec, '=') == NULL)
            break;
    }
    CHECK(zmq_curve_keypair(pub2, sec2) == 0);
    char bad39[41];
    memcpy(bad39, sec, 39);
    bad39[39] = '\0';
    char bad_char[41];
    memcpy(bad_char, sec, 41);
    bad_char[7] = '~'; /* not Z85 */
    char text[512];
    const struct {
        const char *what, *want;
        bool consumer;
    } cases[] = {
        {"no secret", ": no 'secret' line", false},
        {"short secret", ":2: 'secret' is not a 40-character Z85 key", false},
        {"bad char", ":3: 'secret' is not a 40-character Z85 key", false},
        {"unknown name", ":1: unknown name (allowed: public, secret, server)", false},
        {"no equals", ":1: expected 'name = value'", false},
        {"duplicate", ":2: second 'public' line (first on line 1)", false},
        {"mismatch", ":2: the secret key does not belong to the public key on line 1", false},
        {"consumer without server", ": no 'server' line", true},
        {"producer with server", ":3: a producer's key file has no 'server' line", false},
        {"nul byte", ":1: line contains a NUL byte", false},
        {"bare secret", ":2: expected 'name = value'", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len;
        switch (i) {
        case 0:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\n", pub);
            break;
        case 1:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\nsecret = %s\n", pub, bad39);
            break;
        case 2:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\n# c\nsecret = %s\n", pub,
                                   bad_char);
            break;
        case 3:
            len = (size_t)snprintf(text, sizeof(text), "publik = %s\n", pub);
            break;
        case 4:
            len = (size_t)snprintf(text, sizeof(text), "public %s\n", pub);
            break;
        case 5:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\npublic = %s\n", pub, pub);
            break;
        case 6:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\nsecret = %s\n", pub, sec2);
            break;
        case 7:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\nsecret = %s\n", pub, sec);
            break;
        case 8:
            len = (size_t)snprintf(text, sizeof(text), "public = %s\nsecret = %s\nserver = %s\n",
                                   pub, sec, pub2);
            break;
        case 9:
            len = (size_t)snprintf(text, sizeof(text), "public = %s", pub);
            text[3] = '\0';
            break;
        default: /* a secret pasted without its name */
            len = (size_t)snprintf(text, sizeof(text), "public = %s\n%s\n", pub, sec);
            break;
        }
        char file[256], name[32];
        snprintf(name, sizeof(name), "bad%zu.key", i);
        path_in(file, sizeof(file), dir, name);
        write_text(file, text, len, 0600);
        ect_status_t st;
        if (cases[i].consumer) {
            ect_ctl_security_t sec_c = {NULL, NULL, file};
            ect_ctl_client_t *client = NULL;
            st = ect__ctl_client_create(&sec_c, &client);
            CHECK(client == NULL);
        } else {
            ect_ctl_security_t sec_s = {file, NULL, NULL};
            ect_ctl_server_t *server = NULL;
            st = ect__ctl_server_open(lo, 0, &sec_s, &server);
            CHECK(server == NULL);
        }
        CHECK_MSG(st == ECT_ERR_CONFIG, "%s: status %d", cases[i].what, st);
        char want[512];
        snprintf(want, sizeof(want), "%s%s", file, cases[i].want);
        CHECK_CONTAINS(ect_last_error(), want);
        /* No secret in any message. */
        CHECK(strstr(ect_last_error(), sec) == NULL);
        CHECK(strstr(ect_last_error(), sec2) == NULL);
        CHECK(strstr(ect_last_error(), bad39) == NULL);
        CHECK(strstr(ect_last_error(), bad_char) == NULL);
    }
    /* Not a file at all. */
    ect_ctl_security_t sec_dir = {dir, NULL, NULL};
    ect_ctl_server_t *server = NULL;
    CHECK_STATUS(ect__ctl_server_open(lo, 0, &sec_dir, &server), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "not a regular file");
    char missing[256];
    ect_ctl_security_t sec_missing = {NULL, NULL, path_in(missing, sizeof(missing), dir, "none")};
    ect_ctl_client_t *client = NULL;
    CHECK_STATUS(ect__ctl_client_create(&sec_missing, &client), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), missing);
    CHECK_NO_LEAKS();
}

static void
test_keyfile_malformed_lines_are_config_errors_naming_file_and_line(void)
{
    in_scratch_dir(body_malformed_key_files);
}

static void
body_bad_allow_lists(const char *dir)
{
    struct keyset k;
    make_keyset(&k, dir, "a");
    char allow[256], text[128];
    const struct {
        const char *text, *want;
    } cases[] = {
        {"# nobody yet\n\n", "lists no key"},
        {"%s\nnot-a-key\n", ":2: not a 40-character Z85 public key"},
        {"public = %s\n", ":1: not a 40-character Z85 public key"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(text, sizeof(text), cases[i].text, k.client_pub);
        write_str(path_in(allow, sizeof(allow), dir, "allowed"), text);
        ect_ctl_security_t sec = {k.server_file, allow, NULL};
        ect_ctl_server_t *server = NULL;
        CHECK_STATUS(ect__ctl_server_open(lo, 0, &sec, &server), ECT_ERR_CONFIG);
        CHECK(server == NULL);
        CHECK_CONTAINS(ect_last_error(), allow);
        CHECK_CONTAINS(ect_last_error(), cases[i].want);
    }
    ect_ctl_security_t sec = {k.server_file, path_in(allow, sizeof(allow), dir, "none"), NULL};
    ect_ctl_server_t *server = NULL;
    CHECK_STATUS(ect__ctl_server_open(lo, 0, &sec, &server), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "cannot open");
    /* After all those failures the ZAP endpoint is free again. */
    snprintf(text, sizeof(text), "%s\n", k.client_pub);
    write_str(allow, text);
    CHECK_OK(ect__ctl_server_open(lo, 0, &sec, &server));
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

static void
test_allow_list_malformed_or_empty_is_a_config_error(void)
{
    in_scratch_dir(body_bad_allow_lists);
}

static void
body_generate(const char *dir)
{
    umask(0); /* generate must not rely on the umask for 0600 */
    char file[256], pub[41];
    path_in(file, sizeof(file), dir, "p.key");
    CHECK_OK(ect__ctl_keyfile_generate(file, NULL));
    struct stat st;
    CHECK(stat(file, &st) == 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    CHECK_OK(ect__ctl_keyfile_public(file, pub));
    CHECK(ect__ctl_z85_key_valid(pub));
    char *text = ect_test_read_file(file, NULL);
    char line[64];
    snprintf(line, sizeof(line), "public = %s\n", pub);
    CHECK_CONTAINS(text, line);
    CHECK_CONTAINS(text, "secret = ");
    CHECK(strstr(text, "server = ") == NULL);
    ect_ctl_keys_t keys;
    CHECK_OK(ect__ctl_keys_load(file, false, &keys));
    CHECK_STR_EQ(keys.public_key, pub);
    ect__ctl_keys_wipe(&keys);
    /* Never replaced. */
    CHECK_STATUS(ect__ctl_keyfile_generate(file, NULL), ECT_ERR_EXISTS);
    char *again = ect_test_read_file(file, NULL);
    CHECK_STR_EQ(again, text);
    free(again);
    free(text);
    /* A consumer's file carries the producer's key. */
    char cfile[256];
    path_in(cfile, sizeof(cfile), dir, "c.key");
    CHECK_STATUS(ect__ctl_keyfile_generate(cfile, "too-short"), ECT_ERR_INVALID_ARG);
    CHECK(access(cfile, F_OK) != 0);
    CHECK_OK(ect__ctl_keyfile_generate(cfile, pub));
    CHECK_OK(ect__ctl_keys_load(cfile, true, &keys));
    CHECK_STR_EQ(keys.server_key, pub);
    ect__ctl_keys_wipe(&keys);
    CHECK_STATUS(ect__ctl_keyfile_generate("", NULL), ECT_ERR_INVALID_ARG);
    char nodir[256];
    CHECK_STATUS(ect__ctl_keyfile_generate(path_in(nodir, sizeof(nodir), dir, "no/such/dir"), NULL),
                 ECT_ERR_IO);
}

static void
test_keyfile_generate_writes_a_0600_pair_and_never_replaces_one(void)
{
    in_scratch_dir(body_generate);
}

/* A sink that keeps every log line, to check what reaches the log. */
static char log_text[8192];

static void
keep_log(ect_log_level_t level, const char *message, void *user)
{
    (void)level;
    (void)user;
    size_t used = strlen(log_text);
    snprintf(log_text + used, sizeof(log_text) - used, "%s\n", message);
}

static void
body_loose_mode(const char *dir)
{
    struct keyset k;
    make_keyset(&k, dir, "a");
    CHECK(chmod(k.server_file, 0644) == 0);
    ect_log_set_sink(keep_log, NULL);
    ect_log_set_level(ECT_LOG_TRACE);
    ect_ctl_keys_t keys;
    CHECK_OK(ect__ctl_keys_load(k.server_file, false, &keys));
    ect_ctl_security_t sec = {k.server_file, NULL, NULL};
    ect_ctl_server_t *server;
    CHECK_OK(ect__ctl_server_open(lo, 0, &sec, &server));
    ect__ctl_server_close(server);
    ect_log_set_sink(NULL, NULL);
    CHECK_CONTAINS(log_text, k.server_file);
    CHECK_CONTAINS(log_text, "readable by group or others");
    CHECK(strstr(log_text, keys.secret_key) == NULL);
    ect__ctl_keys_wipe(&keys);
}

static void
test_keyfile_readable_by_others_loads_with_a_warning_and_no_secret_logged(void)
{
    in_scratch_dir(body_loose_mode);
}

/* ---- `ectier keygen` --------------------------------------------------------------------- */

struct cli_run {
    int rc;
    char out[4096], err[4096];
};

static void
slurp_fd(int fd, char *buf, size_t len)
{
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
}

static void
run_keygen(struct cli_run *r, const char *const *args)
{
    const char *argv[12] = {ECT_CLI_PATH, "keygen"};
    size_t argc = 2;
    for (size_t i = 0; args[i] != NULL && argc < 11; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    int out = memfd_create("ectt_keygen_out", MFD_CLOEXEC);
    int err = memfd_create("ectt_keygen_err", MFD_CLOEXEC);
    CHECK(out >= 0 && err >= 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    pid_t pid;
    CHECK(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        CHECK(errno == EINTR);
    r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp_fd(out, r->out, sizeof(r->out));
    slurp_fd(err, r->err, sizeof(r->err));
    close(out);
    close(err);
}

#define CHECK_RC(r, want)                                                                          \
    CHECK_MSG((r)->rc == (want), "exit %d, expected %d\nstdout: %s\nstderr: %s", (r)->rc, (want),  \
              (r)->out, (r)->err)

static void
body_keygen_cli(const char *dir)
{
    char producer[256], consumer[256], consumer2[256], allow[256];
    path_in(producer, sizeof(producer), dir, "producer.key");
    path_in(consumer, sizeof(consumer), dir, "consumer.key");
    path_in(consumer2, sizeof(consumer2), dir, "consumer2.key");
    path_in(allow, sizeof(allow), dir, "allowed");
    struct cli_run r;
    char pub[41];

    run_keygen(&r, (const char *[]){"--out", producer, NULL});
    CHECK_RC(&r, 0);
    CHECK_OK(ect__ctl_keyfile_public(producer, pub));
    char want[64];
    snprintf(want, sizeof(want), "%s\n", pub);
    CHECK_STR_EQ(r.out, want);

    run_keygen(&r, (const char *[]){"--out", consumer, "--server-key-file", producer, NULL});
    CHECK_RC(&r, 0);
    write_str(allow, r.out); /* the printed public key is an allow-list line */
    char opt[80];
    snprintf(opt, sizeof(opt), "--server-public=%s", pub);
    run_keygen(&r, (const char *[]){"--out", consumer2, opt, NULL});
    CHECK_RC(&r, 0);

    /* The files work: consumer (allowed) talks, consumer2 (not listed) does not. */
    ect_ctl_security_t ssec = {producer, allow, NULL};
    ect_ctl_security_t c1 = {NULL, NULL, consumer}, c2 = {NULL, NULL, consumer2};
    ect_ctl_server_t *server;
    ect_ctl_client_t *ok, *refused;
    CHECK_OK(ect__ctl_server_open(lo, 0, &ssec, &server));
    CHECK_OK(ect__ctl_client_create(&c1, &ok));
    CHECK_OK(ect__ctl_client_create(&c2, &refused));
    CHECK(gets_through(server, ok));
    CHECK(!gets_through(server, refused));
    ect__ctl_client_destroy(ok);
    ect__ctl_client_destroy(refused);
    ect__ctl_server_close(server);

    /* Refusals: existing file (1), bad arguments (2). */
    run_keygen(&r, (const char *[]){"--out", producer, NULL});
    CHECK_RC(&r, 1);
    CHECK_CONTAINS(r.err, "already exists");
    run_keygen(&r, (const char *[]){NULL});
    CHECK_RC(&r, 2);
    CHECK_CONTAINS(r.err, "--out FILE is required");
    CHECK_CONTAINS(r.err, "usage: ectier keygen");
    char other[256];
    path_in(other, sizeof(other), dir, "other.key");
    run_keygen(&r, (const char *[]){"--out", other, "--server-key-file", producer, opt, NULL});
    CHECK_RC(&r, 2);
    CHECK_CONTAINS(r.err, "not both");
    run_keygen(&r, (const char *[]){"--out", other, "--server-public", "short", NULL});
    CHECK_RC(&r, 2);
    run_keygen(&r, (const char *[]){"--out", other, "--server-public",
                                    "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", NULL});
    CHECK_RC(&r, 2);
    run_keygen(&r, (const char *[]){"--out", other, "--server-key-file", allow, NULL});
    CHECK_RC(&r, 1);
    CHECK_CONTAINS(r.err, allow);
    run_keygen(&r, (const char *[]){"--out", other, "--bogus", NULL});
    CHECK_RC(&r, 2);
    run_keygen(&r, (const char *[]){"--out", NULL});
    CHECK_RC(&r, 2);
    CHECK(access(other, F_OK) != 0);
    run_keygen(&r, (const char *[]){"--help", NULL});
    CHECK_RC(&r, 0);
    CHECK_CONTAINS(r.out, "--server-key-file");
}

static void
test_keygen_cli_end_to_end(void)
{
    in_scratch_dir(body_keygen_cli);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_curve_keyed_client_on_allow_list_talks_to_keyed_server),
    ECT_CASE(test_curve_without_allow_list_accepts_any_keyed_client),
    ECT_CASE(test_curve_unkeyed_client_gets_nothing_through),
    ECT_CASE(test_curve_client_not_on_allow_list_gets_nothing_through),
    ECT_CASE(test_curve_client_trusting_another_producer_gets_nothing_through),
    ECT_CASE(test_keyfile_malformed_lines_are_config_errors_naming_file_and_line),
    ECT_CASE(test_allow_list_malformed_or_empty_is_a_config_error),
    ECT_CASE(test_keyfile_generate_writes_a_0600_pair_and_never_replaces_one),
    ECT_CASE(test_keyfile_readable_by_others_loads_with_a_warning_and_no_secret_logged),
    ECT_CASE(test_keygen_cli_end_to_end),
};

int
main(int argc, char **argv)
{
    TS_CONTROL_TEST_MAIN(argc, argv, cases);
}
