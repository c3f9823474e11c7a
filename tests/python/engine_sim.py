"""A stand-in for the serving engine, driving ECTierConnector exactly as the
engine does (reference/vllm-connector-api.md, "Call order").

One *engine* process runs the scheduler side and spawns one *worker*
process per tensor-parallel rank.  They exchange what the engine's executor
ships: the connector's step metadata object, pickled, to every worker; each
worker's worker-metadata object, pickled, back; the scheduler folds the
ranks' objects with ``aggregate`` and hands the result to
``update_connector_output``.  Requests are objects shaped like the engine's
(``request_id``, ``mm_features`` of ``MultiModalFeatureSpec`` with a
``PlaceholderRange``, ``ec_transfer_params``); the worker's encoder cache is
a ``dict[str, torch.Tensor]``.

The encoder is a deterministic stand-in (``encode_item``): an item's output
depends only on its number and size, so every entry a worker loads from
the CPU tier (or that arrived from a peer) is compared with a fresh encode.
A small GPU-cache model (least recently used, in tokens) drops entries, so
later requests reload them.

Standard library and torch only: this module also runs on the GPU machine,
whose Python has no pytest.  Every process it starts is joined (or
terminated) before :meth:`Engine.stop` returns.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
import time
import traceback
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

# ---- objects shaped like the engine's ----------------------------------------------


@dataclass
class PlaceholderRange:
    offset: int
    length: int
    is_embed: Optional[List[bool]] = None

    def get_num_embeds(self) -> int:
        return self.length if self.is_embed is None else int(sum(self.is_embed))


@dataclass
class MultiModalFeatureSpec:
    identifier: str
    mm_hash: str
    modality: str
    mm_position: PlaceholderRange
    data: Optional[Dict[str, Any]]


@dataclass
class Request:
    request_id: str
    mm_features: List[MultiModalFeatureSpec]
    ec_transfer_params: Optional[Any] = None
    num_computed_tokens: int = 0


@dataclass
class ECTransferConfig:
    ec_connector: Optional[str] = "ECTierConnector"
    engine_id: str = "engine-0"
    ec_buffer_device: str = "cuda"
    ec_buffer_size: float = 1e9
    ec_role: Optional[str] = "ec_both"
    ec_rank: Optional[int] = None
    ec_parallel_size: int = 1
    ec_ip: str = "127.0.0.1"
    ec_port: int = 14579
    ec_connector_extra_config: Dict[str, Any] = field(default_factory=dict)
    ec_connector_module_path: Optional[str] = "ectier.vllm"

    @property
    def is_ec_producer(self) -> bool:
        return self.ec_role in ("ec_producer", "ec_both")

    @property
    def is_ec_consumer(self) -> bool:
        return self.ec_role in ("ec_consumer", "ec_both")

    def get_from_extra_config(self, key: str, default: Any) -> Any:
        return self.ec_connector_extra_config.get(key, default)


@dataclass
class ModelConfig:
    model: str
    dtype: Any
    hf_config: Dict[str, Any]

    def get_inputs_embeds_size(self) -> int:
        return int(self.hf_config["hidden_size"])


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    data_parallel_rank: int = 0
    prefill_context_parallel_size: int = 1
    distributed_executor_backend: str = "mp"
    rank: int = 0


@dataclass
class DeviceConfig:
    device: str = "cpu"


@dataclass
class VllmConfig:
    ec_transfer_config: Optional[ECTransferConfig]
    model_config: ModelConfig
    parallel_config: ParallelConfig
    device_config: DeviceConfig
    instance_id: str
    use_v2_model_runner: bool = True


@dataclass
class SchedulerOutput:
    """What build_connector_meta receives (it must not change it)."""

    step: int
    scheduled_request_ids: List[str]


@dataclass
class ECConnectorOutput:
    ec_connector_worker_meta: Any = None


def make_vllm_config(spec: Dict[str, Any], rank: int = 0) -> VllmConfig:
    """The engine config of one process of the engine that spec describes."""
    dtype = getattr(torch, spec.get("dtype", "float32"))
    hf = {
        "model_type": "stand_in",
        "hidden_size": spec["hidden"],
        "torch_dtype": str(dtype).split(".")[1],
    }
    return VllmConfig(
        ec_transfer_config=ECTransferConfig(
            ec_role=spec["role"],
            ec_connector_extra_config={"ec_cpu_bytes": spec["cpu_bytes"], **spec.get("extra", {})},
        ),
        model_config=ModelConfig(
            model=spec.get("model", "stand-in/vit"), dtype=dtype, hf_config=hf
        ),
        parallel_config=ParallelConfig(tensor_parallel_size=spec.get("tp", 1), rank=rank),
        device_config=DeviceConfig(device=spec.get("device", "cpu")),
        instance_id=spec["instance_id"],
    )


# ---- the workload ------------------------------------------------------------------------


def item_key(item: int) -> str:
    return f"img-{item:04d}"


def item_tokens(item: int, lo: int = 8, hi: int = 40) -> int:
    return lo + (item * 2654435761 >> 8) % (hi - lo + 1)


def encode_item(
    item: int, tokens: int, hidden: int, dtype: Any, device: Any, work: int = 2
) -> torch.Tensor:
    """The stand-in vision encoder: deterministic, elementwise (so bitwise
    reproducible in any process), its cost growing with work."""
    x = torch.arange(tokens * hidden, dtype=torch.float32, device=device).reshape(tokens, hidden)
    x = torch.sin(x * (0.001 * (item + 1)) + float(item))
    for _ in range(work):
        x = torch.sin(x * 1.618 + 0.5)
    return x.to(dtype)


def make_request(rid: str, items: List[Dict[str, Any]], params: Any = None) -> Request:
    """A request with one image per entry of items ({"item", "tokens",
    "media"}); media False drops the pixels as an orchestrator does."""
    features, offset = [], 5
    for it in items:
        tokens = it.get("tokens") or item_tokens(it["item"])
        key = item_key(it["item"])
        data = (
            {"image_grid_thw": torch.tensor([[1, 2, tokens // 2 or 1]])}
            if it.get("media", True)
            else None
        )
        features.append(
            MultiModalFeatureSpec(key, key, "image", PlaceholderRange(offset, tokens), data)
        )
        offset += tokens + 3
    return Request(rid, features, params)


# ---- the worker process -----------------------------------------------------------------------


def _worker_step(
    connector: Any,
    encoder_cache: Dict[str, torch.Tensor],
    msg: Dict[str, Any],
    spec: Dict[str, Any],
    device: Any,
    dtype: Any,
) -> Dict[str, Any]:
    """One step of the model runner's encoder-cache context."""
    hidden, work = spec["hidden"], spec.get("encode_work", 2)
    for key in msg["free"]:
        encoder_cache.pop(key, None)
    connector.bind_connector_metadata(msg["meta"])
    before = set(encoder_cache)
    if connector.is_producer:
        connector.start_save_caches(encoder_cache=encoder_cache)
    if connector.is_consumer:
        connector.start_load_caches(encoder_cache)
    loaded = [k for k in encoder_cache if k not in before]
    t0 = time.perf_counter_ns()
    for item, tokens in msg["encode"]:
        encoder_cache[item_key(item)] = encode_item(item, tokens, hidden, dtype, device, work)
    if device.type == "cuda":
        torch.cuda.current_stream().synchronize()
    encode_ns = time.perf_counter_ns() - t0
    for key in [k for k in encoder_cache if k not in before]:
        connector.save_caches(encoder_cache=encoder_cache, mm_hash=key)
    # The model reads the loaded entries: each must equal a fresh encode.
    mismatches = []
    for key in loaded:
        item = int(key.split("-")[1])
        got = encoder_cache[key]
        want = encode_item(item, got.shape[0], hidden, dtype, device, work)
        if got.dtype != dtype or got.device.type != device.type or not torch.equal(got, want):
            mismatches.append(key)
    connector.get_finished(set(msg["finished"]))
    worker_meta = connector.build_connector_worker_meta()
    connector.clear_connector_metadata()
    return {
        "worker_meta": worker_meta,
        "loaded": loaded,
        "mismatches": mismatches,
        "encoded": len(msg["encode"]),
        "encode_ns": encode_ns,
        "held": connector._work().held,
    }


def _worker_main(conn: Any, spec: Dict[str, Any], rank: int) -> None:
    torch.set_num_threads(1)
    for k, v in spec.get("env", {}).items():
        os.environ[k] = v
    from ectier.vllm import ECConnectorRole, ECTierConnector

    device = torch.device(spec.get("device", "cpu"))
    if device.type == "cuda":
        torch.cuda.set_device(0)
    dtype = getattr(torch, spec.get("dtype", "float32"))
    connector = ECTierConnector(make_vllm_config(spec, rank), ECConnectorRole.WORKER)
    encoder_cache: Dict[str, torch.Tensor] = {}
    connector.register_caches(encoder_cache)
    # The engine's compute stream: a non-default one when asked, so that
    # ectier's copies are checked to order against the current stream.
    stream = torch.cuda.Stream() if spec.get("cuda_stream") else None
    try:
        while True:
            msg = pickle.loads(conn.recv_bytes())
            if msg is None:
                break
            if stream is not None:
                with torch.cuda.stream(stream):
                    reply = _worker_step(connector, encoder_cache, msg, spec, device, dtype)
            else:
                reply = _worker_step(connector, encoder_cache, msg, spec, device, dtype)
            conn.send_bytes(pickle.dumps(reply))
        # Drain: the last reports of copies still in flight.
        connector._work().wait()
        final = connector.build_connector_worker_meta()
        conn.send_bytes(pickle.dumps({"worker_meta": final}))
    except EOFError:
        pass  # the engine went away: nothing to report to
    except BaseException:
        conn.send_bytes(pickle.dumps({"error": traceback.format_exc()}))
        raise
    finally:
        connector.shutdown()


# ---- the engine (scheduler) process -------------------------------------------------------------


class _GpuCache:
    """The engine's encoder cache, modelled on the scheduler: tokens per key,
    least recently used first out (never an entry used in this step)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0
        self.entries: "OrderedDict[str, tuple]" = OrderedDict()

    def touch(self, key: str, step: int) -> None:
        tokens, _ = self.entries.pop(key)
        self.entries[key] = (tokens, step)

    def make_room(self, tokens: int, step: int) -> List[str]:
        freed = []
        while self.used + tokens > self.capacity:
            victim = next((k for k, (_, s) in self.entries.items() if s < step), None)
            if victim is None:
                raise RuntimeError("GPU cache too small for one step")
            self.used -= self.entries.pop(victim)[0]
            freed.append(victim)
        return freed

    def add(self, key: str, tokens: int, step: int) -> None:
        self.entries[key] = (tokens, step)
        self.used += tokens


def _engine_main(control: Any, spec: Dict[str, Any]) -> None:
    torch.set_num_threads(1)
    for k, v in spec.get("env", {}).items():
        os.environ[k] = v
    from ectier.vllm import ECConnectorRole, ECTierConnector

    ctx = mp.get_context("spawn")
    tp = spec.get("tp", 1)
    workers, pipes = [], []
    connector = None
    try:
        connector = ECTierConnector(make_vllm_config(spec), ECConnectorRole.SCHEDULER)
        for rank in range(tp):
            here, there = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(there, spec, rank), daemon=True)
            p.start()
            there.close()
            workers.append(p)
            pipes.append(here)
        engine = _Engine(connector, pipes, spec)
        control.send_bytes(pickle.dumps({"ready": True}))
        while True:
            if not control.poll(0.005):
                # An idle engine still steps while the connector has work.
                if connector.has_pending_push_work():
                    engine.step([])
                continue
            cmd = pickle.loads(control.recv_bytes())
            if cmd["op"] == "run":
                control.send_bytes(
                    pickle.dumps(engine.run(cmd["requests"], cmd.get("timeout", 120)))
                )
            elif cmd["op"] == "stop":
                break
        result = engine.stop_workers()
        result["metrics"] = connector.metrics()
        connector.shutdown()
        control.send_bytes(pickle.dumps(result))
    except BaseException:
        control.send_bytes(pickle.dumps({"error": traceback.format_exc()}))
    finally:
        if connector is not None:
            connector.shutdown()
        for p in workers:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join(5)


class _Engine:
    """The scheduler's step loop over the connector."""

    def __init__(self, connector: Any, pipes: List[Any], spec: Dict[str, Any]) -> None:
        self.c, self.pipes, self.spec = connector, pipes, spec
        self.gpu = _GpuCache(spec.get("gpu_cache_tokens", 200))
        self.per_step = spec.get("requests_per_step", 3)
        self.steps = 0
        self.counts = {"gpu_hits": 0, "cpu_hits": 0, "encoded": 0, "verified": 0, "deferred": 0}
        self.mismatches: List[str] = []
        self._encode: List[tuple] = []  # (item, tokens) the workers encode this step
        self._free: List[str] = []  # keys the GPU cache dropped this step

    def step(self, scheduled: List[Request]) -> None:
        """One engine step for the requests admitted in it (all their items
        already allocated via update_state_after_alloc)."""
        self.steps += 1
        meta = self.c.build_connector_meta(
            SchedulerOutput(self.steps, [r.request_id for r in scheduled])
        )
        msg = {"meta": meta, "encode": self._encode, "free": self._free, "finished": []}
        data = pickle.dumps(msg)
        for p in self.pipes:
            p.send_bytes(data)
        aggregated = None
        for p in self.pipes:
            reply = pickle.loads(p.recv_bytes())
            if "error" in reply:
                raise RuntimeError("worker failed:\n" + reply["error"])
            self.counts["verified"] += len(reply["loaded"])
            self.mismatches += reply["mismatches"]
            wm = reply["worker_meta"]
            if wm is not None:
                aggregated = wm if aggregated is None else aggregated.aggregate(wm)
        self.c.update_connector_output(ECConnectorOutput(aggregated))
        self._encode, self._free = [], []

    def run(self, specs: List[Dict[str, Any]], timeout: float) -> Dict[str, Any]:
        waiting = deque(make_request(s["id"], s["items"], s.get("params")) for s in specs)
        done: Dict[str, Any] = {}
        failed: List[str] = []
        deadline = time.monotonic() + timeout
        self._encode, self._free = [], []
        while waiting or self.c.has_pending_push_work():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"engine: {len(waiting)} requests still waiting after {timeout} s"
                )
            for rid in self.c.take_unavailable_requests():
                failed.append(rid)
                waiting = deque(r for r in waiting if r.request_id != rid)
            scheduled = []
            for req in list(waiting):
                if len(scheduled) == self.per_step:
                    break
                if not self.c.ensure_cache_available(req, req.num_computed_tokens):
                    self.counts["deferred"] += 1
                    continue
                waiting.remove(req)
                self._schedule(req)
                scheduled.append(req)
            if not scheduled and waiting and not self.c.has_pending_push_work():
                time.sleep(0.002)  # everything deferred: peers are working
            self.step(scheduled)
            for req in scheduled:
                keep, params = self.c.request_finished(req)
                assert keep is False
                done[req.request_id] = params
        return {
            "done": done,
            "failed": failed,
            "steps": self.steps,
            "counts": dict(self.counts),
            "mismatches": list(self.mismatches),
        }

    def _schedule(self, req: Request) -> None:
        for i, f in enumerate(req.mm_features):
            key, tokens = f.identifier, f.mm_position.get_num_embeds()
            if key in self.gpu.entries:
                self.gpu.touch(key, self.steps + 1)
                self.counts["gpu_hits"] += 1
                continue
            self._free += self.gpu.make_room(tokens, self.steps + 1)
            self.gpu.add(key, tokens, self.steps + 1)
            if self.c.has_cache_item(key):
                self.counts["cpu_hits"] += 1
            else:
                if f.data is None:
                    raise RuntimeError(f"{req.request_id}: {key} has no media and no tier has it")
                self._encode.append((int(key.split("-")[1]), tokens))
                self.counts["encoded"] += 1
            self.c.update_state_after_alloc(req, i)

    def stop_workers(self) -> Dict[str, Any]:
        for p in self.pipes:
            p.send_bytes(pickle.dumps(None))
        finals = [pickle.loads(p.recv_bytes()) for p in self.pipes]
        aggregated = None
        for f in finals:
            if "error" in f:
                raise RuntimeError("worker failed:\n" + f["error"])
            if f["worker_meta"] is not None:
                aggregated = (
                    f["worker_meta"]
                    if aggregated is None
                    else aggregated.aggregate(f["worker_meta"])
                )
        self.c.update_connector_output(ECConnectorOutput(aggregated))
        return {"pending_after_drain": self.c.has_pending_push_work()}


class Engine:
    """An engine running in its own process (scheduler + tp worker processes).

    Args:
        spec: role, cpu_bytes, extra (more extra-config keys), hidden, dtype,
            tp, device, instance_id, env (set in every process first),
            gpu_cache_tokens, requests_per_step, encode_work.
    """

    def __init__(self, spec: Dict[str, Any]) -> None:
        ctx = mp.get_context("spawn")
        self._conn, there = ctx.Pipe()
        self._proc = ctx.Process(target=_engine_main, args=(there, spec), daemon=False)
        self._proc.start()
        there.close()
        self._reply(180)

    def _reply(self, timeout: float) -> Dict[str, Any]:
        if not self._conn.poll(timeout):
            self.kill()
            raise TimeoutError("engine process did not answer")
        try:
            msg = pickle.loads(self._conn.recv_bytes())
        except EOFError:
            self.kill()
            raise RuntimeError(f"engine process died (exit code {self._proc.exitcode})") from None
        if "error" in msg:
            self.kill()
            raise RuntimeError("engine process failed:\n" + msg["error"])
        return msg

    def run(self, requests: List[Dict[str, Any]], timeout: float = 120) -> Dict[str, Any]:
        """Run requests ([{"id", "items", "params"}]) to completion."""
        self._conn.send_bytes(
            pickle.dumps({"op": "run", "requests": requests, "timeout": timeout})
        )
        return self._reply(timeout + 30)

    def stop(self) -> Dict[str, Any]:
        """Stop the engine; returns its final metrics."""
        self._conn.send_bytes(pickle.dumps({"op": "stop"}))
        try:
            return self._reply(60)
        finally:
            self._proc.join(30)
            self.kill()

    def kill(self) -> None:
        """Terminate the engine process if it is still running."""
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(10)
