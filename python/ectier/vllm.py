"""ectier as the engine's encoder-cache connector.

Start the engine with::

    vllm serve MODEL --ec-transfer-config '{"ec_connector": "ECTierConnector",
        "ec_connector_module_path": "ectier.vllm", "ec_role": "ec_both",
        "ec_connector_extra_config": {"ec_cpu_bytes": "8GiB"}}'

The engine's factory imports this module and instantiates
:class:`ECTierConnector` once per role and process: the scheduler role
(``ECConnectorRole.SCHEDULER``) wraps an :class:`ectier.Scheduler`, the
worker role (``WORKER``, one per tensor-parallel rank) an
:class:`ectier.Worker`.  The adapter only translates: the engine's config
object into ectier's engine description, its requests into ectier's request
values, ectier's encoded step metadata and reports into the metadata
objects the engine ships between its processes (they pickle as plain
bytes), and loaded entries into tensors of the encoder cache.  Every
decision (what to save, load, fetch, evict, fail) is the C library's.

Environment: ``ECTIER_LIBRARY`` (the library, see :mod:`ectier._lib`),
``ECTIER_REGION_DIR`` (the region's directory instead of ``/dev/shm``; the
same-host P2P path serves only regions in ``/dev/shm``), and the
side-channel variables of the README's settings.

When the engine is importable the classes subclass its
``ECConnectorBase``, ``ECConnectorMetadata`` and
``ECConnectorWorkerMetadata``; otherwise standalone bases with the same
behaviour are used, so the module imports without the engine.
"""

from __future__ import annotations

import enum
import json
import logging
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Set, Tuple

from .errors import ConfigError
from .scheduler import Scheduler
from .worker import Worker

log = logging.getLogger("ectier.vllm")

try:  # the engine, when installed
    from vllm.distributed.ec_transfer.ec_connector.base import (  # type: ignore[import-not-found]
        ECConnectorBase as _Base,
    )
    from vllm.distributed.ec_transfer.ec_connector.base import (  # type: ignore[import-not-found]
        ECConnectorMetadata as _MetaBase,
    )
    from vllm.distributed.ec_transfer.ec_connector.base import (  # type: ignore[import-not-found]
        ECConnectorRole,
    )
    from vllm.distributed.ec_transfer.ec_connector.base import (  # type: ignore[import-not-found]
        ECConnectorWorkerMetadata as _WorkerMetaBase,
    )

    ENGINE_IMPORTABLE = True
except ImportError:
    ENGINE_IMPORTABLE = False

    class ECConnectorRole(enum.IntEnum):  # type: ignore[no-redef]
        """The connector's role (the engine's values)."""

        SCHEDULER = 0
        WORKER = 1

    class _MetaBase:  # type: ignore[no-redef]
        """Standalone stand-in for the engine's ECConnectorMetadata."""

    class _WorkerMetaBase:  # type: ignore[no-redef]
        """Standalone stand-in for the engine's ECConnectorWorkerMetadata."""

        def aggregate(self, other: "_WorkerMetaBase") -> "_WorkerMetaBase":
            raise NotImplementedError

    class _Base:  # type: ignore[no-redef]
        """Standalone stand-in for the engine's ECConnectorBase: the same
        constructor contract and metadata binding."""

        def __init__(self, vllm_config: Any, role: Any) -> None:
            cfg = getattr(vllm_config, "ec_transfer_config", None)
            if cfg is None:
                raise ValueError("ec_transfer_config must be set for an encoder-cache connector")
            self._connector_metadata: Optional[Any] = None
            self._vllm_config = vllm_config
            self._ec_transfer_config = cfg
            self._role = role
            self._is_producer = _role_word(cfg) in ("ec_producer", "ec_both")
            self._is_consumer = _role_word(cfg) in ("ec_consumer", "ec_both")

        @property
        def role(self) -> Any:
            return self._role

        @property
        def is_producer(self) -> bool:
            return self._is_producer

        @property
        def is_consumer(self) -> bool:
            return self._is_consumer


def _role_value(role: Any) -> int:
    """The role as an integer (the engine's enum, our IntEnum, or an int)."""
    return int(getattr(role, "value", role))


def _role_word(cfg: Any) -> Optional[str]:
    return cfg.get("ec_role") if isinstance(cfg, Mapping) else getattr(cfg, "ec_role", None)


def _engine_version() -> str:
    try:
        import vllm  # type: ignore[import-not-found]

        return str(getattr(vllm, "__version__", ""))
    except ImportError:
        return ""


# ---- metadata objects ----------------------------------------------------------


class ECTierConnectorMetadata(_MetaBase):
    """One step's decisions, scheduler to workers: ectier's encoded step
    metadata (``data``), which pickles as bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ECTierConnectorMetadata) and other.data == self.data

    def __repr__(self) -> str:
        return f"ECTierConnectorMetadata({len(self.data)} bytes)"


class ECTierWorkerMetadata(_WorkerMetaBase):
    """One rank's completed copies, worker to scheduler: ectier's encoded
    report (``data``).  :meth:`aggregate` concatenates, which is how the C
    side reads the reports of several ranks."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def aggregate(self, other: Optional["ECTierWorkerMetadata"]) -> "ECTierWorkerMetadata":
        """A new object with both ranks' reports (other may be None)."""
        if other is None:
            return ECTierWorkerMetadata(self.data)
        if not isinstance(other, ECTierWorkerMetadata):
            raise TypeError(f"cannot aggregate ECTierWorkerMetadata with {type(other).__name__}")
        return ECTierWorkerMetadata(self.data + other.data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ECTierWorkerMetadata) and other.data == self.data

    def __repr__(self) -> str:
        return f"ECTierWorkerMetadata({len(self.data)} bytes)"


# ---- the engine's objects into ectier's values ------------------------------------


def transfer_config(vllm_config: Any) -> Dict[str, Any]:
    """The ``ec_transfer_config`` document of the engine's config object."""
    cfg = vllm_config.ec_transfer_config
    if isinstance(cfg, Mapping):
        return dict(cfg)
    doc: Dict[str, Any] = {}
    for key in (
        "ec_connector",
        "ec_role",
        "ec_connector_extra_config",
        "ec_connector_module_path",
    ):
        value = getattr(cfg, key, None)
        if value is not None:
            doc[key] = dict(value) if key == "ec_connector_extra_config" else value
    return doc


def _jsonable(value: Any) -> Any:
    """value made JSON-serialisable (tensors and tuples as lists)."""
    return json.loads(json.dumps(value, default=_to_plain))


def _to_plain(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def _hf_config_dict(model_config: Any) -> Dict[str, Any]:
    hf = getattr(model_config, "hf_config", None)
    if hf is None:
        raise ConfigError(
            "ECTierConnector: the engine's model_config has no hf_config to read the width from"
        )
    if isinstance(hf, Mapping):
        return _jsonable(dict(hf))
    if hasattr(hf, "to_dict"):
        return _jsonable(hf.to_dict())
    return _jsonable(vars(hf))


def _parallel(vllm_config: Any) -> Tuple[int, int, int, int, int]:
    """(tp_size, pcp_size, dp_rank, tp_rank, pcp_rank) of this process."""
    pc = getattr(vllm_config, "parallel_config", None)
    tp_size = int(getattr(pc, "tensor_parallel_size", 1) or 1)
    pcp_size = int(getattr(pc, "prefill_context_parallel_size", 1) or 1)
    dp_rank = int(getattr(pc, "data_parallel_rank", 0) or 0)
    rank = int(getattr(pc, "rank", 0) or 0)
    tp_rank, pcp_rank = rank % tp_size, (rank // tp_size) % pcp_size
    if ENGINE_IMPORTABLE:
        try:  # the engine's own view of the groups, once they exist
            from vllm.distributed import parallel_state as ps  # type: ignore[import-not-found]

            if ps.model_parallel_is_initialized():
                tp_rank = ps.get_tensor_model_parallel_rank()
                if hasattr(ps, "get_pcp_group"):
                    pcp_rank = ps.get_pcp_group().rank_in_group
        except (ImportError, AttributeError, AssertionError, RuntimeError):
            pass
    return tp_size, pcp_size, dp_rank, tp_rank, pcp_rank


def _device(vllm_config: Any) -> Any:
    import torch

    dc = getattr(vllm_config, "device_config", None)
    device = torch.device(getattr(dc, "device", None) or "cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(
            f"ECTierConnector: the engine's device {device} is neither a CPU nor a CUDA device"
        )
    return device


def engine_description(vllm_config: Any, role: Any) -> Dict[str, Any]:
    """ectier's engine description for this process of the engine.

    Raises:
        ConfigError: an engine configuration the connector cannot serve.
    """
    if getattr(vllm_config, "use_v2_model_runner", True) is False:
        raise ConfigError(
            "ECTierConnector needs the engine's V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1): "
            "the older runner never loads encoder outputs on an ec_both instance"
        )
    mc = vllm_config.model_config
    tp_size, pcp_size, dp_rank, tp_rank, pcp_rank = _parallel(vllm_config)
    instance = getattr(vllm_config, "instance_id", None) or getattr(
        vllm_config.ec_transfer_config, "engine_id", None
    )
    if not instance:
        raise ConfigError(
            "ECTierConnector: the engine's config has no instance_id (or engine_id) "
            "to name the region"
        )
    backend = getattr(
        getattr(vllm_config, "parallel_config", None), "distributed_executor_backend", None
    )
    desc: Dict[str, Any] = {
        "model": str(getattr(mc, "model", "") or ""),
        "engine_version": _engine_version(),
        "hf_config": _hf_config_dict(mc),
        "dtype": str(mc.dtype),
        "instance_id": str(instance),
        "dp_rank": dp_rank,
        # Each rank is its own process with the multiprocessing executor, and
        # each reports every load; otherwise one report covers a load.
        "reports_per_load": tp_size * pcp_size if backend == "mp" else 1,
    }
    if _role_value(role) == ECConnectorRole.WORKER.value:
        device = _device(vllm_config)
        desc.update(
            tp_rank=tp_rank, pcp_rank=pcp_rank, memory="cuda" if device.type == "cuda" else "host"
        )
        if device.type == "cuda":
            desc["cuda_device"] = int(device.index)
    region_dir = os.environ.get("ECTIER_REGION_DIR")
    if region_dir:
        desc["region_dir"] = region_dir
    return desc


def _num_embeds(position: Any) -> int:
    get = getattr(position, "get_num_embeds", None)
    if callable(get):
        return int(get())
    if get is not None:
        return int(get)
    return int(position.length)


def _placeholder_metadata(feature: Any) -> Dict[str, Any]:
    """Small fields of the item's processed inputs (e.g. image_grid_thw),
    which a producer publishes so an orchestrator can drop the media."""
    data = getattr(feature, "data", None)
    if not isinstance(data, Mapping):
        return {}
    out: Dict[str, Any] = {}
    for name, value in data.items():
        value = getattr(value, "data", value)
        if hasattr(value, "numel") and value.numel() <= 64:
            out[str(name)] = value.tolist()
        elif isinstance(value, (int, float, bool)):
            out[str(name)] = value
    return out


def request_value(request: Any, num_computed_tokens: Optional[int] = None) -> Dict[str, Any]:
    """ectier's request value for an engine request."""
    features = []
    for f in getattr(request, "mm_features", None) or ():
        pos = f.mm_position
        features.append(
            {
                "identifier": str(f.identifier),
                "mm_hash": str(f.mm_hash) if getattr(f, "mm_hash", None) else None,
                "offset": int(pos.offset),
                "length": int(pos.length),
                "num_tokens": _num_embeds(pos),
                "has_local_input": getattr(f, "data", None) is not None,
                "metadata": _placeholder_metadata(f),
            }
        )
    if num_computed_tokens is None:
        num_computed_tokens = int(getattr(request, "num_computed_tokens", 0) or 0)
    params = getattr(request, "ec_transfer_params", None)
    return {
        "request_id": str(request.request_id),
        "num_computed_tokens": max(0, int(num_computed_tokens)),
        # Anything that is not an object is logged and ignored by ectier.
        "ec_transfer_params": _jsonable(params) if params is not None else None,
        "features": features,
    }


# ---- the connector ------------------------------------------------------------------


class ECTierConnector(_Base):
    """The engine's encoder-cache connector backed by ectier.

    Args:
        vllm_config: the engine's config object (``ec_transfer_config``,
            ``model_config``, ``parallel_config``, ``device_config``,
            ``instance_id``).
        role: ``ECConnectorRole.SCHEDULER`` or ``ECConnectorRole.WORKER``.

    Raises:
        ValueError (ConfigError): a config the connector cannot serve, with
            the library's message (a bad setting, a model config without the
            fields the width rule needs, the older model runner, ...).
    """

    def __init__(self, vllm_config: Any, role: Any) -> None:
        super().__init__(vllm_config, role)
        self._connector_metadata = None
        if _role_value(role) not in (
            ECConnectorRole.SCHEDULER.value,
            ECConnectorRole.WORKER.value,
        ):
            raise ValueError(f"ECTierConnector: unknown role {role!r}")
        self._ectier_role = _role_value(role)
        self._scheduler: Optional[Scheduler] = None
        self._worker: Optional[Worker] = None
        self._raw_stream: Optional[Any] = None
        self._ec_caches: Optional[Any] = None
        config = transfer_config(vllm_config)
        engine = engine_description(vllm_config, role)
        if self._ectier_role == ECConnectorRole.SCHEDULER.value:
            self._scheduler = Scheduler(config, engine)
        else:
            self._worker = Worker(config, engine)
            import torch

            self._torch = torch
            self._device = _device(vllm_config)
            self._dtype = self._worker.geometry.torch_dtype
            # The current stream as an integer: torch.cuda.current_stream
            # costs ~20 us a call on a slow host; torch's own compiler uses
            # this raw accessor (absent in CPU builds and old releases).
            self._raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    # ---- helpers ---------------------------------------------------------------

    def _sched(self) -> Scheduler:
        if self._scheduler is None:
            raise RuntimeError("ECTierConnector: a scheduler-side call on the worker connector")
        return self._scheduler

    def _work(self) -> Worker:
        if self._worker is None:
            raise RuntimeError("ECTierConnector: a worker-side call on the scheduler connector")
        return self._worker

    def _stream(self) -> int:
        if self._device.type != "cuda":
            return 0
        if self._raw_stream is not None:
            return int(self._raw_stream(self._device.index))
        return int(self._torch.cuda.current_stream(self._device).cuda_stream)

    # ---- scheduler side ----------------------------------------------------------

    def has_cache_item(self, identifier: str) -> bool:
        """Whether the CPU tier holds identifier: the engine loads it instead of encoding."""
        return self._sched().has_cache_item(identifier)

    def ensure_cache_available(self, request: Any, num_computed_tokens: int) -> bool:
        """False defers the request (a peer read is in flight); a request
        that cannot be served shows up in :meth:`take_unavailable_requests`."""
        return self._sched().ensure_cache_available(request_value(request, num_computed_tokens))

    def update_state_after_alloc(self, request: Any, index: int) -> None:
        """The engine allocated encoder-cache space for feature index: queue its save or load."""
        self._sched().update_state_after_alloc(request_value(request), index)

    def update_state_after_free(self, request: Any, index: int) -> None:
        """Nothing to do: the CPU tier does not follow the GPU cache's frees."""

    def build_connector_meta(self, scheduler_output: Any) -> ECTierConnectorMetadata:
        """This step's saves and loads for the workers (scheduler_output is
        neither read nor changed)."""
        return ECTierConnectorMetadata(self._sched().build_connector_meta())

    def update_connector_output(self, connector_output: Any) -> None:
        """Apply the aggregated worker metadata of the step."""
        meta = getattr(connector_output, "ec_connector_worker_meta", None)
        if meta is None:
            return
        if not isinstance(meta, ECTierWorkerMetadata):
            log.warning(
                "ECTierConnector: ignoring worker metadata of type %s", type(meta).__name__
            )
            return
        self._sched().update_connector_output(meta.data)

    def request_finished(self, request: Any) -> Tuple[bool, Optional[Dict[str, Any]]]:
        """(False, the request's ec_transfer_params or None): a producer
        announces each held entry; nothing is kept for the request."""
        return False, self._sched().request_finished(request_value(request))

    def has_pending_push_work(self) -> bool:
        """True while copies or peer transfers are outstanding."""
        return self._sched().has_pending_push_work()

    def take_unavailable_requests(self) -> Set[str]:
        """Ids of requests the engine must fail (each returned once)."""
        return set(self._sched().take_unavailable_requests())

    # ---- worker side ----------------------------------------------------------------

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        """Bind the step's metadata (before the model runs)."""
        if not isinstance(connector_metadata, ECTierConnectorMetadata):
            raise TypeError(
                "ECTierConnector: expected ECTierConnectorMetadata, got "
                f"{type(connector_metadata).__name__}"
            )
        self._work().bind_metadata(connector_metadata.data)
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        """Forget the step's metadata (after the model ran)."""
        if self._worker is not None:
            self._worker.clear_metadata()
        self._connector_metadata = None

    def _get_connector_metadata(self) -> ECTierConnectorMetadata:
        if self._connector_metadata is None:
            raise RuntimeError("ECTierConnector: no connector metadata is bound")
        return self._connector_metadata

    def register_caches(self, ec_caches: Any) -> None:
        """Nothing to register: loads install new tensors in the encoder cache."""
        self._ec_caches = ec_caches

    def start_worker_services(self) -> None:
        """Nothing to start: ectier's copy engines start with the worker."""

    def start_save_caches(self, **kwargs: Any) -> None:
        """Nothing to do: saves are queued by :meth:`save_caches`."""

    def start_load_caches(self, encoder_cache: Dict[str, Any], **kwargs: Any) -> None:
        """Copy this step's loads from the CPU tier into new
        ``[tokens, hidden]`` tensors of the model's dtype on its device and
        install them in ``encoder_cache``.  On a GPU the engine's current
        stream waits for the copy; on a CPU the copy has landed on return."""
        worker = self._work()
        self._get_connector_metadata()
        loads = worker.loads()
        if not loads:
            return
        hidden = worker.geometry.hidden_dim
        dests = {
            it["key"]: self._torch.empty(
                (it["n_blocks"], hidden), dtype=self._dtype, device=self._device
            )
            for it in loads
        }
        worker.start_load(dests, stream=self._stream())
        if self._device.type != "cuda":
            worker.wait()
        encoder_cache.update(dests)

    def save_caches(self, encoder_cache: Dict[str, Any], mm_hash: str, **kwargs: Any) -> None:
        """Queue the save of a newly encoded entry (save rank, when the step saves it)."""
        worker = self._work()
        tensor = encoder_cache.get(mm_hash)
        if tensor is None:
            return
        worker.save(mm_hash, tensor, stream=self._stream())

    def get_finished(
        self, finished_req_ids: Iterable[str]
    ) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        """Submit the step's saves; no request waits on the connector: (None, None)."""
        self._work().get_finished()
        return None, None

    def build_connector_worker_meta(self) -> Optional[ECTierWorkerMetadata]:
        """The copies that landed since the last call, or None."""
        data = self._work().take_report()
        return ECTierWorkerMetadata(data) if data else None

    def get_ec_connector_stats(self) -> Optional[Any]:
        """None: the engine aggregates stats objects of its own types;
        ectier's counters are the scheduler's (:meth:`metrics`, and the
        Prometheus endpoint with ``metrics_address``)."""
        return None

    def metrics(self) -> Dict[str, Any]:
        """The scheduler side's counters as a dict (scheduler role)."""
        return self._sched().metrics().as_dict()

    def shutdown(self) -> None:
        """Stop the role: the scheduler releases the tier and P2P, the worker
        waits for its copies.  Idempotent."""
        if self._scheduler is not None:
            self._scheduler.shutdown()
            self._scheduler.close()
        if self._worker is not None:
            self._worker.close()


__all__ = [
    "ECConnectorRole",
    "ECTierConnector",
    "ECTierConnectorMetadata",
    "ECTierWorkerMetadata",
    "ENGINE_IMPORTABLE",
    "engine_description",
    "request_value",
    "transfer_config",
]
