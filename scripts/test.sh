#!/usr/bin/env bash
# The test command: installs dependencies, builds everything, runs the tests.
# GPU tests skip (exit 77) where there are too few GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
source scripts/env.sh
"$CTEST" --test-dir "$BUILD_DIR" --output-on-failure --timeout 600 "$@"
