"""Exceptions of the ectier package.

Every ectier C status becomes an exception of one class per status family,
carrying the library's own message (``ect_last_error``), the status code and
its name.  Errors the binding finds itself (a closed handle, a tensor of the
wrong dtype) use the same classes with ``status`` ``None``.
"""

from __future__ import annotations

from typing import Optional

# Status codes of include/ectier/status.h (never renumbered).
STATUS_NAMES = {
    0: "ECT_OK",
    -1: "ECT_ERR_INVALID_ARG",
    -2: "ECT_ERR_NO_MEMORY",
    -3: "ECT_ERR_CONFIG",
    -4: "ECT_ERR_IO",
    -5: "ECT_ERR_NOT_FOUND",
    -6: "ECT_ERR_EXISTS",
    -7: "ECT_ERR_NO_SPACE",
    -8: "ECT_ERR_STATE",
    -9: "ECT_ERR_INCOMPATIBLE",
    -10: "ECT_ERR_UNSUPPORTED",
    -11: "ECT_ERR_PARSE",
    -12: "ECT_ERR_TIMEOUT",
    -13: "ECT_ERR_BUSY",
    -14: "ECT_ERR_TRANSPORT",
    -15: "ECT_ERR_PEER",
    -16: "ECT_ERR_CUDA",
    -17: "ECT_ERR_OVERFLOW",
    -18: "ECT_ERR_SHUTDOWN",
    -19: "ECT_ERR_INTERNAL",
}


class ECTierError(Exception):
    """Base of every ectier exception.

    Attributes:
        status: the C status code, or None for an error found by the binding.
        status_name: ``"ECT_ERR_CONFIG"`` and so on, or None.
        message: ectier's message (what ``str()`` shows).
    """

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.status_name = STATUS_NAMES.get(status) if status is not None else None

    def __str__(self) -> str:
        if self.status_name is None:
            return self.message
        return f"{self.message} [{self.status_name}]"


class InvalidInputError(ECTierError, ValueError):
    """A bad argument, malformed bytes or text, or a size out of range
    (ECT_ERR_INVALID_ARG, ECT_ERR_PARSE, ECT_ERR_OVERFLOW)."""


class ConfigError(ECTierError, ValueError):
    """A configuration ectier cannot serve: a bad setting, a feature not in
    this build, a region of another geometry (ECT_ERR_CONFIG,
    ECT_ERR_UNSUPPORTED, ECT_ERR_INCOMPATIBLE)."""


class NotFoundError(ECTierError, LookupError):
    """No such key, entry, file or peer (ECT_ERR_NOT_FOUND)."""


class StateError(ECTierError):
    """The object is in the wrong state: already exists, busy, shut down or
    closed (ECT_ERR_EXISTS, ECT_ERR_STATE, ECT_ERR_BUSY, ECT_ERR_SHUTDOWN)."""


class ResourceError(ECTierError, OSError):
    """Memory, space or a system call failed (ECT_ERR_NO_MEMORY,
    ECT_ERR_NO_SPACE, ECT_ERR_IO)."""


class TransferError(ECTierError):
    """A copy or a peer transfer failed (ECT_ERR_TIMEOUT, ECT_ERR_TRANSPORT,
    ECT_ERR_PEER, ECT_ERR_CUDA)."""


class InternalError(ECTierError):
    """An internal invariant of ectier failed (ECT_ERR_INTERNAL)."""


class LibraryError(ECTierError, ImportError):
    """libectier could not be found or loaded, or its ABI version is not the
    one this package speaks."""


_FAMILY = {
    -1: InvalidInputError,
    -11: InvalidInputError,
    -17: InvalidInputError,
    -3: ConfigError,
    -9: ConfigError,
    -10: ConfigError,
    -5: NotFoundError,
    -6: StateError,
    -8: StateError,
    -13: StateError,
    -18: StateError,
    -2: ResourceError,
    -4: ResourceError,
    -7: ResourceError,
    -12: TransferError,
    -14: TransferError,
    -15: TransferError,
    -16: TransferError,
    -19: InternalError,
}


def error_for(status: int, message: str) -> ECTierError:
    """The exception for a C status and its message (status must not be 0)."""
    cls = _FAMILY.get(status, InternalError)
    if not message:
        message = f"ectier call failed with status {status}"
    return cls(message, status)
