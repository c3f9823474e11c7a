"""The GPU checks (gpu_checks.py): with a CUDA device, the engine with CUDA
tensors on the engine's stream and the fetch-versus-encode benchmark; on
any machine, the same script on the CPU with a tiny tower, so the script
itself is tested where CI runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_checks.py")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=900
    )


def test_gpu_script_runs_on_the_cpu(library):
    out = _run("--device", "cpu", "--small")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "engine check: PASS" in out.stdout
    assert "reloads exact: True; regions left: []" in out.stdout
    assert "ratio encode / reload:" in out.stdout


def test_gpu_engine_and_fetch_versus_encode(library):
    import ectier

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not ectier.has_cuda():
        pytest.skip("libectier built without CUDA")
    out = _run("--device", "cuda")
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gpu_checks: all passed" in out.stdout
