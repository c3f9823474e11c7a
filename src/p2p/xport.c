/*
 * The data-transport dispatcher (transport.h): the producer's server builds
 * one offer with every transport it serves and a descriptor per grant
 * (xport_server.c); the consumer's client picks a transport per peer,
 * checks every block index and length before any byte moves, and runs
 * reads over the TCP stream (xport_tcp_server.c, xport_tcp_client.c) or the
 * same-host path (xport_shm.c).
 *
 * The client is two files sharing xport_client_internal.h.  This one holds
 * its creation and destruction, its reads and the entry points of
 * transport.h; xport_peer.c holds the peers it caches (lifecycle, restarts)
 * and the choice of a transport per peer and the check of a read's blocks,
 * each described at its top.
 *
 * Stripes.  A tcp read is split in block-aligned stripes (proto/stream.h)
 * where the producer's offer takes them, the client allows them
 * (params.tcp_stripes) and each gets ECT_XPORT_STRIPE_MIN_BYTES: stripe k
 * is a read of its own on stream client k, with its own thread and pooled
 * connections.  The read is DONE when every stripe is, FAILED as soon as
 * one is (the others are cut at once); cancel cuts them all, so nothing of
 * any stripe lands after it.  An unstriped read goes to the stream client
 * (of those the client may use) with the fewest reads: a lone read is
 * always client 0's, reads at once are received on as many threads.
 *
 * Reads.  Every read stays on the client's list until it is both released
 * and finished.  A tcp read can be cut at any time (cancel, release); a
 * same-host copy batch cannot, so a released PENDING copy is detached and
 * reaped by a later poll or by destroy, and FAILED is reported only once
 * nothing can land any more.
 *
 * Counters count finished reads and their bytes by transport (DONE), and
 * failures (FAILED); peer restarts are counted in xport_peer.c.
 *
 * Threading: transport.h.  The server's fields are immutable once started
 * (its stream part has its own thread).  A client is used by one thread at
 * a time; the stream client's thread and the copy engine's threads touch
 * only the bytes and state of their own reads.  A stream client calls its
 * wake callback (stream_settled) with none of its locks held, so the owner
 * may poll and release a tcp read on that thread, one thread at a time
 * still being its own lock's business (transport.h).  A same-host read's batch
 * is copied partly by the caller inside read_start and partly by the copy
 * threads; whichever thread copies its last byte publishes that in the
 * read (copy_landed) and calls the wake callback, so no thread polls or
 * sleeps on a copy.  Except while read_start is still running: its caller
 * polls the read right after (transport.h), so a wake-up would only cost
 * it a system call and one more turn of its loop (3-6 us a 1 MiB read on
 * the project's VMs, most of it the eventfd write).  The client's
 * `starting_read` names the read inside read_start until read_start is
 * done with its batch; it and copy_landed are each written before the
 * other is read, both sequentially consistent, so a copy thread that
 * lands the batch sees the read no longer starting and wakes the caller,
 * or the caller's poll sees the batch landed.  copy_landed only compares
 * the read's address with starting_read: once the flag is set the caller
 * may free the read, and a later read at the same address that is
 * starting only means the caller has seen this one land.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <ectier/copy.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "copy/cpu.h"
#include "p2p/xport_client_internal.h"

/* How long destroy waits for same-host copies in flight. */
#define DESTROY_WAIT_NS (2ull * 1000 * 1000 * 1000)

const char *
ect__xport_kind_str(ect_xport_kind_t kind)
{
    switch (kind) {
    case ECT_XPORT_TCP:
        return "tcp";
    case ECT_XPORT_SAME_HOST:
        return "same_host";
    case ECT_XPORT_NONE:
        break;
    }
    return "none";
}

/* Pages a writev touches at once: one iovec each (IOV_MAX). */
#define TOUCH_BATCH 1024

void
ect__xport_touch_from_kernel(const void *base, size_t len)
{
    long page_l = sysconf(_SC_PAGESIZE);
    size_t page = page_l > 0 ? (size_t)page_l : 4096;
    int pfd[2];
    if (len == 0 || pipe2(pfd, O_CLOEXEC) != 0) {
        if (len != 0)
            ECT_LOG_D("xport: cannot make a pipe to touch the region: %s", strerror(errno));
        return;
    }
    const uint8_t *p = base;
    struct iovec iov[TOUCH_BATCH];
    char sink[TOUCH_BATCH];
    for (size_t off = 0; off < len;) {
        int n = 0;
        for (; n < TOUCH_BATCH && off < len; n++, off += page)
            iov[n] = (struct iovec){(void *)(p + off), 1};
        /* n bytes fit the pipe's first buffer: the write never blocks. */
        ssize_t w = writev(pfd[1], iov, n);
        while (w > 0) {
            ssize_t r = read(pfd[0], sink, (size_t)w);
            if (r <= 0)
                break;
            w -= r;
        }
        if (w != 0)
            break;
    }
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- client state ------------------------------------------------------------ */

/* struct peer and struct ect_xport_client: xport_client_internal.h. */

struct ect_xport_read {
    struct peer *peer; /* same-host reads only, while busy */
    ect_xport_kind_t kind;
    ect_xport_read_state_t state;
    uint64_t bytes;
    char peer_key[PEER_KEY_MAX + 1];
    ect_xport_stream_read_t *tcp[ECT_STREAM_MAX_STRIPES]; /* stripe k on stream client */
    unsigned tcp_first;                                   /* ... tcp_first + k */
    unsigned n_tcp;
    uint64_t ticket; /* same-host copy batch, until copied */
    int copied;      /* nothing in flight: the bytes landed and the ticket is retired */
    /* A same-host batch has landed: set by the thread that copied its last
     * byte (copy_landed), read by the client's caller. */
    int copy_landed;
    ect_xport_client_t *client; /* for copy_landed's wake */
    int detached;
    struct ect_xport_read *prev, *next;
};

ect_status_t
ect__xport_client_create(const ect_xport_client_params_t *params, ect_xport_client_t **client_p)
{
    if (params == NULL || client_p == NULL || params->data == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "xport client: NULL argument");
    ect_status_t st =
        ect__xport_check_own_region("xport client", params->block_size, params->num_blocks);
    if (st != ECT_OK)
        return st;
    if (params->prefer != ECT_TRANSPORT_AUTO && params->prefer != ECT_TRANSPORT_TCP &&
        params->prefer != ECT_TRANSPORT_SAME_HOST)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport client: transport %d is not auto, tcp or same_host",
                          (int)params->prefer);
    if (params->tcp_stripes > ECT_STREAM_MAX_STRIPES)
        return ect__error(ECT_ERR_INVALID_ARG, "xport client: %u tcp stripes; at most %u",
                          params->tcp_stripes, ECT_STREAM_MAX_STRIPES);
    const char *dir = params->region_dir != NULL ? params->region_dir : "/dev/shm";
    if (dir[0] != '/' || strlen(dir) > ECT_XPORT_MAX_PATH)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport client: region directory '%s' is not an absolute path of at "
                          "most %u bytes",
                          dir, ECT_XPORT_MAX_PATH);
    ect_xport_client_t *c = ect__calloc(1, sizeof(*c));
    if (c == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport client: out of memory");
    if (params->prefer != ECT_TRANSPORT_SAME_HOST && params->touch_pages)
        ect__xport_touch_from_kernel(params->data,
                                     (size_t)(params->num_blocks * params->block_size));
    c->data = params->data;
    c->block_size = params->block_size;
    c->num_blocks = params->num_blocks;
    c->prefer = params->prefer;
    c->wake = params->wake;
    c->wake_arg = params->wake_arg;
    c->touch_pages = params->touch_pages;
    c->copy_params = params->copy;
    c->tcp_stripes = params->tcp_stripes == 0 ? 1 : params->tcp_stripes;
    snprintf(c->region_dir, sizeof(c->region_dir), "%s", dir);
    /* Without a boot id the same-host path is never usable; tcp still is. */
    if (params->prefer != ECT_TRANSPORT_TCP) {
        if (ect__xport_boot_id(c->boot_id) == ECT_OK)
            c->have_boot_id = 1;
        else
            ect__log_last_error(ECT_LOG_WARN, "xport client: same-host path unavailable");
    }
    *client_p = c;
    return ECT_OK;
}

/* ---- reads ----------------------------------------------------------------------- */

static void
read_unlink(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        c->reads = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
}

/* Move a PENDING read to its final state once the transport is done. */
static void
read_update(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (r->state != ECT_XPORT_READ_PENDING)
        return;
    ect_status_t st;
    char why[200] = "";
    if (r->copied) {
        st = ECT_OK;
    } else if (r->kind == ECT_XPORT_TCP) {
        /* Done when every stripe is; failed as soon as one stripe is (the
         * others are cut at once). */
        unsigned done = 0;
        int failed = -1;
        for (unsigned k = 0; k < r->n_tcp && failed < 0; k++) {
            ect_xport_read_state_t rs =
                ect__xport_stream_read_state(c->tcp[r->tcp_first + k], r->tcp[k], why, sizeof(why));
            done += rs == ECT_XPORT_READ_DONE;
            if (rs == ECT_XPORT_READ_FAILED)
                failed = (int)k;
        }
        if (failed < 0 && done < r->n_tcp)
            return;
        if (failed >= 0) {
            for (unsigned k = 0; k < r->n_tcp; k++)
                ect__xport_stream_read_cancel(c->tcp[r->tcp_first + k], r->tcp[k]);
            if (r->n_tcp > 1) {
                char stripe_why[sizeof(why)];
                snprintf(stripe_why, sizeof(stripe_why), "stripe %d of %u: %s", failed, r->n_tcp,
                         why);
                memcpy(why, stripe_why, sizeof(why));
            }
        }
        st = failed < 0 ? ECT_OK : ECT_ERR_TRANSPORT;
    } else {
        if (!__atomic_load_n(&r->copy_landed, __ATOMIC_SEQ_CST))
            return;
        /* Landed, so the engine answers at once and retires the ticket. */
        if ((st = ect_copy_engine_query(c->copy, r->ticket)) == ECT_OK)
            r->copied = 1;
        else
            snprintf(why, sizeof(why), "%s", ect_last_error());
    }
    if (st == ECT_OK) {
        r->state = ECT_XPORT_READ_DONE;
        c->counters.reads[r->kind]++;
        c->counters.bytes[r->kind] += r->bytes;
    } else {
        r->state = ECT_XPORT_READ_FAILED;
        c->counters.failures++;
        ECT_LOG_W("xport: read of %" PRIu64 " bytes from %s over %s failed: %s", r->bytes,
                  r->peer_key, ect__xport_kind_str(r->kind), why);
    }
    if (r->peer != NULL) {
        struct peer *p = r->peer;
        r->peer = NULL;
        ect__xport_peer_unbusy(c, p);
    }
}

/* Free the stream reads of r's stripes. */
static void
read_free_stripes(ect_xport_client_t *c, ect_xport_read_t *r)
{
    for (unsigned k = 0; k < r->n_tcp; k++) {
        ect__xport_stream_read_free(c->tcp[r->tcp_first + k], r->tcp[k]);
        r->tcp[k] = NULL;
        c->tcp_reads[r->tcp_first + k]--;
    }
    r->n_tcp = 0;
}

static void
read_free(ect_xport_client_t *c, ect_xport_read_t *r)
{
    read_unlink(c, r);
    read_free_stripes(c, r);
    ect__free(r);
}

/* Free detached reads that have finished. */
static void
reap_detached(ect_xport_client_t *c)
{
    for (ect_xport_read_t *r = c->reads, *next; r != NULL; r = next) {
        next = r->next;
        if (!r->detached)
            continue;
        read_update(c, r);
        if (r->state != ECT_XPORT_READ_PENDING)
            read_free(c, r);
    }
}

/* How many stripes a tcp read of `bytes` takes from peer p: what both
 * sides allow, and no stripe under ECT_XPORT_STRIPE_MIN_BYTES. */
static unsigned
stripes_for(const ect_xport_client_t *c, const struct peer *p, uint64_t bytes)
{
    uint64_t n = c->tcp_stripes;
    if (p->offer.tcp_stripes < n)
        n = p->offer.tcp_stripes < 2 ? 1 : p->offer.tcp_stripes;
    if (bytes / ECT_XPORT_STRIPE_MIN_BYTES < n)
        n = bytes / ECT_XPORT_STRIPE_MIN_BYTES;
    if (bytes / c->block_size < n)
        n = bytes / c->block_size;
    return n < 1 ? 1 : (unsigned)n;
}

/* The segments of payload bytes [from, from + len) (block-aligned) into
 * out (at most n_segs + 1 of them); returns how many. */
static size_t
segments_slice(const ect_xport_segment_t *segs, size_t n_segs, uint64_t from, uint64_t len,
               ect_xport_segment_t *out)
{
    size_t n = 0;
    uint64_t at = 0;
    for (size_t i = 0; i < n_segs && len > 0; i++) {
        uint64_t end = at + segs[i].len;
        if (end > from) {
            uint64_t skip = from > at ? from - at : 0;
            uint64_t take = segs[i].len - skip < len ? segs[i].len - skip : len;
            out[n++] = (ect_xport_segment_t){.remote_off = segs[i].remote_off + skip,
                                             .local = (uint8_t *)segs[i].local + skip,
                                             .len = (size_t)take};
            from += take;
            len -= take;
        }
        at = end;
    }
    return n;
}

/* A stream client's wake callback: one of its reads (a tcp read or a
 * stripe of one) settled. */
static void
stream_settled(void *arg)
{
    const ect_xport_client_t *c = arg;
    c->wake(c->wake_arg, ECT_XPORT_TCP);
}

/* Start the stream of one grant, in stripes where it pays: each request
 * names the grant (and its stripe); stripe k goes over stream client k,
 * whose connections are pooled under the peer's address and instance. */
static ect_status_t
start_tcp(ect_xport_client_t *c, struct peer *p, const ect_xport_read_params_t *rp,
          const ect_xport_desc_t *desc, const ect_xport_segment_t *segs, size_t n_segs,
          ect_xport_read_t *r)
{
    ect_status_t st;
    if (!p->tcp_resolved) {
        if ((st = ect__xport_resolve(p->host, p->offer.tcp_port, 0, &p->tcp_addr,
                                     &p->tcp_addr_len)) != ECT_OK)
            return st;
        char inst[2 * ECT_XPORT_INSTANCE_LEN + 1];
        for (size_t i = 0; i < ECT_XPORT_INSTANCE_LEN; i++)
            snprintf(inst + 2 * i, 3, "%02x", p->offer.instance[i]);
        snprintf(p->pool_key, sizeof(p->pool_key), "%s/%u/%s", p->key, (unsigned)p->offer.tcp_port,
                 inst);
        p->tcp_resolved = 1;
    }
    unsigned stripes = stripes_for(c, p, r->bytes);
    r->tcp_first = 0;
    for (unsigned k = 1; stripes == 1 && k < c->tcp_stripes; k++)
        if (c->tcp_reads[k] < c->tcp_reads[r->tcp_first])
            r->tcp_first = k;
    for (unsigned k = r->tcp_first; k < r->tcp_first + stripes; k++)
        if (c->tcp[k] == NULL &&
            (st = ect__xport_stream_client_create(c->wake != NULL ? stream_settled : NULL, c,
                                                  &c->tcp[k])) != ECT_OK)
            return st;
    ect_stream_req_t req = {.session_id = rp->session_id,
                            .session_len = strlen(rp->session_id),
                            .mm_hash = rp->mm_hash,
                            .hash_len = strlen(rp->mm_hash),
                            .expect_bytes = r->bytes,
                            .stripes = stripes,
                            .aligned = p->offer.tcp_aligned};
    memcpy(req.token, desc->token, ECT_STREAM_TOKEN_LEN);
    size_t cap = ect__stream_req_size(&req);
    uint8_t *buf = ect__malloc(cap);
    ect_xport_segment_t *part = ect__malloc((n_segs + 1) * sizeof(*part));
    if (buf == NULL || part == NULL) {
        ect__free(buf);
        ect__free(part);
        return ect__error(ECT_ERR_NO_MEMORY, "xport: out of memory");
    }
    st = ECT_OK;
    for (unsigned k = 0; k < stripes && st == ECT_OK; k++) {
        uint64_t first, count;
        ect__stream_stripe_blocks(r->bytes / c->block_size, k, stripes, &first, &count);
        size_t n_part =
            segments_slice(segs, n_segs, first * c->block_size, count * c->block_size, part);
        size_t len = 0;
        req.stripe = k;
        if ((st = ect__stream_req_encode(&req, buf, cap, &len)) == ECT_OK &&
            (st = ect__xport_stream_read_start(c->tcp[r->tcp_first + k], &p->tcp_addr,
                                               p->tcp_addr_len, p->pool_key, buf, len,
                                               ect__stream_resp_len(&req), part, n_part,
                                               count * c->block_size, &r->tcp[k])) == ECT_OK) {
            r->n_tcp = k + 1;
            c->tcp_reads[r->tcp_first + k]++;
        }
    }
    ect__free(part);
    ect__free(buf);
    if (st != ECT_OK) /* the stripes already started are cut: the grant fails with them */
        read_free_stripes(c, r);
    return st;
}

/* The copy engine's landed callback of a same-host read, on whichever
 * thread copied its last byte.  Once the flag is set the caller may retire
 * and free the read, so r is not touched after it (its address is only
 * compared); the client outlives every callback (destroy joins the copy
 * threads before it frees). */
static void
copy_landed(void *arg)
{
    ect_xport_read_t *r = arg;
    ect_xport_client_t *c = r->client;
    __atomic_store_n(&r->copy_landed, 1, __ATOMIC_SEQ_CST);
    /* r may be freed from here on (see the top of this file). */
    if (c->wake != NULL && __atomic_load_n(&c->starting_read, __ATOMIC_SEQ_CST) != arg)
        c->wake(c->wake_arg, ECT_XPORT_SAME_HOST);
}

static ect_status_t
start_same_host(ect_xport_client_t *c, struct peer *p, const ect_xport_segment_t *segs,
                size_t n_segs, ect_xport_read_t *r)
{
    /* The copy engine decides where the bytes are copied: a read it expects
     * to land sooner on this thread than on its sleeping copy threads
     * (small ones, and up to several MiB where a wake-up is slow) is copied
     * inside the submit.  Otherwise this thread copies the pieces no copy
     * thread has taken by the time it gets to them (the threads take a
     * while to wake) and polls briefly for the rest; what is still being
     * copied after that calls copy_landed when it lands, so a caller never
     * sleeps on a copy and the copy never waits for the caller. */
    ect_status_t st;
    if (c->copy == NULL) {
        if ((st = ect_copy_engine_create_cpu(&c->copy_params, &c->copy)) != ECT_OK)
            return st;
    }
    r->client = c;
    __atomic_store_n(&c->starting_read, r, __ATOMIC_SEQ_CST);
    if ((st = ect__xport_shm_post(c->copy, p->shm, segs, n_segs, copy_landed, r, &r->ticket)) !=
        ECT_OK) {
        __atomic_store_n(&c->starting_read, NULL, __ATOMIC_SEQ_CST);
        return st;
    }
    /* Only copy_landed settles the read, even when help saw it land: the
     * thread that copied the last byte may not have called it yet, and the
     * read must stay alive until it has. */
    ect_status_t help = ect__copy_cpu_help(c->copy, r->ticket);
    if (help != ECT_OK && help != ECT_ERR_BUSY)
        ect__log_last_error(ECT_LOG_WARN, "xport same-host");
    /* From here a landing wakes the caller (see the top of this file). */
    __atomic_store_n(&c->starting_read, NULL, __ATOMIC_SEQ_CST);
    r->peer = p;
    p->busy++;
    return ECT_OK;
}

ect_status_t
ect__xport_read_start(ect_xport_client_t *c, const ect_xport_read_params_t *rp,
                      ect_xport_read_t **read_p, ect_xport_kind_t *kind_p)
{
    if (c == NULL || rp == NULL || read_p == NULL || rp->host == NULL || rp->session_id == NULL ||
        rp->mm_hash == NULL || (rp->remote_blocks == NULL && rp->n_remote != 0) ||
        (rp->local_runs == NULL && rp->n_local_runs != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "xport read: NULL argument");
    char key[PEER_KEY_MAX + 1];
    int kl = snprintf(key, sizeof(key), "%s:%u", rp->host, (unsigned)rp->port);
    if (rp->host[0] == '\0' || rp->port == 0 || kl < 0 || (size_t)kl >= sizeof(key))
        return ect__error(ECT_ERR_INVALID_ARG, "xport read: peer %s:%u is not an address", rp->host,
                          (unsigned)rp->port);
    size_t sl = strlen(rp->session_id), hl = strlen(rp->mm_hash);
    if (sl == 0 || sl > ECT_WIRE_MAX_STR || hl == 0 || hl > ECT_WIRE_MAX_STR)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport read: session id of %zu bytes, hash of %zu (1..%u each)", sl, hl,
                          ECT_WIRE_MAX_STR);
    reap_detached(c);

    /* Validate the blobs before they can touch the cache: a malformed offer
     * from a live peer must not drop its good cached state. */
    ect_xport_offer_t offer;
    ect_xport_desc_t desc;
    ect_status_t st;
    if ((st = ect__xport_offer_decode(rp->agent_metadata, rp->agent_len, &offer)) != ECT_OK ||
        (st = ect__xport_desc_decode(rp->mem_descriptor, rp->desc_len, &desc)) != ECT_OK)
        return ect__error(st, "xport: from %s: %s", key, ect_last_error());
    ect_xport_segment_t *segs = NULL;
    size_t n_segs = 0;
    uint64_t bytes = 0;
    st = ect__xport_plan_segments(c, key, &desc, rp->remote_blocks, rp->n_remote, rp->local_runs,
                                  rp->n_local_runs, &segs, &n_segs, &bytes);
    if (st != ECT_OK)
        return st;
    struct peer *p = NULL;
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    ect_xport_read_t *r = NULL;
    st = ect__xport_peer_get(c, key, rp->host, rp->agent_metadata, rp->agent_len, &p);
    if (st == ECT_OK)
        st = ect__xport_choose(c, p, &desc, &kind);
    if (st != ECT_OK)
        goto free_segs;
    if ((r = ect__calloc(1, sizeof(*r))) == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "xport read: out of memory");
        goto free_segs;
    }
    r->kind = kind;
    r->bytes = bytes;
    r->state = ECT_XPORT_READ_PENDING;
    snprintf(r->peer_key, sizeof(r->peer_key), "%s", key);
    if (r->bytes == 0)
        r->copied = 1; /* nothing to move on either transport */
    else if (kind == ECT_XPORT_TCP)
        st = start_tcp(c, p, rp, &desc, segs, n_segs, r);
    else
        st = start_same_host(c, p, segs, n_segs, r);
    if (st != ECT_OK) {
        ect__free(r);
        goto free_segs;
    }
    ect__free(segs);
    r->next = c->reads;
    if (c->reads != NULL)
        c->reads->prev = r;
    c->reads = r;
    if (kind_p != NULL)
        *kind_p = kind;
    *read_p = r;
    return ECT_OK;

free_segs:
    ect__free(segs);
    return st;
}

ect_xport_read_state_t
ect__xport_read_poll(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (c == NULL || r == NULL)
        return ECT_XPORT_READ_FAILED;
    reap_detached(c);
    read_update(c, r);
    return r->state;
}

void
ect__xport_read_cancel(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (c == NULL || r == NULL)
        return;
    for (unsigned k = 0; k < r->n_tcp; k++)
        ect__xport_stream_read_cancel(c->tcp[r->tcp_first + k], r->tcp[k]);
    read_update(c, r);
}

void
ect__xport_read_release(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (c == NULL || r == NULL)
        return;
    ect__xport_read_cancel(c, r);
    if (r->state == ECT_XPORT_READ_PENDING) {
        r->detached = 1;
        return;
    }
    read_free(c, r);
}

void
ect__xport_client_forget_peer(ect_xport_client_t *c, const char *host, uint16_t port)
{
    if (c == NULL || host == NULL)
        return;
    char key[PEER_KEY_MAX + 1];
    snprintf(key, sizeof(key), "%s:%u", host, (unsigned)port);
    struct peer *p = ect__xport_peer_find(c, key);
    if (p != NULL) {
        ECT_LOG_D("xport: forgetting peer %s", key);
        ect__xport_peer_retire(c, p);
    }
}

void
ect__xport_client_expect_read(ect_xport_client_t *c, const char *host, uint16_t port,
                              uint64_t budget_ns)
{
    if (c == NULL || host == NULL || c->copy == NULL)
        return;
    char key[PEER_KEY_MAX + 1];
    snprintf(key, sizeof(key), "%s:%u", host, (unsigned)port);
    const struct peer *p = ect__xport_peer_find(c, key);
    if (p != NULL && p->shm != NULL)
        ect__copy_cpu_prewake(c->copy, budget_ns);
}

void
ect__xport_client_counters(const ect_xport_client_t *c, ect_xport_counters_t *counters_p)
{
    if (c != NULL && counters_p != NULL)
        *counters_p = c->counters;
}

ect_status_t
ect__xport_client_copy_stats(const ect_xport_client_t *c, struct ect__copy_cpu_stats *stats_p)
{
    if (c == NULL || stats_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "xport client copy stats: NULL argument");
    if (c->copy == NULL) {
        memset(stats_p, 0, sizeof(*stats_p));
        return ECT_OK;
    }
    return ect__copy_cpu_stats(c->copy, stats_p);
}

static int
any_pending(ect_xport_client_t *c)
{
    for (ect_xport_read_t *r = c->reads; r != NULL; r = r->next) {
        read_update(c, r);
        if (r->state == ECT_XPORT_READ_PENDING)
            return 1;
    }
    return 0;
}

void
ect__xport_client_destroy(ect_xport_client_t *c)
{
    if (c == NULL)
        return;
    /* Streams are cut at once; same-host copies get a while to land, and
     * the copy engine's destroy waits for what is left, so nothing lands in
     * our region after this returns. */
    for (ect_xport_read_t *r = c->reads; r != NULL; r = r->next)
        ect__xport_read_cancel(c, r);
    uint64_t deadline = ect__now_ns() + DESTROY_WAIT_NS;
    while (any_pending(c) && ect__now_ns() < deadline) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* The engine's destroy lets what is left land and joins its threads:
     * no byte lands and no copy_landed runs after it. */
    ect_copy_engine_destroy(c->copy);
    c->copy = NULL;
    for (ect_xport_read_t *r = c->reads, *next; r != NULL; r = next) {
        next = r->next;
        read_free_stripes(c, r);
        ect__free(r);
    }
    c->reads = NULL;
    for (unsigned k = 0; k < ECT_STREAM_MAX_STRIPES; k++)
        ect__xport_stream_client_destroy(c->tcp[k]);
    struct peer *lists[2] = {c->peers, c->retired};
    for (int i = 0; i < 2; i++)
        for (struct peer *p = lists[i], *next; p != NULL; p = next) {
            next = p->next;
            ect__xport_peer_free(p);
        }
    ect__free(c);
}
