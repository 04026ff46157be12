// What a PE's proxy and its copy agent (copy_agent.hpp) share: one page-
// aligned region of shared memory (a memfd both map) holding a ring of
// landing requests, the agent's progress and its failure.
//
// Protocol (one producer: the thread running the proxy's rounds; one
// consumer: the agent's thread):
//   proxy: n = posted; wait until n - done < capacity    -- the ring has room
//          write ring[n % capacity], then store-release seq = n + 1 in it
//          store-release posted = n + 1; if `sleeping`, bump `bell` and wake it
//   agent: for each request it has not taken (acquire-load seq == taken + 1),
//          queue its copies and signal on its stream; then queue a write
//          of `done` = taken after them (a stream memory operation, so the
//          GPU writes it once everything before it in the stream is done)
// A request's slot is reused only when `done` has passed it, so its operand
// (a SET's value, read by the copy engine) and its atomic result stay put
// while the GPU uses them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nvst::copy_agent {

enum RequestKind : std::uint8_t {
  kLand = 1,        // bytes from the inbox into the heap (bytes may be 0)
  kLandSignal = 2,  // the same, then the signal
  kAtomic = 3,      // an atomic on a heap word; its old value into results[slot]
};

struct alignas(64) Request {
  std::uint64_t seq;   // request number + 1 once published (0: never)
  std::uint64_t src;   // control-region offset of the data
  std::uint64_t dest;  // heap offset
  std::uint64_t bytes;
  std::uint64_t sig;        // heap offset of the signal or atomic word
  std::uint64_t sig_value;  // a signal's value, an atomic's operand
  std::uint64_t compare;    // a compare-and-swap's compare operand
  std::uint8_t kind;        // RequestKind
  std::uint8_t sig_op;      // proxy::SignalOp, or proxy::atomic_code
  std::uint8_t pad[6];
};
static_assert(sizeof(Request) == 64);

struct alignas(64) Channel {
  alignas(64) std::uint64_t posted;  // requests published (the proxy writes)
  alignas(64) std::uint64_t done;    // requests finished in GPU memory (the agent's stream writes)
  alignas(64) std::uint32_t bell;    // futex word: the proxy bumps it to wake a sleeping agent
  std::uint32_t sleeping;            // 1 while the agent waits on `bell`
  alignas(64) std::uint64_t ready;   // 1: the agent has mapped everything and waits for requests
  std::uint64_t stop;                // 1: the proxy asks the agent to exit
  std::uint64_t failed;              // 1: the agent stopped; `error` says why
  char error[512];
  std::uint32_t capacity;  // requests in the ring, a power of two
  std::uint32_t pad;
  // Then capacity Requests, then capacity std::uint64_t results.
};

constexpr std::size_t ring_offset() { return (sizeof(Channel) + 63) / 64 * 64; }
constexpr std::size_t results_offset(std::uint32_t capacity) { return ring_offset() + capacity * sizeof(Request); }
constexpr std::size_t channel_bytes(std::uint32_t capacity) {
  return (results_offset(capacity) + capacity * sizeof(std::uint64_t) + 4095) / 4096 * 4096;
}
inline Request* ring(Channel* c) { return reinterpret_cast<Request*>(reinterpret_cast<char*>(c) + ring_offset()); }
inline std::uint64_t* results(Channel* c) {
  return reinterpret_cast<std::uint64_t*>(reinterpret_cast<char*>(c) + results_offset(c->capacity));
}

}  // namespace nvst::copy_agent
