// For the project's own tools (benchmarks' baselines), not for users: the
// job's bootstrap, so a tool can open its own fabric endpoints next to ours.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nvst {
class Bootstrap;
class Proxy;
namespace detail {
Bootstrap& runtime_bootstrap();
// Counts nvst::init calls in this process, so libraries on top can tell
// that state they keep belongs to an earlier (finalized) runtime.
std::uint64_t init_generation();
// The runtime's argument checks, for the host API's other files
// (stream_signal.cpp): each throws nvst::Error naming `fn`.
void check_pe(int pe, const char* fn);
void check_symmetric(const void* addr, std::size_t bytes, const char* fn, const char* what);
void check_signal_word(const std::uint64_t* sig, const char* fn);
void check_gpu_heap(const char* fn);
// The host API's other files (atomics.cpp): this PE's proxy (nullptr when
// it has none), whether its heap is GPU memory, and a symmetric address's
// offset in it.
Proxy* runtime_proxy(const char* fn);
bool heap_on_device(const char* fn);
std::uint64_t heap_offset(const void* sym);
// PE `pe`'s fabric endpoint address, and how many incoming messages this
// PE's proxy dropped as forged (for the adversarial tests; empty / 0
// without a proxy).
std::vector<std::uint8_t> fabric_address_of(int pe);
std::uint64_t fabric_dropped();
// The key PE `pe` registered its heap (heap = true) or control region under.
std::uint64_t fabric_key(int pe, bool heap);
// True while `stream` is being captured into a CUDA graph (checked call).
bool stream_capturing(cudaStream_t stream);
}  // namespace detail
}  // namespace nvst
