#!/usr/bin/env bash
# On a machine with a Hopper GPU: builds step5attn with the cuda backend,
# runs `step5attn check --quick`, then compute-sanitizer memcheck and
# racecheck on the check's --tiny subset. Logs go to $OUT (or ./gpu-logs);
# the last lines are a short table of the results. Extra arguments go to
# cmake. Each stage has a time limit so the whole run fits a 10-minute slot.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-gpu-logs}
mkdir -p "$LOG"
JOBS=$(nproc)

status() { if [ "$1" -eq 0 ]; then echo ok; else echo "FAILED (rc $1)"; fi; }

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader > "$LOG/gpu.txt" 2>&1
{ cmake -S . -B build-gpu -G Ninja -DSTEP5_CUDA=ON -DSTEP5_TESTS=OFF "$@" &&
  ninja -C build-gpu -j "$JOBS" step5attn; } > "$LOG/build.log" 2>&1
build=$?
if [ $build -ne 0 ]; then
  tail -40 "$LOG/build.log"
  echo "build: $(status $build)"
  exit 1
fi

SAN=/usr/local/cuda/bin/compute-sanitizer
command -v compute-sanitizer > /dev/null && SAN=compute-sanitizer

timeout "${CHECK_TIMEOUT:-180}" build-gpu/step5attn check --quick > "$LOG/check.log" 2>&1
check=$?
timeout "${SAN_TIMEOUT:-150}" "$SAN" --tool memcheck --error-exitcode 9 build-gpu/step5attn check --tiny \
  > "$LOG/memcheck.log" 2>&1
memcheck=$?
timeout "${SAN_TIMEOUT:-150}" "$SAN" --tool racecheck --racecheck-report all --error-exitcode 9 \
  build-gpu/step5attn check --tiny > "$LOG/racecheck.log" 2>&1
racecheck=$?

grep -E "^FAIL" "$LOG/check.log" | head -30
echo "---------------------------------------------"
printf '%-10s %s\n' gpu "$(cat "$LOG/gpu.txt")"
printf '%-10s %s\n' build "$(status $build)"
printf '%-10s %s | %s\n' check "$(status $check)" "$(tail -1 "$LOG/check.log")"
printf '%-10s %s | %s\n' memcheck "$(status $memcheck)" "$(grep -E 'ERROR SUMMARY|passed,' "$LOG/memcheck.log" | tr '\n' ' ')"
printf '%-10s %s | %s\n' racecheck "$(status $racecheck)" "$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|passed,' "$LOG/racecheck.log" | tr '\n' ' ')"
