// Device-side pieces shared by the EP kernels (normal_mode.cu, low_latency.cu).
//
// Synchronisation between PEs uses counters that only grow, so nothing is
// ever reset between launches:
//  - LaunchCounters (device memory, one per kind of launch) holds how many
//    blocks all earlier launches of that kind had (`blocks_before`). Every
//    block reads it when it starts; the last block of a launch to finish
//    advances it. No block of a launch can start after its last block
//    finished, so all blocks of a launch read the same value, and every PE
//    counts the same launches (calls are collective with the same Config).
//    It lives on the GPU, so a CUDA graph that replays a launch stays right.
//  - Peer counters (symmetric words, one per source PE): each block of a
//    launch adds 1 to counter[me] on every peer, with release semantics,
//    after its stores. A PE that sees counter[p] >= blocks_before + B knows
//    all B blocks of PE p's current launch have finished their stores to it.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/launch_order.cuh"
#include "ep/kernels.hpp"
#include "nvst/device.cuh"

namespace nvst::ep::detail {

// This PE's or a node peer's copy of the symmetric object at `sym`.
template <typename T>
__device__ __forceinline__ T* pe_ptr(T* sym, int pe) {
  return pe == dev::state().my_pe ? sym : reinterpret_cast<T*>(dev::peer_address(sym, pe));
}

// Called by every thread at the start of a block: the launch's base count
// (in a kernel that follows the one whose launch_end advanced it, such as a
// receive half, that is the first kernel's base + B: the value its `done`
// signals reach).
__device__ __forceinline__ unsigned long long launch_base(const LaunchCounters* c) {
  __shared__ unsigned long long base;
  if (threadIdx.x == 0) base = *reinterpret_cast<const volatile unsigned long long*>(&c->blocks_before);
  __syncthreads();
  return base;
}

// Called by every thread at the start of a block: its place in the order in
// which this launch's blocks actually started (0 first). blockIdx promises
// no order; a kernel whose blocks wait for a role other blocks play gives
// that role by ticket, so it always goes to blocks already running.
__device__ __forceinline__ int start_ticket(LaunchCounters* c) {
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = static_cast<int>(atomicAdd(&c->blocks_started, 1ull));
  __syncthreads();
  return ticket;
}

// Called by every thread at the end of a block.
__device__ __forceinline__ void launch_end(LaunchCounters* c, unsigned long long base) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&c->blocks_done, 1ull) == gridDim.x - 1) {  // the last block of the launch
      c->blocks_done = 0;
      c->blocks_started = 0;  // every block took its ticket before it finished
      *reinterpret_cast<volatile unsigned long long*>(&c->blocks_before) = base + gridDim.x;
      __threadfence();
    }
  }
}

// Threads 0..n_pes-1 of the block each add 1 to counters[me] on one node
// peer (an NVLink atomic, release: after __syncthreads, every thread's
// earlier stores come first). A PE of another node is told the launch's
// total instead, `far_total` (see tell_far), by block 0 alone; with
// far_total 0 it is left out: the caller tells it after its puts to it.
// With skip_self, this PE's own word is left alone (see count_self).
__device__ __forceinline__ void signal_all_pes(std::uint64_t* counters, std::uint64_t far_total,
                                               bool skip_self = false) {
  __syncthreads();
  const dev::DeviceState& s = dev::state();
  const int p = static_cast<int>(threadIdx.x);
  if (p >= s.n_pes || (skip_self && p == s.my_pe)) return;
  if (dev::on_node(p))
    dev::detail::atom_add_release_sys(pe_ptr(counters + s.my_pe, p), 1);
  else if (far_total != 0 && blockIdx.x == 0)
    dev::signal_op(counters + s.my_pe, far_total, dev::SignalOp::kSet, p);
}

// What a PE of another node is told instead of B additions: counters[me]
// there reaches `total` = this launch's base + gridDim.x, the same value the
// additions would give (only this PE writes that word, and every PE counts
// the same launches). A SET through the proxy, which the receiving proxy
// applies with a copy-engine write, after this PE's earlier commands to
// that PE. An ADD would need a kernel there, which cannot start while a
// launch that waits for this very signal holds every SM (the low-latency
// kernels do: their first cross-node run hung that way).
__device__ __forceinline__ void tell_far(std::uint64_t* counters, int pe, std::uint64_t total) {
  dev::signal_op(counters + dev::state().my_pe, total, dev::SignalOp::kSet, pe);
}

// Bytes to put to a PE of another node: `bytes` from `src` (local) to `dst`
// (symmetric, the target's copy).
struct FarRun {
  char* dst;
  const void* src;
  std::size_t bytes;
};
// Puts the non-empty runs to PE `pe` (another node), the last of them also
// setting counters[me] there to `total`; with nothing to put, only that
// (tell_far). The proxy applies one PE's commands to another in order, so
// the signal lands after every run. One thread calls it.
__device__ __forceinline__ void put_runs_then_tell(const FarRun* runs, int n, std::uint64_t* counters, int pe,
                                                   std::uint64_t total) {
  int last = -1;
  for (int i = 0; i < n; ++i)
    if (runs[i].bytes) last = i;
  if (last < 0) {
    tell_far(counters, pe, total);
    return;
  }
  for (int i = 0; i < last; ++i)
    if (runs[i].bytes) dev::putmem_nbi(runs[i].dst, runs[i].src, runs[i].bytes, pe);
  dev::putmem_signal_nbi(runs[last].dst, runs[last].src, runs[last].bytes, counters + dev::state().my_pe, total,
                         dev::SignalOp::kSet, pe);
}

// Called by every thread of every block after its stores: true in the one
// block that arrives last, whose threads then see every block's stores
// (each block fences at system scope before it counts itself, so the
// proxy's copy engine sees them too; with system = false at GPU scope, for
// a last block that only reads what this GPU wrote). Resets the count for
// the next launch.
__device__ __forceinline__ bool last_block_to_arrive(unsigned long long* count, bool system = true) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (system)
      __threadfence_system();
    else
      __threadfence();
    last = atomicAdd(count, 1ull) == gridDim.x - 1;
    if (last) {
      *reinterpret_cast<volatile unsigned long long*>(count) = 0;
      if (system)
        __threadfence_system();
      else
        __threadfence();
    }
  }
  __syncthreads();
  return last;
}

// Threads 0..count-1 each wait until counters[first + i * stride] >=
// target; then the block proceeds (acquire, then a barrier: the whole block
// sees the peers' data). The PE `skip` (-1: none) is left out. With `cost`
// (one block of the launch passes it), each thread adds the GPU clock
// cycles it waited to cost[pe] (DeepEP's wait_recv_cost_stats; atomically:
// receive halves on two streams may share one array).
__device__ __forceinline__ void wait_pes(const std::uint64_t* counters, int first, int count, int stride,
                                         std::uint64_t target, int skip = -1, std::int64_t* cost = nullptr) {
  const int i = static_cast<int>(threadIdx.x);
  const int pe = first + i * stride;
  if (i < count && pe != skip) {
    const long long start = cost != nullptr ? clock64() : 0;
    dev::detail::wait_until_impl<std::uint64_t>(counters + pe, dev::Cmp::kGe, target, dev::FailKind::kWaitTimeout, pe);
    if (cost != nullptr)
      atomicAdd(reinterpret_cast<unsigned long long*>(cost + pe), static_cast<unsigned long long>(clock64() - start));
  }
  __syncthreads();
}
__device__ __forceinline__ void wait_all_pes(const std::uint64_t* counters, std::uint64_t target,
                                             std::int64_t* cost = nullptr) {
  wait_pes(counters, 0, dev::state().n_pes, 1, target, -1, cost);
}

// Programmatic dependent launch (device/launch_order.cuh) between a send
// half and the receive half right behind it (Phase::kBoth): every block of
// the send half calls allow_next_kernel once it runs, the receive half
// begins with wait_previous_kernel.
using nvst::detail::allow_next_kernel;
using nvst::detail::wait_previous_kernel;

// Which warp of the grid this is, how many there are, and the lane.
struct WarpGrid {
  int warp_id, total_warps, lane;
};
__device__ __forceinline__ WarpGrid warp_grid() {
  const int wpb = static_cast<int>(blockDim.x >> 5);
  return {static_cast<int>(blockIdx.x) * wpb + static_cast<int>(threadIdx.x >> 5), static_cast<int>(gridDim.x) * wpb,
          static_cast<int>(threadIdx.x & 31)};
}

// Loads of anything another agent wrote (a peer over NVLink, an earlier
// kernel) go through L2 only (ld.global.cg): an SM's L1 is not coherent with
// those writers within a kernel, and the data is streamed once anyway.
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  return __ldcg(p);
}

// The start of every send half: this launch's base count, then the ready
// handshake. Each block tells every PE "my PE started this launch" and
// waits until every PE said so. A PE starts a launch only after its earlier
// work on the stream, so nobody writes into buffers their owner may still be
// reading: without it, in the low-latency mode a fast PE's dispatch i + 2
// needs only a slow PE's dispatch i + 1 *send* to have finished, and could
// overwrite the slow PE's result of dispatch i while that is still in use
// (the promise is: valid until the dispatch after next). With skip_self
// (every launch that uses `ready` must pass the same), a PE neither tells
// nor waits for itself: that it started is true by the time it runs, and
// at one PE the handshake is then no work at all.
__device__ __forceinline__ unsigned long long enter_send_half(const LaunchCounters* c, std::uint64_t* ready,
                                                              bool skip_self = false) {
  const unsigned long long base = launch_base(c);
  signal_all_pes(ready, base + gridDim.x, skip_self);
  wait_pes(ready, 0, dev::state().n_pes, 1, base + 1, skip_self ? dev::state().my_pe : -1);
  return base;
}

// A send half whose receive half follows it on the same stream (Phase::kBoth)
// needs no signal from itself to itself: the receive half runs after it in
// stream order (or, fused, after every block arrived). Its blocks then leave
// counters[me] alone (signal_all_pes with skip_self) and one thread adds the
// launch's B here at once, so that the word keeps counting every block of
// every launch, as a later split launch's wait for itself expects.
__device__ __forceinline__ void count_self(std::uint64_t* counters) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(counters + dev::state().my_pe),
              static_cast<unsigned long long>(gridDim.x));
}

// 8 16-bit values (T: __nv_bfloat16 or __half) in a 16-byte vector as
// floats; summed into fp32 accumulators; and 8 accumulators rounded (once,
// to nearest) back into a vector.
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T round_to(float f);
template <>
__device__ __forceinline__ __nv_bfloat16 round_to<__nv_bfloat16>(float f) {
  return __float2bfloat16(f);
}
template <>
__device__ __forceinline__ __half round_to<__half>(float f) {
  return __float2half_rn(f);
}
template <typename T>
__device__ __forceinline__ void vec8_to_float(const int4& q, float (&f)[8]) {
  const auto* h = reinterpret_cast<const T*>(&q);
#pragma unroll
  for (int k = 0; k < 8; ++k) f[k] = to_float(h[k]);
}
template <typename T>
__device__ __forceinline__ int4 round_vec8(const float (&acc)[8]) {
  int4 o;
  auto* oh = reinterpret_cast<T*>(&o);
#pragma unroll
  for (int k = 0; k < 8; ++k) oh[k] = round_to<T>(acc[k]);
  return o;
}
__device__ __forceinline__ void bf16x8_to_float(const int4& q, float (&f)[8]) { vec8_to_float<__nv_bfloat16>(q, f); }
__device__ __forceinline__ int4 round_bf16x8(const float (&acc)[8]) { return round_vec8<__nv_bfloat16>(acc); }
__device__ __forceinline__ void add_bf16x8(float (&acc)[8], const int4& q) {
  float f[8];
  bf16x8_to_float(q, f);
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] += f[k];
}

// A warp copies one row of `bytes` (a multiple of 16, 16-byte aligned) from
// local memory to up to kMaxDst destinations: each piece is loaded once and
// stored to every destination, so a token sent to several PEs is read once.
template <int kMaxDst>
__device__ __forceinline__ void warp_copy_row_multi(char* const* dst, int n_dst, const char* src, std::size_t bytes) {
  constexpr int kUnroll = 4;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const std::size_t nvec = bytes / 16;
  const auto* s = reinterpret_cast<const int4*>(src);
  std::size_t i = static_cast<std::size_t>(lane);
  for (; i + 32 * (kUnroll - 1) < nvec; i += 32 * kUnroll) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_cg(s + i + 32 * u);
#pragma unroll
    for (int d = 0; d < kMaxDst; ++d) {
      if (d >= n_dst) break;
      auto* o = reinterpret_cast<int4*>(dst[d]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) o[i + 32 * u] = v[u];
    }
  }
  for (; i < nvec; i += 32) {
    const int4 v = load_cg(s + i);
    for (int d = 0; d < n_dst; ++d) reinterpret_cast<int4*>(dst[d])[i] = v;
  }
}

}  // namespace nvst::ep::detail
