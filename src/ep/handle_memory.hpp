// Device memory of dispatch handles, allocated without waiting for the
// device. cudaMalloc and cudaFree may wait for every running kernel, and
// across nodes a running dispatch waits for the proxy, whose own CUDA calls
// then wait behind them: the job hangs until the device timeout (docs/09,
// "A limitation found on the way"). A first dispatch runs exactly then
// (the previous layer's combine is still in flight), and replacing a handle
// frees the old one's arrays. So handle arrays come from a stream-ordered
// pool of this Buffer (cudaMallocAsync, cudaFreeAsync), and are given back
// only after the last kernel that read them, marked by an event.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace nvst::ep::detail {

// A stream-ordered pool that keeps freed memory. One per Buffer, which it
// outlives while handles hold arrays from it; and one per device for the
// layout's scratch (layout.cu).
class HandlePool {
 public:
  explicit HandlePool(int device);
  ~HandlePool();
  HandlePool(const HandlePool&) = delete;
  HandlePool& operator=(const HandlePool&) = delete;
  // `bytes` (at least 1) ordered on `stream`; never waits for the device.
  void* allocate(std::size_t bytes, cudaStream_t stream);
  cudaStream_t release_stream() const { return release_; }

 private:
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t release_ = nullptr;  // frees run here, after each array's last use
};

}  // namespace nvst::ep::detail

namespace nvst::ep {

// The arrays of one handle and the event after their last use so far.
struct HandleMemory {
  HandleMemory(std::shared_ptr<detail::HandlePool> pool, std::size_t send_pos_bytes, std::size_t node_pos_bytes,
               cudaStream_t stream);
  ~HandleMemory();
  HandleMemory(const HandleMemory&) = delete;
  HandleMemory& operator=(const HandleMemory&) = delete;
  // relay_pos is sized by the count exchange, after the others.
  void allocate_relay_pos(std::size_t bytes, cudaStream_t stream);
  // Work on `stream` queued so far reads the arrays: free them after it.
  // Not recorded while `stream` is being captured: a graph that uses a
  // handle must not outlive it (as with any memory a graph reads).
  void record_use(cudaStream_t stream);

  std::shared_ptr<detail::HandlePool> pool;
  int* send_pos = nullptr;
  int* node_pos = nullptr;
  int* relay_pos = nullptr;
  cudaEvent_t last_use = nullptr;
};

}  // namespace nvst::ep
