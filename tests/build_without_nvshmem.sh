#!/usr/bin/env bash
# The build without NVSHMEM still works: configure with NVSHMEM
# hidden, check that CMake says so, and build the library and the CLI (which
# then reports its NVSHMEM column as n/a). ccache makes the objects cheap.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/env.sh"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
# The layers' include paths lie in the build folder (build/layers/): relative
# to it for ccache, a fresh folder still finds the last run's objects.
export CCACHE_BASEDIR="$DIR"
env -u NVSHMEM_DIR "$CMAKE" -S "$ROOT" -B "$DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNVSHMEM_DIR=/nonexistent \
  -DBUILD_TESTING=OFF > "$DIR/configure.log"
grep -q "NVSHMEM not found" "$DIR/configure.log" || { cat "$DIR/configure.log"; echo "CMake did not say NVSHMEM is missing" >&2; exit 1; }
"$CMAKE" --build "$DIR" --target nvst nvst_cli -j "$(nproc)" > "$DIR/build.log" || { tail -40 "$DIR/build.log"; exit 1; }
test ! -e "$DIR/bin/libnvst_nvshmem_baseline.so" || { echo "the NVSHMEM plugin was built without NVSHMEM" >&2; exit 1; }
grep -q "nvst_nvshmem" "$DIR/build.ninja" && { echo "nvst::nvst_nvshmem exists without NVSHMEM" >&2; exit 1; }
echo "build without NVSHMEM: ok"
