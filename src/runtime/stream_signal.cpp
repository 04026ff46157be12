// Stream-ordered signalling: nvshmemx_putmem_signal_on_stream,
// nvshmemx_signal_op_on_stream and nvshmemx_signal_wait_until_on_stream.
// Host code orders GPU-side handshakes in a stream without writing a kernel;
// the kernels are the device API's own (device_runtime.cu), so a PE on
// another node is reached through the proxy exactly as a kernel would.
#include <string>

#include "device/device_runtime.hpp"
#include "nvst/nvst.hpp"

namespace nvst {

namespace {

void require_gpu_heap(const char* fn) {
  NVST_REQUIRE(device() >= 0, "nvst::", fn,
               ": needs a GPU heap (this PE's heap is in host memory; use the host-side forms)");
}

void require_signal_word(const std::uint64_t* sig, const char* fn) {
  NVST_REQUIRE(sig != nullptr && reinterpret_cast<std::uintptr_t>(sig) % 8 == 0, "nvst::", fn,
               ": the signal word must be a non-null, 8-byte aligned symmetric address");
  NVST_REQUIRE(is_symmetric(sig, 8), "nvst::", fn, ": the signal word is not in the symmetric heap");
}

void require_pe(int pe, const char* fn) {
  NVST_REQUIRE(pe >= 0 && pe < n_pes(), "nvst::", fn, ": PE ", pe, " out of range [0, ", n_pes(), ")");
}

}  // namespace

void putmem_signal_on_stream(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig_addr,
                             std::uint64_t signal, SignalOp op, int pe, cudaStream_t stream) {
  const char* fn = "putmem_signal_on_stream";
  require_gpu_heap(fn);
  require_pe(pe, fn);
  require_signal_word(sig_addr, fn);
  if (bytes != 0) {
    NVST_REQUIRE(src != nullptr, "nvst::", fn, ": src is null");
    NVST_REQUIRE(is_symmetric(dest, bytes), "nvst::", fn, ": dest (", bytes,
                 " bytes) is not inside the symmetric heap");
  }
  if (ptr(sig_addr, pe) != nullptr) {
    // NVLink: the copy engine moves the data at full bandwidth; the signal
    // kernel starts only after the copy has completed (stream order).
    putmem_on_stream(dest, src, bytes, pe, stream);
    detail::launch_signal_op(sig_addr, signal, static_cast<int>(op), pe, stream);
    return;
  }
  detail::launch_putmem_signal_block(dest, src, bytes, sig_addr, signal, static_cast<int>(op), pe, stream);
}

void signal_op_on_stream(std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe,
                         cudaStream_t stream) {
  const char* fn = "signal_op_on_stream";
  require_gpu_heap(fn);
  require_pe(pe, fn);
  require_signal_word(sig_addr, fn);
  detail::launch_signal_op(sig_addr, signal, static_cast<int>(op), pe, stream);
}

void signal_wait_until_on_stream(std::uint64_t* sig_addr, Cmp cmp, std::uint64_t value, cudaStream_t stream) {
  const char* fn = "signal_wait_until_on_stream";
  require_gpu_heap(fn);
  require_signal_word(sig_addr, fn);
  detail::launch_signal_wait_until(sig_addr, static_cast<int>(cmp), value, stream);
}

}  // namespace nvst
