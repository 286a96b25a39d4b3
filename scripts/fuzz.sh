#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang into build-fuzz/ and runs each for
# SECONDS (default 60), two at a time. Exits non-zero if any harness finds a crash, a broken
# invariant, a timeout or an out-of-memory; each such input is copied into
# tests/fuzz/regressions/<harness>/ to be committed (the gcc build replays it on every ./test.sh).
#   usage: scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 600 fuzz_checkpoint
# New inputs that add coverage stay in build-fuzz/fuzz-out/<harness>/corpus across runs; see
# tests/fuzz/README.md for longer runs and for merging them into the committed seeds.
set -euo pipefail
source "$(dirname "$0")/setup.sh"

seconds=60
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
all_harnesses=(fuzz_job_spec fuzz_worker_message fuzz_api_request fuzz_checkpoint)
harnesses=("$@")
((${#harnesses[@]})) || harnesses=("${all_harnesses[@]}")

# Longest input each harness may try: a little above the largest real input of its kind, so
# time goes into structure rather than into huge documents the size checks reject anyway.
declare -A max_len=([fuzz_job_spec]=8192 [fuzz_worker_message]=4096 [fuzz_api_request]=8192
                    [fuzz_checkpoint]=4096)
for h in "${harnesses[@]}"; do
  [[ -n ${max_len[$h]:-} ]] || { echo "fuzz.sh: unknown harness '$h' (${all_harnesses[*]})" >&2; exit 64; }
done

# The compiler and libFuzzer's runtime, besides the packages every build needs.
baton_install_packages "${BATON_PACKAGES[@]}" clang-14 libclang-rt-14-dev
fuzz_dir="${BATON_FUZZ_BUILD_DIR:-$BATON_ROOT/build-fuzz}"
if [[ ! -f "$fuzz_dir/build.ninja" ]]; then
  cmake -S "$BATON_ROOT" -B "$fuzz_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++-14 -DBATON_FUZZ=ON -DBATON_BUILD_BENCH=OFF \
    "-DBATON_UNITY=${BATON_UNITY:-OFF}" >&2
fi
cmake --build "$fuzz_dir" --parallel "$(nproc)" --target "${harnesses[@]}" >&2

out="$fuzz_dir/fuzz-out"
run_one() {
  local h=$1 dir="$out/$1"
  rm -rf "$dir/artifacts"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  # First corpus folder is the writable one; the committed seeds and crashers are read only.
  local dict=()
  [[ -f "$BATON_ROOT/tests/fuzz/$h.dict" ]] && dict=(-dict="$BATON_ROOT/tests/fuzz/$h.dict")
  set +e
  "$fuzz_dir/tests/fuzz/$h" -max_len="${max_len[$h]}" -timeout=10 -rss_limit_mb=2048 \
    -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/artifacts/" \
    "${dict[@]}" ${BATON_FUZZ_OPTIONS:-} "$dir/corpus" "$BATON_ROOT/tests/fuzz/corpus/$h" \
    "$BATON_ROOT/tests/fuzz/regressions/$h" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
}

echo "fuzz.sh: ${harnesses[*]}, ${seconds}s each, 2 at a time; logs in $out/<harness>/log" >&2
pids=()
for h in "${harnesses[@]}"; do
  run_one "$h" &
  pids+=($!)
  if ((${#pids[@]} >= 2)); then
    wait -n || true
    # Forget finished jobs so the next one starts as soon as a slot frees.
    alive=()
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    pids=("${alive[@]}")
  fi
done
wait

failed=0
for h in "${harnesses[@]}"; do
  dir="$out/$h"
  rc=$(cat "$dir/rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  corpus=$(find "$dir/corpus" -type f | wc -l)
  found=()
  while IFS= read -r -d '' f; do found+=("$f"); done < <(find "$dir/artifacts" -type f -print0)
  if [[ $rc -ne 0 || ${#found[@]} -gt 0 ]]; then
    failed=1
    mkdir -p "$BATON_ROOT/tests/fuzz/regressions/$h"
    for f in "${found[@]}"; do cp "$f" "$BATON_ROOT/tests/fuzz/regressions/$h/"; done
    echo "FAIL $h: exit $rc, ${execs:-?} runs; see $dir/log" >&2
    grep -m3 -E 'ERROR: |fuzz invariant broken|runtime error' "$dir/log" >&2 || true
    for f in "${found[@]}"; do
      echo "  crasher copied to tests/fuzz/regressions/$h/$(basename "$f"): fix the bug, then" \
        "commit it with the fix (git add tests/fuzz/regressions/$h)" >&2
    done
  else
    echo "ok   $h: ${execs:-?} runs in ${seconds}s, working corpus $corpus inputs" >&2
  fi
done
exit $failed
