// The host side of the device API: filling the kernels' view of the job and
// the few kernels the host API launches. Implemented in device_runtime.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "nvst/device/state.cuh"

namespace nvst::detail {

void upload_device_state(const dev::DeviceState& state);
// Describes the failure a kernel wrote into the mailbox, or "" if none.
std::string describe_device_error(const dev::DeviceError* mailbox);
// What stopped the job (the first failure the bootstrap's watch reported):
// a kPeerDied description says it.
void note_job_failure(const std::string& why);
// How a kCallMismatch failure is put in words: the collectives (a layer
// above) know what a call's bits mean, and set this once.
using CallMismatchDescriber = std::string (*)(const dev::DeviceError& failure);
void set_call_mismatch_describer(CallMismatchDescriber describe);
// A one-block barrier_all kernel on `stream`.
void launch_barrier_all(cudaStream_t stream);
// *word += value on the GPU, ordered in `stream` (the proxy applies a
// signal ADD that arrived through its inbox).
void launch_signal_add(std::uint64_t* word, std::uint64_t value, cudaStream_t stream);
// A remote atomic that arrived through the proxy's inbox, applied by a
// one-thread kernel on `stream` to the word at `word` (code:
// proxy::atomic_code), its old value written to `old` (mapped host memory).
void launch_remote_atomic(void* word, std::uint8_t code, std::uint64_t operand, std::uint64_t compare,
                          std::uint64_t* old, cudaStream_t stream);
// The host API's atomics on GPU heaps: one thread runs the device API's
// atomic (any PE) on `stream`, its old value written to `old` (mapped host
// memory).
void launch_atomic(void* dest, std::uint8_t code, std::uint64_t operand, std::uint64_t compare, int pe,
                   std::uint64_t* old, cudaStream_t stream);
// One-thread / one-block kernels behind the stream-ordered signal API
// (nvst::signal_op_on_stream, putmem_signal_on_stream,
// signal_wait_until_on_stream). op and cmp are dev::SignalOp / dev::Cmp.
void launch_signal_op(std::uint64_t* sig, std::uint64_t value, int op, int pe, cudaStream_t stream);
void launch_putmem_signal_block(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig, std::uint64_t value,
                                int op, int pe, cudaStream_t stream);
void launch_signal_wait_until(std::uint64_t* sig, int cmp, std::uint64_t value, cudaStream_t stream);
// Loads these kernels now. CUDA loads kernels lazily
// (CUDA_MODULE_LOADING=LAZY, the default), and loading one waits for the
// kernels already running. A library kernel first launched while another
// kernel spins waiting on a peer (stuck the same way) would deadlock until
// the device timeout: every kernel launched behind a spinning one is loaded
// up front with this.
void preload_kernels(std::initializer_list<const void*> kernels);
void preload_kernels(std::span<const void* const> kernels);
// The runtime's own (host API, proxy), at init.
void preload_runtime_kernels();
// A kernel of the CUDA module that holds the runtime's device code (and, in
// nvst_nvshmem, NVSHMEM's device library): relocatable device code is linked
// into one module per program, so this names that module.
const void* a_kernel_of_this_module();

}  // namespace nvst::detail
