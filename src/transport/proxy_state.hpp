// The proxy thread's state and the phases of its loop (proxy.hpp says what
// the proxy does; this is how). One round (Proxy::step) polls, handles and
// progresses in this order, each phase a function of its own:
//   complete()        proxy.cpp        completions of our operations; peers' doorbells
//   check_ages()      proxy_watch.cpp  operations or peers that stopped moving
//   take_landed()     proxy_land.cpp   landed inbox pieces into the heap
//   finish_landings() proxy_land.cpp   landing copies done: acks queued
//   send_signals()    proxy_send.cpp   host-path signals whose data completed
//   send_answers()    proxy_send.cpp   old values of peers' atomics applied here
//   post_staged()     proxy_send.cpp   staged pieces onto the wire
//   advance_active()  proxy_send.cpp   the command being sent, piece by piece (or an atomic,
//                                      or a piece its producer staged)
//   unblock()         proxy.cpp        a fence or quiet whose work drained
//   intake()          proxy.cpp        new commands from the FIFOs (then advance_active again)
//   post_acks()       proxy_land.cpp   acks onto the wire
// Only the thread that holds the proxy's engine (the proxy thread, or a host
// thread doing its work: proxy_help.cpp) touches a State.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transport/call_watch.hpp"
#include "transport/copy_agent.hpp"
#include "transport/fabric.hpp"
#include "transport/fifo_host.hpp"
#include "transport/proxy.hpp"
#include "transport/proxy_atomic.hpp"
#include "transport/proxy_trace.hpp"

namespace nvst::proxy_impl {

constexpr int kMaxInFlight = static_cast<int>(fabric::kMaxLocalInFlight);  // fabric operations posted at once
// Pieces of 256 KiB of data (proxy::kPieceBytes): small enough that a 1 MiB
// put is already a pipeline (staging of piece i+1 while piece i is on the
// wire and piece i-1 is copied into the target's GPU), large enough that per-piece
// costs (an operation, an acknowledgement) stay small next to the data. A
// slot holds a piece behind its 64-byte header, so a power-of-two put
// fills whole pieces (with the header inside 256 KiB, 1 MiB took a fifth
// piece of 256 bytes, one more trip through the whole pipeline: 256 KiB
// over shm took 133 us instead of 53). Smaller first and last pieces,
// to fill and drain the pipeline sooner, did not pay on one GPU (
// a staging or landing copy there takes 20-25 us whatever its size).
// The proxy's own staging slots: header-only pieces (signals, atomics, ack
// requests) and data it copies itself (host sources, by memcpy).
constexpr int kStageSlots = 16;
// GPU heaps: the staging rings that producers fill themselves
// (proxy_fifo.hpp, "Staged pieces"). A ring slot is busy from its
// producer's ticket until its piece's fabric write completed; the proxy
// keeps up to kInboxSlots pieces per target in flight, so 32 kernel slots
// let producers fill a target's next window while the current one is on
// the wire (or keep two targets' windows full). More would only queue
// pieces behind the targets' acks (commands are taken in order) while
// pinning 256 KiB each. Host threads get a ring of their own: they cannot
// take tickets from the kernels' counter (device memory), and a host
// thread's copy that waits in the driver (behind the user's queue) must
// not hold a slot that a kernel waits for.
constexpr int kKernelRingSlots = 32;
constexpr int kHostRingSlots = 16;
constexpr std::size_t kPieceBytes = proxy::kPieceBytes;
constexpr int kInboxSlots = 16;  // per (source, target) pair
static_assert(kInboxSlots <= fabric::kMaxRemoteDataPerPeer,
              "the transport's completion queue has room for "
              "kMaxRemoteDataPerPeer doorbells from each peer");
static_assert(kInboxSlots <= 1 << 16,
              "inbox_bell.hpp restores a seq from 16 bits: at most 2^16 pieces in flight per pair");
constexpr std::size_t kInboxHeader = proxy::kPieceHeaderBytes;
constexpr std::size_t kSlotBytes = proxy::kSlotBytes;  // a staging or inbox slot
constexpr std::uint32_t kFifoCapacity = 4096;
using Clock = std::chrono::steady_clock;

inline std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// The header in front of each piece in an inbox slot.
struct InboxHeader {
  // piece_tag(key, sender, seq): names the piece (its seq) so that only the
  // job's PEs can write a header the target accepts. It takes the place of
  // a plain seq, so the header stays 64 bytes and a power-of-two put still
  // fills whole pieces.
  std::uint64_t tag;
  std::uint64_t dest;       // heap offset
  std::uint64_t bytes;      // data bytes after the header
  std::uint64_t sig;        // heap offset of the signal word
  std::uint64_t sig_value;  // an atomic's operand, or an answer's old value
  std::uint8_t kind;        // proxy_atomic::PieceKind: data, + signal, atomic request or answer
  std::uint8_t sig_op;      // proxy::SignalOp, or an atomic's proxy::atomic_code
  std::uint8_t ack_now;     // 1: acknowledge it at once (see lazy acks below)
  std::uint8_t pad[5];
  std::uint64_t compare;  // an atomic request's compare operand
  std::uint64_t token;    // an atomic's ticket and FIFO (proxy_atomic::token), echoed in its answer
};
static_assert(sizeof(InboxHeader) == kInboxHeader);

// Control region layout (per PE, world PEs):
//   acks[world][kInboxSlots]   seq + 1 of my last piece in slot k that t applied (t writes)
//   slots[world][kInboxSlots]  header + data, or a header only when only
//                              signals use the inbox (s writes)
// A piece rings its own doorbell: it is written with remote CQ data (the
// sender and its seq, transport/inbox_bell.hpp), and the target's provider
// reports that once the bytes are in place (State::landed). Before, the sender waited for the write's
// completion and then wrote an 8-byte doorbell: two operations per piece,
// and one more one-way trip, where shm moves one RMA per peer at a time.
// Acks are plain 8-byte RMA writes, not fabric atomics: libfabric 1.17's
// shm applied several in-flight atomic writes from one sender with each
// other's operands (tests/host/test_fabric.cpp, *_inbox). Every read of an
// ack tests for one exact value, so a torn write (a provider that lands the
// 8 bytes in parts) reads as "not yet", never as a wrong yes. A word is
// written again only 16 pieces later, after its previous value was seen, so
// two writes to one word are never in flight together.
struct ControlLayout {
  int world;
  // Whether data travels through the inboxes (GPU heaps; host heaps with
  // NVST_PROXY_INBOX=1): slots of a header and a piece. Otherwise only
  // signals do (host heaps): slots of a header.
  bool data;
  std::size_t ack(int t, int k) const { return 8 * (static_cast<std::size_t>(t) * kInboxSlots + k); }
  std::size_t slots_begin() const { return round_up(ack(world, 0), 4096); }
  std::size_t slot_bytes() const { return data ? kSlotBytes : kInboxHeader; }
  std::size_t slot(int s, int k) const {
    return slots_begin() + (static_cast<std::size_t>(s) * kInboxSlots + k) * slot_bytes();
  }
  std::size_t bytes() const { return slot(world, 0); }
};

// Lazy acks. Where inboxes carry signals only (host heaps; ControlLayout::
// data false), a target acknowledges a piece in a later round that finds
// nothing else to do (State::idle_round), not within the round that
// applied it: a ping-pong's waiter returns without writing an ack first,
// and its reply goes out well before the ack. Such a round comes soon
// while the target waits for anything, but may not come at all when its
// thread goes on computing, so a sender that needs acks asks: it marks a
// piece `ack_now` (every 8th, so a slot is never waited for long, and one
// that a quiet or fence begun or queued waits for), and a quiet or fence
// that has waited kAckRequestAfter for acks of unmarked pieces sends a
// kAckRequest piece. A target acknowledges a marked piece and every piece before it
// within the round that applied it, even the last round of a wait. Every
// piece still gets its own ack word, so the rules above for ack words hold
// as they were. Inboxes that carry data (GPU heaps) acknowledge every piece
// at once.
constexpr std::uint64_t kAckEvery = 8;
constexpr std::chrono::microseconds kAckRequestAfter{100};  // a quiet's wait before it asks
static_assert(kAckEvery <= kInboxSlots / 2, "a marked piece's ack frees slots before the sender runs out");

// A piece's tag: the job's inbox key (derived from its secret) mixed with
// the sender and seq, so a header a stranger wrote, or an old piece a
// forged doorbell points at, does not match the piece expected.
inline std::uint64_t piece_tag(std::uint64_t key, int src, std::uint64_t seq) {
  std::uint64_t z = key ^ (seq * 0x9e3779b97f4a7c15ull) ^ (static_cast<std::uint64_t>(src) << 48);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline std::uint64_t load_acquire(const std::uint64_t* p) {
  return std::atomic_ref<const std::uint64_t>(*p).load(std::memory_order_acquire);
}

// A signal to a word of this PE's host heap, applied by the proxy thread.
void apply_host_signal(char* heap, std::uint64_t sig, std::uint8_t sig_op, std::uint64_t value);

}  // namespace nvst::proxy_impl

namespace nvst {

// One posted fabric operation. Lives in the registered scratch area so that
// `value` (an ack's word) is registered memory.
struct Proxy::InFlight {
  using Clock = std::chrono::steady_clock;
  enum Kind : int { kHeapWrite, kInboxWrite, kAck };
  // The provider's: with FI_CONTEXT / FI_CONTEXT2 mode it may use the first
  // 32 / 64 bytes behind the context pointer while the operation is in
  // flight. (Before this field existed, shm overwrote `value`, the doorbell
  // number, and the inbox path stalled.)
  fabric::ProviderContext provider_context;
  std::uint64_t value;  // kAck: the word written; kInboxWrite: the piece's seq
  int kind;
  int pe;
  int stage_slot;  // -1: none; from kStageSlots on: a staging ring's slot (State::ring_slot)
  int group;       // host path put_signal: index into groups, -1: none
  Clock::time_point posted;
  std::uint64_t ring_ticket;  // a ring slot's: its producer's ticket, released on completion
};

struct Proxy::State {
  using Clock = std::chrono::steady_clock;
  // What the phases use of their proxy.
  fabric::Transport* transport = nullptr;
  char* control = nullptr;  // the control region: inboxes and acks
  double timeout_s = 0;
  proxy_impl::ControlLayout layout;
  bool gpu = false;            // a GPU heap: the copy agent lands inbox pieces
  CopyAgent* agent = nullptr;  // GPU heaps
  int me = 0;
  std::uint64_t tag_key = 0;  // piece_tag's key
  // Incoming messages dropped as forged or malformed (Proxy::dropped reads
  // it from other threads), and when the last report of them was printed.
  std::atomic<std::uint64_t> dropped{0};
  Clock::time_point dropped_reported{};
  void drop(const std::string& what);  // counts it, and reports at most once a second
  char* heap = nullptr;
  std::size_t heap_bytes = 0;
  proxy::FifoShared* host_fifo = nullptr;  // where answers to host threads' atomics go
  proxy::FifoShared* dev_fifo = nullptr;   // kernels' (GPU heaps only)
  proxy::Consumer host_consumer;
  std::unique_ptr<proxy::Consumer> dev_consumer;
  InFlight* pool = nullptr;
  std::vector<int> free_ops;
  std::vector<char> op_busy = std::vector<char>(proxy_impl::kMaxInFlight, 0);
  int in_flight = 0;
  int max_in_flight = 0;                              // NVST_PROXY_DEBUG reports it
  std::uint64_t pieces_posted = 0, pieces_taken = 0;  // inbox pieces, for NVST_PROXY_DEBUG's per-piece costs
  char* stage = nullptr;                              // kStageSlots own slots, then the kernels' ring, then the host's
  std::vector<int> free_slots;                        // own slots
  // Per ring slot (kernels' ring, then host's): ticket + 1 of the last piece
  // whose fabric write completed, stored with release (proxy_fifo.hpp).
  // Pinned, mapped: kernels read theirs.
  std::uint64_t* ring_done = nullptr;
  // The command being posted piece by piece.
  bool active = false;
  proxy::Command cur{};
  std::size_t cur_done = 0;
  int cur_group = -1;
  bool cur_from_kernels = false;  // taken from the kernels' FIFO (a staged piece: which ring)
  bool cur_signal_sent = false;   // inbox path: the signal-carrying piece went
  Clock::time_point cur_since;
  // Host path put_signal: pieces in flight, and whether all were posted.
  struct Group {
    int remaining = 0;
    bool all_posted = false;
    proxy::Command cmd{};
  };
  std::vector<Group> groups;
  std::vector<int> free_groups;
  std::deque<int> ready_signals;
  // Inbox path: acks to write (after a piece was applied), each seq + 1
  // into one word of its sender's control region.
  struct ControlWord {
    int pe;
    std::size_t offset;
    std::uint64_t value;
  };
  std::deque<ControlWord> control_words;
  std::vector<std::vector<std::uint64_t>> lazy_acks;  // per source: applied pieces not yet acknowledged (lazy acks)
  std::vector<std::uint64_t> marked;                  // per target: 1 + the last piece sent marked ack_now (0: none)
  // Atomic requests from peers applied here, whose old values are yet to be
  // sent back (as answer pieces, when an inbox slot at the sender is free).
  // Never waited for by the receiving loop, so two PEs asking each other
  // cannot block each other's inboxes.
  struct Answer {
    int pe;
    std::uint64_t token, value;
  };
  std::deque<Answer> answers;
  // Inbox path: pieces whose header and data are in place (in a slot of
  // our own, or a ring slot its producer filled), posted in order as the
  // provider and the in-flight records allow.
  struct Staged {
    int slot, pe;
    std::uint64_t seq;  // its inbox slot at pe is seq % proxy_impl::kInboxSlots
    std::size_t bytes;  // header + data
    Clock::time_point since;
    std::uint64_t ring_ticket = 0;  // a ring slot's producer's ticket
  };
  std::deque<Staged> staged;
  // Sending side: pieces sent per target. Receiving side: next piece
  // expected per source, pieces applied (copied, stream done) per source,
  // and the doorbells: landed[s * kInboxSlots + k] is seq + 1 of the last
  // piece from s whose write into inbox slot k reported it had landed.
  std::vector<std::uint64_t> sent;
  std::vector<std::uint64_t> recv, applied, landed;
  // GPU heaps: pieces handed to the copy agent, in order.
  struct Applying {
    int src;
    std::uint64_t request;  // the agent's request number
    Clock::time_point since;
    std::uint64_t token = 0;  // an atomic request's, answered once done
    bool atomic = false;      // its old value is the agent's result
  };
  std::deque<Applying> applying;
  // fence / quiet
  bool blocked = false;
  // While blocked: what is left to drain (drain_state) and since when it
  // has not changed, for the age check (a peer that never acks).
  std::uint64_t drain_state = 0;
  Clock::time_point drain_same_since;
  Clock::time_point blocked_since;  // when the fence or quiet began (request_acks)
  bool blocked_is_quiet = false;
  proxy::Consumer* blocked_fifo = nullptr;
  std::uint64_t blocked_ticket = 0;
  Clock::time_point last_age_check = Clock::now();
  Clock::time_point copy_stall_reported{};  // the landing last reported as stalled (check_ages)
  Clock::time_point last_debug = Clock::now();
  std::vector<fabric::Completion> completions;
  int failed_pe = -1;  // the PE a failure thrown from a round blames (-1: none)

  ProxyTrace trace;  // NVST_PROXY_TRACE

  State(proxy::FifoShared* f, std::string trace_path) : host_consumer(f), trace(std::move(trace_path)) {}

  // The phases, in the order of one round (see the top of this file). Each
  // returns whether it did anything; failures throw (Proxy::run fails the
  // proxy with the message).
  bool complete();
  void check_ages();
  void debug_report();
  bool send_signals();
  bool send_answers();
  bool take_landed();
  bool finish_landings();
  bool post_acks();
  bool post_staged();
  bool advance_active();
  bool unblock();
  bool intake();
  void request_acks();  // unblock: a kAckRequest to each target whose last piece's ack is lazy

  // Parts of them.
  bool stage_piece(int pe, const proxy::Command& c, std::uint64_t dest, const char* src, std::size_t bytes,
                   proxy_atomic::PieceKind kind);
  bool advance_atomic();  // advance_active for an atomic: a request piece, or applied here
  bool advance_staged();  // advance_active for a piece its producer staged
  bool advance_inbox();   // advance_active on the inbox path
  bool advance_direct();  // advance_active on the host path
  void stage_header(int slot, int pe, const proxy::Command& c, std::uint64_t dest, std::size_t bytes,
                    proxy_atomic::PieceKind kind, std::uint64_t ring_ticket);
  bool piece_kind_valid(const proxy_impl::InboxHeader& h) const;
  void deliver_answer(std::uint64_t token, std::uint64_t value);
  bool landing_pending(const Applying& a);
  void release_blocked();
  void start(const proxy::Command& c, proxy::Consumer* from);  // intake: a put, signal or atomic becomes active

  InFlight* take(int kind, int pe) {
    const int id = free_ops.back();
    InFlight* op = &pool[id];
    *op = InFlight{{}, 0, kind, pe, -1, -1, Clock::now(), 0};
    return op;
  }
  // The slot (an index into `stage`) of a ring's ticket.
  static int ring_slot(bool kernels, std::uint64_t ticket) {
    return kernels ? proxy_impl::kStageSlots + static_cast<int>(ticket % proxy_impl::kKernelRingSlots)
                   : proxy_impl::kStageSlots + proxy_impl::kKernelRingSlots +
                         static_cast<int>(ticket % proxy_impl::kHostRingSlots);
  }
  // A staging slot whose write completed: our own goes back to free_slots;
  // a ring slot's producers learn that its ticket finished (release: the
  // provider has stopped reading it before a producer may write it again).
  void release_slot(int slot, std::uint64_t ring_ticket) {
    if (slot < proxy_impl::kStageSlots) {
      free_slots.push_back(slot);
      return;
    }
    std::atomic_ref<std::uint64_t>(ring_done[slot - proxy_impl::kStageSlots])
        .store(ring_ticket + 1, std::memory_order_release);
  }
  void commit(InFlight* op) {  // the post succeeded
    free_ops.pop_back();
    op_busy[static_cast<std::size_t>(op - pool)] = 1;
    max_in_flight = std::max(max_in_flight, ++in_flight);
  }
  void release(InFlight* op) {
    --in_flight;
    const int id = static_cast<int>(op - pool);
    op_busy[static_cast<std::size_t>(id)] = 0;
    free_ops.push_back(id);
  }
  // Whether t has applied my piece `seq` (pieces are applied in order, so
  // all before it too).
  bool acked(int t, std::uint64_t seq) const {
    const int k = static_cast<int>(seq % proxy_impl::kInboxSlots);
    return proxy_impl::load_acquire(reinterpret_cast<const std::uint64_t*>(control + layout.ack(t, k))) == seq + 1;
  }
  // Inbox slot for piece `sent` to t is free: its previous piece was applied.
  bool slot_free(int t, std::uint64_t seq) const {
    return seq < proxy_impl::kInboxSlots || acked(t, seq - proxy_impl::kInboxSlots);
  }
  bool all_acked() const {
    for (int t = 0; t < layout.world; ++t) {
      const std::uint64_t n = sent[static_cast<std::size_t>(t)];
      if (n > 0 && !acked(t, n - 1)) return false;
    }
    return true;
  }
  // Piece `seq` from src is applied: its ack goes out this round if `now`
  // (or the inbox carries data), with every lazy one of src before it, else
  // in a later idle round (idle_round).
  void ack(int src, std::uint64_t seq, bool now) {
    ++applied[static_cast<std::size_t>(src)];
    lazy_acks[static_cast<std::size_t>(src)].push_back(seq);
    if (now || layout.data) ack_lazy_of(src);
  }
  // A round that found nothing else to do posts the lazy acks: the thread
  // doing the proxy's work is waiting anyway, and an ack written later than
  // a reply does not reach the reply's target together with it. Whether
  // it posted any.
  bool idle_round() {
    for (int src = 0; src < layout.world; ++src) ack_lazy_of(src);
    return post_acks();
  }
  void ack_lazy_of(int src) {
    auto& later = lazy_acks[static_cast<std::size_t>(src)];
    for (const std::uint64_t s : later)
      control_words.push_back({src, layout.ack(me, static_cast<int>(s % proxy_impl::kInboxSlots)), s + 1});
    later.clear();
  }
  bool drained() const {
    return in_flight == 0 && !active && staged.empty() && ready_signals.empty() && control_words.empty() && all_acked();
  }
};

}  // namespace nvst
