#!/usr/bin/env bash
# The test suite on a fresh machine: set up, check formatting, build
# (including the CUDA sources when nvcc is present, for every default target:
# sm_90a, compute_80 PTX, sm_100; so a compile error fails here), run the
# tests and say why any were skipped; install the C++ package into a
# temporary prefix and build the examples and the README's C++ quick start
# against it; rebuild the CPU tests with AddressSanitizer +
# UndefinedBehaviorSanitizer and run them again; run each libFuzzer target
# (case files, JSON) for a bounded time from its seed corpus; build the Python wheel,
# install it in a fresh venv with the pinned test dependencies, run pytest
# (cpu backend, numpy), the README's Python quick start and the overhead bench.
# GPU and torch tests skip themselves, visibly, where they cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PYTHON=${PYTHON:-python3}
# Test dependencies of the Python package, pinned (as in pyproject.toml).
PY_TEST_DEPS=(numpy==2.4.6 pytest==9.2.0)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

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
ctest --test-dir build --output-on-failure -j "$jobs" --output-junit ctest.xml
"$PYTHON" scripts/ctest_skips.py build/ctest.xml

echo "== install, then build the examples against the installed package"
cmake --install build --prefix "$scratch/prefix" >/dev/null
"$PYTHON" scripts/readme_snippets.py README.md "$scratch/readme"
cmake -S examples -B "$scratch/examples" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DSTEP5_README_QUICKSTART="$scratch/readme/quickstart.cpp" >/dev/null
ninja -C "$scratch/examples"
"$scratch/examples/cpp_layer"
"$scratch/examples/readme_quickstart"

echo "== sanitizer build (address, undefined)"
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEP5_CUDA=OFF \
  -DSTEP5_SANITIZE=ON >/dev/null
ninja -C build-sanitize -j "$jobs"
echo "== sanitizer tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs"

# STEP5_FUZZ_SECONDS: seconds per fuzz target (default 60). A crash fails
# the run; the input that caused it is kept as build-fuzz/crash-* (add it to
# fuzz/corpus/ with the fix).
fuzz_seconds=${STEP5_FUZZ_SECONDS:-60}
echo "== fuzz (libFuzzer, address + undefined, ${fuzz_seconds} s per target)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTEP5_CUDA=OFF -DSTEP5_FUZZ=ON -DSTEP5_TESTS=OFF -DSTEP5_CLI=OFF -DSTEP5_INSTALL=OFF >/dev/null
ninja -C build-fuzz -j "$jobs" fuzz_json fuzz_case
for target in json case; do
  mkdir -p "$scratch/fuzz-$target"
  log="$scratch/fuzz-$target.log"
  if ! build-fuzz/fuzz/fuzz_$target -max_total_time="$fuzz_seconds" -max_len=16384 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$PWD/build-fuzz/crash-$target-" \
    "$scratch/fuzz-$target" "fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz_$target: FAILED (the input is in build-fuzz/crash-$target-*)"
    exit 1
  fi
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$log"
done

echo "== python wheel (scikit-build-core, pinned build dependencies from PyPI)"
"$PYTHON" -m venv "$scratch/venv"
venv_python="$scratch/venv/bin/python"
"$venv_python" -m pip install -q "${PY_TEST_DEPS[@]}"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$venv_python" -m pip wheel -q --no-deps . -w "$scratch/wheel"
"$venv_python" -m pip install -q "$scratch"/wheel/step5_attention-*.whl
echo "== python tests"
# The repository root holds no importable step5_attention (the sources are
# under python/), so every import below is the installed wheel's.
"$venv_python" -m pytest -q -rs -p no:cacheprovider python/tests
"$venv_python" "$scratch/readme/quickstart.py"
"$venv_python" python/bench/overhead.py --iterations 2000 --rounds 3
