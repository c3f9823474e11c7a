"""Finding, loading and calling libectier through ctypes.

The library is looked for, in this order:

1. the file named by the environment variable ``ECTIER_LIBRARY``;
2. ``libectier.so*`` installed beside this package (in its directory);
3. the ``libdir`` that ``pkg-config --variable=libdir ectier`` names;
4. the dynamic loader's search path (``LD_LIBRARY_PATH``, ``ld.so.cache``).

The first candidate that loads and reports this package's ABI version
(``ect_abi_version``) is used; the others are not tried.  When none works,
:class:`~ectier.errors.LibraryError` names all four and what each gave.  The
library is loaded on first use, so importing :mod:`ectier` (or
:mod:`ectier.vllm`) never fails for want of it.

Every C entry point used is declared here with its argument and result
types; none takes a struct, so nothing is laid out by hand.  Output strings
and byte strings are copied into Python objects and freed with ``ect_free``
at once.  Thread safety: loading is serialised by a lock; calls follow the
C functions' rules (ectier's last-error message is per thread, and it is
read right after the failing call on the same thread).
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import threading
import warnings
from typing import Callable, List, Optional, Sequence, Tuple

from .errors import LibraryError, error_for

#: The ABI version this package speaks (ECT_ABI_VERSION in binding.h).
ABI_VERSION = 2

#: Names of the discovery steps, in order.
STRATEGIES = ("ECTIER_LIBRARY", "beside the package", "pkg-config", "loader search path")

_c_char_pp = ctypes.POINTER(ctypes.c_char_p)
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_u64 = ctypes.c_uint64
_int = ctypes.c_int
_bool = ctypes.c_bool
_st = ctypes.c_int  # ect_status_t
_str = ctypes.c_char_p
_out = ctypes.POINTER(ctypes.c_void_p)
_outsz = ctypes.POINTER(ctypes.c_size_t)

# name: (restype, argtypes)
_PROTOTYPES = {
    "ect_abi_version": (ctypes.c_uint, []),
    "ect_version": (_str, []),
    "ect_has_p2p": (_bool, []),
    "ect_has_cuda": (_bool, []),
    "ect_last_error": (_str, []),
    "ect_status_str": (_str, [_int]),
    "ect_free": (None, [_vp]),
    "ect_config_check_json": (_st, [_str, _sz, _out]),
    "ect_geometry_json": (_st, [_str, _sz, _out]),
    "ect_engine_describe_json": (_st, [_str, _sz, _str, _sz, _out]),
    "ect_region_list_json": (_st, [_str, _out]),
    "ect_region_gc_json": (_st, [_str, _int, _out]),
    "ect_scheduler_create_json": (_st, [_str, _sz, _str, _sz, _out]),
    "ect_scheduler_destroy": (None, [_vp]),
    "ect_scheduler_shutdown": (None, [_vp]),
    "ect_scheduler_has_cache_item": (_bool, [_vp, _str]),
    "ect_scheduler_ensure_cache_available_json": (_st, [_vp, _str, _sz, ctypes.POINTER(_int)]),
    "ect_scheduler_update_state_after_alloc_json": (_st, [_vp, _str, _sz, _sz]),
    "ect_scheduler_request_finished_json": (_st, [_vp, _str, _sz, _out]),
    "ect_scheduler_build_connector_meta_bytes": (_st, [_vp, _out, _outsz]),
    "ect_scheduler_update_connector_output": (_st, [_vp, _vp, _sz]),
    "ect_scheduler_has_pending_push_work": (_bool, [_vp]),
    "ect_scheduler_take_unavailable_json": (_st, [_vp, _out]),
    "ect_scheduler_metrics_prometheus": (_st, [_vp, _out]),
    "ect_worker_create_json": (_st, [_str, _sz, _str, _sz, _out]),
    "ect_worker_destroy": (None, [_vp]),
    "ect_worker_is_save_rank": (_bool, [_vp]),
    "ect_worker_bind_metadata": (_st, [_vp, _vp, _sz]),
    "ect_worker_metadata_json": (_st, [_vp, _out]),
    "ect_worker_clear_metadata": (None, [_vp]),
    "ect_worker_start_load_arrays": (
        _st,
        [_vp, _sz, _c_char_pp, ctypes.POINTER(_u64), ctypes.POINTER(_u64), _u64],
    ),
    "ect_worker_save": (_st, [_vp, _str, _vp, _sz, _vp, ctypes.POINTER(_int)]),
    "ect_worker_get_finished": (_st, [_vp]),
    "ect_worker_take_report_bytes": (_st, [_vp, _out, _outsz, ctypes.POINTER(_int)]),
    "ect_worker_wait": (_st, [_vp]),
    "ect_worker_in_flight": (_sz, [_vp]),
    "ect_step_meta_json": (_st, [_vp, _sz, _u64, _out]),
    "ect_step_report_json": (_st, [_vp, _sz, _out]),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def _package_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def _candidates_env(env: dict) -> List[str]:
    path = env.get("ECTIER_LIBRARY", "")
    if not path:
        raise LookupError("not set")
    return [path]


def _candidates_beside(package_dir: str) -> List[str]:
    found = sorted(glob.glob(os.path.join(package_dir, "libectier.so*")))
    if not found:
        raise LookupError(f"no libectier.so* in {package_dir}")
    return found


def _candidates_pkg_config(env: dict) -> List[str]:
    try:
        out = subprocess.run(
            ["pkg-config", "--variable=libdir", "ectier"],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise LookupError(f"pkg-config did not run ({exc})") from None
    libdir = out.stdout.strip()
    if out.returncode != 0 or not libdir:
        raise LookupError("pkg-config knows no package ectier (is ectier.pc on PKG_CONFIG_PATH?)")
    found = [
        p
        for p in (os.path.join(libdir, n) for n in ("libectier.so.0", "libectier.so"))
        if os.path.exists(p)
    ]
    if not found:
        raise LookupError(f"pkg-config names {libdir}, which has no libectier.so")
    return found


def _candidates_loader() -> List[str]:
    return ["libectier.so.0", "libectier.so"]


def _open_checked(path: str) -> ctypes.CDLL:
    """Load path and check its ABI version; raises OSError or LookupError."""
    lib = ctypes.CDLL(path)
    try:
        fn = lib.ect_abi_version
    except AttributeError:
        raise LookupError(
            f"{path} has no ect_abi_version: not an ectier library of ABI {ABI_VERSION}"
        ) from None
    fn.restype = ctypes.c_uint
    fn.argtypes = []
    version = fn()
    if version != ABI_VERSION:
        raise LookupError(f"{path} has ABI version {version}; this package needs {ABI_VERSION}")
    return lib


def find_library(
    env: Optional[dict] = None,
    package_dir: Optional[str] = None,
    strategies: Sequence[str] = STRATEGIES,
) -> Tuple[ctypes.CDLL, str]:
    """Load the first working libectier (module docstring for the order).

    Args:
        env: the environment to read (default ``os.environ``).
        package_dir: where "beside the package" looks (default this package).
        strategies: which steps to try, a subset of :data:`STRATEGIES` (tests).

    Returns:
        The loaded library and a description of where it came from.

    Raises:
        LibraryError: nothing worked; the message says what each step gave.
    """
    env = dict(os.environ) if env is None else env
    package_dir = package_dir or _package_dir()
    steps: dict = {
        "ECTIER_LIBRARY": lambda: _candidates_env(env),
        "beside the package": lambda: _candidates_beside(package_dir),
        "pkg-config": lambda: _candidates_pkg_config(env),
        "loader search path": _candidates_loader,
    }
    report = []
    for i, name in enumerate(STRATEGIES):
        if name not in strategies:
            continue
        try:
            paths = steps[name]()
        except LookupError as exc:
            report.append(f"  {i + 1}. {name}: {exc}")
            continue
        problems = []
        for path in paths:
            try:
                lib = _open_checked(path)
            except (OSError, LookupError) as exc:
                problems.append(str(exc))
                continue
            if report and name != "ECTIER_LIBRARY" and env.get("ECTIER_LIBRARY"):
                warnings.warn(
                    f"ectier: ECTIER_LIBRARY={env['ECTIER_LIBRARY']} did not work; using {path}",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return lib, f"{path} (from {name})"
        report.append(f"  {i + 1}. {name}: " + "; ".join(problems))
    raise LibraryError(
        "cannot load libectier with ABI version "
        f"{ABI_VERSION}; tried, in order:\n" + "\n".join(report) + "\n"
        "Build it (cmake --build build) and set ECTIER_LIBRARY=/path/to/libectier.so, "
        "or install it (cmake --install build)."
    )


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryError(f"libectier lacks {name}: a library of another version?") from None
        fn.restype = restype
        fn.argtypes = argtypes


_origin = ""


def lib() -> ctypes.CDLL:
    """The loaded library (found and declared on the first call)."""
    global _lib, _origin
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            loaded, origin = find_library()
            _declare(loaded)
            _origin = origin
            _lib = loaded
    return _lib


def origin() -> str:
    """Where the loaded library came from ("" before the first use)."""
    return _origin


def last_error() -> str:
    """ectier's last-error message of this thread."""
    msg = lib().ect_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int) -> None:
    """Raise the exception for a failed call's status (0 does nothing)."""
    if status != 0:
        raise error_for(status, last_error())


def call_text(fn: Callable[..., int], *args: object) -> Optional[str]:
    """Call fn(*args, char **out), raise on failure, return the text (or
    None for a NULL result) after freeing it."""
    out = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(out)))
    return take_text(out)


def take_text(out: ctypes.c_void_p) -> Optional[str]:
    """Copy and free a C string that ectier handed over."""
    if not out.value:
        return None
    try:
        return ctypes.string_at(out.value).decode("utf-8")
    finally:
        lib().ect_free(out)


def take_bytes(out: ctypes.c_void_p, length: int) -> Optional[bytes]:
    """Copy and free a byte string that ectier handed over."""
    if not out.value:
        return None
    try:
        return ctypes.string_at(out.value, length)
    finally:
        lib().ect_free(out)


def encode(text: str) -> bytes:
    """Text for a C string argument (UTF-8; NUL bytes are refused)."""
    data = text.encode("utf-8")
    if b"\0" in data:
        from .errors import InvalidInputError

        raise InvalidInputError(f"a NUL character is not allowed in {text[:40]!r}")
    return data
