// Programmatic dependent launch (sm_90): letting a kernel be launched while
// the kernel before it on the stream still runs, so that the launch's
// latency (a microsecond or two between dependent kernels) overlaps work.
//
// The earlier kernel calls allow_next_kernel in every block once it runs;
// the later one, launched by launch_early, starts with wait_previous_kernel,
// which returns once the kernel before it has finished and its writes are
// visible: the same order as a plain launch, only the launch moves ahead.
// The later kernel's blocks are placed only once every block of the earlier
// one has called allow_next_kernel (or exited), so they never keep the
// earlier kernel's blocks from starting. Both calls are no-ops for kernels
// launched without the attribute, and CUDA graphs keep the edge.
//
// A kernel that waits on the proxy (work across nodes) does not call
// allow_next_kernel. While the proxy thread launched small kernels of its
// own (staging copies, signal additions), the next kernel's waiting blocks
// could take their room on the SMs, so that the proxy never finished what
// the kernel waited for (the collective suite across logical nodes once
// hung so). The copy agent now makes those launches in its own context;
// early launches across nodes stay off until a run there shows them safe.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "nvst/error.hpp"

namespace nvst::detail {

__device__ __forceinline__ void allow_next_kernel() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Launches kernel<<<blocks, threads, 0, stream>>>(args...), with `early`
// as described above (the kernel must begin with wait_previous_kernel),
// without it as a plain launch.
template <typename... Params, typename... Args>
void launch_early(bool early, void (*kernel)(Params...), dim3 blocks, dim3 threads, cudaStream_t stream,
                  Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = blocks;
  cfg.blockDim = threads;
  cfg.stream = stream;
  cfg.attrs = early ? &attr : nullptr;
  cfg.numAttrs = early ? 1 : 0;
  NVST_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace nvst::detail
