// How a host thread waits for another thread or process: spin briefly (the
// answer usually comes within microseconds), then yield, then sleep. Waiters
// that only spin or yield keep a loaded machine's cores from the thread they
// wait for: on CI's two cores, yielding producers made the proxy they waited
// on up to 100x slower. Used by every host-side wait loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>

namespace nvst::detail {

class Backoff {
 public:
  // Call once per unsuccessful check.
  void pause() {
    ++rounds_;
    if (rounds_ > 4096) std::this_thread::sleep_for(std::chrono::microseconds(200));
    else if (rounds_ > 256) std::this_thread::sleep_for(std::chrono::microseconds(20));
    else if (rounds_ > 64) std::this_thread::yield();
  }
  // Whether this round should look at the clock (every round once sleeping).
  bool check_clock() const { return rounds_ > 256 || (rounds_ & 63) == 0; }

 private:
  std::uint64_t rounds_ = 0;
};

}  // namespace nvst::detail
