/*
 * The data transports on real components: a producer process serving a
 * real /dev/shm region, a consumer region in the test process, real UCX on
 * loopback (UCX_TLS=tcp and the default transports) and the same-host path.
 * Reads of scattered remote blocks into scattered local runs must land
 * byte-exact, leave every other local block untouched, and every bad index,
 * length or count must be refused before any byte moves.
 *
 * Counterparts of the seed's unit/test_data.py (adapted to our design):
 *   registers_memory_on_init        -> test_server_registers_region_and_offers_it
 *   raises_if_nixl_unavailable      -> test_server_without_any_transport_is_refused,
 *                                      test_same_host_only_client_refuses_a_ucx_only_offer
 *   accessors and descriptor round trip -> tests/unit/p2p/test_xport_offer.c
 *   add_remote_peer stores the handle -> test_add_remote_peer_endpoint_is_cached_per_peer
 *   remove_remote_peer swallows errors -> test_remove_remote_peer_forget_is_safe_and_reconnects
 *   post_read raises on count mismatch -> test_post_read_count_mismatch_is_peer_error
 *   post_read calls transfer          -> test_read_scattered_blocks_*
 *   release/deregister swallow errors -> test_release_and_deregister_tolerate_null_and_failed
 */
#include "xport_fixture.h"

#define NB 64

/* Remote ids out of order with runs of 3, 2 and 4, read into four local
 * runs that cut across them. */
static const uint64_t SCATTER_REMOTE[] = {7, 8, 9, 2, 3, 40, 0, 11, 12, 13, 14, 63, 31};
static const ect_run_t SCATTER_LOCAL[] = {{20, 2}, {5, 3}, {30, 1}, {50, 7}};

static void
read_scattered(const char *tls, ect_transport_t prefer, int serve_ucx, int serve_same_host,
               ect_xport_kind_t expect_kind)
{
    xf_ucx_env(tls);
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct xf_producer p;
    xf_producer_start(&p, pname, XF_HIDDEN, NB, 0x5eed1, serve_ucx, serve_same_host);
    CHECK_OK(p.status);
    struct xf_consumer c;
    xf_consumer_open(&c, cname, XF_HIDDEN, NB, prefer, NULL);

    ect_xport_read_t *r = NULL;
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    size_t n_remote = sizeof(SCATTER_REMOTE) / sizeof(SCATTER_REMOTE[0]);
    size_t n_runs = sizeof(SCATTER_LOCAL) / sizeof(SCATTER_LOCAL[0]);
    CHECK_OK(ect__xport_read_start(c.client, "127.0.0.1:7001", p.agent, p.agent_len, p.desc,
                                   p.desc_len, SCATTER_REMOTE, n_remote, SCATTER_LOCAL, n_runs, &r,
                                   &kind));
    CHECK_EQ_INT(kind, expect_kind);
    CHECK_EQ_INT(xf_wait(&c, r, 20), ECT_XPORT_READ_DONE);
    /* Polling a finished read keeps reporting its outcome. */
    CHECK_EQ_INT(ect__xport_read_poll(c.client, r), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    xf_check_landed(&c, &p, SCATTER_REMOTE, n_remote, SCATTER_LOCAL, n_runs);

    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.reads[expect_kind], 1);
    CHECK_EQ_U64(k.bytes[expect_kind], n_remote * XF_BLOCK);
    CHECK_EQ_U64(k.reads[expect_kind == ECT_XPORT_UCX ? ECT_XPORT_SAME_HOST : ECT_XPORT_UCX], 0);
    CHECK_EQ_U64(k.failures, 0);
    CHECK_EQ_U64(k.peer_restarts, 0);
    xf_consumer_close(&c);
    xf_producer_stop(&p);
    rt_check_no_leftovers();
}

RT_CASE(test_read_scattered_blocks_over_ucx_tcp_is_byte_exact)
{
    read_scattered("tcp", ECT_TRANSPORT_UCX, 1, 1, ECT_XPORT_UCX);
}

RT_CASE(test_read_scattered_blocks_over_ucx_default_transports_is_byte_exact)
{
    read_scattered(NULL, ECT_TRANSPORT_UCX, 1, 1, ECT_XPORT_UCX);
}

RT_CASE(test_read_scattered_blocks_over_same_host_is_byte_exact)
{
    read_scattered("tcp", ECT_TRANSPORT_SAME_HOST, 1, 1, ECT_XPORT_SAME_HOST);
}

RT_CASE(test_auto_picks_same_host_when_the_offer_has_it)
{
    read_scattered("tcp", ECT_TRANSPORT_AUTO, 1, 1, ECT_XPORT_SAME_HOST);
}

RT_CASE(test_auto_picks_ucx_when_the_producer_offers_only_ucx)
{
    read_scattered("tcp", ECT_TRANSPORT_AUTO, 1, 0, ECT_XPORT_UCX);
}

RT_CASE(test_same_host_only_producer_serves_without_ucx)
{
    read_scattered("tcp", ECT_TRANSPORT_AUTO, 0, 1, ECT_XPORT_SAME_HOST);
}

/* Many reads, each of the whole region in reverse block order (every block
 * its own segment), back to back over one endpoint. */
RT_CASE(test_repeated_reads_over_one_endpoint_all_land)
{
    xf_ucx_env("tcp");
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct xf_producer p;
    xf_producer_start(&p, pname, XF_HIDDEN, NB, 77, 1, 0);
    CHECK_OK(p.status);
    struct xf_consumer c;
    xf_consumer_open(&c, cname, XF_HIDDEN, NB, ECT_TRANSPORT_AUTO, NULL);
    uint64_t remote[NB];
    for (int i = 0; i < NB; i++)
        remote[i] = NB - 1 - (uint64_t)i;
    ect_run_t all = {0, NB};
    for (int round = 0; round < 8; round++) {
        ect_xport_read_t *r;
        CHECK_OK(ect__xport_read_start(c.client, "h:1", p.agent, p.agent_len, p.desc, p.desc_len,
                                       remote, NB, &all, 1, &r, NULL));
        CHECK_EQ_INT(xf_wait(&c, r, 20), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r);
    }
    xf_check_landed(&c, &p, remote, NB, &all, 1);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.reads[ECT_XPORT_UCX], 8);
    CHECK_EQ_U64(k.bytes[ECT_XPORT_UCX], 8ull * NB * XF_BLOCK);
    xf_consumer_close(&c);
    xf_producer_stop(&p);
    rt_check_no_leftovers();
}

RT_CASE(test_empty_read_is_done_at_once)
{
    xf_ucx_env("tcp");
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct xf_producer p;
    xf_producer_start(&p, pname, XF_HIDDEN, NB, 3, 1, 1);
    CHECK_OK(p.status);
    struct xf_consumer c;
    xf_consumer_open(&c, cname, XF_HIDDEN, NB, ECT_TRANSPORT_UCX, NULL);
    ect_xport_read_t *r;
    CHECK_OK(ect__xport_read_start(c.client, "h:1", p.agent, p.agent_len, p.desc, p.desc_len, NULL,
                                   0, NULL, 0, &r, NULL));
    CHECK_EQ_INT(ect__xport_read_poll(c.client, r), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    xf_check_untouched(&c);
    xf_consumer_close(&c);
    xf_producer_stop(&p);
    rt_check_no_leftovers();
}

/* ---- refusals: nothing moves -------------------------------------------------------------- */

struct refusal_env {
    struct xf_producer p;
    struct xf_consumer c;
};

static void
refusal_open(struct refusal_env *e, ect_transport_t prefer, uint64_t consumer_hidden)
{
    xf_ucx_env("tcp");
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    xf_producer_start(&e->p, pname, XF_HIDDEN, NB, 11, 1, 1);
    CHECK_OK(e->p.status);
    xf_consumer_open(&e->c, cname, consumer_hidden, NB, prefer, NULL);
}

static void
refusal_close(struct refusal_env *e)
{
    xf_check_untouched(&e->c);
    ect_xport_counters_t k;
    ect__xport_client_counters(e->c.client, &k);
    CHECK_EQ_U64(k.reads[ECT_XPORT_UCX] + k.reads[ECT_XPORT_SAME_HOST], 0);
    xf_consumer_close(&e->c);
    xf_producer_stop(&e->p);
    rt_check_no_leftovers();
}

static ect_status_t
try_read(struct refusal_env *e, const uint64_t *remote, size_t n_remote, const ect_run_t *runs,
         size_t n_runs)
{
    ect_xport_read_t *r = (ect_xport_read_t *)(uintptr_t)0x1;
    ect_xport_kind_t kind = (ect_xport_kind_t)77;
    ect_status_t st =
        ect__xport_read_start(e->c.client, "h:1", e->p.agent, e->p.agent_len, e->p.desc,
                              e->p.desc_len, remote, n_remote, runs, n_runs, &r, &kind);
    /* Outputs are written only on success. */
    if (st != ECT_OK) {
        CHECK(r == (ect_xport_read_t *)(uintptr_t)0x1);
        CHECK_EQ_INT(kind, 77);
    }
    return st;
}

static void
remote_block_out_of_range(ect_transport_t prefer)
{
    struct refusal_env e;
    refusal_open(&e, prefer, XF_HIDDEN);
    uint64_t remote[] = {1, 2, NB};
    ect_run_t run = {0, 3};
    CHECK_STATUS(try_read(&e, remote, 3, &run, 1), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "block 64");
    uint64_t huge[] = {UINT64_MAX};
    ect_run_t one = {0, 1};
    CHECK_STATUS(try_read(&e, huge, 1, &one, 1), ECT_ERR_PEER);
    refusal_close(&e);
}

RT_CASE(test_remote_block_out_of_range_is_peer_error_over_ucx)
{
    remote_block_out_of_range(ECT_TRANSPORT_UCX);
}

RT_CASE(test_remote_block_out_of_range_is_peer_error_over_same_host)
{
    remote_block_out_of_range(ECT_TRANSPORT_SAME_HOST);
}

RT_CASE(test_block_size_mismatch_is_peer_error)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, XF_HIDDEN / 2);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    CHECK_STATUS(try_read(&e, remote, 1, &run, 1), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "blocks of 7168 bytes, ours are 3584");
    refusal_close(&e);
}

RT_CASE(test_post_read_count_mismatch_is_peer_error)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_UCX, XF_HIDDEN);
    uint64_t remote[] = {1, 2, 3};
    ect_run_t fewer = {0, 2}, more[] = {{0, 2}, {10, 2}};
    CHECK_STATUS(try_read(&e, remote, 3, &fewer, 1), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "3 block indices for 2 local blocks");
    CHECK_STATUS(try_read(&e, remote, 3, more, 2), ECT_ERR_PEER);
    CHECK_STATUS(try_read(&e, remote, 0, &fewer, 1), ECT_ERR_PEER);
    refusal_close(&e);
}

RT_CASE(test_local_run_outside_our_region_is_overflow)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, XF_HIDDEN);
    uint64_t remote[] = {1, 2, 3, 4};
    ect_run_t past_end[] = {{0, 2}, {NB - 1, 2}};
    CHECK_STATUS(try_read(&e, remote, 4, past_end, 2), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "outside our 64 blocks");
    ect_run_t wraps[] = {{2, UINT64_MAX - 1}};
    CHECK_STATUS(try_read(&e, remote, 4, wraps, 1), ECT_ERR_OVERFLOW);
    ect_run_t starts_after[] = {{NB, 4}};
    CHECK_STATUS(try_read(&e, remote, 4, starts_after, 1), ECT_ERR_OVERFLOW);
    refusal_close(&e);
}

RT_CASE(test_malformed_offer_or_descriptor_from_peer_is_peer_error)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, XF_HIDDEN);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    ect_xport_read_t *r;
    static const uint8_t junk[] = "ECTA\x01\x00\x00\x00\xff\xff";
    CHECK_STATUS(ect__xport_read_start(e.c.client, "h:1", junk, sizeof(junk) - 1, e.p.desc,
                                       e.p.desc_len, remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "h:1");
    CHECK_STATUS(ect__xport_read_start(e.c.client, "h:1", e.p.agent, e.p.agent_len, junk,
                                       sizeof(junk) - 1, remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_PEER);
    CHECK_STATUS(
        ect__xport_read_start(e.c.client, "h:1", NULL, 0, NULL, 0, remote, 1, &run, 1, &r, NULL),
        ECT_ERR_PEER);
    /* Refused before the peer cache: nothing counted as a restart. */
    ect_xport_counters_t k;
    ect__xport_client_counters(e.c.client, &k);
    CHECK_EQ_U64(k.peer_restarts, 0);
    refusal_close(&e);
}

RT_CASE(test_bad_arguments_are_refused)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, XF_HIDDEN);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    ect_xport_read_t *r;
    CHECK_STATUS(ect__xport_read_start(e.c.client, NULL, e.p.agent, e.p.agent_len, e.p.desc,
                                       e.p.desc_len, remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__xport_read_start(e.c.client, "", e.p.agent, e.p.agent_len, e.p.desc,
                                       e.p.desc_len, remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__xport_read_start(e.c.client, "h:1", e.p.agent, e.p.agent_len, e.p.desc,
                                       e.p.desc_len, NULL, 1, &run, 1, &r, NULL),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__xport_read_start(e.c.client, "h:1", e.p.agent, e.p.agent_len, e.p.desc,
                                       e.p.desc_len, remote, 1, NULL, 1, &r, NULL),
                 ECT_ERR_INVALID_ARG);
    ect_xport_client_t *cl = NULL;
    ect_xport_client_params_t cp = {.data = ect_region_data(e.c.region),
                                    .block_size = XF_BLOCK,
                                    .num_blocks = 0,
                                    .prefer = ECT_TRANSPORT_AUTO};
    CHECK_STATUS(ect__xport_client_create(&cp, &cl), ECT_ERR_INVALID_ARG);
    cp.num_blocks = NB;
    cp.prefer = (ect_transport_t)9;
    CHECK_STATUS(ect__xport_client_create(&cp, &cl), ECT_ERR_INVALID_ARG);
    cp.prefer = ECT_TRANSPORT_AUTO;
    cp.region_dir = "relative/dir";
    CHECK_STATUS(ect__xport_client_create(&cp, &cl), ECT_ERR_INVALID_ARG);
    CHECK(cl == NULL);
    refusal_close(&e);
}

/* ---- server ------------------------------------------------------------------------------- */

RT_CASE(test_server_registers_region_and_offers_it)
{
    xf_ucx_env("tcp");
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t rp;
    xf_region_params(&rp, name, XF_HIDDEN, NB);
    ect_region_t *region;
    CHECK_OK(ect_region_open(&rp, &region));
    ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                    .block_size = XF_BLOCK,
                                    .num_blocks = NB,
                                    .region_path = ect_region_path(region),
                                    .data_offset = ect_region_data_offset(region),
                                    .serve_ucx = 1,
                                    .serve_same_host = 1};
    ect_xport_server_t *s;
    CHECK_OK(ect__xport_server_start(&sp, &s));
    CHECK_EQ_INT(ect__xport_server_kinds(s), (1u << ECT_XPORT_UCX) | (1u << ECT_XPORT_SAME_HOST));
    size_t alen, dlen;
    const void *agent = ect__xport_server_agent_metadata(s, &alen);
    const void *desc = ect__xport_server_mem_descriptor(s, &dlen);
    ect_xport_offer_t o;
    ect_xport_desc_t d;
    CHECK_OK(ect__xport_offer_decode(agent, alen, &o));
    CHECK_OK(ect__xport_desc_decode(desc, dlen, &d));
    /* The region itself is registered: base, geometry and a packed key. */
    CHECK_EQ_U64(d.base, (uint64_t)(uintptr_t)ect_region_data(region));
    CHECK_EQ_U64(d.block_size, XF_BLOCK);
    CHECK_EQ_U64(d.num_blocks, NB);
    CHECK(d.rkey_len > 0);
    CHECK(o.ucx_address_len > 0);
    CHECK_EQ_U64(o.path_len, strlen(ect_region_path(region)));
    CHECK(memcmp(o.path, ect_region_path(region), o.path_len) == 0);
    CHECK_EQ_U64(o.data_offset, ect_region_data_offset(region));
    struct stat sb;
    CHECK(stat(ect_region_path(region), &sb) == 0);
    CHECK_EQ_U64(o.ino, sb.st_ino);
    CHECK_EQ_U64(o.dev, sb.st_dev);
    char boot[ECT_XPORT_BOOT_ID_LEN + 1];
    CHECK_OK(ect__xport_boot_id(boot));
    CHECK_STR_EQ(o.boot_id, boot);
    /* The blobs are stable for the server's life. */
    size_t alen2;
    CHECK(ect__xport_server_agent_metadata(s, &alen2) == agent && alen2 == alen);
    ect__xport_server_stop(s);
    ect_region_close(region);
    rt_check_no_leftovers();
}

RT_CASE(test_server_without_any_transport_is_refused)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t rp;
    xf_region_params(&rp, name, XF_HIDDEN, NB);
    ect_region_t *region;
    CHECK_OK(ect_region_open(&rp, &region));
    ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                    .block_size = XF_BLOCK,
                                    .num_blocks = NB,
                                    .region_path = ect_region_path(region)};
    ect_xport_server_t *s = NULL;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "no transport");
    /* Same-host alone with a path that is not a file: nothing to offer. */
    sp.serve_same_host = 1;
    sp.region_path = "/dev/shm";
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    sp.region_path = NULL;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    sp.region_path = ect_region_path(region);
    sp.block_size = 0;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    CHECK(s == NULL);
    ect_region_close(region);
    rt_check_no_leftovers();
}

RT_CASE(test_same_host_only_client_refuses_a_ucx_only_offer)
{
    xf_ucx_env("tcp");
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct xf_producer p;
    xf_producer_start(&p, pname, XF_HIDDEN, NB, 5, 1, 0);
    CHECK_OK(p.status);
    CHECK_EQ_INT(p.kinds, 1u << ECT_XPORT_UCX);
    struct xf_consumer c;
    xf_consumer_open(&c, cname, XF_HIDDEN, NB, ECT_TRANSPORT_SAME_HOST, NULL);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    ect_xport_read_t *r;
    CHECK_STATUS(ect__xport_read_start(c.client, "h:1", p.agent, p.agent_len, p.desc, p.desc_len,
                                       remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "does not offer");
    xf_check_untouched(&c);
    xf_consumer_close(&c);
    /* And a UCX-only client refuses a same-host-only producer. */
    struct xf_producer q;
    xf_producer_start(&q, pname, XF_HIDDEN, NB, 5, 0, 1);
    CHECK_OK(q.status);
    xf_consumer_open(&c, cname, XF_HIDDEN, NB, ECT_TRANSPORT_UCX, NULL);
    CHECK_STATUS(ect__xport_read_start(c.client, "h:2", q.agent, q.agent_len, q.desc, q.desc_len,
                                       remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "does not offer UCX");
    xf_consumer_close(&c);
    xf_producer_stop(&q);
    xf_producer_stop(&p);
    rt_check_no_leftovers();
}

RT_CASE(test_release_and_deregister_tolerate_null_and_failed)
{
    ect__xport_read_release(NULL, NULL);
    ect__xport_client_destroy(NULL);
    ect__xport_server_stop(NULL);
    ect__xport_client_forget_peer(NULL, "h:1");
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_UCX, XF_HIDDEN);
    ect__xport_read_release(e.c.client, NULL);
    CHECK_EQ_INT(ect__xport_read_poll(e.c.client, NULL), ECT_XPORT_READ_FAILED);
    CHECK_STR_EQ(ect__xport_kind_str(ECT_XPORT_UCX), "ucx");
    CHECK_STR_EQ(ect__xport_kind_str(ECT_XPORT_SAME_HOST), "same_host");
    CHECK_STR_EQ(ect__xport_kind_str(ECT_XPORT_NONE), "none");
    refusal_close(&e);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_read_scattered_blocks_over_ucx_tcp_is_byte_exact),
    ECT_CASE(test_read_scattered_blocks_over_ucx_default_transports_is_byte_exact),
    ECT_CASE(test_read_scattered_blocks_over_same_host_is_byte_exact),
    ECT_CASE(test_auto_picks_same_host_when_the_offer_has_it),
    ECT_CASE(test_auto_picks_ucx_when_the_producer_offers_only_ucx),
    ECT_CASE(test_same_host_only_producer_serves_without_ucx),
    ECT_CASE(test_repeated_reads_over_one_endpoint_all_land),
    ECT_CASE(test_empty_read_is_done_at_once),
    ECT_CASE(test_remote_block_out_of_range_is_peer_error_over_ucx),
    ECT_CASE(test_remote_block_out_of_range_is_peer_error_over_same_host),
    ECT_CASE(test_block_size_mismatch_is_peer_error),
    ECT_CASE(test_post_read_count_mismatch_is_peer_error),
    ECT_CASE(test_local_run_outside_our_region_is_overflow),
    ECT_CASE(test_malformed_offer_or_descriptor_from_peer_is_peer_error),
    ECT_CASE(test_bad_arguments_are_refused),
    ECT_CASE(test_server_registers_region_and_offers_it),
    ECT_CASE(test_server_without_any_transport_is_refused),
    ECT_CASE(test_same_host_only_client_refuses_a_ucx_only_offer),
    ECT_CASE(test_release_and_deregister_tolerate_null_and_failed),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], XF_PRODUCER_ARG) == 0)
        return xf_producer_exec_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
