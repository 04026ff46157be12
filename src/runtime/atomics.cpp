// The host API's remote atomics (nvst.hpp): checks, then the proxy (host
// heaps) or a one-thread kernel (GPU heaps).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/device_runtime.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
#include "runtime/runtime_internal.hpp"
#include "transport/proxy.hpp"
#include "transport/proxy_atomic.hpp"

namespace nvst::detail {

namespace {
const char* atomic_name(proxy::AtomicOp op) {
  switch (op) {
    case proxy::AtomicOp::kFetchAdd: return "atomic_fetch_add";
    case proxy::AtomicOp::kCompareSwap: return "atomic_compare_swap";
    case proxy::AtomicOp::kSwap: return "atomic_swap";
    case proxy::AtomicOp::kFetch: return "atomic_fetch";
  }
  return "atomic";
}

// A mapped pinned word per thread for the kernel's answer, made once per
// runtime (init_generation) and left to the process's end.
std::uint64_t* answer_word() {
  thread_local std::uint64_t generation = 0;
  thread_local std::uint64_t* word = nullptr;
  if (word == nullptr || generation != init_generation()) {
    void* p = nullptr;
    NVST_CHECK_CUDA(cudaHostAlloc(&p, sizeof(std::uint64_t), cudaHostAllocMapped));
    word = static_cast<std::uint64_t*>(p);
    generation = init_generation();
  }
  return word;
}
}  // namespace

std::uint64_t atomic_word(proxy::AtomicOp op, void* dest, std::size_t width, std::uint64_t operand,
                          std::uint64_t compare, int pe) {
  const char* fn = atomic_name(op);
  check_pe(pe, fn);
  check_symmetric(dest, width, fn, "dest");
  NVST_REQUIRE(reinterpret_cast<std::uintptr_t>(dest) % width == 0, "nvst::", fn, ": dest ", dest,
               " is not aligned to its ", width, " bytes");
  const std::uint8_t code = proxy::atomic_code(op, width);
  if (heap_on_device(fn)) {
    std::uint64_t* old = answer_word();
    cudaStream_t stream = cudaStreamPerThread;
    launch_atomic(dest, code, operand, compare, pe, old, stream);
    NVST_CHECK_CUDA(cudaStreamSynchronize(stream));
    return *reinterpret_cast<volatile std::uint64_t*>(old);
  }
  if (Proxy* proxy = runtime_proxy(fn)) {
    proxy::Command c{};
    c.pe = static_cast<std::uint32_t>(pe);
    c.sig = heap_offset(dest);
    c.sig_value = operand;
    c.dest = compare;
    c.sig_op = code;
    return proxy->atomic(c);
  }
  // No proxy (a job whose every PE this one reaches by load/store).
  char* near = static_cast<char*>(ptr(dest, pe));
  NVST_REQUIRE(near != nullptr, "nvst::", fn, ": PE ", pe, " is not reachable by load/store and there is no proxy");
  return proxy_atomic::apply_host(near, 0, code, operand, compare);
}

}  // namespace nvst::detail
