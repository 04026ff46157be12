// Legacy CUDA IPC heap (fallback where cuMem fd export is unavailable):
// cudaMalloc + cudaIpcGetMemHandle, handles exchanged through the bootstrap,
// cudaIpcOpenMemHandle on node peers. Peers' heaps land wherever the driver
// puts them, so the device API keeps one base pointer per node peer.
#include <cstring>

#include <cuda_runtime_api.h>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"
#include "runtime/heap_backing.hpp"

namespace nvst {

namespace {
class CudaIpcHeap final : public HeapBacking {
 public:
  CudaIpcHeap(std::size_t bytes, const NodeContext& node) : node_(node) {
    size_ = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    void* mine = nullptr;
    NVST_CHECK_CUDA(cudaMalloc(&mine, size_));
    const int n = static_cast<int>(node.node_pes.size());
    bases_.assign(static_cast<std::size_t>(n), nullptr);
    bases_[static_cast<std::size_t>(node.node_index)] = static_cast<char*>(mine);
    cudaIpcMemHandle_t handle{};
    NVST_CHECK_CUDA(cudaIpcGetMemHandle(&handle, mine));
    auto all = node.bootstrap->allgather(&handle, sizeof(handle), "cuda ipc heap handles");
    for (int i = 0; i < n; ++i) {
      if (i == node.node_index) continue;
      cudaIpcMemHandle_t h;
      std::memcpy(&h, all.data() + sizeof(h) * static_cast<std::size_t>(node.node_pes[static_cast<std::size_t>(i)]),
                  sizeof(h));
      void* p = nullptr;
      NVST_CHECK_CUDA(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
      bases_[static_cast<std::size_t>(i)] = static_cast<char*>(p);
    }
  }
  ~CudaIpcHeap() override {
    for (std::size_t i = 0; i < bases_.size(); ++i) {
      if (!bases_[i]) continue;
      if (static_cast<int>(i) == node_.node_index)
        cudaFree(bases_[i]);
      else
        cudaIpcCloseMemHandle(bases_[i]);
    }
  }
  char* local_base() const override { return bases_[static_cast<std::size_t>(node_.node_index)]; }
  std::size_t size() const override { return size_; }
  char* peer_base(int i) const override {
    return (i >= 0 && i < static_cast<int>(bases_.size())) ? bases_[static_cast<std::size_t>(i)] : nullptr;
  }
  bool on_device() const override { return true; }
  HeapShare share() const override {
    HeapShare s;
    s.ipc = true;
    NVST_CHECK_CUDA(cudaIpcGetMemHandle(&s.ipc_handle, local_base()));
    s.bytes = size_;
    return s;
  }

 private:
  NodeContext node_;
  std::size_t size_ = 0;
  std::vector<char*> bases_;
};
}  // namespace

std::unique_ptr<HeapBacking> make_cudaipc_heap(std::size_t bytes, const NodeContext& node) {
  return std::make_unique<CudaIpcHeap>(bytes, node);
}

}  // namespace nvst
