// The device half of the command FIFO (layout and protocol:
// nvst/proxy_fifo.hpp; the proxy that drains it: src/transport/proxy.cpp).
// RMA calls to PEs of other nodes come here: one thread of the calling group
// takes a ticket, waits for a free slot, writes the command body, fences at
// system scope and publishes the tag. quiet() asks the proxy to complete
// everything before it and waits for the `completed` word.
#pragma once

#include <cstdint>

#include "nvst/device/state.cuh"
#include "nvst/proxy_fifo.hpp"

namespace nvst::dev {

namespace detail {
__device__ __forceinline__ std::uint64_t ld_volatile_u64(const std::uint64_t* p) {
  return *reinterpret_cast<const volatile std::uint64_t*>(p);
}
__device__ __forceinline__ void st_volatile_u64(std::uint64_t* p, std::uint64_t v) {
  *reinterpret_cast<volatile std::uint64_t*>(p) = v;
}
__device__ __forceinline__ std::uint64_t ld_acquire_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint32_t ld_acquire_sys(const std::uint32_t* p) {
  std::uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Waits until ready() holds, failing (kProxyFailed) if the proxy stopped and
// (kProxyTimeout) after the device timeout.
template <typename Ready>
__device__ __forceinline__ void proxy_wait(Ready ready, int pe, std::uint64_t ticket) {
  const DeviceState& s = state();
  if (ready()) return;
  const std::uint64_t start = global_timer_ns();
  for (unsigned spins = 1;; ++spins) {
    if (ready()) return;
    if ((spins & 63u) == 0) {
      if (ld_volatile_u64(&s.fifo->failed) != 0) fail(FailKind::kProxyFailed, pe, 0, ticket, 0, -1);
      if (s.timeout_ns != 0 && global_timer_ns() - start > s.timeout_ns)
        fail(FailKind::kProxyTimeout, pe, 0, ld_volatile_u64(&s.fifo->completed), ticket, -1);
    }
    __nanosleep(64);
  }
}
}  // namespace detail

// Whether this PE has a proxy (some PE is on another node).
__device__ __forceinline__ bool has_proxy() { return state().fifo != nullptr; }

// Posts one command; returns its ticket. One thread calls it. `src`: a
// source address, or a staged piece's ticket; `reserved`: a staged piece's
// (proxy_fifo.hpp), stored only for those.
__device__ __forceinline__ std::uint64_t proxy_push_word(proxy::Op op, int pe, std::uint64_t dest, std::uint64_t src,
                                                         std::uint64_t bytes, std::uint64_t sig,
                                                         std::uint64_t sig_value, std::uint8_t sig_op,
                                                         std::uint64_t reserved = 0) {
  const DeviceState& s = state();
  proxy::FifoShared* f = s.fifo;
  const std::uint64_t t = atomicAdd(s.fifo_tail, 1ull);
  const std::uint32_t cap = *reinterpret_cast<const volatile std::uint32_t*>(&f->capacity);
  // Back-pressure. Reading `head` crosses PCIe (about a microsecond), so
  // producers share the last value read in device memory and read the host
  // copy only when that one says the ring may be full.
  if (t - *reinterpret_cast<volatile unsigned long long*>(s.fifo_head_cache) >= cap) {
    std::uint64_t head = 0;
    detail::proxy_wait([&] { return t - (head = detail::ld_volatile_u64(&f->head)) < cap; }, pe, t);
    atomicMax(s.fifo_head_cache, static_cast<unsigned long long>(head));
  }
  proxy::Command* slot = &f->slots[t & (cap - 1)];
  detail::st_volatile_u64(&slot->dest, dest);
  detail::st_volatile_u64(&slot->src, src);
  detail::st_volatile_u64(&slot->bytes, bytes);
  detail::st_volatile_u64(&slot->sig, sig);
  detail::st_volatile_u64(&slot->sig_value, sig_value);
  // pe, sig_op and src_on_device in one 8-byte store.
  const std::uint64_t packed = static_cast<std::uint64_t>(static_cast<std::uint32_t>(pe)) |
                               (static_cast<std::uint64_t>(sig_op) << 32) | (std::uint64_t{1} << 40);
  detail::st_volatile_u64(reinterpret_cast<std::uint64_t*>(&slot->pe), packed);
  if (op == proxy::Op::kPutStaged || op == proxy::Op::kPutSignalStaged)
    detail::st_volatile_u64(&slot->reserved, reserved);
  __threadfence_system();  // the body before the tag, as the CPU sees it
  detail::st_volatile_u64(&slot->tag, proxy::command_tag(t, op));
  return t;
}

__device__ __forceinline__ std::uint64_t proxy_push(proxy::Op op, int pe, std::uint64_t dest, const void* src,
                                                    std::uint64_t bytes, std::uint64_t sig, std::uint64_t sig_value,
                                                    std::uint8_t sig_op) {
  return proxy_push_word(op, pe, dest, reinterpret_cast<std::uint64_t>(src), bytes, sig, sig_value, sig_op);
}

// Completes every command this PE's kernels posted before the call. Cheap
// when nothing is outstanding (tail == completed).
__device__ __forceinline__ void proxy_quiet() {
  const DeviceState& s = state();
  if (s.fifo == nullptr) return;
  const std::uint64_t taken = *reinterpret_cast<const volatile unsigned long long*>(s.fifo_tail);
  if (detail::ld_volatile_u64(&s.fifo->completed) >= taken) return;
  const std::uint64_t t = proxy_push(proxy::Op::kQuiet, 0, 0, nullptr, 0, 0, 0, 0);
  detail::proxy_wait([&] { return detail::ld_volatile_u64(&s.fifo->completed) > t; }, -1, t);
  __threadfence_system();
}

// Orders this PE's earlier proxy commands before its later ones.
__device__ __forceinline__ void proxy_fence() {
  const DeviceState& s = state();
  if (s.fifo == nullptr) return;
  const std::uint64_t taken = *reinterpret_cast<const volatile unsigned long long*>(s.fifo_tail);
  if (detail::ld_volatile_u64(&s.fifo->completed) >= taken) return;
  proxy_push(proxy::Op::kFence, 0, 0, nullptr, 0, 0, 0, 0);
}

}  // namespace nvst::dev
