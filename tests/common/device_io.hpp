// Test data to and from the device: for the GPU tests (tests/gpu).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <cuda_runtime_api.h>

#include "nvst/error.hpp"

namespace nvst::test {

// A copy of v on the device, complete on return. cudaMemcpy from pageable
// memory returns once the bytes are staged, before the DMA has landed, and
// the kernels run on a non-blocking stream that does not wait for it: a PE
// whose next upload had nothing to copy once launched its combine on the
// previous iteration's bytes.
template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d), std::max<std::size_t>(1, v.size()) * sizeof(T) + 16));
  if (!v.empty()) NVST_CHECK_CUDA(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  return d;
}
template <typename T>
std::vector<T> download(const T* d, std::size_t n) {
  std::vector<T> v(n);
  if (n) NVST_CHECK_CUDA(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace nvst::test
