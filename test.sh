#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -L unit, -R checkpoint).
# --windows (first argument): the MinGW-w64 cross build, tested under wine (scripts/windows.sh).
set -euo pipefail
if [[ "${1:-}" == --windows ]]; then
  shift
  exec "$(dirname "$0")/scripts/windows.sh" "$@"
fi
source "$(dirname "$0")/scripts/setup.sh"
baton_build
cd "$BATON_BUILD_DIR"
ctest --output-on-failure --parallel "$(nproc)" "$@"
