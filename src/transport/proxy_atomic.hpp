// Remote atomics through the proxy (the kAtomic command, proxy_fifo.hpp):
// the pieces that carry them between proxies and the host side of applying
// and answering them. The proxy's phases (proxy_send.cpp, proxy_land.cpp)
// move them like signals: a request is a header-only inbox piece to the
// target, whose proxy applies it to its heap and answers with a header-only
// piece back, which the requester's proxy stores in the reply slot of the
// command's ticket.
#pragma once

#include <atomic>
#include <cstdint>

#include "nvst/error.hpp"
#include "nvst/proxy_fifo.hpp"

namespace nvst::proxy_atomic {

// What an inbox piece carries besides its data (InboxHeader::kind).
enum PieceKind : std::uint8_t {
  kData = 0,           // data only
  kDataSignal = 1,     // data, then the signal
  kAtomicRequest = 2,  // an atomic to apply here; answer the sender with its old value
  kAtomicAnswer = 3,   // the old value of an atomic this PE asked for
  kAckRequest = 4,     // nothing to apply: acknowledge every piece applied so far (proxy_state.hpp)
};

// Which FIFO's reply slot an answer goes to, and the ticket: travels in the
// request and comes back in the answer.
constexpr std::uint64_t kFromKernels = std::uint64_t{1} << 63;
constexpr std::uint64_t token(std::uint64_t ticket, bool from_kernels) {
  return ticket | (from_kernels ? kFromKernels : 0);
}
constexpr bool token_from_kernels(std::uint64_t t) { return (t & kFromKernels) != 0; }
constexpr std::uint64_t token_ticket(std::uint64_t t) { return t & ~kFromKernels; }

// Whether a request for the word at heap offset `at` is well formed for a
// heap of `heap_bytes`: a known op, the word inside the heap and aligned.
inline bool request_valid(std::uint8_t code, std::uint64_t at, std::uint64_t heap_bytes) {
  const std::uint64_t w = proxy::atomic_width(code);
  return proxy::atomic_code_valid(code) && at % w == 0 && heap_bytes >= w && at <= heap_bytes - w;
}

// Applies the atomic to this PE's host heap and returns the old value. The
// host API's own atomics on this heap use the same std::atomic_ref
// operations, so both are atomic with each other.
template <typename U>
U apply_word(U* at, proxy::AtomicOp op, U operand, U compare) {
  std::atomic_ref<U> w(*at);
  switch (op) {
    case proxy::AtomicOp::kFetchAdd: return w.fetch_add(operand, std::memory_order_acq_rel);
    case proxy::AtomicOp::kCompareSwap:
      w.compare_exchange_strong(compare, operand, std::memory_order_acq_rel);
      return compare;  // the value seen: `compare` itself when the swap happened
    case proxy::AtomicOp::kSwap: return w.exchange(operand, std::memory_order_acq_rel);
    case proxy::AtomicOp::kFetch: return w.load(std::memory_order_acquire);
  }
  NVST_FAIL("remote atomic: unknown op ", static_cast<int>(op));
}

inline std::uint64_t apply_host(char* heap, std::uint64_t at, std::uint8_t code, std::uint64_t operand,
                                std::uint64_t compare) {
  const proxy::AtomicOp op = proxy::atomic_op(code);
  if (proxy::atomic_width(code) == 8)
    return apply_word<std::uint64_t>(reinterpret_cast<std::uint64_t*>(heap + at), op, operand, compare);
  return apply_word<std::uint32_t>(reinterpret_cast<std::uint32_t*>(heap + at), op, static_cast<std::uint32_t>(operand),
                                   static_cast<std::uint32_t>(compare));
}

// Stores the answer of `ticket` in its reply slot of `fifo` (value first,
// then `done` with release: see proxy::AtomicReply).
inline void deliver(proxy::FifoShared* fifo, std::uint64_t ticket, std::uint64_t value) {
  const std::uint32_t cap = fifo->capacity;
  proxy::AtomicReply& r = proxy::replies(fifo, cap)[ticket & (cap - 1)];
  std::atomic_ref<std::uint64_t>(r.value).store(value, std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(r.done).store(ticket + 1, std::memory_order_release);
}

}  // namespace nvst::proxy_atomic
