// The command FIFO between producers (GPU threads, or host threads) and a
// PE's proxy thread: the layout both sides share. It lives in pinned host
// memory so that GPU stores reach the CPU without a copy; the producers'
// ticket counter ("tail") lives where the producers can do fast atomics on
// it (device memory for GPU producers, host memory for host producers).
//
// Protocol (one consumer, any number of producers):
//   producer: t = fetch_add(tail, 1)              -- a ticket: slot t % capacity
//             wait until t - head < capacity      -- back-pressure (timeout)
//             write the command's body words
//             release fence
//             store tag = (t + 1) << 8 | op        -- publishes the command
//   consumer: tag = acquire-load slot[head % capacity].tag; 0 means not yet
//             copy the command; store tag = 0; store-release head + 1
//
// Why it is right:
//  - Tickets are unique (one atomic counter), so no two producers share a
//    slot in the same lap and no command is lost or duplicated.
//  - A producer writes slot t only once head > t - capacity, i.e. after the
//    consumer copied and cleared the slot's previous command (ticket
//    t - capacity): the consumer clears the tag before it publishes head with
//    release, the producer reads head (acquire) before writing.
//  - The release fence between body and tag (on the GPU
//    __threadfence_system(), which orders the stores as the CPU sees them)
//    and the consumer's acquire load of the tag mean a non-zero tag implies
//    the whole body is visible.
//  - The consumer takes slots strictly in ticket order, so a producer whose
//    ticket came later waits behind an earlier one that has not published
//    yet: commands are executed in ticket order, which is what fence and
//    quiet rely on. A producer that dies between ticket and publish stalls
//    the FIFO: the producers waiting behind it time out with a message
//    instead of hanging (the proxy itself cannot tell a slow producer).
//  - `completed` (written by the proxy) is the quiet point: every command
//    whose ticket is below it has finished, data visible at its target.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nvst::proxy {

enum class Op : std::uint8_t {
  kPut = 1,        // bytes from src to dest on pe
  kPutSignal = 2,  // a put, then the signal once the data is visible
  kSignal = 3,     // a set/add at sig on pe (8 bytes; SET also 1, 2 or 4: SignalOp)
  kFence = 4,      // later commands to a PE land after earlier ones
  kQuiet = 5,      // completes everything before it; sets `completed`
  kNop = 6,        // nothing: measures the FIFO and the proxy's dispatch (`nvst bench fifo`)
  kAtomic = 7,     // a remote atomic (AtomicOp in sig_op) whose old value comes back in the reply
  // A piece of a put that its producer staged itself (GPU heaps, below):
  // `bytes` (at most a piece) in the slot of staging ticket `src`, for heap
  // offset `dest`. The _signal form is a put_signal's last piece and
  // carries its signal. `reserved`: the whole put's bytes on its first
  // piece, else 0 (NVST_PROXY_TRACE's "taken").
  kPutStaged = 8,
  kPutSignalStaged = 9,
};

// Staged pieces. On GPU heaps a put's producer (a kernel's group, or the
// host thread that calls the host API with a GPU source) copies the data
// itself into a slot of a staging ring in pinned, mapped host memory, then
// posts one kPutStaged command per piece, so the proxy thread makes no CUDA
// call to send. A slot is a piece behind room for the 64-byte header the
// proxy writes in front of it (its inbox piece header). Tickets from the
// ring's counter name the slots: ticket t uses slot t % slots, and may fill
// it once t < slots or the slot's `done` word (written by the proxy with
// release once that slot's fabric write completed) holds t - slots + 1.
constexpr std::size_t kPieceHeaderBytes = 64;
constexpr std::size_t kPieceBytes = std::size_t{256} << 10;
constexpr std::size_t kSlotBytes = kPieceHeaderBytes + kPieceBytes;

// A remote atomic in a command: sig = heap offset of the word at the
// target, sig_value = the operand, dest = the compare operand of kCompareSwap,
// sig_op = atomic_code(op, width). The target's proxy applies it (provider
// atomics are not used: libfabric 1.17's shm lost or garbled them, docs/06)
// and its old value lands in replies(fifo)[ticket % capacity].
enum class AtomicOp : std::uint8_t { kFetchAdd = 1, kCompareSwap = 2, kSwap = 3, kFetch = 4 };
constexpr std::uint8_t kAtomicWide = 0x80;  // sig_op bit: a 64-bit word (else 32-bit)
constexpr std::uint8_t atomic_code(AtomicOp op, std::uint64_t width) {
  return static_cast<std::uint8_t>(static_cast<std::uint8_t>(op) | (width == 8 ? kAtomicWide : 0));
}
constexpr AtomicOp atomic_op(std::uint8_t code) { return static_cast<AtomicOp>(code & 0x7f); }
constexpr std::uint64_t atomic_width(std::uint8_t code) { return (code & kAtomicWide) ? 8 : 4; }
constexpr bool atomic_code_valid(std::uint8_t code) {
  return (code & 0x7f) >= static_cast<std::uint8_t>(AtomicOp::kFetchAdd) &&
         (code & 0x7f) <= static_cast<std::uint8_t>(AtomicOp::kFetch);
}

// The answer to the atomic of ticket t: the proxy stores `value`, then
// `done` = t + 1 with release; the producer waits for exactly t + 1 and then
// reads `value`. Slot t % capacity is written again only for ticket
// t + capacity, which a producer can take only after the proxy took t; a
// producer that sees a later ticket's answer was descheduled for a whole lap
// of the FIFO and reports it rather than read a wrong value.
struct AtomicReply {
  std::uint64_t value;
  std::uint64_t done;
};

// kSet and kAdd act on an 8-byte word. The narrow SETs store the low 1, 2
// or 4 bytes of the value: they carry dev::p of small elements to a PE of
// another node, where a store of 8 bytes would overwrite the neighbours.
enum class SignalOp : std::uint8_t { kSet = 0, kAdd = 1, kSet1 = 2, kSet2 = 3, kSet4 = 4 };

// The bytes a signal op writes.
constexpr std::uint64_t signal_width(std::uint8_t op) {
  return op == static_cast<std::uint8_t>(SignalOp::kSet1)   ? 1
         : op == static_cast<std::uint8_t>(SignalOp::kSet2) ? 2
         : op == static_cast<std::uint8_t>(SignalOp::kSet4) ? 4
                                                            : 8;
}

// The SET that writes `width` bytes (1, 2, 4 or 8): what a p of that width sends.
constexpr SignalOp set_of_width(std::uint64_t width) {
  return width == 1 ? SignalOp::kSet1 : width == 2 ? SignalOp::kSet2 : width == 4 ? SignalOp::kSet4 : SignalOp::kSet;
}
static_assert(signal_width(static_cast<std::uint8_t>(set_of_width(1))) == 1 &&
                  signal_width(static_cast<std::uint8_t>(set_of_width(2))) == 2 &&
                  signal_width(static_cast<std::uint8_t>(set_of_width(4))) == 4 &&
                  signal_width(static_cast<std::uint8_t>(set_of_width(8))) == 8,
              "set_of_width and signal_width are each other's inverse");

struct alignas(64) Command {
  std::uint64_t tag;   // 0 = empty; (ticket + 1) << 8 | op when published
  std::uint64_t dest;  // heap offset at the target
  std::uint64_t src;   // source address in the producer's address space
  std::uint64_t bytes;
  std::uint64_t sig;  // heap offset of the signal word at the target
  std::uint64_t sig_value;
  std::uint32_t pe;            // target PE
  std::uint8_t sig_op;         // SignalOp
  std::uint8_t src_on_device;  // 1: src is GPU memory (kernels set it always; such data is staged by its producer)
  std::uint8_t pad[2];
  std::uint64_t reserved;
};
static_assert(sizeof(Command) == 64, "a command is one 64-byte line");

constexpr std::uint64_t command_tag(std::uint64_t ticket, Op op) {
  return ((ticket + 1) << 8) | static_cast<std::uint64_t>(op);
}
constexpr Op tag_op(std::uint64_t tag) { return static_cast<Op>(tag & 0xff); }
constexpr std::uint64_t tag_ticket(std::uint64_t tag) { return (tag >> 8) - 1; }

// Shared by producers and the consumer; capacity slots follow the header.
struct FifoShared {
  alignas(64) std::uint64_t head;       // commands consumed so far
  alignas(64) std::uint64_t completed;  // every ticket < completed has finished
  alignas(64) std::uint64_t failed;     // non-zero: the proxy failed, stop waiting
  std::uint32_t capacity;               // a power of two
  std::uint32_t pad;
  alignas(64) Command slots[1];  // really `capacity` of them
};

// The header, the slots, then one AtomicReply per slot.
constexpr std::size_t fifo_bytes(std::uint32_t capacity) {
  return sizeof(FifoShared) + (capacity - 1) * sizeof(Command) + capacity * sizeof(AtomicReply);
}
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline AtomicReply*
    replies(FifoShared* f, std::uint32_t capacity) {
  return reinterpret_cast<AtomicReply*>(reinterpret_cast<char*>(f) + sizeof(FifoShared) +
                                        (capacity - 1) * sizeof(Command));
}

}  // namespace nvst::proxy
