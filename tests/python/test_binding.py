"""The ctypes binding: every public class and its error paths, with the real
library, real regions (in a private directory under /dev/shm) and real
torch tensors."""

from __future__ import annotations

import gc
import json
import os
import random
import shutil

import pytest
import torch

import ectier
from ectier import errors
from ectier.worker import decode_metadata, decode_report

HERE = os.path.dirname(os.path.abspath(__file__))
HF_CONFIGS = os.path.join(HERE, "..", "data", "hf-configs")

HIDDEN = 16
ROW = HIDDEN * 4  # float32


def _config(role="ec_both", rows=64, **extra):
    return {
        "ec_connector": "ECTierConnector",
        "ec_connector_module_path": "ectier.vllm",
        "ec_role": role,
        "ec_connector_extra_config": {"ec_cpu_bytes": rows * ROW, **extra},
    }


def _engine(region_dir, instance_id, **more):
    return {
        "hidden_dim": HIDDEN,
        "dtype": "float32",
        "instance_id": instance_id,
        "region_dir": region_dir,
        **more,
    }


def _request(key="img-a", tokens=4, rid="r1"):
    return {"request_id": rid, "features": [{"identifier": key, "num_tokens": tokens}]}


@pytest.fixture
def pair(region_dir, instance_id):
    """A scheduler and a worker of one instance."""
    s = ectier.Scheduler(_config(), _engine(region_dir, instance_id))
    w = ectier.Worker(_config(), _engine(region_dir, instance_id))
    yield s, w
    w.close()
    s.close()


def _save(s, w, key, tensor):
    """One step that saves tensor under key; returns whether it was queued."""
    s.update_state_after_alloc(_request(key, tensor.shape[0]), 0)
    w.bind_metadata(s.build_connector_meta())
    queued = w.save(key, tensor)
    w.get_finished()
    w.wait()
    w.clear_metadata()
    s.update_connector_output(w.take_report() or b"")
    w.wait()
    s.update_connector_output(w.take_report() or b"")
    return queued


def _load(s, w, key, tokens):
    assert s.has_cache_item(key)
    s.update_state_after_alloc(_request(key, tokens), 0)
    w.bind_metadata(s.build_connector_meta())
    dst = torch.empty((tokens, HIDDEN))
    w.start_load({key: dst})
    w.wait()
    s.update_connector_output(w.take_report())
    w.clear_metadata()
    return dst


# ---- library -------------------------------------------------------------------


def test_library_reports_its_versions(library):
    # The package speaks the ABI that binding.h declares, and the library agrees.
    header = os.path.join(os.path.dirname(__file__), "..", "..", "include", "ectier", "binding.h")
    with open(header) as f:
        declared = [int(line.split()[2]) for line in f if line.startswith("#define ECT_ABI_VERSION ")]
    assert declared == [ectier.ABI_VERSION]
    assert ectier.abi_version() == ectier.ABI_VERSION
    assert ectier.library_version().count(".") == 2
    assert "libectier" in ectier.library_path()
    assert isinstance(ectier.has_p2p(), bool) and isinstance(ectier.has_cuda(), bool)


def test_each_status_family_has_its_exception_with_the_message():
    cases = {
        -1: errors.InvalidInputError,
        -11: errors.InvalidInputError,
        -17: errors.InvalidInputError,
        -3: errors.ConfigError,
        -9: errors.ConfigError,
        -10: errors.ConfigError,
        -5: errors.NotFoundError,
        -6: errors.StateError,
        -8: errors.StateError,
        -13: errors.StateError,
        -18: errors.StateError,
        -2: errors.ResourceError,
        -4: errors.ResourceError,
        -7: errors.ResourceError,
        -12: errors.TransferError,
        -14: errors.TransferError,
        -15: errors.TransferError,
        -16: errors.TransferError,
        -19: errors.InternalError,
    }
    assert set(cases) == set(errors.STATUS_NAMES) - {0}
    for status, cls in cases.items():
        exc = errors.error_for(status, "the detail")
        assert type(exc) is cls and isinstance(exc, ectier.ECTierError)
        assert exc.status == status and exc.message == "the detail"
        assert str(exc) == f"the detail [{errors.STATUS_NAMES[status]}]"
    assert isinstance(errors.error_for(-3, "x"), ValueError)
    assert isinstance(errors.error_for(-5, "x"), LookupError)
    assert isinstance(errors.error_for(-4, "x"), OSError)


# ---- config ----------------------------------------------------------------------


def test_config_check_resolves_settings_and_takes_the_connector_name(library):
    c = ectier.Config(_config(copy_threads=3, transport="same_host"))
    assert c.role == "ec_both" and c.cpu_bytes == 64 * ROW and c.p2p_enabled is False
    assert c.settings["copy_threads"] == 3 and c.settings["transport"] == "same_host"
    assert c.settings["consumer_ack_timeout_s"] == 2
    text = json.dumps(_config(role="ec_producer"))
    assert ectier.Config(text).role == "ec_producer"


@pytest.mark.parametrize(
    "config, cls, message",
    [
        ("{", errors.InvalidInputError, "config is not valid JSON"),
        (
            {
                "ec_connector": "ECTierConnector",
                "ec_role": "ec_both",
                "ec_connector_extra_config": {},
            },
            errors.ConfigError,
            "ec_cpu_bytes must be specified in ec_connector_extra_config",
        ),
        (
            {
                "ec_connector": "ECCPU",
                "ec_role": "ec_both",
                "ec_connector_extra_config": {"ec_cpu_bytes": 1},
            },
            errors.ConfigError,
            '"ECTierConnector"',
        ),
        ({**_config(), "ec_role": "both"}, errors.ConfigError, "ec_role"),
        (_config(ec_cpu_byte=5), errors.ConfigError, "ec_cpu_byte"),
        (_config(copy_threads=0), errors.ConfigError, "copy_threads"),
        ('{"ec_role": "ec_both\0"}', errors.InvalidInputError, "NUL"),
    ],
)
def test_config_errors_carry_ectiers_message(library, config, cls, message):
    with pytest.raises(cls) as info:
        ectier.Config(config)
    assert message in str(info.value)
    if info.value.status is not None:
        assert info.value.status_name.startswith("ECT_ERR_")


def test_config_of_the_wrong_type_is_a_type_error(library):
    with pytest.raises(TypeError):
        ectier.Config(42)  # type: ignore[arg-type]


# ---- geometry ---------------------------------------------------------------------


def test_geometry_from_width_and_from_every_model_config_file(library):
    g = ectier.Geometry.from_hidden_dim(3584, "bf16", "1GiB")
    assert (g.hidden_dim, g.dtype, g.element_size, g.block_size_bytes) == (
        3584,
        "torch.bfloat16",
        2,
        7168,
    )
    assert g.num_blocks == (1 << 30) // 7168 and g.payload_bytes(10) == 71680
    assert g.torch_dtype is torch.bfloat16
    with open(os.path.join(HF_CONFIGS, "expected.json")) as f:
        expected = json.load(f)
    for name, want in expected.items():
        if "error" in want:  # a file the width rule cannot serve
            with pytest.raises(errors.ConfigError) as info:
                ectier.Geometry.from_hf_config(os.path.join(HF_CONFIGS, name), "64MiB")
            assert want["error"] in str(info.value), name
            continue
        g = ectier.Geometry.from_hf_config(os.path.join(HF_CONFIGS, name), "64MiB")
        assert g.hidden_dim == want["hidden_dim"], name
        assert g.dtype == "torch." + want["dtype"], name
        with open(os.path.join(HF_CONFIGS, name)) as f:
            inline = ectier.Geometry.from_hf_config(json.load(f), 64 << 20)
        assert inline.hidden_dim == g.hidden_dim and inline.dtype == g.dtype
    forced = ectier.Geometry.from_hf_config(
        os.path.join(HF_CONFIGS, "Qwen2-VL-7B-Instruct.json"), 1 << 20, "f32"
    )
    assert forced.block_size_bytes == 3584 * 4 and forced.dtype_source == "dtype"


@pytest.mark.parametrize(
    "call, cls, message",
    [
        (
            lambda: ectier.Geometry.from_hidden_dim(0, "bf16", 1024),
            errors.ConfigError,
            "hidden_dim = 0",
        ),
        (
            lambda: ectier.Geometry.from_hidden_dim(16, "int4", 1024),
            errors.InvalidInputError,
            "int4",
        ),
        (
            lambda: ectier.Geometry.from_hidden_dim(16, "bf16", 8),
            errors.ConfigError,
            "smaller than one block",
        ),
        (
            lambda: ectier.Geometry.from_hidden_dim(16, "bf16", "8 apples"),
            errors.ConfigError,
            "cpu_bytes",
        ),
        (
            lambda: ectier.Geometry.from_hf_config({"model_type": "x"}, 1024, "bf16"),
            errors.ConfigError,
            "hidden_size",
        ),
        (
            lambda: ectier.Geometry.from_hf_config({"hidden_size": 8}, 1024),
            errors.ConfigError,
            "dtype is missing",
        ),
        (
            lambda: ectier.Geometry.from_hf_config(
                {
                    "vision_config": {"out_hidden_size": 8, "deepstack_visual_indexes": "1"},
                    "hidden_size": 8,
                },
                1024,
                "bf16",
            ),
            errors.ConfigError,
            "deepstack_visual_indexes",
        ),
        (
            lambda: ectier.Geometry.from_hf_config("/nonexistent/config.json", 1024),
            errors.NotFoundError,
            "/nonexistent/config.json",
        ),
    ],
)
def test_geometry_errors(library, call, cls, message):
    with pytest.raises(cls) as info:
        call()
    assert message in str(info.value)


# ---- scheduler and worker ---------------------------------------------------------------


def test_a_tensor_saved_then_dropped_from_the_gpu_cache_reloads_exactly(pair):
    s, w = pair
    assert s.geometry == w.geometry and s.geometry.num_blocks == 64
    assert s.role == "ec_both" and w.is_save_rank
    src = torch.randn(5, HIDDEN)
    assert not s.has_cache_item("img-a")
    assert _save(s, w, "img-a", src)
    back = _load(s, w, "img-a", 5)
    assert torch.equal(back, src)
    m = s.metrics()
    assert m["saves_completed_total"] == 1 and m["loads_completed_total"] == 1
    assert m["hits_total"] == 1 and m["misses_total"] == 1
    assert m["region_used_blocks"] == 5
    assert "ectier_hits_total 1\n" in m.text
    assert m["p2p_fetch_seconds"]["buckets"]["+Inf"] == 0
    assert set(m["acks_received_total"]) >= {"ok", "nack_missing"}
    assert not s.has_pending_push_work()
    assert s.take_unavailable_requests() == []
    assert s.request_finished(_request("img-a", 5)) is None


def test_a_saved_tensor_stays_alive_until_its_save_is_reported(pair):
    s, w = pair
    s.update_state_after_alloc(_request("k", 3), 0)
    w.bind_metadata(s.build_connector_meta())
    src = torch.arange(3 * HIDDEN, dtype=torch.float32).reshape(3, HIDDEN)
    want = src.clone()
    assert w.save("k", src)
    del src
    gc.collect()
    assert w.held == 1  # the worker keeps the only reference
    w.get_finished()
    w.wait()
    report = w.take_report()
    assert w.held == 0
    assert decode_report(report)["saves"] == ["k"]
    w.clear_metadata()
    s.update_connector_output(report)
    assert torch.equal(_load(s, w, "k", 3), want)
    assert w.held == 0


def test_a_non_contiguous_tensor_is_saved_as_a_contiguous_copy(pair):
    s, w = pair
    wide = torch.randn(HIDDEN, 6)
    src = wide.t()  # [6, HIDDEN], not contiguous
    assert not src.is_contiguous()
    assert _save(s, w, "t", src)
    assert torch.equal(_load(s, w, "t", 6), src)


@pytest.mark.parametrize(
    "tensor, message",
    [
        (torch.zeros(4, HIDDEN, dtype=torch.float16), "torch.float16"),
        (torch.zeros(4, HIDDEN + 1), "shape (4, 17)"),
        (torch.zeros(4 * HIDDEN), "shape (64,)"),
        (torch.zeros(4, HIDDEN, device="meta"), "meta"),
        (torch.zeros(9, HIDDEN), "exceeds its 4 blocks"),  # more rows than the entry has
        ("not a tensor", "neither a tensor nor a buffer"),
    ],
)
def test_a_refused_save_leaves_no_block_behind(pair, tensor, message):
    s, w = pair
    s.update_state_after_alloc(_request("bad", 4), 0)
    w.bind_metadata(s.build_connector_meta())
    with pytest.raises(errors.InvalidInputError) as info:
        w.save("bad", tensor)
    assert message in str(info.value)
    assert w.held == 0
    w.get_finished()
    w.clear_metadata()  # the refused save is reported as failed
    s.update_connector_output(w.take_report())
    m = s.metrics()
    assert m["saves_failed_total"] == 1 and m["region_used_blocks"] == 0
    assert not s.has_cache_item("bad") and not s.has_pending_push_work()


def test_bad_load_destinations_copy_nothing_and_release_the_pin(pair):
    s, w = pair
    _save(s, w, "img", torch.ones(4, HIDDEN))
    bad = [
        ({"img": torch.empty(3, HIDDEN)}, "destination has"),
        ({"img": torch.empty(HIDDEN, 4).t()}, "must be contiguous"),
        ({"img": torch.empty(4, HIDDEN, dtype=torch.bfloat16)}, "torch.bfloat16"),
        ({}, "0 destinations for the step's 1 loads"),
        ({"img": torch.empty(4, HIDDEN), "other": torch.empty(4, HIDDEN)}, "2 destinations"),
    ]
    for dests, message in bad:
        assert s.has_cache_item("img")
        s.update_state_after_alloc(_request("img", 4), 0)
        w.bind_metadata(s.build_connector_meta())
        with pytest.raises(errors.InvalidInputError) as info:
            w.start_load(dests)
        assert message in str(info.value)
        w.clear_metadata()
        s.update_connector_output(w.take_report())
        assert not s.has_pending_push_work()
        assert s.metrics()["entries_pinned"] == 0
    assert w.held == 0
    assert torch.equal(_load(s, w, "img", 4), torch.ones(4, HIDDEN))


def test_a_host_worker_takes_writable_buffers_and_bytes(pair):
    s, w = pair
    payload = bytes(range(2 * ROW))
    s.update_state_after_alloc(_request("b", 2), 0)
    w.bind_metadata(s.build_connector_meta())
    assert w.save("b", payload)
    w.get_finished()
    w.wait()
    w.clear_metadata()
    s.update_connector_output(w.take_report())
    assert s.has_cache_item("b")
    s.update_state_after_alloc(_request("b", 2), 0)
    w.bind_metadata(s.build_connector_meta())
    assert w.loads()[0]["nbytes"] == 2 * ROW
    dst = bytearray(2 * ROW)
    w.start_load({"b": dst})
    w.wait()
    s.update_connector_output(w.take_report())
    w.clear_metadata()
    assert bytes(dst) == payload
    s.update_state_after_alloc(_request("c", 1), 0)
    w.bind_metadata(s.build_connector_meta())
    w.start_load({})  # no loads this step
    with pytest.raises(errors.InvalidInputError, match="writable"):
        w.save("c", memoryview(b"x" * ROW))  # a read-only buffer other than bytes
    w.clear_metadata()
    s.update_connector_output(w.take_report())
    assert not s.has_pending_push_work()


def test_malformed_requests_and_bytes_change_nothing(pair):
    s, w = pair
    with pytest.raises(errors.ConfigError, match="identifier is missing"):
        s.update_state_after_alloc({"request_id": "r", "features": [{"num_tokens": 1}]}, 0)
    with pytest.raises(errors.ConfigError, match="unknown key"):
        s.ensure_cache_available({"request_id": "r", "extra": 1})
    with pytest.raises(errors.InvalidInputError, match="not JSON-serialisable"):
        s.ensure_cache_available({"request_id": "r", "ec_transfer_params": object()})
    with pytest.raises(errors.InvalidInputError):
        s.update_state_after_alloc(_request(), 1)
    with pytest.raises(errors.InvalidInputError):
        s.update_state_after_alloc(_request(), -1)
    assert not s.has_pending_push_work()
    meta = s.build_connector_meta()
    assert decode_metadata(meta, 64) == {"saves": [], "loads": []}
    with pytest.raises(errors.InvalidInputError):
        w.bind_metadata(meta[:-1])
    with pytest.raises(errors.StateError):
        w.metadata()  # nothing was bound
    with pytest.raises(errors.InvalidInputError):
        s.update_connector_output(b"ECTR garbage")
    assert s.metrics()["reports_malformed_total"] == 1
    with pytest.raises(TypeError):
        s.update_connector_output("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        w.bind_metadata(None)  # type: ignore[arg-type]
    w.bind_metadata(meta)
    with pytest.raises(errors.StateError, match="already bound"):
        w.bind_metadata(meta)
    w.clear_metadata()


def test_random_bytes_never_crash_the_decoders(pair):
    s, w = pair
    s.update_state_after_alloc(_request("x", 2), 0)
    meta = s.build_connector_meta()
    rng = random.Random(1)
    for i in range(300):
        blob = bytearray(meta if i % 2 else b"ECTR" + bytes(40))
        for _ in range(rng.randint(1, 6)):
            blob[rng.randrange(len(blob))] = rng.randrange(256)
        blob = bytes(blob[: rng.randint(0, len(blob))])
        for call in (
            lambda: w.bind_metadata(blob),
            lambda: s.update_connector_output(blob),
            lambda: decode_report(blob),
            lambda: decode_metadata(blob, 64),
        ):
            try:
                call()
            except ectier.ECTierError:
                pass
        w.clear_metadata()  # a no-op when nothing was bound


def test_closed_handles_refuse_every_call_and_close_once(region_dir, instance_id):
    with ectier.Scheduler(_config(), _engine(region_dir, instance_id)) as s:
        assert not s.closed
    assert s.closed
    s.close()  # again: nothing
    for call in (
        lambda: s.has_cache_item("a"),
        lambda: s.build_connector_meta(),
        s.metrics,
        lambda: s.update_connector_output(b""),
        s.has_pending_push_work,
    ):
        with pytest.raises(errors.StateError, match="scheduler is closed"):
            call()
    s.shutdown()  # closed: nothing to do
    w = ectier.Worker(_config(), _engine(region_dir, instance_id))
    w.close()
    w.close()
    with pytest.raises(errors.StateError, match="worker is closed"):
        w.get_finished()
    assert "closed" in repr(w)


def test_shutdown_keeps_metrics_readable(region_dir, instance_id):
    s = ectier.Scheduler(_config(), _engine(region_dir, instance_id))
    s.shutdown()
    assert os.listdir(region_dir) == []
    assert not s.has_cache_item("a")
    assert s.metrics()["region_blocks"] == 64
    s.close()


def test_garbage_collection_releases_handles_and_regions(region_dir, instance_id):
    s = ectier.Scheduler(_config(), _engine(region_dir, instance_id))
    w = ectier.Worker(_config(), _engine(region_dir, instance_id))
    assert len(os.listdir(region_dir)) == 1
    region = ectier.RegionDirectory(region_dir).inspect()[0]
    assert region.holders == 2 and not region.orphaned
    del s, w
    gc.collect()
    assert os.listdir(region_dir) == []


def test_a_forked_child_never_releases_the_parents_handle(region_dir, instance_id):
    s = ectier.Scheduler(_config(), _engine(region_dir, instance_id))
    pid = os.fork()
    if pid == 0:
        s.close()  # the child's copy: must not touch the shared region lock
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert len(os.listdir(region_dir)) == 1
    assert ectier.RegionDirectory(region_dir).inspect()[0].holders == 1
    s.update_state_after_alloc(_request(), 0)
    assert s.has_pending_push_work()
    s.close()
    assert os.listdir(region_dir) == []


def test_creation_errors_leave_nothing_behind(region_dir, instance_id):
    with pytest.raises(errors.ConfigError, match="unknown key"):
        ectier.Scheduler(_config(), _engine(region_dir, instance_id, tp_size=2))
    with pytest.raises(errors.ConfigError, match="neither region_name nor an instance id"):
        ectier.Scheduler(_config(), {"hidden_dim": 16, "dtype": "f32", "region_dir": region_dir})
    with pytest.raises(errors.NotFoundError):
        ectier.Worker(_config(), _engine("/nonexistent-ectier", instance_id))
    with pytest.raises(TypeError):
        ectier.Scheduler(_config(), "not a mapping")  # type: ignore[arg-type]
    s = ectier.Scheduler(_config(), _engine(region_dir, instance_id))
    with pytest.raises(errors.ConfigError, match="geometry"):
        ectier.Worker(_config(), dict(_engine(region_dir, instance_id), hidden_dim=8))
    s.close()
    assert os.listdir(region_dir) == []


# ---- regions ----------------------------------------------------------------------------------


def test_region_directory_inspects_and_collects_orphans(region_dir, instance_id):
    s = ectier.Scheduler(_config(), _engine(region_dir, instance_id))
    listed = ectier.RegionDirectory(region_dir).inspect()
    assert [r.kind for r in listed] == ["region"]
    assert listed[0].fields["num_blocks"] == 64 and listed[0].fields["instance_id"] == instance_id
    assert ectier.RegionDirectory(region_dir).gc() == []  # alive
    shutil.copy(listed[0].path, os.path.join(region_dir, "ectier_orphan_dp0.mmap"))
    dry = ectier.RegionDirectory(region_dir).gc(dry_run=True)
    assert [(r.name, r.removed) for r in dry] == [("ectier_orphan_dp0", True)]
    assert len(os.listdir(region_dir)) == 2
    done = ectier.RegionDirectory(region_dir).gc()
    assert [r.name for r in done] == ["ectier_orphan_dp0"]
    assert len(os.listdir(region_dir)) == 1
    with pytest.raises(errors.NotFoundError):
        ectier.RegionDirectory("/nonexistent-ectier").inspect()
    s.close()
