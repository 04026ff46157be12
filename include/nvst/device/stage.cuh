// Puts to PEs of other nodes, staged by the kernel that makes them (GPU
// heaps; the protocol: nvst/proxy_fifo.hpp, "Staged pieces"). The calling
// group (a thread, a warp or a block) cuts the put into pieces of
// DeviceState::stage_piece_bytes; for each piece:
//   1. the leader takes a ticket of the kernels' staging ring (a counter in
//      device memory) and waits until its slot is free: the slot's word,
//      which the proxy stores with release once the slot's previous fabric
//      write completed, read with acquire (proxy_wait: fails on a failed
//      proxy and after the device timeout);
//   2. every member stores its share of the piece into the slot (pinned,
//      mapped host memory) as 16-byte vectors whatever the source's
//      alignment, and the last bytes one by one;
//   3. every member that stored fences at system scope
//      (__threadfence_system): its stores are performed for the CPU (and a
//      NIC reading host memory) before anything it does later;
//   4. the group synchronises, and the leader posts the piece's command
//      (proxy_push_word: body, __threadfence_system, then the tag). The last
//      piece of a put_signal carries the signal.
// Memory ordering: the proxy reads the tag with acquire (proxy::Consumer).
// Each member's data stores precede its fence, the fence precedes the
// barrier, and the barrier precedes the leader's fence and tag store; fences
// are cumulative, so a CPU thread that sees the tag sees every member's data
// in host memory, and so does the provider (a copy on that thread, or a NIC
// whose reads that thread starts later). Reuse: the leader's acquire of the
// slot's word precedes the barrier in from_leader, which precedes every
// member's stores, so none lands in a slot the provider still reads.
//
// No deadlock: a group holds at most one ticket whose command it has not
// posted, and waits only for that ticket's slot, i.e. for ticket t - slots
// to complete. Its holder has either posted it (the proxy completes posted
// pieces without any producer's help: it never waits for one) or waits for
// ticket t - 2 slots, and so on down to a ticket below `slots` or a posted
// one. The holders are running threads (a ticket is taken by a thread that
// runs, and its block stays resident until it ends), so each makes progress.
// Pieces of one group to one PE are posted in order, so they land in order;
// a put therefore copies its source before the call returns, _nbi too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvst/device/copy.cuh"
#include "nvst/device/proxy.cuh"
#include "nvst/device/state.cuh"

namespace nvst::dev {

namespace detail {

// The leader's (rank 0's) v, for every member of group S. Block scope goes
// through shared memory: the block must synchronise between two calls (stage_put
// does, after each piece), so that no member still reads the value before.
template <Scope S>
__device__ __forceinline__ std::uint64_t from_leader(std::uint64_t v) {
  if constexpr (S == Scope::kThread) {
    return v;
  } else if constexpr (S == Scope::kWarp) {
    return __shfl_sync(0xffffffffu, static_cast<unsigned long long>(v), 0);
  } else {
    __shared__ std::uint64_t cell;
    if (Group<S>::rank() == 0) cell = v;
    __syncthreads();
    return cell;
  }
}

// Step 1 above, by the leader: a ticket of the kernels' ring whose slot is
// free. Ticket t may fill slot t % slots once ticket t - slots completed.
__device__ __forceinline__ std::uint64_t take_stage_ticket(int pe) {
  const DeviceState& s = state();
  const std::uint64_t t = atomicAdd(s.stage_tickets, 1ull);
  const std::uint64_t n = s.stage_slots;
  if (t >= n) {
    const std::uint64_t* word = s.stage_done + t % n;
    proxy_wait([&] { return ld_acquire_sys(word) >= t - n + 1; }, pe, t);
  }
  return t;
}

// 16 bytes at p (p % 4 != 0) from the five aligned words that hold them,
// joined by funnel shifts. It reads up to 3 bytes past p + 16, inside the
// aligned word that holds p + 15.
__device__ __forceinline__ uint4 load16_shifted(const char* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto* w = reinterpret_cast<const std::uint32_t*>(a & ~std::uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(a & 3u) * 8;
  const std::uint32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4];
  return make_uint4(__funnelshift_r(w0, w1, shift), __funnelshift_r(w1, w2, shift), __funnelshift_r(w2, w3, shift),
                    __funnelshift_r(w3, w4, shift));
}

__device__ __forceinline__ uint4 load16_bytes(const char* p) {
  uint4 v;
  auto* b = reinterpret_cast<unsigned char*>(&v);
#pragma unroll
  for (int k = 0; k < 16; ++k) b[k] = static_cast<unsigned char>(p[k]);
  return v;
}

// Step 2: `bytes` of src (any alignment, any memory this thread can read)
// into dst (16-byte aligned, host memory) by the members of group S. Stores
// are 16-byte vectors, fewer and larger writes across PCIe, whatever src's
// alignment (group_copy would store single bytes for a source that is not
// aligned like the slot); only the tail of under 16 bytes goes byte by byte.
template <Scope S>
__device__ __forceinline__ void copy_to_slot(char* dst, const char* src, std::size_t bytes) {
  const unsigned rank = Group<S>::rank(), size = Group<S>::size();
  const std::size_t nvec = bytes / 16;
  auto* out = reinterpret_cast<uint4*>(dst);
  const auto a = reinterpret_cast<std::uintptr_t>(src);
  if ((a & 15u) == 0) {
    strided_copy<uint4, 4>(out, reinterpret_cast<const uint4*>(src), nvec, rank, size);
  } else if ((a & 3u) == 0) {
    for (std::size_t i = rank; i < nvec; i += size) {
      const auto* w = reinterpret_cast<const std::uint32_t*>(src + 16 * i);
      out[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else {
    // load16_shifted reads past its 16 bytes: the vectors near the end,
    // where that would pass the source's last aligned word, go byte by byte.
    for (std::size_t i = rank; i < nvec; i += size)
      out[i] = 16 * i + 20 <= bytes ? load16_shifted(src + 16 * i) : load16_bytes(src + 16 * i);
  }
  for (std::size_t i = nvec * 16 + rank; i < bytes; i += size) dst[i] = src[i];
}

}  // namespace detail

// A put of `bytes` (> 0) from src to heap offset `dest` on `pe` (another
// node), staged by the calling group and posted piece by piece (see the top
// of this file); with_signal: the last piece carries the signal (sig: its
// heap offset, sig_op: proxy::SignalOp). Every member calls it with the same
// arguments. Returns once every piece is posted; src may then be reused.
template <Scope S>
__device__ __forceinline__ void stage_put(int pe, std::uint64_t dest, const void* src, std::uint64_t bytes,
                                          bool with_signal, std::uint64_t sig, std::uint64_t sig_value,
                                          std::uint8_t sig_op) {
  using G = Group<S>;
  const DeviceState& s = state();
  const char* from = static_cast<const char*>(src);
  for (std::uint64_t done = 0; done < bytes;) {
    const std::uint64_t piece = bytes - done < s.stage_piece_bytes ? bytes - done : s.stage_piece_bytes;
    const std::uint64_t ticket = detail::from_leader<S>(G::rank() == 0 ? detail::take_stage_ticket(pe) : 0);
    char* data = s.stage_ring + (ticket % s.stage_slots) * proxy::kSlotBytes + proxy::kPieceHeaderBytes;
    detail::copy_to_slot<S>(data, from + done, piece);
    __threadfence_system();  // step 3: this member's stores before the command that names the slot
    G::sync();
    if (G::rank() == 0) {
      const bool last = done + piece == bytes;
      proxy_push_word(last && with_signal ? proxy::Op::kPutSignalStaged : proxy::Op::kPutStaged, pe, dest + done,
                      ticket, piece, sig, sig_value, sig_op, done == 0 ? bytes : 0);
    }
    done += piece;
  }
}

}  // namespace nvst::dev
