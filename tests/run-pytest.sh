#!/usr/bin/env bash
# The Python tests (tests/python) as one CTest test.
#
#   tests/run-pytest.sh BUILD_DIR
#
# Runs pytest against BUILD_DIR's libectier (ECTIER_LIBRARY), with
# ECT_TEST_PYTHON (default /usr/bin/python3).  Exits 77, the skip code, when
# that Python has no pytest or when BUILD_DIR is a sanitizer build (see
# run-tests.sh for why those leave the Python tests out); else pytest's
# status.  run-tests.sh runs the Python tests through this script too.
set -u
build=$(cd "${1:?usage: run-pytest.sh BUILD_DIR}" && pwd)
python=${ECT_TEST_PYTHON:-/usr/bin/python3}
root=$(cd "$(dirname "$0")/.." && pwd)
sanitize=$(sed -n 's/^ECT_SANITIZE:STRING=//p' "$build/CMakeCache.txt" 2>/dev/null)
if [ -n "$sanitize" ]; then
    echo "skip: python tests are left out of sanitizer builds ($sanitize)"
    exit 77
fi
if ! "$python" -c 'import pytest' 2>/dev/null; then
    echo "skip: $python has no pytest (run scripts/install-deps.sh)"
    exit 77
fi
# pytest keeps its last runs' temporary directories; this run's go with it.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ectier-pytest.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
ECTIER_LIBRARY=$build/libectier.so "$python" -m pytest -q -rs -p no:cacheprovider \
    --basetemp="$tmp" "$root/tests/python"
