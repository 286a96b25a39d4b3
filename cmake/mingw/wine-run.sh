#!/usr/bin/env bash
# CMAKE_CROSSCOMPILING_EMULATOR for the mingw build: runs a Windows .exe under wine (Debian's
# `wine` runs wine64 when wine32 is absent). Run ctest through scripts/windows.sh: it picks the
# prefix (WINEPREFIX) and starts wineserver and wine's services detached first; otherwise the
# first test's wine starts them holding ctest's output pipe, and ctest never finishes.
#
# A Catch test program always prints something when it fails. A run that fails within a second
# having printed nothing at all never reached the program: wine itself failed to start it (seen
# in CI, 0.01 s, and here: exit code 1 after 16 ms, about once in 4,000 runs under ctest's
# parallel load, never in 600 runs alone; wine's own messages are off through WINEDEBUG, and
# turning them on would put them into every test's stderr). Such a run is tried once more and
# said so, also in $BATON_WINE_RETRY_LOG, which scripts/windows.sh prints at the end.
export WINEDEBUG="${WINEDEBUG:--all}"
out="$(mktemp "${TMPDIR:-/tmp}/baton-wine-run.XXXXXX")"
pid=""
# ctest's timeout ends this script: end the program too (under wine it is this unix process),
# and still hand over what it printed.
trap '[[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null; cat "$out"; rm -f "$out"; exit 143' TERM INT

ms() { echo $(($(date +%s%N) / 1000000)); }

run_once() {
  local start
  start=$(ms)
  wine "$@" <&0 >"$out" 2>&1 &  # <&0: a background job would get /dev/null
  pid=$!
  wait "$pid"
  rc=$?
  pid=""
  elapsed_ms=$(($(ms) - start))
}

run_once "$@"
if ((rc != 0 && elapsed_ms < 1000)) && [[ ! -s "$out" ]]; then
  note="wine-run: wine exited with $rc after $elapsed_ms ms printing nothing, tried again: $*"
  echo "$note" >&2
  if [[ -n "${BATON_WINE_RETRY_LOG:-}" ]]; then echo "$note" >>"$BATON_WINE_RETRY_LOG"; fi
  run_once "$@"
fi
cat "$out"
rm -f "$out"
# (Catch's --list-* exit with the number of tests: not a failure, nothing to say.)
if ((rc != 0)) && [[ "${2:-}" != --list-* ]]; then
  echo "wine-run: exit code $rc after $elapsed_ms ms: $*" >&2
fi
exit "$rc"
