#!/usr/bin/env bash
# The library's own host work per forward call, on a machine without a GPU:
# builds the stand-in CUDA runtime (cudart_standin.cpp, the CMake target
# cudart_standin of tests/, as libcudart.so.13) and runs `step5attn bench`
# against it, so kernel launches cost nothing and the "host us/forward"
# column is what the library itself spends (validation, parameters,
# dispatch), and the stand-in's events turn the "ms" column into the
# forward's kernel launches. On a GPU machine the host column adds the
# CUDA driver's cost per launch (bench/launch_cost.cu measures that).
# Prints each layer row's launches and host us per forward.
#
#   bash bench/host_work/run.sh [build dir] [bench filter]
#
# The build must be a CUDA 13 one with the shared runtime (the default,
# STEP5_CUDA_RUNTIME=Shared) and the tests (STEP5_TESTS, on by default):
# `bash scripts/test.sh` leaves one in build/ where nvcc is present, or
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEP5_CUDA=ON
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
filter=${2:-"decode ctx 8K b32,bf16 decode ctx 128K b32,bf16 verify ctx 128K b32,bf16 decode ctx 1024K b128,bf16 verify ctx 1024K b128"}
cmake --build "$build" --target step5attn cudart_standin >/dev/null || {
  echo "host_work: $build expected a CUDA 13 build with the tests (target cudart_standin)" >&2
  exit 2
}
# Layer rows: label, launches (the "ms" column), host us per forward.
printf '%-56s %9s %9s\n' "bench row" "launches" "host us"
LD_LIBRARY_PATH="$build/tests/cudart_standin" "$build/step5attn" bench --no-check \
  --filter "$filter" |
  grep -E ' layer .* host [0-9.]+ us/forward' |
  sed -E 's/^ +(.*(indep|corr)) +([0-9.]+) ms .* host ([0-9.]+) us\/forward.*/\1|\3|\4/' |
  awk -F'|' '{ printf "%-56s %9.0f %9.1f\n", $1, $2, $3 }'
