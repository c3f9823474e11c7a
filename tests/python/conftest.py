"""pytest set-up for the Python tests: the package and the library under
test, and a leak check around every test.

The library is the build's (``ECTIER_LIBRARY``, which tests/run-tests.sh
sets to ``BUILD/libectier.so``); without it the tests that need it are
skipped with the reason.  Every test must leave no ectier region of its own
in /dev/shm and no child process behind.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)


def _library_available() -> str:
    try:
        import ectier

        ectier.abi_version()
        return ""
    except Exception as exc:  # LibraryError, or a broken build
        return str(exc)


@pytest.fixture(scope="session")
def library() -> None:
    """Skip when no library can be loaded."""
    problem = _library_available()
    if problem:
        pytest.skip(f"libectier not loadable: {problem}")


@pytest.fixture
def region_dir(library: None):
    """A private directory under /dev/shm for regions; it must be empty
    (every region removed) when the test ends."""
    path = tempfile.mkdtemp(prefix="ectt_py_", dir="/dev/shm")
    yield path
    left = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = os.listdir(path)
        if not left:
            break
        time.sleep(0.05)  # a reaper may still be on its way out
    shutil.rmtree(path, ignore_errors=True)
    assert not left, f"regions left behind: {left}"


@pytest.fixture
def instance_id() -> str:
    """A unique instance id (names the region)."""
    return f"ectt-py-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def shm_instance(library: None, instance_id: str):
    """An instance id for regions directly in /dev/shm (the same-host P2P
    path maps a producer's region only from there); every region whose name
    starts with ``ectier_<id>`` must be gone when the test ends."""
    yield instance_id
    prefix = f"ectier_{instance_id}"
    left = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]
        if not left:
            break
        time.sleep(0.05)
    for name in left:
        os.unlink(os.path.join("/dev/shm", name))
    assert not left, f"regions left behind: {left}"


@pytest.fixture(autouse=True)
def no_leftover_children():
    """No process a test started may outlive it."""
    yield
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = multiprocessing.active_children()
    for p in alive:
        p.terminate()
    assert not alive, f"child processes left running: {alive}"
