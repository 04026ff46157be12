// The proxy's receiving phases (proxy_state.hpp): inbox pieces whose
// doorbell rang are applied to this PE's heap in order per sender (host
// heaps by this thread, GPU heaps by copies on the proxy's stream), then
// acknowledged to their sender, which frees the inbox slot. An atomic
// request is applied like a signal and its old value queued as an answer
// (send_answers); an answer goes to the reply slot its producer waits on.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>

#include "device/device_runtime.hpp"
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

// Whether a landed piece's copy into the GPU heap is still running.
bool Proxy::State::landing_pending(const Applying& a) {
  CallWatch::Mark mark(*cuda_call, "cudaEventQuery on a landed put");
  const cudaError_t q = cudaEventQuery(a.done);
  if (q == cudaErrorNotReady) return true;
  NVST_CHECK_CUDA(q);
  return false;
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
      if (landed[static_cast<std::size_t>(src) * kInboxSlots + k] != next + 1 || (gpu && free_events.empty())) break;
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
      CallWatch::Mark mark(*cuda_call, "landing a peer's put in the GPU heap");
      if (h->bytes) NVST_CHECK_CUDA(cudaMemcpyAsync(heap + h->dest, data, h->bytes, cudaMemcpyHostToDevice, stream));
      const std::uint64_t* result = nullptr;
      if (h->kind == proxy_atomic::kAtomicRequest) {  // applied by a kernel, answered once it is done
        std::uint64_t* out = &atomic_results[static_cast<std::size_t>(src) * kInboxSlots + k];
        detail::launch_remote_atomic(heap + h->sig, h->sig_op, h->sig_value, h->compare, out, stream);
        result = out;
      }
      if (h->kind == proxy_atomic::kDataSignal) {
        auto* word = reinterpret_cast<std::uint64_t*>(heap + h->sig);
        if (h->sig_op == static_cast<std::uint8_t>(proxy::SignalOp::kAdd))
          detail::launch_signal_add(word, h->sig_value, stream);
        else  // a copy-engine write of the SET's width (little-endian: the low bytes); no SM needed
          NVST_CHECK_CUDA(
              cudaMemcpyAsync(word, &h->sig_value, proxy::signal_width(h->sig_op), cudaMemcpyHostToDevice, stream));
      }
      cudaEvent_t e = free_events.back();
      free_events.pop_back();
      NVST_CHECK_CUDA(cudaEventRecord(e, stream));
      applying.push_back({src, e, Clock::now(), h->token, result});
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
    if (a.result) answers.push_back({src, a.token, *a.result});  // an atomic request: its old value goes back
    trace.add(ProxyTrace::kLanded, src, applied[static_cast<std::size_t>(src)]);
    free_events.push_back(a.done);
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
