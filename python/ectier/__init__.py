"""ectier: a CPU-memory tier and peer-to-peer transfer for an LLM server's
encoder cache, from Python.

This package binds libectier with :mod:`ctypes` (the standard library only)
and adds the engine connector :class:`ectier.vllm.ECTierConnector`.  The
library is found on first use (see :mod:`ectier._lib` for the order:
``ECTIER_LIBRARY``, beside the package, ``pkg-config``, the loader's path).

Classes: :class:`Config` (the config check), :class:`Geometry`,
:class:`RegionDirectory` (inspect and gc), :class:`Scheduler`,
:class:`Worker`, :class:`Metrics`; exceptions in :mod:`ectier.errors`.
"""

from __future__ import annotations

from . import _lib
from .config import Config
from .errors import (
    ConfigError,
    ECTierError,
    InternalError,
    InvalidInputError,
    LibraryError,
    NotFoundError,
    ResourceError,
    StateError,
    TransferError,
)
from .geometry import Geometry
from .metrics import Metrics
from .region import RegionDirectory, RegionInfo
from .scheduler import Scheduler, describe
from .worker import Worker, decode_metadata, decode_report

__version__ = "0.1.0"

ABI_VERSION = _lib.ABI_VERSION


def abi_version() -> int:
    """The loaded library's ABI version (loads it)."""
    return int(_lib.lib().ect_abi_version())


def library_version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.lib().ect_version().decode()


def library_path() -> str:
    """Where the loaded library came from (loads it)."""
    _lib.lib()
    return _lib.origin()


def has_p2p() -> bool:
    """Whether the loaded library was built with peer-to-peer transfer."""
    return bool(_lib.lib().ect_has_p2p())


def has_cuda() -> bool:
    """Whether the loaded library was built with the CUDA copy engine."""
    return bool(_lib.lib().ect_has_cuda())


__all__ = [
    "ABI_VERSION",
    "Config",
    "ConfigError",
    "ECTierError",
    "Geometry",
    "InternalError",
    "InvalidInputError",
    "LibraryError",
    "Metrics",
    "NotFoundError",
    "RegionDirectory",
    "RegionInfo",
    "ResourceError",
    "Scheduler",
    "StateError",
    "TransferError",
    "Worker",
    "abi_version",
    "decode_metadata",
    "decode_report",
    "describe",
    "has_cuda",
    "has_p2p",
    "library_path",
    "library_version",
]
