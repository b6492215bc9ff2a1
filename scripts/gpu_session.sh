#!/usr/bin/env bash
# One device-machine session: find or build step5attn, then run the stages
# named in $STAGES (default: check memcheck bench), each under its own time
# limit, logging to $OUT (or ./gpu-logs). The last lines are a short table.
#   check      step5attn check --quick ($CHECK_MODE=full: the whole matrix)
#   memcheck   compute-sanitizer memcheck on check --tiny
#   racecheck  compute-sanitizer racecheck on check --tiny
#   bench      step5attn bench --quick --filter "$FILTER" ($BENCH_MODE=full: the sweep)
#   profile    ncu (clocks as found) per-kernel times of two layer forwards for each
#              bench filter in $PROFILE_FILTERS (';'-separated)
#   peers      python3 bench/peers.py against the bench JSON (torch on the device)
# A binary built elsewhere can be carried in build-dev/ (it is used when it
# runs here); otherwise the tool is built into build-gpu/.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-gpu-logs}
mkdir -p "$LOG"
STAGES=${STAGES:-check memcheck bench}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
summary=()
note() { summary+=("$(printf '%-10s %s' "$1" "$2")"); }
result() { if [ "$1" -eq 0 ]; then echo ok; elif [ "$1" -eq 124 ]; then echo "TIMEOUT"; else echo "FAILED (rc $1)"; fi; }

nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.max.sm --format=csv,noheader \
  > "$LOG/gpu.txt" 2>&1
BIN=build-dev/step5attn
if ! "$BIN" version > "$LOG/version.txt" 2>&1; then
  { cmake -S . -B build-gpu -G Ninja -DSTEP5_CUDA=ON -DSTEP5_TESTS=OFF &&
    ninja -C build-gpu -j "$(nproc)" step5attn; } > "$LOG/build.log" 2>&1
  rc=$?
  note build "$(result $rc) (built here)"
  if [ $rc -ne 0 ]; then tail -30 "$LOG/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi
  BIN=build-gpu/step5attn
else
  note build "carried binary: $(cat "$LOG/version.txt")"
fi
SAN=compute-sanitizer
command -v "$SAN" > /dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer

for stage in $STAGES; do
  case $stage in
    check)
      mode=--quick; [ "${CHECK_MODE:-quick}" = full ] && mode=
      timeout "${CHECK_TIMEOUT:-200}" "$BIN" check $mode > "$LOG/check.log" 2>&1
      rc=$?
      grep -E "^FAIL|FAIL " "$LOG/check.log" | head -20
      note check "$(result $rc) | $(tail -1 "$LOG/check.log")" ;;
    memcheck)
      timeout "${SAN_TIMEOUT:-150}" "$SAN" --tool memcheck --error-exitcode 9 "$BIN" check --tiny \
        > "$LOG/memcheck.log" 2>&1
      rc=$?
      note memcheck "$(result $rc) | $(grep -E 'ERROR SUMMARY|passed,' "$LOG/memcheck.log" | tr '\n' ' ')" ;;
    racecheck)
      timeout "${SAN_TIMEOUT:-150}" "$SAN" --tool racecheck --racecheck-report all --error-exitcode 9 \
        "$BIN" check --tiny > "$LOG/racecheck.log" 2>&1
      rc=$?
      note racecheck "$(result $rc) | $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|passed,' "$LOG/racecheck.log" | tr '\n' ' ')" ;;
    bench)
      if [ "${BENCH_MODE:-quick}" = full ]; then
        args=(--max-seconds "${MAX_SECONDS:-400}")
      else
        args=(--quick)
      fi
      [ -n "${FILTER:-}" ] && args+=(--filter "$FILTER")
      timeout "${BENCH_TIMEOUT:-300}" "$BIN" bench "${args[@]}" --json "$LOG/bench.json" \
        > "$LOG/bench.log" 2>&1
      rc=$?
      cat "$LOG/bench.log"
      note bench "$(result $rc)" ;;
    profile)
      IFS=';' read -ra filters <<< "${PROFILE_FILTERS:-csa bf16 decode ctx 128K b32 q1 indep}"
      k=0
      for f in "${filters[@]}"; do
        k=$((k + 1))
        timeout "${PROFILE_TIMEOUT:-120}" ncu --clock-control none --csv --page raw \
          --kernel-name regex:"cache_update|kv_write|summaries|ring_write|indexer|select|paged|combine" \
          --launch-skip "${PROFILE_SKIP:-19}" --launch-count "${PROFILE_COUNT:-10}" \
          --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size \
          "$BIN" bench --quick --no-check --filter "$f" > "$LOG/profile$k.csv" 2> "$LOG/profile$k.err"
        rc=$?
        echo "== profile $k: $f (rc $rc)"
        python3 - "$LOG/profile$k.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
idx = {c: cols.index(c) for c in cols}
for r in rows[head + 2:]:
    name = r[idx["Kernel Name"]].split("(")[0].split("<")[0][-28:]
    num = lambda c: float(r[idx[c]].replace(",", ""))
    us = num("gpu__time_duration.sum") / 1e3
    rd = num("dram__bytes_read.sum") / 1e6
    wr = num("dram__bytes_write.sum") / 1e6
    print(f"  {name:28s} {us:9.1f} us  read {rd:9.1f} MB  write {wr:8.1f} MB  grid {r[idx['launch__grid_size']]}")
PY
      done
      note profile "done" ;;
    detail)
      # ncu sections (stall reasons, occupancy, memory) of one launch per
      # "kernel-regex@bench-filter" item in $DETAIL (';'-separated).
      IFS=';' read -ra items <<< "${DETAIL:-paged@csa bf16 decode ctx 128K b32 q1 indep}"
      k=0
      for item in "${items[@]}"; do
        k=$((k + 1))
        timeout "${PROFILE_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:"${item%%@*}" \
          --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
          --section LaunchStats \
          "$BIN" bench --quick --no-check --filter "${item#*@}" > "$LOG/detail$k.txt" 2>&1
        echo "== detail $k: $item (rc $?)"
        grep -iE "Duration|stalled|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Stall|L2 Hit|Mem Busy|Max Bandwidth|Compute \(SM\)" "$LOG/detail$k.txt" | cut -c1-220 | head -45
      done
      note detail "done" ;;
    source)
      # Per-SASS-instruction executed counts and stall samples of one launch
      # per "kernel-regex@bench-filter" item in $SOURCE (';'-separated).
      IFS=';' read -ra items <<< "${SOURCE:-indexer@csa bf16 decode ctx 128K b32 q1 indep}"
      k=0
      for item in "${items[@]}"; do
        k=$((k + 1))
        timeout "${PROFILE_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:"${item%%@*}" \
          --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats \
          --section InstructionStats --page source --csv --print-source sass \
          "$BIN" bench --quick --no-check --filter "${item#*@}" > "$LOG/source$k.csv" 2>&1
        echo "== source $k: $item (rc $?) $(wc -l < "$LOG/source$k.csv") lines"
      done
      note source "done" ;;
    sass)
      # Opcode histograms of the kernels whose mangled names contain the
      # ';'-separated strings of $SASS_FUNCS.
      cuobjdump -sass "$BIN" > "$LOG/sass.txt" 2>&1
      python3 - "$LOG/sass.txt" "${SASS_FUNCS:-indexer_tc_kernelILi32ENS0_6Fp8Tag}" <<'PY'
import collections, re, sys
text = open(sys.argv[1]).read().split("Function : ")
for want in sys.argv[2].split(";"):
    for block in text:
        name = block.split("\n", 1)[0]
        if want not in name:
            continue
        ops = collections.Counter()
        for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", block):
            ops[m.group(1)] += 1
        print(f"== {name[:100]}: {sum(ops.values())} instructions")
        print("   " + ", ".join(f"{k} {v}" for k, v in ops.most_common(28)))
PY
      note sass "done" ;;
    peers)
      PYTHONUNBUFFERED=1 timeout "${PEERS_TIMEOUT:-240}" python3 bench/peers.py \
        --ours "$LOG/bench.json" --out "$LOG" > "$LOG/peers.log" 2>&1
      rc=$?
      cat "$LOG/peers.log"
      note peers "$(result $rc)" ;;
  esac
done
echo "---------------------------------------------"
cat "$LOG/gpu.txt"
printf '%s\n' "${summary[@]}"
