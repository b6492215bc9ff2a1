#!/usr/bin/env bash
# On the device machine: configure and build step5attn, then run the
# attention bench. `quick` (default): check + --quick timings + a
# compute-sanitizer memcheck of the check phase; `full`: the whole SPEC 9
# sweep. Logs and JSON go to $OUT; the short table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/step5-out}
mkdir -p "$OUT"
MODE=${1:-quick}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
if ! cmake -S . -B build-gpu -G Ninja -DSTEP5_CUDA=ON -DSTEP5_TESTS=OFF >"$OUT/configure.log" 2>&1; then
  tail -20 "$OUT/configure.log"
  exit 1
fi
if ! ninja -C build-gpu -j16 step5attn >"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  exit 1
fi
BIN=build-gpu/step5attn
status=0
if [ "$MODE" = full ]; then
  "$BIN" bench --json "$OUT/bench_full.json" --max-seconds "${MAX_SECONDS:-300}" \
    >"$OUT/bench_full.log" 2>&1 || status=$?
  LOG="$OUT/bench_full.log"
else
  compute-sanitizer --tool memcheck --leak-check no "$BIN" bench --check-only \
    >"$OUT/memcheck.log" 2>&1 || status=$?
  echo "== memcheck (exit $status)"
  grep -E "ERROR SUMMARY|check " "$OUT/memcheck.log" | head -20
  "$BIN" bench --quick --json "$OUT/bench_quick.json" >"$OUT/bench_quick.log" 2>&1 || status=$?
  LOG="$OUT/bench_quick.log"
fi
cat "$OUT/gpu.txt"
cat "$LOG"
exit "$status"
