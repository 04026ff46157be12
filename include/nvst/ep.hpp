// Expert parallelism (MoE): DeepEP-style dispatch and combine on the runtime.
//
// Every PE holds some experts (num_experts / n_pes each, PE p owns experts
// [p * E_local, (p + 1) * E_local)). Each token picks num_topk experts
// (topk_idx, -1 = no expert). Dispatch sends every token once to every PE
// that owns one of its experts; the experts compute; combine sends each
// result back to its token's PE and sums it there.
//
// Two modes, as DeepEP:
//  - normal (Buffer::dispatch / combine): throughput. Received tokens are
//    packed contiguously, source PE by source PE, in token order. A first
//    dispatch exchanges the counts (a host synchronisation: the receiver
//    must learn how many tokens arrive); its DispatchHandle lets later
//    dispatches with the same routing, and the combine, skip that step.
//  - low latency (Buffer::low_latency_dispatch / _combine): a few hundred
//    tokens per PE for decoding. One receive slot per (token, expert) in
//    fixed buffers sized by num_max_dispatch_tokens_per_rank, no host
//    synchronisation, CUDA-graph capturable, send and receive halves split
//    so that computation can run between them.
//
// Tensors are raw device pointers with the shapes stated (row-major,
// contiguous); the Python package wraps them in torch tensors. All calls are
// stream-ordered and collective: every PE calls them in the same order with
// the same Config, shape, x_type/use_fp8 and optional arguments (the first
// dispatch of a handle checks shape and Config across PEs; later calls trust
// them: the kernels count each other's blocks, so a PE with another num_sms
// would let the others read too early). Across nodes (logical nodes too)
// both modes work: node peers are reached over NVLink, PEs of other nodes
// through the proxy (src/ep/normal_mode.cu and low_latency.cu say how). Every
// node must have the same number of PEs. The normal mode is hierarchical,
// as DeepEP's: a token crosses to a node once, to the PE of its sender's
// local rank there, which forwards it over NVLink; in the combine that relay
// sums the node's results for the token (rounded once to bf16) and sends one
// row back. The low-latency mode is flat (as DeepEP's). A Buffer that spans
// nodes takes three more halves of num_nvl_bytes (a send stage, a relay
// region, a combine stage) and, in low-latency mode, a far section per
// expert and source. Across nodes a call's kernels wait on the proxy, whose
// copies need the copy engines and the driver: until they end, queue no
// copy, memset or transfer to pageable memory behind them on any stream,
// and allocate or free nothing; synchronize first (docs/09 lists what
// deadlocked, and how the proxy's watchdog names it).
//
// Failures: argument errors throw nvst::Error on the PE that made them; if
// its peers went ahead, their kernels stop after NVST_DEVICE_TIMEOUT_S
// naming the PE they waited for (nothing hangs, but the job is over). Under
// CUDA graphs: a captured call keeps raw pointers, so keep the handle (and
// the Buffer) alive while the graph exists, and a captured low-latency
// dispatch reuses its buffer set at every replay (its result is valid until
// the next replay).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

namespace nvst::ep {

namespace detail {
struct NormalArgs;
struct DispatchRegion;
struct CombineRegion;
}  // namespace detail

// Element type of the token rows.
enum class XType {
  kBF16,  // x: [T, H] bfloat16
  kFP8,   // x: [T, H] float8 e4m3, x_scales: [T, H / 128] float32 (one per 128 channels)
};
std::size_t xtype_size(XType t);

// How many blocks (SMs) a normal-mode kernel uses and how wide they are.
// Every PE must pass the same Config to the same call. All num_sms blocks of
// a dispatch must be resident at once (they wait for each other across
// PEs): fine on a GPU of its own, but two PEs sharing one GPU through MPS
// must leave each other room: num_sms x 2 <= SMs, and at most 512 threads
// per block (the one-node combine fills half of the GPU's block slots).
struct Config {
  int num_sms = 24;             // blocks of dispatch / combine (DeepEP's default: 24)
  int threads_per_block = 512;  // a multiple of 32, at most 1024
  // Throws nvst::Error naming the field when an invariant does not hold
  // (num_sms in [1, SMs of this GPU], threads a multiple of 32, ...).
  void validate() const;
};

// What get_dispatch_layout computes from topk_idx.
struct LayoutOutput {
  int* num_tokens_per_rank = nullptr;    // [n_pes]
  int* num_tokens_per_node = nullptr;    // [n_nodes], or nullptr to skip
  int* num_tokens_per_expert = nullptr;  // [num_experts]
  bool* is_token_in_rank = nullptr;      // [num_tokens, n_pes]
};
// topk_idx: [num_tokens, num_topk] int64 on the device; -1 = no expert;
// every other value must lie in [0, num_experts) (a bad index stops the
// kernel with a message). Stream-ordered; no host synchronisation.
void get_dispatch_layout(const std::int64_t* topk_idx, int num_tokens, int num_topk, int num_experts,
                         const LayoutOutput& out, cudaStream_t stream);

struct HandleMemory;  // src/ep/handle_memory.hpp

// The routing of one normal-mode dispatch: enough to repeat it without
// exchanging counts again, and for the combine that sends results back.
// Cheap to copy (device arrays are shared). The arrays go back to the
// Buffer's pool when the last copy goes, after the last dispatch or combine
// that used them; other work that reads them (a baseline reading send_pos)
// calls record_use on its stream, as torch's record_stream.
struct DispatchHandle {
  int num_tokens = 0, num_topk = 0, num_experts = 0, n_pes = 0;
  int num_recv_tokens = 0;                      // rows this PE received
  std::vector<int> count;                       // [src * n_pes + dst]: tokens src sends to dst
  std::vector<int> num_recv_tokens_per_expert;  // [E_local], aligned up to expert_alignment
  std::shared_ptr<int> send_pos;                // device [num_tokens, n_pes]: row of token t in its
                                                // stream to PE r, -1 if t does not go to r
  // Nodes (PEs [n * pes_per_node, (n + 1) * pes_per_node)). A token crosses
  // to another node once, however many of its PEs it goes to.
  int pes_per_node = 0;
  std::vector<int> node_count;           // [src * n_nodes + node]: tokens src sends to node
  std::shared_ptr<int> node_pos;         // device [num_tokens, n_nodes] when across nodes, else null
  std::shared_ptr<int> relay_pos;        // device [rows this PE relays, pes_per_node]: each one's row
                                         // at each PE of this node, -1 if none (the combine sums them)
  std::shared_ptr<HandleMemory> memory;  // owns the three arrays above
  bool valid() const { return n_pes > 0 && send_pos != nullptr; }
  // Work queued on `stream` so far reads the arrays (skipped under capture).
  void record_use(cudaStream_t stream) const;
  int n_nodes() const { return pes_per_node > 0 ? n_pes / pes_per_node : 0; }
  // Rows PE `src` put into PE `dst` before PE `src`'s own rows there start.
  int recv_offset(int src, int dst) const;
  // Rows of PE `src`'s combine buffer that come from PEs before `dst`.
  int send_offset(int src, int dst) const;
  // Rows PE `src`'s dispatch sends to other nodes (one per token and node),
  // and how many it would send if each PE were reached on its own.
  int rows_to_other_nodes(int src) const;
  int rows_to_other_nodes_flat(int src) const;
};

struct DispatchInput {
  const void* x = nullptr;                 // [T, H], XType
  const float* x_scales = nullptr;         // FP8: [T, H / 128]; else nullptr
  const std::int64_t* topk_idx = nullptr;  // [T, K]
  const float* topk_weights = nullptr;     // [T, K] or nullptr
  int num_tokens = 0, hidden = 0, num_topk = 0, num_experts = 0;
  XType x_type = XType::kBF16;
  int expert_alignment = 1;  // num_recv_tokens_per_expert is rounded up to it
};

// Where the received rows are: this PE's receive buffer (symmetric memory
// owned by the Buffer). Valid until the next dispatch on the same Buffer;
// copy out what must live longer (the Python package does by default).
struct DispatchOutput {
  void* recv_x = nullptr;                 // [num_recv_tokens, H], XType
  float* recv_x_scales = nullptr;         // FP8: [num_recv_tokens, H / 128]
  std::int64_t* recv_topk_idx = nullptr;  // [num_recv_tokens, K]: local expert, or -1
  float* recv_topk_weights = nullptr;     // [num_recv_tokens, K]: 0 where idx is -1
  int* recv_src_idx = nullptr;            // [num_recv_tokens]: the token's index on its source PE
  int num_recv_tokens = 0;
};

struct CombineInput {
  const void* x = nullptr;              // [num_recv_tokens, H] bfloat16: one result per received row
  const float* topk_weights = nullptr;  // [num_recv_tokens, K] to sum back, or nullptr
  const void* bias = nullptr;           // [T, H] bfloat16 added to the result, or nullptr
  int hidden = 0;
  const void* bias_2 = nullptr;  // a second [T, H] bfloat16 bias (DeepEP's bias pair), or nullptr
};
struct CombineOutput {
  void* combined_x = nullptr;              // [T, H] bfloat16: sum over PEs of the rows sent back
  float* combined_topk_weights = nullptr;  // [T, K] (when CombineInput::topk_weights is given)
};

// ---- low-latency mode ------------------------------------------------------

struct LowLatencyDispatchInput {
  const void* x = nullptr;                 // [T, H] bfloat16, T <= num_max_dispatch_tokens_per_rank
  const std::int64_t* topk_idx = nullptr;  // [T, K]
  int num_tokens = 0, hidden = 0, num_topk = 0, num_experts = 0;
  bool use_fp8 = true;       // quantise to e4m3 on the fly (one scale per 128 channels)
  bool round_scale = false;  // fp8: each scale rounded up to a power of two (DeepEP's round_scale)
  // fp8 with round_scale and hidden % 512 == 0: scales as UE8M0, their
  // exponent bytes (2^(b - 127)), four to an int32 (DeepEP's use_ue8m0).
  bool use_ue8m0 = false;
  // Optional [n_pes] int64 (device): the receive half adds, per source PE,
  // the GPU clock cycles it waited for that PE's rows (DeepEP's
  // dispatch_wait_recv_cost_stats: a slow PE or link stands out).
  std::int64_t* wait_recv_cost_stats = nullptr;
};
// Received rows, packed per local expert: expert e's rows are
// recv_x[e][0 .. recv_count[e]). Views of this PE's receive buffer, one of
// two that alternate: valid until the dispatch after next.
// Scales are DeepEP's: per expert column-major, so the scale j of row i of
// expert e is at [e][j][i]: float [E_local][H / 128][n_pes * M], or with
// use_ue8m0 bytes of int32 [E_local][H / 512][n_pes * M] (byte j % 4 of
// [e][j / 4][i]).
struct LowLatencyDispatchOutput {
  void* recv_x = nullptr;         // [E_local, n_pes * M, H], bf16 or fp8
  void* recv_x_scales = nullptr;  // fp8: see above; else nullptr
  int* recv_count = nullptr;      // [E_local] (device)
  int* recv_src_info = nullptr;   // [E_local, n_pes * M, 3]: source PE, token index, top-k slot
  int max_rows_per_expert = 0;    // n_pes * M
  int buffer_index = 0;           // which of the two buffers (the combine needs it)
};

// The element formats of a low-latency combine: its rows (bf16 or fp16) and
// its output (those, or float32: the fp32 sum before any rounding).
enum class CombineType { kBF16, kFP16, kFP32 };

struct LowLatencyCombineInput {
  const void* x = nullptr;                 // [E_local, n_pes * M, H] of x_type, packed as dispatched
  const std::int64_t* topk_idx = nullptr;  // [T, K] as given to the dispatch
  const float* topk_weights = nullptr;     // [T, K]
  int num_tokens = 0, hidden = 0, num_topk = 0, num_experts = 0;
  int buffer_index = 0;                          // from LowLatencyDispatchOutput
  std::int64_t* wait_recv_cost_stats = nullptr;  // optional [n_pes]: as the dispatch's, for the combine's rows
  // Send the rows in LogFMT-10 (src/ep/logfmt.hpp): groups of 128 channels
  // under 1 in magnitude as 10 bits a value (relative error at most 2.2 %),
  // others as bf16. A receiver decodes each sender's rows as that sender
  // chose, so PEs may differ; only the send half reads this.
  bool use_logfmt = false;
  // The rows' format (bf16 or fp16). Each sender announces its own, so a
  // receiver reads every slot as its sender wrote it; the send half reads
  // this, and a whole call's receive for the rows of this PE's own experts
  // (read in x). LogFMT encodes bf16 rows only.
  CombineType x_type = CombineType::kBF16;
  // combined_x's format: the fp32 sum of each token, rounded once to it
  // (not rounded with kFP32). Only the receive half reads this.
  CombineType out_type = CombineType::kBF16;
};

// Which halves of a low-latency call to launch. kBoth: the whole operation.
// kSend then (later, after other work on the stream) kReceive: DeepEP's
// return_recv_hook, so that computation overlaps the transfer.
enum class Phase { kBoth, kSend, kReceive };

class Buffer {
 public:
  // Collective. num_nvl_bytes: symmetric bytes for the normal mode (half
  // receives dispatched rows, half receives combined rows); 0 = no normal
  // mode. num_max_dispatch_tokens_per_rank (M), hidden, num_experts and
  // num_topk size the low-latency buffers; M = 0 = no low-latency mode.
  Buffer(std::size_t num_nvl_bytes, int num_max_dispatch_tokens_per_rank = 0, int ll_hidden = 0, int ll_num_experts = 0,
         int ll_num_topk = 0);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  int rank() const { return rank_; }
  int num_ranks() const { return n_pes_; }
  // This PE's normal-mode receive region (half of num_nvl_bytes; nullptr
  // and 0 without normal mode): raw symmetric memory that dispatch
  // overwrites (DeepEP's get_local_buffer_tensor).
  struct Region {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };
  Region local_nvl_region() const;
  // This PE's low-latency memory (nullptr and 0 without low-latency mode):
  // one symmetric block with both buffer sets' receive arrays, counters and
  // signals (DeepEP's RDMA buffer, get_local_buffer_tensor(use_rdma_buffer=
  // True)). Its layout is internal; the low-latency calls overwrite it.
  Region local_ll_region() const;

  // Bytes of num_nvl_bytes that hold `num_recv_tokens` received rows (the
  // most any PE receives, sends, or across nodes relays) of this shape.
  // DeepEP's get_dispatch_size_hint. Across nodes a relayed row also carries
  // its positions on the target node: call it after nvst::init there.
  static std::size_t nvl_size_hint(int num_recv_tokens, int hidden, int num_topk, XType x_type);
  // Symmetric heap of the low-latency buffers on one node. Across nodes the
  // Buffer also takes 1.5 x num_nvl_bytes (three stages) and about as
  // much as the x buffers again (the far sections, which local_ll_region
  // then includes); the constructor checks the heap for the whole and says
  // how much it needs. Across nodes it also takes device memory (cudaMalloc)
  // for stages, per buffer set: M x top-k records (dispatch) and, for
  // LogFMT, (n_pes - PEs per node) x M x top-k combine slots (about 120 MB
  // per set at DeepEP's 128 x top-8 of hidden 7168 on 2 nodes of 8).
  static std::size_t low_latency_size_hint(int num_max_dispatch_tokens_per_rank, int hidden, int n_pes, int num_experts,
                                           int num_topk);

  // Normal dispatch. Without a handle (handle.valid() false) it first
  // computes the layout and exchanges counts with every PE (host
  // synchronisation) and fills `handle`; with one it reuses it (then
  // topk_idx must route as before) and does not synchronise the host.
  DispatchOutput dispatch(const DispatchInput& in, DispatchHandle& handle, const Config& config, cudaStream_t stream);
  // Sends the rows of in.x back where dispatch took them from and sums them
  // per token, in PE order (deterministic). Uses handle from the dispatch.
  void combine(const CombineInput& in, const DispatchHandle& handle, const CombineOutput& out, const Config& config,
               cudaStream_t stream);

  // The low-latency kernels take every SM (one or two blocks an SM) and the
  // send halves wait for every PE. PEs sharing one GPU are tested with
  // time-slicing (no MPS daemon); under MPS a PE's kernel can hold SMs the
  // other PE's blocks need while it waits for them, so limit each client
  // (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50; untested) or give each PE a GPU.
  // kReceive finishes the send of buffer set `buffer_index` (from the kSend
  // call's output); -1 = the last one sent. With two micro-batches in flight
  // (send a, send b, receive a) pass it.
  LowLatencyDispatchOutput low_latency_dispatch(const LowLatencyDispatchInput& in, cudaStream_t stream,
                                                Phase phase = Phase::kBoth, int buffer_index = -1);
  // What low_latency_dispatch returns for buffer set `buffer_index` (0 or
  // 1), without launching anything: the views never move, so a caller may
  // keep them per set and use only the dispatch's buffer_index.
  LowLatencyDispatchOutput low_latency_views(int buffer_index, bool use_fp8) const;
  // combined_x: [T, H] of in.out_type = sum over k of topk_weights[t][k] x
  // the row expert topk_idx[t][k] produced for token t.
  void low_latency_combine(const LowLatencyCombineInput& in, void* combined_x, cudaStream_t stream,
                           Phase phase = Phase::kBoth);

 private:
  struct Impl;
  detail::NormalArgs normal_args(const DispatchHandle& handle, int hidden, const detail::DispatchRegion& dr,
                                 const detail::CombineRegion& cr) const;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, n_pes_ = 0;
};

}  // namespace nvst::ep
