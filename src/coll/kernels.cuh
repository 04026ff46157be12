// The collectives' GPU kernels and their launch templates, written on the
// device API (see coll.cu's top comment for the synchronisation and the
// workspace reuse argument). Included by coll.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "coll/coll_internal.hpp"
#include "coll/ring_layout.hpp"
#include "device/launch_order.cuh"
#include "nvst/device.cuh"

namespace nvst::coll::internal {

struct Args {
  const char* in;         // this PE's own contribution
  const char* in_base;    // what goes to PE p: in_base + p * in_stride
  std::size_t in_stride;  // 0: the same bytes to everyone (all_reduce, all_gather)
  int root;               // broadcast
  int dest;               // push to this PE only (reduce's root); -1: every PE
  char* out;
  std::size_t n;            // elements in this launch
  std::size_t out_stride;   // all_gather: bytes between PEs' parts of out
  int me, npes;             // this PE's index in the team, the team's size
  int pe_start, pe_stride;  // team member p is world PE pe_start + p * pe_stride
  char* data_buf[2];
  char* red_buf[2];
  std::uint64_t* flags;
  std::uint64_t* epoch;
  char* ll_buf[2];         // the ll push (lowlatency_push): lines from member p at p * 2 * kLowLatencyMax
  std::size_t slot_bytes;  // push algorithms: PE p's part of data[] starts at p * slot_bytes
  bool vec_ok;             // in and out are 16-byte aligned
  bool cross_node;         // some member is on another node: reached through the proxy
  bool push_blocking;      // ...and out overlaps what the pushes read (see overlaps())
  // ring (n = the whole count): S elements per segment (ring_layout.hpp);
  // this launch takes [ring_off, ring_off + ring_c) of every segment.
  std::size_t ring_seg, ring_off, ring_c;
  // The call (CallSig): its bits, and what a mismatch report names.
  std::uint32_t call;
  int call_root, team;
  std::size_t call_count;
  // Filled in the kernel by begin_launch():
  std::uint64_t e;
  std::uint64_t word;  // this launch's call word (call << kEpochBits | e): the value of its exchange flags
  char* data;          // this PE's data[e & 1]
  char* red;           // this PE's red[e & 1]
};

// The launch's epoch, the same in every block (see coll.cu's top comment).
// Members of other nodes this block has already sent a put_signal (data and
// phase-0 flag in one command) this launch: bit p for member p.
__device__ __forceinline__ unsigned long long& flagged_by_put() {
  __shared__ unsigned long long mask;
  return mask;
}

// Every collective kernel is launched early (launch_early, coll.cu): it
// first waits for the kernel before it on the stream, then, on one node,
// lets the next one be launched, so back-to-back collectives do not pay a
// launch gap. Across nodes it waits on the proxy, so it does not (see
// device/launch_order.cuh).
__device__ __forceinline__ void begin_launch(Args& a) {
  nvst::detail::wait_previous_kernel();
  if (!a.cross_node) nvst::detail::allow_next_kernel();
  __shared__ std::uint64_t e;
  if (threadIdx.x == 0) {
    e = *reinterpret_cast<volatile std::uint64_t*>(a.epoch) + 1;
    flagged_by_put() = 0;
  }
  __syncthreads();
  a.e = e;
  a.word = static_cast<std::uint64_t>(a.call) << kEpochBits | e;
  a.data = a.data_buf[e & 1];
  a.red = a.red_buf[e & 1];
}
__device__ __forceinline__ void end_launch(const Args& a) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    auto* done = reinterpret_cast<unsigned long long*>(a.epoch + 1);
    if (atomicAdd(done, 1ull) == gridDim.x - 1) {  // the last block
      // Across nodes: every block's proxy commands are posted (they came
      // before the count), and the sources are the caller's buffers, which
      // it may reuse once the kernel is done: complete them all first.
      if (a.cross_node) dev::quiet();
      *done = 0;
      *reinterpret_cast<volatile std::uint64_t*>(a.epoch) = a.e;
      __threadfence();
    }
  }
}

template <typename T>
struct Ops {
  __device__ static T sum(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return wrap_add(a, b);
    else
      return a + b;
  }
  __device__ static T prod(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return wrap_mul(a, b);
    else
      return a * b;
  }
  __device__ static T max(T a, T b) { return a > b ? a : b; }
  __device__ static T min(T a, T b) { return a < b ? a : b; }
};
template <>
struct Ops<__nv_bfloat16> {
  __device__ static __nv_bfloat16 sum(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
  }
  __device__ static __nv_bfloat16 max(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
  __device__ static __nv_bfloat16 min(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }
  __device__ static __nv_bfloat16 prod(__nv_bfloat16 a, __nv_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) * __bfloat162float(b));
  }
};
template <>
struct Ops<__half> {
  __device__ static __half sum(__half a, __half b) { return __float2half(__half2float(a) + __half2float(b)); }
  __device__ static __half max(__half a, __half b) { return __hmax(a, b); }
  __device__ static __half min(__half a, __half b) { return __hmin(a, b); }
  __device__ static __half prod(__half a, __half b) { return __float2half(__half2float(a) * __half2float(b)); }
};

template <typename T, RedOp OP>
__device__ __forceinline__ T apply(T a, T b) {
  if constexpr (OP == RedOp::kSum)
    return Ops<T>::sum(a, b);
  else if constexpr (OP == RedOp::kMax)
    return Ops<T>::max(a, b);
  else if constexpr (OP == RedOp::kProd)
    return Ops<T>::prod(a, b);
  else
    return Ops<T>::min(a, b);
}

// The world PE of team member p.
__device__ __forceinline__ int world_pe(const Args& a, int p) { return a.pe_start + p * a.pe_stride; }

// This PE's or team member p's copy of a symmetric buffer.
__device__ __forceinline__ const char* on_pe(const Args& a, const char* sym, int p) {
  return p == a.me ? sym : dev::peer_address(sym, world_pe(a, p));
}

// [lo, hi) of block b: ranges in whole 16-byte vectors, the same on every PE.
template <typename T>
__device__ __forceinline__ void block_range(std::size_t n, std::size_t& lo, std::size_t& hi) {
  constexpr std::size_t V = 16 / sizeof(T);
  const std::size_t per = ((n + gridDim.x - 1) / gridDim.x + V - 1) / V * V;
  lo = std::min(n, per * blockIdx.x);
  hi = std::min(n, lo + per);
}

// This block's flag for `from` in phase `phase`, as a symmetric address (on
// this PE; peer_address or the proxy reach the same word on others).
__device__ __forceinline__ std::uint64_t* my_flag(const Args& a, int phase, int from) {
  return a.flags + (static_cast<std::size_t>(phase) * kMaxPes + from) * kMaxBlocks + blockIdx.x;
}

// flags[phase][from][block] on member `pe`, where this PE can store to it
// (itself, an NVLink peer); null for a member of another node.
__device__ __forceinline__ std::uint64_t* flag_on(const Args& a, int phase, int from, int pe) {
  std::uint64_t* f = my_flag(a, phase, from);
  return pe == a.me ? f : reinterpret_cast<std::uint64_t*>(dev::peer_address(f, world_pe(a, pe)));
}

// Sets this block's flag for this PE (flags[phase][me][block]) to v on
// member p: a release store where it can reach the word, else a signal
// through the proxy (after this PE's earlier commands to p). One thread.
__device__ __forceinline__ void tell(const Args& a, int phase, int p, std::uint64_t v) {
  if (std::uint64_t* f = flag_on(a, phase, a.me, p))
    dev::detail::st_release_sys(f, v);
  else
    dev::signal_op(my_flag(a, phase, a.me), v, dev::SignalOp::kSet, world_pe(a, p));
}

__device__ __forceinline__ void check_call(const Args& a, std::uint64_t v, int p);  // below

// Kernels whose exchange has no phase-0 flags (ll, ring) still put their
// call word where block 0 of any other kernel waits for member me's
// (flags[0][me][0]), and read the one there while they wait in vain:
// members that picked other kernels for their calls meet there.
__device__ __forceinline__ std::uint64_t* call_slot(const Args& a, int from) {
  return a.flags + static_cast<std::size_t>(from) * kMaxBlocks;
}
__device__ __forceinline__ void check_call_slot(const Args& a, int p) {
  check_call(a, *reinterpret_cast<const volatile std::uint64_t*>(call_slot(a, p)), p);
}
// Puts this launch's call word in member p's call_slot (one thread). A
// release, as the exchange flags are: it comes after the earlier launches'
// writes, whose flags it may overwrite.
__device__ __forceinline__ void announce_call(const Args& a, int p) {
  std::uint64_t* slot = call_slot(a, a.me);
  if (auto* f = reinterpret_cast<std::uint64_t*>(dev::peer_address(slot, world_pe(a, p))))
    dev::detail::st_release_sys(f, a.word);
  else
    dev::signal_op(slot, a.word, dev::SignalOp::kSet, world_pe(a, p));
}
// Member p made another call than this PE (`theirs`: its call's bits):
// stops the kernel, naming both calls (the host words it: call_sig.cpp).
__device__ __noinline__ void call_mismatch(const Args& a, int p, std::uint32_t theirs) {
  // p may wait for a flag this PE will now never set: leave this PE's call
  // word where p's waits look, so p names the mismatch too, not a dead PE.
  announce_call(a, p);
  dev::fail(dev::FailKind::kCallMismatch, world_pe(a, p), a.call_count, theirs, a.call, a.team, a.call_root);
}

// Checks a call word `v` from member p: one of this launch that is not this
// PE's is a mismatch. A member already further has overwritten its word;
// the others' check covers that.
__device__ __forceinline__ void check_call(const Args& a, std::uint64_t v, int p) {
  if (v != a.word && (v & kEpochMask) == a.e) call_mismatch(a, p, static_cast<std::uint32_t>(v >> kEpochBits));
}

// Waits until member p's flag `f` reaches `value` (a step's flag); while
// it waits in vain, p's call word says whether p is in another call.
__device__ __forceinline__ void wait_step(const Args& a, const std::uint64_t* f, std::uint64_t value, int p) {
  unsigned polls = 0;
  std::uint64_t v;
  dev::detail::spin_until(
      [&] {
        if ((v = dev::detail::ld_acquire_sys(f)) >= value) return true;
        if ((++polls & 1023u) == 0) check_call_slot(a, p);
        return false;
      },
      [&] {
        dev::fail(dev::FailKind::kWaitTimeout, world_pe(a, p), dev::heap_offset(f), v, value,
                  static_cast<int>(dev::Cmp::kGe));
      });
}

// Waits until member p's flag `f` holds this launch's call word or a later
// launch's; a word of this launch from another call stops the kernel
// naming both: the cost is a mask and a compare on a word read anyway.
__device__ __forceinline__ void wait_call(const Args& a, const std::uint64_t* f, int p) {
  std::uint64_t v;
  unsigned polls = 0;
  dev::detail::spin_until(
      [&] {
        if (((v = dev::detail::ld_acquire_sys(f)) & kEpochMask) >= a.e) return true;
        if ((++polls & 1023u) == 0) check_call_slot(a, p);  // p may have stopped on a mismatch of its own
        return false;
      },
      [&] {
        dev::fail(dev::FailKind::kWaitTimeout, world_pe(a, p), dev::heap_offset(f), v & kEpochMask, a.e,
                  static_cast<int>(dev::Cmp::kGe));
      });
  check_call(a, v, p);
}

// Publishes [lo, hi) of `in` in this PE's workspace, then tells every PE
// (phase `phase`) and waits until every PE has told this one. A member of
// another node is told by a signal through the proxy, unless this block's
// push already sent it one with the data (push_to_peers). The flags carry
// the call word, so members in different calls stop here.
__device__ __forceinline__ void publish_and_wait(const Args& a, const char* src, char* dst_sym, std::size_t lo_b,
                                                 std::size_t hi_b, int phase) {
  if (src) dev::group_copy<dev::Scope::kBlock>(dst_sym + lo_b, src + lo_b, hi_b - lo_b);
  __syncthreads();  // every thread's stores precede the releases below
  const int t = static_cast<int>(threadIdx.x);
  if (t < a.npes) {
    if (phase != 0 || !(flagged_by_put() >> t & 1ull)) tell(a, phase, t, a.word);
    wait_call(a, my_flag(a, phase, t), t);
  }
  __syncthreads();
}

// out[i] = in_0[i] op in_1[i] op ... for i in [lo, hi), PEs in order.
template <typename T, RedOp OP>
__device__ __forceinline__ void reduce_range(const Args& a, const char* sym, T* out, std::size_t lo, std::size_t hi) {
  constexpr int V = 16 / sizeof(T);
  const std::size_t vlo = lo / V, vhi = hi / V;  // lo is a multiple of V
  for (std::size_t v = vlo + threadIdx.x; v < vhi; v += blockDim.x) {
    uint4 acc = reinterpret_cast<const uint4*>(on_pe(a, sym, 0))[v];
    for (int p = 1; p < a.npes; ++p) {
      uint4 x = reinterpret_cast<const uint4*>(on_pe(a, sym, p))[v];
      T* av = reinterpret_cast<T*>(&acc);
      const T* xv = reinterpret_cast<const T*>(&x);
#pragma unroll
      for (int k = 0; k < V; ++k) av[k] = apply<T, OP>(av[k], xv[k]);
    }
    if ((reinterpret_cast<std::uintptr_t>(out) & 15u) == 0) {
      reinterpret_cast<uint4*>(out)[v] = acc;
    } else {
      const T* av = reinterpret_cast<const T*>(&acc);
      for (int k = 0; k < V; ++k) out[v * V + k] = av[k];
    }
  }
  for (std::size_t i = vhi * V + threadIdx.x; i < hi; i += blockDim.x) {
    T acc = reinterpret_cast<const T*>(on_pe(a, sym, 0))[i];
    for (int p = 1; p < a.npes; ++p) acc = apply<T, OP>(acc, reinterpret_cast<const T*>(on_pe(a, sym, p))[i]);
    out[i] = acc;
  }
}

// PE p's contribution to element range: `in` for this PE, else the slot p
// peers pushed into this PE's workspace.
template <typename T>
__device__ __forceinline__ const T* contribution(const Args& a, int p) {
  return p == a.me ? reinterpret_cast<const T*>(a.in)
                   : reinterpret_cast<const T*>(a.data + static_cast<std::size_t>(p) * a.slot_bytes);
}

// out[i] = contribution_0[i] op contribution_1[i] op ..., all local reads.
template <typename T, RedOp OP>
__device__ __forceinline__ void reduce_slots(const Args& a, T* out, std::size_t lo, std::size_t hi) {
  constexpr int V = 16 / sizeof(T);
  const std::size_t vlo = lo / V, vhi = a.vec_ok ? hi / V : vlo;
  for (std::size_t v = vlo + threadIdx.x; v < vhi; v += blockDim.x) {
    uint4 acc = reinterpret_cast<const uint4*>(contribution<T>(a, 0))[v];
    for (int p = 1; p < a.npes; ++p) {
      uint4 x = reinterpret_cast<const uint4*>(contribution<T>(a, p))[v];
      T* av = reinterpret_cast<T*>(&acc);
      const T* xv = reinterpret_cast<const T*>(&x);
#pragma unroll
      for (int k = 0; k < V; ++k) av[k] = apply<T, OP>(av[k], xv[k]);
    }
    reinterpret_cast<uint4*>(out)[v] = acc;
  }
  for (std::size_t i = vhi * V + threadIdx.x; i < hi; i += blockDim.x) {
    T acc = contribution<T>(a, 0)[i];
    for (int p = 1; p < a.npes; ++p) acc = apply<T, OP>(acc, contribution<T>(a, p)[i]);
    out[i] = acc;
  }
}

// Writes [lo_b, hi_b) of what PE p should get (in_base + p * in_stride)
// into slot `me` of every peer p's workspace (NVLink stores: a push needs no
// round trip, a pull does). A member of another node gets one put_signal
// through the proxy: the data, then this block's phase-0 flag, which the
// proxy delivers only after the data (publish_and_wait then skips it).
__device__ __forceinline__ void push_to_peers(const Args& a, std::size_t lo_b, std::size_t hi_b) {
  for (int p = 0; p < a.npes; ++p) {
    if (p == a.me || hi_b <= lo_b || (a.dest >= 0 && p != a.dest)) continue;
    const int pe = world_pe(a, p);
    char* slot = a.data + static_cast<std::size_t>(a.me) * a.slot_bytes + lo_b;  // symmetric
    const char* src = a.in_base + static_cast<std::size_t>(p) * a.in_stride + lo_b;
    if (char* dst = dev::peer_address(slot, pe)) {
      dev::group_copy<dev::Scope::kBlock>(dst, src, hi_b - lo_b);
      continue;
    }
    std::uint64_t* flag = my_flag(a, 0, a.me);
    if (a.push_blocking)  // the proxy reads src later; this block may overwrite it below
      dev::putmem_signal_block(slot, src, hi_b - lo_b, flag, a.word, dev::SignalOp::kSet, pe);
    else
      dev::putmem_signal_nbi_block(slot, src, hi_b - lo_b, flag, a.word, dev::SignalOp::kSet, pe);
    if (threadIdx.x == 0) flagged_by_put() |= 1ull << p;
  }
}

// oneshot: push my range to every peer, signal, wait for theirs, reduce
// locally. Blocks run independently, so pushing and reducing overlap. With
// in_stride = count it is reduce_scatter: PE p gets part p of everyone's input.
// With dest = root it is reduce: only the root is pushed to and reduces.
template <typename T, RedOp OP>
__global__ void __launch_bounds__(kThreads) oneshot_kernel(Args a) {
  begin_launch(a);
  std::size_t lo, hi;
  block_range<T>(a.n, lo, hi);
  push_to_peers(a, lo * sizeof(T), hi * sizeof(T));
  publish_and_wait(a, nullptr, nullptr, 0, 0, 0);
  if (a.dest < 0 || a.dest == a.me) reduce_slots<T, OP>(a, reinterpret_cast<T*>(a.out), lo, hi);
  end_launch(a);
}

template <typename T, RedOp OP>
__global__ void __launch_bounds__(kThreads) twoshot_kernel(Args a) {
  begin_launch(a);
  std::size_t lo, hi;
  block_range<T>(a.n, lo, hi);
  publish_and_wait(a, a.in, a.data, lo * sizeof(T), hi * sizeof(T), 0);
  // Slice s of the block's range, in whole vectors.
  constexpr std::size_t V = 16 / sizeof(T);
  const std::size_t len = hi - lo;
  const std::size_t sp = ((len + a.npes - 1) / a.npes + V - 1) / V * V;
  auto slice = [&](int s, std::size_t& s_lo, std::size_t& s_hi) {
    s_lo = std::min(hi, lo + sp * static_cast<std::size_t>(s));
    s_hi = std::min(hi, s_lo + sp);
  };
  std::size_t s_lo, s_hi;
  slice(a.me, s_lo, s_hi);
  reduce_range<T, OP>(a, a.data, reinterpret_cast<T*>(a.red), s_lo, s_hi);
  publish_and_wait(a, nullptr, nullptr, 0, 0, 1);
  for (int p = 0; p < a.npes; ++p) {
    slice(p, s_lo, s_hi);
    if (s_hi > s_lo)
      dev::group_copy<dev::Scope::kBlock>(a.out + s_lo * sizeof(T), on_pe(a, a.red, p) + s_lo * sizeof(T),
                                          (s_hi - s_lo) * sizeof(T));
  }
  end_launch(a);
}

// all_to_all (reduce_scatter's push with a copy for the reduction): part p
// of the input (in_base + p * in_stride) goes to PE p, and PE p's part of
// out is at p * out_stride. all_gather is the case in_stride = 0.
__global__ void __launch_bounds__(kThreads) gather_kernel(Args a) {
  begin_launch(a);
  std::size_t lo, hi;
  block_range<std::uint8_t>(a.n, lo, hi);  // n in bytes here
  push_to_peers(a, lo, hi);
  publish_and_wait(a, nullptr, nullptr, 0, 0, 0);
  for (int p = 0; p < a.npes; ++p)
    if (hi > lo)
      dev::group_copy<dev::Scope::kBlock>(a.out + static_cast<std::size_t>(p) * a.out_stride + lo,
                                          contribution<std::uint8_t>(a, p) + lo, hi - lo);
  end_launch(a);
}

// all_to_allv: byte offsets and lengths per peer (kernel parameters, so a
// CUDA graph keeps them).
struct VArgs {
  Args a;
  std::size_t send_off[kMaxPes], send_len[kMaxPes], recv_off[kMaxPes], recv_len[kMaxPes];
};

// Rounds a message of `len` bytes takes through a slot (at least one: the
// first round carries the byte count).
__device__ __forceinline__ std::size_t v_rounds(std::size_t len, std::size_t slot) {
  return len == 0 ? 1 : (len + slot - 1) / slot;
}
// Round k's flag value: above every value of earlier launches.
__device__ __forceinline__ std::uint64_t v_value(std::uint64_t e, std::size_t k) { return (e << 24) | (k + 1); }
// Round k of a `len`-byte message: it starts at `base`; this block's part is
// [lo, hi) from there. A block owns the same bytes of the slot in every
// round (the slot's split, clipped to the round): its ack frees exactly what
// it read. (Splitting each round by its own length let a short last round's
// block b write bytes that block b' was still copying out, seen on 2x H200.)
__device__ __forceinline__ void v_range(std::size_t len, std::size_t slot, std::size_t k, std::size_t& base,
                                        std::size_t& lo, std::size_t& hi) {
  base = std::min(len, k * slot);
  block_range<std::uint8_t>(slot, lo, hi);
  const std::size_t n = std::min(len - base, slot);
  lo = std::min(lo, n);
  hi = std::min(hi, n);
}

// all_to_allv in one launch. After the usual flag exchange (every peer has
// finished its earlier launches, so the slots are free), each pair of PEs
// streams its message through the receiver's slot in rounds: the sender
// pushes round k once the receiver acked round k - 1, and flags it; the
// receiver copies it out and acks. Pairs need only their own count, and a
// receiver checks the sender's byte count (sent in round 0) against its own.
// (__grid_constant__: the per-peer arrays are read in place, never copied
// per thread.)
__global__ void __launch_bounds__(kThreads) alltoallv_kernel(const __grid_constant__ VArgs v) {
  Args a = v.a;
  begin_launch(a);
  publish_and_wait(a, nullptr, nullptr, 0, 0, 0);
  const std::size_t slot = a.slot_bytes;
  const int me = a.me;
  std::size_t lo, hi, base;
  block_range<std::uint8_t>(v.send_len[me], lo, hi);
  if (hi > lo)
    dev::group_copy<dev::Scope::kBlock>(a.out + v.recv_off[me] + lo, a.in_base + v.send_off[me] + lo, hi - lo);
  std::size_t rounds = 1;
  for (int p = 0; p < a.npes; ++p)
    if (p != me) rounds = std::max(rounds, std::max(v_rounds(v.send_len[p], slot), v_rounds(v.recv_len[p], slot)));
  for (std::size_t k = 0; k < rounds; ++k) {
    for (int p = 0; p < a.npes; ++p) {
      if (p == me || k >= v_rounds(v.send_len[p], slot)) continue;
      if (k > 0) {  // the receiver has copied round k - 1 out of its slot
        if (threadIdx.x == 0)
          dev::detail::wait_until_impl<std::uint64_t>(flag_on(a, kPhaseVAck, p, me), dev::Cmp::kGe, v_value(a.e, k - 1),
                                                      dev::FailKind::kWaitTimeout, world_pe(a, p));
        __syncthreads();
      }
      v_range(v.send_len[p], slot, k, base, lo, hi);
      const int pe = world_pe(a, p);
      char* slot_sym = a.data + static_cast<std::size_t>(me) * slot + lo;
      const char* src = a.in_base + v.send_off[p] + base + lo;
      if (char* near = dev::peer_address(slot_sym, pe)) {
        if (hi > lo) dev::group_copy<dev::Scope::kBlock>(near, src, hi - lo);
        continue;
      }
      // Another node: the byte count (round 0), then the data with the
      // round's flag, through the proxy in that order (a signal alone when
      // this block has no bytes of the round).
      if (k == 0 && threadIdx.x == 0)
        dev::signal_op(my_flag(a, kPhaseVLen, me), v.send_len[p], dev::SignalOp::kSet, pe);
      std::uint64_t* flag = my_flag(a, kPhaseVData, me);
      if (hi <= lo) {
        if (threadIdx.x == 0) tell(a, kPhaseVData, p, v_value(a.e, k));
      } else if (a.push_blocking) {  // out overlaps in: the proxy must read src before this block writes out
        dev::putmem_signal_block(slot_sym, src, hi - lo, flag, v_value(a.e, k), dev::SignalOp::kSet, pe);
      } else {
        dev::putmem_signal_nbi_block(slot_sym, src, hi - lo, flag, v_value(a.e, k), dev::SignalOp::kSet, pe);
      }
    }
    __syncthreads();  // every thread's stores precede the releases below
    const int t = static_cast<int>(threadIdx.x);
    if (t < a.npes && t != me && k < v_rounds(v.send_len[t], slot) && flag_on(a, kPhaseVData, me, t)) {
      if (k == 0) *reinterpret_cast<volatile std::uint64_t*>(flag_on(a, kPhaseVLen, me, t)) = v.send_len[t];
      dev::detail::st_release_sys(flag_on(a, kPhaseVData, me, t), v_value(a.e, k));
    }
    for (int q = 0; q < a.npes; ++q) {
      if (q == me || k >= v_rounds(v.recv_len[q], slot)) continue;
      if (threadIdx.x == 0) {
        dev::detail::wait_until_impl<std::uint64_t>(flag_on(a, kPhaseVData, q, me), dev::Cmp::kGe, v_value(a.e, k),
                                                    dev::FailKind::kWaitTimeout, world_pe(a, q));
        const std::uint64_t len = *reinterpret_cast<volatile std::uint64_t*>(flag_on(a, kPhaseVLen, q, me));
        if (k == 0 && len != v.recv_len[q])
          dev::fail(dev::FailKind::kCountMismatch, world_pe(a, q), 0, len, v.recv_len[q], -1);
      }
      __syncthreads();
      v_range(v.recv_len[q], slot, k, base, lo, hi);
      if (hi > lo)
        dev::group_copy<dev::Scope::kBlock>(a.out + v.recv_off[q] + base + lo,
                                            a.data + static_cast<std::size_t>(q) * slot + lo, hi - lo);
      __syncthreads();  // the slot is read before the ack frees it
      if (threadIdx.x == 0) tell(a, kPhaseVAck, q, v_value(a.e, k));
    }
  }
  end_launch(a);
}

// broadcast: the root pushes, everyone flags and waits (the flags keep the
// workspace reuse argument intact), then copies the root's slot to out.
__global__ void __launch_bounds__(kThreads) broadcast_kernel(Args a) {
  begin_launch(a);
  std::size_t lo, hi;
  block_range<std::uint8_t>(a.n, lo, hi);
  if (a.me == a.root) push_to_peers(a, lo, hi);
  publish_and_wait(a, nullptr, nullptr, 0, 0, 0);
  const char* src = a.me == a.root ? a.in : a.data + static_cast<std::size_t>(a.root) * a.slot_bytes;
  if (hi > lo && src != a.out) dev::group_copy<dev::Scope::kBlock>(a.out + lo, src + lo, hi - lo);
  end_launch(a);
}

// x = recv op own for n elements (either alone when the other is null),
// stored to dst and, when not null, out. own and out may be the same.
template <typename T, RedOp OP>
__device__ __forceinline__ void ring_combine(T* dst, T* out, const T* recv, const T* own, std::size_t n, bool vec) {
  constexpr int V = 16 / sizeof(T);
  const std::size_t nv = vec ? n / V : 0;
  for (std::size_t v = threadIdx.x; v < nv; v += blockDim.x) {
    uint4 x = reinterpret_cast<const uint4*>(recv ? recv : own)[v];
    if (recv && own) {
      const uint4 y = reinterpret_cast<const uint4*>(own)[v];
      T* xv = reinterpret_cast<T*>(&x);
      const T* yv = reinterpret_cast<const T*>(&y);
#pragma unroll
      for (int k = 0; k < V; ++k) xv[k] = apply<T, OP>(xv[k], yv[k]);
    }
    if (dst) reinterpret_cast<uint4*>(dst)[v] = x;
    if (out) reinterpret_cast<uint4*>(out)[v] = x;
  }
  for (std::size_t i = nv * V + threadIdx.x; i < n; i += blockDim.x) {
    const T x = recv ? (own ? apply<T, OP>(recv[i], own[i]) : recv[i]) : own[i];
    if (dst) dst[i] = x;
    if (out) out[i] = x;
  }
}

// ring all_reduce: 2(n-1) steps, each member sending one segment to its
// right neighbour per step, so every member sends 2(n-1)/n of the buffer
// (oneshot: n-1 times all of it). Step k moves segment (me - k) mod n:
// steps 0..n-2 carry partial reductions (received op own input), step n-1
// the first finished segment, the rest pass finished segments on. Step k's
// data lands in region k of the receiver's workspace; a NVLink neighbour is
// written directly, one across nodes gets a put_signal from region k of this
// PE's red[] (nothing there is rewritten before the end-of-launch quiet).
// Workspace reuse: a member finishes launch e only after every member's
// launch-e sends reached it, each sent after that member's launch e - 1
// ended: the argument in coll.cu's top comment.
template <typename T, RedOp OP>
__global__ void __launch_bounds__(kThreads) ring_kernel(Args a) {
  begin_launch(a);
  const int n = a.npes, me = a.me, left = (me + n - 1) % n, right = (me + 1) % n;
  const int right_pe = world_pe(a, right);
  std::size_t lo, hi;  // this block's part of every segment's slice
  block_range<T>(a.ring_c, lo, hi);
  const std::size_t region = a.ring_c * sizeof(T);
  char* right_ws = dev::peer_address(a.data, right_pe);  // null: across nodes
  const T* in = reinterpret_cast<const T*>(a.in);
  T* out = reinterpret_cast<T*>(a.out);
  const int last = ring::steps(n);  // receive-only: the last segment to arrive
  for (int k = 0; k <= last; ++k) {
    const auto [from, to] = ring::step_span(me, k, n, a.n, a.ring_seg, a.ring_off + lo, a.ring_off + hi);
    const T* recv = nullptr;
    if (k > 0) {  // the left neighbour's step k - 1 is here
      if (threadIdx.x == 0) {
        wait_step(a, my_flag(a, kPhaseRing, left), ring_value(a.e, k - 1), left);
        // Its block 0 put its call word here before its step 0's flag.
        if (k == 1 && blockIdx.x == 0) check_call_slot(a, left);
      }
      __syncthreads();
      recv = reinterpret_cast<const T*>(a.data + static_cast<std::size_t>(k - 1) * region) + lo;
    }
    const bool send = k < last;
    T* dst = nullptr;
    if (send) dst = reinterpret_cast<T*>((right_ws ? right_ws : a.red) + static_cast<std::size_t>(k) * region) + lo;
    ring_combine<T, OP>(dst, k >= n - 1 ? out + from : nullptr, recv, k <= n - 1 ? in + from : nullptr, to - from,
                        a.vec_ok);
    if (!send) continue;
    __syncthreads();  // every thread's stores precede the release
    if (k == 0 && blockIdx.x == 0 && threadIdx.x == 0) announce_call(a, right);  // before step 0's flag
    if (right_ws || to == from) {
      if (threadIdx.x == 0) tell(a, kPhaseRing, right, ring_value(a.e, k));
    } else {  // another node: the staged slice and the flag in one command
      dev::putmem_signal_nbi_block(a.data + static_cast<std::size_t>(k) * region + lo * sizeof(T), dst,
                                   (to - from) * sizeof(T), my_flag(a, kPhaseRing, me), ring_value(a.e, k),
                                   dev::SignalOp::kSet, right_pe);
    }
  }
  end_launch(a);
}

// Low-latency push (all_reduce, reduce_scatter, all_gather, all_to_all on
// one node): NCCL's LL protocol on the device API. A PE sends its part for
// each peer as 16-byte lines {d0, flag, d1, flag}: 8 bytes of data, each
// 4-byte half next to the launch's flag (its epoch), in one vector store.
// The receiver polls each line until both flags are this launch's; a
// (data, flag) pair is one aligned 8-byte word, which NVLink delivers whole
// (what NCCL's LL relies on), so the data is there too. No fence and no
// separate flag: one NVLink trip where the push kernels have three (the
// data, a system-scope release, the flag). Lines cost twice the bytes, so it
// is for small messages only (kLowLatencyMax bytes per part and launch).
// Reuse: the buffers alternate by epoch parity as the workspace does
// (coll.cu's top comment), and only these kernels write them, so a line
// holds either this launch's flag or an older one's, never a match by
// chance. Each thread sends, then receives, the same lines, so in place is
// safe: a line of out is written only after the input under it was sent.
// The second flag is the epoch xor the call's bits: members in different
// calls see this launch's first flag with a second that is not theirs.
__device__ __forceinline__ void ll_store(void* dst, uint2 d, std::uint32_t flag, std::uint32_t flag2) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(d.x), "r"(flag), "r"(d.y), "r"(flag2)
               : "memory");
}
__device__ __forceinline__ uint4 ll_load(const void* src) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src)
               : "memory");
  return v;
}
// Polls of a line whose first half is this launch's and whose second is
// not before that is a mismatch: the halves of one store arrive microseconds
// apart at most.
constexpr unsigned kLlTornPolls = 1u << 14;
// Waits for line `line` of this launch from member p; its 8 data bytes. A
// line of this launch from another call, or member p's call word in
// call_slot (it runs another kernel), stops the kernel naming both calls.
__device__ __forceinline__ uint2 ll_receive(const Args& a, const char* line, std::uint32_t flag, std::uint32_t flag2,
                                            int p) {
  uint4 v;
  unsigned polls = 0, torn = 0;
  dev::detail::spin_until(
      [&] {
        v = ll_load(line);
        if (v.y == flag && v.w == flag2) return true;
        if (v.y == flag && ++torn > kLlTornPolls) call_mismatch(a, p, (v.w ^ flag) & kCallBitsMask);
        if ((++polls & 1023u) == 0) check_call_slot(a, p);
        return false;
      },
      [&] {
        dev::fail(dev::FailKind::kWaitTimeout, world_pe(a, p), dev::heap_offset(line), v.y, flag,
                  static_cast<int>(dev::Cmp::kEq));
      });
  return make_uint2(v.x, v.z);
}
// Line i of n elements: 8 bytes as two words (fewer at the end, zero-padded).
template <typename T>
union LlLine {
  uint2 w;
  T v[8 / sizeof(T)];
};
template <typename T>
__device__ __forceinline__ LlLine<T> ll_pack(const char* src, std::size_t i, std::size_t n, bool aligned) {
  constexpr std::size_t kPer = 8 / sizeof(T);
  LlLine<T> u;
  if (aligned && (i + 1) * kPer <= n) {
    u.w = reinterpret_cast<const uint2*>(src)[i];
    return u;
  }
  u.w = make_uint2(0, 0);
  for (std::size_t k = 0; k < kPer && i * kPer + k < n; ++k) u.v[k] = reinterpret_cast<const T*>(src)[i * kPer + k];
  return u;
}
template <typename T>
__device__ __forceinline__ void ll_unpack(char* dst, std::size_t i, std::size_t n, bool aligned, const LlLine<T>& u) {
  constexpr std::size_t kPer = 8 / sizeof(T);
  if (aligned && (i + 1) * kPer <= n) {
    reinterpret_cast<uint2*>(dst)[i] = u.w;
    return;
  }
  for (std::size_t k = 0; k < kPer && i * kPer + k < n; ++k) reinterpret_cast<T*>(dst)[i * kPer + k] = u.v[k];
}
// n elements of T per part; member p's part is in_base + p * in_stride (0:
// the same for all). kReduce: out = the parts reduced in PE order; else
// member p's part lands at out + p * out_stride (T is then bytes).
template <typename T, RedOp OP, bool kReduce>
__device__ __forceinline__ void lowlatency_push(Args& a) {
  begin_launch(a);
  constexpr std::size_t kPer = 8 / sizeof(T);
  const std::size_t lines = (a.n + kPer - 1) / kPer;
  const std::size_t slot = 2 * kLowLatencyMax;  // bytes of member p's lines
  char* ll = a.ll_buf[a.e & 1];
  const auto flag = static_cast<std::uint32_t>(a.e);
  const std::uint32_t flag2 = flag ^ a.call;
  const bool in_aligned = ((reinterpret_cast<std::uintptr_t>(a.in_base) | a.in_stride) & 7u) == 0;
  const bool out_aligned = ((reinterpret_cast<std::uintptr_t>(a.out) | a.out_stride) & 7u) == 0;
  auto part = [&](int p) { return a.in_base + static_cast<std::size_t>(p) * a.in_stride; };
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = first; i < lines; i += step)
    for (int q = 1; q < a.npes; ++q) {  // from the next member on, so no PE is everyone's first
      const int p = (a.me + q) % a.npes;
      char* line = ll + static_cast<std::size_t>(a.me) * slot + i * 16;
      ll_store(dev::peer_address(line, world_pe(a, p)), ll_pack<T>(part(p), i, a.n, in_aligned).w, flag, flag2);
    }
  // The call word after the lines (they are what the others wait for), by
  // block 0's last threads: a small message leaves them no line to receive.
  if (const int t = static_cast<int>(blockDim.x - 1 - threadIdx.x); blockIdx.x == 0 && t < a.npes && t != a.me)
    announce_call(a, t);
  // No lines (a count of 0): nothing to wait for but the others' words,
  // which say whether they made this call too (a count of 0 against one
  // that is not stops here, naming both).
  if (const int p = static_cast<int>(threadIdx.x); lines == 0 && blockIdx.x == 0 && p < a.npes && p != a.me)
    wait_call(a, call_slot(a, p), p);
  for (std::size_t i = first; i < lines; i += step) {
    LlLine<T> acc;
    for (int p = 0; p < a.npes; ++p) {
      LlLine<T> x;
      if (p == a.me)
        x = ll_pack<T>(part(p), i, a.n, in_aligned);
      else
        x.w = ll_receive(a, ll + static_cast<std::size_t>(p) * slot + i * 16, flag, flag2, p);
      if constexpr (kReduce) {  // PE order, as every algorithm but ring
        if (p == 0) {
          acc = x;
        } else {
#pragma unroll
          for (std::size_t k = 0; k < kPer; ++k) acc.v[k] = apply<T, OP>(acc.v[k], x.v[k]);
        }
      } else {
        ll_unpack<T>(a.out + static_cast<std::size_t>(p) * a.out_stride, i, a.n, out_aligned, x);
      }
    }
    if constexpr (kReduce) ll_unpack<T>(a.out, i, a.n, out_aligned, acc);
  }
  end_launch(a);
}
template <typename T, RedOp OP>
__global__ void __launch_bounds__(kThreads) lowlatency_reduce_kernel(Args a) {
  lowlatency_push<T, OP, true>(a);
}
__global__ void __launch_bounds__(kThreads) lowlatency_gather_kernel(Args a) {
  lowlatency_push<std::uint8_t, RedOp::kSum, false>(a);
}

// Which reduction kernel a launch runs.
enum class Kernel { kOneShot, kTwoShot, kRing, kLowLatency };

// The one choice of a reduction kernel, by op and kernel for dtype T: the
// launches and the preload both go through it (coll.cu's reduce_kernel adds
// the dtype), so nothing launched can miss the preload.
using ReduceKernel = void (*)(Args);
template <typename T, RedOp OP>
ReduceKernel reduce_kernel(Kernel k) {
  switch (k) {
    case Kernel::kOneShot: return oneshot_kernel<T, OP>;
    case Kernel::kTwoShot: return twoshot_kernel<T, OP>;
    case Kernel::kRing: return ring_kernel<T, OP>;
    case Kernel::kLowLatency: return lowlatency_reduce_kernel<T, OP>;
  }
  return nullptr;
}
template <typename T>
ReduceKernel reduce_kernel(RedOp op, Kernel k) {
  switch (op) {
    case RedOp::kSum: return reduce_kernel<T, RedOp::kSum>(k);
    case RedOp::kMax: return reduce_kernel<T, RedOp::kMax>(k);
    case RedOp::kMin: return reduce_kernel<T, RedOp::kMin>(k);
    case RedOp::kProd: return reduce_kernel<T, RedOp::kProd>(k);
  }
  return nullptr;
}

}  // namespace nvst::coll::internal
