#!/usr/bin/env bash
# Run every test program of a build and print the closing count line.
#
#   tests/run-tests.sh BUILD_DIR [FILTER]
#
# Each program under BUILD_DIR/tests/ prints a result line per case and ends
# with "<prog>: N passed, N failed, N skipped" (tests/harness.c).  This script
# adds those up; a program that dies without its closing line counts as one
# failure.  It ends with "N passed, N failed, N skipped" and exits non-zero
# if anything failed.
set -u
build=${1:?usage: run-tests.sh BUILD_DIR [FILTER]}
filter=${2:-}
dir="$build/tests"
[ -d "$dir" ] || { echo "run-tests: no test programs under $dir (build first)" >&2; exit 2; }

total_pass=0 total_fail=0 total_skip=0
failed_progs=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for prog in $(find "$dir" -maxdepth 1 -type f -executable -name 'test_*' | sort); do
    name=$(basename "$prog")
    if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then continue; fi
    echo "== $name"
    # A whole-program timeout on top of the per-case one, in case a program
    # hangs outside its cases.
    timeout -k 5 1200 "$prog" >"$log" 2>&1
    rc=$?
    cat "$log"
    summary=$(grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -n 1)
    if [ -z "$summary" ]; then
        echo "FAIL $name (exited $rc without a summary line)"
        total_fail=$((total_fail + 1))
        failed_progs+=("$name")
        continue
    fi
    read -r p f s < <(echo "$summary" | sed -E 's/^[^ ]+: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
    if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
        failed_progs+=("$name")
        [ "$f" -eq 0 ] && total_fail=$((total_fail + 1))
    fi
done
if [ ${#failed_progs[@]} -ne 0 ]; then
    echo "failing programs: ${failed_progs[*]}"
fi
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
