// all_reduce and all_gather on one node, written on the device API: see
// include/nvst/coll.hpp for the algorithms. The synchronisation is per
// block: block b of every PE handles the same element range, so block b
// only waits for block b of the others (flags[phase][pe][b] = epoch), never
// for a grid-wide barrier.
//
// Reuse of the workspace without a second barrier: it is double-buffered by
// epoch parity. PE X rewrites buffer (e & 1) at epoch e + 2 only after its
// epoch e + 1 kernel waited for every peer's epoch e + 1 flags, which each
// peer set only after its whole epoch e kernel (the last reader of that
// buffer) had finished, since kernels on a stream run in order.
//
// The epoch lives on the GPU (so a CUDA graph replays correctly): every
// block reads the launch counter when it starts, and the last block to
// finish advances it; no block can start after that, so all blocks of a
// launch see the same epoch, and every PE counts the same launches.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "coll/ring_layout.hpp"
#include "nvst/coll.hpp"
#include "nvst/device.cuh"
#include "nvst/nvst.hpp"
#include "runtime/runtime_internal.hpp"
#include "runtime/settings.hpp"

namespace nvst::coll {

namespace {

constexpr int kMaxBlocks = 264;
constexpr int kMaxPes = 64;
constexpr int kThreads = 1024;  // the most a launch uses (see threads_for)
constexpr std::size_t kOneShotMax = std::size_t{256} << 10;
constexpr std::size_t kRingMin = std::size_t{1} << 20;  // auto, across nodes (all_reduce)
// Flag phases: 0 and 1 for every launch's exchanges (see publish_and_wait);
// all_to_allv's per-round data flags, acks and byte counts; the ring's
// per-step flags.
constexpr int kPhaseVData = 2, kPhaseVAck = 3, kPhaseVLen = 4, kPhaseRing = 5, kPhases = 6;

// One per team (by handle), made by prepare(team).
struct Workspace {
  std::uint64_t generation = 0;  // the nvst::init it belongs to (a later init starts afresh)
  std::size_t chunk = 0;         // bytes of each buffer below (NVST_COLL_WORKSPACE)
  std::size_t slot = 0;          // push algorithms: each member's part of data[], bytes
  char* data[2] = {};            // each PE's published input (symmetric)
  char* red[2] = {};             // two-shot: reduced slices (symmetric)
  std::uint64_t* flags = nullptr;  // [kPhases][kMaxPes][kMaxBlocks] (symmetric)
  std::uint64_t* epoch = nullptr;  // device memory: [0] launches so far, [1] blocks done
};
std::vector<Workspace> g_ws;

struct Args {
  const char* in;          // this PE's own contribution
  const char* in_base;     // what goes to PE p: in_base + p * in_stride
  std::size_t in_stride;   // 0: the same bytes to everyone (all_reduce, all_gather)
  int root;                // broadcast
  int dest;                // push to this PE only (reduce's root); -1: every PE
  char* out;
  std::size_t n;        // elements in this launch
  std::size_t out_stride;  // all_gather: bytes between PEs' parts of out
  int me, npes;            // this PE's index in the team, the team's size
  int pe_start, pe_stride;  // team member p is world PE pe_start + p * pe_stride
  char* data_buf[2];
  char* red_buf[2];
  std::uint64_t* flags;
  std::uint64_t* epoch;
  std::size_t slot_bytes;  // push algorithms: PE p's part of data[] starts at p * slot_bytes
  bool vec_ok;             // in and out are 16-byte aligned
  bool cross_node;         // some member is on another node: reached through the proxy
  bool push_blocking;      // ...and out overlaps what the pushes read (see overlaps())
  // ring (n = the whole count): S elements per segment (ring_layout.hpp);
  // this launch takes [ring_off, ring_off + ring_c) of every segment.
  std::size_t ring_seg, ring_off, ring_c;
  // Filled in the kernel by begin_launch():
  std::uint64_t e;
  char* data;           // this PE's data[e & 1]
  char* red;            // this PE's red[e & 1]
};

// The launch's epoch, the same in every block (see the top of the file).
// Members of other nodes this block has already sent a put_signal (data and
// phase-0 flag in one command) this launch: bit p for member p.
__device__ __forceinline__ unsigned long long& flagged_by_put() {
  __shared__ unsigned long long mask;
  return mask;
}

__device__ __forceinline__ void begin_launch(Args& a) {
  __shared__ std::uint64_t e;
  if (threadIdx.x == 0) {
    e = *reinterpret_cast<volatile std::uint64_t*>(a.epoch) + 1;
    flagged_by_put() = 0;
  }
  __syncthreads();
  a.e = e;
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

// Integers wrap (unsigned arithmetic: no signed overflow).
template <typename T>
__host__ __device__ __forceinline__ T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <typename T>
__host__ __device__ __forceinline__ T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}

template <typename T>
struct Ops {
  __device__ static T sum(T a, T b) {
    if constexpr (std::is_integral_v<T>) return wrap_add(a, b);
    else return a + b;
  }
  __device__ static T prod(T a, T b) {
    if constexpr (std::is_integral_v<T>) return wrap_mul(a, b);
    else return a * b;
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
  if constexpr (OP == RedOp::kSum) return Ops<T>::sum(a, b);
  else if constexpr (OP == RedOp::kMax) return Ops<T>::max(a, b);
  else if constexpr (OP == RedOp::kProd) return Ops<T>::prod(a, b);
  else return Ops<T>::min(a, b);
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
  if (std::uint64_t* f = flag_on(a, phase, a.me, p)) dev::detail::st_release_sys(f, v);
  else dev::signal_op(my_flag(a, phase, a.me), v, dev::SignalOp::kSet, world_pe(a, p));
}

// Publishes [lo, hi) of `in` in this PE's workspace, then tells every PE
// (phase `phase`) and waits until every PE has told this one. A member of
// another node is told by a signal through the proxy, unless this block's
// push already sent it one with the data (push_to_peers).
__device__ __forceinline__ void publish_and_wait(const Args& a, const char* src, char* dst_sym, std::size_t lo_b,
                                                 std::size_t hi_b, int phase) {
  if (src) dev::group_copy<dev::Scope::kBlock>(dst_sym + lo_b, src + lo_b, hi_b - lo_b);
  __syncthreads();  // every thread's stores precede the releases below
  const int t = static_cast<int>(threadIdx.x);
  if (t < a.npes) {
    if (phase != 0 || !(flagged_by_put() >> t & 1ull)) tell(a, phase, t, a.e);
    dev::detail::wait_until_impl<std::uint64_t>(my_flag(a, phase, t), dev::Cmp::kGe, a.e,
                                                dev::FailKind::kWaitTimeout, world_pe(a, t));
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
      dev::putmem_signal_block(slot, src, hi_b - lo_b, flag, a.e, dev::SignalOp::kSet, pe);
    else
      dev::putmem_signal_nbi_block(slot, src, hi_b - lo_b, flag, a.e, dev::SignalOp::kSet, pe);
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
// block b write bytes that block b' was still copying out: r13, 2x H200.)
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
  if (hi > lo) dev::group_copy<dev::Scope::kBlock>(a.out + v.recv_off[me] + lo, a.in_base + v.send_off[me] + lo, hi - lo);
  std::size_t rounds = 1;
  for (int p = 0; p < a.npes; ++p)
    if (p != me) rounds = std::max(rounds, std::max(v_rounds(v.send_len[p], slot), v_rounds(v.recv_len[p], slot)));
  for (std::size_t k = 0; k < rounds; ++k) {
    for (int p = 0; p < a.npes; ++p) {
      if (p == me || k >= v_rounds(v.send_len[p], slot)) continue;
      if (k > 0) {  // the receiver has copied round k - 1 out of its slot
        if (threadIdx.x == 0)
          dev::detail::wait_until_impl<std::uint64_t>(flag_on(a, kPhaseVAck, p, me), dev::Cmp::kGe,
                                                      v_value(a.e, k - 1), dev::FailKind::kWaitTimeout, world_pe(a, p));
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
        if (k == 0 && len != v.recv_len[q]) dev::fail(dev::FailKind::kCountMismatch, world_pe(a, q), 0, len, v.recv_len[q], -1);
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

// The ring's flag value for step k of launch e: above every earlier one
// (steps < 256), so one word per (left neighbour, block) serves every step.
__host__ __device__ __forceinline__ std::uint64_t ring_value(std::uint64_t e, int k) {
  return (e << 8) | static_cast<std::uint64_t>(k + 1);
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
// ended: the argument at the top of the file.
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
      if (threadIdx.x == 0)
        dev::detail::wait_until_impl<std::uint64_t>(my_flag(a, kPhaseRing, left), dev::Cmp::kGe, ring_value(a.e, k - 1),
                                                    dev::FailKind::kWaitTimeout, world_pe(a, left));
      __syncthreads();
      recv = reinterpret_cast<const T*>(a.data + static_cast<std::size_t>(k - 1) * region) + lo;
    }
    const bool send = k < last;
    T* dst = nullptr;
    if (send)
      dst = reinterpret_cast<T*>((right_ws ? right_ws : a.red) + static_cast<std::size_t>(k) * region) + lo;
    ring_combine<T, OP>(dst, k >= n - 1 ? out + from : nullptr, recv, k <= n - 1 ? in + from : nullptr, to - from,
                        a.vec_ok);
    if (!send) continue;
    __syncthreads();  // every thread's stores precede the release
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

// Which reduction kernel a launch runs.
enum class Kernel { kOneShot, kTwoShot, kRing };

template <typename T, RedOp OP>
void launch_reduce(Kernel k, int blocks, int threads, const Args& a, cudaStream_t s) {
  switch (k) {
    case Kernel::kOneShot: oneshot_kernel<T, OP><<<blocks, threads, 0, s>>>(a); break;
    case Kernel::kTwoShot: twoshot_kernel<T, OP><<<blocks, threads, 0, s>>>(a); break;
    case Kernel::kRing: ring_kernel<T, OP><<<blocks, threads, 0, s>>>(a); break;
  }
}

template <typename T>
void launch_reduce_op(RedOp op, Kernel k, int blocks, int threads, const Args& a, cudaStream_t s) {
  switch (op) {
    case RedOp::kSum: launch_reduce<T, RedOp::kSum>(k, blocks, threads, a, s); break;
    case RedOp::kMax: launch_reduce<T, RedOp::kMax>(k, blocks, threads, a, s); break;
    case RedOp::kMin: launch_reduce<T, RedOp::kMin>(k, blocks, threads, a, s); break;
    case RedOp::kProd: launch_reduce<T, RedOp::kProd>(k, blocks, threads, a, s); break;
  }
}

bool host_heaps() { return nvst::device() < 0; }

// A collective's team as this PE sees it.
struct TeamView {
  int handle;
  int me, npes;       // this PE's index, the team's size
  int start, stride;  // member p is world PE start + p * stride
  bool cross_node = false;  // GPUs: some member is on another node
  int world_pe(int p) const { return start + p * stride; }
};

// The team's shape, and checks that hold for every collective: this PE is a
// member and the team is small enough. On GPUs, whether some member is on
// another node (the kernels then reach it through the proxy).
TeamView check_team(const char* fn, Team team) {
  NVST_REQUIRE(nvst::initialized(), "nvst::coll::", fn, " called before nvst::init()");
  TeamView t{static_cast<int>(team), nvst::team_my_pe(team), nvst::team_n_pes(team), 0, 1};
  NVST_REQUIRE(t.me >= 0, "nvst::coll::", fn, ": this PE (world PE ", nvst::my_pe(), ") is not a member of team ",
               t.handle);
  NVST_REQUIRE(t.npes <= kMaxPes, "nvst::coll::", fn, ": at most ", kMaxPes, " PEs in a team (team ", t.handle,
               " has ", t.npes, ")");
  t.start = nvst::team_translate_pe(team, 0);
  t.stride = t.npes > 1 ? nvst::team_translate_pe(team, 1) - t.start : 1;
  if (host_heaps()) return t;
  const int first = nvst::team_translate_pe(Team::kNode, 0), node_n = nvst::team_n_pes(Team::kNode);
  for (int p = 0; p < t.npes; ++p) t.cross_node |= t.world_pe(p) < first || t.world_pe(p) >= first + node_n;
  return t;
}

// Validates a reduction's arguments; returns the element size.
std::size_t check_reduction_args(const char* fn, const void* in, const void* out, std::size_t count, DType dtype) {
  const std::size_t es = dtype_size(dtype);
  NVST_REQUIRE(count == 0 || (in != nullptr && out != nullptr), "nvst::coll::", fn, ": null buffer");
  NVST_REQUIRE((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) % es == 0,
               "nvst::coll::", fn, ": buffers must be aligned to the element size (", es, " bytes)");
  return es;
}

void check_root(const char* fn, int root, const TeamView& t) {
  NVST_REQUIRE(root >= 0 && root < t.npes, "nvst::coll::", fn, ": root ", root, " out of range [0, ", t.npes,
               ") of team ", t.handle);
}

void launch_reduce_dtype(DType dtype, RedOp op, Kernel k, int blocks, int threads, const Args& a,
                         cudaStream_t s) {
  switch (dtype) {
    case DType::kF32: launch_reduce_op<float>(op, k, blocks, threads, a, s); break;
    case DType::kBF16: launch_reduce_op<__nv_bfloat16>(op, k, blocks, threads, a, s); break;
    case DType::kF16: launch_reduce_op<__half>(op, k, blocks, threads, a, s); break;
    case DType::kI32: launch_reduce_op<std::int32_t>(op, k, blocks, threads, a, s); break;
    case DType::kI64: launch_reduce_op<std::int64_t>(op, k, blocks, threads, a, s); break;
  }
}

// Threads per block: 256-thread blocks launch about 1 us sooner (r10 vs r9
// at 1 KB), 1024 keep more stores in flight for large messages.
int threads_for(std::size_t bytes) {
  static const long forced = std::getenv("NVST_COLL_THREADS") ? std::atol(std::getenv("NVST_COLL_THREADS")) : 0;
  if (forced > 0) return static_cast<int>(std::min<long>(forced, kThreads));
  return bytes <= (std::size_t{1} << 20) ? 256 : kThreads;
}

// NVST_COLL_MAX_BLOCKS caps the grid (calibration runs); default 128.
int max_blocks() {
  static const long forced = std::getenv("NVST_COLL_MAX_BLOCKS") ? std::atol(std::getenv("NVST_COLL_MAX_BLOCKS")) : 0;
  return static_cast<int>(forced > 0 ? std::min<long>(forced, kMaxBlocks) : 128);
}

// Bytes of each member's slot in a workspace buffer of `chunk` bytes
// (16-byte multiple).
std::size_t slot_for(std::size_t chunk, int npes) { return chunk / static_cast<std::size_t>(npes) / 16 * 16; }

// Whether [a, a + an) and [b, b + bn) share a byte. Across nodes a push is
// read by the proxy after the kernel posted it, so when a launch writes
// where its pushes read (in place), each push must complete before the
// block goes on (Args::push_blocking): a round trip per block, only then.
bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a && b && an && bn && x < y + bn && y < x + an;
}

template <typename W>
bool prepared(const std::vector<W>& all, int handle) {
  return handle < static_cast<int>(all.size()) && all[static_cast<std::size_t>(handle)].flags != nullptr &&
         all[static_cast<std::size_t>(handle)].generation == detail::init_generation();
}

// The team's workspace. The world's is made on first use (every PE is in the
// world, so that first call is a collective allocation anyway); any other
// team's must have been made by prepare(team) on every PE.
template <typename W>
W& workspace_of(std::vector<W>& all, const char* fn, const TeamView& t) {
  if (!prepared(all, t.handle)) {
    NVST_REQUIRE(t.handle == static_cast<int>(Team::kWorld), "nvst::coll::", fn, ": team ", t.handle,
                 " has no workspace: call nvst::coll::prepare(team) on every PE (a collective allocation) after "
                 "creating the team");
    prepare(Team::kWorld);
  }
  return all[static_cast<std::size_t>(t.handle)];
}

Args base_args(const char* fn, const TeamView& t) {
  Workspace& w = workspace_of(g_ws, fn, t);
  Args a{};
  a.dest = -1;
  a.slot_bytes = w.slot;
  a.me = t.me;
  a.npes = t.npes;
  a.pe_start = t.start;
  a.pe_stride = t.stride;
  a.cross_node = t.cross_node;
  for (int b = 0; b < 2; ++b) {
    a.data_buf[b] = w.data[b];
    a.red_buf[b] = w.red[b];
  }
  a.flags = w.flags;
  a.epoch = w.epoch;
  return a;
}

Algo algo_from_env(Algo asked) {
  if (asked != Algo::kAuto) return asked;
  const char* e = std::getenv("NVST_COLL_ALGO");
  if (e == nullptr || std::string(e) == "auto") return Algo::kAuto;
  if (std::string(e) == "oneshot") return Algo::kOneShot;
  if (std::string(e) == "twoshot") return Algo::kTwoShot;
  if (std::string(e) == "hierarchical") return Algo::kHierarchical;
  if (std::string(e) == "ring") return Algo::kRing;
  NVST_FAIL("NVST_COLL_ALGO='", e, "' is not one of auto, oneshot, twoshot, ring, hierarchical");
}


// ---- host-memory PEs (no GPU): the same algorithm on the host API --------
// Each PE put_signals its chunk into slot `me` of every member's workspace
// (through the proxy and the fabric), waits for every member's signal, and
// reduces on the CPU in team order with the GPU's rounding. Epochs, parity
// and the reuse argument are those of the GPU kernels.

struct HostWorkspace {
  std::uint64_t generation = 0;
  std::size_t slot = 0;
  char* data[2] = {};
  std::uint64_t* flags = nullptr;  // flags[p]: last epoch member p's data arrived here
  // all_to_allv, [p]: member p's round flag, ack and byte count (as the kernel's).
  std::uint64_t *vdata = nullptr, *vack = nullptr, *vlen = nullptr;
  std::uint64_t* vring = nullptr;  // ring, [p]: the last step member p sent here
  std::size_t chunk = 0;           // bytes of each data[] buffer
  std::vector<std::uint64_t> vlen_src;  // what this PE sends as byte counts (kept until quiet)
  std::uint64_t epoch = 0;
};
std::vector<HostWorkspace> g_host;

void host_prepare(int handle, int npes, std::size_t chunk) {
  HostWorkspace w;
  w.generation = detail::init_generation();
  w.slot = slot_for(chunk, npes);
  for (int b = 0; b < 2; ++b) w.data[b] = static_cast<char*>(nvst::malloc(chunk));
  // Sized for the largest team, not this one: a team's size can differ
  // between PEs (split_2d's last row may be short), and every PE must
  // allocate the same bytes.
  constexpr std::size_t n = kMaxPes;
  w.flags = static_cast<std::uint64_t*>(nvst::calloc(5 * n, 8));
  w.vdata = w.flags + n;
  w.vack = w.flags + 2 * n;
  w.vlen = w.flags + 3 * n;
  w.vring = w.flags + 4 * n;
  w.chunk = chunk;
  w.vlen_src.assign(static_cast<std::size_t>(npes), 0);
  g_host[static_cast<std::size_t>(handle)] = std::move(w);
}

// What a host collective needs: the team and its workspace.
struct HostCall {
  const TeamView& t;
  HostWorkspace& w;
};

// Sends `bytes` of src + p * stride to every member p's slot, waits for
// theirs; returns this epoch's buffer (slot p holds member p's bytes).
// only_from >= 0 (broadcast): only that member sends data; only_to >= 0
// (reduce): data goes to that member only. Everyone signals everyone.
const char* host_exchange(const HostCall& c, const char* src, std::size_t stride, std::size_t bytes,
                          int only_from = -1, int only_to = -1) {
  const int me = c.t.me, n = c.t.npes;
  const std::uint64_t e = ++c.w.epoch;
  char* buf = c.w.data[e & 1];
  for (int p = 0; p < n; ++p)
    if (p != me)
      nvst::putmem_signal_nbi(buf + static_cast<std::size_t>(me) * c.w.slot, src + static_cast<std::size_t>(p) * stride,
                              (only_from < 0 || only_from == me) && (only_to < 0 || only_to == p) ? bytes : 0,
                              &c.w.flags[me], e, nvst::SignalOp::kSet, c.t.world_pe(p));
  for (int p = 0; p < n; ++p)
    if (p != me) nvst::signal_wait_until(&c.w.flags[p], nvst::Cmp::kGe, e);
  nvst::quiet();  // `src` may be reused
  return buf;
}

template <typename T>
T host_apply(T a, T b, RedOp op) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    if (op == RedOp::kSum) return static_cast<T>(x + y);
    if (op == RedOp::kProd) return static_cast<T>(x * y);
    return (op == RedOp::kMax ? x > y : x < y) ? a : b;
  } else if constexpr (std::is_integral_v<T>) {
    if (op == RedOp::kSum) return wrap_add(a, b);
    if (op == RedOp::kProd) return wrap_mul(a, b);
    return (op == RedOp::kMax ? a > b : a < b) ? a : b;
  } else {
    if (op == RedOp::kSum) return a + b;
    if (op == RedOp::kProd) return a * b;
    return (op == RedOp::kMax ? a > b : a < b) ? a : b;
  }
}

template <typename T>
void host_reduce(const HostCall& c, const T* in, const char* buf, T* out, std::size_t n, RedOp op) {
  auto contribution = [&](int p) {
    return p == c.t.me ? in : reinterpret_cast<const T*>(buf + static_cast<std::size_t>(p) * c.w.slot);
  };
  for (std::size_t i = 0; i < n; ++i) {
    T acc = contribution(0)[i];
    for (int p = 1; p < c.t.npes; ++p) acc = host_apply<T>(acc, contribution(p)[i], op);
    out[i] = acc;
  }
}

// Calls f(T{}) with T the element type of `dtype` (host code).
template <typename F>
void with_host_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); break;
    case DType::kBF16: f(__nv_bfloat16{}); break;
    case DType::kF16: f(__half{}); break;
    case DType::kI32: f(std::int32_t{}); break;
    case DType::kI64: f(std::int64_t{}); break;
  }
}

void host_reduce_dtype(const HostCall& c, DType dtype, const char* own, const char* buf, char* out, std::size_t n,
                       RedOp op) {
  with_host_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    host_reduce(c, reinterpret_cast<const T*>(own), buf, reinterpret_cast<T*>(out), n, op);
  });
}

// The ring on host-memory PEs, step for step as ring_kernel (one block, the
// sent segment staged in a local buffer that the end-of-slice quiet frees).
template <typename T>
void host_ring_combine(T* dst, T* out, const T* recv, const T* own, std::size_t n, RedOp op) {
  for (std::size_t i = 0; i < n; ++i) {
    const T x = recv ? (own ? host_apply<T>(recv[i], own[i], op) : recv[i]) : own[i];
    if (dst) dst[i] = x;
    if (out) out[i] = x;
  }
}

void host_ring_all_reduce(const HostCall& c, const char* in, char* out, std::size_t count, DType dtype, RedOp op) {
  const int n = c.t.npes, me = c.t.me, left = (me + n - 1) % n, right_pe = c.t.world_pe((me + 1) % n);
  const int last = ring::steps(n);
  const std::size_t es = dtype_size(dtype), seg = ring::segment_elems(count, n, es);
  const std::size_t per = ring::slice_elems(c.w.chunk, n, es);
  std::vector<char> stage(static_cast<std::size_t>(std::max(1, last)) * per * es);
  for (std::size_t off = 0; off < seg; off += per) {
    const std::size_t region = std::min(per, seg - off) * es;
    const std::uint64_t e = ++c.w.epoch;
    char* buf = c.w.data[e & 1];
    for (int k = 0; k <= last; ++k) {
      const auto [from, to] = ring::step_span(me, k, n, count, seg, off, off + region / es);
      const char* recv = nullptr;
      if (k > 0) {
        nvst::signal_wait_until(&c.w.vring[left], nvst::Cmp::kGe, ring_value(e, k - 1));
        recv = buf + static_cast<std::size_t>(k - 1) * region;
      }
      char* dst = k < last ? stage.data() + static_cast<std::size_t>(k) * region : nullptr;
      with_host_type(dtype, [&](auto zero) {
        using T = decltype(zero);
        host_ring_combine<T>(reinterpret_cast<T*>(dst), k >= n - 1 ? reinterpret_cast<T*>(out) + from : nullptr,
                             reinterpret_cast<const T*>(recv), k <= n - 1 ? reinterpret_cast<const T*>(in) + from : nullptr,
                             to - from, op);
      });
      if (k < last)
        nvst::putmem_signal_nbi(buf + static_cast<std::size_t>(k) * region, dst, (to - from) * es, &c.w.vring[me],
                                ring_value(e, k), nvst::SignalOp::kSet, right_pe);
    }
    nvst::quiet();  // the stage is refilled by the next slice
  }
}

// The reductions, as push_reduce on the GPU: part p of in (at p * stride)
// goes to member p (all_reduce: stride 0; reduce_scatter: stride = count
// elements), or to `dest` only (reduce), which alone reduces.
void host_push_reduce(const HostCall& c, const char* in, std::size_t stride, char* out, std::size_t count,
                      DType dtype, RedOp op, int dest) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t slot = c.w.slot;
  for (std::size_t off = 0; off < count; off += slot / es) {
    const std::size_t n = std::min(slot / es, count - off);
    const char* base = in + off * es;
    const char* buf = host_exchange(c, base, stride, n * es, -1, dest);
    const char* own = base + static_cast<std::size_t>(c.t.me) * stride;
    if (dest < 0 || dest == c.t.me) host_reduce_dtype(c, dtype, own, buf, out + off * es, n, op);
  }
}

void host_broadcast(const HostCall& c, const char* in, char* out, std::size_t total, int root) {
  const std::size_t slot = c.w.slot;
  for (std::size_t off = 0; off < total; off += slot) {
    const std::size_t n = std::min(slot, total - off);
    const char* buf = host_exchange(c, in + off, 0, n, root);
    const char* src = c.t.me == root ? in + off : buf + static_cast<std::size_t>(root) * slot;
    if (src != out + off) std::memmove(out + off, src, n);
  }
}

// all_to_all: part p of in (in + p * in_stride) to member p; member p's part
// lands at out + p * total. all_gather is in_stride = 0.
void host_all_to_all(const HostCall& c, const char* in, std::size_t in_stride, char* out, std::size_t total) {
  const int me = c.t.me;
  const std::size_t slot = c.w.slot;
  for (std::size_t off = 0; off < total; off += slot) {
    const std::size_t n = std::min(slot, total - off);
    const char* buf = host_exchange(c, in + off, in_stride, n);
    for (int p = 0; p < c.t.npes; ++p)
      std::memcpy(out + static_cast<std::size_t>(p) * total + off,
                  p == me ? in + static_cast<std::size_t>(me) * in_stride + off : buf + static_cast<std::size_t>(p) * slot,
                  n);
  }
}

// all_to_allv, as alltoallv_kernel: the usual exchange (every member is done
// with the slots), then each pair streams its message through the
// receiver's slot in rounds, flag and ack per round, the byte count first.
// Offsets and lengths in bytes.
void host_all_to_allv(const HostCall& c, const char* in, const std::size_t* send_off, const std::size_t* send_len,
                      char* out, const std::size_t* recv_off, const std::size_t* recv_len) {
  const int me = c.t.me, npes = c.t.npes;
  HostWorkspace& w = c.w;
  const std::size_t slot = w.slot;
  char* buf = const_cast<char*>(host_exchange(c, nullptr, 0, 0));
  const std::uint64_t e = w.epoch;
  auto rounds = [&](std::size_t len) { return len == 0 ? std::size_t{1} : (len + slot - 1) / slot; };
  auto value = [&](std::size_t k) { return (e << 24) | (k + 1); };
  if (send_len[me]) std::memmove(out + recv_off[me], in + send_off[me], send_len[me]);
  std::size_t all = 1;
  for (int p = 0; p < npes; ++p)
    if (p != me) all = std::max({all, rounds(send_len[p]), rounds(recv_len[p])});
  for (std::size_t k = 0; k < all; ++k) {
    for (int p = 0; p < npes; ++p) {
      if (p == me || k >= rounds(send_len[p])) continue;
      if (k > 0) nvst::signal_wait_until(&w.vack[p], nvst::Cmp::kGe, value(k - 1));
      if (k == 0) {
        w.vlen_src[static_cast<std::size_t>(p)] = send_len[p];
        nvst::putmem_nbi(&w.vlen[me], &w.vlen_src[static_cast<std::size_t>(p)], 8, c.t.world_pe(p));
        nvst::fence();  // the count before the flag
      }
      const std::size_t base = std::min(send_len[p], k * slot);
      nvst::putmem_signal_nbi(buf + static_cast<std::size_t>(me) * slot, in + send_off[p] + base,
                              std::min(send_len[p] - base, slot), &w.vdata[me], value(k), nvst::SignalOp::kSet,
                              c.t.world_pe(p));
    }
    for (int q = 0; q < npes; ++q) {
      if (q == me || k >= rounds(recv_len[q])) continue;
      nvst::signal_wait_until(&w.vdata[q], nvst::Cmp::kGe, value(k));
      NVST_REQUIRE(k > 0 || w.vlen[q] == recv_len[q], "nvst::coll::all_to_allv: PE ", c.t.world_pe(q), " sends ",
                   w.vlen[q], " bytes to PE ", c.t.world_pe(me), ", which expects ", recv_len[q],
                   " (recv_counts must equal the senders' send_counts)");
      const std::size_t base = std::min(recv_len[q], k * slot);
      std::memcpy(out + recv_off[q] + base, buf + static_cast<std::size_t>(q) * slot, std::min(recv_len[q] - base, slot));
      nvst::signal_op(&w.vack[me], value(k), nvst::SignalOp::kSet, c.t.world_pe(q));
    }
  }
  nvst::quiet();  // `in` may be reused
}

// Checks the team, makes sure its workspace exists, and runs the host-heap
// version of a collective when this PE has no GPU. Returns true if it ran.
template <typename F>
bool on_host(const TeamView& t, const char* fn, F&& run) {
  if (!host_heaps()) return false;
  run(HostCall{t, workspace_of(g_host, fn, t)});
  return true;
}

}  // namespace

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  NVST_FAIL("nvst::coll: unknown dtype ", static_cast<int>(t));
}
const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}
const char* redop_name(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kProd: return "prod";
  }
  return "?";
}
const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kAuto: return "auto";
    case Algo::kOneShot: return "oneshot";
    case Algo::kTwoShot: return "twoshot";
    case Algo::kHierarchical: return "hierarchical";
    case Algo::kRing: return "ring";
  }
  return "?";
}

void prepare(Team team) {
  NVST_REQUIRE(nvst::initialized(), "nvst::coll::prepare called before nvst::init()");
  const int handle = static_cast<int>(team);
  const int npes = nvst::team_n_pes(team);  // throws for a team never made
  NVST_REQUIRE(npes <= kMaxPes, "nvst::coll::prepare: at most ", kMaxPes, " PEs in a team (team ", handle, " has ",
               npes, ")");
  const std::size_t chunk = settings::coll_workspace_bytes();
  const std::size_t need = static_cast<std::size_t>(handle) + 1;
  if (host_heaps()) {
    if (prepared(g_host, handle)) return;
    if (g_host.size() < need) g_host.resize(need);
    host_prepare(handle, npes, chunk);
    nvst::barrier_all();
    return;
  }
  if (prepared(g_ws, handle)) return;
  if (g_ws.size() < need) g_ws.resize(need);
  Workspace& w = g_ws[static_cast<std::size_t>(handle)];
  if (w.epoch != nullptr) cudaFree(w.epoch);  // from an earlier init; its heap is gone
  w = Workspace{};
  w.generation = detail::init_generation();
  w.chunk = chunk;
  w.slot = slot_for(chunk, npes);
  for (int b = 0; b < 2; ++b) {
    w.data[b] = static_cast<char*>(nvst::malloc(chunk));
    w.red[b] = static_cast<char*>(nvst::malloc(chunk));
  }
  w.flags = static_cast<std::uint64_t*>(nvst::calloc(kPhases * kMaxPes * kMaxBlocks, sizeof(std::uint64_t)));
  NVST_CHECK_CUDA(cudaMalloc(&w.epoch, 2 * sizeof(std::uint64_t)));
  NVST_CHECK_CUDA(cudaMemset(w.epoch, 0, 2 * sizeof(std::uint64_t)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
}

namespace {
// The hierarchical all_reduce's teams: the world's nodes (rows of node-size
// PEs) and, across them, the PEs of the same place in their node (columns).
// Made by its first call, a collective over the world.
struct HierTeams {
  std::uint64_t generation = 0;
  Team node{}, across{};
  int k = 0;  // PEs per node
};
HierTeams g_hier;

const HierTeams& hier_teams() {
  if (g_hier.generation == detail::init_generation()) return g_hier;
  const int k = nvst::team_n_pes(Team::kNode), n = nvst::n_pes();
  int sizes_agree = k;  // every node must be the same size
  auto all = nvst::bootstrap_allgather(&sizes_agree, sizeof(sizes_agree));
  for (int p = 0; p < n; ++p) {
    int v;
    std::memcpy(&v, all.data() + static_cast<std::size_t>(p) * sizeof(v), sizeof(v));
    NVST_REQUIRE(v == k, "nvst::coll::all_reduce hierarchical: nodes of different sizes (PE ", p, "'s has ", v,
                 " PEs, this PE's ", k, ")");
  }
  auto [node, across] = nvst::team_split_2d(Team::kWorld, k);
  prepare(node);
  prepare(across);
  g_hier = HierTeams{detail::init_generation(), node, across, k};
  return g_hier;
}

// A scratch buffer for one call: device memory in stream order (a CUDA graph
// keeps the allocation as a node), or host memory on host-memory PEs.
struct Scratch {
  char* p = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<char> host;
  Scratch(std::size_t bytes, cudaStream_t s) : stream(s) {
    if (host_heaps()) {
      host.resize(std::max<std::size_t>(bytes, 1));
      p = host.data();
    } else {
      NVST_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&p), std::max<std::size_t>(bytes, 1), s));
    }
  }
  ~Scratch() {
    if (!host_heaps() && p) cudaFreeAsync(p, stream);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

void copy_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (bytes == 0 || dst == src) return;
  if (host_heaps()) std::memmove(dst, src, bytes);
  else NVST_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

// The ring on GPUs: launches of a slice of every segment, each as large as
// the workspace allows (steps regions per buffer).
void ring_all_reduce(const TeamView& t, const void* in, void* out, std::size_t count, DType dtype, RedOp op,
                     cudaStream_t stream) {
  const std::size_t es = dtype_size(dtype), seg = ring::segment_elems(count, t.npes, es);
  const Args proto = base_args("all_reduce", t);
  const std::size_t per = ring::slice_elems(g_ws[static_cast<std::size_t>(t.handle)].chunk, t.npes, es);
  for (std::size_t off = 0; off < seg; off += per) {
    Args a = proto;
    a.in = static_cast<const char*>(in);
    a.out = static_cast<char*>(out);
    a.n = count;
    a.ring_seg = seg;
    a.ring_off = off;
    a.ring_c = std::min(per, seg - off);
    a.vec_ok = ((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) & 15u) == 0;
    const std::size_t bytes = a.ring_c * es;  // per segment per launch
    const int blocks = static_cast<int>(std::clamp<std::size_t>((bytes + 16383) / 16384, 1, static_cast<std::size_t>(max_blocks())));
    launch_reduce_dtype(dtype, op, Kernel::kRing, blocks, threads_for(bytes), a, stream);
    NVST_CHECK_LAUNCH();
  }
}

// reduce_scatter inside each node, all_reduce of one part across the nodes,
// all_gather inside each node: the bytes that cross nodes are 1/k of the
// flat algorithm's (k PEs per node), and the node steps run over NVLink.
// The result is the nodes' sums (each in node order) reduced in node order.
// A count that k does not divide is padded to k parts of c elements.
void hier_all_reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream) {
  if (!host_heaps() && g_hier.generation != detail::init_generation()) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    NVST_CHECK_CUDA(cudaStreamIsCapturing(stream, &st));
    NVST_REQUIRE(st == cudaStreamCaptureStatusNone, "nvst::coll::all_reduce hierarchical: its first call makes "
                 "teams (a collective allocation) and cannot be captured in a CUDA graph; call it once before capturing");
  }
  const HierTeams& h = hier_teams();
  if (count == 0) return;
  const std::size_t es = dtype_size(dtype), k = static_cast<std::size_t>(h.k);
  const std::size_t c = (count + k - 1) / k;  // elements per part
  const bool padded = c * k != count;
  Scratch whole(padded ? c * k * es : 0, stream), part(2 * c * es, stream);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (padded) {  // the pad's values reach only the pad of the result
    copy_bytes(whole.p, in, count * es, stream);
    if (host_heaps()) std::memset(whole.p + count * es, 0, (c * k - count) * es);
    else NVST_CHECK_CUDA(cudaMemsetAsync(whole.p + count * es, 0, (c * k - count) * es, stream));
    src = dst = whole.p;
  }
  reduce_scatter(src, part.p, c, dtype, op, stream, h.node);
  all_reduce(part.p, part.p + c * es, c, dtype, op, stream, Algo::kOneShot, h.across);
  all_gather(part.p + c * es, dst, c, dtype, stream, h.node);
  if (padded) copy_bytes(out, whole.p, count * es, stream);
}
}  // namespace

void all_reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream, Algo algo,
                Team team) {
  const char* fn = "all_reduce";
  const TeamView t = check_team(fn, team);
  const std::size_t es = check_reduction_args(fn, in, out, count, dtype);
  const Algo asked = algo;
  algo = algo_from_env(algo);
  if (algo == Algo::kHierarchical && t.handle != static_cast<int>(Team::kWorld)) {
    NVST_REQUIRE(asked != Algo::kHierarchical, "nvst::coll::all_reduce: hierarchical runs on the world team (its "
                 "nodes and the columns across them), not team ", t.handle);
    algo = Algo::kAuto;  // NVST_COLL_ALGO=hierarchical means the world's all_reduces
  }
  if (algo == Algo::kHierarchical) {
    hier_all_reduce(in, out, count, dtype, op, stream);
    return;
  }
  // Across nodes from 3 members oneshot sends n-1 copies of everything
  // through the proxy, ring 2(n-1)/n: ring from 1 MiB, where bytes should
  // dominate the ring's 2(n-1) steps (chosen by bytes; not yet timed).
  if (algo == Algo::kAuto && t.cross_node && t.npes >= 3 && count * es >= kRingMin) algo = Algo::kRing;
  if (algo == Algo::kRing) {
    if (!on_host(t, fn, [&](const HostCall& c) {
          host_ring_all_reduce(c, static_cast<const char*>(in), static_cast<char*>(out), count, dtype, op);
        }))
      ring_all_reduce(t, in, out, count, dtype, op, stream);
    return;
  }
  if (on_host(t, fn, [&](const HostCall& c) {
        host_push_reduce(c, static_cast<const char*>(in), 0, static_cast<char*>(out), count, dtype, op, -1);
      }))
    return;
  NVST_REQUIRE(!(t.cross_node && algo == Algo::kTwoShot), "nvst::coll::all_reduce: twoshot reads the members' "
               "memory, which only NVLink peers allow, and team ", t.handle, " spans nodes (use oneshot or auto)");
  // On 2 PEs both algorithms move the same remote bytes and oneshot has one
  // step less: it won at every size (bench/results/...-coll-r8). Across
  // nodes only oneshot (pushes) works.
  const bool oneshot = algo == Algo::kOneShot || t.cross_node ||
                       (algo == Algo::kAuto && (t.npes == 2 || count * es <= kOneShotMax));
  const Args proto = base_args(fn, t);
  // oneshot: each member's part of the workspace is a slot; twoshot
  // publishes the whole chunk.
  const std::size_t chunk = (oneshot ? proto.slot_bytes : g_ws[static_cast<std::size_t>(t.handle)].chunk) / es;
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t n = std::min(chunk, count - off);
    Args a = proto;
    a.in = static_cast<const char*>(in) + off * es;
    a.in_base = a.in;
    a.out = static_cast<char*>(out) + off * es;
    a.n = n;
    a.vec_ok = ((reinterpret_cast<std::uintptr_t>(a.in) | reinterpret_cast<std::uintptr_t>(a.out)) & 15u) == 0;
    const std::size_t bytes = n * es;
    a.push_blocking = t.cross_node && overlaps(a.in, bytes, a.out, bytes);
    // oneshot: a block per 8 KiB (latency-bound when small); twoshot: a
    // block per 64 KiB, at least 16 (enough remote loads in flight).
    const std::size_t cap = static_cast<std::size_t>(max_blocks());
    const int blocks = static_cast<int>(oneshot ? std::clamp<std::size_t>((bytes + 8191) / 8192, 1, cap)
                                                : std::clamp<std::size_t>((bytes + 65535) / 65536, 16, cap));
    launch_reduce_dtype(dtype, op, oneshot ? Kernel::kOneShot : Kernel::kTwoShot, blocks, threads_for(bytes), a, stream);
    NVST_CHECK_LAUNCH();
  }
}

namespace {
// all_gather (in_stride 0) and all_to_all (in_stride = total): `total`
// bytes per member, part p of in at in + p * in_stride.
void gather(const char* fn, const void* in, std::size_t in_stride, void* out, std::size_t count, DType dtype,
            cudaStream_t stream, Team team) {
  const TeamView t = check_team(fn, team);
  const std::size_t total = count * dtype_size(dtype);
  NVST_REQUIRE(count == 0 || (in != nullptr && out != nullptr), "nvst::coll::", fn, ": null buffer");
  if (on_host(t, fn, [&](const HostCall& c) {
        host_all_to_all(c, static_cast<const char*>(in), in_stride * total, static_cast<char*>(out), total);
      }))
    return;
  const Args proto = base_args(fn, t);
  for (std::size_t off = 0; off < total; off += proto.slot_bytes) {
    const std::size_t n = std::min(proto.slot_bytes, total - off);
    Args a = proto;
    a.in_base = static_cast<const char*>(in) + off;
    a.in_stride = in_stride * total;
    a.in = a.in_base + static_cast<std::size_t>(a.me) * a.in_stride;
    a.out = static_cast<char*>(out) + off;
    a.n = n;
    a.out_stride = total;
    a.push_blocking = t.cross_node && overlaps(a.in_base, a.in_stride ? a.in_stride * static_cast<std::size_t>(t.npes) : n,
                                               a.out, total * static_cast<std::size_t>(t.npes - 1) + n);
    const int blocks = static_cast<int>(std::clamp<std::size_t>((n + 32767) / 32768, 1, static_cast<std::size_t>(max_blocks())));
    gather_kernel<<<blocks, threads_for(n), 0, stream>>>(a);
    NVST_CHECK_LAUNCH();
  }
}
}  // namespace

void all_gather(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream, Team team) {
  gather("all_gather", in, 0, out, count, dtype, stream, team);
}

void all_to_all(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream, Team team) {
  gather("all_to_all", in, 1, out, count, dtype, stream, team);
}

void barrier(cudaStream_t stream, Team team) {
  const char* fn = "barrier";
  const TeamView t = check_team(fn, team);
  if (on_host(t, fn, [&](const HostCall& c) {
        nvst::quiet();  // this PE's puts land before the others go on
        host_exchange(c, nullptr, 0, 0);
      }))
    return;
  // The flag exchange of every collective with no data: one block, a thread
  // per member.
  Args a = base_args(fn, t);
  gather_kernel<<<1, kMaxPes, 0, stream>>>(a);
  NVST_CHECK_LAUNCH();
}

namespace {
// The oneshot push with per-member parts: reduce_scatter (part p of in, at
// p * stride, to member p; every member reduces) and reduce (stride 0,
// dest = the root, which alone reduces).
void push_reduce(const char* fn, const TeamView& t, const void* in, std::size_t stride, void* out, std::size_t count,
                 DType dtype, RedOp op, int dest, cudaStream_t stream) {
  const std::size_t es = dtype_size(dtype);
  if (on_host(t, fn, [&](const HostCall& c) {
        host_push_reduce(c, static_cast<const char*>(in), stride, static_cast<char*>(out), count, dtype, op, dest);
      }))
    return;
  const Args proto = base_args(fn, t);
  const std::size_t chunk = proto.slot_bytes / es;
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t n = std::min(chunk, count - off);
    Args a = proto;
    a.dest = dest;
    a.in_base = static_cast<const char*>(in) + off * es;
    a.in_stride = stride;
    a.in = a.in_base + static_cast<std::size_t>(a.me) * stride;
    a.out = out ? static_cast<char*>(out) + off * es : nullptr;  // reduce: null off the root
    a.n = n;
    a.vec_ok = ((reinterpret_cast<std::uintptr_t>(a.in) | reinterpret_cast<std::uintptr_t>(a.out)) & 15u) == 0;
    const std::size_t bytes = n * es;
    const bool writes = dest < 0 || dest == t.me;  // reduce: only the root writes out
    a.push_blocking = t.cross_node && writes &&
                      overlaps(a.in_base, stride ? stride * static_cast<std::size_t>(t.npes) : bytes, a.out, bytes);
    const int blocks = static_cast<int>(std::clamp<std::size_t>((bytes + 8191) / 8192, 1, static_cast<std::size_t>(max_blocks())));
    launch_reduce_dtype(dtype, op, Kernel::kOneShot, blocks, threads_for(bytes), a, stream);
    NVST_CHECK_LAUNCH();
  }
}
}  // namespace

void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream,
                    Team team) {
  const char* fn = "reduce_scatter";
  const TeamView t = check_team(fn, team);
  const std::size_t es = check_reduction_args(fn, in, out, count, dtype);
  push_reduce(fn, t, in, count * es, out, count, dtype, op, -1, stream);
}

void reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, int root, cudaStream_t stream,
            Team team) {
  const char* fn = "reduce";
  const TeamView t = check_team(fn, team);
  check_root(fn, root, t);
  // Off the root, out is not used: check `in` against itself.
  check_reduction_args(fn, in, t.me == root ? out : in, count, dtype);
  push_reduce(fn, t, in, 0, out, count, dtype, op, root, stream);
}

void all_to_allv(const void* in, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 void* out, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                 DType dtype, cudaStream_t stream, Team team) {
  const char* fn = "all_to_allv";
  const TeamView t = check_team(fn, team);
  const int me = t.me;
  const std::size_t un = static_cast<std::size_t>(t.npes);
  NVST_REQUIRE(send_counts.size() == un && send_displs.size() == un && recv_counts.size() == un &&
                   recv_displs.size() == un,
               "nvst::coll::all_to_allv: counts and displacements need ", t.npes, " entries each (got ",
               send_counts.size(), ", ", send_displs.size(), ", ", recv_counts.size(), ", ", recv_displs.size(), ")");
  const std::size_t es = dtype_size(dtype);
  VArgs v{};
  bool sends = false, receives = false;
  for (std::size_t p = 0; p < un; ++p) {
    for (std::size_t x : {send_counts[p], send_displs[p], recv_counts[p], recv_displs[p]})
      NVST_REQUIRE(x <= (std::size_t{1} << 40) / es, "nvst::coll::all_to_allv: count or displacement ", x,
                   " too large");
    v.send_off[p] = send_displs[p] * es;
    v.send_len[p] = send_counts[p] * es;
    v.recv_off[p] = recv_displs[p] * es;
    v.recv_len[p] = recv_counts[p] * es;
    sends |= send_counts[p] != 0;
    receives |= recv_counts[p] != 0;
  }
  NVST_REQUIRE(send_counts[me] == recv_counts[me], "nvst::coll::all_to_allv: PE ", t.world_pe(me), " sends itself ",
               send_counts[me], " elements but expects ", recv_counts[me]);
  NVST_REQUIRE((!sends || in != nullptr) && (!receives || out != nullptr), "nvst::coll::all_to_allv: null buffer");
  if (on_host(t, fn, [&](const HostCall& c) {
        host_all_to_allv(c, static_cast<const char*>(in), v.send_off, v.send_len, static_cast<char*>(out), v.recv_off,
                         v.recv_len);
      }))
    return;
  v.a = base_args(fn, t);
  v.a.in_base = static_cast<const char*>(in);
  v.a.out = static_cast<char*>(out);
  std::size_t most = 0, in_end = 0, out_end = 0;
  for (std::size_t p = 0; p < un; ++p) {
    most = std::max({most, v.send_len[p], v.recv_len[p]});
    in_end = std::max(in_end, v.send_off[p] + v.send_len[p]);
    out_end = std::max(out_end, v.recv_off[p] + v.recv_len[p]);
  }
  v.a.push_blocking = t.cross_node && overlaps(in, in_end, out, out_end);
  // The grid must be the same on every PE (block b talks to block b).
  alltoallv_kernel<<<max_blocks(), threads_for(std::min(most, v.a.slot_bytes)), 0, stream>>>(v);
  NVST_CHECK_LAUNCH();
}

void all_to_allv(const void* in, const std::size_t* send_counts, const std::size_t* send_displs, void* out,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, DType dtype, cudaStream_t stream,
                 Team team) {
  const std::size_t n = static_cast<std::size_t>(check_team("all_to_allv", team).npes);
  NVST_REQUIRE(send_counts && send_displs && recv_counts && recv_displs,
               "nvst::coll::all_to_allv: null counts or displacements");
  all_to_allv(in, {send_counts, n}, {send_displs, n}, out, {recv_counts, n}, {recv_displs, n}, dtype, stream, team);
}

void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root, cudaStream_t stream, Team team) {
  const char* fn = "broadcast";
  const TeamView t = check_team(fn, team);
  check_root(fn, root, t);
  const std::size_t es = dtype_size(dtype);
  NVST_REQUIRE(count == 0 || (out != nullptr && (in != nullptr || t.me != root)),
               "nvst::coll::broadcast: null buffer");
  const std::size_t total = count * es;
  if (on_host(t, fn, [&](const HostCall& c) {
        host_broadcast(c, static_cast<const char*>(in), static_cast<char*>(out), total, root);
      }))
    return;
  const Args proto = base_args(fn, t);
  for (std::size_t off = 0; off < total; off += proto.slot_bytes) {
    const std::size_t n = std::min(proto.slot_bytes, total - off);
    Args a = proto;
    a.in = in ? static_cast<const char*>(in) + off : nullptr;
    a.in_base = a.in;
    a.out = static_cast<char*>(out) + off;
    a.n = n;
    a.root = root;
    a.push_blocking = t.cross_node && a.in != a.out && overlaps(a.in, n, a.out, n);  // in == out: no copy
    const int blocks = static_cast<int>(std::clamp<std::size_t>((n + 32767) / 32768, 1, static_cast<std::size_t>(max_blocks())));
    broadcast_kernel<<<blocks, threads_for(n), 0, stream>>>(a);
    NVST_CHECK_LAUNCH();
  }
}

}  // namespace nvst::coll
