#!/usr/bin/env bash
# One call on the lent GPU machine: build with CUDA (scripts/device-build.sh:
# the GPU tests and `ectier bench cuda`), then run CPU and P2P benchmarks
# with what is left of a time budget, so that a single device call brings
# back every figure.  Carry .device/debs (with the ZeroMQ and msgpack-c
# packages, for the P2P benches) and .device/ucx (for `bench xport`'s
# ucx_perftest rows); device-build.sh says how to fetch both.
#
#   scripts/device-bench.sh [BENCH...]   default: step xport copy cache session region
#
# Environment: DEADLINE (seconds for the whole script, default 560: a
# device call may run 600), BUILD (as device-build.sh's, default
# build-gpu), OUT (required: where every log goes; the
# device tool's $OUT).  A bench that the deadline would cut is skipped,
# and times.txt says so.  Exits non-zero if the build, a GPU test or a
# bench failed.
set -uo pipefail

case "${1:-}" in
-h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
    ;;
esac
: "${OUT:?device-bench: set OUT to the directory for the logs}"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
deadline=${DEADLINE:-560}
left() { echo $((deadline - ($(date +%s) - start))); }
mkdir -p "$OUT"
lscpu >"$OUT/lscpu.txt" 2>&1

rc=0
budget=$(($(left) - 30))
[ "$budget" -ge 60 ] || { echo "device-bench: DEADLINE of $deadline s leaves no time to build" >&2; exit 2; }
OUT=$OUT timeout "$budget" scripts/device-build.sh >"$OUT/device-build.out" 2>&1 || rc=1
echo "device-build rc=$rc after $(($(date +%s) - start)) s" | tee -a "$OUT/times.txt"
build=${BUILD:-build-gpu}
[ -x "$build/ectier" ] || exit 1

ucx=/tmp/device-bench-ucx
for deb in .device/ucx/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" "$ucx"; done
benches=("$@")
[ ${#benches[@]} -eq 0 ] && benches=(step xport copy cache session region)
for b in "${benches[@]}"; do
    l=$(left)
    if [ "$l" -lt 40 ]; then
        echo "bench $b skipped: $l s left" | tee -a "$OUT/times.txt"
        continue
    fi
    t0=$(date +%s)
    PATH=$ucx/usr/bin:$PATH LD_LIBRARY_PATH=$ucx/usr/lib/x86_64-linux-gnu \
        timeout $((l - 15)) "$build/ectier" bench "$b" >"$OUT/bench-$b.txt" 2>&1
    brc=$?
    [ "$brc" -eq 0 ] || rc=1
    echo "bench $b rc=$brc in $(($(date +%s) - t0)) s" | tee -a "$OUT/times.txt"
done
exit "$rc"
