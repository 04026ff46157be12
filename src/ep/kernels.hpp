// Host-side entry points of the EP kernels (layout.cu, intranode.cu,
// low_latency.cu), called by buffer.cpp. Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "nvst/ep.hpp"

namespace nvst::ep::detail {

// Per kind of launch (device memory): see ep_device.cuh for how they are used.
// SMs of the current GPU (queried once per process).
int device_sm_count();

struct LaunchCounters {
  unsigned long long blocks_before;  // blocks of all earlier launches of this kind
  unsigned long long blocks_done;    // blocks of the current launch that finished
};

// Also fills send_pos [T, R] (row of token t in its stream to PE r, or -1)
// when it is not null.
void launch_layout(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts, int n_pes,
                   int pes_per_node, const LayoutOutput& out, int* send_pos, cudaStream_t stream);

// Where each array of a received row lives in a receive region: `capacity`
// rows, one array after another, each 16-byte aligned.
struct DispatchRegion {
  std::size_t x = 0, scales = 0, topk_idx = 0, topk_weights = 0, src_idx = 0;  // byte offsets
  std::size_t row_bytes = 0;  // H * element size
  int capacity = 0;
  // The layout for rows of this shape in `bytes` of symmetric memory.
  static DispatchRegion plan(std::size_t bytes, int hidden, int num_topk, XType x_type);
};
struct CombineRegion {
  std::size_t x = 0, topk_weights = 0;
  int capacity = 0;
  static CombineRegion plan(std::size_t bytes, int hidden, int num_topk);
};

struct NormalArgs {
  int num_tokens, hidden, num_topk, num_experts;
  XType x_type;
  const int* send_pos;          // [T, R]
  int recv_offset[64];          // rows before mine in PE r's receive region (dispatch)
  int send_offset[64];          // rows before PE r's in my combine region
  int recv_begin[65];           // my received rows from PE s: [recv_begin[s], recv_begin[s+1])
  int peer_send_offset[64];     // rows before mine in PE s's combine region
  char* dispatch_region;        // symmetric
  DispatchRegion dr;
  char* combine_region;         // symmetric
  CombineRegion cr;
  std::uint64_t* ready;         // symmetric [R]
  std::uint64_t* done;          // symmetric [R]
  LaunchCounters* counters;     // device
};

void launch_normal_dispatch(const NormalArgs& a, const DispatchInput& in, const Config& c, cudaStream_t stream);
void launch_normal_combine(const NormalArgs& a, const CombineInput& in, const CombineOutput& out, int num_recv,
                           const Config& c, cudaStream_t stream);
void preload_normal_kernels();

struct LowLatencyArgs {
  int max_tokens;               // M
  int hidden, num_topk, num_experts;
  bool use_fp8;
  // Dispatch receive region (symmetric), one buffer:
  char* x;                      // [E_local][R * M][H * (fp8 ? 1 : 2)]
  float* scales;                // [E_local][R * M][H / 128]
  int* src_info;                // [E_local][R * M][3]
  int* slot_counter;            // [E_local] (symmetric, zero between uses)
  int* recv_count;              // [E_local] (device, local)
  std::uint64_t* dispatch_ready; // symmetric [R]: PE p started its dispatch send
  std::uint64_t* dispatch_done; // symmetric [R]
  // Combine receive region (symmetric), one buffer:
  char* combine_x;              // [M][K][H] bf16
  std::uint64_t* combine_ready; // symmetric [R]: PE p started its combine send
  std::uint64_t* combine_done;  // symmetric [R]
  LaunchCounters* dispatch_counters;
  LaunchCounters* combine_counters;
};

void launch_ll_dispatch(const LowLatencyArgs& a, const LowLatencyDispatchInput& in, Phase phase,
                        cudaStream_t stream);
void launch_ll_combine(const LowLatencyArgs& a, const LowLatencyCombineInput& in, void* combined_x, Phase phase,
                       cudaStream_t stream);
void preload_ll_kernels();

}  // namespace nvst::ep::detail
