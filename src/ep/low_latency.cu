// Low-latency dispatch and combine: a few hundred tokens per PE, no host
// synchronisation, CUDA-graph capturable, and each operation split into a
// send half and a receive half (Phase) so that other work can run between.
//
// Dispatch send: a block per token. Thread k claims a row for top-k slot k
// in the expert's receive buffer on the owning PE with one remote atomic add
// on that expert's slot counter and writes (source PE, token, k) there, and
// for an expert of this PE the row into own_row (what the combine reads);
// meanwhile the block loads the token's first pass. Then the row is
// quantised once (to fp8 e4m3 with one scale per 128 channels, if asked)
// and every piece is stored to all top-k rows. Rows land packed per expert,
// so the receiver needs no copy. Each block then adds 1 to dispatch_done[me]
// on every PE.
// Dispatch receive: wait until every PE's blocks have all signalled, then
// hand the slot counters out as recv_count and zero them for the next use.
// A whole call (Phase::kBoth) on one node is one launch: the send half's
// last block (by index) does the receive half as soon as every block has
// claimed its slots (ll_claimed) and the other PEs' rows are in; a second
// kernel would add a launch and its wait to every call, and waiting for
// this PE's own rows to drain first cost 2.6 us of a 9 us call at one PE.
//
// Combine send: each received row goes to its token's PE, into that PE's
// combine buffer at [token][k]: as it is (bf16 or fp16), a warp a row, or, with use_logfmt,
// as LogFMT-10 (logfmt.hpp: 10 bits a value where a group of 128 channels
// is under 1 in magnitude), a block a row (encoding is compute-bound).
// In a whole call with rows not LogFMT, a row for this PE's own token is
// not sent at all: the receive half reads it in x, at the row own_row names
// (a copy into the slot and a read back would triple what the sum reads; at
// one PE the send half has nothing to do). Each PE first tells every PE
// what it sends (combine_format: bf16, fp16 or LogFMT), so a receiver
// decodes each row as its sender chose. Combine receive (ll_reduce.cuh):
// wait for every PE, then out[t] = sum over k of w[t][k] * row[t][k] in
// fp32 (k in order, one fused multiply-add each), rounded once to the
// output's format (bf16 or fp16; float32 keeps the sum). A whole call on
// one node with rows not LogFMT is one launch: the send half's blocks go on
// to the sums.
//
// Every kernel here counts its launches with one atomic a block, at its
// start (ll_launch.cuh), and on one node is launched early behind the
// kernel before it (launch_order.cuh).
//
// Across nodes: a row for a PE of another node cannot claim a slot with a
// remote atomic. The block writes it as one record (source info, scales, x)
// into a local stage and puts it to the owner's far section for (expert,
// this PE) at this PE's own running count for that expert. The block that
// finishes last puts those counts to each such PE, setting its
// dispatch_done word to what B additions would (tell_far, ep_device.cuh).
// The receive half then moves each far section's records, source by
// source, behind the rows its node peers stored, so the output is packed as
// on one node. Combine: a row for another node goes back as one put (a
// LogFMT row is encoded into far_combine_stage first); the last block then
// tells combine_done there the same way. Both send halves
// end with a quiet: their stage and x may be rewritten once they are done.
//
// Buffers alternate between two sets (DeepEP's double buffering): a result
// stays valid until the dispatch after next. Each send half first waits
// until every other PE has reached it (one NVLink round trip), so a fast PE
// never writes into a slow PE's buffers early.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstdint>

#include "device/device_runtime.hpp"
#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"
#include "ep/ll_launch.cuh"
#include "ep/ll_reduce.cuh"
#include "ep/logfmt.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::ep::detail {

// A named namespace, not an anonymous one: kernels of internal linkage get
// names (__nv_static_...) that profilers do not demangle, and DeepEP's
// bench_kineto looks for "dispatch" and "combine" in the first 100 characters.
namespace low_latency {

constexpr int kThreads = 512;
// The combine send half: blocks of 256 threads, two an SM, so that two
// LogFMT rows are encoded at once on every SM (one block a row).
constexpr int kCombineSendThreads = 256;
static_assert(kCombineSendThreads == kReduceThreads, "a whole call's kernel sends, then sums");
constexpr float kFp8Max = 448.0f;  // largest finite e4m3

// A lane's 16 bf16 channels (two vectors) to e4m3, with the scale of their
// 128-channel group, which the 8 lanes of an aligned group of 8 share: every
// lane of the warp calls it (shuffles), `active` lanes hold data. With
// round_scale the scale is rounded up to a power of two (DeepEP's
// round_scale), so that dequantising is an exponent add.
__device__ __forceinline__ int4 quantize_16(const int4 (&q)[2], bool active, bool round_scale, float& scale) {
  float f[16];
  float amax = 0.0f;
  if (active) {
    bf16x8_to_float(q[0], reinterpret_cast<float (&)[8]>(f[0]));
    bf16x8_to_float(q[1], reinterpret_cast<float (&)[8]>(f[8]));
#pragma unroll
    for (int k = 0; k < 16; ++k) amax = fmaxf(amax, fabsf(f[k]));
  }
#pragma unroll
  for (int m = 4; m >= 1; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  // A zero group still gets a finite scale (DeepEP clamps the same way).
  scale = fmaxf(amax, 1e-4f) / kFp8Max;
  if (round_scale) scale = exp2f(ceilf(log2f(scale)));
  const float inv = 1.0f / scale;
  int4 out;
  auto* pairs = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    pairs[k] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * k] * inv, f[2 * k + 1] * inv), __NV_SATFINITE, __NV_E4M3);
  return out;
}

// Stores scale j of row `slot` of local expert e into a receive buffer's
// scales (`scales`: this PE's or a node peer's), in the layout of
// ll_scale_at. UE8M0 keeps the exponent byte: the scale is a power of two
// (round_scale), so nothing is lost.
__device__ __forceinline__ std::uint32_t ue8m0_of(float scale) { return __float_as_uint(scale) >> 23; }
__device__ __forceinline__ void store_ll_scale(const LowLatencyArgs& a, void* scales, int rows_per_expert, int e,
                                               int slot, int j, float scale) {
  char* at = static_cast<char*>(scales) + ll_scale_at(a.use_ue8m0, a.hidden, rows_per_expert, e, slot, j);
  if (a.use_ue8m0)
    *reinterpret_cast<std::uint8_t*>(at) = static_cast<std::uint8_t>(ue8m0_of(scale));
  else
    *reinterpret_cast<float*>(at) = scale;
}

// What a block shares while it encodes rows as LogFMT.
constexpr int kLogfmtHalves = kCombineSendThreads / 16;  // half-warps of a block
constexpr int kLogfmtPer = 4;                            // groups a half-warp takes a round
constexpr int kLogfmtRound = kLogfmtHalves * kLogfmtPer;
static_assert(kLogfmtRound == 64, "a round's groups are one 64-bit mask");
struct LogfmtBlockShared {
  // Compressed groups, before they leave as 16-byte stores.
  int4 stage[kLogfmtHalves][kLogfmtPer][kLogfmtPackedBytes / 16];
  int packed[kLogfmtRound];  // whether group i of this round compresses
};

// The whole block (kCombineSendThreads) writes a bf16 row into a combine
// slot at dst as LogFMT (logfmt.hpp): the ranges at the head, then the
// groups back to back, and returns the bytes written from dst. A round
// covers 64 groups, four per half-warp (group g0 + u * 16 + h for half-warp
// h): each finds its groups' ranges, the block learns which of the round's
// groups compress (so where each lands: a compressed group is 96 bytes
// shorter), and then each half-warp encodes its groups. Ends with a
// barrier: the slot is whole.
//
// Why a block a row: encoding a value costs a log2 and more; a warp that
// encoded a whole row took 44 us (one row alone), and the send half
// 96-111 us at one PE against 18 us for bf16. Several groups
// a half-warp: their chains (load, reductions, encoding) overlap, and a row
// of up to 64 groups takes one round, two barriers. Blocks of 256
// threads, two an SM: two rows at once on every SM (42 -> 35.6 us);
// 512 threads with two groups a half-warp were slower.
__device__ std::size_t block_logfmt_encode_row(char* dst, const __nv_bfloat16* src, int hidden, LogfmtBlockShared& sh) {
  const int tid = static_cast<int>(threadIdx.x), h = tid >> 4, sub = tid & 15, lane = tid & 31;
  const int groups = hidden / kLogfmtGroup;
  std::size_t at = ll_logfmt_ranges_bytes(hidden);  // where the round's first group lands
  for (int g0 = 0; g0 < groups; g0 += kLogfmtRound) {
    int4 q[kLogfmtPer];
    float f[kLogfmtPer][8], amax[kLogfmtPer], amin[kLogfmtPer];
#pragma unroll
    for (int u = 0; u < kLogfmtPer; ++u) {
      const int g = g0 + u * kLogfmtHalves + h;
      q[u] = make_int4(0, 0, 0, 0);
      if (g < groups) q[u] = load_cg(reinterpret_cast<const int4*>(src) + g * (kLogfmtGroup / 8) + sub);
    }
#pragma unroll
    for (int u = 0; u < kLogfmtPer; ++u) {
      amax[u] = 0.0f;
      amin[u] = INFINITY;
      bf16x8_to_float(q[u], f[u]);  // an idle group's zeros: its range is not used
#pragma unroll
      for (int j = 0; j < 8; ++j) logfmt_fold(f[u][j], amax[u], amin[u]);
    }
#pragma unroll
    for (int m = 8; m >= 1; m >>= 1)  // within each half-warp
#pragma unroll
      for (int u = 0; u < kLogfmtPer; ++u) {
        amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xffffffffu, amax[u], m));
        amin[u] = fminf(amin[u], __shfl_xor_sync(0xffffffffu, amin[u], m));
      }
    // A group's range and encoder cost five accurate log2/exp2/divisions,
    // about as much as encoding its 8 values: lane u of the half-warp works
    // them out for group u, all four at once, and hands them round.
    float mx = amax[0], mn = amin[0];
#pragma unroll
    for (int u = 1; u < kLogfmtPer; ++u)
      if (sub == u) mx = amax[u], mn = amin[u];
    const LogfmtRange mine_r = logfmt_range(mx, mn);
    const LogfmtEncoder mine_e = logfmt_encoder(mine_r);
    LogfmtRange r[kLogfmtPer];
    LogfmtEncoder enc[kLogfmtPer];
    bool packed[kLogfmtPer];
#pragma unroll
    for (int u = 0; u < kLogfmtPer; ++u) {
      const int from = (lane & 16) + u;  // lane u of this half-warp
      r[u] = {__shfl_sync(0xffffffffu, mine_r.lo, from), __shfl_sync(0xffffffffu, mine_r.step, from)};
      enc[u] = {__shfl_sync(0xffffffffu, mine_e.lo, from), __shfl_sync(0xffffffffu, mine_e.inv_step, from),
                __shfl_sync(0xffffffffu, mine_e.bias, from)};
      packed[u] = g0 + u * kLogfmtHalves + h < groups && r[u].step >= 0.0f;
      if (sub == 0) sh.packed[u * kLogfmtHalves + h] = packed[u];
    }
    __syncthreads();
    // Bit i: group g0 + i compresses.
    const std::uint64_t round = __ballot_sync(0xffffffffu, sh.packed[lane]) |
                                static_cast<std::uint64_t>(__ballot_sync(0xffffffffu, sh.packed[lane + 32])) << 32;
    std::size_t mine[kLogfmtPer];  // where each of the half-warp's groups lands
#pragma unroll
    for (int u = 0; u < kLogfmtPer; ++u) {
      const int i = u * kLogfmtHalves + h;
      mine[u] = at + static_cast<std::size_t>(i) * kLogfmtBf16Bytes -
                static_cast<std::size_t>(__popcll(round & ((std::uint64_t{1} << i) - 1u))) *
                    (kLogfmtBf16Bytes - kLogfmtPackedBytes);
    }
#pragma unroll
    for (int u = 0; u < kLogfmtPer; ++u) {
      const int g = g0 + u * kLogfmtHalves + h;
      if (g >= groups) continue;
      if (sub == 0)
        reinterpret_cast<float2*>(dst)[g] = packed[u] ? make_float2(r[u].lo, r[u].step) : make_float2(0.0f, -1.0f);
      if (!packed[u]) {
        *reinterpret_cast<int4*>(dst + mine[u] + sub * 16) = q[u];
        continue;
      }
      std::uint32_t v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = logfmt_encode(f[u][j], enc[u]);
      std::uint16_t w[5];
      logfmt_pack8(v, w);
      auto* out = reinterpret_cast<std::uint16_t*>(reinterpret_cast<char*>(sh.stage[h][u]) + sub * 10);
#pragma unroll
      for (int k = 0; k < 5; ++k) out[k] = w[k];
    }
    __syncwarp();
#pragma unroll
    for (int u = 0; u < kLogfmtPer; ++u)
      if (packed[u] && sub * 16 < static_cast<int>(kLogfmtPackedBytes))
        *reinterpret_cast<int4*>(dst + mine[u] + sub * 16) = sh.stage[h][u][sub];
    const int in_round = min(kLogfmtRound, groups - g0);
    at += static_cast<std::size_t>(in_round) * kLogfmtBf16Bytes -
          static_cast<std::size_t>(__popcll(round)) * (kLogfmtBf16Bytes - kLogfmtPackedBytes);
    __syncthreads();  // sh is rewritten next round (or row)
  }
  return at;
}

// Block that finished last, thread r < n_pes for each PE r of another
// node: put the counts of this PE's records to r's experts into r's far_n,
// setting dispatch_done to base + B (after every record: one PE's commands to another
// are applied in order). The counts are copied first and then zeroed for
// the next launch; the quiet at the end of the kernel covers the copy.
__device__ __forceinline__ void put_far_counts(const LowLatencyArgs& a, int experts_per_pe, std::uint64_t done_total) {
  const dev::DeviceState& s = dev::state();
  int* sent = a.far_count + a.num_experts;
  for (int e = threadIdx.x; e < a.num_experts; e += blockDim.x) {
    sent[e] = a.far_count[e];
    a.far_count[e] = 0;
  }
  __syncthreads();
  const int r = static_cast<int>(threadIdx.x);
  if (r >= s.n_pes || dev::on_node(r)) return;
  __threadfence_system();
  const FarRun run{reinterpret_cast<char*>(a.far_n + s.my_pe * experts_per_pe), sent + r * experts_per_pe,
                   experts_per_pe * sizeof(int)};
  put_runs_then_tell(&run, 1, a.dispatch_done, r, done_total);
}

// Where row (token t, top-k slot k) goes, worked out by thread k of the
// block that sends token t.
struct DispatchDest {
  char* x;       // the row: in PE r's receive buffer (near) or the record's x in the stage (far); null: no expert
  void* scales;  // near: PE r's scales; far: the record's float scales
  int pe, local, slot;  // the expert's PE, its index there, the row in its buffer
  bool near;
};

// The scales of a token's row (`row_scales`, one per 128 channels, in
// shared memory) into each of its top-k destinations, a store per thread.
// A row's scales lie a column apart in the receiver's column-major layout,
// so no two share a line; 8 stores in a row from every 8th thread (the one
// that quantised the group) cost the fp8 dispatch 0.9 us at one PE, spread
// over the block about 0.4. Near: into PE r's scales in its layout, with
// UE8M0 four exponent bytes a store (one int32). Far: as floats into the
// record, which the receive half stores in the receiver's layout.
__device__ __forceinline__ void store_row_scales(const LowLatencyArgs& a, const DispatchDest* dest, int K,
                                                 int rows_per_expert, const float* row_scales) {
  const int groups = a.hidden / 128, per_store = a.use_ue8m0 ? 4 : 1, stores = groups / per_store;
  for (int i = static_cast<int>(threadIdx.x); i < K * stores; i += static_cast<int>(blockDim.x)) {
    const int k = i / stores, j = (i - k * stores) * per_store;
    const DispatchDest& d = dest[k];
    if (d.x == nullptr) continue;
    if (!d.near) {
      for (int q = 0; q < per_store; ++q) static_cast<float*>(d.scales)[j + q] = row_scales[j + q];
      continue;
    }
    char* at = static_cast<char*>(d.scales) + ll_scale_at(a.use_ue8m0, a.hidden, rows_per_expert, d.local, d.slot, j);
    if (a.use_ue8m0)
      *reinterpret_cast<std::uint32_t*>(at) = ue8m0_of(row_scales[j]) | ue8m0_of(row_scales[j + 1]) << 8 |
                                              ue8m0_of(row_scales[j + 2]) << 16 | ue8m0_of(row_scales[j + 3]) << 24;
    else
      *reinterpret_cast<float*>(at) = row_scales[j];
  }
}

// The receive half on one node: wait until every PE's send half has
// signalled, then hand the slot counters out as recv_count and zero them
// for the next use. One block. With `claimed` (a whole call on one node,
// where this PE's own blocks do not signal dispatch_done after their rows,
// count_self), it first waits until every block of this launch claimed its
// slots: the counts are whole then, and are handed out while the blocks'
// rows are still being stored.
__device__ __forceinline__ void publish_counts(const LowLatencyArgs& a, int experts_per_pe, std::uint64_t target,
                                               std::int64_t* cost, const unsigned long long* claimed = nullptr) {
  if (claimed != nullptr && threadIdx.x == 0)
    dev::detail::wait_until_impl<std::uint64_t>(reinterpret_cast<const std::uint64_t*>(claimed), dev::Cmp::kGe, target,
                                                dev::FailKind::kWaitTimeout, dev::state().my_pe);
  wait_all_pes(a.dispatch_done, target, cost);
  for (int e = threadIdx.x; e < experts_per_pe; e += blockDim.x) {
    a.recv_count[e] = reinterpret_cast<volatile int*>(a.slot_counter)[e];
    a.slot_counter[e] = 0;
  }
}

// With `fused` (Phase::kBoth on one node) the call is one launch: the last
// block (blockIdx) also does the receive half (publish_counts), as soon as
// every block has claimed its slots; with fewer tokens than blocks it has
// no token of its own, so the counts are out before the rows have landed.
__global__ void __launch_bounds__(kThreads) dispatch(LowLatencyArgs a, LowLatencyDispatchInput in, bool fused) {
  __shared__ DispatchDest dest[32];                         // top-k is at most 32 (the Buffer checks)
  __shared__ float row_scales[kMaxLowLatencyHidden / 128];  // fp8: the current token's
  wait_previous_kernel();
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, npes = s.n_pes;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, K = a.num_topk;
  const int experts_per_pe = a.num_experts / npes;
  const int rows_per_expert = npes * a.max_tokens;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * (a.use_fp8 ? 1 : 2);
  const std::size_t far_x_at = ll_far_x_at(a.hidden);
  // A thread's unit of a row: 16 channels for fp8 (two loads, one 16-byte
  // store of e4m3), 8 for bf16 (one vector in, one out). hidden % 128 == 0,
  // so a 128-channel group is 8 whole fp8 units.
  const int units = a.hidden / (a.use_fp8 ? 16 : 8);
  const int4* src = nullptr;  // the current token's row
  int4 q[2] = {make_int4(0, 0, 0, 0), make_int4(0, 0, 0, 0)};
  const auto load = [&](int u) {
    if (a.use_fp8) {
      q[0] = load_cg(src + 2 * u);
      q[1] = load_cg(src + 2 * u + 1);
    } else {
      q[0] = load_cg(src + u);
    }
  };
  const auto row_of = [&](int t) {
    return reinterpret_cast<const int4*>(static_cast<const __nv_bfloat16*>(in.x) +
                                         static_cast<std::size_t>(t) * a.hidden);
  };
  // Lane k < K of the block's last warp claims the row for top-k slot k of
  // token t (expert e) and writes its source info: a slot in the expert's
  // receive buffer on its PE (near) or a record in the stage (far). The
  // last warp: at hidden 7168 it holds no fp8 unit of a row, so the claims'
  // round trips run beside the others' quantisation, not before it.
  const int k_claim = tid - static_cast<int>(blockDim.x) + 32;  // K <= 32 (the Buffer checks)
  const bool claims = k_claim >= 0 && k_claim < K;
  const auto claim = [&](int t, std::int64_t e) {
    const int task = t * K + k_claim;
    DispatchDest d{nullptr, nullptr, 0, 0, 0, true};
    if (e < -1 || e >= a.num_experts)
      dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(task), static_cast<std::uint64_t>(e),
                static_cast<std::uint64_t>(a.num_experts), -1);
    int own = -1;
    if (e != -1) {
      const int r = d.pe = static_cast<int>(e) / experts_per_pe;
      d.local = static_cast<int>(e) % experts_per_pe;
      d.near = dev::on_node(r);
      d.slot = d.near ? atomicAdd_system(pe_ptr(a.slot_counter + d.local, r), 1) : atomicAdd(a.far_count + e, 1);
      // More rows than a buffer holds: a token names one expert twice.
      if (d.slot >= (d.near ? rows_per_expert : a.max_tokens))
        dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(task), static_cast<std::uint64_t>(e),
                  static_cast<std::uint64_t>(a.num_experts), -1);
      // Near: the row's arrays on PE r. Far: the parts of a record in the stage.
      const std::size_t row = static_cast<std::size_t>(d.local) * rows_per_expert + d.slot;
      if (r == me) own = static_cast<int>(row);
      char* record = a.far_stage + static_cast<std::size_t>(task) * a.far_rec;
      d.x = d.near ? pe_ptr(a.x, r) + row * row_bytes : record + far_x_at;
      d.scales = d.near ? static_cast<void*>(pe_ptr(static_cast<char*>(a.scales), r)) : record + ll_far_scales_at();
      int* info = d.near ? pe_ptr(a.src_info, r) + row * 3 : reinterpret_cast<int*>(record);
      info[0] = me;
      info[1] = t;
      info[2] = k_claim;
    }
    a.own_row[task] = own;  // where the combine finds this PE's own expert outputs of the token
    return d;
  };
  // The block's first token: its row's loads and its top-k ids go out
  // before the handshake (they read only this PE's inputs), so that their
  // latency hides under the handshake's. So do the claims of its rows for
  // this PE's own experts: the handshake keeps a PE from writing into a
  // slower PE's buffers, and this PE's own buffers are free by stream order
  // (its receive half of their last use ran before this kernel). The row's
  // first round of units is quantised before the handshake too: at one PE
  // the call's fixed cost is then the top-k ids' and the claims' two trips
  // to memory, beside the row's load and quantisation, not before them.
  std::int64_t first_e = -1;
  bool claimed_early = false;
  if (static_cast<int>(blockIdx.x) < in.num_tokens) {
    src = row_of(static_cast<int>(blockIdx.x));
    if (tid < units) load(tid);
    if (claims) {
      first_e = in.topk_idx[static_cast<int>(blockIdx.x) * K + k_claim];
      if (first_e >= 0 && first_e < a.num_experts && static_cast<int>(first_e) / experts_per_pe == me) {
        dest[k_claim] = claim(static_cast<int>(blockIdx.x), first_e);
        claimed_early = true;
      }
    }
  }
  int4 out = q[0];  // a unit of the row as it is stored: bf16 as loaded, or e4m3 with its group's scale
  float scale = 0.0f;
  if (a.use_fp8) out = quantize_16(q, tid < units, in.round_scale, scale);
  const unsigned long long base = ll_enter_send_half(a.dispatch_counters, a.dispatch_ready);
  if (fused) count_self(a.dispatch_done);
  // One node only: across nodes this kernel waits on the proxy (launch_order.cuh).
  if (a.far_x == nullptr) allow_next_kernel();
  // Every block counts itself in ll_claimed once all its slots are claimed
  // (a block without a token at once), in every launch, so that the word
  // reaches base + B with this launch's last claim.
  if (tid == 0 && static_cast<int>(blockIdx.x) >= in.num_tokens) ll_count_block(&a.dispatch_counters->ll_claimed);
  // A block per token: the row is loaded and quantised once and each unit
  // stored to all its top-k destinations (a warp per (token, k) quantised
  // every token 8 times: fp8 cost 11 us more than bf16 at one PE).
  for (int t = blockIdx.x; t < in.num_tokens; t += gridDim.x) {
    const bool first = t == static_cast<int>(blockIdx.x);
    if (!first) {
      src = row_of(t);
      if (tid < units) load(tid);
    }
    if (claims && !(first && claimed_early)) dest[k_claim] = claim(t, first ? first_e : in.topk_idx[t * K + k_claim]);
    if (!first) {  // quantised while the slots are claimed
      out = q[0];
      if (a.use_fp8) out = quantize_16(q, tid < units, in.round_scale, scale);
    }
    __syncthreads();
    // The block's last token: its count, by the last warp, which holds the
    // fewest units of a row. The release waits for the block's earlier
    // stores, and warp 0's rows started 0.6 us later behind it (a
    // timeline of one H200 at one PE; the call's end moved 0.05-0.1 us,
    // as the rows' stores are bound by L2's write rate).
    if (tid == static_cast<int>(blockDim.x) - 32 && t + static_cast<int>(gridDim.x) >= in.num_tokens)
      ll_count_block(&a.dispatch_counters->ll_claimed);
    for (int u0 = 0; u0 + (tid & ~31) < units; u0 += blockDim.x) {  // the same for the whole warp
      const int u = u0 + tid;
      const bool active = u < units;
      if (u0 > 0) {
        if (active) load(u);
        out = q[0];
        if (a.use_fp8) out = quantize_16(q, active, in.round_scale, scale);
      }
      if (!active) continue;
      for (int k = 0; k < K; ++k) {
        const DispatchDest& d = dest[k];
        if (d.x != nullptr) reinterpret_cast<int4*>(d.x)[u] = out;
      }
      if (a.use_fp8 && (u & 7) == 0) row_scales[u / 8] = scale;
    }
    if (a.use_fp8) {
      __syncthreads();  // row_scales whole
      store_row_scales(a, dest, K, rows_per_expert, row_scales);
    }
    __syncthreads();  // the records are whole; dest[] and row_scales are rewritten for the next token
    if (a.far_x == nullptr) continue;
    for (int k = tid >> 5; k < K; k += static_cast<int>(blockDim.x >> 5)) {
      const DispatchDest d = dest[k];
      if (d.x == nullptr || d.near) continue;
      // The record, up to the end of its x, into r's far section (expert local, source me).
      const std::size_t at = (static_cast<std::size_t>(d.local) * npes + me) * a.max_tokens + d.slot;
      // The block's stores to the record, before the proxy reads it (our
      // proxy_push fences too; the NVSHMEM backend's put may not).
      if (lane == 0) __threadfence_system();
      dev::putmem_nbi_warp(a.far_x + at * a.far_rec, d.x - far_x_at, far_x_at + row_bytes, d.pe);
    }
    __syncthreads();
  }
  signal_all_pes(a.dispatch_done, 0, fused);
  if (fused) {
    if (blockIdx.x == gridDim.x - 1)
      publish_counts(a, experts_per_pe, base + gridDim.x, in.wait_recv_cost_stats, &a.dispatch_counters->ll_claimed);
  } else if (a.far_x != nullptr && last_block_to_arrive(&a.dispatch_counters->blocks_packed)) {
    put_far_counts(a, experts_per_pe, base + gridDim.x);
    if (threadIdx.x == 0) dev::proxy_quiet();  // every block's puts read their records by now
  }
}

// Wait for every PE's send half; then, per local expert, the rows node
// peers stored are slot_counter[e] rows; records from PEs of other nodes
// move in behind them, source by source. recv_count gets the total and the
// slot counter is reset. One block per expert (one block when on one node).
// The receive halves' names hold neither "dispatch" nor "combine": a
// profiler (DeepEP's bench_kineto, say) finds one kernel of each per call.
__global__ void ll_receive_tokens(LowLatencyArgs a, int experts_per_pe, std::int64_t* wait_cost) {
  wait_previous_kernel();
  const dev::DeviceState& s = dev::state();
  const unsigned long long target = ll_launch_end_count(a.dispatch_counters);
  std::int64_t* cost = blockIdx.x == 0 ? wait_cost : nullptr;
  if (a.far_x == nullptr) {
    publish_counts(a, experts_per_pe, target, cost);
    return;
  }
  wait_all_pes(a.dispatch_done, target, cost);
  const int rows_per_expert = s.n_pes * a.max_tokens;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * (a.use_fp8 ? 1 : 2);
  const int scales_per_row = a.hidden / 128;
  const std::size_t far_x_at = ll_far_x_at(a.hidden);
  const int warp = static_cast<int>(threadIdx.x >> 5), warps = static_cast<int>(blockDim.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (int e = blockIdx.x; e < experts_per_pe; e += gridDim.x) {
    int at = *reinterpret_cast<volatile int*>(a.slot_counter + e);
    for (int src = 0; src < s.n_pes; ++src) {
      if (dev::on_node(src)) continue;
      const int n = load_cg(a.far_n + src * experts_per_pe + e);
      // Node peers' slots were bounded by the buffer, not by the far rows
      // still to come: a token naming one expert twice could fill it.
      if (n < 0 || n > rows_per_expert - at)
        dev::fail(dev::FailKind::kBadArgument, src, static_cast<std::uint64_t>(e), static_cast<std::uint64_t>(at),
                  static_cast<std::uint64_t>(n), -1);
      for (int j = warp; j < n; j += warps) {
        const char* record = a.far_x + ((static_cast<std::size_t>(e) * s.n_pes + src) * a.max_tokens + j) * a.far_rec;
        const std::size_t row = static_cast<std::size_t>(e) * rows_per_expert + at + j;
        char* d = a.x + row * row_bytes;
        warp_copy_row_multi<1>(&d, 1, record + far_x_at, row_bytes);
        if (a.use_fp8)
          for (int i = lane; i < scales_per_row; i += 32)
            store_ll_scale(a, a.scales, rows_per_expert, e, at + j, i,
                           load_cg(reinterpret_cast<const float*>(record + ll_far_scales_at()) + i));
        if (lane < 3) a.src_info[row * 3 + lane] = load_cg(reinterpret_cast<const int*>(record) + lane);
      }
      at += n;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      a.recv_count[e] = at;
      a.slot_counter[e] = 0;
    }
  }
}

// Where a received row goes back to: its source PE, its (token, k) there,
// and that slot's offset in the source's combine_x.
struct CombineRoute {
  int src, t, k;
  std::size_t to;
};
__device__ __forceinline__ CombineRoute combine_route(const LowLatencyArgs& a, std::size_t row,
                                                      std::size_t slot_bytes) {
  const int* info = a.src_info + row * 3;  // written by the source PE
  const int src = load_cg(info), t = load_cg(info + 1), k = load_cg(info + 2);
  return {src, t, k, (static_cast<std::size_t>(t) * a.num_topk + k) * slot_bytes};
}

// LogFMT combine send: the rows of all local experts, counted expert by
// expert, dealt to the blocks in turn (row j to block j % gridDim.x); a
// block encodes one row at a time (block_logfmt_encode_row).
__device__ __forceinline__ void logfmt_send_rows(const LowLatencyArgs& a, const char* x, int experts_per_pe,
                                                 int rows_per_expert, std::size_t slot_bytes) {
  using Scan = cub::BlockScan<int, kCombineSendThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int first_row[kCombineSendThreads];  // of each expert of the chunk, counted from the chunk's first
  __shared__ LogfmtBlockShared sh;
  const dev::DeviceState& s = dev::state();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, blocks = static_cast<int>(gridDim.x);
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2;
  int dealt = 0;  // rows of earlier chunks
  for (int e0 = 0; e0 < experts_per_pe; e0 += kCombineSendThreads) {
    const int chunk = min(kCombineSendThreads, experts_per_pe - e0);
    const int n = tid < chunk ? load_cg(a.recv_count + e0 + tid) : 0;
    int total = 0;
    Scan(scan).ExclusiveSum(n, first_row[tid], total);
    __syncthreads();
    for (int j = ((static_cast<int>(blockIdx.x) - dealt) % blocks + blocks) % blocks; j < total; j += blocks) {
      int lo = 0, hi = chunk - 1;  // the last expert whose rows start at or before j (it has rows)
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (first_row[mid] <= j)
          lo = mid;
        else
          hi = mid - 1;
      }
      const std::size_t row = static_cast<std::size_t>(e0 + lo) * rows_per_expert + (j - first_row[lo]);
      const CombineRoute to = combine_route(a, row, slot_bytes);
      const bool near = dev::on_node(to.src);
      // Straight into the peer's slot, or into the stage for the put.
      char* dst = near ? pe_ptr(a.combine_x, to.src) + to.to
                       : a.far_combine_stage + ll_far_combine_slot(to.src, s.node_first_pe, s.node_n_pes, a.max_tokens,
                                                                   a.num_topk, to.t, to.k) *
                                                   slot_bytes;
      const std::size_t bytes =
          block_logfmt_encode_row(dst, reinterpret_cast<const __nv_bfloat16*>(x + row * row_bytes), a.hidden, sh);
      if (!near && tid < 32) {
        // The block's stores to the stage, before the proxy reads it (our
        // proxy_push fences too; the NVSHMEM backend's put may not).
        if (lane == 0) __threadfence_system();
        dev::putmem_nbi_warp(a.combine_x + to.to, dst, bytes, to.src);
      }
    }
    dealt += total;
    __syncthreads();  // the scan's storage and first_row are reused
  }
}

// The combine's send half and, with `reduce` (a whole call on one node with
// rows not LogFMT, the call's one launch), its receive half after it. With
// `both` (Phase::kBoth: the receive half follows on the stream, or in this
// kernel), this PE's own combine_done is counted at once (count_self);
// with self_direct as well (rows not LogFMT), a row for this PE's own token
// is not sent at all: the receive half reads it in x, at the row the
// dispatch recorded in own_row (at one PE nothing is sent).
//
// With `reduce`, every block waits for every PE's blocks before it sums
// (reduce_tokens). That needs all of them running at once, as every kernel
// here does (2 blocks an SM, each SM's share).
__global__ void __launch_bounds__(kCombineSendThreads, 2)
    combine(LowLatencyArgs a, LowLatencyCombineInput in, void* out, bool both, bool self_direct, bool reduce) {
  wait_previous_kernel();
  const dev::DeviceState& s = dev::state();
  const unsigned long long base = ll_enter_send_half(a.combine_counters, a.combine_ready);
  if (both) count_self(a.combine_done);
  // One node only: across nodes this kernel waits on the proxy (launch_order.cuh).
  if (a.far_x == nullptr) allow_next_kernel();
  // Every receiver learns how this PE sends. It reads the word only after
  // every block's combine_done arrived: block 0's release add in
  // signal_all_pes (node peers) or the last block's tell_far, after this
  // signal in the proxy's order (other nodes), comes after it.
  const std::uint64_t format = in.use_logfmt                     ? kCombineSentLogfmt
                               : in.x_type == CombineType::kFP16 ? kCombineSentFp16
                                                                 : kCombineSentBf16;
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < s.n_pes)
    dev::signal_op(a.combine_format + s.my_pe, format, dev::SignalOp::kSet, static_cast<int>(threadIdx.x));
  const int experts_per_pe = a.num_experts / s.n_pes;
  const int rows_per_expert = s.n_pes * a.max_tokens;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2, slot_bytes = ll_combine_slot_bytes(a.hidden);
  const char* x = static_cast<const char*>(in.x);
  if (in.use_logfmt) {
    logfmt_send_rows(a, x, experts_per_pe, rows_per_expert, slot_bytes);
  } else if (!(self_direct && s.n_pes == 1)) {
    // A warp per row. Each local expert gets its own group of warps (a loop
    // over experts in every warp left all but a few warps idle: 413 us at
    // 128 tokens, r1).
    const WarpGrid w = warp_grid();
    const int per_expert = std::max(1, w.total_warps / experts_per_pe);
    const int groups = w.total_warps / per_expert;
    for (int e = w.warp_id / per_expert; w.warp_id < groups * per_expert && e < experts_per_pe; e += groups) {
      const int n = load_cg(a.recv_count + e);
      for (int i = w.warp_id % per_expert; i < n; i += per_expert) {
        const std::size_t row = static_cast<std::size_t>(e) * rows_per_expert + i;
        const CombineRoute to = combine_route(a, row, slot_bytes);
        const char* from = x + row * row_bytes;
        if (self_direct && to.src == s.my_pe) continue;  // read in place (own_row)
        if (dev::on_node(to.src)) {
          char* dst = pe_ptr(a.combine_x, to.src) + to.to;
          warp_copy_row_multi<1>(&dst, 1, from, row_bytes);
        } else {
          dev::putmem_nbi_warp(a.combine_x + to.to, from, row_bytes, to.src);
        }
      }
    }
  }
  signal_all_pes(a.combine_done, 0, both);
  // PEs of other nodes: combine_done = base + B after every block's puts, then a
  // quiet (x and the stage may be rewritten once the send half is done).
  if (a.far_x != nullptr && last_block_to_arrive(&a.combine_counters->blocks_packed)) {
    const int r = static_cast<int>(threadIdx.x);
    if (r < s.n_pes && !dev::on_node(r)) tell_far(a.combine_done, r, base + gridDim.x);
    __syncthreads();
    if (threadIdx.x == 0) dev::proxy_quiet();
  }
  if (!reduce) return;
  reduce_tokens(a, in, out, self_direct, [&] {
    wait_all_pes(a.combine_done, base + gridDim.x, blockIdx.x == 0 ? in.wait_recv_cost_stats : nullptr);
  });
}

// The receive half as a kernel of its own (Phase::kReceive, LogFMT, or
// across nodes). self_direct: as the send half's.
__global__ void __launch_bounds__(kReduceThreads, 2)
    ll_reduce_results(LowLatencyArgs a, LowLatencyCombineInput in, void* out, bool self_direct) {
  wait_previous_kernel();
  const unsigned long long target = ll_launch_end_count(a.combine_counters);
  reduce_tokens(a, in, out, self_direct,
                [&] { wait_all_pes(a.combine_done, target, blockIdx.x == 0 ? in.wait_recv_cost_stats : nullptr); });
}

}  // namespace low_latency

using low_latency::kCombineSendThreads;
using low_latency::kThreads;

namespace {
// SMs of the GPU, the unit of each low-latency grid (the combine's send
// half takes two blocks an SM): grids of at most kLlMaxBlocks (ll_launch.cuh).
int ll_sms() {
  const int sms = device_sm_count();
  NVST_REQUIRE(2 * sms <= kLlMaxBlocks, "nvst::ep: the low-latency kernels launch up to ", kLlMaxBlocks,
               " blocks, two an SM, and this GPU has ", sms, " SMs");
  return sms;
}
}  // namespace

void launch_ll_dispatch(const LowLatencyArgs& a, const LowLatencyDispatchInput& in, Phase phase, cudaStream_t stream) {
  const int sms = ll_sms();
  // On one node every kernel here is launched early (launch_order.cuh):
  // its launch overlaps the kernel before it on the stream. Not across
  // nodes, where the kernel before may wait on the proxy.
  const bool one_node = a.far_x == nullptr;
  // The whole call on one node is one launch: the send half's last block
  // does the receive half. Called alone (the hook), or across nodes (many
  // blocks move the far records), the receive half is a kernel of its own.
  const bool fused = phase == Phase::kBoth && one_node;
  if (phase != Phase::kReceive)
    nvst::detail::launch_early(one_node, low_latency::dispatch, sms, kThreads, stream, a, in, fused);
  if (phase != Phase::kSend && !fused) {
    const int experts_per_pe = a.num_experts / nvst::n_pes();
    const int blocks = a.far_x ? std::max(1, std::min(sms, experts_per_pe)) : 1;
    nvst::detail::launch_early(one_node, low_latency::ll_receive_tokens, blocks, 256, stream, a, experts_per_pe,
                               in.wait_recv_cost_stats);
  }
}

void launch_ll_combine(const LowLatencyArgs& a, const LowLatencyCombineInput& in, void* combined_x, Phase phase,
                       cudaStream_t stream) {
  const int sms = ll_sms();
  const bool one_node = a.far_x == nullptr;  // launched early, as the dispatch's kernels
  const bool both = phase == Phase::kBoth, self_direct = both && !in.use_logfmt;
  // A whole call on one node with rows not LogFMT is one launch. LogFMT
  // rows of this PE's own tokens go through its slots (their sums are
  // LogFMT's), which its own blocks would have to wait for: a kernel of its
  // own then.
  const bool fused = self_direct && one_node;
  if (phase != Phase::kReceive)
    nvst::detail::launch_early(one_node, low_latency::combine, 2 * sms, kCombineSendThreads, stream, a, in, combined_x,
                               both, self_direct, fused);
  if (phase != Phase::kSend && !fused) {
    const int chunks = (in.hidden / 8 + low_latency::kReduceTaskVecs - 1) / low_latency::kReduceTaskVecs;
    const int blocks = std::max(1, std::min(2 * sms, in.num_tokens * chunks));
    nvst::detail::launch_early(one_node, low_latency::ll_reduce_results, blocks, low_latency::kReduceThreads, stream, a,
                               in, combined_x, self_direct);
  }
}

void preload_ll_kernels() {
  nvst::detail::preload_kernels({reinterpret_cast<const void*>(low_latency::dispatch),
                                 reinterpret_cast<const void*>(low_latency::ll_receive_tokens),
                                 reinterpret_cast<const void*>(low_latency::combine),
                                 reinterpret_cast<const void*>(low_latency::ll_reduce_results)});
}

}  // namespace nvst::ep::detail
