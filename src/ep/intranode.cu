// Normal-mode dispatch and combine: every PE stores straight into its node
// peers' receive regions (symmetric memory mapped by the runtime), and puts
// through the proxy to PEs of other nodes.
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
//     A row for a PE of another node is stored the same way into this PE's
//     send_region instead, at row send_offset[r] + send_pos[t][r], so the
//     rows for each such PE end up contiguous, in the receiver's order.
//  3. done: each block adds 1 to done[me] on every node peer after its
//     stores (release). Across nodes, the block that finishes packing last
//     puts each array's run of rows to each PE of another node (five puts,
//     the last one carrying done = base + B, the value B additions would
//     give: tell_far in ep_device.cuh), then quiets before the kernel ends so
//     the staging may be reused. Either way every PE's done[me] grows by B.
//     The kernel ends once every peer's B blocks have done so.
//
// Combine, two kernels. Send (config.num_sms blocks): ready as above; each
// received row i from another PE s (its j-th row there) goes back to PE s's
// combine region at row peer_send_offset[s] + j; done as above. The rows
// from a PE of another node are contiguous in x, so block 0 puts them back
// in one put (and the weights in a second, carrying done). Reduce
// (every SM, a short memory-bound pass): wait for every PE's done, then sum
// each token's rows in PE order in fp32 (deterministic), plus the bias,
// rounded once to bf16. A PE's rows to itself never move: the reduction
// reads them in `x`. (One kernel with num_sms blocks spent 60% of its time
// in the reduction on 24 SMs: 201 GB/s against NCCL's 379, r1 of the ep round.)
//
// This is flat, not hierarchical: every row to another node crosses on its
// own (a token for two PEs of one remote node crosses twice; DeepEP sends it
// once to one of them and forwards over NVLink).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "device/device_runtime.hpp"
#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"
#include "nvst/error.hpp"

namespace nvst::ep::detail {

namespace {

constexpr int kMaxDstPerPass = 8;


// Thread r < n_pes of the calling block: if PE r is on another node, puts
// the rows this PE packed for it (send_region, rows [send_offset[r],
// send_offset[r + 1])) into its dispatch region at recv_offset[r], array by
// array, src_idx last with done[me] = `done_total` (put_runs_then_tell).
__device__ __forceinline__ void put_rows_to_other_nodes(const NormalArgs& a, int scales_per_row, bool weights,
                                                        std::uint64_t done_total) {
  const int r = static_cast<int>(threadIdx.x);
  if (r >= dev::state().n_pes || dev::on_node(r)) return;
  const std::size_t first = static_cast<std::size_t>(a.send_offset[r]);
  const std::size_t n = static_cast<std::size_t>(a.send_offset[r + 1]) - first;
  const std::size_t at = static_cast<std::size_t>(a.recv_offset[r]);
  const std::size_t K = static_cast<std::size_t>(a.num_topk);
  // {array offset, bytes per row}; an array this dispatch does not carry has 0.
  const std::size_t arrays[5][2] = {{a.dr.x, a.dr.row_bytes},
                                    {a.dr.scales, static_cast<std::size_t>(scales_per_row) * 4},
                                    {a.dr.topk_idx, K * 8},
                                    {a.dr.topk_weights, weights ? K * 4 : 0},
                                    {a.dr.src_idx, 4}};
  FarRun runs[5];
  for (int i = 0; i < 5; ++i) {
    const std::size_t off = arrays[i][0], row = arrays[i][1];
    runs[i] = {a.dispatch_region + off + at * row, a.send_region + off + first * row, n * row};
  }
  put_runs_then_tell(runs, 5, a.done, r, done_total);
}

// Bounded for the widest Config (1024 threads): at most 64 registers.
__global__ void __launch_bounds__(1024) dispatch_kernel(NormalArgs a, DispatchInput in) {
  const int npes = dev::state().n_pes;
  const unsigned long long base = enter_send_half(a.counters, a.ready);
  const auto [warp_id, total_warps, lane] = warp_grid();
  const int experts_per_pe = a.num_experts / npes;
  const int scales_per_row = a.x_type == XType::kFP8 ? a.hidden / 128 : 0;
  const char* x = static_cast<const char*>(in.x);

  for (int t = warp_id; t < a.num_tokens; t += total_warps) {
    const int* pos = a.send_pos + static_cast<std::size_t>(t) * npes;
    // Destinations in groups of kMaxDstPerPass (one pass reads the row once).
    for (int r0 = 0; r0 < npes; r0 += kMaxDstPerPass) {
      char* dst_region[kMaxDstPerPass];
      int dst_pe[kMaxDstPerPass], dst_row[kMaxDstPerPass];
      char* dst_x[kMaxDstPerPass];
      int n = 0;
      for (int r = r0; r < npes && r < r0 + kMaxDstPerPass; ++r) {
        const int p = pos[r];
        if (p < 0) continue;
        const bool near = dev::on_node(r);  // else: staged here for the put
        dst_pe[n] = r;
        dst_region[n] = near ? pe_ptr(a.dispatch_region, r) : a.send_region;
        dst_row[n] = (near ? a.recv_offset[r] : a.send_offset[r]) + p;
        dst_x[n] = dst_region[n] + a.dr.x + static_cast<std::size_t>(dst_row[n]) * a.dr.row_bytes;
        ++n;
      }
      if (n == 0) continue;
      warp_copy_row_multi<kMaxDstPerPass>(dst_x, n, x + static_cast<std::size_t>(t) * a.dr.row_bytes, a.dr.row_bytes);
      for (int d = 0; d < n; ++d) {
        char* region = dst_region[d];
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
  signal_all_pes(a.done, 0);
  const bool across = a.send_region != nullptr;
  const bool shipper = across && last_block_to_arrive(&a.counters->blocks_packed);
  if (shipper) put_rows_to_other_nodes(a, scales_per_row, in.topk_weights != nullptr, base + gridDim.x);
  wait_all_pes(a.done, base + gridDim.x);
  if (shipper && threadIdx.x == 0) dev::proxy_quiet();  // the next dispatch rewrites send_region
  launch_end(a.counters, base);
}

// Combine, send half (config.num_sms blocks): every received row that came
// from another PE goes back to it; rows this PE sent itself stay in `x` and
// the reduction reads them there.
__global__ void __launch_bounds__(1024) combine_send_kernel(NormalArgs a, CombineInput in, int num_recv) {
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, npes = s.n_pes;
  const unsigned long long base = enter_send_half(a.counters, a.ready);
  const auto [warp_id, total_warps, lane] = warp_grid();
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2;
  const char* x = static_cast<const char*>(in.x);
  const std::size_t K = static_cast<std::size_t>(a.num_topk);
  // Rows from PEs of other nodes: one put each of x and weights, by block 0,
  // the last with done = base + B.
  const int far = static_cast<int>(threadIdx.x);
  if (blockIdx.x == 0 && far < npes && !dev::on_node(far)) {
    const std::size_t lo = static_cast<std::size_t>(a.recv_begin[far]);
    const std::size_t n = static_cast<std::size_t>(a.recv_begin[far + 1]) - lo;
    const std::size_t at = static_cast<std::size_t>(a.peer_send_offset[far]);
    const FarRun runs[2] = {
        {a.combine_region + a.cr.x + at * row_bytes, x + lo * row_bytes, n * row_bytes},
        {a.combine_region + a.cr.topk_weights + at * K * 4, in.topk_weights + lo * K, in.topk_weights ? n * K * 4 : 0}};
    put_runs_then_tell(runs, 2, a.done, far, base + gridDim.x);
  }
  const int own_lo = a.recv_begin[me], own_hi = a.recv_begin[me + 1];
  const int remote = num_recv - (own_hi - own_lo);
  for (int j = warp_id; j < remote; j += total_warps) {
    const int i = j < own_lo ? j : j + (own_hi - own_lo);  // skip this PE's own rows
    int src = 0;
    while (src + 1 < npes && a.recv_begin[src + 1] <= i) ++src;
    if (!dev::on_node(src)) continue;  // went above
    const int row = a.peer_send_offset[src] + (i - a.recv_begin[src]);
    char* region = pe_ptr(a.combine_region, src);
    char* dst = region + a.cr.x + static_cast<std::size_t>(row) * row_bytes;
    warp_copy_row_multi<1>(&dst, 1, x + static_cast<std::size_t>(i) * row_bytes, row_bytes);
    if (in.topk_weights && lane < a.num_topk)
      reinterpret_cast<float*>(region + a.cr.topk_weights)[static_cast<std::size_t>(row) * a.num_topk + lane] =
          in.topk_weights[static_cast<std::size_t>(i) * a.num_topk + lane];
  }
  signal_all_pes(a.done, 0);
  // x may be rewritten once the combine is done: the proxy must have read it.
  if (blockIdx.x == 0 && threadIdx.x == 0) dev::proxy_quiet();
  launch_end(a.counters, base);
}

// Combine, receive half (every SM: a short, memory-bound pass): wait until
// every PE's send half finished, then sum each token's rows in PE order in
// fp32, plus the bias, rounded once to bf16. Two vectors per lane in flight.
__global__ void __launch_bounds__(512) combine_reduce_kernel(NormalArgs a, CombineInput in, CombineOutput out) {
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, npes = s.n_pes;
  wait_all_pes(a.done, *reinterpret_cast<const volatile unsigned long long*>(&a.counters->blocks_before));
  const auto [warp_id, total_warps, lane] = warp_grid();
  const auto* pushed = reinterpret_cast<const __nv_bfloat16*>(a.combine_region + a.cr.x);
  const auto* own = static_cast<const __nv_bfloat16*>(in.x);
  const auto* bias = static_cast<const __nv_bfloat16*>(in.bias);
  auto* result = static_cast<__nv_bfloat16*>(out.combined_x);
  const int vecs = a.hidden / 8;  // 8 bf16 per 16-byte vector
  for (int t = warp_id; t < a.num_tokens; t += total_warps) {
    const int* pos = a.send_pos + static_cast<std::size_t>(t) * npes;
    // The row each PE sent back for token t (its own row: still in x).
    auto row_of = [&](int r) -> const int4* {
      const __nv_bfloat16* base = r == me ? own + static_cast<std::size_t>(a.recv_begin[me] + pos[r]) * a.hidden
                                          : pushed + static_cast<std::size_t>(a.send_offset[r] + pos[r]) * a.hidden;
      return reinterpret_cast<const int4*>(base);
    };
    for (int v0 = lane; v0 < vecs; v0 += 64) {
      const int v1 = v0 + 32;
      const bool two = v1 < vecs;
      float acc[2][8] = {};
      for (int r = 0; r < npes; ++r) {
        if (pos[r] < 0) continue;
        const int4* row = row_of(r);
        const int4 q0 = load_cg(row + v0);
        const int4 q1 = two ? load_cg(row + v1) : q0;
        const auto* h0 = reinterpret_cast<const __nv_bfloat16*>(&q0);
        const auto* h1 = reinterpret_cast<const __nv_bfloat16*>(&q1);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          acc[0][k] += __bfloat162float(h0[k]);
          acc[1][k] += __bfloat162float(h1[k]);
        }
      }
      for (int u = 0; u < (two ? 2 : 1); ++u) {
        const int v = u ? v1 : v0;
        if (bias) {
          const int4 q = reinterpret_cast<const int4*>(bias + static_cast<std::size_t>(t) * a.hidden)[v];
          const auto* h = reinterpret_cast<const __nv_bfloat16*>(&q);
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[u][k] += __bfloat162float(h[k]);
        }
        int4 o;
        auto* oh = reinterpret_cast<__nv_bfloat16*>(&o);
#pragma unroll
        for (int k = 0; k < 8; ++k) oh[k] = __float2bfloat16(acc[u][k]);
        reinterpret_cast<int4*>(result + static_cast<std::size_t>(t) * a.hidden)[v] = o;
      }
    }
    if (in.topk_weights && out.combined_topk_weights && lane < a.num_topk) {
      const auto* w = reinterpret_cast<const float*>(a.combine_region + a.cr.topk_weights);
      float sum = 0;
      for (int r = 0; r < npes; ++r) {
        if (pos[r] < 0) continue;
        const std::size_t row = r == me ? static_cast<std::size_t>(a.recv_begin[me] + pos[r])
                                        : static_cast<std::size_t>(a.send_offset[r] + pos[r]);
        sum += load_cg((r == me ? in.topk_weights : w) + row * a.num_topk + lane);
      }
      out.combined_topk_weights[static_cast<std::size_t>(t) * a.num_topk + lane] = sum;
    }
  }
}

}  // namespace

void launch_normal_dispatch(const NormalArgs& a, const DispatchInput& in, const Config& c, cudaStream_t stream) {
  dispatch_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in);
  NVST_CHECK_LAUNCH();
}

void launch_normal_combine(const NormalArgs& a, const CombineInput& in, const CombineOutput& out, int num_recv,
                           const Config& c, cudaStream_t stream) {
  const int sms = device_sm_count();
  combine_send_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in, num_recv);
  NVST_CHECK_LAUNCH();
  const int blocks = std::max(1, std::min(sms, (a.num_tokens + 15) / 16));
  combine_reduce_kernel<<<blocks, 512, 0, stream>>>(a, in, out);
  NVST_CHECK_LAUNCH();
}

void preload_normal_kernels() {
  // These spin on peers: load them before any of them runs.
  nvst::detail::preload_kernels({reinterpret_cast<const void*>(dispatch_kernel),
                                 reinterpret_cast<const void*>(combine_send_kernel),
                                 reinterpret_cast<const void*>(combine_reduce_kernel)});
}

}  // namespace nvst::ep::detail
