#!/usr/bin/env bash
# The Python connector's GPU checks on the lent GPU machine: build
# libectier with CUDA (scripts/device-build.sh --build-only, which needs the
# Debian packages carried in .device/debs: see that script), then run
# tests/python/gpu_checks.py with that library:
#   - the engine (a scheduler process and two tensor-parallel worker
#     processes) with the encoder cache in CUDA memory, worker steps on a
#     non-default CUDA stream, every reload compared with a fresh encode;
#   - fetch versus re-encode: a Qwen2-VL-7B-shaped vision tower (bf16)
#     encoding a 1024-token image against reloading its output from the CPU
#     tier into the GPU cache through ECTierConnector.
# The GPU machine's python3 has torch with CUDA and nothing else this needs
# (the checks use the standard library and torch only).
#
#   scripts/device-python.sh            build, then run both checks
#   scripts/device-python.sh bench      build, then only the benchmark
#
# Environment: BUILD (default build-gpu), PYTHON (default python3), OUT (if
# set, device-build.log, build.log, nvidia-smi.txt and python-gpu.log are
# written there; else the build's log is BUILD/device-build.log).
# Exits non-zero if the build or a check failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD:-build-gpu}
python=${PYTHON:-python3}
out=${OUT:-}
if [ -n "$out" ]; then mkdir -p "$out"; fi
buildlog=${out:-$root/$build}/device-build.log
mkdir -p "$(dirname "$buildlog")"
if ! BUILD=$build scripts/device-build.sh --build-only >"$buildlog" 2>&1; then
    tail -n 60 "$buildlog" >&2
    echo "device-python: the build failed (log: $buildlog)" >&2
    exit 1
fi
log() {
    if [ -n "$out" ]; then tee "$out/$1"; else cat; fi
}
if command -v nvidia-smi >/dev/null; then
    nvidia-smi 2>&1 | log nvidia-smi.txt >/dev/null || true
fi
export ECTIER_LIBRARY="$root/$build/libectier.so"
set +e
"$python" tests/python/gpu_checks.py --device cuda "$@" 2>&1 | log python-gpu.log
rc=${PIPESTATUS[0]}
exit "$rc"
