"""The scheduler side: one per serving instance (include/ectier/scheduler.h).

It owns the index of the instance's CPU tier, decides each step's saves and
loads, and (with P2P) runs the producer and consumer sessions.  Requests are
plain mappings in the shape include/ectier/binding.h documents::

    {"request_id": "r1", "num_computed_tokens": 0,
     "ec_transfer_params": {...} or None,
     "features": [{"identifier": "...", "mm_hash": "...", "offset": 0,
                   "length": 256, "num_tokens": 256,
                   "has_local_input": True, "metadata": {...}}]}

Thread safety: the C side serialises its calls with one mutex; a Scheduler
may be used from any thread.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _lib
from ._handle import Handle
from .config import ConfigLike, config_text
from .errors import InvalidInputError
from .geometry import Geometry
from .metrics import Metrics

EngineLike = Mapping[str, Any]


def engine_text(engine: EngineLike) -> bytes:
    """The JSON text of an engine description (binding.h lists its keys)."""
    if not isinstance(engine, Mapping):
        raise TypeError(f"an engine description is a mapping, not {type(engine).__name__}")
    return _lib.encode(json.dumps(dict(engine)))


def describe(config: ConfigLike, engine: EngineLike) -> Dict[str, Any]:
    """Check a config and an engine description together, open nothing, and
    return the geometry they imply plus ``role`` and ``p2p_enabled``.

    Raises:
        ConfigError, InvalidInputError, NotFoundError: as the C library says.
    """
    cfg, eng = config_text(config), engine_text(engine)
    out = _lib.call_text(_lib.lib().ect_engine_describe_json, cfg, len(cfg), eng, len(eng))
    return json.loads(out or "{}")


def create(side: str, config: ConfigLike, engine: EngineLike) -> Tuple[int, Dict[str, Any]]:
    """Create the C object of a side ("scheduler" or "worker") from a config
    and an engine description: (its pointer, what :func:`describe` says)."""
    cfg, eng = config_text(config), engine_text(engine)
    described = describe(cfg, engine)
    out = ctypes.c_void_p()
    fn = getattr(_lib.lib(), f"ect_{side}_create_json")
    _lib.check(fn(cfg, len(cfg), eng, len(eng), ctypes.byref(out)))
    return out.value or 0, described


def request_text(request: Mapping[str, Any]) -> bytes:
    """The JSON text of a request mapping."""
    try:
        return _lib.encode(json.dumps(request))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"request is not JSON-serialisable: {exc}") from None


class Scheduler(Handle):
    """The scheduler side of one instance.

    Args:
        config: the engine's ``ec_transfer_config`` (text or mapping).
        engine: the engine description (model, engine_version, hidden_dim /
            hf_config / hf_config_path, dtype, instance_id, dp_rank,
            reports_per_load, region_dir).

    Raises:
        ConfigError, InvalidInputError, ResourceError, ...: creation failed
            (nothing is left behind).
    """

    _kind = "scheduler"

    def __init__(self, config: ConfigLike, engine: EngineLike) -> None:
        ptr, described = create("scheduler", config, engine)
        super().__init__(ptr, _lib.lib().ect_scheduler_destroy)
        self.geometry = Geometry(described)
        self.role: str = described["role"]
        self.p2p_enabled: bool = bool(described["p2p_enabled"])

    def has_cache_item(self, identifier: str) -> bool:
        """Consumer: whether the tier has a ready entry for identifier (a hit
        pins it until the next :meth:`build_connector_meta`)."""
        return bool(
            _lib.lib().ect_scheduler_has_cache_item(self._handle(), _lib.encode(identifier))
        )

    def ensure_cache_available(self, request: Mapping[str, Any]) -> bool:
        """Whether the request may be admitted now (False defers it: a P2P
        read is in flight).  A request that cannot be served is reported by
        :meth:`take_unavailable_requests` instead.

        Raises:
            ConfigError, InvalidInputError: a malformed request (nothing changed).
        """
        text = request_text(request)
        available = ctypes.c_int(0)
        _lib.check(
            _lib.lib().ect_scheduler_ensure_cache_available_json(
                self._handle(), text, len(text), ctypes.byref(available)
            )
        )
        return bool(available.value)

    def update_state_after_alloc(self, request: Mapping[str, Any], index: int) -> None:
        """The engine allocated GPU cache space for ``request["features"][index]``:
        queue its save (producer) or load (consumer)."""
        text = request_text(request)
        if index < 0:
            raise InvalidInputError(f"feature index {index} is negative")
        _lib.check(
            _lib.lib().ect_scheduler_update_state_after_alloc_json(
                self._handle(), text, len(text), index
            )
        )

    def build_connector_meta(self) -> bytes:
        """End of scheduling: this step's saves and loads, encoded for every
        worker (``Worker.bind_metadata``)."""
        out, length = ctypes.c_void_p(), ctypes.c_size_t(0)
        _lib.check(
            _lib.lib().ect_scheduler_build_connector_meta_bytes(
                self._handle(), ctypes.byref(out), ctypes.byref(length)
            )
        )
        return _lib.take_bytes(out, length.value) or b""

    def update_connector_output(self, reports: bytes) -> None:
        """Apply the workers' reports (every rank's, concatenated).

        Raises:
            InvalidInputError: bytes that do not decode (nothing applied).
        """
        if not isinstance(reports, (bytes, bytearray, memoryview)):
            raise TypeError(f"reports are bytes, not {type(reports).__name__}")
        data = bytes(reports)
        _lib.check(
            _lib.lib().ect_scheduler_update_connector_output(self._handle(), data, len(data))
        )

    def request_finished(self, request: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        """A request ended.  A P2P producer returns its ``ec_transfer_params``
        (each announced entry is held for the announce lease); else None."""
        text = request_text(request)
        params = _lib.call_text(
            _lib.lib().ect_scheduler_request_finished_json, self._handle(), text, len(text)
        )
        return json.loads(params) if params is not None else None

    def has_pending_push_work(self) -> bool:
        """True while saves, loads or P2P work are outstanding."""
        return bool(_lib.lib().ect_scheduler_has_pending_push_work(self._handle()))

    def take_unavailable_requests(self) -> List[str]:
        """The ids of requests that must fail (an announced encoding that can
        neither be fetched nor computed here); each is returned once."""
        out = _lib.call_text(_lib.lib().ect_scheduler_take_unavailable_json, self._handle())
        return list(json.loads(out or "[]"))

    def metrics(self) -> Metrics:
        """A snapshot of the counters (also readable after shutdown)."""
        return Metrics(
            _lib.call_text(_lib.lib().ect_scheduler_metrics_prometheus, self._handle()) or ""
        )

    def shutdown(self) -> None:
        """Stop both roles and P2P and release the region; the handle stays
        open for :meth:`metrics` until :meth:`close`.  Idempotent."""
        if not self.closed:
            _lib.lib().ect_scheduler_shutdown(self._handle())
