/*
 * The TCP stream server's stripe groups and grant claim (the rest of the
 * server: xport_tcp_server.c; what both share, who owns what and the lock
 * order: xport_tcp_server_internal.h).
 *
 * A request names a grant by session, hash and token; the grant callbacks
 * claim it, and the view they give is checked against the region before a
 * byte is sent (ect__xport_grant_claim).  An unstriped request's worker
 * then sends it and finishes the grant itself.  The stripes of a striped
 * request come on as many connections, each to its own worker: the first
 * to arrive claims the grant and opens a stripe group, the others join it
 * (ect__xport_stripe_join), and the group finishes the grant when its last
 * reference goes (a stripe being sent, or the wait for stripes to come),
 * sent only if every stripe was.  A group waits for its stripes no longer
 * than the send timeout (ect__xport_groups_sweep).
 *
 * Locking: the groups and every field of them are under groups_lock, which
 * is taken before the grant callbacks' own locks: a group's first stripe
 * claims its grant under groups_lock, so two stripes arriving at once
 * cannot both miss the group and the second find the grant used up, and
 * the last reference finishes the grant under it.  counters_lock is taken
 * inside groups_lock (COUNT), never the other way round.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "p2p/xport_tcp_server_internal.h"

/* ---- stripe groups ------------------------------------------------------------- */

/* The bits of every stripe of g. */
static uint32_t
all_stripes(const struct stripe_group *g)
{
    return (1u << g->stripes) - 1u; /* stripes <= ECT_STREAM_MAX_STRIPES */
}

void
ect__xport_group_put_locked(ect_xport_stream_server_t *s, struct stripe_group *g)
{
    if (--g->refs > 0)
        return;
    for (struct stripe_group **gp = &s->groups; *gp != NULL; gp = &(*gp)->next)
        if (*gp == g) {
            *gp = g->next;
            break;
        }
    int sent = !g->failed && g->sent == all_stripes(g);
    if (sent)
        COUNT(s, streams_served, 1); /* before the grant ends, as unstriped streams */
    s->ops.finish(s->ops.user, g->grant, sent);
    ect__free(g);
}

void
ect__xport_group_leave(ect_xport_stream_server_t *s, struct stripe_group *g, uint32_t stripe_bit,
                       int sent)
{
    pthread_mutex_lock(&s->groups_lock);
    if (sent) {
        g->sent |= stripe_bit;
    } else {
        g->failed = 1;
        if (g->waiting) { /* no stripe may join a failed group: stop waiting */
            g->waiting = 0;
            ect__xport_group_put_locked(s, g);
        }
    }
    ect__xport_group_put_locked(s, g);
    pthread_mutex_unlock(&s->groups_lock);
}

/* The live group of that name and token, or NULL.  groups_lock held. */
static struct stripe_group *
group_find_locked(ect_xport_stream_server_t *s, const ect_stream_req_t *req)
{
    for (struct stripe_group *g = s->groups; g != NULL; g = g->next)
        if (g->session_len == req->session_len && g->hash_len == req->hash_len &&
            memcmp(g->names, req->session_id, req->session_len) == 0 &&
            memcmp(g->names + g->session_len, req->mm_hash, req->hash_len) == 0 &&
            ect__stream_token_equal(g->token, req->token))
            return g;
    return NULL;
}

void
ect__xport_groups_sweep(ect_xport_stream_server_t *s, uint64_t now)
{
    pthread_mutex_lock(&s->groups_lock);
    for (struct stripe_group *g = s->groups, *next; g != NULL; g = next) {
        next = g->next;
        if (g->waiting && now >= g->deadline_ns) {
            ECT_LOG_W("xport tcp server: a striped stream got %u of its %u stripes in time; its "
                      "grant is released",
                      (unsigned)__builtin_popcount(g->joined), (unsigned)g->stripes);
            COUNT(s, timeouts, 1);
            g->waiting = 0;
            g->failed = 1;
            ect__xport_group_put_locked(s, g);
        }
    }
    pthread_mutex_unlock(&s->groups_lock);
}

/* ---- the grant claim and stripe join ------------------------------------------- */

/* Every run lies in the region and they add up to view->bytes. */
static int
view_ok(const ect_xport_stream_server_t *s, const ect_xport_grant_view_t *v)
{
    uint64_t blocks = 0;
    for (size_t i = 0; i < v->n_runs; i++) {
        const ect_run_t *r = &v->runs[i];
        if (r->count == 0 || r->first >= s->num_blocks || r->count > s->num_blocks - r->first)
            return 0;
        blocks += r->count;
    }
    return blocks * s->block_size == v->bytes;
}

ect_stream_status_t
ect__xport_grant_claim(struct worker *w, const ect_stream_req_t *req,
                       ect_xport_grant_view_t *view_p, void **grant_p)
{
    ect_xport_stream_server_t *s = w->s;
    memcpy(w->session, req->session_id, req->session_len);
    w->session[req->session_len] = '\0';
    memcpy(w->hash, req->mm_hash, req->hash_len);
    w->hash[req->hash_len] = '\0';
    ect_stream_status_t st = s->ops.claim(s->ops.user, w->session, w->hash, req->token,
                                          req->expect_bytes, view_p, grant_p);
    if (st == ECT_STREAM_OK && !view_ok(s, view_p)) {
        ECT_LOG_E("xport tcp server: the grant for '%s' names blocks outside the region", w->hash);
        s->ops.finish(s->ops.user, *grant_p, 0);
        st = ECT_STREAM_DENIED;
    }
    return st;
}

ect_stream_status_t
ect__xport_stripe_join(struct worker *w, struct sconn *c, const ect_stream_req_t *req,
                       uint64_t *first_p, uint64_t *count_p)
{
    ect_xport_stream_server_t *s = w->s;
    uint32_t bit = 1u << req->stripe;
    uint64_t now = ect__now_ns();
    ect_stream_status_t st = ECT_STREAM_OK;
    pthread_mutex_lock(&s->groups_lock);
    struct stripe_group *g = group_find_locked(s, req);
    if (g != NULL) {
        /* Refusals leave the group as it was. */
        if (g->failed || !g->waiting || now >= g->deadline_ns || g->stripes != req->stripes ||
            (g->joined & bit) != 0)
            st = ECT_STREAM_DENIED;
        else if (g->expect != req->expect_bytes)
            st = ECT_STREAM_SIZE_MISMATCH;
    } else {
        /* Claimed under groups_lock, so two stripes arriving at once cannot
         * both miss the group and the second find the grant used up. */
        ect_xport_grant_view_t view = {0};
        void *grant = NULL;
        st = ect__xport_grant_claim(w, req, &view, &grant);
        if (st == ECT_STREAM_OK && view.bytes / s->block_size < req->stripes) {
            s->ops.finish(s->ops.user, grant, 0); /* fewer blocks than stripes */
            st = ECT_STREAM_SIZE_MISMATCH;
        }
        if (st == ECT_STREAM_OK) {
            g = ect__malloc(sizeof(*g) + req->session_len + req->hash_len);
            if (g == NULL) {
                ECT_LOG_E("xport tcp server: out of memory for a stripe group");
                s->ops.finish(s->ops.user, grant, 0);
                st = ECT_STREAM_DENIED;
            } else {
                memset(g, 0, sizeof(*g));
                memcpy(g->token, req->token, ECT_STREAM_TOKEN_LEN);
                g->expect = req->expect_bytes;
                g->stripes = req->stripes;
                g->waiting = 1;
                g->refs = 1;
                g->deadline_ns = now + s->send_timeout_ns;
                g->grant = grant;
                g->view = view;
                g->session_len = req->session_len;
                g->hash_len = req->hash_len;
                memcpy(g->names, req->session_id, req->session_len);
                memcpy(g->names + req->session_len, req->mm_hash, req->hash_len);
                g->next = s->groups;
                s->groups = g;
            }
        }
    }
    if (st == ECT_STREAM_OK) {
        g->joined |= bit;
        g->refs++;
        if (g->joined == all_stripes(g)) {
            g->waiting = 0; /* every stripe is in: drop the waiting reference */
            ect__xport_group_put_locked(s, g);
        }
        c->group = g;
        c->stripe_bit = bit;
        c->runs = g->view.runs;
        c->n_runs = g->view.n_runs;
        ect__stream_stripe_blocks(g->view.bytes / s->block_size, req->stripe, req->stripes, first_p,
                                  count_p);
    }
    pthread_mutex_unlock(&s->groups_lock);
    return st;
}
