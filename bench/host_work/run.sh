#!/usr/bin/env bash
# The library's own host work per forward call, on a machine without a GPU:
# builds cudart_standin.cpp as libcudart.so.13 and runs `step5attn bench`
# against it, so kernel launches cost nothing and the "host us/forward"
# column is what the library itself spends (validation, parameters,
# dispatch), and the stand-in's events turn the "ms" column into the
# forward's kernel launches. On a GPU machine the host column adds the
# CUDA driver's cost per launch (bench/launch_cost.cu measures that).
# Prints each layer row's launches and host us per forward.
#
#   bash bench/host_work/run.sh [build dir with step5attn] [bench filter]
#
# The build must have CUDA on and the shared runtime (the default,
# STEP5_CUDA_RUNTIME=Shared): `bash scripts/test.sh` leaves one in build/
# where nvcc is present, or
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEP5_CUDA=ON
#   ninja -C build step5attn
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
filter=${2:-"decode ctx 8K b32,bf16 decode ctx 128K b32,bf16 verify ctx 128K b32,bf16 decode ctx 1024K b128,bf16 verify ctx 1024K b128"}
bin=$build/step5attn
[[ -x $bin ]] || { echo "host_work: $bin expected (a build with STEP5_CUDA=ON)" >&2; exit 2; }
ldd "$bin" | grep -q 'libcudart.so.13' ||
  { echo "host_work: $bin expected to link libcudart.so.13 dynamically" >&2; exit 2; }
cuda_include=${CUDA_HOME:-/usr/local/cuda}/include
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo 'libcudart.so.13 { global: *; };' >"$scratch/version.map"
g++ -O2 -std=c++17 -shared -fPIC -I"$cuda_include" "$root/bench/host_work/cudart_standin.cpp" \
  -Wl,--version-script="$scratch/version.map" -Wl,-soname,libcudart.so.13 \
  -o "$scratch/libcudart.so.13"
# Layer rows: label, launches (the "ms" column), host us per forward.
printf '%-56s %9s %9s\n' "bench row" "launches" "host us"
LD_LIBRARY_PATH="$scratch" "$bin" bench --no-check --filter "$filter" |
  grep -E ' layer .* host [0-9.]+ us/forward' |
  sed -E 's/^ +(.*(indep|corr)) +([0-9.]+) ms .* host ([0-9.]+) us\/forward.*/\1|\3|\4/' |
  awk -F'|' '{ printf "%-56s %9.0f %9.1f\n", $1, $2, $3 }'
