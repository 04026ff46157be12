// How a host thread waits for another thread or process: spin briefly (the
// answer usually comes within microseconds), then yield, then sleep. Waiters
// that only spin or yield keep a loaded machine's cores from the thread they
// wait for: on CI's two cores, yielding producers made the proxy they waited
// on up to 100x slower. Used by every host-side wait loop.
//
// Linux stretches a thread's sleeps by its timer slack, 50 us by default,
// so "sleep 20 us" lasted about 70: a host quiet that outlived the spin and
// yield rounds was seen up to 50 us late (in one proxy trace the proxy released
// a 1 MiB put's quiet at 360 us, the host thread saw it at 400). While a
// waiter sleeps its slack is 1 us (PreciseSleep); it gets its own back when
// the wait ends.
#pragma once

#include <sys/prctl.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

namespace nvst::detail {

// Sets the calling thread's timer slack to 1 us for its lifetime.
class PreciseSleep {
 public:
  PreciseSleep() : saved_(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)) {
    if (saved_ > 0) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  }
  ~PreciseSleep() {
    if (saved_ > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(saved_), 0, 0, 0);
  }
  PreciseSleep(const PreciseSleep&) = delete;
  PreciseSleep& operator=(const PreciseSleep&) = delete;

 private:
  long saved_;  // the thread's slack in ns; <= 0: unknown (left alone)
};

class Backoff {
 public:
  // Call once per unsuccessful check.
  void pause() {
    ++rounds_;
    if (rounds_ == 257) precise_.emplace();  // from the first sleep on
    if (rounds_ > 4096)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else if (rounds_ > 256)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    else if (rounds_ > 64)
      std::this_thread::yield();
  }
  // Whether this round should look at the clock (every round once sleeping).
  bool check_clock() const { return rounds_ > 256 || (rounds_ & 63) == 0; }

 private:
  std::uint64_t rounds_ = 0;
  std::optional<PreciseSleep> precise_;
};

}  // namespace nvst::detail
