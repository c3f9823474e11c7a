"""A PEP 517 build backend for the pure-Python ectier package, written with
the standard library only, so that ``pip install ./python`` needs no network
and no build-time package (``requires = []``).

It builds a wheel of ``ectier/*.py`` (plus any ``libectier.so*`` placed
beside the package, which makes the wheel platform-specific), an sdist of
the package directory, and an editable wheel (a ``.pth`` file naming this
directory).  The version is ``__version__`` in ``ectier/__init__.py``.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import io
import os
import platform
import re
import tarfile
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "ectier"
SUMMARY = "CPU-memory tier and peer-to-peer transfer for an LLM server's encoder cache"


def _version() -> str:
    with open(os.path.join(ROOT, NAME, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if m is None:
        raise RuntimeError("ectier/__init__.py has no __version__")
    return m.group(1)


def _dist_info() -> str:
    return f"{NAME}-{_version()}.dist-info"


def _metadata() -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {_version()}\n"
        f"Summary: {SUMMARY}\n"
        "Requires-Python: >=3.10\n"
    )


def _package_files() -> Tuple[List[str], bool]:
    """(paths relative to ROOT, whether a library is bundled)."""
    files = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, NAME, "*.py")))
    found = glob.glob(os.path.join(ROOT, NAME, "libectier.so*"))
    libs = sorted(os.path.relpath(p, ROOT) for p in found)
    return files + libs, bool(libs)


def _tag(platform_specific: bool) -> str:
    if not platform_specific:
        return "py3-none-any"
    return f"py3-none-linux_{platform.machine()}"


def _wheel_text(tag: str, purelib: bool) -> str:
    return (
        "Wheel-Version: 1.0\n"
        "Generator: ectier_build\n"
        f"Root-Is-Purelib: {'true' if purelib else 'false'}\n"
        f"Tag: {tag}\n"
    )


def _write_wheel(directory: str, entries: Dict[str, bytes], tag: str, purelib: bool) -> str:
    name = f"{NAME}-{_version()}-{tag}.whl"
    info = _dist_info()
    entries = dict(entries)
    entries[f"{info}/METADATA"] = _metadata().encode()
    entries[f"{info}/WHEEL"] = _wheel_text(tag, purelib).encode()
    record = io.StringIO()
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{path},sha256={digest},{len(data)}\n")
    record.write(f"{info}/RECORD,,\n")
    entries[f"{info}/RECORD"] = record.getvalue().encode()
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries.items():
            zf.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return name


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[dict] = None
) -> str:
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[dict] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    files, has_lib = _package_files()
    entries = {}
    for rel in files:
        with open(os.path.join(ROOT, rel), "rb") as f:
            entries[rel.replace(os.sep, "/")] = f.read()
    return _write_wheel(wheel_directory, entries, _tag(has_lib), purelib=not has_lib)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[dict] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    pth = {f"_{NAME}_editable.pth": (ROOT + "\n").encode()}
    return _write_wheel(wheel_directory, pth, "py3-none-any", True)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    base = f"{NAME}-{_version()}"
    name = base + ".tar.gz"
    files, _ = _package_files()
    files += ["pyproject.toml", os.path.join("_build", "ectier_build.py")]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tf:
        for rel in files:
            tf.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata().encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tf.addfile(ti, io.BytesIO(pkg_info))
    return name
