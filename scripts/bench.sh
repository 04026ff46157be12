#!/usr/bin/env bash
# The benchmark command: builds if needed, then runs `nvst bench` on whatever
# hardware is present (p2p, coll, ep and fifo with 2+ GPUs; fifo and the
# host-side benchmarks with one; the host-side ones without a GPU).
# Extra arguments go to nvst bench (e.g. -b 4K -e 1G --json out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if [ ! -x "$BUILD_DIR/bin/nvst" ]; then
  bash scripts/install_deps.sh
  bash scripts/build.sh
fi
exec "$BUILD_DIR/bin/nvst" bench "$@"
