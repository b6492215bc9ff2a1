#!/usr/bin/env bash
# Configures and builds into build/ (Release; the cuda backend when nvcc is
# available). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build
