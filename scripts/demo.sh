#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, run the embedded serving
# demo (checks every step against the oracle; non-zero exit on a mismatch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec build/step5attn demo "$@"
