#!/usr/bin/env bash
# Installs what is missing, builds Release, and runs a job (configs/seed.json by default) in the
# foreground with progress. Extra arguments after the config go to `baton run`.
set -euo pipefail
source "$(dirname "$0")/scripts/setup.sh"
BATON_BUILD_TARGETS="baton baton-worker" baton_build
config="${1:-$BATON_ROOT/configs/seed.json}"
shift || true
exec "$BATON_BUILD_DIR/supervisor/baton" run "$config" "$@"
