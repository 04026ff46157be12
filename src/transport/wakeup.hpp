// How the proxy and the host threads around it wake each other instead of
// sleeping. On a machine with fewer cores than busy threads (CI's two cores
// run two PEs, each an application thread and a proxy thread), a waiter that
// spins or yields takes the core the thread it waits for needs, and one that
// sleeps answers a timer instead of the event: both cost up to a scheduler
// slice (about a millisecond) per hop. A waiter that blocks on the event
// itself costs one wake-up (microseconds) and no core meanwhile.
//
//  - Wakeup: an event count on a futex. The proxy rings it after every round
//    that changed something (a signal applied to a host heap, a quiet
//    released, a FIFO slot freed); a host thread waiting for such a change
//    blocks on it between checks.
//  - ProxyBell: an eventfd that host producers ring after publishing a
//    command, but only while the proxy thread is parked on it (one flag read
//    otherwise). The proxy parks on it together with the fabric's wait fd, so
//    a peer's write wakes it too.
#pragma once

#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>

#include "nvst/error.hpp"

namespace nvst::detail {

inline timespec as_timespec(std::chrono::microseconds t) {
  return {static_cast<time_t>(t.count() / 1000000), static_cast<long>(t.count() % 1000000) * 1000};
}

class Wakeup {
 public:
  // How long wait_with() spins before it blocks (set by the proxy: longer
  // where every busy thread has a core of its own).
  std::chrono::microseconds spin() const { return std::chrono::microseconds(spin_us_.load(std::memory_order_relaxed)); }
  void set_spin(std::chrono::microseconds s) { spin_us_.store(s.count(), std::memory_order_relaxed); }
  // Read before checking the condition; pass to wait().
  std::uint32_t epoch() const { return epoch_.load(std::memory_order_seq_cst); }
  // Blocks until ring() is called after `seen` was read (returns at once if
  // it already was) or `timeout` passes. Invariant (ring / wait): a ring
  // either sees this waiter counted and wakes it, or its epoch change was
  // seen here before blocking: no wake-up is lost.
  void wait(std::uint32_t seen, std::chrono::microseconds timeout) {
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    if (epoch_.load(std::memory_order_seq_cst) == seen) {
      const timespec ts = as_timespec(timeout);
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&epoch_), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
    }
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
  }
  // Wakes every waiter; a system call only when there is one.
  void ring() {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) != 0)
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&epoch_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }

 private:
  static_assert(sizeof(std::atomic<std::uint32_t>) == 4, "a futex is one 32-bit word");
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<std::uint32_t> waiters_{0};
  std::atomic<std::int64_t> spin_us_{5};
};

// Waits until ready() holds: a spin of bell.spin() (the answer often comes
// within microseconds), then blocks on `bell` between checks. `check()` runs about
// every `every` of blocking (a timeout, a failed proxy) and may throw.
// Blocking rounds are bounded, so a change nobody rings for (a store by a
// thread other than the proxy) is still seen within `every`.
template <typename Ready, typename Check>
void wait_with(Wakeup& bell, Ready ready, Check check,
               std::chrono::microseconds every = std::chrono::microseconds(200)) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + bell.spin();
  while (Clock::now() < spin_until)
    if (ready()) return;
  for (;;) {
    const std::uint32_t seen = bell.epoch();
    if (ready()) return;
    check();
    bell.wait(seen, every);
  }
}

// The proxy thread's parking place (see the top of this file).
class ProxyBell {
 public:
  ProxyBell() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    NVST_REQUIRE(fd_ >= 0, "proxy: eventfd failed (errno ", errno, ")");
  }
  ~ProxyBell() { close(fd_); }
  ProxyBell(const ProxyBell&) = delete;
  ProxyBell& operator=(const ProxyBell&) = delete;

  // Producers, after publishing: the fence orders the publication before the
  // flag's read, the proxy's park() orders the flag's write before its last
  // look at the FIFO, so either the proxy sees the command or this rings.
  void ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (parked_.load(std::memory_order_relaxed)) {
      const std::uint64_t one = 1;
      [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
    }
  }
  // The proxy: blocks until ring(), `other_fd` is readable (-1: none) or
  // `timeout` passes, unless `idle()` (checked after the flag is set) says
  // there is work already.
  template <typename Idle>
  void park(int other_fd, std::chrono::microseconds timeout, Idle idle) {
    parked_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (idle()) {
      pollfd fds[2] = {{fd_, POLLIN, 0}, {other_fd, POLLIN, 0}};
      const timespec ts = as_timespec(timeout);
      ppoll(fds, other_fd >= 0 ? 2 : 1, &ts, nullptr);
    }
    parked_.store(false, std::memory_order_relaxed);
    std::uint64_t drained;
    [[maybe_unused]] ssize_t n = read(fd_, &drained, sizeof(drained));
  }
  // Wakes the proxy whether or not it is parked (stop()).
  void wake() {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
  }

 private:
  int fd_;
  std::atomic<bool> parked_{false};
};

}  // namespace nvst::detail
