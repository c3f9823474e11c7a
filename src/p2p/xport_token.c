/*
 * Grant tokens (transport.h: ect__xport_new_token): the secret a consumer
 * names on the producer's data stream.
 */
#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/rand.h>

#include "common/error.h"
#include "p2p/transport.h"

/* Grant tokens come from OpenSSL's DRBG (seeded from the kernel, reseeded
 * after fork), TOKEN_BATCH at a time: one RAND_bytes call costs about 2.5 us
 * on the project's VMs (its fork check is a system call), a tenth of what a
 * producer spends on a request.  A token's bytes are wiped from the pool as
 * it leaves, and a forked child starts with an empty pool, so parent and
 * child never hand out the same token. */
#define TOKEN_BATCH 64

static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    uint8_t bytes[TOKEN_BATCH * ECT_STREAM_TOKEN_LEN];
    size_t left; /* unused tokens, at the start of bytes */
} tokens = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void
tokens_before_fork(void)
{
    pthread_mutex_lock(&tokens.lock);
}

static void
tokens_after_fork_parent(void)
{
    pthread_mutex_unlock(&tokens.lock);
}

static void
tokens_after_fork_child(void)
{
    OPENSSL_cleanse(tokens.bytes, sizeof(tokens.bytes));
    tokens.left = 0;
    pthread_mutex_unlock(&tokens.lock);
}

static void
tokens_install_fork_handlers(void)
{
    (void)pthread_atfork(tokens_before_fork, tokens_after_fork_parent, tokens_after_fork_child);
}

ect_status_t
ect__xport_new_token(uint8_t token[ECT_STREAM_TOKEN_LEN])
{
    pthread_once(&tokens.once, tokens_install_fork_handlers);
    pthread_mutex_lock(&tokens.lock);
    if (tokens.left == 0) {
        if (RAND_bytes(tokens.bytes, (int)sizeof(tokens.bytes)) != 1) {
            pthread_mutex_unlock(&tokens.lock);
            return ect__error(ECT_ERR_IO, "xport: no random bytes for a grant token (%s)",
                              ERR_reason_error_string(ERR_get_error()));
        }
        tokens.left = TOKEN_BATCH;
    }
    uint8_t *t = tokens.bytes + (--tokens.left) * ECT_STREAM_TOKEN_LEN;
    memcpy(token, t, ECT_STREAM_TOKEN_LEN);
    OPENSSL_cleanse(t, ECT_STREAM_TOKEN_LEN);
    pthread_mutex_unlock(&tokens.lock);
    return ECT_OK;
}
