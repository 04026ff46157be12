#!/usr/bin/env bash
# Rebuilds nvshmem_tutorial._nvst for another Python (a build made with one
# Python version, used on a machine whose Python differs) from a finished build:
# libnvst.a and the module's device-link object do not depend on Python, so
# only the binding files are compiled again, then linked. Needs g++,
# pybind11 and nvcc's cudart on that machine; takes ~30 s on 16 cores.
#   bash scripts/build_python_module.sh [BUILD_DIR] [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
PY="${2:-python3}"
CUDA="${CUDA_HOME:-/usr/local/cuda}"
OUT="$BUILD/python/nvshmem_tutorial"
SUFFIX="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
DLINK="$BUILD/CMakeFiles/nvst_python.dir/cmake_device_link.o"
# A build that found NVSHMEM linked the module to libnvst_nvshmem.a, and its
# device-link object then names NVSHMEM's device symbols: link it the same
# way, with this machine's nvidia-nvshmem wheel.
LIBNVST="$BUILD/src/libnvst.a"; NVSHMEM_LIBS=()
if grep -aq nvshmemi "$DLINK" 2>/dev/null; then
  LIBNVST="$BUILD/src/libnvst_nvshmem.a"
  NV="${NVSHMEM_DIR:-$("$PY" -c 'import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],"nvshmem"))')}"
  [[ -f "$NV/lib/libnvshmem_host.so.3" ]] || { echo "build_python_module: this build uses NVSHMEM and $NV/lib has no libnvshmem_host.so.3 (pip install nvidia-nvshmem-cu13==3.4.5)" >&2; exit 1; }
  NVSHMEM_LIBS=("$NV/lib/libnvshmem_device.a" "$NV/lib/libnvshmem_host.so.3" "-Wl,-rpath,$NV/lib")
fi
# tma_copy's kernel object (the device-link object already covers its
# device code), and the architectures the bindings report, as CMake built them.
TMA="$BUILD/python/CMakeFiles/nvst_tma_copy.dir/src/tma_copy.cu.o"
ARCHS="$( (grep -o 'NVST_CUDA_ARCHITECTURES=[^ ]*' "$BUILD/build.ninja" 2>/dev/null || true) | head -1 | tr -d '\\"' | cut -d= -f2)"
for f in "$LIBNVST" "$DLINK" "$TMA"; do
  [[ -f "$f" ]] || { echo "build_python_module: $f is missing (run scripts/build.sh first)" >&2; exit 1; }
done
lib() {  # a shared library by its full name (runtime packages have no unversioned .so)
  local name="$1" f
  for f in /usr/lib/x86_64-linux-gnu/lib"$name".so /lib/x86_64-linux-gnu/lib"$name".so.*; do
    [[ -e "$f" ]] && { echo "$f"; return; }
  done
  echo "build_python_module: lib$name not found" >&2; exit 1
}
FABRIC="$(lib fabric)"; HWLOC="$(lib hwloc)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
INC=(-Iinclude -isystem "$CUDA/include" $("$PY" -m pybind11 --includes))
pids=()
for src in bindings bindings_device bindings_ep bindings_structures; do
  g++ -O3 -DNDEBUG -std=gnu++20 -fPIC -fvisibility=hidden "-DNVST_CUDA_ARCHITECTURES=\"${ARCHS:-90}\"" "${INC[@]}" \
    -c "python/src/$src.cpp" -o "$TMP/$src.o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed compile stops here
# The empty device_link.cu object only served CMake's device-link step; the
# device-link object itself is reused as is.
g++ -shared -o "$OUT/_nvst$SUFFIX" "$TMP"/bindings*.o "$TMA" "$DLINK" "$LIBNVST" "${NVSHMEM_LIBS[@]}" \
  "$CUDA/lib64/libcudart_static.a" -L"$CUDA/lib64" -lcudadevrt -lrt -lpthread -ldl "$FABRIC" "$HWLOC"
echo "built $OUT/_nvst$SUFFIX for $("$PY" --version)${NVSHMEM_LIBS:+ with NVSHMEM}"
# The copy agent's program goes beside the module (where a PE looks for it).
if [[ -x "$BUILD/bin/nvst-copy-agent" ]]; then cp "$BUILD/bin/nvst-copy-agent" "$OUT/"; fi
