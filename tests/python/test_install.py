"""The two ways to install the package: `pip install ./python` (no network,
nothing fetched for the build) and the CMake install, which places the
package where the system Python finds it with the library beside it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from ectier import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECK = "import ectier, ectier.vllm; print(ectier.library_path()); print(ectier.abi_version())"


@pytest.fixture(scope="module")
def build_dir(library) -> str:
    lib = os.environ.get("ECTIER_LIBRARY", "")
    build = os.path.dirname(os.path.realpath(lib)) if lib else ""
    if not build or not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        pytest.skip("ECTIER_LIBRARY does not point into a CMake build directory")
    return build


def _clean_env(**more: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ECTIER_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")
    }
    env.update(more)
    return env


def test_pip_installs_offline_into_a_venv(build_dir, tmp_path):
    venv = tmp_path / "venv"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300
        )
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"no venv with pip here (python3-venv): {exc.stderr.decode()[-200:]}")
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    # PIP_NO_INDEX: any attempt to fetch a package fails the install.
    env = _clean_env(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run(
        pip + ["install", "-q", os.path.join(REPO, "python")],
        check=True,
        env=env,
        timeout=300,
        cwd=str(tmp_path),
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", CHECK],
        check=True,
        capture_output=True,
        text=True,
        env=_clean_env(ECTIER_LIBRARY=os.path.join(build_dir, "libectier.so")),
        cwd=str(tmp_path),
    )
    assert "(from ECTIER_LIBRARY)" in out.stdout and out.stdout.split()[-1] == str(_lib.ABI_VERSION)
    subprocess.run(
        pip
        + ["wheel", "-q", "--no-deps", "-w", str(tmp_path / "w"), os.path.join(REPO, "python")],
        check=True,
        env=env,
        timeout=300,
        cwd=str(tmp_path),
    )
    (wheel,) = os.listdir(tmp_path / "w")
    assert re.fullmatch(r"ectier-\d+\.\d+\.\d+-py3-none-any\.whl", wheel)
    names = zipfile.ZipFile(tmp_path / "w" / wheel).namelist()
    assert "ectier/vllm.py" in names and "ectier/_lib.py" in names
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests")]


def test_cmake_install_puts_the_package_beside_the_library(build_dir, tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(
        ["cmake", "--install", build_dir, "--prefix", str(prefix)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    cache = open(os.path.join(build_dir, "CMakeCache.txt")).read()
    m = re.search(r"^ECT_PYTHON_INSTALL_DIR:STRING=(.*)$", cache, re.M)
    assert m, "the build did not configure a Python package directory"
    pkg_dir = os.path.join(str(prefix), m.group(1))
    assert os.path.islink(os.path.join(pkg_dir, "ectier", "libectier.so.0"))
    empty = tmp_path / "no-pc"
    empty.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", CHECK],
        check=True,
        capture_output=True,
        text=True,
        env=_clean_env(PYTHONPATH=pkg_dir, PKG_CONFIG_LIBDIR=str(empty)),
        cwd=str(tmp_path),
    )
    assert (
        out.stdout.splitlines()[0]
        == os.path.join(pkg_dir, "ectier", "libectier.so.0") + " (from beside the package)"
    )
    # With the configured prefix the directory is one the system Python reads.
    prefix_m = re.search(r"^CMAKE_INSTALL_PREFIX:PATH=(.*)$", cache, re.M)
    if prefix_m and prefix_m.group(1) == "/usr/local" and os.path.exists("/usr/bin/python3"):
        path = subprocess.run(
            ["/usr/bin/python3", "-c", "import sys; print('\\n'.join(sys.path))"],
            capture_output=True,
            text=True,
            check=True,
            env=_clean_env(),
        ).stdout.split()
        assert os.path.join("/usr/local", m.group(1)) in path
    shutil.rmtree(prefix)
