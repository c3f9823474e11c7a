"""The worker side: one per tensor-parallel rank (include/ectier/worker.h).

A worker copies between the engine's encoder-cache memory and the
instance's region as the scheduler decided.  Engine memory is given as
torch tensors (host tensors for ``memory: "host"``, CUDA tensors for
``memory: "cuda"``), passed to C by ``data_ptr()`` and byte size, or, for a
host worker, as a writable buffer (``bytearray``) or ``bytes`` to save.

Lifetimes: copies are asynchronous, so every tensor a save or load uses is
kept alive by the worker until the report that completes it has been taken
(:meth:`Worker.take_report`), or until the worker is closed (which waits for
every copy).  A non-contiguous tensor to save is copied to a contiguous one
first; a load destination must be contiguous (the entry lands in it).

Thread safety: a worker is used by one thread at a time.
"""

from __future__ import annotations

import copy
import ctypes
import json
import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _lib
from ._handle import Handle
from .config import ConfigLike
from .errors import InvalidInputError, error_for
from .geometry import Geometry
from .scheduler import EngineLike, create

log = logging.getLogger("ectier")


def _is_tensor(obj: Any) -> bool:
    return (
        hasattr(obj, "data_ptr") and hasattr(obj, "element_size") and hasattr(obj, "is_contiguous")
    )


class Worker(Handle):
    """The worker side of one rank.

    Args:
        config: the engine's ``ec_transfer_config``.
        engine: the engine description; ``tp_rank``, ``pcp_rank``,
            ``memory`` (``"host"`` or ``"cuda"``) and ``cuda_device`` apply here.

    Raises:
        ConfigError (e.g. a region of another geometry), ResourceError, ...
    """

    _kind = "worker"

    def __init__(self, config: ConfigLike, engine: EngineLike) -> None:
        ptr, described = create("worker", config, engine)
        # Objects the C side copies from or into, by key (saves) and by
        # transfer id (loads); released as reports name them.
        self._saving: Dict[str, List[Any]] = {}
        self._loading: Dict[int, Any] = {}
        super().__init__(
            ptr,
            _lib.lib().ect_worker_destroy,
            keep={"saves": self._saving, "loads": self._loading},
        )
        self.geometry = Geometry(described)
        self.memory: str = str(engine.get("memory", "host"))
        self.cuda_device: int = int(engine.get("cuda_device", 0))
        #: The error of the last copy batch that failed (see take_report).
        self.copy_error: Optional[Exception] = None
        # The bound metadata, decoded once per bind (loads() and start_load()
        # both read it, on the engine's critical path).
        self._bound: Optional[Dict[str, Any]] = None
        self._tensor_dtype: Any = None

    @property
    def is_save_rank(self) -> bool:
        """Whether this rank saves (tensor- and context-parallel rank 0)."""
        return bool(_lib.lib().ect_worker_is_save_rank(self._handle()))

    @property
    def in_flight(self) -> int:
        """Copy batches submitted and not yet reported."""
        return int(_lib.lib().ect_worker_in_flight(self._handle()))

    @property
    def held(self) -> int:
        """How many objects the worker keeps alive for copies in flight."""
        return sum(len(v) for v in self._saving.values()) + len(self._loading)

    # ---- the step ------------------------------------------------------------

    def bind_metadata(self, data: bytes) -> None:
        """Bind this step's metadata (``Scheduler.build_connector_meta``).

        Raises:
            InvalidInputError: bytes that do not decode (nothing is bound).
            StateError: metadata is already bound.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"metadata is bytes, not {type(data).__name__}")
        data = bytes(data)
        _lib.check(_lib.lib().ect_worker_bind_metadata(self._handle(), data, len(data)))
        self._bound = None

    def metadata(self) -> Dict[str, Any]:
        """The bound metadata: ``{"saves": [...], "loads": [...]}``, each item
        with ``key``, ``n_blocks``, ``runs`` (and ``transfer_id`` for loads).

        Raises:
            StateError: nothing is bound.
        """
        return copy.deepcopy(self._decoded())

    def _decoded(self) -> Dict[str, Any]:
        """The bound metadata, decoded at its first use after the bind; not
        a copy (read-only use).  Raises StateError when nothing is bound."""
        if self._bound is None:
            self._bound = json.loads(
                _lib.call_text(_lib.lib().ect_worker_metadata_json, self._handle()) or "{}"
            )
        return self._bound

    def loads(self) -> List[Dict[str, Any]]:
        """The bound step's loads, each with ``key``, ``transfer_id``,
        ``n_blocks`` (the entry's rows) and ``nbytes``."""
        block = self.geometry.block_size_bytes
        return [
            dict(it, nbytes=it["n_blocks"] * block) for it in self._decoded().get("loads", [])
        ]

    def _address(self, obj: Any, what: str, destination: bool) -> Tuple[int, int, Any]:
        """(address, byte size, the object to keep alive) of engine memory."""
        if _is_tensor(obj):
            # On the engine's critical path (every load and save): each
            # attribute is read once.
            on = obj.device
            device = on.type
            if self.memory == "cuda" and (
                device != "cuda" or (on.index not in (None, self.cuda_device))
            ):
                raise InvalidInputError(
                    f"{what}: a tensor on {on}, but this worker copies to "
                    f"cuda:{self.cuda_device}"
                )
            if self.memory == "host" and device != "cpu":
                raise InvalidInputError(
                    f"{what}: a tensor on {on}, but this worker's memory is host memory"
                )
            dtype = obj.dtype
            if dtype is not self._tensor_dtype and str(dtype) != self.geometry.dtype:
                raise InvalidInputError(
                    f"{what}: a tensor of {obj.dtype}, but the tier holds {self.geometry.dtype}"
                )
            self._tensor_dtype = dtype  # the torch dtype of the tier, once seen
            if obj.dim() != 2 or obj.shape[1] != self.geometry.hidden_dim:
                raise InvalidInputError(
                    f"{what}: a tensor of shape {tuple(obj.shape)}, but rows of the tier are "
                    f"[tokens, {self.geometry.hidden_dim}]"
                )
            if not obj.is_contiguous():
                if destination:
                    raise InvalidInputError(f"{what}: a load destination must be contiguous")
                obj = obj.contiguous()
            return int(obj.data_ptr()), int(obj.numel() * obj.element_size()), obj
        if self.memory != "host":
            raise InvalidInputError(f"{what}: a CUDA worker takes torch CUDA tensors")
        if isinstance(obj, bytes) and not destination:
            return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value or 0, len(obj), obj
        try:
            view = memoryview(obj)
        except TypeError:
            raise InvalidInputError(
                f"{what}: {type(obj).__name__} is neither a tensor nor a buffer"
            ) from None
        if view.readonly or not view.c_contiguous:
            raise InvalidInputError(f"{what}: a buffer must be writable and contiguous")
        if view.nbytes == 0:
            return 0, 0, obj
        return ctypes.addressof(ctypes.c_char.from_buffer(view)), view.nbytes, obj

    def start_load(self, destinations: Mapping[str, Any], stream: int = 0) -> None:
        """Copy every load of the bound step into its destination.

        Args:
            destinations: one tensor (or buffer) per load key, of exactly the
                entry's bytes (``loads()`` gives them).
            stream: the engine's current CUDA stream as an integer
                (``torch.cuda.current_stream().cuda_stream``); later work on
                it waits for the copy.  Ignored for host memory, where the
                copy runs on ectier's threads: call :meth:`wait` before
                reading the destinations.

        Raises:
            InvalidInputError: a missing or foreign key, a wrong size, dtype,
                shape or device (nothing is copied; the loads are still
                reported, so their pins are released).
        """
        loads = {it["key"]: it for it in self._decoded().get("loads", [])}
        keys, addrs, sizes, keep = [], [], [], []
        for key, obj in destinations.items():
            addr, nbytes, kept = self._address(obj, f"load of {key!r}", destination=True)
            keys.append(_lib.encode(key))
            addrs.append(addr)
            sizes.append(nbytes)
            keep.append((key, kept))
        n = len(keys)
        _lib.check(
            _lib.lib().ect_worker_start_load_arrays(
                self._handle(),
                n,
                (ctypes.c_char_p * n)(*keys),
                (ctypes.c_uint64 * n)(*addrs),
                (ctypes.c_uint64 * n)(*sizes),
                int(stream),
            )
        )
        for key, kept in keep:
            self._loading[int(loads[key]["transfer_id"])] = kept

    def save(self, key: str, tensor: Any, stream: int = 0) -> bool:
        """The engine encoded ``key`` into ``tensor``: on the save rank, if
        the step saves ``key``, queue the copy (submitted by
        :meth:`get_finished`).  Returns whether it was queued.

        Raises:
            InvalidInputError: a tensor of the wrong dtype, shape or device,
                or larger than the entry's blocks (nothing queued; the save
                is reported as failed, so its blocks are freed).
            StateError: ``key`` was already saved this step.
        """
        addr, nbytes, kept = self._address(tensor, f"save of {key!r}", destination=False)
        queued = ctypes.c_int(0)
        _lib.check(
            _lib.lib().ect_worker_save(
                self._handle(),
                _lib.encode(key),
                addr or None,
                nbytes,
                int(stream) or None,
                ctypes.byref(queued),
            )
        )
        if queued.value:
            self._saving.setdefault(key, []).append(kept)
        return bool(queued.value)

    def get_finished(self) -> None:
        """End of the model run: submit the queued saves as one batch."""
        _lib.check(_lib.lib().ect_worker_get_finished(self._handle()))

    def take_report(self) -> Optional[bytes]:
        """The copies that landed since the last call, encoded for the
        scheduler (``Scheduler.update_connector_output``); None when nothing
        finished.  Releases the objects those copies used.

        A failed copy batch still yields its report (its saves as failed,
        its loads as done); the failure is logged and kept in
        :attr:`copy_error`, and the engine must not use those loads.
        """
        lib = _lib.lib()
        out, length, copy = ctypes.c_void_p(), ctypes.c_size_t(0), ctypes.c_int(0)
        _lib.check(
            lib.ect_worker_take_report_bytes(
                self._handle(), ctypes.byref(out), ctypes.byref(length), ctypes.byref(copy)
            )
        )
        data = _lib.take_bytes(out, length.value)
        if copy.value != 0:
            self.copy_error = error_for(copy.value, _lib.last_error())
            log.error("ectier worker: a copy batch failed: %s", self.copy_error)
        if data is not None:
            self._release(data)
        return data

    def _release(self, report: bytes) -> None:
        done = decode_report(report)
        for key in done["saves"] + done["failed_saves"]:
            held = self._saving.get(key)
            if held:
                held.pop(0)
                if not held:
                    del self._saving[key]
        for tid in done["loads"]:
            self._loading.pop(int(tid), None)

    def wait(self) -> None:
        """Block until every submitted copy has landed.

        Raises:
            TransferError and others: a copy failed.
        """
        _lib.check(_lib.lib().ect_worker_wait(self._handle()))

    def clear_metadata(self) -> None:
        """Forget the bound metadata (saves never made are reported as
        failed, loads never started as done, in the next report)."""
        _lib.lib().ect_worker_clear_metadata(self._handle())
        self._bound = None


def decode_metadata(data: bytes, num_blocks: int) -> Dict[str, Any]:
    """Step metadata bytes as a dict (blocks checked against num_blocks).

    Raises:
        InvalidInputError: bytes that do not decode.
    """
    data = bytes(data)
    return json.loads(
        _lib.call_text(_lib.lib().ect_step_meta_json, data, len(data), num_blocks) or "{}"
    )


def decode_report(data: bytes) -> Dict[str, Any]:
    """One or more concatenated worker reports as one dict: ``saves``,
    ``failed_saves`` (keys), ``loads`` (transfer ids), ``stats``.

    Raises:
        InvalidInputError: bytes that do not decode.
    """
    data = bytes(data)
    return json.loads(_lib.call_text(_lib.lib().ect_step_report_json, data, len(data)) or "{}")
