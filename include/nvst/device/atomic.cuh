// Remote atomics on 32- and 64-bit words of the symmetric heap, at thread
// scope, to any PE (nvshmem_TYPE_atomic_fetch_add, _compare_swap, _swap,
// _fetch).
//
// Where they run:
//  - a PE of this node (NVLink): atom.sys through the peer's mapped heap;
//    the GPU's atomics on one word are atomic with each other wherever they
//    come from, and with the proxy's (below), which use the same units.
//  - a PE of another node: one kAtomic command through this PE's proxy; the
//    target's proxy applies it to its heap (a one-thread kernel for a GPU
//    heap) and sends the old value back, which lands in the FIFO's reply slot
//    of the command's ticket (proxy_fifo.hpp). The calling thread waits for
//    it (device timeout).
//  - NVSHMEM backend: the nvshmem_*_atomic_* namesakes.
// Ordering is NVSHMEM's: an atomic is not ordered with this PE's other puts
// or atomics to other words unless a fence() stands between them. Its own
// result is complete on return.
#pragma once

#include <cstdint>
#include <type_traits>

#include "nvst/device/nvshmem_backend.cuh"
#include "nvst/device/proxy.cuh"
#include "nvst/device/state.cuh"

#ifdef __CUDACC__
namespace nvst::dev {

namespace detail {

template <typename T>
inline constexpr bool kAtomicWord = std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8);

template <typename T>
using AtomicBits = std::conditional_t<sizeof(T) == 8, unsigned long long, unsigned int>;

template <typename T>
__device__ __forceinline__ std::uint64_t to_bits(T v) {
  return static_cast<std::uint64_t>(static_cast<AtomicBits<T>>(v));
}

__device__ __forceinline__ unsigned int ld_relaxed_sys(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ld_relaxed_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The atomic applied to a word this thread can address (a node peer's
// mapped heap, or this PE's): what the NVLink path does and what the target's
// proxy runs for a command from another node (src/device/device_runtime.cu).
template <typename U>
__device__ __forceinline__ U apply_atomic(U* w, proxy::AtomicOp op, U operand, U compare) {
  switch (op) {
    case proxy::AtomicOp::kFetchAdd: return atomicAdd_system(w, operand);
    case proxy::AtomicOp::kCompareSwap: return atomicCAS_system(w, compare, operand);
    case proxy::AtomicOp::kSwap: return atomicExch_system(w, operand);
    case proxy::AtomicOp::kFetch: return ld_relaxed_sys(w);
  }
  return 0;
}

// Through the proxy: posts the command and waits for its reply slot.
__device__ __forceinline__ std::uint64_t proxy_atomic(proxy::AtomicOp op, std::uint64_t width, const void* dest,
                                                      std::uint64_t operand, std::uint64_t compare, int pe) {
  const DeviceState& s = state();
  const std::uint64_t t = proxy_push(proxy::Op::kAtomic, pe, compare, nullptr, 0, heap_offset(dest), operand,
                                     proxy::atomic_code(op, width));
  const std::uint32_t cap = *reinterpret_cast<const volatile std::uint32_t*>(&s.fifo->capacity);
  proxy::AtomicReply* r = &proxy::replies(s.fifo, cap)[t & (cap - 1)];
  std::uint64_t done = 0;
  proxy_wait([&] { return (done = ld_volatile_u64(&r->done)) >= t + 1; }, pe, t);
  // A later ticket's answer in this slot: this thread slept through a whole
  // lap of the FIFO and its own answer is gone (see AtomicReply).
  if (done != t + 1) fail(FailKind::kProxyFailed, pe, heap_offset(dest), done, t + 1, -1);
  __threadfence_system();  // `value` was stored before `done`
  return ld_volatile_u64(&r->value);
}

template <typename T>
__device__ __forceinline__ T atomic(proxy::AtomicOp op, T* dest, T operand, T compare, int pe) {
  static_assert(kAtomicWord<T>, "nvst::dev atomics: a 4- or 8-byte integer word");
  using U = AtomicBits<T>;
  check_pe(pe);
  check_symmetric(dest, sizeof(T));
#ifndef NVST_DEVICE_NO_CHECKS
  if (reinterpret_cast<std::uintptr_t>(dest) % sizeof(T) != 0)
    fail(FailKind::kBadArgument, pe, heap_offset(dest), reinterpret_cast<std::uintptr_t>(dest), sizeof(T), -1);
#endif
  if (!on_node(pe) && has_proxy())
    return static_cast<T>(static_cast<U>(proxy_atomic(op, sizeof(T), dest, to_bits(operand), to_bits(compare), pe)));
  U* remote = reinterpret_cast<U*>(rma_address(dest, sizeof(T), pe));
  return static_cast<T>(apply_atomic<U>(remote, op, static_cast<U>(operand), static_cast<U>(compare)));
}

}  // namespace detail

// Adds `value` to *dest on `pe`; returns the value before.
template <typename T>
__device__ __forceinline__ T atomic_fetch_add(T* dest, T value, int pe) {
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(dest, sizeof(T));
                  return nvshmem_backend::atomic_fetch_add(dest, value, pe))
  return detail::atomic(proxy::AtomicOp::kFetchAdd, dest, value, T{}, pe);
}

// If *dest on `pe` equals `cond`, stores `value`; returns the value before
// either way (the swap happened when it equals `cond`).
template <typename T>
__device__ __forceinline__ T atomic_compare_swap(T* dest, T cond, T value, int pe) {
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(dest, sizeof(T));
                  return nvshmem_backend::atomic_compare_swap(dest, cond, value, pe))
  return detail::atomic(proxy::AtomicOp::kCompareSwap, dest, value, cond, pe);
}

// Stores `value` in *dest on `pe`; returns the value before.
template <typename T>
__device__ __forceinline__ T atomic_swap(T* dest, T value, int pe) {
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(dest, sizeof(T)); return nvshmem_backend::atomic_swap(dest, value, pe))
  return detail::atomic(proxy::AtomicOp::kSwap, dest, value, T{}, pe);
}

// Reads *dest on `pe` atomically (never torn, never a stale cached copy).
template <typename T>
__device__ __forceinline__ T atomic_fetch(const T* dest, int pe) {
  NVST_IF_NVSHMEM(check_pe(pe); check_symmetric(dest, sizeof(T)); return nvshmem_backend::atomic_fetch(dest, pe))
  return detail::atomic(proxy::AtomicOp::kFetch, const_cast<T*>(dest), T{}, T{}, pe);
}

}  // namespace nvst::dev
#endif  // __CUDACC__
