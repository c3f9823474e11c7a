"""A producer engine and a consumer engine (each a scheduler process and
its worker processes) passing encodings peer to peer over ectier's real
ZeroMQ control plane and data transports.  The test plays the
orchestrator: it takes the ec_transfer_params the producer's
request_finished returned and puts them on the consumer's requests,
dropping the media where the producer holds the encoding.

Pulled entries must be exact (compared with a fresh encode in the
consumer's workers); an item the producer has lost falls back to a local
encode when the request still has its media, and fails only its own
request (take_unavailable_requests) when it does not; malformed
ec_transfer_params are request-scoped too."""

from __future__ import annotations

import pytest

from engine_sim import Engine, item_key

#: Data transports to run over; extend when the library gains one.
TRANSPORTS = ["same_host", "tcp", "auto"]

TOKENS = 16
HIDDEN = 64
ROW = HIDDEN * 4  # float32


def _spec(role, instance_id, transport, cpu_rows, tp, extra=None):
    return {
        "role": role,
        "cpu_bytes": cpu_rows * ROW,
        "extra": {"ec_enable_nixl": True, "transport": transport, **(extra or {})},
        "hidden": HIDDEN,
        "dtype": "float32",
        "tp": tp,
        "instance_id": instance_id,
        "gpu_cache_tokens": 40 * TOKENS,
        "requests_per_step": 1,
        "env": {
            "ECTIER_SIDE_CHANNEL_HOST": "127.0.0.1",
            "ECTIER_SIDE_CHANNEL_PORT": "0",
        },
    }


@pytest.fixture
def p2p_library(library):
    import ectier

    if not ectier.has_p2p():
        pytest.skip("libectier built without P2P")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_consumer_pulls_from_producer_falls_back_and_fails_only_lost_requests(
    p2p_library, shm_instance, transport
):
    # The producer's tier holds 6 entries and announcements take no hold, so
    # of images 0..9 (encoded in order) the first four are evicted: lost.
    producer = Engine(
        _spec("ec_producer", shm_instance + "p", transport, 6 * TOKENS, 1, {"announce_lease_s": 0})
    )
    consumer = None
    try:
        produced = producer.run(
            [{"id": f"p{i}", "items": [{"item": i, "tokens": TOKENS}]} for i in range(10)]
        )
        params = {}
        for rid, p in produced["done"].items():
            assert p is not None and len(p) == 1
            params.update(p)
        for i in range(10):
            announced = params[item_key(i)]
            assert announced["size_bytes"] == TOKENS * ROW
            assert announced["peer_host"] == "127.0.0.1" and announced["peer_port"] > 0
            assert announced["metadata"] == {"image_grid_thw": [[1, 2, TOKENS // 2]]}

        consumer = Engine(_spec("ec_consumer", shm_instance + "c", transport, 40 * TOKENS, 2))

        def req(rid, i, media, item_params):
            return {
                "id": rid,
                "items": [{"item": i, "tokens": TOKENS, "media": media}],
                "params": item_params,
            }

        def announced(i):
            return {item_key(i): params[item_key(i)]}

        bad_size = {item_key(21): dict(params[item_key(9)], size_bytes=TOKENS * ROW + 1)}
        requests = [req(f"pull{i}", i, False, announced(i)) for i in range(4, 10)]
        requests += [
            req("missing", 1, True, announced(1)),  # evicted, media kept: encoded here
            req("lost", 2, False, announced(2)),  # evicted, media gone: this request fails
            req("no-address", 20, True, {item_key(20): {"metadata": {}}}),
            req("not-an-object", 22, True, ["not", "an", "object"]),
            req("bad-size", 21, False, bad_size),
        ]
        result = consumer.run(requests, timeout=90)
        final = consumer.stop()
    finally:
        if consumer is not None:
            consumer.kill()
        producer_final = producer.stop()
        producer.kill()

    assert sorted(result["failed"]) == ["bad-size", "lost"]
    assert sorted(result["done"]) == sorted(
        [f"pull{i}" for i in range(4, 10)] + ["missing", "no-address", "not-an-object"]
    )
    assert result["mismatches"] == []
    counts, m = result["counts"], final["metrics"]
    # The six pulled entries were read from the peer, then loaded by both ranks.
    assert m["p2p_reads_completed_total"] == 6
    assert m["p2p_read_bytes_total"] == 6 * TOKENS * ROW
    assert counts["cpu_hits"] == 6 and counts["verified"] == 12
    # Only the three with media and no usable announcement were encoded here.
    assert counts["encoded"] == 3
    assert m["p2p_fallbacks_total"] >= 1
    assert m["acks_received_total"]["nack_missing"] == 2
    assert m["p2p_unavailable_total"] >= 1
    assert counts["deferred"] > 0
    pm = producer_final["metrics"]
    assert pm["acks_sent_total"]["ok"] == 6
    assert pm["announcements_total"] == 10
