#!/usr/bin/env bash
# Compare the working tree with an earlier revision on the lent GPU machine,
# in one device call: build the ectier tool of both there, then run
# scripts/bench-ab.py on each bench named (both builds, alternating, each
# figure's median and range per build).  A figure moves by up to 0.3 of its
# ceiling from run to run, and the GPU hosts differ from each other by more
# than most changes do, so builds are only compared within one call.
#
#   scripts/device-ab.sh REV BENCH[:RUNS]...   e.g. device-ab.sh HEAD~3 step:2 copy:2
#
# REV is any git revision (the base: "base" in the tables; the working
# tree is "new").  Carry .device/debs (and .device/ucx, for `bench
# xport`'s ucx_perftest rows), as for scripts/device-build.sh, which both
# builds use (TARGET=ectier_cli, --build-only).  Environment: OUT (required:
# ab-BENCH.txt per bench, times.txt, the builds' logs, and every run's
# output in ab-runs.tgz), DEADLINE (seconds for the whole script, default
# 560: a bench that would run past it is cut, and times.txt says so), JOBS
# (per build; default half the CPUs, the two builds run at once).  Exits
# non-zero if a build failed or a bench-ab run did not finish.
set -uo pipefail

case "${1:-}" in
-h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
    ;;
esac
if [ $# -lt 2 ]; then
    echo "device-ab: usage: device-ab.sh REV BENCH[:RUNS]... (try --help)" >&2
    exit 2
fi
: "${OUT:?device-ab: set OUT to the directory for the results}"
rev=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
deadline=${DEADLINE:-560}
left() { echo $((deadline - ($(date +%s) - start))); }
jobs=${JOBS:-$((($(nproc) + 1) / 2))}
mkdir -p "$OUT"
tmp=$(mktemp -d /tmp/device-ab.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
base_tree=$tmp/base bin=$tmp/bin runs=$tmp/runs ucx=$tmp/ucx
mkdir -p "$base_tree" "$bin" "$runs" "$ucx"

if ! git archive "$rev" | tar -x -C "$base_tree"; then
    echo "device-ab: cannot take revision '$rev' from git here" >&2
    exit 2
fi
mkdir -p "$base_tree/.device"
cp -r .device/debs "$base_tree/.device/" 2>/dev/null
JOBS=$jobs TARGET=ectier_cli scripts/device-build.sh --build-only >"$OUT/build-new.log" 2>&1 &
new_pid=$!
(cd "$base_tree" && JOBS=$jobs TARGET=ectier_cli scripts/device-build.sh --build-only) \
    >"$OUT/build-base.log" 2>&1
base_rc=$?
wait "$new_pid"
new_rc=$?
echo "builds: new rc=$new_rc, base ($rev, $(git rev-parse --short "$rev")) rc=$base_rc," \
    "$(($(date +%s) - start)) s" | tee "$OUT/times.txt"
[ "$new_rc" -eq 0 ] && [ "$base_rc" -eq 0 ] || exit 1
cp "${BUILD:-build-gpu}/ectier" "$bin/new"
cp "$base_tree/${BUILD:-build-gpu}/ectier" "$bin/base"

for deb in .device/ucx/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" "$ucx"; done
rc=0
for spec in "$@"; do
    bench=${spec%%:*}
    n=${spec#"$bench"}
    n=${n#:}
    l=$(left)
    if [ "$l" -lt 60 ]; then
        echo "$spec skipped: $l s left" | tee -a "$OUT/times.txt"
        continue
    fi
    t0=$(date +%s)
    PATH=$ucx/usr/bin:$PATH LD_LIBRARY_PATH=$ucx/usr/lib/x86_64-linux-gnu \
        timeout $((l - 15)) python3 scripts/bench-ab.py --runs "${n:-2}" --out "$runs/$bench" \
        new="$bin/new" base="$bin/base" -- "$bench" >"$OUT/ab-$bench.txt" 2>&1
    brc=$?
    [ "$brc" -eq 0 ] || rc=1
    echo "$spec rc=$brc in $(($(date +%s) - t0)) s" | tee -a "$OUT/times.txt"
done
tar -czf "$OUT/ab-runs.tgz" -C "$runs" .
exit "$rc"
