#!/usr/bin/env bash
# Installs what the build needs from Debian packages, on a fresh machine.
# Idempotent: packages already present are not fetched again.
set -euo pipefail

# python3-venv and python3-dev: the Python package is built and tested in a
# venv (its build and test dependencies come from PyPI, pinned). clang and
# libclang-rt-dev (libFuzzer, ASan, UBSan runtimes): the fuzz targets.
packages=(cmake ninja-build g++ libgtest-dev libgmock-dev clang-format python3 python3-venv
  python3-dev clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

# The CUDA backend builds when nvcc is present (CUDA toolkit from the
# machine image); it is optional for the CPU build.
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: nvcc found, the cuda backend will be compiled (STEP5_CUDA_ARCHS: sm_90a, compute_80, sm_100)"
else
  echo "setup: no nvcc, building the cpu backend only"
fi
