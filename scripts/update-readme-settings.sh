#!/usr/bin/env bash
# Regenerate README.md's settings section from the settings table.
#
#   scripts/update-readme-settings.sh [BUILD_DIR]     (default: build)
#
# Replaces everything between the lines `<!-- settings:begin -->` and
# `<!-- settings:end -->` with the output of `ectier settings`.
# tests/unit/test_config.c fails while the two differ.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
readme="$root/README.md"
gen=$(mktemp)
out=$(mktemp)
trap 'rm -f "$gen" "$out"' EXIT
"$build/ectier" settings >"$gen"
grep -qx '<!-- settings:begin -->' "$readme" || { echo "README.md has no settings:begin line" >&2; exit 1; }
grep -qx '<!-- settings:end -->' "$readme" || { echo "README.md has no settings:end line" >&2; exit 1; }
awk -v gen="$gen" '
    $0 == "<!-- settings:begin -->" { print; while ((getline line < gen) > 0) print line; skip = 1; next }
    $0 == "<!-- settings:end -->" { skip = 0 }
    !skip { print }
' "$readme" >"$out"
cat "$out" >"$readme"
