// Host-launched forms of the structures' device operations, for callers
// without kernels of their own (the Python package's GPU handles): each is
// one GPU thread on `stream`, ordered with the caller's other work there.
// The addresses are GPU memory (symmetric where the structure says so).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "nvst/structures/ring_buffer.hpp"

namespace nvst::structures {

// ring_push of the item at `src` (this GPU's memory) into `consumer`'s ring.
void launch_ring_push(const RingView& ring, int consumer, const void* src, cudaStream_t stream);
// ring_pop from this PE's ring into `dst` (this GPU's memory).
void launch_ring_pop(const RingView& ring, void* dst, cudaStream_t stream);

}  // namespace nvst::structures
