// The dispatch layout: from topk_idx, which PEs and experts each token goes
// to, how many tokens each PE and expert receives from this PE, and each
// token's row in its stream to each PE (send_pos); for a first dispatch,
// the exchange of those counts with every PE.
//
// Two kernels, and nothing to zero first. count_kernel: a thread per token
// builds the token's PE mask (bit r: one of its experts lives on PE r),
// writes is_token_in_rank, and counts per PE, node and expert in shared
// memory; each block stores its counts, zeros included, as one row of a
// scratch table. finish_kernel: a block per PE scans the mask column r in
// token order, so send_pos[t][r] is the number of earlier tokens that also
// go to r: the order a receiver gets them in; a block per node does the same
// for node_pos (a token goes to node n when it goes to any of its PEs): the
// token's row in what crosses to node n; and the last block sums the
// table's rows into the counts. (Counting with global atomics needed the
// counts zeroed first: three memsets, and for a first dispatch two copies
// to the host.)
//
// The count exchange (DeepEP's notify_dispatch): every PE must learn every
// PE's counts, so that each receiver knows how many rows arrive and each
// sender where its rows start. Each PE has a symmetric table of two sets of
// R rows; a row is a header (the call's shape and Config, so that PEs that
// disagree are told) and the counts. For a first dispatch the counts go to
// this PE's row of the call's set, and the last block of finish_kernel
// adds the header, puts the row into row `me` of every other PE's table
// with a put_signal (over NVLink, or through the proxy to other nodes: the
// signal lands after the row), waits until every PE's row is in, and stores
// the set into pinned host memory, which the host reads after one
// synchronisation. Sets alternate by call (the host counts the calls:
// first dispatches are synchronous, and every PE makes them in the same
// order). A PE writes set s of call e + 2 only after every PE's row of call
// e + 1 reached it, and a PE sends its row of e + 1 only after it finished
// call e, so no row is overwritten before it is read. It replaced the
// bootstrap's allgather over TCP: 30-60 us at 2-4 PEs, about 130 at 8.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "device/device_runtime.hpp"
#include "ep/ep_device.cuh"
#include "ep/handle_memory.hpp"
#include "ep/kernels.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::ep::detail {

namespace {

constexpr int kMaxLayoutPes = 64;  // one 64-bit mask per token
constexpr int kThreads = 256;
constexpr int kFinishThreads = 512;  // the exchange's puts need more than 64 registers

// The counts of one count_kernel block, a row of the scratch table: per
// PE, per node, per expert.
struct CountColumns {
  int n_pes, n_nodes, num_experts;
  __host__ __device__ int width() const { return n_pes + n_nodes + num_experts; }
};

__global__ void count_kernel(const std::int64_t* topk_idx, int num_tokens, int num_topk, int pes_per_node,
                             CountColumns cols, bool* is_token_in_rank, std::uint64_t* masks, int* table) {
  __shared__ int per_expert[kMaxLayoutExperts];
  __shared__ int per_pe[kMaxLayoutPes];
  __shared__ int per_node[kMaxLayoutPes];
  const int n_pes = cols.n_pes, num_experts = cols.num_experts;
  for (int i = threadIdx.x; i < num_experts; i += blockDim.x) per_expert[i] = 0;
  if (threadIdx.x < kMaxLayoutPes) per_pe[threadIdx.x] = per_node[threadIdx.x] = 0;
  __syncthreads();
  const int experts_per_pe = num_experts / n_pes;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < num_tokens) {
    std::uint64_t mask = 0;
    for (int k = 0; k < num_topk; ++k) {
      const std::int64_t e = topk_idx[static_cast<std::size_t>(t) * num_topk + k];
      if (e == -1) continue;
      if (e < -1 || e >= num_experts)
        dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(t) * num_topk + k,
                  static_cast<std::uint64_t>(e), static_cast<std::uint64_t>(num_experts), -1);
      atomicAdd(&per_expert[e], 1);
      mask |= std::uint64_t{1} << (e / experts_per_pe);
    }
    std::uint64_t node_mask = 0;
    for (int r = 0; r < n_pes; ++r) {
      const bool in = (mask >> r) & 1u;
      if (is_token_in_rank) is_token_in_rank[static_cast<std::size_t>(t) * n_pes + r] = in;
      if (in) {
        atomicAdd(&per_pe[r], 1);
        node_mask |= std::uint64_t{1} << (r / pes_per_node);
      }
    }
    for (int nd = 0; node_mask != 0; ++nd, node_mask >>= 1)
      if (node_mask & 1u) atomicAdd(&per_node[nd], 1);
    masks[t] = mask;
  }
  __syncthreads();
  int* row = table + static_cast<std::size_t>(blockIdx.x) * cols.width();
  for (int c = threadIdx.x; c < cols.width(); c += blockDim.x)
    row[c] = c < n_pes                  ? per_pe[c]
             : c < n_pes + cols.n_nodes ? per_node[c - n_pes]
                                        : per_expert[c - n_pes - cols.n_nodes];
}

// Block r of `n_groups`: exclusive scan over tokens of "masks[t] has a bit
// in group r" (bits [r * group, (r + 1) * group)); pos is [num_tokens,
// n_groups].
__device__ void scan_group(const std::uint64_t* masks, int num_tokens, int group, int r, int n_groups, int* pos) {
  __shared__ int warp_sums[32];
  __shared__ int carry;
  const std::uint64_t bits = (group >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << group) - 1) << (r * group);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < num_tokens; base += blockDim.x) {
    const int t = base + threadIdx.x;
    const bool in = t < num_tokens && (masks[t] & bits) != 0;
    const unsigned ballot = __ballot_sync(0xffffffffu, in);
    if (lane == 0) warp_sums[warp] = __popc(ballot);
    __syncthreads();
    int before = carry;
    for (int w = 0; w < warp; ++w) before += warp_sums[w];
    before += __popc(ballot & ((1u << lane) - 1u));
    if (t < num_tokens) pos[static_cast<std::size_t>(t) * n_groups + r] = in ? before : -1;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 0; w < n_warps; ++w) carry += warp_sums[w];
    __syncthreads();
  }
}

// The exchange, by the whole block, once this PE's counts are in its row
// of the call's set (see the top of this file).
__device__ void exchange_counts(const CountExchangeCall& c) {
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, R = s.n_pes;
  int* mine = count_row(c.x, c.call, R, me);
  int* set = count_row(c.x, c.call, R, 0);
  std::uint64_t* arrived = c.x.arrived + static_cast<std::size_t>(c.call & 1) * R;
  if (threadIdx.x == 0) *reinterpret_cast<CountHeader*>(mine) = c.header;
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x >> 5), warps = static_cast<int>(blockDim.x >> 5);
  for (int p = warp; p < R; p += warps)
    if (p != me)
      dev::putmem_signal_nbi_warp(mine, mine, c.used_ints * sizeof(int), arrived + me, c.call, dev::SignalOp::kSet, p);
  for (int p = threadIdx.x; p < R; p += blockDim.x)
    if (p != me) dev::signal_wait_until(arrived + p, dev::Cmp::kGe, c.call);
  __syncthreads();
  for (int p = 0; p < R; ++p)
    for (int i = threadIdx.x; i < c.used_ints; i += blockDim.x)
      c.host_out[static_cast<std::size_t>(p) * c.used_ints + i] =
          load_cg(set + static_cast<std::size_t>(p) * c.x.row_ints + i);
  // Puts through the proxy read `mine`, which call + 2 rewrites.
  if (threadIdx.x == 0) dev::quiet();
}

// Blocks [0, send_blocks): send_pos, a PE each; the next node_blocks:
// node_pos, a node each; the last: the counts, summed over the table's
// `rows` rows (outputs may be device or pinned host memory), then, when
// exchange.host_out is set, exchanged.
__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(const std::uint64_t* masks, int num_tokens, int pes_per_node, int send_blocks, int node_blocks,
                  int* send_pos, int* node_pos, const int* table, int rows, CountColumns cols, LayoutOutput out,
                  CountExchangeCall exchange) {
  const int b = blockIdx.x;
  if (b < send_blocks) {
    scan_group(masks, num_tokens, 1, b, send_blocks, send_pos);
    return;
  }
  if (b < send_blocks + node_blocks) {
    scan_group(masks, num_tokens, pes_per_node, b - send_blocks, node_blocks, node_pos);
    return;
  }
  for (int c = threadIdx.x; c < cols.width(); c += blockDim.x) {
    int sum = 0;
    for (int i = 0; i < rows; ++i) sum += table[static_cast<std::size_t>(i) * cols.width() + c];
    int* to = out.num_tokens_per_expert;  // and the column's index in it
    int at = c - cols.n_pes - cols.n_nodes;
    if (c < cols.n_pes)
      to = out.num_tokens_per_rank, at = c;
    else if (c < cols.n_pes + cols.n_nodes)
      to = out.num_tokens_per_node, at = c - cols.n_pes;
    if (to != nullptr) to[at] = sum;
  }
  if (exchange.host_out == nullptr) return;
  __syncthreads();  // the counts are in this PE's row
  exchange_counts(exchange);
}

// The pool the token masks between the two kernels come from, one per
// device, that keeps freed memory (a HandlePool, as the handles' arrays).
// CUDA's default pool gives its memory back at every synchronisation, and a
// first dispatch synchronises (its counts go to the host), so each first
// dispatch mapped the masks afresh (140 us).
HandlePool& masks_pool() {
  static std::mutex mu;
  static HandlePool* pools[64] = {};  // never freed: the process's life
  int device = 0;
  NVST_CHECK_CUDA(cudaGetDevice(&device));
  NVST_REQUIRE(device >= 0 && device < 64, "nvst::ep: device ", device, " out of range for the layout's pools");
  std::lock_guard<std::mutex> lock(mu);
  if (!pools[device]) pools[device] = new HandlePool(device);
  return *pools[device];
}

}  // namespace

void launch_layout(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts, int n_pes,
                   int pes_per_node, const LayoutOutput& out, int* send_pos, int* node_pos, cudaStream_t stream,
                   const CountExchangeCall* exchange) {
  NVST_REQUIRE(n_pes >= 1 && n_pes <= kMaxLayoutPes, "nvst::ep: ", n_pes, " PEs; the layout supports 1 to ",
               kMaxLayoutPes);
  NVST_REQUIRE(num_experts >= n_pes && num_experts % n_pes == 0 && num_experts <= kMaxLayoutExperts,
               "nvst::ep: num_experts (", num_experts, ") must be a multiple of the number of PEs (", n_pes,
               ") and at most ", kMaxLayoutExperts);
  NVST_REQUIRE(num_tokens >= 0 && num_topk >= 1 && num_topk <= 32, "nvst::ep: num_tokens ", num_tokens,
               " and num_topk ", num_topk, " (1 to 32) out of range");
  NVST_REQUIRE(num_tokens == 0 || topk_idx != nullptr, "nvst::ep: topk_idx is null");
  NVST_REQUIRE(pes_per_node >= 1 && n_pes % pes_per_node == 0, "nvst::ep: ", n_pes, " PEs do not split into nodes of ",
               pes_per_node);
  const CountColumns cols{n_pes, n_pes / pes_per_node, num_experts};
  const int count_blocks = (num_tokens + kThreads - 1) / kThreads;
  // The masks and the count table in one allocation.
  const std::size_t masks_bytes = static_cast<std::size_t>(num_tokens) * sizeof(std::uint64_t);
  const std::size_t table_bytes = static_cast<std::size_t>(count_blocks) * cols.width() * sizeof(int);
  char* scratch =
      static_cast<char*>(masks_pool().allocate(std::max<std::size_t>(1, masks_bytes + table_bytes), stream));
  auto* masks = reinterpret_cast<std::uint64_t*>(scratch);
  auto* table = reinterpret_cast<int*>(scratch + masks_bytes);
  if (count_blocks > 0) {
    count_kernel<<<count_blocks, kThreads, 0, stream>>>(topk_idx, num_tokens, num_topk, pes_per_node, cols,
                                                        out.is_token_in_rank, masks, table);
    NVST_CHECK_LAUNCH();
  }
  const int send_blocks = send_pos && num_tokens > 0 ? n_pes : 0;
  const int node_blocks = node_pos && num_tokens > 0 ? cols.n_nodes : 0;
  CountExchangeCall ex{};
  if (exchange != nullptr) {
    ex = *exchange;
    NVST_REQUIRE(ex.used_ints == kCountHeaderInts + cols.width() && ex.used_ints <= ex.x.row_ints && ex.call > 0 &&
                     out.num_tokens_per_rank == count_row(ex.x, ex.call, n_pes, nvst::my_pe()) + kCountHeaderInts,
                 "nvst::ep: the count exchange's row does not match the layout");
  }
  finish_kernel<<<send_blocks + node_blocks + 1, kFinishThreads, 0, stream>>>(
      masks, num_tokens, pes_per_node, send_blocks, node_blocks, send_pos, node_pos, table, count_blocks, cols, out,
      ex);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaFreeAsync(scratch, stream));
}

void preload_layout_kernels() {
  // finish_kernel spins on peers in a first dispatch: loaded before any runs.
  nvst::detail::preload_kernels(
      {reinterpret_cast<const void*>(count_kernel), reinterpret_cast<const void*>(finish_kernel)});
}

}  // namespace nvst::ep::detail

namespace nvst::ep {

void get_dispatch_layout(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts,
                         const LayoutOutput& out, cudaStream_t stream) {
  NVST_REQUIRE(out.num_tokens_per_rank || out.num_tokens_per_expert || out.is_token_in_rank || out.num_tokens_per_node,
               "nvst::ep::get_dispatch_layout: no output given");
  detail::launch_layout(topk_idx, num_tokens, num_topk, num_experts, nvst::n_pes(), nvst::team_n_pes(nvst::Team::kNode),
                        out, nullptr, nullptr, stream);
}

}  // namespace nvst::ep
