#include "device/device_runtime.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "nvst/device.cuh"
#include "nvst/error.hpp"

namespace nvst::dev {
// The one copy of the kernels' view of the job (see state.cuh).
__constant__ DeviceState g_device_state;
__device__ int g_device_failure_claimed = 0;
}  // namespace nvst::dev

namespace nvst::detail {

namespace {
__global__ void barrier_all_kernel() { dev::barrier_all_block(); }

CallMismatchDescriber g_call_mismatch_describer = nullptr;

const char* cmp_name(int cmp) {
  switch (static_cast<dev::Cmp>(cmp)) {
    case dev::Cmp::kEq: return "==";
    case dev::Cmp::kNe: return "!=";
    case dev::Cmp::kGt: return ">";
    case dev::Cmp::kGe: return ">=";
    case dev::Cmp::kLt: return "<";
    case dev::Cmp::kLe: return "<=";
  }
  return "?";
}
}  // namespace

void upload_device_state(const dev::DeviceState& state) {
  NVST_CHECK_CUDA(cudaMemcpyToSymbol(dev::g_device_state, &state, sizeof(state)));
}

void set_call_mismatch_describer(CallMismatchDescriber describe) { g_call_mismatch_describer = describe; }

namespace {
std::mutex g_job_failure_mu;
std::string g_job_failure;  // what stopped the job, as the bootstrap's watch heard it
}  // namespace

void note_job_failure(const std::string& why) {
  std::lock_guard<std::mutex> lock(g_job_failure_mu);
  if (g_job_failure.empty()) g_job_failure = why;
}

std::string describe_device_error(const dev::DeviceError* e) {
  if (e == nullptr) return "";
  const volatile dev::DeviceError* v = e;
  if (v->flag == 0) return "";
  std::ostringstream out;
  out << "PE " << v->my_pe << " (block " << v->block << ", thread " << v->thread << "): ";
  switch (static_cast<dev::FailKind>(v->kind)) {
    case dev::FailKind::kWaitTimeout:
      out << "timed out (NVST_DEVICE_TIMEOUT_S) waiting for the word at heap offset 0x" << std::hex << v->offset
          << std::dec << " to become " << cmp_name(v->cmp) << " " << v->expected << "; it holds " << v->observed;
      break;
    case dev::FailKind::kBarrierTimeout:
      out << "timed out (NVST_DEVICE_TIMEOUT_S) in a device barrier waiting for PE " << v->peer_pe
          << " to arrive at barrier " << v->expected << "; PE " << v->peer_pe << " last arrived at barrier "
          << v->observed;
      break;
    case dev::FailKind::kBadPe: out << "PE " << v->peer_pe << " is out of range"; break;
    case dev::FailKind::kNotSymmetric:
      out << "address 0x" << std::hex << v->offset << std::dec << " (+" << v->observed
          << " bytes) is not inside the symmetric heap (" << v->expected << " bytes)";
      break;
    case dev::FailKind::kUnreachable:
      out << "PE " << v->peer_pe
          << " is not reachable by load/store from this PE (another node: needs the proxy "
             "transport)";
      break;
    case dev::FailKind::kProxyTimeout:
      out << "timed out (NVST_DEVICE_TIMEOUT_S) waiting for the proxy (command ticket " << v->expected
          << ", proxy completed up to " << v->observed << ")"
          << (v->peer_pe >= 0 ? "; the command was for PE " + std::to_string(v->peer_pe) : std::string());
      break;
    case dev::FailKind::kProxyFailed:
      out << "the proxy thread of this PE failed (its error is in the log above)"
          << (v->peer_pe >= 0 ? "; this command was for PE " + std::to_string(v->peer_pe) : std::string());
      break;
    case dev::FailKind::kBadArgument:
      out << "bad input to a library kernel: element " << v->offset << " holds " << static_cast<long long>(v->observed)
          << ", outside [-1, " << v->expected << ")";
      break;
    case dev::FailKind::kCountMismatch:
      out << "PE " << v->peer_pe << " sends " << v->observed << " bytes to this PE, which expects " << v->expected
          << " (all_to_allv: recv_counts must equal the senders' send_counts)";
      break;
    case dev::FailKind::kPeerDied:
      if (v->peer_pe == v->my_pe)
        out << "this PE's runtime stopped while it waited";
      else
        out << "PE " << v->peer_pe << " died while this PE waited (the bootstrap's watch saw it go)";
      {
        std::lock_guard<std::mutex> lock(g_job_failure_mu);
        if (!g_job_failure.empty()) out << ": " << g_job_failure;
      }
      break;
    case dev::FailKind::kCallMismatch:
      if (g_call_mismatch_describer) {
        dev::DeviceError copy;
        std::memcpy(&copy, e, sizeof(copy));  // the kernel has trapped: nothing writes it any more
        out << g_call_mismatch_describer(copy);
      } else {
        out << "PE " << v->peer_pe << " made another collective call than this PE (call bits 0x" << std::hex
            << v->observed << ", this PE's 0x" << v->expected << std::dec << ")";
      }
      break;
    default: out << "unknown device failure kind " << v->kind;
  }
  return out.str();
}

namespace {
__global__ void signal_add_kernel(unsigned long long* word, unsigned long long value) {
  // System scope: kernels polling the word with ld.acquire.sys see it.
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
}
}  // namespace

void preload_kernels(std::span<const void* const> kernels) {
  cudaFuncAttributes attr{};
  for (const void* k : kernels) NVST_CHECK_CUDA(cudaFuncGetAttributes(&attr, k));
}
void preload_kernels(std::initializer_list<const void*> kernels) {
  preload_kernels(std::span<const void* const>(kernels.begin(), kernels.size()));
}

void launch_signal_add(std::uint64_t* word, std::uint64_t value, cudaStream_t stream) {
  signal_add_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<unsigned long long*>(word), value);
  NVST_CHECK_LAUNCH();
}

namespace {
__global__ void remote_atomic_kernel(void* word, std::uint8_t code, std::uint64_t operand, std::uint64_t compare,
                                     std::uint64_t* old) {
  const proxy::AtomicOp op = proxy::atomic_op(code);
  std::uint64_t v;
  if (proxy::atomic_width(code) == 8)
    v = dev::detail::apply_atomic<unsigned long long>(static_cast<unsigned long long*>(word), op, operand, compare);
  else
    v = dev::detail::apply_atomic<unsigned int>(static_cast<unsigned int*>(word), op,
                                                static_cast<unsigned int>(operand), static_cast<unsigned int>(compare));
  *reinterpret_cast<volatile std::uint64_t*>(old) = v;
  __threadfence_system();
}
}  // namespace

namespace {
template <typename T>
__device__ T atomic_by_code(T* dest, proxy::AtomicOp op, T operand, T compare, int pe) {
  switch (op) {
    case proxy::AtomicOp::kFetchAdd: return dev::atomic_fetch_add(dest, operand, pe);
    case proxy::AtomicOp::kCompareSwap: return dev::atomic_compare_swap(dest, compare, operand, pe);
    case proxy::AtomicOp::kSwap: return dev::atomic_swap(dest, operand, pe);
    case proxy::AtomicOp::kFetch: return dev::atomic_fetch(dest, pe);
  }
  return 0;
}
__global__ void atomic_kernel(void* dest, std::uint8_t code, std::uint64_t operand, std::uint64_t compare, int pe,
                              std::uint64_t* old) {
  const proxy::AtomicOp op = proxy::atomic_op(code);
  std::uint64_t v;
  if (proxy::atomic_width(code) == 8)
    v = atomic_by_code<unsigned long long>(static_cast<unsigned long long*>(dest), op, operand, compare, pe);
  else
    v = atomic_by_code<unsigned int>(static_cast<unsigned int*>(dest), op, static_cast<unsigned int>(operand),
                                     static_cast<unsigned int>(compare), pe);
  *reinterpret_cast<volatile std::uint64_t*>(old) = v;
  __threadfence_system();
}
}  // namespace

void launch_atomic(void* dest, std::uint8_t code, std::uint64_t operand, std::uint64_t compare, int pe,
                   std::uint64_t* old, cudaStream_t stream) {
  atomic_kernel<<<1, 1, 0, stream>>>(dest, code, operand, compare, pe, old);
  NVST_CHECK_LAUNCH();
}

void launch_remote_atomic(void* word, std::uint8_t code, std::uint64_t operand, std::uint64_t compare,
                          std::uint64_t* old, cudaStream_t stream) {
  remote_atomic_kernel<<<1, 1, 0, stream>>>(word, code, operand, compare, old);
  NVST_CHECK_LAUNCH();
}

namespace {
__global__ void signal_op_kernel(std::uint64_t* sig, std::uint64_t value, int op, int pe) {
  // Stream order put any earlier copy (copy engine) before this kernel; the
  // signal is a release after this thread's stores.
  dev::signal_op(sig, value, static_cast<dev::SignalOp>(op), pe);
}
__global__ void putmem_signal_block_kernel(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig,
                                           std::uint64_t value, int op, int pe) {
  // Blocking form: over NVLink the data and then the signal are stored; through
  // the proxy it returns when the command has completed.
  dev::putmem_signal_block(dest, src, bytes, sig, value, static_cast<dev::SignalOp>(op), pe);
}
__global__ void signal_wait_until_kernel(std::uint64_t* sig, int cmp, std::uint64_t value) {
  dev::signal_wait_until(sig, static_cast<dev::Cmp>(cmp), value);  // times out with a message
}
}  // namespace

void launch_signal_op(std::uint64_t* sig, std::uint64_t value, int op, int pe, cudaStream_t stream) {
  signal_op_kernel<<<1, 1, 0, stream>>>(sig, value, op, pe);
  NVST_CHECK_LAUNCH();
}

void launch_putmem_signal_block(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig, std::uint64_t value,
                                int op, int pe, cudaStream_t stream) {
  putmem_signal_block_kernel<<<1, 512, 0, stream>>>(dest, src, bytes, sig, value, op, pe);
  NVST_CHECK_LAUNCH();
}

void launch_signal_wait_until(std::uint64_t* sig, int cmp, std::uint64_t value, cudaStream_t stream) {
  signal_wait_until_kernel<<<1, 1, 0, stream>>>(sig, cmp, value);
  NVST_CHECK_LAUNCH();
}

const void* a_kernel_of_this_module() { return reinterpret_cast<const void*>(&barrier_all_kernel); }

void preload_runtime_kernels() {
  // The copy agent launches signal_add while user kernels spin waiting for
  // that very signal; a receiver's wait kernel is running when the host API
  // enqueues the credit signal behind it.
  preload_kernels({reinterpret_cast<const void*>(signal_add_kernel), reinterpret_cast<const void*>(signal_op_kernel),
                   reinterpret_cast<const void*>(putmem_signal_block_kernel),
                   reinterpret_cast<const void*>(signal_wait_until_kernel),
                   reinterpret_cast<const void*>(barrier_all_kernel),
                   reinterpret_cast<const void*>(remote_atomic_kernel), reinterpret_cast<const void*>(atomic_kernel)});
}

void launch_barrier_all(cudaStream_t stream) {
  barrier_all_kernel<<<1, 32, 0, stream>>>();
  NVST_CHECK_LAUNCH();
}

}  // namespace nvst::detail
