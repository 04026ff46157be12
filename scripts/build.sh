#!/usr/bin/env bash
# Configures and builds everything (all CUDA code included) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
"$CMAKE" -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
"$CMAKE" --build "$BUILD_DIR" -j "$(nproc)"
