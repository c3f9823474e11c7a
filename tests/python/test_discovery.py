"""Finding libectier: ECTIER_LIBRARY, beside the package, pkg-config, the
loader's path, in that order; a library of another ABI version is refused;
the error names every step."""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ectier import _lib
from ectier.errors import LibraryError

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")


@pytest.fixture(scope="module")
def build_lib(library) -> str:
    """The library under test (the build's, through ECTIER_LIBRARY)."""
    path = os.environ.get("ECTIER_LIBRARY", "")
    if not path or not os.path.exists(path):
        pytest.skip("ECTIER_LIBRARY does not name the build's library")
    return os.path.realpath(path)


def _compile(tmp_path, name: str, source: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in library")
    src = tmp_path / (name + ".c")
    src.write_text(source)
    out = tmp_path / (name + ".so")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return str(out)


@pytest.fixture
def other_abi(tmp_path) -> str:
    """A library that says it has ABI version 999."""
    return _compile(
        tmp_path, "libectier_abi999", "unsigned ect_abi_version(void) { return 999; }\n"
    )


def _no_installed_library() -> bool:
    return ctypes.util.find_library("ectier") is None


def test_the_environment_variable_comes_first(build_lib, tmp_path):
    beside = tmp_path / "pkg"
    beside.mkdir()
    os.symlink(build_lib, beside / "libectier.so.0")
    lib, origin = _lib.find_library(env={"ECTIER_LIBRARY": build_lib}, package_dir=str(beside))
    assert origin == f"{build_lib} (from ECTIER_LIBRARY)"
    assert lib.ect_abi_version() == _lib.ABI_VERSION


def test_a_library_beside_the_package(build_lib, tmp_path):
    os.symlink(build_lib, tmp_path / "libectier.so.0")
    _, origin = _lib.find_library(
        env={}, package_dir=str(tmp_path), strategies=("beside the package",)
    )
    assert origin.endswith("libectier.so.0 (from beside the package)")


def test_pkg_config_names_the_libdir(build_lib, tmp_path):
    if shutil.which("pkg-config") is None:
        pytest.skip("no pkg-config")
    libdir = os.path.dirname(build_lib)
    (tmp_path / "ectier.pc").write_text(
        f"libdir={libdir}\nName: ectier\nDescription: test\nVersion: 0.1.0\n"
        "Libs: -L${libdir} -lectier\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "PKG_CONFIG_LIBDIR": str(tmp_path)}
    _, origin = _lib.find_library(env=env, package_dir=str(tmp_path), strategies=("pkg-config",))
    assert origin.startswith(libdir) and origin.endswith("(from pkg-config)")


def test_the_loader_search_path_last(build_lib, tmp_path):
    env = dict(os.environ)
    env.pop("ECTIER_LIBRARY", None)
    env.update(
        LD_LIBRARY_PATH=os.path.dirname(build_lib),
        PKG_CONFIG_LIBDIR=str(tmp_path),
        PYTHONPATH=PYTHON_DIR,
    )
    out = subprocess.run(
        [sys.executable, "-c", "import ectier; print(ectier.library_path())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip().endswith("(from loader search path)")


def test_another_abi_version_is_refused_and_every_step_is_named(other_abi, tmp_path):
    env = {
        "ECTIER_LIBRARY": other_abi,
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "PKG_CONFIG_LIBDIR": str(tmp_path),
    }
    # In this process libectier is loaded already, so the loader would find
    # it by its soname: the loader step is checked in a fresh process below.
    steps = _lib.STRATEGIES[:3]
    with pytest.raises(LibraryError) as info:
        _lib.find_library(env=env, package_dir=str(tmp_path), strategies=steps)
    text = str(info.value)
    assert f"{other_abi} has ABI version 999; this package needs {_lib.ABI_VERSION}" in text
    assert f"no libectier.so* in {tmp_path}" in text
    assert "pkg-config knows no package ectier" in text
    for step in steps:
        assert step in text
    assert isinstance(info.value, ImportError)


def test_a_library_without_the_abi_symbol_is_refused(tmp_path):
    fake = _compile(tmp_path, "libnot", "int something(void) { return 1; }\n")
    with pytest.raises(LibraryError, match="has no ect_abi_version"):
        _lib.find_library(
            env={"ECTIER_LIBRARY": fake}, package_dir=str(tmp_path), strategies=("ECTIER_LIBRARY",)
        )
    with pytest.raises(LibraryError, match="cannot open|No such file"):
        _lib.find_library(
            env={"ECTIER_LIBRARY": str(tmp_path / "missing.so")},
            package_dir=str(tmp_path),
            strategies=("ECTIER_LIBRARY",),
        )


def test_a_refused_environment_library_warns_when_a_later_step_works(
    build_lib, other_abi, tmp_path
):
    os.symlink(build_lib, tmp_path / "libectier.so")
    with pytest.warns(RuntimeWarning, match="ECTIER_LIBRARY"):
        _, origin = _lib.find_library(
            env={"ECTIER_LIBRARY": other_abi},
            package_dir=str(tmp_path),
            strategies=("ECTIER_LIBRARY", "beside the package"),
        )
    assert origin.endswith("(from beside the package)")


def test_importing_needs_no_library_and_first_use_raises(other_abi, tmp_path):
    if not _no_installed_library():
        pytest.skip("an installed libectier is on the loader's path")
    code = textwrap.dedent(
        """
        import ectier, ectier.vllm
        try:
            ectier.abi_version()
        except ectier.LibraryError as e:
            print("refused:", e)
        """
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "ECTIER_LIBRARY": other_abi,
        "PKG_CONFIG_LIBDIR": str(tmp_path),
        "PYTHONPATH": PYTHON_DIR,
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert f"refused: cannot load libectier with ABI version {_lib.ABI_VERSION}" in out.stdout
    assert "ABI version 999" in out.stdout
    for i, step in enumerate(_lib.STRATEGIES):
        assert f"{i + 1}. {step}:" in out.stdout
    assert "4. loader search path: libectier.so.0: cannot open shared object file" in out.stdout
