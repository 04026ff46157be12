// Host halves of the command FIFO (layout and protocol:
// include/nvst/proxy_fifo.hpp): a producer for host threads, and the proxy's
// consumer. The device producer is include/nvst/device/proxy.cuh.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "nvst/error.hpp"
#include "nvst/proxy_fifo.hpp"
#include "base/backoff.hpp"

namespace nvst::proxy {

inline std::atomic_ref<std::uint64_t> word(std::uint64_t& w) { return std::atomic_ref<std::uint64_t>(w); }

// Producer side for host threads; any number may share one FIFO and tail.
class HostProducer {
 public:
  HostProducer(FifoShared* fifo, std::uint64_t* tail, double timeout_s)
      : fifo_(fifo), tail_(tail), timeout_s_(timeout_s) {}

  // Publishes `c` (its tag is set here) and returns its ticket.
  std::uint64_t push(Command c, Op op) {
    const std::uint64_t t = word(*tail_).fetch_add(1, std::memory_order_relaxed);
    wait("a free FIFO slot", [&] { return t - word(fifo_->head).load(std::memory_order_acquire) < fifo_->capacity; });
    Command& slot = fifo_->slots[t & (fifo_->capacity - 1)];
    // Body first (plain stores), then the tag with release.
    std::uint64_t tag = command_tag(t, op);
    slot.dest = c.dest;
    slot.src = c.src;
    slot.bytes = c.bytes;
    slot.sig = c.sig;
    slot.sig_value = c.sig_value;
    slot.pe = c.pe;
    slot.sig_op = c.sig_op;
    slot.src_on_device = c.src_on_device;
    word(slot.tag).store(tag, std::memory_order_release);
    return t;
  }

  // Waits until every command up to and including `ticket` has finished.
  void wait_completed(std::uint64_t ticket) {
    wait("the proxy to complete earlier commands (quiet)",
         [&] { return word(fifo_->completed).load(std::memory_order_acquire) > ticket; });
  }

 private:
  // The timeout counts time without progress, not time in all: a quiet
  // behind a full FIFO (4096 commands) on a loaded machine may rightly take
  // longer than NVST_TIMEOUT_S, but the proxy takes or completes commands all
  // along. A wedged proxy or dead peer moves neither counter; the proxy's own
  // age check reports an operation that never completes sooner.
  template <typename Pred>
  void wait(const char* what, Pred ready) {
    if (ready()) return;
    const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(timeout_s_));
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::uint64_t seen = progress();
    for (detail::Backoff backoff;; backoff.pause()) {
      if (ready()) return;
      NVST_REQUIRE(word(fifo_->failed).load(std::memory_order_acquire) == 0,
                   "the proxy thread failed while this thread waited for ", what, " (see its error above)");
      if (!backoff.check_clock()) continue;
      const auto now = std::chrono::steady_clock::now();
      if (const std::uint64_t p = progress(); p != seen) {
        seen = p;
        deadline = now + limit;
      } else if (now > deadline) {
        NVST_FAIL("timed out: ", timeout_s_, " s without the proxy taking or completing a command while waiting for ",
                  what, " (NVST_TIMEOUT_S; a peer may be dead or the proxy stalled)");
      }
    }
  }
  // Commands taken plus the quiet point: moves whenever the proxy advances.
  std::uint64_t progress() const {
    return word(fifo_->head).load(std::memory_order_acquire) + word(fifo_->completed).load(std::memory_order_acquire);
  }
  FifoShared* fifo_;
  std::uint64_t* tail_;
  double timeout_s_;
};

// The one consumer (the proxy thread).
class Consumer {
 public:
  explicit Consumer(FifoShared* fifo) : fifo_(fifo) {}
  // Takes the next command if it has been published.
  bool poll(Command& out) {
    const std::uint64_t h = word(fifo_->head).load(std::memory_order_relaxed);
    Command& slot = fifo_->slots[h & (fifo_->capacity - 1)];
    const std::uint64_t tag = word(slot.tag).load(std::memory_order_acquire);
    if (tag == 0) return false;
    out = slot;
    out.tag = tag;
    word(slot.tag).store(0, std::memory_order_relaxed);
    word(fifo_->head).store(h + 1, std::memory_order_release);
    return true;
  }
  std::uint64_t head() const { return word(fifo_->head).load(std::memory_order_relaxed); }
  // Publishes the quiet point: every ticket below `ticket_end` has finished.
  void set_completed(std::uint64_t ticket_end) {
    word(fifo_->completed).store(ticket_end, std::memory_order_release);
  }
  void set_failed() { word(fifo_->failed).store(1, std::memory_order_release); }

 private:
  FifoShared* fifo_;
};

}  // namespace nvst::proxy
