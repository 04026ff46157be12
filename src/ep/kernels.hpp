// Host-side entry points of the EP kernels (layout.cu, normal_mode.cu,
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

constexpr int kLlMaxBlocks = 1024;  // blocks of a low-latency launch, at most
struct LaunchCounters {
  unsigned long long blocks_before;   // blocks of all earlier launches of this kind
  unsigned long long blocks_done;     // blocks of the current launch that finished
  unsigned long long blocks_packed;   // dispatch across nodes: blocks done packing (see normal_mode.cu)
  unsigned long long blocks_started;  // blocks of the current launch that started (start_ticket)
  unsigned long long ll_claimed;      // low-latency dispatch: blocks that claimed all their slots, ever
  // The low-latency kernels' base (blocks of all earlier launches of the
  // kind), once per block index (ll_launch.cuh): each block reads its own
  // word, so no two blocks of a launch touch one word.
  unsigned long long ll_base[kLlMaxBlocks];
};
// Widest row of the low-latency mode: the combine's receive keeps which
// LogFMT groups of a slot are compressed in 32 words of shared memory.
constexpr int kMaxLowLatencyHidden = 32 * 32 * 128;

// Most experts the layout counts (its shared-memory counters).
constexpr int kMaxLayoutExperts = 4096;

// The count exchange of a first dispatch (layout.cu). A row: the header,
// then the counts per PE, per node and per expert.
struct CountHeader {
  int hidden, num_topk, num_experts, x_type, num_sms, threads;
};
constexpr int kCountHeaderInts = sizeof(CountHeader) / sizeof(int);
struct CountExchange {
  int* table;              // symmetric [2 sets][R][row_ints]
  std::uint64_t* arrived;  // symmetric [2 sets][R]: the call whose row from PE p is in the set
  int row_ints;            // room for the largest row: kCountHeaderInts + R + N + kMaxLayoutExperts
};
// One exchange: `call` counts from 1, the same on every PE; the layout's
// counts must go to this PE's row of the call's set (count_row); every
// PE's row, `used_ints` ints each, lands in host_out (pinned, [R][used_ints]).
struct CountExchangeCall {
  CountExchange x;
  CountHeader header;
  int used_ints;
  std::uint64_t call;
  int* host_out;
};
constexpr int* count_row(const CountExchange& x, std::uint64_t call, int n_pes, int pe) {
  return x.table + (static_cast<std::size_t>(call & 1) * n_pes + pe) * x.row_ints;
}

// Also fills send_pos [T, R] (row of token t in its stream to PE r, or -1)
// when it is not null, and node_pos [T, n_nodes] (row of token t among this
// PE's tokens bound for node n, or -1) when it is not null.
// With `exchange`, the counts are then exchanged with every PE (layout.cu).
void launch_layout(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts, int n_pes,
                   int pes_per_node, const LayoutOutput& out, int* send_pos, int* node_pos, cudaStream_t stream,
                   const CountExchangeCall* exchange = nullptr);
void preload_layout_kernels();

// Where each array of a received row lives in a receive region: `capacity`
// rows, one array after another, each 16-byte aligned. A relay region (rows
// crossing to another node, see normal_mode.cu) has one more array, dst_pos:
// per row, its position in the stream to each PE of the target node.
struct DispatchRegion {
  std::size_t x = 0, scales = 0, topk_idx = 0, topk_weights = 0, src_idx = 0, dst_pos = 0;  // byte offsets
  std::size_t row_bytes = 0;                                                                // H * element size
  int capacity = 0;
  int positions = 0;  // ints of dst_pos per row (0: a receive region)
  // The layout for rows of this shape in `bytes` of symmetric memory.
  static DispatchRegion plan(std::size_t bytes, int hidden, int num_topk, XType x_type, int positions = 0);
};
struct CombineRegion {
  std::size_t x = 0, topk_weights = 0;
  int capacity = 0;
  static CombineRegion plan(std::size_t bytes, int hidden, int num_topk);
};

struct NormalArgs {
  int num_tokens, hidden, num_topk, num_experts;
  XType x_type;
  const int* send_pos;       // [T, R]
  int recv_offset[64];       // rows before mine in PE r's receive region (dispatch)
  int send_offset[65];       // node peer r: rows before r's in my combine region; [R]: all from this node
  int recv_begin[65];        // my received rows from PE s: [recv_begin[s], recv_begin[s+1])
  int peer_send_offset[64];  // node peer s: rows before mine in PE s's combine region
  char* dispatch_region;     // symmetric
  DispatchRegion dr;
  char* combine_region;  // symmetric
  CombineRegion cr;
  std::uint64_t* ready;      // symmetric [R]
  std::uint64_t* done;       // symmetric [R]
  LaunchCounters* counters;  // device
  // Combine on one node (combine_kernel, normal_mode.cu): node peer u sets
  // combine_flags[u * kCombineChunks + c] here to the launch's epoch once
  // the rows of its chunk c back to this PE (rows [c * chunk_rows, (c + 1)
  // * chunk_rows) of them, in this PE's token order) are written.
  std::uint64_t* combine_flags;  // symmetric [R][kCombineChunks]; only grows, never reset
  int chunk_rows;                // the same on every PE: combine_chunk_rows()
  // Across nodes (hierarchical dispatch, normal_mode.cu); send_region and
  // relay_region are nullptr when every PE is on this node. Node n is PEs
  // [n * G, (n + 1) * G); this PE's relay on node n is PE n * G + (me % G).
  int pes_per_node, n_nodes;  // G, N
  const int* node_pos;        // [T, N]
  int node_send_offset[65];   // rows before node n's in send_region; [N]: all (own node: 0 rows)
  int relay_put_offset[64];   // [n]: rows before mine in my relay on node n's relay_region
  int relay_begin[65];        // my relay_region's rows from node n: [relay_begin[n], relay_begin[n + 1])
  int relay_dst_offset[64];   // [n * G + j]: rows before PE (n, me % G)'s in PE (my node, j)'s dispatch region
  char* send_region;          // symmetric staging, rr layout: rows to my relays, node by node
  char* relay_region;         // symmetric, rr layout: rows from PEs of my local rank on other nodes
  DispatchRegion rr;
  // Combine across nodes: each PE stages the results of rows from other
  // nodes in combine_stage (cr layout, rows [0, node_lo) then [node_hi, R):
  // its received rows without those from this node), the relay sums them
  // per row it forwarded into send_region (cr layout, row i of relay_region)
  // and puts each node's run back; the source finds them in its combine
  // region after its node peers' rows, at send_offset[R] + node_send_offset[n].
  int* relay_pos;        // device [relay_begin[N], G]: the dispatch's dst_pos of my relay rows (handle)
  char* combine_stage;   // symmetric
  int node_recv_lo[64];  // [j]: node PE j's received rows from this node are [lo, hi)
  int node_recv_hi[64];
  int relay_back_offset[64];  // [n]: rows before this node's partials in PE (n, me % G)'s combine region
};

// Chunks of one PE's rows back to another, at most: the flags' size is
// fixed when the Buffer is made, so a chunk grows with the largest stream.
constexpr int kCombineChunks = 1024;
// Rows per chunk (one warp sends a chunk, then sets its flag) for a dispatch
// whose largest stream between two PEs has `max_rows` rows: at least 4, so
// that the release store's wait for the chunk's NVLink writes is paid once
// per 4 rows, not per row.
constexpr int combine_chunk_rows(int max_rows) {
  const int by_size = (max_rows + kCombineChunks - 1) / kCombineChunks;
  return by_size > 4 ? by_size : 4;
}

void launch_normal_dispatch(const NormalArgs& a, const DispatchInput& in, const Config& c, cudaStream_t stream);
void launch_normal_combine(const NormalArgs& a, const CombineInput& in, const CombineOutput& out, int num_recv,
                           const Config& c, cudaStream_t stream);
void preload_normal_kernels();

struct LowLatencyArgs {
  int max_tokens;  // M
  int hidden, num_topk, num_experts;
  bool use_fp8;
  bool use_ue8m0;  // fp8 scales as packed exponent bytes (see ll_scale_at)
  // Dispatch receive region (symmetric), one buffer:
  char* x;            // [E_local][R * M][H * (fp8 ? 1 : 2)]
  void* scales;       // per expert column-major: float [E_local][H / 128][R * M], or
                      // with use_ue8m0 int32 [E_local][H / 512][R * M] (4 exponent bytes each)
  int* src_info;      // [E_local][R * M][3]
  int* slot_counter;  // [E_local] (symmetric, zero between uses)
  int* recv_count;    // [E_local] (device, local)
  // [M][K] (device, local), written by this PE's dispatch: the row that
  // (token t, top-k slot k) went to when its expert is on this PE (the
  // combine reads that row of its x in place), else -1.
  int* own_row;
  std::uint64_t* dispatch_ready;  // symmetric [R]: PE p started its dispatch send
  std::uint64_t* dispatch_done;   // symmetric [R]
  // Combine receive region (symmetric), one buffer:
  char* combine_x;                // [M][K] slots: a row as bf16, fp16 or LogFMT (logfmt.hpp)
  std::uint64_t* combine_format;  // symmetric [R]: how PE p sent its rows (kCombineSent*, logfmt.hpp)
  std::uint64_t* combine_ready;   // symmetric [R]: PE p started its combine send
  std::uint64_t* combine_done;    // symmetric [R]
  LaunchCounters* dispatch_counters;
  LaunchCounters* combine_counters;
  // Across nodes (all nullptr when every PE is on this node). A row for a
  // PE of another node cannot claim its slot with a remote atomic; it goes
  // as one record [src_info: 16 B][scales: H / 128 x 4][x] into a section
  // of its own, and the receive half moves it into the packed rows.
  char* far_x;              // symmetric [E_local][R][M] records
  int* far_n;               // symmetric [R][E_local]: records PE s sent to local expert e
  char* far_stage;          // device [M * K] records to other nodes, staged for the put
  int* far_count;           // device [2][num_experts]: records per expert so far, and a copy to put
  std::size_t far_rec;      // bytes of a record slot (x as bf16)
  char* far_combine_stage;  // device [(R - G) * M * K] combine slots, one per set: LogFMT rows to other
                            // nodes, encoded here for the put; (source s, token t, k) at ll_far_combine_slot
};
// The slot of far_combine_stage that row (t, k) of PE `src` (of another
// node) is encoded into: PEs of other nodes numbered without this node's.
constexpr std::size_t ll_far_combine_slot(int src, int node_first_pe, int node_n_pes, int max_tokens, int num_topk,
                                          int t, int k) {
  const int far = src < node_first_pe ? src : src - node_n_pes;
  return (static_cast<std::size_t>(far) * max_tokens + t) * num_topk + k;
}
// A record of LowLatencyArgs::far_x for rows of `hidden`: where its scales
// and x start (16-byte aligned), and the bytes of a slot (x as bf16).
constexpr std::size_t ll_far_scales_at() { return 16; }
constexpr std::size_t ll_far_x_at(int hidden) {
  return 16 + (static_cast<std::size_t>(hidden) / 128 * 4 + 15) / 16 * 16;
}
constexpr std::size_t ll_far_record_bytes(int hidden) {
  return ll_far_x_at(hidden) + static_cast<std::size_t>(hidden) * 2;
}
// Byte offset in LowLatencyArgs::scales of scale j (of H / 128) of row
// `slot` of local expert e, rows_per_expert = R * M. DeepEP's layout: the
// last two dimensions are column-major (a scale column of all the expert's
// rows is contiguous, which TMA loads of a grouped GEMM want). With ue8m0,
// four scales share an int32, scale j in byte j % 4 (little-endian).
constexpr std::size_t ll_scale_at(bool ue8m0, int hidden, int rows_per_expert, int e, int slot, int j) {
  return ue8m0 ? ((static_cast<std::size_t>(e) * (hidden / 512) + j / 4) * rows_per_expert + slot) * 4 + j % 4
               : ((static_cast<std::size_t>(e) * (hidden / 128) + j) * rows_per_expert + slot) * 4;
}

void launch_ll_dispatch(const LowLatencyArgs& a, const LowLatencyDispatchInput& in, Phase phase, cudaStream_t stream);
void launch_ll_combine(const LowLatencyArgs& a, const LowLatencyCombineInput& in, void* combined_x, Phase phase,
                       cudaStream_t stream);
void preload_ll_kernels();

}  // namespace nvst::ep::detail
