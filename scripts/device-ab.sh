#!/usr/bin/env bash
# Compare the working tree with an earlier revision on the lent GPU machine,
# in one device call: build the ectier tool of both there, then run
# scripts/bench-ab.py on each bench named (both builds, alternating, each
# figure's median and range per build).  A figure moves by up to 0.3 of its
# ceiling from run to run, and the GPU hosts differ from each other by more
# than most changes do, so builds are only compared within one call.
#
#   scripts/device-ab.sh --base REV           here: put REV's tree in .device/ab-base
#   scripts/device-ab.sh BENCH[:RUNS]...      there: e.g. step:2 copy:2 (RUNS default 2)
#
# The base travels as a tree because the device machine's copy of the
# repository's history is not this checkout's (a revision named there can
# resolve to another commit).  --base REV writes `git archive REV` to
# .device/ab-base (git-ignored) with its commit in .device/ab-base/.ab-rev; carry
# .device/ab-base and .device/debs (and .device/ucx, for `bench xport`'s
# ucx_perftest rows), as for scripts/device-build.sh, which both builds use
# (TARGET=ectier_cli, --build-only).  The working tree is "new" in the
# tables, the base "base".  Environment: OUT (required: ab-BENCH.txt per
# bench, times.txt, the builds' logs, and every run's output in
# ab-runs.tgz), DEADLINE (seconds for the whole script, default 560: a bench
# that would run past it is cut, and times.txt says so), JOBS (per build;
# default half the CPUs, the two builds run at once).  Exits non-zero if a
# build failed or a bench-ab run did not finish.
set -uo pipefail

case "${1:-}" in
-h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
    ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${1:-}" = --base ]; then
    [ $# -eq 2 ] || { echo "device-ab: usage: device-ab.sh --base REV" >&2; exit 2; }
    commit=$(git rev-parse --verify --quiet "$2^{commit}") ||
        { echo "device-ab: '$2' is no revision here" >&2; exit 2; }
    rm -rf .device/ab-base
    mkdir -p .device/ab-base
    git archive "$commit" | tar -x -C .device/ab-base || exit 1
    git log -1 --format='%h %s' "$commit" >.device/ab-base/.ab-rev
    echo "device-ab: .device/ab-base holds $(cat .device/ab-base/.ab-rev); carry .device/ab-base" \
        "and .device/debs"
    exit 0
fi
if [ $# -lt 1 ]; then
    echo "device-ab: usage: device-ab.sh BENCH[:RUNS]... (try --help)" >&2
    exit 2
fi
: "${OUT:?device-ab: set OUT to the directory for the results}"
if [ ! -f .device/ab-base/CMakeLists.txt ] || [ ! -f .device/ab-base/.ab-rev ]; then
    echo "device-ab: no base tree: run 'scripts/device-ab.sh --base REV' here first, and" \
        "carry .device/ab-base" >&2
    exit 2
fi
start=$(date +%s)
deadline=${DEADLINE:-560}
left() { echo $((deadline - ($(date +%s) - start))); }
jobs=${JOBS:-$((($(nproc) + 1) / 2))}
mkdir -p "$OUT"
tmp=$(mktemp -d /tmp/device-ab.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
base_tree=$tmp/base bin=$tmp/bin runs=$tmp/runs ucx=$tmp/ucx
mkdir -p "$base_tree" "$bin" "$runs" "$ucx"

cp -r .device/ab-base/. "$base_tree/"
mkdir -p "$base_tree/.device"
cp -r .device/debs "$base_tree/.device/" 2>/dev/null
JOBS=$jobs TARGET=ectier_cli scripts/device-build.sh --build-only >"$OUT/build-new.log" 2>&1 &
new_pid=$!
(cd "$base_tree" && JOBS=$jobs TARGET=ectier_cli scripts/device-build.sh --build-only) \
    >"$OUT/build-base.log" 2>&1
base_rc=$?
wait "$new_pid"
new_rc=$?
echo "builds: new rc=$new_rc, base ($(cat .device/ab-base/.ab-rev)) rc=$base_rc," \
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
