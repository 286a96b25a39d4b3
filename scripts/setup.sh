#!/usr/bin/env bash
# Shared set-up for run.sh and test.sh: install the Debian 12 packages that are missing, then
# configure and build into build/ (incrementally). Sourced, not run.
set -euo pipefail

BATON_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BATON_BUILD_DIR="${BATON_BUILD_DIR:-$BATON_ROOT/build}"

# Boost 1.81 (not the default 1.74): Process v2 exists only from 1.80. Never add libboost-dev here:
# it would swap 1.81 back out.
BATON_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost1.81-dev libboost-filesystem1.81-dev libboost-system1.81-dev
  nlohmann-json3-dev libeigen3-dev catch2 libsystemd-dev libxxhash-dev libcli11-dev
  python3
  python3-pytest python3-xxhash python3-numpy python3-torch  # tests/python, the PyTorch example
  # The BLAS our users' torch and numpy run on. It starts a thread pool when torch is imported
  # (worker.preload must tell that pool, which a fork stops, from TensorFlow's threads), and
  # reference BLAS would make every torch test and worker_bench's torch baseline ~10x slower.
  libopenblas0-pthread
  curl  # the control-socket tests talk to the daemon as a user would
  systemd  # systemd-analyze, for the unit's verify test; nothing here needs systemd as PID 1
  lintian man-db  # the package test runs lintian on the .deb; the docs test renders the man pages
  zsh  # `zsh -n` on the generated completion (bash is already there)
  prometheus  # promtool checks /metrics; the Prometheus test scrapes a daemon with the real server
  chromium  # the dashboard test drives it headless (tests/integration/dashboard_test.cpp)
)
# node and npm: the build embeds uPlot from web/node_modules, and the dashboard test runs
# playwright-core with node. Debian's packages only where no node is installed yet: its `npm`
# depends on Debian's nodejs and would replace another build of node (NodeSource's, say).
command -v node >/dev/null 2>&1 || BATON_PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || BATON_PACKAGES+=(npm)

baton_install_packages() {
  local missing=()
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$p")
    fi
  done
  ((${#missing[@]})) || return 0
  echo "baton: installing missing packages: ${missing[*]}" >&2
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
}

# web/node_modules from web/package-lock.json (uPlot, playwright-core), exactly as pinned: `npm ci`,
# only when it is missing or older than the lockfile, quietly. npm keeps its own copy of the
# lockfile in node_modules/.package-lock.json, written at each install.
baton_web_deps() {
  local web="$BATON_ROOT/web"
  local stamp="$web/node_modules/.package-lock.json"
  if [[ -f $stamp && ! $web/package-lock.json -nt $stamp ]]; then
    return 0
  fi
  echo "baton: npm ci in web/ (uPlot for the dashboard, playwright-core for its test)" >&2
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error >&2)
}

baton_build() {
  baton_install_packages "${BATON_PACKAGES[@]}"
  baton_web_deps
  if [[ ! -f "$BATON_BUILD_DIR/build.ninja" ]]; then
    # BATON_UNITY=ON (.ci/run sets it): batched sources, faster from clean, slower to edit.
    cmake -S "$BATON_ROOT" -B "$BATON_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      "-DBATON_UNITY=${BATON_UNITY:-OFF}" "$@" >&2
  fi
  # BATON_BUILD_TARGETS: only these (run.sh builds what it runs: a first run waits for two
  # programs, not for the test suite).
  local targets=()
  [[ -z "${BATON_BUILD_TARGETS:-}" ]] || read -r -a targets <<<"$BATON_BUILD_TARGETS"
  cmake --build "$BATON_BUILD_DIR" --parallel "$(nproc)" ${targets[@]+--target "${targets[@]}"} >&2
}
