// Normal-mode dispatch and combine over NVLink: every PE stores straight
// into its peers' receive regions (symmetric memory mapped by the runtime).
//
// Dispatch, one kernel, B blocks on every PE:
//  1. ready: each block tells every peer "my PE started this launch", and
//     waits until every peer said so. A PE starts a launch only after its
//     earlier work on the stream, so nobody overwrites a receive region that
//     its owner is still reading (the previous dispatch's rows, say).
//  2. send: a warp per token. The token's row is read once and stored into
//     every PE that owns one of its experts, at row recv_offset[r] +
//     send_pos[t][r]: rows arrive packed by source PE, in token order.
//     topk_idx is translated to the receiver's local experts on the way.
//  3. done: each block adds 1 to done[me] on every peer after its stores
//     (release); the kernel ends once every peer's B blocks have done so.
//
// Combine, one kernel: ready as above; each received row i (from PE s, its
// j-th row) goes back to PE s's combine region at row
// peer_send_offset[s] + j; done as above; then each token's rows are summed
// in PE order in fp32 (deterministic), plus the bias, rounded once to bf16.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"
#include "nvst/error.hpp"

namespace nvst::ep::detail {

namespace {

constexpr int kMaxDstPerPass = 8;

__device__ __forceinline__ char* region_on(char* region, int pe) { return pe_ptr(region, pe); }

// Bounded for the widest Config (1024 threads): at most 64 registers.
__global__ void __launch_bounds__(1024) dispatch_kernel(NormalArgs a, DispatchInput in) {
  const int npes = dev::state().n_pes;
  const unsigned long long base = launch_base(a.counters);
  signal_all_pes(a.ready);
  wait_all_pes(a.ready, base + 1);

  const int lane = threadIdx.x & 31;
  const int warps_per_block = blockDim.x >> 5;
  const int warp_id = blockIdx.x * warps_per_block + (threadIdx.x >> 5);
  const int total_warps = gridDim.x * warps_per_block;
  const int experts_per_pe = a.num_experts / npes;
  const int scales_per_row = a.x_type == XType::kFP8 ? a.hidden / 128 : 0;
  const char* x = static_cast<const char*>(in.x);

  for (int t = warp_id; t < a.num_tokens; t += total_warps) {
    const int* pos = a.send_pos + static_cast<std::size_t>(t) * npes;
    // Destinations in groups of kMaxDstPerPass (one pass reads the row once).
    for (int r0 = 0; r0 < npes; r0 += kMaxDstPerPass) {
      char* dst_x[kMaxDstPerPass];
      int dst_pe[kMaxDstPerPass], dst_row[kMaxDstPerPass];
      int n = 0;
      for (int r = r0; r < npes && r < r0 + kMaxDstPerPass; ++r) {
        const int p = pos[r];
        if (p < 0) continue;
        dst_pe[n] = r;
        dst_row[n] = a.recv_offset[r] + p;
        dst_x[n] = region_on(a.dispatch_region, r) + a.dr.x + static_cast<std::size_t>(dst_row[n]) * a.dr.row_bytes;
        ++n;
      }
      if (n == 0) continue;
      warp_copy_row_multi<kMaxDstPerPass>(dst_x, n, x + static_cast<std::size_t>(t) * a.dr.row_bytes, a.dr.row_bytes);
      for (int d = 0; d < n; ++d) {
        char* region = region_on(a.dispatch_region, dst_pe[d]);
        const std::size_t row = static_cast<std::size_t>(dst_row[d]);
        if (scales_per_row) {
          float* sc = reinterpret_cast<float*>(region + a.dr.scales) + row * scales_per_row;
          for (int i = lane; i < scales_per_row; i += 32) sc[i] = in.x_scales[static_cast<std::size_t>(t) * scales_per_row + i];
        }
        if (lane < a.num_topk) {
          const std::size_t k = static_cast<std::size_t>(t) * a.num_topk + lane;
          const std::int64_t e = in.topk_idx[k];
          const int first = dst_pe[d] * experts_per_pe;
          const bool local = e >= first && e < first + experts_per_pe;
          reinterpret_cast<std::int64_t*>(region + a.dr.topk_idx)[row * a.num_topk + lane] = local ? e - first : -1;
          if (in.topk_weights)
            reinterpret_cast<float*>(region + a.dr.topk_weights)[row * a.num_topk + lane] =
                local ? in.topk_weights[k] : 0.0f;
        }
        if (lane == 0) reinterpret_cast<int*>(region + a.dr.src_idx)[row] = t;
      }
    }
  }
  signal_all_pes(a.done);
  wait_all_pes(a.done, base + gridDim.x);
  launch_end(a.counters, base);
}

__global__ void __launch_bounds__(1024) combine_kernel(NormalArgs a, CombineInput in, CombineOutput out, int num_recv) {
  const dev::DeviceState& s = dev::state();
  const int npes = s.n_pes;
  const unsigned long long base = launch_base(a.counters);
  signal_all_pes(a.ready);
  wait_all_pes(a.ready, base + 1);

  const int lane = threadIdx.x & 31;
  const int warps_per_block = blockDim.x >> 5;
  const int warp_id = blockIdx.x * warps_per_block + (threadIdx.x >> 5);
  const int total_warps = gridDim.x * warps_per_block;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2;
  const char* x = static_cast<const char*>(in.x);

  // 1. Every received row back to its source PE.
  for (int i = warp_id; i < num_recv; i += total_warps) {
    int src = 0;
    while (src + 1 < npes && a.recv_begin[src + 1] <= i) ++src;
    const int row = a.peer_send_offset[src] + (i - a.recv_begin[src]);
    char* region = region_on(a.combine_region, src);
    char* dst = region + a.cr.x + static_cast<std::size_t>(row) * row_bytes;
    warp_copy_row_multi<1>(&dst, 1, x + static_cast<std::size_t>(i) * row_bytes, row_bytes);
    if (in.topk_weights && lane < a.num_topk)
      reinterpret_cast<float*>(region + a.cr.topk_weights)[static_cast<std::size_t>(row) * a.num_topk + lane] =
          in.topk_weights[static_cast<std::size_t>(i) * a.num_topk + lane];
  }
  signal_all_pes(a.done);
  wait_all_pes(a.done, base + gridDim.x);

  // 2. Sum each token's rows, PE by PE, in fp32.
  const char* region = a.combine_region;
  const auto* rows = reinterpret_cast<const __nv_bfloat16*>(region + a.cr.x);
  const auto* bias = static_cast<const __nv_bfloat16*>(in.bias);
  auto* result = static_cast<__nv_bfloat16*>(out.combined_x);
  const int vecs = a.hidden / 8;  // 8 bf16 per 16-byte vector
  for (int t = warp_id; t < a.num_tokens; t += total_warps) {
    const int* pos = a.send_pos + static_cast<std::size_t>(t) * npes;
    for (int v = lane; v < vecs; v += 32) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int r = 0; r < npes; ++r) {
        if (pos[r] < 0) continue;
        const std::size_t row = static_cast<std::size_t>(a.send_offset[r] + pos[r]);
        const int4 q = reinterpret_cast<const int4*>(rows + row * a.hidden)[v];
        const auto* h = reinterpret_cast<const __nv_bfloat16*>(&q);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(h[k]);
      }
      if (bias) {
        const int4 q = reinterpret_cast<const int4*>(bias + static_cast<std::size_t>(t) * a.hidden)[v];
        const auto* h = reinterpret_cast<const __nv_bfloat16*>(&q);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(h[k]);
      }
      int4 o;
      auto* oh = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
      for (int k = 0; k < 8; ++k) oh[k] = __float2bfloat16(acc[k]);
      reinterpret_cast<int4*>(result + static_cast<std::size_t>(t) * a.hidden)[v] = o;
    }
    if (in.topk_weights && out.combined_topk_weights && lane < a.num_topk) {
      const auto* w = reinterpret_cast<const float*>(region + a.cr.topk_weights);
      float sum = 0;
      for (int r = 0; r < npes; ++r)
        if (pos[r] >= 0) sum += w[static_cast<std::size_t>(a.send_offset[r] + pos[r]) * a.num_topk + lane];
      out.combined_topk_weights[static_cast<std::size_t>(t) * a.num_topk + lane] = sum;
    }
  }
  launch_end(a.counters, base);
}

}  // namespace

void launch_normal_dispatch(const NormalArgs& a, const DispatchInput& in, const Config& c, cudaStream_t stream) {
  dispatch_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in);
  NVST_CHECK_LAUNCH();
}

void launch_normal_combine(const NormalArgs& a, const CombineInput& in, const CombineOutput& out, int num_recv,
                           const Config& c, cudaStream_t stream) {
  combine_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in, out, num_recv);
  NVST_CHECK_LAUNCH();
}

void preload_normal_kernels() {
  // Lazy loading waits for running kernels; these spin on peers, so load
  // them before any of them runs (see runtime's preload_proxy_kernels).
  cudaFuncAttributes attr{};
  NVST_CHECK_CUDA(cudaFuncGetAttributes(&attr, dispatch_kernel));
  NVST_CHECK_CUDA(cudaFuncGetAttributes(&attr, combine_kernel));
}

}  // namespace nvst::ep::detail
