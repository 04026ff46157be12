// The proxy's receiving phases (proxy_state.hpp): inbox pieces whose
// doorbell rang are applied to this PE's heap in order per sender (host
// heaps by this thread, GPU heaps by the copy agent: copy_agent.hpp), then
// acknowledged to their sender, which frees the inbox slot. An atomic
// request is applied like a signal and its old value queued as an answer
// (send_answers); an answer goes to the reply slot its producer waits on.
#include <atomic>
#include <cstring>

#include "transport/proxy_state.hpp"

namespace nvst {

namespace proxy_impl {
namespace {
template <typename W>
void store_release(char* at, std::uint64_t value) {
  std::atomic_ref<W>(*reinterpret_cast<W*>(at)).store(static_cast<W>(value), std::memory_order_release);
}
}  // namespace

void apply_host_signal(char* heap, std::uint64_t sig, std::uint8_t sig_op, std::uint64_t value) {
  switch (proxy::signal_width(sig_op)) {  // the narrow SETs: p of a small element (proxy_fifo.hpp)
    case 1: return store_release<std::uint8_t>(heap + sig, value);
    case 2: return store_release<std::uint16_t>(heap + sig, value);
    case 4: return store_release<std::uint32_t>(heap + sig, value);
    default: break;
  }
  std::atomic_ref<std::uint64_t> w(*reinterpret_cast<std::uint64_t*>(heap + sig));
  if (sig_op == static_cast<std::uint8_t>(proxy::SignalOp::kAdd))
    w.fetch_add(value, std::memory_order_release);
  else
    w.store(value, std::memory_order_release);
}
}  // namespace proxy_impl

using namespace proxy_impl;
using Clock = std::chrono::steady_clock;

// Whether the copy agent is still landing a piece.
bool Proxy::State::landing_pending(const Applying& a) {
  failed_pe = me;  // an agent that failed lands nothing more (check_ages)
  const bool pending = !agent->finished(a.request);
  failed_pe = -1;
  return pending;
}

// An inbox piece's kind and what it names are sound (a peer's header is
// checked before anything is applied).
bool Proxy::State::piece_kind_valid(const InboxHeader& h) const {
  switch (h.kind) {
    case proxy_atomic::kData: return true;
    case proxy_atomic::kDataSignal:
      return heap_bytes >= proxy::signal_width(h.sig_op) && h.sig <= heap_bytes - proxy::signal_width(h.sig_op);
    case proxy_atomic::kAtomicRequest: return h.bytes == 0 && proxy_atomic::request_valid(h.sig_op, h.sig, heap_bytes);
    case proxy_atomic::kAtomicAnswer:
      return h.bytes == 0 && (!proxy_atomic::token_from_kernels(h.token) || dev_fifo != nullptr);
    case proxy_atomic::kAckRequest: return h.bytes == 0;
    default: return false;
  }
}

// The old value of one of this PE's atomics, into the reply slot its
// producer waits on.
void Proxy::State::deliver_answer(std::uint64_t token, std::uint64_t value) {
  proxy_atomic::deliver(proxy_atomic::token_from_kernels(token) ? dev_fifo : host_fifo,
                        proxy_atomic::token_ticket(token), value);
}

// Takes every piece whose doorbell rang, in order per source.
bool Proxy::State::take_landed() {
  bool any = false;
  for (int src = 0; src < layout.world; ++src) {
    auto& next = recv[static_cast<std::size_t>(src)];
    for (;;) {
      const int k = static_cast<int>(next % kInboxSlots);
      if (landed[static_cast<std::size_t>(src) * kInboxSlots + k] != next + 1 || (gpu && !agent->has_room())) break;
      const auto* h = reinterpret_cast<const InboxHeader*>(control + layout.slot(src, k));
      if (h->tag != piece_tag(tag_key, src, next)) {  // a forged doorbell or header: wait for the real piece
        landed[static_cast<std::size_t>(src) * kInboxSlots + k] = 0;
        drop(detail::concat("a doorbell for piece ", next, " from PE ", src, " whose header does not match"));
        break;
      }
      // The tag matched: the header is a job PE's, so a bad field is a bug.
      NVST_REQUIRE(h->bytes <= (layout.data ? kPieceBytes : 0) && h->dest <= heap_bytes &&
                       h->bytes <= heap_bytes - h->dest && piece_kind_valid(*h),
                   "proxy: inbox piece ", next, " from PE ", src, " is malformed (dest ", h->dest, ", bytes ", h->bytes,
                   ", kind ", static_cast<int>(h->kind), ")");
      const char* data = reinterpret_cast<const char*>(h) + kInboxHeader;
      any = true;
      if (h->kind == proxy_atomic::kAtomicAnswer) deliver_answer(h->token, h->sig_value);
      if (!gpu) {  // host heap: applied now, by this thread (the only writer of inbox data)
        if (h->bytes) std::memcpy(heap + h->dest, data, h->bytes);
        if (h->kind == proxy_atomic::kDataSignal) apply_host_signal(heap, h->sig, h->sig_op, h->sig_value);
        if (h->kind == proxy_atomic::kAtomicRequest)
          answers.push_back(
              {src, h->token, proxy_atomic::apply_host(heap, h->sig, h->sig_op, h->sig_value, h->compare)});
        trace.add(ProxyTrace::kLanded, src, next);
        ack(src, next, h->ack_now != 0);
        ++pieces_taken;
        ++next;
        continue;
      }
      // GPU heap: the agent lands it. Every piece goes through it, those
      // without data too, so that pieces finish, and are acked, in order.
      copy_agent::Request r{};
      r.src = static_cast<std::uint64_t>(data - control);
      r.dest = h->dest;
      r.bytes = h->bytes;
      r.sig = h->sig;
      r.sig_value = h->sig_value;
      r.compare = h->compare;
      r.sig_op = h->sig_op;
      r.kind = h->kind == proxy_atomic::kDataSignal      ? copy_agent::kLandSignal
               : h->kind == proxy_atomic::kAtomicRequest ? copy_agent::kAtomic
                                                         : copy_agent::kLand;
      const std::uint64_t n = agent->post(r);
      applying.push_back({src, n, Clock::now(), h->token, r.kind == copy_agent::kAtomic});
      trace.add(ProxyTrace::kLanding, src, next);
      ++pieces_taken;
      ++next;
    }
  }
  return any;
}

// GPU heaps: landing copies that finished; their pieces are acknowledged.
bool Proxy::State::finish_landings() {
  bool any = false;
  while (!applying.empty()) {
    if (landing_pending(applying.front())) break;
    const Applying& a = applying.front();
    const int src = a.src;
    if (a.atomic) answers.push_back({src, a.token, agent->result(a.request)});  // its old value goes back
    trace.add(ProxyTrace::kLanded, src, applied[static_cast<std::size_t>(src)]);
    applying.pop_front();
    ack(src, applied[static_cast<std::size_t>(src)], true);  // copies finish in order per source
    any = true;
  }
  return any;
}

// The acks queued by ack(), each an 8-byte write into its sender's control
// region. Injected where the provider can (copied at the call, no
// completion): nothing waits for an ack's own delivery, and on a software
// provider a delivery completion costs one more message back per ack.
bool Proxy::State::post_acks() {
  bool any = false;
  const bool inject = transport->inject_limit() >= 8;
  while (!control_words.empty() && (inject || !free_ops.empty())) {
    const ControlWord w = control_words.front();
    if (inject) {
      if (!transport->write_inject(w.pe, &w.value, 8, fabric::Region::kControl, w.offset)) break;
    } else {
      InFlight* op = take(InFlight::kAck, w.pe);
      op->value = w.value;
      if (!transport->write(w.pe, &op->value, 8, fabric::Region::kControl, w.offset, op)) break;
      commit(op);
    }
    control_words.pop_front();
    trace.add(ProxyTrace::kAcked, w.pe, w.value - 1);
    any = true;
  }
  return any;
}

}  // namespace nvst
