// The dispatch layout: from topk_idx, which PEs and experts each token goes
// to, how many tokens each PE and expert receives from this PE, and each
// token's row in its stream to each PE (send_pos).
//
// Two kernels. count_kernel: a thread per token builds the token's PE mask
// (bit r: one of its experts lives on PE r), writes is_token_in_rank, and
// counts per PE, node and expert in shared memory before one global atomic
// per block and counter. position_kernel: a block per PE scans the mask
// column r in token order, so send_pos[t][r] is the number of earlier
// tokens that also go to r: the order a receiver gets them in. Run again
// with a block per node (a token goes to node n when it goes to any of its
// PEs), it gives node_pos: the token's row in what crosses to node n.
#include <cstdint>
#include <mutex>

#include "ep/ep_device.cuh"
#include "ep/handle_memory.hpp"
#include "ep/kernels.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::ep::detail {

namespace {

constexpr int kMaxLayoutPes = 64;   // one 64-bit mask per token
constexpr int kMaxExperts = 4096;   // shared-memory counters
constexpr int kThreads = 256;

__global__ void count_kernel(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts, int n_pes,
                             int pes_per_node, LayoutOutput out, std::uint64_t* masks) {
  __shared__ int per_expert[kMaxExperts];
  __shared__ int per_pe[kMaxLayoutPes];
  __shared__ int per_node[kMaxLayoutPes];
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
      if (out.is_token_in_rank) out.is_token_in_rank[static_cast<std::size_t>(t) * n_pes + r] = in;
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
  for (int i = threadIdx.x; i < num_experts; i += blockDim.x)
    if (per_expert[i] && out.num_tokens_per_expert) atomicAdd(&out.num_tokens_per_expert[i], per_expert[i]);
  if (threadIdx.x < n_pes && per_pe[threadIdx.x] && out.num_tokens_per_rank)
    atomicAdd(&out.num_tokens_per_rank[threadIdx.x], per_pe[threadIdx.x]);
  if (threadIdx.x < n_pes / pes_per_node && per_node[threadIdx.x] && out.num_tokens_per_node)
    atomicAdd(&out.num_tokens_per_node[threadIdx.x], per_node[threadIdx.x]);
}

// Block r: exclusive scan over tokens of "masks[t] has a bit in group r"
// (bits [r * group, (r + 1) * group)); pos is [num_tokens, gridDim.x].
__global__ void position_kernel(const std::uint64_t* masks, int num_tokens, int group, int* pos) {
  __shared__ int warp_sums[32];
  __shared__ int carry;
  const int r = blockIdx.x, n_groups = gridDim.x;
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

// The pool the token masks between the two kernels come from, one per
// device, that keeps freed memory (a HandlePool, as the handles' arrays).
// CUDA's default pool gives its memory back at every synchronisation, and a
// first dispatch synchronises (its counts go to the host), so each first
// dispatch mapped the masks afresh (r121: 140 us).
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
                   int pes_per_node, const LayoutOutput& out, int* send_pos, int* node_pos, cudaStream_t stream) {
  NVST_REQUIRE(n_pes >= 1 && n_pes <= kMaxLayoutPes, "nvst::ep: ", n_pes, " PEs; the layout supports 1 to ",
               kMaxLayoutPes);
  NVST_REQUIRE(num_experts >= n_pes && num_experts % n_pes == 0 && num_experts <= kMaxExperts,
               "nvst::ep: num_experts (", num_experts, ") must be a multiple of the number of PEs (", n_pes,
               ") and at most ", kMaxExperts);
  NVST_REQUIRE(num_tokens >= 0 && num_topk >= 1 && num_topk <= 32, "nvst::ep: num_tokens ", num_tokens,
               " and num_topk ", num_topk, " (1 to 32) out of range");
  NVST_REQUIRE(num_tokens == 0 || topk_idx != nullptr, "nvst::ep: topk_idx is null");
  NVST_REQUIRE(pes_per_node >= 1 && n_pes % pes_per_node == 0, "nvst::ep: ", n_pes,
               " PEs do not split into nodes of ", pes_per_node);
  if (out.num_tokens_per_rank) NVST_CHECK_CUDA(cudaMemsetAsync(out.num_tokens_per_rank, 0, n_pes * sizeof(int), stream));
  if (out.num_tokens_per_expert)
    NVST_CHECK_CUDA(cudaMemsetAsync(out.num_tokens_per_expert, 0, num_experts * sizeof(int), stream));
  if (out.num_tokens_per_node)
    NVST_CHECK_CUDA(cudaMemsetAsync(out.num_tokens_per_node, 0, (n_pes / pes_per_node) * sizeof(int), stream));
  if (num_tokens == 0) return;
  auto* masks = static_cast<std::uint64_t*>(masks_pool().allocate(num_tokens * sizeof(std::uint64_t), stream));
  count_kernel<<<(num_tokens + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      topk_idx, num_tokens, num_topk, num_experts, n_pes, pes_per_node, out, masks);
  NVST_CHECK_LAUNCH();
  if (send_pos) {
    position_kernel<<<n_pes, 1024, 0, stream>>>(masks, num_tokens, 1, send_pos);
    NVST_CHECK_LAUNCH();
  }
  if (node_pos) {
    position_kernel<<<n_pes / pes_per_node, 1024, 0, stream>>>(masks, num_tokens, pes_per_node, node_pos);
    NVST_CHECK_LAUNCH();
  }
  NVST_CHECK_CUDA(cudaFreeAsync(masks, stream));
}

}  // namespace nvst::ep::detail

namespace nvst::ep {

void get_dispatch_layout(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts,
                         const LayoutOutput& out, cudaStream_t stream) {
  NVST_REQUIRE(out.num_tokens_per_rank || out.num_tokens_per_expert || out.is_token_in_rank || out.num_tokens_per_node,
               "nvst::ep::get_dispatch_layout: no output given");
  detail::launch_layout(topk_idx, num_tokens, num_topk, num_experts, nvst::n_pes(),
                        nvst::team_n_pes(nvst::Team::kNode), out, nullptr, nullptr, stream);
}

}  // namespace nvst::ep
