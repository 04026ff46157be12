// Finds and loads the NVSHMEM baseline plugin at run time: NVSHMEM's host
// library (from $NVSHMEM_DIR/lib or the nvidia-nvshmem wheel of python3)
// first, with RTLD_GLOBAL, then libnvst_nvshmem_baseline.so beside nvst.
#pragma once

#include <string>

#include "nvshmem_baseline/baseline_abi.h"

namespace nvst::tools {

struct NvshmemBaseline {
  decltype(&nvstb_init) init = nullptr;
  decltype(&nvstb_malloc) malloc = nullptr;
  decltype(&nvstb_free) free = nullptr;
  decltype(&nvstb_put) put = nullptr;
  decltype(&nvstb_pingpong) pingpong = nullptr;
  decltype(&nvstb_barrier_all) barrier_all = nullptr;
  decltype(&nvstb_coll_supported) coll_supported = nullptr;
  decltype(&nvstb_coll_max_bytes) coll_max_bytes = nullptr;
  decltype(&nvstb_collective) collective = nullptr;
  decltype(&nvstb_finalize) finalize = nullptr;
  decltype(&nvstb_version) version = nullptr;
  std::string why_not;  // empty when loaded
  bool loaded() const { return why_not.empty(); }
};

NvshmemBaseline load_nvshmem_baseline();
// The broadcast the plugin's init takes: nvst's bootstrap.
void bootstrap_broadcast_cb(void* data, std::size_t bytes, int root);

}  // namespace nvst::tools
