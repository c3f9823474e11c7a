#!/usr/bin/env python3
"""The GPU checks of the Python connector, runnable as a plain script (the
GPU machine's Python has torch with CUDA but no pytest):

1. ``engine``: the engine of engine_sim.py (a scheduler process and two
   tensor-parallel worker processes exchanging pickled metadata) with the
   encoder cache in CUDA memory, every worker step running on a
   non-default CUDA stream (the engine's current stream, which ectier's
   copies are ordered against); every reload compared with a fresh encode.
2. ``bench``: fetch versus re-encode.  A vision transformer built with torch
   in the shape of Qwen2-VL-7B's vision tower (32 layers, width 1280, 16
   heads, patch 14 with temporal patch 2, 2x2 merge, output 3584; random
   weights, bf16) encodes a 1024-token image; the same output is saved to
   the CPU tier and loaded back into the GPU encoder cache through
   ECTierConnector.  Prints both times and their ratio (target: the reload
   at least 100x faster than the encode).

    python3 tests/python/gpu_checks.py [engine] [bench] [--device cuda|cpu] [--small]

``--device cpu --small`` runs the same code on a CPU with a tiny tower (a
smoke test of the script itself; its figures mean nothing).  Exits 0 when
every check passed, 1 when one failed, 77 (skip) without a GPU for
``--device cuda``.  Needs ECTIER_LIBRARY (or an installed libectier) built
with CUDA for ``--device cuda``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, List

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import engine_sim  # noqa: E402

SKIP = 77

# ---- the vision tower ---------------------------------------------------------------------------


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full attention over one image's patches ([heads, n, d] each); the
    fused kernel where torch has it (2.0 and later)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    weights = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v


class VisionTower(torch.nn.Module):
    """A Qwen2-VL-style vision transformer (random weights): patch
    embedding of 3 x 2 x 14 x 14 pixels, blocks of pre-norm attention with
    2-D rotary positions and a QuickGELU MLP (ratio 4), then a 2x2 patch
    merger to the language model's width."""

    def __init__(
        self,
        depth: int = 32,
        width: int = 1280,
        heads: int = 16,
        patch: int = 14,
        temporal: int = 2,
        merge: int = 2,
        out: int = 3584,
    ) -> None:
        super().__init__()
        self.width, self.heads, self.merge = width, heads, merge
        self.patch_embed = torch.nn.Linear(3 * temporal * patch * patch, width, bias=False)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict(
                {
                    "norm1": torch.nn.LayerNorm(width, eps=1e-6),
                    "qkv": torch.nn.Linear(width, 3 * width),
                    "proj": torch.nn.Linear(width, width),
                    "norm2": torch.nn.LayerNorm(width, eps=1e-6),
                    "fc1": torch.nn.Linear(width, 4 * width),
                    "fc2": torch.nn.Linear(4 * width, width),
                }
            )
            for _ in range(depth)
        )
        self.merger_norm = torch.nn.LayerNorm(width, eps=1e-6)
        self.merger_fc1 = torch.nn.Linear(width * merge * merge, width * merge * merge)
        self.merger_fc2 = torch.nn.Linear(width * merge * merge, out)

    def _rotary(self, grid_h: int, grid_w: int, device: Any, dtype: Any) -> tuple:
        head_dim = self.width // self.heads
        quarter = head_dim // 4
        inv = 1.0 / (
            10000 ** (torch.arange(quarter, device=device, dtype=torch.float32) / quarter)
        )
        hpos = torch.arange(grid_h, device=device).repeat_interleave(grid_w).float()
        wpos = torch.arange(grid_w, device=device).repeat(grid_h).float()
        freqs = torch.cat([hpos[:, None] * inv, wpos[:, None] * inv], dim=-1)  # [n, head_dim/2]
        freqs = torch.cat([freqs, freqs], dim=-1)
        return freqs.cos().to(dtype), freqs.sin().to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def forward(self, patches: torch.Tensor, grid_h: int, grid_w: int) -> torch.Tensor:
        n = patches.shape[0]
        x = self.patch_embed(patches)
        cos, sin = self._rotary(grid_h, grid_w, x.device, x.dtype)
        for b in self.blocks:
            h = b["norm1"](x)
            q, k, v = (
                b["qkv"](h).view(n, 3, self.heads, -1).permute(1, 2, 0, 3)
            )  # each [heads, n, d]
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            a = _attention(q, k, v)
            x = x + b["proj"](a.transpose(0, 1).reshape(n, self.width))
            h = b["fc1"](b["norm2"](x))
            x = x + b["fc2"](h * torch.sigmoid(1.702 * h))
        x = self.merger_norm(x).view(n // (self.merge * self.merge), -1)
        return self.merger_fc2(F.gelu(self.merger_fc1(x)))


# ---- timing -------------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any], device: torch.device, repeat: int, warmup: int) -> List[float]:
    """Wall times in ms of fn, each until the device is idle."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


# ---- 1. the engine with CUDA tensors ------------------------------------------------------------


def check_engine(device: str, small: bool) -> bool:
    hidden = 64 if small else 1280
    dtype = "bfloat16"
    region = tempfile.mkdtemp(prefix="ectt_gpu_", dir="/dev/shm")
    spec = {
        "role": "ec_both",
        "cpu_bytes": 480 * hidden * 2,
        "hidden": hidden,
        "dtype": dtype,
        "tp": 2,
        "device": device,
        "cuda_stream": device == "cuda",
        "instance_id": f"ectt-gpu-{uuid.uuid4().hex[:8]}",
        "gpu_cache_tokens": 360,
        "requests_per_step": 3,
        "env": {"ECTIER_REGION_DIR": region},
    }
    import random

    rng = random.Random(7)
    requests = []
    for r in range(60):
        items = sorted({int(rng.random() ** 1.5 * 32) for _ in range(rng.randint(1, 3))})
        requests.append({"id": f"req-{r}", "items": [{"item": i} for i in items]})
    engine = engine_sim.Engine(spec)
    try:
        result = engine.run(requests, timeout=300)
        final = engine.stop()
    finally:
        engine.kill()
    left = os.listdir(region)
    shutil.rmtree(region, ignore_errors=True)
    counts, m = result["counts"], final["metrics"]
    ok = (
        not result["mismatches"]
        and not result["failed"]
        and counts["cpu_hits"] > 10
        and counts["verified"] == 2 * counts["cpu_hits"]
        and m["loads_completed_total"] == counts["cpu_hits"]
        and not left
    )
    print(
        f"engine on {device} (tp=2, {dtype}, hidden {hidden}, worker steps on "
        f"{'a non-default CUDA stream' if spec['cuda_stream'] else 'the CPU'}):"
    )
    print(
        f"  requests {len(result['done'])}, steps {result['steps']}, "
        f"GPU-cache hits {counts['gpu_hits']}, "
        f"CPU-tier reloads {counts['cpu_hits']}, encodes {counts['encoded']}"
    )
    print(
        f"  reloads verified against a fresh encode: {counts['verified']} over both ranks, "
        f"{len(result['mismatches'])} mismatches; regions left: {left}"
    )
    print(
        f"  tier: saves {m['saves_completed_total']}, loads {m['loads_completed_total']}, "
        f"evictions {m['evictions_total']}, load bytes {m['load_bytes_total']}"
    )
    print(f"  engine check: {'PASS' if ok else 'FAIL'}")
    return ok


# ---- 2. fetch versus re-encode ------------------------------------------------------------------


def bench(device_name: str, small: bool) -> bool:
    from ectier.vllm import ECConnectorRole, ECTierConnector

    device = torch.device(device_name)
    dtype = torch.bfloat16
    if small:
        tower_args = dict(depth=2, width=64, heads=4, out=96)
        grid = 16  # 256 patches -> 64 tokens
    else:
        tower_args = {}
        grid = 64  # 896 x 896 pixels: 4096 patches -> 1024 tokens
    torch.manual_seed(0)
    tower = VisionTower(**tower_args).to(device=device, dtype=dtype).eval()
    out_width = tower.merger_fc2.out_features
    patches = torch.randn(grid * grid, tower.patch_embed.in_features, device=device, dtype=dtype)
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def encode() -> torch.Tensor:
        with torch.no_grad():
            return tower(patches, grid, grid)

    with torch.cuda.stream(stream) if stream is not None else _nullcontext():
        reference = encode()
        tokens = reference.shape[0]
        encode_ms = _timed(encode, device, repeat=5 if small else 20, warmup=2 if small else 5)

        # The connector, both roles in this process, the tier sized for 4 images.
        region = tempfile.mkdtemp(prefix="ectt_bench_", dir="/dev/shm")
        os.environ["ECTIER_REGION_DIR"] = region
        spec = {
            "role": "ec_both",
            "cpu_bytes": 4 * tokens * out_width * 2,
            "hidden": out_width,
            "dtype": "bfloat16",
            "tp": 1,
            "device": device_name,
            "instance_id": f"ectt-bench-{uuid.uuid4().hex[:8]}",
        }
        cfg = engine_sim.make_vllm_config(spec)
        cfg.parallel_config.distributed_executor_backend = "uni"
        sched = ECTierConnector(cfg, ECConnectorRole.SCHEDULER)
        worker = ECTierConnector(cfg, ECConnectorRole.WORKER)
        req = engine_sim.make_request("bench", [{"item": 0, "tokens": tokens}])
        key = req.mm_features[0].identifier
        cache: Dict[str, torch.Tensor] = {key: reference}
        # Save once, as the engine does after the first encode.
        sched.update_state_after_alloc(req, 0)
        worker.bind_connector_metadata(sched.build_connector_meta(None))
        worker.save_caches(encoder_cache=cache, mm_hash=key)
        worker.get_finished(set())
        worker._work().wait()
        sched.update_connector_output(
            engine_sim.ECConnectorOutput(worker.build_connector_worker_meta())
        )
        worker.clear_connector_metadata()
        assert sched.has_cache_item(key)

        load_ms: List[float] = []
        call_ms: List[float] = []  # until start_load_caches returns
        step_ms: List[float] = []
        exact = True

        def reload(record: bool) -> None:
            nonlocal exact
            cache.pop(key, None)  # dropped from the GPU cache
            t0 = time.perf_counter()
            assert sched.has_cache_item(key)
            sched.update_state_after_alloc(req, 0)
            meta = sched.build_connector_meta(None)
            worker.bind_connector_metadata(meta)
            t1 = time.perf_counter()
            worker.start_load_caches(cache)
            t_call = time.perf_counter()
            if device.type == "cuda":
                torch.cuda.current_stream(
                    device
                ).synchronize()  # the entry is usable on the engine's stream
            t2 = time.perf_counter()
            worker.get_finished(set())
            worker._work().wait()
            sched.update_connector_output(
                engine_sim.ECConnectorOutput(worker.build_connector_worker_meta())
            )
            worker.clear_connector_metadata()
            if record:
                load_ms.append((t2 - t1) * 1e3)
                call_ms.append((t_call - t1) * 1e3)
                step_ms.append((t2 - t0) * 1e3)
                exact = exact and torch.equal(cache[key], reference)

        for _ in range(5):
            reload(False)
        for _ in range(50):
            reload(True)
        worker.shutdown()
        sched.shutdown()
        left = os.listdir(region)
        shutil.rmtree(region, ignore_errors=True)

        # The ceiling: one pinned host-to-GPU copy of the same bytes.
        copy_ms = [0.0]
        if device.type == "cuda":
            host = reference.cpu().pin_memory()
            dst = torch.empty_like(reference)
            copy_ms = _timed(
                lambda: dst.copy_(host, non_blocking=True), device, repeat=50, warmup=5
            )

    enc, load, step = (
        statistics.median(encode_ms),
        statistics.median(load_ms),
        statistics.median(step_ms),
    )
    p90 = sorted(load_ms)[int(0.9 * len(load_ms))]
    nbytes = tokens * out_width * 2
    print(f"fetch vs re-encode on {device_name}{' (small smoke-test tower)' if small else ''}:")
    print(
        f"  vision tower: {len(tower.blocks)} layers, width {tower.width}, {tower.heads} heads, "
        f"{grid * grid} patches -> {tokens} tokens x {out_width} ({nbytes / 2**20:.2f} MiB bf16)"
    )
    print(f"  encode (median of {len(encode_ms)}):                     {enc:9.3f} ms")
    print(
        f"  reload through the connector, start_load_caches -> on the engine's stream "
        f"(median of {len(load_ms)}): {load:9.3f} ms  (p90 {p90:.3f})"
    )
    print(
        "    of which the call itself (Python + submit, before the stream waits): "
        f"{statistics.median(call_ms):6.3f} ms"
    )
    print(f"  whole connector step (scheduler + worker calls):       {step:9.3f} ms")
    if device.type == "cuda":
        print(
            "  bare pinned host-to-GPU copy of the same bytes:        "
            f"{statistics.median(copy_ms):9.3f} ms"
        )
    ratio = enc / load if load > 0 else math.inf
    print(
        f"  ratio encode / reload: {ratio:.1f}x   (whole step: {enc / step:.1f}x)   "
        "target >= 100x: "
        f"{'met' if ratio >= 100 else 'NOT met'}"
    )
    print(f"  reloads exact: {exact}; regions left: {left}")
    return exact and not left


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checks", nargs="*", help="engine, bench (default: both)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--small", action="store_true", help="a tiny workload (smoke test)")
    args = parser.parse_args(argv)
    checks = args.checks or ["engine", "bench"]
    unknown = [c for c in checks if c not in ("engine", "bench")]
    if unknown:
        parser.error(f"unknown check {unknown[0]!r}: use engine and/or bench")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_checks: no CUDA device: skipped")
        return SKIP
    if args.device == "cuda":
        import ectier

        if not ectier.has_cuda():
            print(f"gpu_checks: {ectier.library_path()} was built without CUDA")
            return 1
        print(
            f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
            f"library {ectier.library_path()}"
        )
    ok = True
    if "engine" in checks:
        ok = check_engine(args.device, args.small) and ok
    if "bench" in checks:
        ok = bench(args.device, args.small) and ok
    print("gpu_checks: " + ("all passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
