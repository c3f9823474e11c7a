"""The base of every class that owns a C handle.

A handle is released exactly once: by :meth:`Handle.close`, by leaving a
``with`` block, or by the garbage collector (a :func:`weakref.finalize`,
which never runs twice).  A process that inherited a handle by ``fork``
never releases it (the parent's region lock is shared with the child, and
releasing it in the child would release the parent's), so only the
creating process frees.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable, Optional

from .errors import StateError


def _release(destroy: Callable[[Any], None], ptr: int, pid: int, keep: Any) -> None:
    # keep: a dict of containers of objects (tensors being copied) that must
    # outlive the C handle; emptied once it is gone.
    if os.getpid() == pid:
        destroy(ptr)
    if isinstance(keep, dict):
        for held in keep.values():
            held.clear()


class Handle:
    """An owned C object (subclasses name what it is in ``_kind``)."""

    _kind = "handle"

    def __init__(self, ptr: int, destroy: Callable[[Any], None], keep: Any = None) -> None:
        self._ptr: Optional[int] = ptr
        self._finalizer = weakref.finalize(self, _release, destroy, ptr, os.getpid(), keep)

    @property
    def closed(self) -> bool:
        """True once the handle has been released."""
        return self._ptr is None

    def _handle(self) -> int:
        """The C pointer; raises StateError after close()."""
        if self._ptr is None:
            raise StateError(f"this {self._kind} is closed")
        return self._ptr

    def close(self) -> None:
        """Release the C object now (a second call does nothing)."""
        self._ptr = None
        self._finalizer()

    def __enter__(self) -> "Handle":
        self._handle()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else hex(self._ptr)
        return f"<ectier.{type(self).__name__} {state}>"
