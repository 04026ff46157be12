// The proxy's sending phases (proxy_state.hpp): the active command cut into
// pieces, each staged and posted as resources allow; host-path signals
// posted once their data completed; atomic requests, and the answers to
// peers' atomics applied here (proxy_atomic.hpp). No CUDA call: on GPU heaps
// producers stage their puts' data themselves (proxy_fifo.hpp, "Staged
// pieces"), and a CUDA call here could wait behind the user's own queue.
#include <algorithm>
#include <cstring>

#include "transport/inbox_bell.hpp"
#include "transport/proxy_state.hpp"

namespace nvst {

using namespace proxy_impl;
using Clock = std::chrono::steady_clock;

// Posts the staged inbox pieces, in order (each is staged complete, so the
// first goes out in the round that staged it).
bool Proxy::State::post_staged() {
  bool any = false;
  while (!staged.empty() && !free_ops.empty()) {
    const Staged& f = staged.front();
    const int k = static_cast<int>(f.seq % kInboxSlots);
    InFlight* op = take(InFlight::kInboxWrite, f.pe);
    op->stage_slot = f.slot;
    op->ring_ticket = f.ring_ticket;
    op->value = f.seq;
    if (!transport->write_with_data(f.pe, stage + static_cast<std::size_t>(f.slot) * kSlotBytes, f.bytes,
                                    fabric::Region::kControl, layout.slot(me, k), inbox::bell_data(me, f.seq), op))
      break;
    commit(op);
    trace.add(ProxyTrace::kPosted, f.pe, f.seq);
    staged.pop_front();
    ++pieces_posted;
    any = true;
  }
  return any;
}

// Stages the next inbox piece to PE `pe` in one of our own slots: `bytes`
// of `src` (host memory: a memcpy) for heap offset `dest`, carrying c's
// signal when `kind` says so (its target applies it after the data). A
// piece of 0 bytes with a signal is a signal on its own; an atomic request
// or answer has no data either (proxy_atomic.hpp). False when no staging
// slot or inbox slot at `pe` is free yet.
bool Proxy::State::stage_piece(int pe, const proxy::Command& c, std::uint64_t dest, const char* src, std::size_t bytes,
                               proxy_atomic::PieceKind kind) {
  if (free_slots.empty() || !slot_free(pe, sent[static_cast<std::size_t>(pe)])) return false;
  const int slot = free_slots.back();
  free_slots.pop_back();
  if (bytes) std::memcpy(stage + static_cast<std::size_t>(slot) * kSlotBytes + kInboxHeader, src, bytes);
  stage_header(slot, pe, c, dest, bytes, kind, 0);
  return true;
}

// Writes the header of the next inbox piece to `pe` in front of the data
// already in staging slot `slot`, queues the piece and posts what can go.
// The caller checked that its inbox slot at `pe` is free.
void Proxy::State::stage_header(int slot, int pe, const proxy::Command& c, std::uint64_t dest, std::size_t bytes,
                                proxy_atomic::PieceKind kind, std::uint64_t ring_ticket) {
  auto& seq = sent[static_cast<std::size_t>(pe)];
  auto* h = reinterpret_cast<InboxHeader*>(stage + static_cast<std::size_t>(slot) * kSlotBytes);
  *h = InboxHeader{};
  h->tag = piece_tag(tag_key, me, seq);
  h->dest = dest;
  h->bytes = bytes;
  h->kind = kind;
  h->sig = c.sig;
  h->sig_value = c.sig_value;
  h->sig_op = c.sig_op;
  h->compare = c.dest;    // kAtomicRequest (the command's dest: proxy_fifo.hpp)
  h->token = c.reserved;  // atomics: set when the proxy took the command (start)
  // Lazy acks (proxy_state.hpp): every kAckEvery-th piece, a request, and
  // a piece that a quiet or fence waits for, begun or queued (a blocking
  // put_signal's signal, sent once its data completed).
  h->ack_now = layout.data || kind == proxy_atomic::kAckRequest || seq % kAckEvery == kAckEvery - 1 || blocked ||
               host_consumer.drain_next() || (dev_consumer && dev_consumer->drain_next());
  if (h->ack_now) marked[static_cast<std::size_t>(pe)] = seq + 1;
  staged.push_back({slot, pe, seq, kInboxHeader + bytes, Clock::now(), ring_ticket});
  trace.add(kind == proxy_atomic::kAckRequest ? ProxyTrace::kRequested : ProxyTrace::kStaged, pe, seq);
  ++seq;
  post_staged();
}

// Host-path signals whose put's data has completed: each an inbox piece of
// its own, applied by the target's proxy.
bool Proxy::State::send_signals() {
  bool any = false;
  while (!ready_signals.empty()) {
    const int g = ready_signals.front();
    const proxy::Command& cmd = groups[static_cast<std::size_t>(g)].cmd;
    if (!stage_piece(static_cast<int>(cmd.pe), cmd, 0, nullptr, 0, proxy_atomic::kDataSignal)) break;
    ready_signals.pop_front();
    free_groups.push_back(g);
    any = true;
  }
  return any;
}

// Old values of peers' atomics applied here (take_landed, finish_landings),
// each an answer piece back to its sender.
bool Proxy::State::send_answers() {
  bool any = false;
  while (!answers.empty()) {
    const Answer a = answers.front();
    proxy::Command reply{};
    reply.sig_value = a.value;
    reply.reserved = a.token;
    if (!stage_piece(a.pe, reply, 0, nullptr, 0, proxy_atomic::kAtomicAnswer)) break;
    answers.pop_front();
    any = true;
  }
  return any;
}

// The active command, piece by piece, as resources allow.
bool Proxy::State::advance_active() {
  if (active && proxy::tag_op(cur.tag) == proxy::Op::kAtomic) return advance_atomic();
  if (active &&
      (proxy::tag_op(cur.tag) == proxy::Op::kPutStaged || proxy::tag_op(cur.tag) == proxy::Op::kPutSignalStaged))
    return advance_staged();
  return layout.data ? advance_inbox() : advance_direct();
}

// A piece its producer staged in a ring slot (the data is there: the
// producer fenced before it published the command, which we read with
// acquire): its header goes in front of it, and it is posted. The slot goes
// back to the ring when the write completed (release_slot).
bool Proxy::State::advance_staged() {
  const proxy::Command& c = cur;
  const int pe = static_cast<int>(c.pe);
  if (!slot_free(pe, sent[static_cast<std::size_t>(pe)])) return false;
  const bool with_signal = proxy::tag_op(c.tag) == proxy::Op::kPutSignalStaged;
  stage_header(ring_slot(cur_from_kernels, c.src), pe, c, c.dest, c.bytes,
               with_signal ? proxy_atomic::kDataSignal : proxy_atomic::kData, c.src);
  cur_since = Clock::now();
  active = false;
  return true;
}

// An atomic: a request piece to its target, whose proxy applies it and
// answers (take_landed); to this PE's own host heap, applied and answered
// here (kernels reach their own GPU heap by load/store, never through here).
bool Proxy::State::advance_atomic() {
  const proxy::Command& c = cur;
  const int pe = static_cast<int>(c.pe);
  if (pe == me) {
    NVST_REQUIRE(!gpu, "proxy: an atomic to this PE's own GPU heap (ticket ", proxy::tag_ticket(c.tag), ")");
    deliver_answer(c.reserved, proxy_atomic::apply_host(heap, c.sig, c.sig_op, c.sig_value, c.dest));
  } else if (!stage_piece(pe, c, 0, nullptr, 0, proxy_atomic::kAtomicRequest)) {
    return false;
  }
  active = false;
  return true;
}

// Inbox path: one piece per inbox slot; the last one carries the signal.
bool Proxy::State::advance_inbox() {
  bool any = false;
  while (active && !free_ops.empty()) {
    const proxy::Command& c = cur;
    const proxy::Op kind = proxy::tag_op(c.tag);
    const std::size_t left = c.bytes - cur_done;
    const bool with_signal = kind == proxy::Op::kPutSignal || kind == proxy::Op::kSignal;
    if (left == 0 && (!with_signal || cur_signal_sent)) {
      active = false;
      break;
    }
    // Data here comes from host memory (a host thread's put; GPU sources are
    // staged by their producers): a memcpy, no CUDA call.
    NVST_REQUIRE(left == 0 || !c.src_on_device, "proxy: a put from GPU memory that its producer did not stage (ticket ",
                 proxy::tag_ticket(c.tag), ")");
    const char* src = reinterpret_cast<const char*>(c.src) + cur_done;
    const std::size_t piece = std::min<std::size_t>({left, kPieceBytes, transport->max_write() - kInboxHeader});
    const bool signal_here = with_signal && piece == left;  // the last piece carries it
    if (!stage_piece(static_cast<int>(c.pe), c, c.dest + cur_done, src, piece,
                     signal_here ? proxy_atomic::kDataSignal : proxy_atomic::kData))
      break;
    cur_since = Clock::now();  // progress: the age check measures time without it
    cur_done += piece;
    if (signal_here) cur_signal_sent = true;
    any = true;
  }
  return any;
}

// Host path: data written straight into the target's heap, signals as inbox
// pieces after it. To this PE itself: applied here, by the thread that also
// applies the peers' signals (take_landed), so one thread writes every
// signal word of this heap.
bool Proxy::State::advance_direct() {
  bool any = false;
  while (active && !free_ops.empty()) {
    const proxy::Command& c = cur;
    const proxy::Op kind = proxy::tag_op(c.tag);
    const int pe = static_cast<int>(c.pe);
    const std::size_t left = c.bytes - cur_done;
    const char* src = reinterpret_cast<const char*>(c.src) + cur_done;
    if (pe == me) {
      if (c.bytes) std::memmove(heap + c.dest, src, c.bytes);
      if (kind != proxy::Op::kPut) apply_host_signal(heap, c.sig, c.sig_op, c.sig_value);
      active = false;
      return true;
    }
    if (kind == proxy::Op::kSignal) {
      if (!stage_piece(pe, c, 0, nullptr, 0, proxy_atomic::kDataSignal)) break;
      active = false;
      return true;
    }
    NVST_REQUIRE(!c.src_on_device, "proxy: a GPU source for a PE with a host heap (ticket ", proxy::tag_ticket(c.tag),
                 ")");
    if (left > 0) {
      // Straight from the caller's buffer where the provider reads any
      // memory (it may be reused only after quiet, NVSHMEM's rule for
      // _nbi puts); else from the registered heap, or through a staging slot.
      const bool direct = transport->any_source() || (src >= heap && src + left <= heap + heap_bytes);
      int slot = -1;
      std::size_t piece = std::min(left, transport->max_write());
      const char* from = src;
      if (!direct) {
        if (free_slots.empty()) break;  // wait for a staging slot to come back
        slot = free_slots.back();
        piece = std::min<std::size_t>({left, kPieceBytes, transport->max_write()});
        char* bounce = stage + static_cast<std::size_t>(slot) * kSlotBytes;
        std::memcpy(bounce, src, piece);
        from = bounce;
      }
      InFlight* op = take(InFlight::kHeapWrite, pe);
      op->stage_slot = slot;
      op->group = cur_group;
      if (!transport->write(pe, from, piece, fabric::Region::kHeap, c.dest + cur_done, op)) break;
      commit(op);
      cur_since = Clock::now();
      if (slot >= 0) free_slots.pop_back();
      if (cur_group >= 0) ++groups[static_cast<std::size_t>(cur_group)].remaining;
      cur_done += piece;
      any = true;
    }
    if (cur_done == c.bytes) {
      active = false;
      if (cur_group >= 0) {
        auto& g = groups[static_cast<std::size_t>(cur_group)];
        g.all_posted = true;
        if (g.remaining == 0) ready_signals.push_back(cur_group);
      }
    }
  }
  return any;
}

}  // namespace nvst
