"""ECTierConnector against the engine's encoder-cache connector interface,
as its public API documentation describes the current release
(reference/vllm-connector-api.md): method names, parameters, which are
abstract in the base, and the shapes of what they return.  A signature that
drifts from the documented one fails here.  Where the engine is importable,
the class is also loaded through the engine's own factory."""

from __future__ import annotations

import inspect
import pickle

import pytest

from ectier import vllm as ev
from engine_sim import ECConnectorOutput, SchedulerOutput, make_request, make_vllm_config

KW = "**"  # the method takes **kwargs

# name: (parameters after self, side, abstract in the base)
INTERFACE = {
    "has_cache_item": (["identifier"], "scheduler", True),
    "ensure_cache_available": (["request", "num_computed_tokens"], "scheduler", False),
    "update_state_after_alloc": (["request", "index"], "scheduler", True),
    "update_state_after_free": (["request", "index"], "scheduler", False),
    "build_connector_meta": (["scheduler_output"], "scheduler", True),
    "update_connector_output": (["connector_output"], "scheduler", False),
    "request_finished": (["request"], "scheduler", False),
    "has_pending_push_work": ([], "scheduler", False),
    "take_unavailable_requests": ([], "scheduler", False),
    "bind_connector_metadata": ([None], "worker", False),  # the name of its one parameter varies
    "clear_connector_metadata": ([], "worker", False),
    "_get_connector_metadata": ([], "worker", False),
    "register_caches": (["ec_caches"], "worker", False),
    "start_worker_services": ([], "worker", False),
    "start_save_caches": ([KW], "worker", False),
    "start_load_caches": (["encoder_cache", KW], "worker", True),
    "save_caches": (["encoder_cache", "mm_hash", KW], "worker", True),
    "get_finished": (["finished_req_ids"], "worker", False),
    "build_connector_worker_meta": ([], "worker", False),
    "shutdown": ([], "both", False),
    "get_ec_connector_stats": ([], "both", False),
}


def _params(fn):
    out = []
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        out.append(KW if p.kind is p.VAR_KEYWORD else p.name)
    return out


@pytest.mark.parametrize("name", sorted(INTERFACE))
def test_every_documented_method_is_defined_with_its_parameters(name):
    want, _, _ = INTERFACE[name]
    fn = ev.ECTierConnector.__dict__.get(name)
    assert fn is not None, f"{name} must be defined by ECTierConnector itself, not inherited"
    got = _params(fn)
    assert len(got) == len(want), f"{name}{tuple(got)}: documented {tuple(want)}"
    for g, w in zip(got, want):
        assert w is None or g == w, f"{name}{tuple(got)}: documented {tuple(want)}"


def test_roles_properties_and_metadata_types_follow_the_interface():
    assert ev.ECConnectorRole.SCHEDULER.value == 0 and ev.ECConnectorRole.WORKER.value == 1
    assert ev.ECTierConnector.__name__ == "ECTierConnector"  # not the engine's own ECCPUConnector
    for prop in ("role", "is_producer", "is_consumer"):
        assert isinstance(inspect.getattr_static(ev.ECTierConnector, prop), property), prop
    assert issubclass(ev.ECTierConnectorMetadata, ev._MetaBase)
    assert issubclass(ev.ECTierWorkerMetadata, ev._WorkerMetaBase)
    assert _params(ev.ECTierWorkerMetadata.aggregate) == ["other"]
    assert issubclass(ev.ECTierConnector, ev._Base)
    # Nothing is left abstract; with the engine, its base's abstract methods
    # are exactly the documented ones.
    assert not getattr(ev.ECTierConnector, "__abstractmethods__", frozenset())
    if ev.ENGINE_IMPORTABLE:
        documented = {n for n, (_, _, abstract) in INTERFACE.items() if abstract}
        assert set(ev._Base.__abstractmethods__) == documented


def test_metadata_objects_pickle_and_aggregate_by_concatenation():
    meta = ev.ECTierConnectorMetadata(b"ECTM step")
    assert pickle.loads(pickle.dumps(meta)) == meta
    a, b = ev.ECTierWorkerMetadata(b"rank0"), ev.ECTierWorkerMetadata(b"rank1")
    both = a.aggregate(b)
    assert both is not a and both is not b and both.data == b"rank0rank1"
    assert a.data == b"rank0"  # aggregate returns a new object
    assert pickle.loads(pickle.dumps(both)) == both
    assert a.aggregate(None) == a and a.aggregate(None) is not a
    with pytest.raises(TypeError):
        a.aggregate(meta)  # type: ignore[arg-type]


@pytest.fixture
def connectors(region_dir, instance_id, monkeypatch):
    """A scheduler connector and a worker connector of one ec_both instance."""
    monkeypatch.setenv("ECTIER_REGION_DIR", region_dir)
    spec = {
        "role": "ec_both",
        "cpu_bytes": 64 * 64 * 4,
        "hidden": 64,
        "dtype": "float32",
        "tp": 1,
        "instance_id": instance_id,
    }
    s = ev.ECTierConnector(make_vllm_config(spec), ev.ECConnectorRole.SCHEDULER)
    w = ev.ECTierConnector(make_vllm_config(spec), ev.ECConnectorRole.WORKER)
    yield s, w
    w.shutdown()
    s.shutdown()


def test_each_method_returns_its_documented_shape(connectors):
    import torch

    s, w = connectors
    assert s.role == ev.ECConnectorRole.SCHEDULER and w.role == ev.ECConnectorRole.WORKER
    assert s.is_producer and s.is_consumer
    req = make_request("r1", [{"item": 3, "tokens": 6}])
    assert s.ensure_cache_available(req, 0) is True
    assert s.has_cache_item("img-0003") is False
    assert s.update_state_after_alloc(req, 0) is None
    assert s.update_state_after_free(req, 0) is None
    out = SchedulerOutput(1, ["r1"])
    meta = s.build_connector_meta(out)
    assert isinstance(meta, ev.ECTierConnectorMetadata) and out == SchedulerOutput(1, ["r1"])
    cache: dict = {}
    assert w.register_caches(cache) is None
    assert w.start_worker_services() is None
    assert w.bind_connector_metadata(meta) is None
    assert w._get_connector_metadata() is meta
    assert w.start_save_caches(encoder_cache=cache) is None
    assert w.start_load_caches(cache) is None
    cache["img-0003"] = torch.randn(6, 64)
    assert w.save_caches(encoder_cache=cache, mm_hash="img-0003") is None
    assert w.get_finished(set()) == (None, None)
    w._work().wait()
    wm = w.build_connector_worker_meta()
    assert isinstance(wm, ev.ECTierWorkerMetadata)
    assert w.clear_connector_metadata() is None
    with pytest.raises(RuntimeError):
        w._get_connector_metadata()
    assert s.update_connector_output(ECConnectorOutput(wm)) is None
    assert s.update_connector_output(ECConnectorOutput(None)) is None
    assert s.update_connector_output(ECConnectorOutput("foreign")) is None  # logged, ignored
    keep, params = s.request_finished(req)
    assert keep is False and params is None  # no P2P: nothing to announce
    assert s.has_pending_push_work() is False
    assert s.take_unavailable_requests() == set()
    assert w.get_ec_connector_stats() is None
    assert s.metrics()["saves_completed_total"] == 1
    assert w.build_connector_worker_meta() is None
    # Scheduler calls on the worker (and back) are refused clearly.
    with pytest.raises(RuntimeError, match="scheduler-side call"):
        w.has_cache_item("x")
    with pytest.raises(RuntimeError, match="worker-side call"):
        s.get_finished(set())


def test_the_engines_factory_loads_the_class(region_dir, instance_id, monkeypatch):
    factory_mod = pytest.importorskip("vllm.distributed.ec_transfer.ec_connector.factory")
    monkeypatch.setenv("ECTIER_REGION_DIR", region_dir)
    spec = {
        "role": "ec_both",
        "cpu_bytes": 1 << 20,
        "hidden": 64,
        "dtype": "float32",
        "instance_id": instance_id,
    }
    config = make_vllm_config(spec)
    connector = factory_mod.ECConnectorFactory.create_connector(
        config, ev.ECConnectorRole.SCHEDULER
    )
    assert type(connector).__name__ == "ECTierConnector"
    connector.shutdown()
