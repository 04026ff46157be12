#!/usr/bin/env bash
# The installed package works: `cmake --install` of this build into a
# scratch prefix, then examples/cpp configured against it with
# find_package(nvst), built and run (3 host-memory PEs, no GPU).
# Called by ctest (install_and_build_example):
#   install_check.sh CMAKE BUILD_DIR EXAMPLE_DIR NVCC CUDA_ARCHITECTURES
set -euo pipefail
CMAKE=$1 BUILD=$2 EXAMPLE=$3 NVCC=$4 ARCHS=$5
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
"$CMAKE" --install "$BUILD" --prefix "$SCRATCH/prefix" --component dev >/dev/null
test -f "$SCRATCH/prefix/include/nvst/nvst.hpp" || { echo "no headers installed" >&2; exit 1; }
test -f "$SCRATCH/prefix/lib/cmake/nvst/nvstConfig.cmake" || { echo "no package config installed" >&2; exit 1; }
# The example must find nvst in the prefix, not in this build tree.
"$CMAKE" -S "$EXAMPLE" -B "$SCRATCH/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" \
  -DCMAKE_PREFIX_PATH="$SCRATCH/prefix" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON >"$SCRATCH/configure.log" ||
  { cat "$SCRATCH/configure.log"; exit 1; }
grep -q "$SCRATCH/prefix/lib/cmake/nvst" "$SCRATCH/example/CMakeCache.txt" ||
  { echo "find_package(nvst) did not use the installed prefix" >&2; exit 1; }
"$CMAKE" --build "$SCRATCH/example" >"$SCRATCH/build.log" 2>&1 || { cat "$SCRATCH/build.log"; exit 1; }
NVST_TIMEOUT_S=60 timeout 120 "$SCRATCH/example/host_ring"
