// The memory behind the symmetric heap, and how node peers reach it. Three
// kinds (nvst::HeapKind): cuMem + fd passing (NVLink), legacy CUDA IPC, and
// host memory. The allocator (heap_allocator.hpp) never sees which one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "transport/copy_agent.hpp"

namespace nvst {

class Bootstrap;

// What a backing needs to know about this PE's node.
struct NodeContext {
  Bootstrap* bootstrap;
  int rank;                             // world rank
  std::vector<int> node_pes;            // world ranks of the node, ascending
  int node_index;                       // this PE's index in node_pes
  int device;                           // CUDA device ordinal, -1 for host heaps
  std::array<std::uint8_t, 16> cookie;  // the job's cookie (socket dir, fd auth)
  double timeout_s;
};

class HeapBacking {
 public:
  virtual ~HeapBacking() = default;
  virtual char* local_base() const = 0;
  virtual std::size_t size() const = 0;
  // Node member i's heap as mapped into this process, or nullptr.
  virtual char* peer_base(int node_index) const = 0;
  virtual bool on_device() const = 0;
  // Keeps the memory alive past this object (host heaps), else null.
  virtual std::shared_ptr<void> lease() const { return nullptr; }
  // How another process of this PE (the copy agent) maps this PE's heap:
  // a new descriptor the caller closes, or an IPC handle. Empty for host
  // heaps.
  virtual HeapShare share() const { return {}; }
};

std::unique_ptr<HeapBacking> make_host_heap(std::size_t bytes);
// Collective over the node (uses the bootstrap for barriers).
std::unique_ptr<HeapBacking> make_cumem_heap(std::size_t bytes, const NodeContext& node);
// Collective over the world (exchanges IPC handles through the bootstrap).
std::unique_ptr<HeapBacking> make_cudaipc_heap(std::size_t bytes, const NodeContext& node);

// NVSHMEM underneath (NVST_BACKEND=nvshmem; heap_nvshmem.cpp, built into
// nvst::nvst_nvshmem only; heap_nvshmem_absent.cpp elsewhere says so).
// Collective over the world: NVSHMEM is initialised with a unique ID that
// travels through our bootstrap, then the heap is one nvshmem_malloc.
// (nvshmem_backend_built and nvshmem_backend_version are public: nvst.hpp.)
std::unique_ptr<HeapBacking> make_nvshmem_heap(std::size_t bytes, const NodeContext& node, int world);
// The host API's operations in a job on NVSHMEM.
namespace nvshmem_ops {
// Whether NVSHMEM's symmetric heap on this PE holds all of [addr, addr+bytes)
// (bytes > 0): memory nvshmem_malloc returned, ours or anyone's.
bool in_heap(const void* addr, std::size_t bytes);
void putmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream);
void getmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream);
void quiet();
}  // namespace nvshmem_ops

}  // namespace nvst
