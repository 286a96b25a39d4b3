#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest, then fuzzes each
# libFuzzer harness for 60 s (scripts/fuzz.sh; clang build in build-fuzz/).
# Exits non-zero on any failure, including an input a fuzzer finds.
# Extra arguments go to ctest (e.g. -L unit, -R checkpoint) and skip the fuzz stage, which is for
# whole runs. BATON_FUZZ_SECONDS sets the fuzzing time per harness; 0 skips it.
# --windows (first argument): the MinGW-w64 cross build, tested under wine (scripts/windows.sh).
set -euo pipefail
if [[ "${1:-}" == --windows ]]; then
  shift
  exec "$(dirname "$0")/scripts/windows.sh" "$@"
fi
source "$(dirname "$0")/scripts/setup.sh"
baton_build
(cd "$BATON_BUILD_DIR" && ctest --output-on-failure --parallel "$(nproc)" "$@")

fuzz_seconds="${BATON_FUZZ_SECONDS:-60}"
if [[ $# -eq 0 && $fuzz_seconds != 0 ]]; then
  "$BATON_ROOT/scripts/fuzz.sh" "$fuzz_seconds"
fi
