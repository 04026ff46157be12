// Normal-mode dispatch and combine: every PE stores straight into its node
// peers' receive regions (symmetric memory mapped by the runtime); rows for
// other nodes cross once per node, through the proxy, to a relay there that
// forwards them over NVLink (DeepEP's hierarchical scheme).
//
// Dispatch, one kernel, B blocks on every PE. Nodes are PEs [n*G, (n+1)*G);
// PE (n, g) relays for the PEs of local rank g on every other node.
//  1. ready: each block tells every peer "my PE started this launch", and
//     waits until every peer said so. A PE starts a launch only after its
//     earlier work on the stream, so nobody overwrites a receive region that
//     its owner is still reading (the previous dispatch's rows, say).
//  2. send: a warp per token. The token's row is read once and stored into
//     every node peer that owns one of its experts, at row recv_offset[r] +
//     send_pos[t][r]: rows arrive packed by source PE, in token order.
//     topk_idx is translated to the receiver's local experts on the way.
//     For each other node the token goes to, the row is stored once into
//     send_region at node_send_offset[n] + node_pos[t][n], with its global
//     top-k and, in dst_pos, its row in the stream to each PE of node n.
//  3. across nodes: the block that finishes packing last puts each node's
//     run of rows to this PE's relay there (six puts, one per array, the
//     last carrying done[me] = base + B: tell_far in ep_device.cuh). Then,
//     in a second kernel (dispatch_forward_kernel), every block waits for
//     its own relay inputs (done[s] of the PE of its
//     local rank on each other node) and forwards those rows, a warp per
//     row, to the PEs of this node that dst_pos names, at
//     relay_dst_offset[n * G + j] + dst_pos[j]: exactly where the source
//     would have stored them itself on one node. So the receiver's rows,
//     and everything downstream (the handle, the combine), do not depend on
//     how they travelled.
//  4. done: each block adds 1 to done[me] on every node peer after its
//     stores and forwards (release), then waits until every node peer's B
//     blocks did so. A PE's node peers forwarded everything from other
//     nodes before they counted, so that covers every source.
//
// Combine, the dispatch in reverse. Send: each received row i from a node
// peer s (its j-th row there) goes back to PE s's combine region at row
// peer_send_offset[s] + j. Reduce: sum each token's rows in PE order in
// fp32 (deterministic), another node's partial standing for its PEs, plus
// the biases, rounded once to bf16. A PE's rows to itself never move: the
// reduction reads them in `x`.
//  - On one node, one kernel (combine_kernel): senders flag each chunk of
//    rows at its source, and reducers sum a token as soon as the chunks
//    holding its rows are flagged, so the reduction overlaps the send.
//  - Across nodes, three: send (config.num_sms blocks; ready as above; rows
//    from other nodes are staged locally), relay (combine_relay_kernel:
//    once every node peer staged its rows, each relay sums, for every row
//    it forwarded, the results of the PEs it went to, fp32 in PE order,
//    rounded once, as DeepEP, and puts one row per token back to its
//    source, after the source's node peers' rows), and reduce (every SM,
//    after the node's done and this PE's relays' puts). done as above
//    (node peers add; relays set, with their put).
// (One kernel with only num_sms blocks spent 60% of its time in the
// reduction on 24 SMs: 201 GB/s against NCCL's 379, r1 of the ep round;
// the one-node kernel gives the reduction the SMs the send leaves.)
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "device/device_runtime.hpp"
#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"
#include "nvst/error.hpp"

namespace nvst::ep::detail {

namespace {

constexpr int kMaxDstPerPass = 8;

// Where a token's metadata comes from: the caller's input, or a relay row.
struct RowMeta {
  const float* scales;       // [scales_per_row] or nullptr
  const std::int64_t* topk;  // [K]: global expert ids
  const float* weights;      // [K] or nullptr
  int src_idx;
};

// Lanes of a warp write a row's metadata into row `row` of `region` (layout
// L): its top-k as PE `dst_pe`'s local experts (-1 elsewhere, weight 0), or
// unchanged when dst_pe < 0 (a relay row: the relay translates it).
__device__ __forceinline__ void write_row_meta(char* region, const DispatchRegion& L, std::size_t row, const RowMeta& m,
                                               int scales_per_row, int num_topk, int dst_pe, int experts_per_pe,
                                               int lane) {
  if (scales_per_row) {
    float* sc = reinterpret_cast<float*>(region + L.scales) + row * scales_per_row;
    for (int i = lane; i < scales_per_row; i += 32) sc[i] = load_cg(m.scales + i);
  }
  if (lane < num_topk) {
    const std::int64_t e = load_cg(m.topk + lane);
    const int first = dst_pe * experts_per_pe;
    const bool keep = dst_pe < 0 || (e >= first && e < first + experts_per_pe);
    reinterpret_cast<std::int64_t*>(region + L.topk_idx)[row * num_topk + lane] =
        dst_pe < 0 ? e : (keep ? e - first : -1);
    if (m.weights)
      reinterpret_cast<float*>(region + L.topk_weights)[row * num_topk + lane] =
          keep ? load_cg(m.weights + lane) : 0.0f;
  }
  if (lane == 0) reinterpret_cast<int*>(region + L.src_idx)[row] = m.src_idx;
}

// Thread n < N of the calling block: puts the rows this PE staged for node
// n (send_region rows [node_send_offset[n], node_send_offset[n + 1])) into
// its relay there, relay_region at row relay_put_offset[n], array by array,
// dst_pos last with done[me] = `done_total` (put_runs_then_tell).
__device__ __forceinline__ void put_rows_to_relays(const NormalArgs& a, int scales_per_row, bool weights,
                                                   std::uint64_t done_total) {
  const int n = static_cast<int>(threadIdx.x), me = dev::state().my_pe, G = a.pes_per_node;
  if (n >= a.n_nodes || n == me / G) return;
  const std::size_t first = static_cast<std::size_t>(a.node_send_offset[n]);
  const std::size_t rows = static_cast<std::size_t>(a.node_send_offset[n + 1]) - first;
  const std::size_t at = static_cast<std::size_t>(a.relay_put_offset[n]);
  const std::size_t K = static_cast<std::size_t>(a.num_topk);
  // {array offset, bytes per row}; an array this dispatch does not carry has 0.
  const std::size_t arrays[6][2] = {
      {a.rr.x, a.rr.row_bytes}, {a.rr.scales, static_cast<std::size_t>(scales_per_row) * 4},
      {a.rr.topk_idx, K * 8},   {a.rr.topk_weights, weights ? K * 4 : 0},
      {a.rr.src_idx, 4},        {a.rr.dst_pos, static_cast<std::size_t>(G) * 4}};
  FarRun runs[6];
  for (int i = 0; i < 6; ++i) {
    const std::size_t off = arrays[i][0], row = arrays[i][1];
    runs[i] = {a.relay_region + off + at * row, a.send_region + off + first * row, rows * row};
  }
  put_runs_then_tell(runs, 6, a.done, n * G + me % G, done_total);
}

// Every block: waits until the PE of this PE's local rank on every other
// node has put its rows here (done[s] reached `target`), then forwards them,
// a warp per row, to the PEs of this node that the row's dst_pos names.
__device__ __forceinline__ void forward_relay_rows(const NormalArgs& a, bool weights, int scales_per_row,
                                                   std::uint64_t target) {
  const int me = dev::state().my_pe, G = a.pes_per_node, node = me / G;
  wait_pes(a.done, me % G, a.n_nodes, G, target, me);
  const auto [warp_id, total_warps, lane] = warp_grid();
  const int experts_per_pe = a.num_experts / dev::state().n_pes;
  const int* dst_pos = reinterpret_cast<const int*>(a.relay_region + a.rr.dst_pos);
  for (int i = warp_id; i < a.relay_begin[a.n_nodes]; i += total_warps) {
    int src_node = 0;
    while (src_node + 1 < a.n_nodes && a.relay_begin[src_node + 1] <= i) ++src_node;
    const std::size_t ri = static_cast<std::size_t>(i);
    const RowMeta m{
        reinterpret_cast<const float*>(a.relay_region + a.rr.scales) + ri * scales_per_row,
        reinterpret_cast<const std::int64_t*>(a.relay_region + a.rr.topk_idx) + ri * a.num_topk,
        weights ? reinterpret_cast<const float*>(a.relay_region + a.rr.topk_weights) + ri * a.num_topk : nullptr,
        load_cg(reinterpret_cast<const int*>(a.relay_region + a.rr.src_idx) + i)};
    for (int j = lane; j < G; j += 32)  // kept in the handle for the combine
      a.relay_pos[ri * G + j] = load_cg(dst_pos + ri * G + j);
    for (int j0 = 0; j0 < G; j0 += kMaxDstPerPass) {
      char* dst_x[kMaxDstPerPass];
      int dst_pe[kMaxDstPerPass];
      int dst_row[kMaxDstPerPass];
      int n = 0;
      for (int j = j0; j < G && j < j0 + kMaxDstPerPass; ++j) {
        const int p = load_cg(dst_pos + ri * G + j);
        if (p < 0) continue;
        dst_pe[n] = node * G + j;
        dst_row[n] = a.relay_dst_offset[src_node * G + j] + p;
        dst_x[n] =
            pe_ptr(a.dispatch_region, dst_pe[n]) + a.dr.x + static_cast<std::size_t>(dst_row[n]) * a.dr.row_bytes;
        ++n;
      }
      if (n == 0) continue;
      warp_copy_row_multi<kMaxDstPerPass>(dst_x, n, a.relay_region + a.rr.x + ri * a.rr.row_bytes, a.rr.row_bytes);
      for (int d = 0; d < n; ++d)
        write_row_meta(pe_ptr(a.dispatch_region, dst_pe[d]), a.dr, dst_row[d], m, scales_per_row, a.num_topk, dst_pe[d],
                       experts_per_pe, lane);
    }
  }
}

// The end of a dispatch on this node: adds to `done` on every node peer
// (other nodes' PEs heard from the relays), then waits until each node
// peer's count reached `target` (this launch's base + B).
__device__ __forceinline__ void node_dispatch_done(const NormalArgs& a, std::uint64_t target) {
  const int G = a.pes_per_node, node = dev::state().my_pe / G;
  signal_all_pes(a.done, 0);
  wait_pes(a.done, node * G, G, 1, target);
}

// Bounded for the widest Config (1024 threads): at most 64 registers.
__global__ void __launch_bounds__(1024) dispatch_kernel(NormalArgs a, DispatchInput in) {
  const int npes = dev::state().n_pes, me = dev::state().my_pe;
  const unsigned long long base = enter_send_half(a.counters, a.ready);
  const auto [warp_id, total_warps, lane] = warp_grid();
  const int experts_per_pe = a.num_experts / npes;
  const int scales_per_row = a.x_type == XType::kFP8 ? a.hidden / 128 : 0;
  const char* x = static_cast<const char*>(in.x);
  const bool across = a.relay_region != nullptr;
  const int G = a.pes_per_node, node = me / G;
  // Targets of a token: u < G is node peer node * G + u; u = G + n is node n
  // (another node), reached through the relay there.
  const int n_targets = G + (across ? a.n_nodes : 0);

  for (int t = warp_id; t < a.num_tokens; t += total_warps) {
    const int* pos = a.send_pos + static_cast<std::size_t>(t) * npes;
    // Targets in groups of kMaxDstPerPass (one pass reads the row once).
    for (int u0 = 0; u0 < n_targets; u0 += kMaxDstPerPass) {
      int dst_pe[kMaxDstPerPass];  // -1 - n: the relay rows for node n
      int dst_row[kMaxDstPerPass];
      char* dst_x[kMaxDstPerPass];
      int n = 0;
      for (int u = u0; u < n_targets && u < u0 + kMaxDstPerPass; ++u) {
        if (u < G) {
          const int r = node * G + u, p = pos[r];
          if (p < 0) continue;
          dst_pe[n] = r;
          dst_row[n] = a.recv_offset[r] + p;
        } else {
          const int nd = u - G;
          const int p = nd == node ? -1 : a.node_pos[static_cast<std::size_t>(t) * a.n_nodes + nd];
          if (p < 0) continue;
          dst_pe[n] = -1 - nd;
          dst_row[n] = a.node_send_offset[nd] + p;
        }
        // x is first in either layout.
        dst_x[n] = (dst_pe[n] >= 0 ? pe_ptr(a.dispatch_region, dst_pe[n]) : a.send_region) +
                   static_cast<std::size_t>(dst_row[n]) * a.dr.row_bytes;
        ++n;
      }
      if (n == 0) continue;
      warp_copy_row_multi<kMaxDstPerPass>(dst_x, n, x + static_cast<std::size_t>(t) * a.dr.row_bytes, a.dr.row_bytes);
      const RowMeta m{in.x_scales + static_cast<std::size_t>(t) * scales_per_row,
                      in.topk_idx + static_cast<std::size_t>(t) * a.num_topk,
                      in.topk_weights ? in.topk_weights + static_cast<std::size_t>(t) * a.num_topk : nullptr, t};
      for (int d = 0; d < n; ++d) {
        if (dst_pe[d] >= 0) {
          write_row_meta(pe_ptr(a.dispatch_region, dst_pe[d]), a.dr, dst_row[d], m, scales_per_row, a.num_topk,
                         dst_pe[d], experts_per_pe, lane);
        } else {
          write_row_meta(a.send_region, a.rr, dst_row[d], m, scales_per_row, a.num_topk, -1, experts_per_pe, lane);
          const int nd = -1 - dst_pe[d];
          int* dp = reinterpret_cast<int*>(a.send_region + a.rr.dst_pos) + static_cast<std::size_t>(dst_row[d]) * G;
          for (int j = lane; j < G; j += 32) dp[j] = pos[nd * G + j];
        }
      }
    }
  }
  if (across) {  // ship; dispatch_forward_kernel relays and counts done
    if (last_block_to_arrive(&a.counters->blocks_packed))
      put_rows_to_relays(a, scales_per_row, in.topk_weights != nullptr, base + gridDim.x);
  } else {
    node_dispatch_done(a, base + gridDim.x);
  }
  launch_end(a.counters, base);
}

// Dispatch across nodes, second kernel (the same B blocks, after the
// first): the relay half. A kernel of its own so that the one-node
// dispatch carries none of its registers (inlined, the forward loop made
// the whole kernel spill). The first kernel advanced the launch count, so
// blocks_before is now this launch's base + B: the value done reaches.
__global__ void __launch_bounds__(1024) dispatch_forward_kernel(NormalArgs a, bool weights, int scales_per_row) {
  const std::uint64_t target = launch_base(a.counters);
  forward_relay_rows(a, weights, scales_per_row, target);
  node_dispatch_done(a, target);
  if (blockIdx.x == 0 && threadIdx.x == 0) dev::proxy_quiet();  // the next dispatch rewrites send_region
}

// Combine across nodes, in every block of combine_relay_kernel: this PE is
// the relay for the rows it forwarded in the dispatch. Waits until every
// node peer's send half is done (it counts done after staging its results),
// then a warp per relay row sums the
// node's results for it in fp32, in PE order, rounds once to bf16 and
// writes the partial (and the summed weights) into send_region row i.
__device__ __forceinline__ void reduce_relay_rows(const NormalArgs& a, bool weights, std::uint64_t target) {
  const int me = dev::state().my_pe, G = a.pes_per_node, node = me / G;
  wait_pes(a.done, node * G, G, 1, target);
  const auto [warp_id, total_warps, lane] = warp_grid();
  const int* dst_pos = a.relay_pos;  // the handle's: the relay region holds the last dispatch's
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2, K = static_cast<std::size_t>(a.num_topk);
  const int vecs = a.hidden / 8;
  for (int i = warp_id; i < a.relay_begin[a.n_nodes]; i += total_warps) {
    int src_node = 0;
    while (src_node + 1 < a.n_nodes && a.relay_begin[src_node + 1] <= i) ++src_node;
    // Where node PE j staged its result for this row (-1: the row did not go to j).
    auto staged_row = [&](int j) -> int {
      const int p = dst_pos[static_cast<std::size_t>(i) * G + j];  // written by an earlier kernel
      if (p < 0) return -1;
      const int row = a.relay_dst_offset[src_node * G + j] + p;  // in j's received rows
      return row < a.node_recv_lo[j] ? row : row - (a.node_recv_hi[j] - a.node_recv_lo[j]);
    };
    char* partial = a.send_region + a.cr.x + static_cast<std::size_t>(i) * row_bytes;
    for (int v = lane; v < vecs; v += 32) {
      float acc[8] = {};
      for (int j = 0; j < G; ++j) {
        const int row = staged_row(j);
        if (row < 0) continue;
        const char* from = pe_ptr(a.combine_stage, node * G + j) + a.cr.x + static_cast<std::size_t>(row) * row_bytes;
        add_bf16x8(acc, load_cg(reinterpret_cast<const int4*>(from) + v));
      }
      reinterpret_cast<int4*>(partial)[v] = round_bf16x8(acc);
    }
    if (weights && lane < a.num_topk) {
      float sum = 0;  // one PE owns each slot's expert: the others add 0, so the order does not matter
      for (int j = 0; j < G; ++j) {
        const int row = staged_row(j);
        if (row >= 0)
          sum += load_cg(reinterpret_cast<const float*>(pe_ptr(a.combine_stage, node * G + j) + a.cr.topk_weights) +
                         static_cast<std::size_t>(row) * K + lane);
      }
      reinterpret_cast<float*>(a.send_region + a.cr.topk_weights)[static_cast<std::size_t>(i) * K + lane] = sum;
    }
  }
}

// Thread n < N of the block that finished its partials last: puts the
// partials for PE (n, me % G) (send_region rows [relay_begin[n],
// relay_begin[n + 1])) into its combine region at relay_back_offset[n],
// the weights' put carrying done[me] = `total` there.
__device__ __forceinline__ void put_partials_back(const NormalArgs& a, bool weights, std::uint64_t total) {
  const int n = static_cast<int>(threadIdx.x), me = dev::state().my_pe, G = a.pes_per_node;
  if (n >= a.n_nodes || n == me / G) return;
  const std::size_t lo = static_cast<std::size_t>(a.relay_begin[n]);
  const std::size_t rows = static_cast<std::size_t>(a.relay_begin[n + 1]) - lo;
  const std::size_t at = static_cast<std::size_t>(a.relay_back_offset[n]);
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2, K = static_cast<std::size_t>(a.num_topk);
  const FarRun runs[2] = {
      {a.combine_region + a.cr.x + at * row_bytes, a.send_region + a.cr.x + lo * row_bytes, rows * row_bytes},
      {a.combine_region + a.cr.topk_weights + at * K * 4, a.send_region + a.cr.topk_weights + lo * K * 4,
       weights ? rows * K * 4 : 0}};
  put_runs_then_tell(runs, 2, a.done, n * G + me % G, total);
}

// Row i of this PE's received rows (not one of its own) goes back: from a
// node peer, into that PE's combine region over NVLink; from another node,
// into combine_stage (compacted: without this node's rows) for the relay.
// One warp; the row's weights too when there are any.
__device__ __forceinline__ void send_row_back(const NormalArgs& a, const char* x, const float* weights, int i,
                                              int lane) {
  const int me = dev::state().my_pe, G = a.pes_per_node, node = me / G;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2;
  const int near_lo = a.recv_begin[node * G], near_hi = a.recv_begin[(node + 1) * G];
  char* dst;
  float* dst_w;
  if (i >= near_lo && i < near_hi) {
    int src = node * G;
    while (src + 1 < (node + 1) * G && a.recv_begin[src + 1] <= i) ++src;
    const std::size_t row = static_cast<std::size_t>(a.peer_send_offset[src] + (i - a.recv_begin[src]));
    char* region = pe_ptr(a.combine_region, src);
    dst = region + a.cr.x + row * row_bytes;
    dst_w = reinterpret_cast<float*>(region + a.cr.topk_weights) + row * a.num_topk;
  } else {
    const std::size_t row = static_cast<std::size_t>(i < near_lo ? i : i - (near_hi - near_lo));
    dst = a.combine_stage + a.cr.x + row * row_bytes;
    dst_w = reinterpret_cast<float*>(a.combine_stage + a.cr.topk_weights) + row * a.num_topk;
  }
  warp_copy_row_multi<1>(&dst, 1, x + static_cast<std::size_t>(i) * row_bytes, row_bytes);
  if (weights && lane < a.num_topk) dst_w[lane] = weights[static_cast<std::size_t>(i) * a.num_topk + lane];
}

// Token t's result, by one warp: the sum of its rows in PE order (a node's
// partial in its place) in fp32, plus the biases, rounded once to bf16; and
// the sum of its weights. The caller made sure every row is there.
__device__ __forceinline__ void reduce_token(const NormalArgs& a, const CombineInput& in, const CombineOutput& out,
                                             int t, int lane) {
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, npes = s.n_pes, G = a.pes_per_node, node = me / G;
  const bool across = a.relay_region != nullptr;
  const auto* pushed = reinterpret_cast<const __nv_bfloat16*>(a.combine_region + a.cr.x);
  const auto* pushed_w = reinterpret_cast<const float*>(a.combine_region + a.cr.topk_weights);
  const auto* own = static_cast<const __nv_bfloat16*>(in.x);
  const auto* bias_1 = static_cast<const __nv_bfloat16*>(in.bias);
  const auto* bias_2 = static_cast<const __nv_bfloat16*>(in.bias_2);
  auto* result = static_cast<__nv_bfloat16*>(out.combined_x);
  const int vecs = a.hidden / 8;  // 8 bf16 per 16-byte vector
  // The terms of token t, in order: u < npes is PE u (this node's PEs only),
  // u = npes + n the partial of node n (other nodes only): its row, in `own`
  // (this PE's, which never moved) or in the combine region; -1 if none.
  const int n_terms = npes + (across ? a.n_nodes : 0);
  auto term_row = [&](int u) -> int {  // >= 0: a combine-region row; <= -2: row -2 - r of own
    if (u < npes) {
      if (u < node * G || u >= (node + 1) * G) return -1;
      const int p = a.send_pos[static_cast<std::size_t>(t) * npes + u];
      if (p < 0) return -1;
      return u == me ? -2 - (a.recv_begin[me] + p) : a.send_offset[u] + p;
    }
    const int n = u - npes;
    if (n == node) return -1;
    const int p = a.node_pos[static_cast<std::size_t>(t) * a.n_nodes + n];
    return p < 0 ? -1 : a.send_offset[npes] + a.node_send_offset[n] + p;
  };
  // Two vectors per lane in flight.
  for (int v0 = lane; v0 < vecs; v0 += 64) {
    const int v1 = v0 + 32;
    const bool two = v1 < vecs;
    float acc[2][8] = {};
    for (int n = 0; n < a.n_nodes; ++n) {
      // Node n: its PEs one by one when it is this node, else its partial.
      const int first = n == node ? n * G : npes + n, last = n == node ? (n + 1) * G : npes + n + 1;
      for (int u = first; u < last; ++u) {
        const int row = term_row(u);
        if (row == -1) continue;
        const int4* r = reinterpret_cast<const int4*>(row >= 0 ? pushed + static_cast<std::size_t>(row) * a.hidden
                                                               : own + static_cast<std::size_t>(-2 - row) * a.hidden);
        const int4 q0 = load_cg(r + v0);
        const int4 q1 = two ? load_cg(r + v1) : q0;
        add_bf16x8(acc[0], q0);
        add_bf16x8(acc[1], q1);
      }
    }
    // Biases in order (the CPU reference adds them so), one rounding, store.
    // Called with constant indices, so acc stays in registers.
    auto finish = [&](float (&sum)[8], int v) {
      for (const __nv_bfloat16* bias : {bias_1, bias_2}) {
        if (!bias) continue;
        add_bf16x8(sum, reinterpret_cast<const int4*>(bias + static_cast<std::size_t>(t) * a.hidden)[v]);
      }
      reinterpret_cast<int4*>(result + static_cast<std::size_t>(t) * a.hidden)[v] = round_bf16x8(sum);
    };
    finish(acc[0], v0);
    if (two) finish(acc[1], v1);
  }
  if (in.topk_weights && out.combined_topk_weights && lane < a.num_topk) {
    float sum = 0;
    for (int u = 0; u < n_terms; ++u) {
      const int row = term_row(u);
      if (row != -1)
        sum += load_cg(row >= 0 ? pushed_w + static_cast<std::size_t>(row) * a.num_topk + lane
                                : in.topk_weights + static_cast<std::size_t>(-2 - row) * a.num_topk + lane);
    }
    out.combined_topk_weights[static_cast<std::size_t>(t) * a.num_topk + lane] = sum;
  }
}

// Combine on one node: one kernel, the send and the reduction overlapped.
// The first send_blocks blocks to start (start_ticket) send every received
// row back, a warp per chunk of chunk_rows rows of one source (chunk c of
// every source, then c + 1: the early tokens of every PE first); after its
// chunk the warp sets the chunk's flag at the source to this launch's
// epoch. The other blocks reduce: a warp per token waits only for the flags
// of the chunks that hold the token's rows. So the reduction runs under the
// NVLink traffic instead of after it (on 2x H200, send then reduce took
// 258 us at DeepEP's shape). Roles go by ticket, not blockIdx, so a block
// that spins waiting for senders is never one that keeps a sender off an
// SM. Every block counts itself in ready and done, as every launch of these
// counters does (ep_device.cuh). Two blocks of 512 threads fit an SM (64
// registers), so the grid (launch_normal_combine) can leave room for a
// second PE on the GPU.
template <int kMaxThreads>
__global__ void __launch_bounds__(kMaxThreads, 1024 / kMaxThreads)
    combine_kernel(NormalArgs a, CombineInput in, CombineOutput out, int send_blocks) {
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, npes = s.n_pes;
  const unsigned long long base = launch_base(a.counters);
  const int role = start_ticket(a.counters);
  const std::uint64_t epoch = base + 1;  // every PE's launch has the same base; it grows every launch
  signal_all_pes(a.ready, 0);
  const int wpb = static_cast<int>(blockDim.x >> 5), warp = static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (role < send_blocks) {
    wait_all_pes(a.ready, base + 1);  // nobody still reads the combine region we write
    int most = 0;
    for (int p = 0; p < npes; ++p)
      if (p != me) most = max(most, a.recv_begin[p + 1] - a.recv_begin[p]);
    const int others = npes - 1, units = (most + a.chunk_rows - 1) / a.chunk_rows * others;
    for (int unit = role * wpb + warp; unit < units; unit += send_blocks * wpb) {
      const int c = unit / others, src = unit % others < me ? unit % others : unit % others + 1;
      const int lo = a.recv_begin[src] + c * a.chunk_rows, hi = min(a.recv_begin[src + 1], lo + a.chunk_rows);
      if (lo >= hi) continue;
      for (int i = lo; i < hi; ++i) send_row_back(a, static_cast<const char*>(in.x), in.topk_weights, i, lane);
      __syncwarp();  // then one release store covers every lane's rows
      if (lane == 0)
        dev::detail::st_release_sys(pe_ptr(a.combine_flags, src) + static_cast<std::size_t>(me) * kCombineChunks + c,
                                    epoch);
    }
  } else {
    const int reduce_warps = (static_cast<int>(gridDim.x) - send_blocks) * wpb;
    // Lane l watches PEs l and l + 32: seen[k] is the last chunk of PE (l +
    // 32k)'s rows it saw flagged (the warp's tokens only grow, so do their rows).
    int seen[2] = {-1, -1};
    for (int t = (role - send_blocks) * wpb + warp; t < a.num_tokens; t += reduce_warps) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int u = lane + 32 * k;
        const int p = u < npes && u != me ? a.send_pos[static_cast<std::size_t>(t) * npes + u] : -1;
        if (p < 0 || p / a.chunk_rows <= seen[k]) continue;
        seen[k] = p / a.chunk_rows;
        const std::uint64_t* flag = a.combine_flags + static_cast<std::size_t>(u) * kCombineChunks + seen[k];
        dev::detail::wait_until_impl<std::uint64_t>(flag, dev::Cmp::kGe, epoch, dev::FailKind::kWaitTimeout, u);
      }
      __syncwarp();  // the lanes' acquires order the whole warp's loads after them
      reduce_token(a, in, out, t, lane);
    }
  }
  signal_all_pes(a.done, 0);
  launch_end(a.counters, base);
}

// Combine across nodes, send half (config.num_sms blocks): every received
// row goes back (send_row_back), then this PE counts itself done at its
// node peers. combine_relay_kernel and combine_reduce_kernel follow.
__global__ void __launch_bounds__(1024) combine_send_kernel(NormalArgs a, CombineInput in, int num_recv) {
  const int me = dev::state().my_pe;
  const unsigned long long base = enter_send_half(a.counters, a.ready);
  const auto [warp_id, total_warps, lane] = warp_grid();
  const int own_lo = a.recv_begin[me], own_hi = a.recv_begin[me + 1];
  const int remote = num_recv - (own_hi - own_lo);
  for (int j = warp_id; j < remote; j += total_warps)
    send_row_back(a, static_cast<const char*>(in.x), in.topk_weights, j < own_lo ? j : j + (own_hi - own_lo), lane);
  // Node peers: my rows back to you are there, and (for your relay half)
  // so are my staged results.
  signal_all_pes(a.done, 0);
  launch_end(a.counters, base);
}

// Combine across nodes, between the send half and the reduction (the same
// B blocks): the relay's part. A kernel of its own, as the dispatch's, so
// that the send half carries none of its registers. The send half advanced
// the launch count: blocks_before is now this launch's base + B.
__global__ void __launch_bounds__(1024) combine_relay_kernel(NormalArgs a, bool weights) {
  const std::uint64_t target = launch_base(a.counters);
  reduce_relay_rows(a, weights, target);
  const bool shipper = last_block_to_arrive(&a.counters->blocks_packed);
  if (shipper) put_partials_back(a, weights, target);
  __syncthreads();
  // send_region may be rewritten once the combine is done: the proxy must have read it.
  if (shipper && threadIdx.x == 0) dev::proxy_quiet();
}

// Combine across nodes, receive half (every SM: a short, memory-bound
// pass): wait until every node peer's send half finished and every relay
// of this PE's local rank put its partials; then a warp per token.
__global__ void __launch_bounds__(512) combine_reduce_kernel(NormalArgs a, CombineInput in, CombineOutput out) {
  const int me = dev::state().my_pe, G = a.pes_per_node, node = me / G;
  const std::uint64_t target = launch_base(a.counters);
  wait_pes(a.done, node * G, G, 1, target);
  wait_pes(a.done, me % G, a.n_nodes, G, target, me);
  const auto [warp_id, total_warps, lane] = warp_grid();
  for (int t = warp_id; t < a.num_tokens; t += total_warps) reduce_token(a, in, out, t, lane);
}
}  // namespace

void launch_normal_dispatch(const NormalArgs& a, const DispatchInput& in, const Config& c, cudaStream_t stream) {
  dispatch_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in);
  NVST_CHECK_LAUNCH();
  if (a.relay_region != nullptr) {
    const int scales_per_row = a.x_type == XType::kFP8 ? a.hidden / 128 : 0;
    dispatch_forward_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in.topk_weights != nullptr,
                                                                           scales_per_row);
    NVST_CHECK_LAUNCH();
  }
}

void launch_normal_combine(const NormalArgs& a, const CombineInput& in, const CombineOutput& out, int num_recv,
                           const Config& c, cudaStream_t stream) {
  const int sms = device_sm_count();
  if (a.relay_region == nullptr) {
    // The reduction gets the rest of half the GPU's block slots (so that
    // two PEs sharing a GPU through MPS both fit), and never fewer than an
    // eighth of the SMs; the same grid on every PE, whatever its tokens.
    const auto kernel = c.threads_per_block > 512 ? combine_kernel<1024> : combine_kernel<512>;
    static std::atomic<int> per_sm_by_warps[33];  // blocks an SM holds, by warps per block (0: not asked yet)
    int per_sm = per_sm_by_warps[c.threads_per_block / 32].load(std::memory_order_relaxed);
    if (per_sm == 0) {
      NVST_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c.threads_per_block, 0));
      per_sm_by_warps[c.threads_per_block / 32].store(per_sm, std::memory_order_relaxed);
    }
    const int reduce_blocks = std::max(sms * per_sm / 2 - c.num_sms, std::max(1, sms / 8));
    kernel<<<c.num_sms + reduce_blocks, c.threads_per_block, 0, stream>>>(a, in, out, c.num_sms);
    NVST_CHECK_LAUNCH();
    return;
  }
  combine_send_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in, num_recv);
  NVST_CHECK_LAUNCH();
  combine_relay_kernel<<<c.num_sms, c.threads_per_block, 0, stream>>>(a, in.topk_weights != nullptr);
  NVST_CHECK_LAUNCH();
  const int blocks = std::max(1, std::min(sms, (a.num_tokens + 15) / 16));
  combine_reduce_kernel<<<blocks, 512, 0, stream>>>(a, in, out);
  NVST_CHECK_LAUNCH();
}

void preload_normal_kernels() {
  // These spin on peers: load them before any of them runs.
  nvst::detail::preload_kernels(
      {reinterpret_cast<const void*>(dispatch_kernel), reinterpret_cast<const void*>(dispatch_forward_kernel),
       reinterpret_cast<const void*>(combine_kernel<512>), reinterpret_cast<const void*>(combine_kernel<1024>),
       reinterpret_cast<const void*>(combine_send_kernel), reinterpret_cast<const void*>(combine_relay_kernel),
       reinterpret_cast<const void*>(combine_reduce_kernel)});
}

}  // namespace nvst::ep::detail
