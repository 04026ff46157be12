// The host side of the device API: filling the kernels' view of the job and
// the few kernels the host API launches. Implemented in device_runtime.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "nvst/device/state.cuh"

namespace nvst::detail {

void upload_device_state(const dev::DeviceState& state);
// Describes the failure a kernel wrote into the mailbox, or "" if none.
std::string describe_device_error(const dev::DeviceError* mailbox);
// A one-block barrier_all kernel on `stream`.
void launch_barrier_all(cudaStream_t stream);
// *word += value on the GPU, ordered in `stream` (the proxy applies a
// signal ADD that arrived through its inbox).
void launch_signal_add(std::uint64_t* word, std::uint64_t value, cudaStream_t stream);
// One-thread / one-block kernels behind the stream-ordered signal API
// (nvst::signal_op_on_stream, putmem_signal_on_stream,
// signal_wait_until_on_stream). op and cmp are dev::SignalOp / dev::Cmp.
void launch_signal_op(std::uint64_t* sig, std::uint64_t value, int op, int pe, cudaStream_t stream);
void launch_putmem_signal_block(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig,
                                std::uint64_t value, int op, int pe, cudaStream_t stream);
void launch_signal_wait_until(std::uint64_t* sig, int cmp, std::uint64_t value, cudaStream_t stream);
// Loads the host API's own kernels now (at init; see device_runtime.cu).
void preload_host_api_kernels();
// Loads the proxy's kernels now (see device_runtime.cu for why).
void preload_proxy_kernels();

}  // namespace nvst::detail
