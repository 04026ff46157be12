# Sourced by the scripts: the CMake from PyPI and the build folder.
CMAKE="$(python3 -c 'import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, "cmake"))' 2>/dev/null || command -v cmake)"
CTEST="$(dirname "$CMAKE")/ctest"
BUILD_DIR="${NVST_BUILD_DIR:-build}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.ccache}"
# Paths relative to the checkout, so that another clone of it hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# NVLink multicast stays off everywhere (see README: shared GPU hosts).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Programs linked to NVSHMEM find the pip wheel's libnvshmem_host.so.3 this way
# (NVSHMEM_DIR/lib where that is set).
nvst_use_nvshmem_wheel() {
  local lib="${NVSHMEM_DIR:+$NVSHMEM_DIR/lib}"
  [ -n "$lib" ] || lib=$(python3 -c "import nvidia,os;print(os.path.join(list(nvidia.__path__)[0],'nvshmem','lib'))" 2>/dev/null) || return 0
  [ -d "$lib" ] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  return 0
}
