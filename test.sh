#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -L unit, -R checkpoint).
set -euo pipefail
source "$(dirname "$0")/scripts/setup.sh"
baton_build
cd "$BATON_BUILD_DIR"
ctest --output-on-failure --parallel "$(nproc)" "$@"
