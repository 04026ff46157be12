#include "ep/handle_memory.hpp"

#include <cstdint>
#include <limits>
#include <utility>

#include "nvst/error.hpp"
#include "runtime/runtime_internal.hpp"

namespace nvst::ep::detail {

HandlePool::HandlePool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  NVST_CHECK_CUDA(cudaMemPoolCreate(&pool_, &props));
  // Keep freed memory in the pool: giving it back to the driver at each
  // synchronisation would make the next dispatch map memory again.
  std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
  NVST_CHECK_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&release_, cudaStreamNonBlocking));
}

HandlePool::~HandlePool() {
  // The last handle or the Buffer is going: wait for the pending frees only.
  cudaStreamSynchronize(release_);
  cudaStreamDestroy(release_);
  cudaMemPoolDestroy(pool_);
}

void* HandlePool::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  NVST_CHECK_CUDA(cudaMallocFromPoolAsync(&p, bytes > 0 ? bytes : 1, pool_, stream));
  return p;
}

}  // namespace nvst::ep::detail

namespace nvst::ep {

HandleMemory::HandleMemory(std::shared_ptr<detail::HandlePool> p, std::size_t send_pos_bytes,
                           std::size_t node_pos_bytes, cudaStream_t stream)
    : pool(std::move(p)) {
  NVST_CHECK_CUDA(cudaEventCreateWithFlags(&last_use, cudaEventDisableTiming));
  send_pos = static_cast<int*>(pool->allocate(send_pos_bytes, stream));
  if (node_pos_bytes > 0) node_pos = static_cast<int*>(pool->allocate(node_pos_bytes, stream));
}

void HandleMemory::allocate_relay_pos(std::size_t bytes, cudaStream_t stream) {
  NVST_REQUIRE(relay_pos == nullptr, "nvst::ep::HandleMemory: relay_pos allocated twice");
  relay_pos = static_cast<int*>(pool->allocate(bytes, stream));
}

void HandleMemory::record_use(cudaStream_t stream) {
  if (nvst::detail::stream_capturing(stream)) return;
  NVST_CHECK_CUDA(cudaEventRecord(last_use, stream));
}

HandleMemory::~HandleMemory() {
  // Not checked: this may run at exit, after the CUDA runtime is gone.
  cudaStream_t s = pool->release_stream();
  cudaStreamWaitEvent(s, last_use, 0);  // an event never recorded is complete
  for (int* p : {send_pos, node_pos, relay_pos})
    if (p) cudaFreeAsync(p, s);
  cudaEventDestroy(last_use);
}

}  // namespace nvst::ep
