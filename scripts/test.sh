#!/usr/bin/env bash
# The test suite on a fresh machine: set up, check formatting, build
# (including the CUDA sources for sm_90a when nvcc is present, so a compile
# error fails here), run the tests, then rebuild the CPU tests with
# AddressSanitizer + UndefinedBehaviorSanitizer and run them again.
# GPU tests skip themselves, visibly, on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== clang-format"
mapfile -t sources < <(git ls-files '*.h' '*.cpp' '*.cuh' '*.cu' 2>/dev/null || true)
if ((${#sources[@]})); then
  clang-format --dry-run -Werror "${sources[@]}"
fi

jobs=$(nproc)
echo "== release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j "$jobs"
echo "== release tests"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== sanitizer build (address, undefined)"
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEP5_CUDA=OFF \
  -DSTEP5_SANITIZE=ON >/dev/null
ninja -C build-sanitize -j "$jobs"
echo "== sanitizer tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs"
