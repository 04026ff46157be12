// Signals: 64-bit words in the symmetric heap that one PE updates on another
// and the owner waits on (nvshmemx_signal_op, nvshmem_put_signal,
// nvshmem_signal_wait_until, nvshmem_wait_until).
//
// Memory ordering, the argument in full:
//  - put_signal: every member of the group stores its part of the data, the
//    group synchronises (bar.sync / bar.warp.sync), then one member updates
//    the signal with a *release* at system scope (st.release.sys or
//    atom.release.sys.add). The barrier puts the other members' stores before
//    the release in causality order, and PTX release is cumulative, so any PE
//    that observes the signal with an acquire also observes all the data.
//  - the waiting side polls with ld.acquire.sys: loads it issues after the
//    wait returns see everything that preceded the matching release.
// No fence is needed between the data and the signal for that reason; quiet
// is still needed for completion of _nbi data that is *not* followed by a
// signal.
#pragma once

#include <cstdint>

#include "nvst/device/rma.cuh"
#include "nvst/device/state.cuh"

namespace nvst::dev {

enum class SignalOp { kSet, kAdd };
// The six comparisons of nvshmem_wait_until / signal_wait_until.
enum class Cmp { kEq, kNe, kGt, kGe, kLt, kLe };

__device__ __forceinline__ bool compare(std::uint64_t observed, Cmp cmp, std::uint64_t value) {
  switch (cmp) {
    case Cmp::kEq: return observed == value;
    case Cmp::kNe: return observed != value;
    case Cmp::kGt: return observed > value;
    case Cmp::kGe: return observed >= value;
    case Cmp::kLt: return observed < value;
    case Cmp::kLe: return observed <= value;
  }
  return false;
}

namespace detail {
__device__ __forceinline__ void st_release_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void atom_add_release_sys(std::uint64_t* p, std::uint64_t v) {
  // red: an atomic add whose old value nobody needs.
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Spins until ready() holds; after NVST_DEVICE_TIMEOUT_S calls timed_out(),
// which reports and stops the kernel (fail). The clock is read only every
// 1024 polls, and not at all when the first poll succeeds; so is the word
// that says a PE died (DeviceState::dead_pe), which stops the kernel
// naming it.
template <typename Ready, typename TimedOut>
__device__ __forceinline__ void spin_until(Ready ready, TimedOut timed_out) {
  if (ready()) return;
  const std::uint64_t timeout = state().timeout_ns;
  const std::uint64_t start = global_timer_ns();
  for (unsigned spins = 1;; ++spins) {
    if (ready()) return;
    if ((spins & 1023u) != 0) continue;
    if (const volatile int* dead = state().dead_pe; dead != nullptr && *dead >= 0)
      fail(FailKind::kPeerDied, *dead, 0, 0, 0, -1);
    if (timeout != 0 && global_timer_ns() - start > timeout) timed_out();
  }
}

// Polls *p until compare(*p, cmp, value); after NVST_DEVICE_TIMEOUT_S stops
// the kernel, reporting the word's heap offset, what it held and what was
// expected (and from which PE, when the caller knows).
template <typename T>
__device__ __forceinline__ T wait_until_impl(const T* p, Cmp cmp, T value, FailKind kind, int from_pe) {
  T v;
  spin_until([&] { return compare(v = ld_acquire_sys(p), cmp, value); },
             [&] { fail(kind, from_pe, heap_offset(p), v, value, static_cast<int>(cmp)); });
  return v;
}
}  // namespace detail

// Updates the signal word `sig_addr` (symmetric) on `pe`: SET stores
// `signal`, ADD adds it atomically. A release: it is ordered after this
// thread's earlier stores.
__device__ __forceinline__ void signal_op(std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe) {
  check_pe(pe);
  NVST_IF_NVSHMEM(check_symmetric(sig_addr, sizeof(std::uint64_t));
                  nvshmemx_signal_op(sig_addr, signal, nvshmem_backend::signal_op_code(op == SignalOp::kAdd), pe);
                  return)
  if (!on_node(pe) && has_proxy()) {
    check_symmetric(sig_addr, sizeof(std::uint64_t));
    proxy_push(proxy::Op::kSignal, pe, 0, nullptr, 0, heap_offset(sig_addr), signal,
               static_cast<std::uint8_t>(op == SignalOp::kAdd ? proxy::SignalOp::kAdd : proxy::SignalOp::kSet));
    return;
  }
  auto* remote = reinterpret_cast<std::uint64_t*>(rma_address(sig_addr, sizeof(std::uint64_t), pe));
  if (op == SignalOp::kSet) {
    detail::st_release_sys(remote, signal);
  } else {
    detail::atom_add_release_sys(remote, signal);
  }
}

// Waits until the local signal word satisfies `cmp value`; returns it.
__device__ __forceinline__ std::uint64_t signal_wait_until(std::uint64_t* sig_addr, Cmp cmp, std::uint64_t value) {
  check_symmetric(sig_addr, sizeof(std::uint64_t));
  return detail::wait_until_impl<std::uint64_t>(sig_addr, cmp, value, FailKind::kWaitTimeout, -1);
}

// nvshmem_wait_until on a local symmetric 32- or 64-bit word.
template <typename T>
__device__ __forceinline__ T wait_until(T* ivar, Cmp cmp, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "nvst::dev::wait_until: 4- or 8-byte words");
  check_symmetric(ivar, sizeof(T));
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  U got = detail::wait_until_impl<U>(reinterpret_cast<const U*>(ivar), cmp, static_cast<U>(value),
                                     FailKind::kWaitTimeout, -1);
  return static_cast<T>(got);
}

// ---- put with signal -------------------------------------------------------

// kBlocking: through the proxy, wait until the command completed, so `src`
// may be reused on return (over NVLink the stores are done anyway).
template <Scope S, bool kBlocking = false>
__device__ __forceinline__ void put_signal_scope(void* dest, const void* src, std::size_t bytes,
                                                 std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe) {
  using G = Group<S>;
  check_pe(pe);
  NVST_IF_NVSHMEM(
      if (bytes) check_symmetric(dest, bytes); check_symmetric(sig_addr, sizeof(std::uint64_t));
      nvshmem_backend::put_signal<S>(dest, src, bytes, sig_addr, signal, op == SignalOp::kAdd, pe, !kBlocking); return)
  if (!on_node(pe) && has_proxy()) {
    // The group stages the data (stage.cuh); its last piece carries the
    // signal, which the target applies after that piece's data, and its
    // pieces land in order: the signal comes after all the data.
    if (bytes) check_symmetric(dest, bytes);
    check_symmetric(sig_addr, sizeof(std::uint64_t));
    const auto code = static_cast<std::uint8_t>(op == SignalOp::kAdd ? proxy::SignalOp::kAdd : proxy::SignalOp::kSet);
    G::sync();
    if (bytes)
      stage_put<S>(pe, heap_offset(dest), src, bytes, true, heap_offset(sig_addr), signal, code);
    else if (G::rank() == 0)
      proxy_push(proxy::Op::kSignal, pe, 0, nullptr, 0, heap_offset(sig_addr), signal, code);
    if constexpr (kBlocking) {
      if (G::rank() == 0) proxy_quiet();
    }
    G::sync();
    return;
  }
  put_scope<S>(dest, src, bytes, pe);
  G::sync();  // every member's data stores precede the release below
  if (G::rank() == 0) signal_op(sig_addr, signal, op, pe);
  G::sync();
}

__device__ __forceinline__ void putmem_signal(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig_addr,
                                              std::uint64_t signal, SignalOp op, int pe) {
  put_signal_scope<Scope::kThread, true>(dest, src, bytes, sig_addr, signal, op, pe);
}
__device__ __forceinline__ void putmem_signal_warp(void* dest, const void* src, std::size_t bytes,
                                                   std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe) {
  put_signal_scope<Scope::kWarp, true>(dest, src, bytes, sig_addr, signal, op, pe);
}
__device__ __forceinline__ void putmem_signal_block(void* dest, const void* src, std::size_t bytes,
                                                    std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op,
                                                    int pe) {
  put_signal_scope<Scope::kBlock, true>(dest, src, bytes, sig_addr, signal, op, pe);
}
// Over NVLink the _nbi forms complete as the blocking ones do; through the
// proxy they return once the command is posted.
__device__ __forceinline__ void putmem_signal_nbi(void* dest, const void* src, std::size_t bytes,
                                                  std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe) {
  put_signal_scope<Scope::kThread>(dest, src, bytes, sig_addr, signal, op, pe);
}
__device__ __forceinline__ void putmem_signal_nbi_warp(void* dest, const void* src, std::size_t bytes,
                                                       std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op,
                                                       int pe) {
  put_signal_scope<Scope::kWarp>(dest, src, bytes, sig_addr, signal, op, pe);
}
__device__ __forceinline__ void putmem_signal_nbi_block(void* dest, const void* src, std::size_t bytes,
                                                        std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op,
                                                        int pe) {
  put_signal_scope<Scope::kBlock>(dest, src, bytes, sig_addr, signal, op, pe);
}

}  // namespace nvst::dev
