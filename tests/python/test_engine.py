"""The engine driven from Python: a scheduler process and two
tensor-parallel worker processes exchanging the connector's metadata by
pickling, in the engine's call order, with real torch CPU tensors from a
deterministic stand-in encoder.  The GPU cache is small, so entries drop
out and later requests reload them from the CPU tier; every reload is
compared with a fresh encode (in the workers)."""

from __future__ import annotations

import random

import pytest

from engine_sim import Engine


def _workload(n_requests: int, n_images: int, seed: int):
    rng = random.Random(seed)
    reqs = []
    for r in range(n_requests):
        items = sorted({int(rng.random() ** 1.5 * n_images) for _ in range(rng.randint(1, 3))})
        reqs.append({"id": f"req-{r}", "items": [{"item": i} for i in items]})
    return reqs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_reloads_dropped_entries_from_the_cpu_tier(region_dir, instance_id, dtype):
    hidden = 64
    elem = 4 if dtype == "float32" else 2
    spec = {
        "role": "ec_both",
        "cpu_bytes": 480 * hidden * elem,  # about 20 of the 32 images: evictions too
        "hidden": hidden,
        "dtype": dtype,
        "tp": 2,
        "instance_id": instance_id,
        "gpu_cache_tokens": 360,  # one step's worst case: 9 images of 40 rows
        "requests_per_step": 3,
        "env": {"ECTIER_REGION_DIR": region_dir},
    }
    engine = Engine(spec)
    try:
        result = engine.run(_workload(60, 32, seed=7))
        final = engine.stop()
    finally:
        engine.kill()
    counts, m = result["counts"], final["metrics"]
    assert result["failed"] == []
    assert len(result["done"]) == 60
    assert result["mismatches"] == []
    # Entries dropped from the GPU cache came back from the CPU tier, on both ranks.
    assert counts["cpu_hits"] > 10
    assert counts["verified"] == 2 * counts["cpu_hits"]
    assert m["hits_total"] == counts["cpu_hits"]
    assert m["loads_completed_total"] == counts["cpu_hits"]
    assert m["saves_completed_total"] + m["saves_skipped_full_total"] >= 1
    assert m["evictions_total"] > 0
    assert m["load_bytes_total"] > 0
    assert not final["pending_after_drain"]
    # Every item was encoded once per stay in the tier, never for a hit.
    assert counts["encoded"] + counts["cpu_hits"] + counts["gpu_hits"] == sum(
        len(r["items"]) for r in _workload(60, 32, seed=7)
    )
