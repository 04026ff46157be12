// The low-latency combine's weighted sums (low_latency.cu): out[t] = sum over
// k of w[t][k] * row[t][k] in fp32, k in order, one fused multiply-add each,
// rounded once to the output's format (bf16 or fp16; float32 keeps it).
//
// A block takes a task, (token t, 512 channels-of-8 of its row), and a thread
// two 16-byte vectors of it. What the token's slots need is loaded once per
// task into shared memory by threads 0..K-1, all at once: the expert (so the
// PE that sent the row), the weight, and, for a row of this PE's own
// (self_direct), its row in x as the dispatch recorded it (own_row); the
// first task's before the wait for the rows. The PEs' formats (bf16, fp16
// or LogFMT rows) are loaded by the block once. Then every slot's loads go out together, a batch of slots
// at a time: the row's bytes depend on no load but these (a warp a token
// before followed three dependent loads a token and kept every lane's slots
// in registers, which spilled).
//
// LogFMT slots (logfmt.hpp) hold a row's groups back to back, a compressed
// group 96 bytes shorter: where a thread's group starts depends on which
// groups before it are compressed. The block reads the ranges of each LogFMT
// slot once, a warp a (slot, 32 groups) with a ballot, into a mask in shared
// memory; a thread counts the bits below its group.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ep/ep_device.cuh"
#include "ep/kernels.hpp"
#include "ep/logfmt.hpp"

namespace nvst::ep::detail::low_latency {

constexpr int kReduceThreads = 256;
constexpr int kReduceVecs = 2;                                 // vectors a thread sums per task
constexpr int kReduceTaskVecs = kReduceThreads * kReduceVecs;  // per block and task
constexpr int kMaxLogfmtWords = kMaxLowLatencyHidden / kLogfmtGroup / 32;
constexpr int kMaxReducePes = 64;  // the Buffer takes at most 64 PEs: one mask of formats

struct ReduceShared {
  const char* src[32];  // slot k's row: its combine slot, or (self_direct, an expert of this PE) its row in x
  int pe[32];           // slot k's expert's PE; -1: no expert
  float wt[32];
  unsigned long long sender_logfmt;      // bit p: PE p sent LogFMT rows
  unsigned long long sender_fp16;        // bit p: PE p sent fp16 rows
  unsigned packed[32][kMaxLogfmtWords];  // LogFMT slot k: bit g % 32 of word g / 32 = group g compressed
};

// What a task's loops need, the same for every thread.
struct ReduceTask {
  int v0, vecs, num_topk;
};

// Where group g of a LogFMT slot starts: every compressed group before it
// is kLogfmtBf16Bytes - kLogfmtPackedBytes shorter.
__device__ __forceinline__ std::size_t logfmt_group_at(const unsigned* packed, int g, int hidden) {
  int before = 0;
  for (int w = 0; w < g / 32; ++w) before += __popc(packed[w]);
  before += __popc(packed[g / 32] & ((1u << (g & 31)) - 1u));
  return ll_logfmt_ranges_bytes(hidden) + static_cast<std::size_t>(g) * kLogfmtBf16Bytes -
         static_cast<std::size_t>(before) * (kLogfmtBf16Bytes - kLogfmtPackedBytes);
}

// The sums over the slots, kBatch slots' loads at a time. kLogfmt: some
// slots (bits of `logfmt`) came as LogFMT; kFp16: some (bits of `fp16`) as
// fp16. The others are bf16.
template <bool kLogfmt, bool kFp16, int kBatch>
__device__ __forceinline__ void sum_slots(const ReduceTask& c, const ReduceShared& sh, unsigned logfmt, unsigned fp16,
                                          int hidden, float (&acc)[kReduceVecs][8]) {
  for (int k0 = 0; k0 < c.num_topk; k0 += kBatch) {
    int4 q[kReduceVecs][kBatch];
    float2 rr[kReduceVecs][kBatch];  // a LogFMT group's range; y < 0: sent as bf16
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int k = k0 + j;
      const char* src = k < c.num_topk && sh.pe[k] >= 0 ? sh.src[k] : nullptr;
#pragma unroll
      for (int i = 0; i < kReduceVecs; ++i) {
        const int v = c.v0 + i * kReduceThreads;
        rr[i][j].y = -1.0f;
        if (src == nullptr || v >= c.vecs) continue;
        if (kLogfmt && ((logfmt >> k) & 1u)) {
          const int g = v / (kLogfmtGroup / 8), sub = v % (kLogfmtGroup / 8);
          const char* group = src + logfmt_group_at(sh.packed[k], g, hidden);
          if ((sh.packed[k][g / 32] >> (g & 31)) & 1u) {  // the thread's 10 bytes, 2-byte aligned
            rr[i][j] = load_cg(reinterpret_cast<const float2*>(src) + g);
            auto* w = reinterpret_cast<std::uint16_t*>(&q[i][j]);
            const auto* in = reinterpret_cast<const unsigned short*>(group + sub * 10);
#pragma unroll
            for (int b = 0; b < 5; ++b) w[b] = __ldcg(in + b);
          } else {
            q[i][j] = load_cg(reinterpret_cast<const int4*>(group) + sub);
          }
        } else {
          q[i][j] = load_cg(reinterpret_cast<const int4*>(src) + v);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int k = k0 + j;
      if (k >= c.num_topk || sh.pe[k] < 0) continue;
      const float wt = sh.wt[k];
#pragma unroll
      for (int i = 0; i < kReduceVecs; ++i) {
        if (c.v0 + i * kReduceThreads >= c.vecs) continue;
        float y[8];
        if (kLogfmt && rr[i][j].y >= 0.0f) {
          const auto* w = reinterpret_cast<const std::uint16_t*>(&q[i][j]);
          std::uint32_t codes[8];
          logfmt_unpack8({w[0], w[1], w[2], w[3], w[4]}, codes);
#pragma unroll
          for (int b = 0; b < 8; ++b) y[b] = logfmt_decode(codes[b], {rr[i][j].x, rr[i][j].y});
        } else if (kFp16 && ((fp16 >> k) & 1u)) {
          vec8_to_float<__half>(q[i][j], y);
        } else {
          bf16x8_to_float(q[i][j], y);
        }
#pragma unroll
        for (int b = 0; b < 8; ++b) acc[i][b] = __fmaf_rn(wt, y[b], acc[i][b]);
      }
    }
  }
}

// Elements [at, at + 8) of a combine's output: the sums rounded once to
// bf16 or fp16, or as they are (float32).
__device__ __forceinline__ void store_sum8(void* out, std::size_t at, CombineType type, const float (&acc)[8]) {
  if (type == CombineType::kFP32) {
    auto* o = reinterpret_cast<float4*>(static_cast<float*>(out) + at);
    o[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    o[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  } else {
    *reinterpret_cast<int4*>(static_cast<char*>(out) + at * 2) =
        type == CombineType::kFP16 ? round_vec8<__half>(acc) : round_bf16x8(acc);
  }
}

// Every block of the grid (kReduceThreads threads): the tasks blockIdx.x,
// + gridDim.x, ... With self_direct, a row of this PE's own expert is read
// where it is, in in.x, at the row own_row names; every other row from its
// combine slot, in the format its sender announced (combine_format); a row
// read in x is in this call's in.x_type (this PE's own word may still be
// the last call's: its own done signal was counted at the start).
// `wait()` waits for the rows (every PE's send half); the first task's slot
// facts, this PE's own inputs, are loaded before it, by the last warp (the
// wait's polls are threads 0..n_pes-1).
template <typename Wait>
__device__ __forceinline__ void reduce_tokens(const LowLatencyArgs& a, const LowLatencyCombineInput& in, void* out,
                                              bool self_direct, Wait&& wait) {
  __shared__ ReduceShared sh;
  const dev::DeviceState& s = dev::state();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int K = a.num_topk, experts_per_pe = a.num_experts / s.n_pes;
  const int own_rows = experts_per_pe * s.n_pes * a.max_tokens;
  const int vecs = a.hidden / 8, chunks = (vecs + kReduceTaskVecs - 1) / kReduceTaskVecs;
  const int groups = a.hidden / kLogfmtGroup, words = (groups + 31) / 32;
  const std::size_t slot_bytes = ll_combine_slot_bytes(a.hidden), row_bytes = static_cast<std::size_t>(a.hidden) * 2;
  ReduceTask c{0, vecs, K};
  // Slot k of a task's token, looked up by thread kReduceThreads - 32 + k.
  const int k = tid - (kReduceThreads - 32);
  const auto slot_facts = [&](int task) {
    if (k < 0 || k >= K || task >= in.num_tokens * chunks) return;
    const std::size_t tk = static_cast<std::size_t>(task / chunks) * K + k;
    const std::int64_t e = in.topk_idx[tk];
    const float w = in.topk_weights[tk];
    const int own = self_direct ? load_cg(a.own_row + tk) : -1;
    if (e < -1 || e >= a.num_experts)
      dev::fail(dev::FailKind::kBadArgument, -1, static_cast<std::uint64_t>(tk), static_cast<std::uint64_t>(e),
                static_cast<std::uint64_t>(a.num_experts), -1);
    const int pe = e >= 0 ? static_cast<int>(e) / experts_per_pe : -1;
    const bool mine = self_direct && pe == s.my_pe;
    // No row of this PE recorded for (t, k): topk_idx differs from the dispatch's.
    if (mine && (own < 0 || own >= own_rows))
      dev::fail(dev::FailKind::kBadArgument, s.my_pe, static_cast<std::uint64_t>(tk), static_cast<std::uint64_t>(own),
                static_cast<std::uint64_t>(own_rows), -1);
    sh.src[k] = mine ? static_cast<const char*>(in.x) + static_cast<std::size_t>(own) * row_bytes
                     : a.combine_x + tk * slot_bytes;
    sh.pe[k] = pe;
    sh.wt[k] = w;
  };
  slot_facts(static_cast<int>(blockIdx.x));
  wait();
  if (warp < kMaxReducePes / 32) {  // the senders' formats (they wrote them before their rows' signals)
    const std::uint64_t sent = tid < s.n_pes ? load_cg(a.combine_format + tid) : 0;
    const unsigned lf = __ballot_sync(0xffffffffu, sent == kCombineSentLogfmt);
    const unsigned h = __ballot_sync(0xffffffffu, sent == kCombineSentFp16);
    if (lane == 0) {
      reinterpret_cast<unsigned*>(&sh.sender_logfmt)[warp] = lf;
      reinterpret_cast<unsigned*>(&sh.sender_fp16)[warp] = h;
    }
  }
  for (int task = blockIdx.x; task < in.num_tokens * chunks; task += gridDim.x) {
    const int t = task / chunks;
    c.v0 = (task % chunks) * kReduceTaskVecs + tid;
    const char* slots = a.combine_x + static_cast<std::size_t>(t) * K * slot_bytes;
    if (task != static_cast<int>(blockIdx.x)) slot_facts(task);
    __syncthreads();
    // Which slots came as LogFMT, and which as fp16: every warp works it
    // out for itself.
    unsigned logfmt = 0, fp16 = 0;
    {
      const int pe = lane < K ? sh.pe[lane] : -1;
      const bool mine = self_direct && pe == s.my_pe;
      const bool lf = pe >= 0 && !mine && ((sh.sender_logfmt >> pe) & 1ull);
      const bool h = pe >= 0 && (mine ? in.x_type == CombineType::kFP16 : ((sh.sender_fp16 >> pe) & 1ull) != 0);
      logfmt = __ballot_sync(0xffffffffu, lf);
      fp16 = __ballot_sync(0xffffffffu, h);
    }
    if (logfmt != 0) {
      // The compressed-group masks: a warp a (slot, word), four at a time.
      constexpr int kAtOnce = 4, kWarps = kReduceThreads / 32;
      for (int p0 = warp; p0 < K * words; p0 += kWarps * kAtOnce) {
        float step[kAtOnce];
#pragma unroll
        for (int u = 0; u < kAtOnce; ++u) {
          const int p = p0 + u * kWarps, slot = p / words, g = (p % words) * 32 + lane;
          step[u] = -1.0f;
          if (p < K * words && ((logfmt >> slot) & 1u) && g < groups)
            step[u] =
                load_cg(&reinterpret_cast<const float2*>(slots + static_cast<std::size_t>(slot) * slot_bytes)[g].y);
        }
#pragma unroll
        for (int u = 0; u < kAtOnce; ++u) {
          const int p = p0 + u * kWarps;
          const unsigned m = __ballot_sync(0xffffffffu, step[u] >= 0.0f);
          if (lane == 0 && p < K * words && ((logfmt >> (p / words)) & 1u)) sh.packed[p / words][p % words] = m;
        }
      }
      __syncthreads();
    }
    float acc[kReduceVecs][8];
#pragma unroll
    for (int i = 0; i < kReduceVecs; ++i)
#pragma unroll
      for (int b = 0; b < 8; ++b) acc[i][b] = 0.0f;
    // 4 slots a batch: 8 spilled (128 registers a thread, two blocks an SM).
    // 4 still keep 64 KB of loads in flight an SM, 8 MB over the GPU, twice
    // what its bandwidth needs (4 TB/s for about a microsecond).
    // bf16 rows only (the common case) without the fp16 test.
    if (logfmt == 0 && fp16 == 0)
      sum_slots<false, false, 4>(c, sh, 0, 0, a.hidden, acc);
    else if (logfmt == 0)
      sum_slots<false, true, 4>(c, sh, 0, fp16, a.hidden, acc);
    else
      sum_slots<true, true, 4>(c, sh, logfmt, fp16, a.hidden, acc);
#pragma unroll
    for (int i = 0; i < kReduceVecs; ++i) {
      const int v = c.v0 + i * kReduceThreads;
      if (v < vecs)
        store_sum8(out, static_cast<std::size_t>(t) * a.hidden + static_cast<std::size_t>(v) * 8, in.out_type, acc[i]);
    }
    __syncthreads();  // sh is rewritten by the next task
  }
}

}  // namespace nvst::ep::detail::low_latency
