// Which blocking call a thread is inside, and since when: the thread marks
// the call (CallWatch::Mark, for the call's duration), a watchdog thread
// reads it (snapshot()). The proxy watches two kinds this way: its CUDA
// calls, which can wait for good behind a kernel that waits on the proxy
// (docs/09), and the transport's provider calls, which can spin for good on
// a dead peer's lock (libfabric 1.17's shm; docs/06). With accounting on
// (set_accounting) it also sums the time spent inside marked calls
// (total_s()), so NVST_PROXY_DEBUG can say where the proxy thread's time
// went: the provider's calls, its CUDA calls, or neither (its own
// bookkeeping, memcpy and idle rounds). Off, a call reads the clock once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace nvst {

class CallWatch {
 public:
  using Clock = std::chrono::steady_clock;

  struct Snapshot {
    const char* what = nullptr;
    int pe = -1;                // the peer it concerns, -1: none in particular
    std::int64_t since_ns = 0;  // Clock's time_since_epoch; 0: in no call
    bool inside() const { return since_ns != 0; }
    double age_s() const {
      return std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(since_ns)).count();
    }
  };

  class Mark {
   public:
    Mark(CallWatch& w, const char* what, int pe = -1) : w_(w), start_(Clock::now().time_since_epoch().count()) {
      w_.what_.store(what, std::memory_order_relaxed);
      w_.pe_.store(pe, std::memory_order_relaxed);
      w_.since_ns_.store(start_, std::memory_order_release);
    }
    ~Mark() {
      w_.since_ns_.store(0, std::memory_order_release);
      if (!w_.accounting_.load(std::memory_order_relaxed)) return;
      // One thread marks a given CallWatch: a plain read-add-store is enough.
      const std::int64_t took = Clock::now().time_since_epoch().count() - start_;
      w_.total_ns_.store(w_.total_ns_.load(std::memory_order_relaxed) + took, std::memory_order_relaxed);
      w_.calls_.store(w_.calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    Mark(const Mark&) = delete;
    Mark& operator=(const Mark&) = delete;

   private:
    CallWatch& w_;
    std::int64_t start_;
  };

  Snapshot snapshot() const {
    const std::int64_t since = since_ns_.load(std::memory_order_acquire);
    return {what_.load(std::memory_order_relaxed), pe_.load(std::memory_order_relaxed), since};
  }
  // Whether marks sum their time (off by default: the proxy polls its
  // provider about a million times a second).
  void set_accounting(bool on) { accounting_.store(on, std::memory_order_relaxed); }
  // Seconds spent inside marked calls so far, and how many there were.
  double total_s() const { return 1e-9 * static_cast<double>(total_ns_.load(std::memory_order_relaxed)); }
  std::uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  std::atomic<const char*> what_{nullptr};
  std::atomic<int> pe_{-1};
  std::atomic<std::int64_t> since_ns_{0};
  std::atomic<bool> accounting_{false};
  std::atomic<std::int64_t> total_ns_{0};
  std::atomic<std::uint64_t> calls_{0};
};

}  // namespace nvst
