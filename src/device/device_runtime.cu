#include "device/device_runtime.hpp"

#include <sstream>

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

std::string describe_device_error(const dev::DeviceError* e) {
  if (e == nullptr) return "";
  const volatile dev::DeviceError* v = e;
  if (v->flag == 0) return "";
  std::ostringstream out;
  out << "PE " << v->my_pe << " (block " << v->block << ", thread " << v->thread << "): ";
  switch (static_cast<dev::FailKind>(v->kind)) {
    case dev::FailKind::kWaitTimeout:
      out << "timed out (NVST_DEVICE_TIMEOUT_S) waiting for the word at heap offset 0x" << std::hex
          << v->offset << std::dec << " to become " << cmp_name(v->cmp) << " " << v->expected
          << "; it holds " << v->observed;
      break;
    case dev::FailKind::kBarrierTimeout:
      out << "timed out (NVST_DEVICE_TIMEOUT_S) in a device barrier waiting for PE " << v->peer_pe
          << " to arrive at barrier " << v->expected << "; PE " << v->peer_pe
          << " last arrived at barrier " << v->observed;
      break;
    case dev::FailKind::kBadPe:
      out << "PE " << v->peer_pe << " is out of range";
      break;
    case dev::FailKind::kNotSymmetric:
      out << "address 0x" << std::hex << v->offset << std::dec << " (+" << v->observed
          << " bytes) is not inside the symmetric heap (" << v->expected << " bytes)";
      break;
    case dev::FailKind::kUnreachable:
      out << "PE " << v->peer_pe
          << " is not reachable by load/store from this PE (another node: needs the proxy "
             "transport)";
      break;
    default:
      out << "unknown device failure kind " << v->kind;
  }
  return out.str();
}

void launch_barrier_all(cudaStream_t stream) {
  barrier_all_kernel<<<1, 32, 0, stream>>>();
  NVST_CHECK_LAUNCH();
}

}  // namespace nvst::detail
