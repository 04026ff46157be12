// Stream-ordered signalling: nvshmemx_putmem_signal_on_stream,
// nvshmemx_signal_op_on_stream and nvshmemx_signal_wait_until_on_stream.
// Host code orders GPU-side handshakes in a stream without writing a kernel;
// the kernels are the device API's own (device_runtime.cu), so a PE on
// another node is reached through the proxy exactly as a kernel would.
#include <string>

#include "device/device_runtime.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
#include "runtime/runtime_internal.hpp"

namespace nvst {

bool detail::stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  NVST_CHECK_CUDA(cudaStreamIsCapturing(stream, &st));
  return st != cudaStreamCaptureStatusNone;
}

void putmem_signal_on_stream(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig_addr,
                             std::uint64_t signal, SignalOp op, int pe, cudaStream_t stream) {
  const char* fn = "putmem_signal_on_stream";
  detail::check_gpu_heap(fn);
  detail::check_pe(pe, fn);
  detail::check_signal_word(sig_addr, fn);
  if (bytes != 0) {
    NVST_REQUIRE(src != nullptr, "nvst::", fn, ": src is null");
    detail::check_symmetric(dest, bytes, fn, "dest");
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

void signal_op_on_stream(std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe, cudaStream_t stream) {
  const char* fn = "signal_op_on_stream";
  detail::check_gpu_heap(fn);
  detail::check_pe(pe, fn);
  detail::check_signal_word(sig_addr, fn);
  detail::launch_signal_op(sig_addr, signal, static_cast<int>(op), pe, stream);
}

void signal_wait_until_on_stream(std::uint64_t* sig_addr, Cmp cmp, std::uint64_t value, cudaStream_t stream) {
  const char* fn = "signal_wait_until_on_stream";
  detail::check_gpu_heap(fn);
  detail::check_signal_word(sig_addr, fn);
  detail::launch_signal_wait_until(sig_addr, static_cast<int>(cmp), value, stream);
}

}  // namespace nvst
