#!/usr/bin/env bash
# Run every test program of a build and print the closing count line.
#
#   tests/run-tests.sh BUILD_DIR [FILTER]
#
# Each program under BUILD_DIR/tests/ prints a result line per case and ends
# with "<prog>: N passed, N failed, N skipped" (tests/harness.c).  This script
# adds those up; a program that dies without its closing line counts as one
# failure.  Then the Python tests (tests/python, pytest) run against this
# build's libectier (ECTIER_LIBRARY=BUILD_DIR/libectier.so) when FILTER is
# empty or part of "python"; their counts join the total.  They are left
# out of sanitizer builds (see below).  It ends with
# "N passed, N failed, N skipped" and exits non-zero if anything failed.
#
# Environment: ECT_TEST_PYTHON (default /usr/bin/python3, which has
# Debian's python3-pytest and python3-torch).
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
    # 77: every case of the program was skipped (tests/harness.c), not a failure.
    if [ "$f" -ne 0 ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; }; then
        failed_progs+=("$name")
        [ "$f" -eq 0 ] && total_fail=$((total_fail + 1))
    fi
done

# ---- Python ------------------------------------------------------------------
# Not in sanitizer builds: an instrumented libectier in an uninstrumented
# Python needs the sanitizer runtime preloaded into every process (and
# child) the tests start, and torch's and Python's own allocations then
# drown the report; the C paths the binding drives are the ones the C tests
# run under the sanitizers.
# (tests/run-pytest.sh decides, and runs them.)
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$filter" ] || [[ "python" == *"$filter"* ]]; then
    echo "== python (pytest)"
    timeout -k 5 1200 "$root/tests/run-pytest.sh" "$build" >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 77 ]; then
        echo "SKIP python tests ($(sed -n 's/^skip: //p' "$log" | head -n 1))"
        total_skip=$((total_skip + 1))
    else
        cat "$log"
        last=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log" | tail -n 1)
        count() { echo "$last" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
        p=$(count passed) f=$(count failed) e=$(count error) s=$(count skipped)
        total_pass=$((total_pass + p)); total_skip=$((total_skip + s))
        total_fail=$((total_fail + f + e))
        if [ -z "$last" ] || [ "$rc" -ne 0 ]; then
            failed_progs+=("python")
            [ $((f + e)) -eq 0 ] && total_fail=$((total_fail + 1))
        fi
    fi
fi

if [ ${#failed_progs[@]} -ne 0 ]; then
    echo "failing programs: ${failed_progs[*]}"
fi
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
