"""ECTierConnector's reading of the engine's configuration, and the
configurations it refuses: a clear exception, nothing left behind."""

from __future__ import annotations

import os

import pytest
import torch

from ectier import errors
from ectier import vllm as ev
from engine_sim import ParallelConfig, make_request, make_vllm_config


def _spec(instance_id, **more):
    spec = {
        "role": "ec_both",
        "cpu_bytes": 1 << 20,
        "hidden": 64,
        "dtype": "bfloat16",
        "tp": 2,
        "instance_id": instance_id,
    }
    spec.update(more)
    return spec


def test_the_engine_description_comes_from_the_engines_config(instance_id):
    cfg = make_vllm_config(_spec(instance_id, model="Qwen/Qwen2-VL-7B-Instruct"), rank=1)
    cfg.parallel_config = ParallelConfig(tensor_parallel_size=2, data_parallel_rank=3, rank=1)
    desc = ev.engine_description(cfg, ev.ECConnectorRole.WORKER)
    assert desc["model"] == "Qwen/Qwen2-VL-7B-Instruct"
    assert desc["dtype"] == "torch.bfloat16"
    assert desc["instance_id"] == instance_id and desc["dp_rank"] == 3
    assert desc["tp_rank"] == 1 and desc["pcp_rank"] == 0 and desc["memory"] == "host"
    assert desc["reports_per_load"] == 2  # multiprocessing executor: every rank reports
    assert desc["hf_config"]["hidden_size"] == 64
    cfg.parallel_config.distributed_executor_backend = "uni"
    sched = ev.engine_description(cfg, ev.ECConnectorRole.SCHEDULER)
    assert sched["reports_per_load"] == 1 and "tp_rank" not in sched
    assert ev.transfer_config(cfg) == {
        "ec_connector": "ECTierConnector",
        "ec_role": "ec_both",
        "ec_connector_extra_config": {"ec_cpu_bytes": 1 << 20},
        "ec_connector_module_path": "ectier.vllm",
    }


def test_requests_become_ectiers_request_values():
    req = make_request(
        "r9",
        [{"item": 1, "tokens": 8}, {"item": 2, "tokens": 6, "media": False}],
        params={"img-0002": {"metadata": {}}},
    )
    req.mm_features[0].mm_position.is_embed = [True] * 6 + [False] * 2
    value = ev.request_value(req, 11)
    assert value["request_id"] == "r9" and value["num_computed_tokens"] == 11
    f0, f1 = value["features"]
    assert (f0["identifier"], f0["mm_hash"], f0["offset"], f0["length"], f0["num_tokens"]) == (
        "img-0001",
        "img-0001",
        5,
        8,
        6,
    )
    assert f0["has_local_input"] is True and f0["metadata"] == {"image_grid_thw": [[1, 2, 4]]}
    assert f1["has_local_input"] is False and f1["metadata"] == {}
    assert value["ec_transfer_params"] == {"img-0002": {"metadata": {}}}
    req.ec_transfer_params = {"x": (1, torch.tensor([2]))}  # made JSON-able
    assert ev.request_value(req)["ec_transfer_params"] == {"x": [1, [2]]}


def _refused(cfg, role, cls, message, region_dir):
    with pytest.raises(cls) as info:
        ev.ECTierConnector(cfg, role)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)
    assert os.listdir(region_dir) == []


@pytest.mark.parametrize("role", [ev.ECConnectorRole.SCHEDULER, ev.ECConnectorRole.WORKER])
def test_configurations_it_cannot_serve_raise_clear_errors(
    region_dir, instance_id, monkeypatch, role
):
    monkeypatch.setenv("ECTIER_REGION_DIR", region_dir)
    cfg = make_vllm_config(_spec(instance_id))
    cfg.use_v2_model_runner = False
    _refused(cfg, role, errors.ConfigError, "V2 model runner", region_dir)

    cfg = make_vllm_config(_spec(instance_id))
    cfg.model_config.hf_config = {"model_type": "mystery"}  # no field the width rule needs
    _refused(cfg, role, errors.ConfigError, "hidden_size", region_dir)

    cfg = make_vllm_config(_spec(instance_id))
    cfg.model_config.dtype = torch.int8
    _refused(cfg, role, errors.InvalidInputError, "torch.int8", region_dir)

    cfg = make_vllm_config(_spec(instance_id))
    cfg.ec_transfer_config.ec_connector_extra_config = {}
    _refused(cfg, role, errors.ConfigError, "ec_cpu_bytes must be specified", region_dir)

    cfg = make_vllm_config(_spec(instance_id))
    cfg.ec_transfer_config.ec_role = "ec_everything"
    _refused(cfg, role, errors.ConfigError, "ec_role", region_dir)

    cfg = make_vllm_config(_spec(instance_id))
    cfg.ec_transfer_config = None
    with pytest.raises(ValueError, match="ec_transfer_config"):
        ev.ECTierConnector(cfg, role)

    with pytest.raises(ValueError, match="unknown role"):
        ev.ECTierConnector(make_vllm_config(_spec(instance_id)), 7)


def test_wrong_tensors_and_wrong_metadata_are_refused(region_dir, instance_id, monkeypatch):
    monkeypatch.setenv("ECTIER_REGION_DIR", region_dir)
    spec = _spec(instance_id, tp=1, dtype="float32")
    s = ev.ECTierConnector(make_vllm_config(spec), ev.ECConnectorRole.SCHEDULER)
    w = ev.ECTierConnector(make_vllm_config(spec), ev.ECConnectorRole.WORKER)
    try:
        with pytest.raises(TypeError, match="ECTierConnectorMetadata"):
            w.bind_connector_metadata(object())
        with pytest.raises(errors.InvalidInputError):
            w.bind_connector_metadata(ev.ECTierConnectorMetadata(b"not metadata"))
        req = make_request("r", [{"item": 1, "tokens": 4}])
        s.update_state_after_alloc(req, 0)
        w.bind_connector_metadata(s.build_connector_meta(None))
        cache = {"img-0001": torch.zeros(4, 64, dtype=torch.float16)}
        with pytest.raises(errors.InvalidInputError, match="torch.float16"):
            w.save_caches(cache, "img-0001")
        w.get_finished(set())
        w.clear_connector_metadata()
        s.update_connector_output(
            type("Out", (), {"ec_connector_worker_meta": w.build_connector_worker_meta()})()
        )
        m = s.metrics()
        assert m["saves_failed_total"] == 1 and m["region_used_blocks"] == 0
        with pytest.raises(errors.InvalidInputError):
            s.update_connector_output(
                type("Out", (), {"ec_connector_worker_meta": ev.ECTierWorkerMetadata(b"junk")})()
            )
        assert not s.has_pending_push_work()
    finally:
        w.shutdown()
        s.shutdown()
        w.shutdown()  # idempotent
