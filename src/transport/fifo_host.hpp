// Host halves of the command FIFO (layout and protocol:
// include/nvst/proxy_fifo.hpp): a producer for host threads, and the proxy's
// consumer. The device producer is include/nvst/device/proxy.cuh.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "nvst/error.hpp"
#include "nvst/proxy_fifo.hpp"
#include "transport/wakeup.hpp"

namespace nvst::proxy {

inline std::atomic_ref<std::uint64_t> word(std::uint64_t& w) { return std::atomic_ref<std::uint64_t>(w); }

// Producer side for host threads; any number may share one FIFO and tail.
// `bell`: rung after each command (wakes a parked proxy); `progress`: what
// the proxy rings when it moves (this producer's waits block on it);
// `helper`: the proxy's work done on the producer's thread while the proxy
// thread is parked (wakeup.hpp). Without them (tests of the FIFO alone) waits
// look every 200 us.
class HostProducer {
 public:
  HostProducer(FifoShared* fifo, std::uint64_t* tail, double timeout_s, detail::ProxyBell* bell = nullptr,
               detail::Wakeup* progress = nullptr, detail::ProxyHelper* helper = nullptr)
      : fifo_(fifo),
        tail_(tail),
        timeout_s_(timeout_s),
        bell_(bell),
        progress_(progress ? progress : &own_),
        helper_(helper) {}

  // Publishes `c` (its tag is set here) and returns its ticket. `then_wait`:
  // the caller waits for the proxy right after (ProxyHelper::post).
  std::uint64_t push(Command c, Op op, bool then_wait = false) {
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
    slot.reserved = c.reserved;
    word(slot.tag).store(tag, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // published before the look at who works (post)
    if (helper_ != nullptr && helper_->post(then_wait)) return t;
    if (bell_) bell_->ring();
    return t;
  }

  // Waits for the answer of the atomic with this ticket (proxy::AtomicReply)
  // and returns the old value it carries.
  std::uint64_t wait_answer(std::uint64_t ticket) {
    AtomicReply& r = replies(fifo_, fifo_->capacity)[ticket & (fifo_->capacity - 1)];
    std::uint64_t done = 0;
    wait("the answer of a remote atomic",
         [&] { return (done = word(r.done).load(std::memory_order_acquire)) > ticket; });
    NVST_REQUIRE(done == ticket + 1, "the answer of remote atomic ", ticket, " was overwritten by that of ", done - 1,
                 " (this thread was descheduled for a whole lap of the FIFO)");
    return word(r.value).load(std::memory_order_relaxed);
  }

  // Waits until every command up to and including `ticket` has finished.
  void wait_completed(std::uint64_t ticket) {
    wait("the proxy to complete earlier commands (quiet)",
         [&] { return word(fifo_->completed).load(std::memory_order_acquire) > ticket; });
  }

  // Waits until ready() holds, for something the proxy brings about
  // (`what` names it in the errors): fails when the proxy failed, and after
  // NVST_TIMEOUT_S without the proxy moving. The timeout counts time
  // without progress, not time in all: a quiet
  // behind a full FIFO (4096 commands) on a loaded machine may rightly take
  // longer than NVST_TIMEOUT_S, but the proxy takes or completes commands all
  // along. A wedged proxy or dead peer moves neither counter; the proxy's own
  // age check reports an operation that never completes sooner.
  template <typename Pred>
  void wait(const char* what, Pred ready) {
    if (ready()) return;
    const auto limit =
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s_));
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::uint64_t seen = progress();
    detail::wait_with(
        *progress_, ready,
        [&] {
          NVST_REQUIRE(word(fifo_->failed).load(std::memory_order_acquire) == 0,
                       "the proxy thread failed while this thread waited for ", what, " (see its error above)");
          const auto now = std::chrono::steady_clock::now();
          if (const std::uint64_t p = progress(); p != seen) {
            seen = p;
            deadline = now + limit;
          } else if (now > deadline) {
            NVST_FAIL("timed out: ", timeout_s_,
                      " s without the proxy taking or completing a command while waiting for ", what,
                      " (NVST_TIMEOUT_S; a peer may be dead or the proxy stalled)");
          }
        },
        std::chrono::microseconds(200), helper_);
  }

 private:
  // Commands taken plus the quiet point: moves whenever the proxy advances.
  std::uint64_t progress() const {
    return word(fifo_->head).load(std::memory_order_acquire) + word(fifo_->completed).load(std::memory_order_acquire);
  }
  FifoShared* fifo_;
  std::uint64_t* tail_;
  double timeout_s_;
  detail::ProxyBell* bell_;
  detail::Wakeup own_;  // progress_ when none was given: never rung
  detail::Wakeup* progress_;
  detail::ProxyHelper* helper_;
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
  // Whether the next command has been published (poll() would take it).
  bool pending() const { return next_tag() != 0; }
  // Whether the next command has been published and waits for everything
  // before it (a quiet or a fence).
  bool drain_next() const {
    const std::uint64_t tag = next_tag();
    return tag != 0 && (tag_op(tag) == Op::kQuiet || tag_op(tag) == Op::kFence);
  }
  // Publishes the quiet point: every ticket below `ticket_end` has finished.
  void set_completed(std::uint64_t ticket_end) { word(fifo_->completed).store(ticket_end, std::memory_order_release); }
  void set_failed() { word(fifo_->failed).store(1, std::memory_order_release); }

 private:
  std::uint64_t next_tag() const {
    const Command& slot = fifo_->slots[head() & (fifo_->capacity - 1)];
    return word(const_cast<std::uint64_t&>(slot.tag)).load(std::memory_order_acquire);
  }
  FifoShared* fifo_;
};

}  // namespace nvst::proxy
