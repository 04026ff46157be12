// One-thread kernels behind nvst/structures/launch.hpp.
#include "nvst/structures/launch.hpp"

#include "device/device_runtime.hpp"
#include "nvst/error.hpp"
#include "nvst/structures/device_ops.cuh"

namespace nvst::structures {

namespace {
__global__ void ring_push_kernel(RingView ring, int consumer, const void* src) {
  ring_push<DeviceOps>(ring, consumer, src);
}
__global__ void ring_pop_kernel(RingView ring, void* dst) { ring_pop<DeviceOps>(ring, dst); }

// Both loaded at the first launch of either: a pop kernel spins until an
// item comes, and loading a kernel lazily waits for the running ones
// (device_runtime.hpp, preload_kernels).
void preload_once() {
  static const bool loaded = [] {
    detail::preload_kernels(
        {reinterpret_cast<const void*>(ring_push_kernel), reinterpret_cast<const void*>(ring_pop_kernel)});
    return true;
  }();
  (void)loaded;
}
}  // namespace

void launch_ring_push(const RingView& ring, int consumer, const void* src, cudaStream_t stream) {
  preload_once();
  ring_push_kernel<<<1, 1, 0, stream>>>(ring, consumer, src);
  NVST_CHECK_LAUNCH();
}

void launch_ring_pop(const RingView& ring, void* dst, cudaStream_t stream) {
  preload_once();
  ring_pop_kernel<<<1, 1, 0, stream>>>(ring, dst);
  NVST_CHECK_LAUNCH();
}

}  // namespace nvst::structures
