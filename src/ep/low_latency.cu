// Low-latency dispatch and combine: a few hundred tokens per PE, no host
// synchronisation, CUDA-graph capturable, and each operation split into a
// send half and a receive half (Phase) so that other work can run between.
//
// Dispatch send: a warp per (token, top-k slot). It claims a row in the
// expert's receive buffer on the owning PE with one remote atomic add on that
// expert's slot counter, then stores the row there (quantised to fp8 e4m3
// with one scale per 128 channels if asked) with (source PE, token, k).
// Rows land packed per expert, so the receiver needs no copy. Each block
// then adds 1 to dispatch_done[me] on every PE.
// Dispatch receive: wait until every PE's blocks have all signalled, then
// hand the slot counters out as recv_count and zero them for the next use.
//
// Combine send: a warp per received row sends it to its token's PE, into
// that PE's combine buffer at [token][k], as bf16 or, with use_logfmt, as
// LogFMT-10 (logfmt.hpp: 10 bits a value where a group of 128 channels is
// under 1 in magnitude). Each PE first tells every PE which of the two it
// sends (combine_format), so a receiver decodes each row as its sender
// chose. Combine receive: wait for every PE, then out[t] = sum over k of
// w[t][k] * row[t][k] in fp32 (k in order, one fused multiply-add each),
// rounded once to bf16.
//
// Across nodes: a row for a PE of another node cannot claim a slot with a
// remote atomic. The warp writes it as one record (source info, scales, x)
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
// until every PE has reached it (one NVLink round trip), so a fast PE never
// writes into a slow PE's buffers early.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "device/device_runtime.hpp"
#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"
#include "ep/logfmt.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"

namespace nvst::ep::detail {

namespace {

constexpr int kThreads = 512;
constexpr float kFp8Max = 448.0f;  // largest finite e4m3

// One warp quantises a bf16 row to e4m3: lanes 0-15 and 16-31 each cover
// 128 channels (16 lanes x 8 values) per step, sharing one scale; with
// round_scale the scale is rounded up to a power of two (DeepEP's
// round_scale), so that dequantising is an exponent add. store_scale(j, s)
// puts scale j of the row where it belongs.
template <typename StoreScale>
__device__ __forceinline__ void warp_quantize_row(std::uint8_t* dst, const __nv_bfloat16* src, int hidden, int lane,
                                                  bool round_scale, StoreScale store_scale) {
  // Four steps' loads go out before the first step's work: one load, then
  // its amax, per step took 28 latency-bound steps a row at hidden 7168
  // (11 us more than the bf16 copy at one PE, r122).
  constexpr int kAhead = 4;
  const int vecs = hidden / 8;
  for (int base = 0; base < vecs; base += 32 * kAhead) {
    int4 q[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int v = base + 32 * u + lane;
      if (v < vecs) q[u] = load_cg(reinterpret_cast<const int4*>(src) + v);
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (base + 32 * u >= vecs) break;  // the same for the whole warp
      const int v = base + 32 * u + lane;
      const bool active = v < vecs;
      float f[8];
      float amax = 0.0f;
      if (active) {
        const auto* h = reinterpret_cast<const __nv_bfloat16*>(&q[u]);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          f[k] = __bfloat162float(h[k]);
          amax = fmaxf(amax, fabsf(f[k]));
        }
      }
#pragma unroll
      for (int m = 8; m >= 1; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
      if (!active) continue;
      // A zero group still gets a finite scale (DeepEP clamps the same way).
      float scale = fmaxf(amax, 1e-4f) / kFp8Max;
      if (round_scale) scale = exp2f(ceilf(log2f(scale)));
      const float inv = 1.0f / scale;
      std::uint8_t out[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) out[k] = __nv_fp8_e4m3(f[k] * inv).__x;
      *reinterpret_cast<uint2*>(dst + static_cast<std::size_t>(v) * 8) = *reinterpret_cast<const uint2*>(out);
      if ((lane & 15) == 0) store_scale(v / 16, scale);
    }
  }
}

// Stores scale j of row `slot` of local expert e into a receive buffer's
// scales (`scales`: this PE's or a node peer's), in the layout of
// ll_scale_at. UE8M0 keeps the exponent byte: the scale is a power of two
// (round_scale), so nothing is lost.
__device__ __forceinline__ void store_ll_scale(const LowLatencyArgs& a, void* scales, int rows_per_expert, int e,
                                               int slot, int j, float scale) {
  char* at = static_cast<char*>(scales) + ll_scale_at(a.use_ue8m0, a.hidden, rows_per_expert, e, slot, j);
  if (a.use_ue8m0) *reinterpret_cast<std::uint8_t*>(at) = static_cast<std::uint8_t>(__float_as_uint(scale) >> 23);
  else *reinterpret_cast<float*>(at) = scale;
}

// One warp writes a bf16 row into a combine slot at dst as LogFMT
// (logfmt.hpp): the ranges at the head, then the groups back to back. Two
// groups per step, one per half-warp; a step's bytes are assembled in
// `stage` (this warp's 512 bytes of shared memory) and leave as one 16-byte
// store per lane, so that NVLink carries whole vectors. Returns the bytes
// written from dst.
__device__ std::size_t warp_logfmt_encode_row(char* dst, const __nv_bfloat16* src, int hidden, int lane,
                                              char* stage) {
  const int groups = hidden / kLogfmtGroup, half = lane >> 4, sub = lane & 15;
  std::size_t at = ll_logfmt_ranges_bytes(hidden);
  for (int g0 = 0; g0 < groups; g0 += 2) {
    const int g = g0 + half;
    const bool active = g < groups;  // an odd group count leaves the last upper half idle
    int4 q = make_int4(0, 0, 0, 0);
    float f[8];
    float amax = 0.0f, amin = INFINITY;
    if (active) {
      q = load_cg(reinterpret_cast<const int4*>(src) + g * (kLogfmtGroup / 8) + sub);
      bf16x8_to_float(q, f);
#pragma unroll
      for (int j = 0; j < 8; ++j) logfmt_fold(f[j], amax, amin);
    }
#pragma unroll
    for (int m = 8; m >= 1; m >>= 1) {  // within each half-warp
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
      amin = fminf(amin, __shfl_xor_sync(0xffffffffu, amin, m));
    }
    const LogfmtRange r = logfmt_range(amax, amin);
    const bool packed = r.step >= 0.0f;
    const unsigned mask = __ballot_sync(0xffffffffu, active && packed && sub == 0);
    const int size0 = (mask & 1u) ? kLogfmtPackedBytes : kLogfmtBf16Bytes;
    const int size1 = g0 + 1 < groups ? ((mask >> 16) & 1u ? kLogfmtPackedBytes : kLogfmtBf16Bytes) : 0;
    char* mine = stage + (half ? size0 : 0);
    if (active) {
      if (packed) {
        const LogfmtEncoder enc = logfmt_encoder(r);
        std::uint32_t v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = logfmt_encode(f[j], enc);
        std::uint16_t w[5];
        logfmt_pack8(v, w);
        auto* out = reinterpret_cast<std::uint16_t*>(mine + sub * 10);
#pragma unroll
        for (int i = 0; i < 5; ++i) out[i] = w[i];
      } else {
        reinterpret_cast<int4*>(mine)[sub] = q;
      }
      if (sub == 0) reinterpret_cast<float2*>(dst)[g] = packed ? make_float2(r.lo, r.step) : make_float2(0.0f, -1.0f);
    }
    __syncwarp();
    const int chunk = size0 + size1;
    if (lane * 16 < chunk) *reinterpret_cast<int4*>(dst + at + lane * 16) = reinterpret_cast<const int4*>(stage)[lane];
    __syncwarp();  // the stage is rewritten next step
    at += static_cast<std::size_t>(chunk);
  }
  return at;
}

// The 8 channels [8 v, 8 v + 8) of a LogFMT combine slot, as floats. Every
// lane of the warp calls it (ballots), `active` lanes get their values.
__device__ void warp_logfmt_decode(const char* slot, int hidden, int v, bool active, int lane, float (&out)[8]) {
  const int groups = hidden / kLogfmtGroup, g = v / (kLogfmtGroup / 8), sub = v % (kLogfmtGroup / 8);
  const auto* ranges = reinterpret_cast<const float2*>(slot);
  int packed_before = 0;  // compressed groups before g: each is 96 bytes shorter
  for (int j0 = 0; j0 < groups; j0 += 32) {
    const int j = j0 + lane;
    const unsigned mask = __ballot_sync(0xffffffffu, j < groups && load_cg(&ranges[j].y) >= 0.0f);
    const int below = g - j0;
    if (below > 0) packed_before += __popc(below >= 32 ? mask : mask & ((1u << below) - 1u));
  }
  if (!active) return;
  const float2 rr = load_cg(ranges + g);
  const char* group = slot + ll_logfmt_ranges_bytes(hidden) + static_cast<std::size_t>(g) * kLogfmtBf16Bytes -
                      static_cast<std::size_t>(packed_before) * (kLogfmtBf16Bytes - kLogfmtPackedBytes);
  if (rr.y >= 0.0f) {
    std::uint16_t w[5];
    const auto* in = reinterpret_cast<const unsigned short*>(group + sub * 10);
#pragma unroll
    for (int i = 0; i < 5; ++i) w[i] = __ldcg(in + i);
    std::uint32_t codes[8];
    logfmt_unpack8(w, codes);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = logfmt_decode(codes[j], {rr.x, rr.y});
  } else {
    bf16x8_to_float(load_cg(reinterpret_cast<const int4*>(group) + sub), out);
  }
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

__global__ void __launch_bounds__(kThreads) ll_dispatch_send(LowLatencyArgs a, LowLatencyDispatchInput in) {
  const dev::DeviceState& s = dev::state();
  const int me = s.my_pe, npes = s.n_pes;
  const unsigned long long base = enter_send_half(a.dispatch_counters, a.dispatch_ready);
  const WarpGrid w = warp_grid();
  const int experts_per_pe = a.num_experts / npes;
  const int rows_per_expert = npes * a.max_tokens;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * (a.use_fp8 ? 1 : 2);
  const std::size_t far_x_at = ll_far_x_at(a.hidden);
  const int tasks = in.num_tokens * a.num_topk;
  for (int task = w.warp_id; task < tasks; task += w.total_warps) {
    const std::int64_t e = in.topk_idx[task];
    if (e == -1) continue;
    if (e < -1 || e >= a.num_experts)
      dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(task), static_cast<std::uint64_t>(e),
                static_cast<std::uint64_t>(a.num_experts), -1);
    const int t = task / a.num_topk, k = task % a.num_topk;
    const int r = static_cast<int>(e) / experts_per_pe, local = static_cast<int>(e) % experts_per_pe;
    const bool near = dev::on_node(r);
    int slot = 0;
    if (w.lane == 0)
      slot = near ? atomicAdd_system(pe_ptr(a.slot_counter + local, r), 1) : atomicAdd(a.far_count + e, 1);
    slot = __shfl_sync(0xffffffffu, slot, 0);
    // More rows than a buffer holds: a token names one expert twice.
    if (slot >= (near ? rows_per_expert : a.max_tokens))
      dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(task), static_cast<std::uint64_t>(e),
                static_cast<std::uint64_t>(a.num_experts), -1);
    // Near: the row's arrays on PE r. Far: the parts of a record in the stage.
    const std::size_t row = static_cast<std::size_t>(local) * rows_per_expert + slot;
    char* record = a.far_stage + static_cast<std::size_t>(task) * a.far_rec;
    char* dst = near ? pe_ptr(a.x, r) + row * row_bytes : record + far_x_at;
    int* dst_info = near ? pe_ptr(a.src_info, r) + row * 3 : reinterpret_cast<int*>(record);
    const auto* src = static_cast<const __nv_bfloat16*>(in.x) + static_cast<std::size_t>(t) * a.hidden;
    if (a.use_fp8) {
      // Near: into PE r's scales. Far: as floats into the record, which
      // the receive half stores in the receiver's layout.
      void* scales = near ? pe_ptr(static_cast<char*>(a.scales), r) : nullptr;
      float* far_scales = reinterpret_cast<float*>(record + ll_far_scales_at());
      warp_quantize_row(reinterpret_cast<std::uint8_t*>(dst), src, a.hidden, w.lane, in.round_scale,
                        [&](int j, float scale) {
                          if (near) store_ll_scale(a, scales, rows_per_expert, local, slot, j, scale);
                          else far_scales[j] = scale;
                        });
    } else {
      char* d = dst;
      warp_copy_row_multi<1>(&d, 1, reinterpret_cast<const char*>(src), row_bytes);
    }
    if (w.lane < 3) dst_info[w.lane] = w.lane == 0 ? me : (w.lane == 1 ? t : k);
    if (!near) {  // the record, up to the end of its x, into r's far section (expert local, source me)
      const std::size_t at = (static_cast<std::size_t>(local) * npes + me) * a.max_tokens + slot;
      dev::putmem_nbi_warp(a.far_x + at * a.far_rec, record, far_x_at + row_bytes, r);
    }
  }
  signal_all_pes(a.dispatch_done, 0);
  if (a.far_x != nullptr && last_block_to_arrive(&a.dispatch_counters->blocks_packed)) {
    put_far_counts(a, experts_per_pe, base + gridDim.x);
    if (threadIdx.x == 0) dev::proxy_quiet();  // every block's puts read their records by now
  }
  launch_end(a.dispatch_counters, base);
}

// Wait for every PE's send half; then, per local expert, the rows node
// peers stored are slot_counter[e] rows; records from PEs of other nodes
// move in behind them, source by source. recv_count gets the total and the
// slot counter is reset. One block per expert (one block when on one node).
__global__ void ll_dispatch_recv(LowLatencyArgs a, int experts_per_pe, std::int64_t* wait_cost) {
  const dev::DeviceState& s = dev::state();
  const unsigned long long target = launch_base(a.dispatch_counters);
  wait_all_pes(a.dispatch_done, target, wait_cost);
  if (a.far_x == nullptr) {
    for (int e = threadIdx.x; e < experts_per_pe; e += blockDim.x) {
      a.recv_count[e] = reinterpret_cast<volatile int*>(a.slot_counter)[e];
      a.slot_counter[e] = 0;
    }
    return;
  }
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

__global__ void __launch_bounds__(kThreads) ll_combine_send(LowLatencyArgs a, LowLatencyCombineInput in) {
  __shared__ int4 logfmt_stage[kThreads / 32][32];  // a warp's step of warp_logfmt_encode_row
  const dev::DeviceState& s = dev::state();
  const unsigned long long base = enter_send_half(a.combine_counters, a.combine_ready);
  // Every receiver learns how this PE sends. It reads the word only after
  // every block's combine_done arrived: block 0's release add in
  // signal_all_pes (node peers) or the last block's tell_far, after this
  // signal in the proxy's order (other nodes), comes after it.
  const std::uint64_t format = in.use_logfmt ? kCombineSentLogfmt : kCombineSentBf16;
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < s.n_pes)
    dev::signal_op(a.combine_format + s.my_pe, format, dev::SignalOp::kSet, static_cast<int>(threadIdx.x));
  const WarpGrid w = warp_grid();
  char* stage = reinterpret_cast<char*>(logfmt_stage[threadIdx.x >> 5]);
  const int experts_per_pe = a.num_experts / s.n_pes;
  const int rows_per_expert = s.n_pes * a.max_tokens;
  const std::size_t row_bytes = static_cast<std::size_t>(a.hidden) * 2, slot_bytes = ll_combine_slot_bytes(a.hidden);
  const char* x = static_cast<const char*>(in.x);
  // Each local expert gets its own group of warps (a loop over experts in
  // every warp left all but a few warps idle: 413 us at 128 tokens, r1).
  const int per_expert = std::max(1, w.total_warps / experts_per_pe);
  const int groups = w.total_warps / per_expert;
  for (int e = w.warp_id / per_expert; w.warp_id < groups * per_expert && e < experts_per_pe; e += groups) {
    const int n = load_cg(a.recv_count + e);
    for (int i = w.warp_id % per_expert; i < n; i += per_expert) {
      const std::size_t row = static_cast<std::size_t>(e) * rows_per_expert + i;
      const int* info = a.src_info + row * 3;  // written by the source PE
      const int src = load_cg(info), t = load_cg(info + 1), k = load_cg(info + 2);
      const std::size_t to = (static_cast<std::size_t>(t) * a.num_topk + k) * slot_bytes;
      const bool near = dev::on_node(src);
      const char* from = x + row * row_bytes;
      std::size_t bytes = row_bytes;
      if (in.use_logfmt) {  // encoded straight into the peer's slot, or into the stage for the put
        char* dst = near ? pe_ptr(a.combine_x, src) + to
                         : a.far_combine_stage + ll_far_combine_slot(src, s.node_first_pe, s.node_n_pes, a.max_tokens,
                                                                     a.num_topk, t, k) * slot_bytes;
        bytes = warp_logfmt_encode_row(dst, reinterpret_cast<const __nv_bfloat16*>(from), a.hidden, w.lane, stage);
        from = dst;
      } else if (near) {
        char* dst = pe_ptr(a.combine_x, src) + to;
        warp_copy_row_multi<1>(&dst, 1, from, row_bytes);
      }
      if (!near) dev::putmem_nbi_warp(a.combine_x + to, from, bytes, src);
    }
  }
  signal_all_pes(a.combine_done, 0);
  // PEs of other nodes: combine_done = base + B after every block's puts, then a
  // quiet (x and the stage may be rewritten once the send half is done).
  if (a.far_x != nullptr && last_block_to_arrive(&a.combine_counters->blocks_packed)) {
    const int r = static_cast<int>(threadIdx.x);
    if (r < s.n_pes && !dev::on_node(r)) tell_far(a.combine_done, r, base + gridDim.x);
    __syncthreads();
    if (threadIdx.x == 0) dev::proxy_quiet();
  }
  launch_end(a.combine_counters, base);
}

__global__ void __launch_bounds__(kThreads) ll_combine_recv(LowLatencyArgs a, LowLatencyCombineInput in,
                                                            __nv_bfloat16* out) {
  const unsigned long long target = launch_base(a.combine_counters);
  wait_all_pes(a.combine_done, target, in.wait_recv_cost_stats);
  const WarpGrid w = warp_grid();
  const int experts_per_pe = a.num_experts / dev::state().n_pes;
  const std::size_t slot_bytes = ll_combine_slot_bytes(a.hidden);
  // A warp per (token, slice of 32 vectors): 128 tokens still fill the GPU.
  // A slice is two LogFMT groups; every lane stays to the end (ballots).
  // Lane k first loads the token's k-th expert, weight and that sender's
  // format word, all at once; then the slots' loads go out 8 at a time and
  // the sum runs in k order. (A loop that loaded expert, format and slot
  // one k after another waited for 8 chains of dependent loads.)
  const int vecs = a.hidden / 8, slices = (vecs + 31) / 32;
  const unsigned all = 0xffffffffu;
  for (int task = w.warp_id; task < in.num_tokens * slices; task += w.total_warps) {
    const int t = task / slices, v = (task % slices) * 32 + w.lane;
    const bool active = v < vecs;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    // Top-k is at most 32 (the Buffer checks): lane k holds slot k's facts.
    const std::size_t tk_lane = static_cast<std::size_t>(t) * a.num_topk + w.lane;
    const std::int64_t e = w.lane < a.num_topk ? in.topk_idx[tk_lane] : -1;
    if (e < -1 || e >= a.num_experts)  // it picks the sender's format word below
      dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(tk_lane), static_cast<std::uint64_t>(e),
                static_cast<std::uint64_t>(a.num_experts), -1);
    const float wt_lane = e >= 0 ? in.topk_weights[tk_lane] : 0.0f;
    // The row came from the PE of expert e, in the format it announced.
    const bool logfmt_lane = e >= 0 && load_cg(a.combine_format + e / experts_per_pe) == kCombineSentLogfmt;
    const unsigned used = __ballot_sync(all, e >= 0), logfmt = __ballot_sync(all, logfmt_lane);
    const char* slots = a.combine_x + static_cast<std::size_t>(t) * a.num_topk * slot_bytes;
    for (int k0 = 0; k0 < a.num_topk; k0 += 8) {
      int4 q[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int k = k0 + j;
        if (k < a.num_topk && active && ((used & ~logfmt) >> k & 1u))
          q[j] = load_cg(reinterpret_cast<const int4*>(slots + k * slot_bytes) + v);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int k = k0 + j;
        if (k >= a.num_topk || !(used >> k & 1u)) continue;
        const float wt = __shfl_sync(all, wt_lane, k);
        float y[8];
        if (logfmt >> k & 1u) warp_logfmt_decode(slots + k * slot_bytes, a.hidden, v, active, w.lane, y);
        else if (active) bf16x8_to_float(q[j], y);
        if (!active) continue;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = __fmaf_rn(wt, y[i], acc[i]);
      }
    }
    if (active) reinterpret_cast<int4*>(out + static_cast<std::size_t>(t) * a.hidden)[v] = round_bf16x8(acc);
  }
}

}  // namespace

void launch_ll_dispatch(const LowLatencyArgs& a, const LowLatencyDispatchInput& in, Phase phase, cudaStream_t stream) {
  const int sms = device_sm_count();
  if (phase != Phase::kReceive) {
    ll_dispatch_send<<<sms, kThreads, 0, stream>>>(a, in);
    NVST_CHECK_LAUNCH();
  }
  if (phase != Phase::kSend) {
    const int experts_per_pe = a.num_experts / nvst::n_pes();
    const int blocks = a.far_x ? std::max(1, std::min(sms, experts_per_pe)) : 1;
    ll_dispatch_recv<<<blocks, 256, 0, stream>>>(a, experts_per_pe, in.wait_recv_cost_stats);
    NVST_CHECK_LAUNCH();
  }
}

void launch_ll_combine(const LowLatencyArgs& a, const LowLatencyCombineInput& in, void* combined_x, Phase phase,
                       cudaStream_t stream) {
  const int sms = device_sm_count();
  if (phase != Phase::kReceive) {
    ll_combine_send<<<sms, kThreads, 0, stream>>>(a, in);
    NVST_CHECK_LAUNCH();
  }
  if (phase != Phase::kSend) {
    const int tasks = in.num_tokens * ((in.hidden / 8 + 31) / 32);
    const int blocks = std::max(1, std::min(sms, (tasks + kThreads / 32 - 1) / (kThreads / 32)));
    ll_combine_recv<<<blocks, kThreads, 0, stream>>>(a, in, static_cast<__nv_bfloat16*>(combined_x));
    NVST_CHECK_LAUNCH();
  }
}

void preload_ll_kernels() {
  nvst::detail::preload_kernels({reinterpret_cast<const void*>(ll_dispatch_send),
                                 reinterpret_cast<const void*>(ll_dispatch_recv),
                                 reinterpret_cast<const void*>(ll_combine_send),
                                 reinterpret_cast<const void*>(ll_combine_recv)});
}

}  // namespace nvst::ep::detail
