// NVSHMEM underneath the runtime (NVST_BACKEND=nvshmem). Our
// bootstrap carries NVSHMEM's unique ID, NVSHMEM starts with it, and the
// symmetric heap is a single nvshmem_malloc region: the same offset on every
// PE, so our allocator, nvst::ptr and the device API keep working, while
// the device API's remote operations call nvshmem_* (nvshmem_backend.cuh)
// and the host API's call nvshmemx_*_on_stream (nvshmem_ops below).
//
// NVSHMEM is initialised once per process and not finalised by
// nvst::finalize (it cannot start again in the same process); a later
// nvst::init with the same rank and world reuses it, and so does a first
// one in a process where someone else (nvshmem4py, say) started NVSHMEM.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nvshmem.h>
#include <nvshmemx.h>

#include "device/device_runtime.hpp"
#include "nvst/error.hpp"
#include "runtime/driver_api.hpp"
#include "base/bootstrap.hpp"
#include "runtime/heap_backing.hpp"

namespace nvst {

namespace {

int g_rank = -1, g_world = -1;

// NVSHMEM's device library keeps its state in each CUDA module that links
// it. nvshmemx_init_attr, called from here, fills this program's module
// itself; when someone else started NVSHMEM (nvshmem4py, the application)
// nothing filled it yet, and nvshmemx_cumodule_init does, as for a module
// loaded after NVSHMEM started.
void init_device_state_of_this_module() {
  cudaFunction_t fn = nullptr;
  NVST_CHECK_CUDA(cudaGetFuncBySymbol(&fn, detail::a_kernel_of_this_module()));
  CUmodule module = nullptr;
  NVST_CHECK_CU(driver::api().FuncGetModule(&module, reinterpret_cast<CUfunction>(fn)));
  NVST_REQUIRE(nvshmemx_cumodule_init(module) == 0, "nvshmemx_cumodule_init failed for nvst's device code");
}

void start_nvshmem(const NodeContext& node, int world, std::size_t heap_bytes) {
  if (g_rank >= 0) {
    NVST_REQUIRE(g_rank == node.rank && g_world == world, "NVSHMEM was started in this process as PE ", g_rank, " of ",
                 g_world, " and cannot start again as PE ", node.rank, " of ", world);
    return;
  }
  if (nvshmemx_init_status() >= NVSHMEM_STATUS_IS_INITIALIZED) {
    // Started before nvst::init by someone else: join it, if it numbers the
    // PEs as our job does (its heap must also hold ours: NVSHMEM_SYMMETRIC_SIZE).
    NVST_REQUIRE(nvshmem_my_pe() == node.rank && nvshmem_n_pes() == world, "NVSHMEM was started outside nvst as PE ",
                 nvshmem_my_pe(), " of ", nvshmem_n_pes(), "; nvst's job has this process as PE ", node.rank, " of ",
                 world, " (start both from the same ranks)");
    init_device_state_of_this_module();
    g_rank = node.rank;
    g_world = world;
    return;
  }
  // NVLink multicast stays off whatever the environment says (shared GPU
  // hosts; see README). The rest are defaults the caller may override.
  ::setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  ::setenv("NVSHMEM_REMOTE_TRANSPORT", "none", 0);  // one node: NVLink only
  ::setenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo", 0);
  // Room for our heap in NVSHMEM's (it keeps some for itself).
  ::setenv("NVSHMEM_SYMMETRIC_SIZE", std::to_string(heap_bytes + (std::size_t{256} << 20)).c_str(), 0);
  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (node.rank == 0) NVST_REQUIRE(nvshmemx_get_uniqueid(&uid) == 0, "nvshmemx_get_uniqueid failed");
  node.bootstrap->broadcast(&uid, sizeof(uid), 0, "init: NVSHMEM unique id");
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  NVST_REQUIRE(nvshmemx_set_attr_uniqueid_args(node.rank, world, &uid, &attr) == 0,
               "nvshmemx_set_attr_uniqueid_args failed");
  NVST_REQUIRE(nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) == 0,
               "nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID) failed (NVSHMEM_DEBUG=WARN says why)");
  NVST_REQUIRE(nvshmem_my_pe() == node.rank && nvshmem_n_pes() == world, "NVSHMEM numbered this PE ", nvshmem_my_pe(),
               " of ", nvshmem_n_pes(), "; nvst says ", node.rank, " of ", world);
  g_rank = node.rank;
  g_world = world;
}

class NvshmemHeap final : public HeapBacking {
 public:
  NvshmemHeap(std::size_t bytes, const NodeContext& node, int world) : size_(bytes) {
    NVST_REQUIRE(static_cast<int>(node.node_pes.size()) == world,
                 "NVST_BACKEND=nvshmem runs every PE on one node (NVLink); this job has ", world, " PEs and this node ",
                 node.node_pes.size(), " (NVST_NODE_SIZE splits nodes for our proxy only)");
    start_nvshmem(node, world, bytes);
    base_ = static_cast<char*>(nvshmem_malloc(bytes));  // collective
    NVST_REQUIRE(base_ != nullptr, "nvshmem_malloc(", bytes, ") failed: NVSHMEM_SYMMETRIC_SIZE (",
                 std::getenv("NVSHMEM_SYMMETRIC_SIZE") ? std::getenv("NVSHMEM_SYMMETRIC_SIZE") : "unset",
                 ") must hold the nvst heap (NVST_SYMMETRIC_SIZE) plus NVSHMEM's own");
    for (int pe : node.node_pes) {
      char* p = static_cast<char*>(nvshmem_ptr(base_, pe));
      NVST_REQUIRE(p != nullptr, "nvshmem_ptr gives no load/store address for PE ", pe,
                   " (NVSHMEM found no NVLink/P2P path to it)");
      peers_.push_back(p);
    }
  }
  ~NvshmemHeap() override {
    if (base_) nvshmem_free(base_);  // collective, like nvst::finalize
  }
  char* local_base() const override { return base_; }
  std::size_t size() const override { return size_; }
  char* peer_base(int node_index) const override {
    return node_index >= 0 && node_index < static_cast<int>(peers_.size())
               ? peers_[static_cast<std::size_t>(node_index)]
               : nullptr;
  }
  bool on_device() const override { return true; }

 private:
  std::size_t size_;
  char* base_ = nullptr;
  std::vector<char*> peers_;
};

}  // namespace

bool nvshmem_backend_built() { return true; }
std::string nvshmem_backend_version() {
  return std::to_string(NVSHMEM_VENDOR_MAJOR_VERSION) + "." + std::to_string(NVSHMEM_VENDOR_MINOR_VERSION) + "." +
         std::to_string(NVSHMEM_VENDOR_PATCH_VERSION);
}

std::unique_ptr<HeapBacking> make_nvshmem_heap(std::size_t bytes, const NodeContext& node, int world) {
  return std::make_unique<NvshmemHeap>(bytes, node, world);
}

namespace nvshmem_ops {
// nvshmem_ptr(a, my PE) is non-null exactly when a lies in this PE's heap:
// NVSHMEM tests a against one contiguous range, [heap base, heap base + heap
// size) (nvshmemi_ptr in its mem_heap.cpp). So a range whose first and last
// bytes pass lies wholly inside. It may span allocations, as NVSHMEM's own
// put may; buffers of nvshmemx_buffer_register_symmetric sit past that
// range and are refused.
bool in_heap(const void* addr, std::size_t bytes) {
  const auto first = reinterpret_cast<std::uintptr_t>(addr);
  if (bytes == 0 || first > UINTPTR_MAX - (bytes - 1)) return false;
  const int me = nvshmem_my_pe();
  return nvshmem_ptr(addr, me) != nullptr &&
         nvshmem_ptr(reinterpret_cast<const void*>(first + (bytes - 1)), me) != nullptr;
}
void putmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream) {
  nvshmemx_putmem_on_stream(dest, src, bytes, pe, stream);
}
void getmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream) {
  nvshmemx_getmem_on_stream(dest, src, bytes, pe, stream);
}
void quiet() { nvshmem_quiet(); }
}  // namespace nvshmem_ops

}  // namespace nvst
