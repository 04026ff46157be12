// How the proxy and the host threads around it wake each other instead of
// sleeping. On a machine with fewer cores than busy threads (CI's two cores
// run two PEs, each an application thread and a proxy thread), a waiter that
// spins (or yields for long) takes the core the thread it waits for needs,
// and one that sleeps answers a timer instead of the event: both cost up to
// a scheduler slice (about a millisecond) per hop. A waiter that blocks on
// the event itself costs one wake-up (microseconds) and no core meanwhile;
// one that yields its core at each look for a short while first costs
// neither when the answer is near.
//
//  - Wakeup: an event count on a futex. The proxy rings it after every round
//    that changed something (a signal applied to a host heap, a quiet
//    released, a FIFO slot freed); a host thread waiting for such a change
//    blocks on it between checks.
//  - ProxyBell: an eventfd that host producers ring after publishing a
//    command, but only while the proxy thread is parked on it (one flag read
//    otherwise). The proxy parks on it together with the fabric's wait fd, so
//    a peer's write wakes it too.
//  - ProxyHelper: while the proxy thread is parked, a host thread that
//    publishes a command or waits for the proxy does the proxy's work itself
//    (transport/proxy_help.cpp): no wake-up on either side, and on a machine
//    of few cores one busy thread per PE instead of two.
#pragma once

#include <sys/epoll.h>

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
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
#include <functional>

#include "nvst/error.hpp"

namespace nvst::detail {

inline timespec as_timespec(std::chrono::microseconds t) {
  return {static_cast<time_t>(t.count() / 1000000), static_cast<long>(t.count() % 1000000) * 1000};
}

class Wakeup {
 public:
  // How long wait_with() spins before it blocks (set by the proxy: longer
  // where every busy thread has a core of its own), and whether it gives
  // its core away at each look (sched_yield) while it spins: where busy
  // threads outnumber the cores, the thread it waits for (its PE's proxy)
  // often runs on the same core, woken there by it (see the proxy's
  // constructor).
  std::chrono::microseconds spin() const { return std::chrono::microseconds(spin_us_.load(std::memory_order_relaxed)); }
  void set_spin(std::chrono::microseconds s, bool yielding = false) {
    spin_us_.store(s.count(), std::memory_order_relaxed);
    yielding_.store(yielding, std::memory_order_relaxed);
  }
  bool yielding() const { return yielding_.load(std::memory_order_relaxed); }
  // Host threads in wait_with()'s spin now: the proxy gives its core away
  // between idle rounds while there are some (proxy.cpp, run()).
  bool spinners() const { return spinners_.load(std::memory_order_relaxed) != 0; }
  struct Spinning {
    explicit Spinning(Wakeup& w) : w_(w) { w_.spinners_.fetch_add(1, std::memory_order_relaxed); }
    ~Spinning() { w_.spinners_.fetch_sub(1, std::memory_order_relaxed); }
    Spinning(const Spinning&) = delete;
    Spinning& operator=(const Spinning&) = delete;
    Wakeup& w_;
  };
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
  std::atomic<bool> yielding_{false};
  std::atomic<std::uint32_t> spinners_{0};
};

// The proxy's work done by a host thread (Proxy implements it). Only one
// thread at a time does it: the proxy thread, or one host thread while the
// proxy thread is parked.
class ProxyHelper {
 public:
  enum class Drove {
    kReady,   // ready() held
    kBusy,    // another thread does the work now (the proxy thread, awake)
    kSpent,   // stopped driving without ready() (the proxy failed): check() says why
    kCannot,  // never here (GPU heaps, a provider without a wait fd, a failed proxy)
  };
  // After a host thread published a command: does the work it needs now if
  // the proxy thread is parked. With `then_wait` (the caller waits for the
  // proxy next, and drive()s then) it only sees that someone will take the
  // command. False: the caller rings the proxy's bell.
  virtual bool post(bool then_wait) = 0;
  // If the proxy thread is parked: does the proxy's work on this thread
  // until ready() holds, parking as the proxy thread would between rounds;
  // check() runs at least every 200 us and may throw (the caller's timeout).
  virtual Drove drive(const std::function<bool()>& ready, const std::function<void()>& check) = 0;
  // A host thread blocked waiting for the proxy (want(+1), then want(-1)):
  // the proxy thread parks as soon as it is idle and rings its changes, so
  // that the waiter drives instead of being woken for every step.
  virtual void want(int delta) = 0;

 protected:
  ~ProxyHelper() = default;
};

// Waits until ready() holds: with a helper, first does the proxy's work
// itself if the proxy thread is parked; else a spin of bell.spin() (the
// answer often comes within microseconds; yielding the core at each look
// where bell.yielding()), then blocks on `bell` between
// checks. `check()` runs about every `every` of blocking (a timeout, a
// failed proxy) and may throw. Blocking rounds are bounded, so a change
// nobody rings for (a store by a thread other than the proxy) is still seen
// within `every`.
template <typename Ready, typename Check>
void wait_with(Wakeup& bell, Ready ready, Check check, std::chrono::microseconds every = std::chrono::microseconds(200),
               ProxyHelper* helper = nullptr) {
  using Clock = std::chrono::steady_clock;
  using Drove = ProxyHelper::Drove;
  Drove drove = Drove::kCannot;
  std::uint32_t tried_at = bell.epoch();
  if (helper != nullptr) {
    if (ready()) return;
    drove = helper->drive(ready, check);
    if (drove == Drove::kReady) return;
    if (drove == Drove::kBusy) {
      // The proxy thread (or another host thread) is awake: ask for the
      // engine and look for it a little while. The proxy thread hands it
      // over at its next idle round, within microseconds; blocking would
      // add a wake-up.
      helper->want(1);
      const auto until = Clock::now() + std::chrono::microseconds(100);
      while (drove == Drove::kBusy && !ready() && Clock::now() < until) drove = helper->drive(ready, check);
      helper->want(-1);
      if (drove == Drove::kReady || ready()) return;
    }
  }
  if (drove != Drove::kSpent) {
    const auto spin_until = Clock::now() + bell.spin();
    const bool yielding = bell.yielding();
    Wakeup::Spinning counted(bell);
    while (Clock::now() < spin_until) {
      if (ready()) return;
      if (yielding) sched_yield();
    }
  }
  for (;;) {
    const std::uint32_t seen = bell.epoch();
    if (ready()) return;
    check();
    // Drive again once something happened (the proxy rang): not after a
    // timeout alone, so a long wait that drove for its budget then sleeps.
    if (drove != Drove::kCannot && seen != tried_at) {
      tried_at = seen;
      drove = helper->drive(ready, check);
      if (drove == Drove::kReady) return;
      continue;
    }
    const bool wants = drove == Drove::kBusy;
    if (wants) helper->want(1);
    bell.wait(seen, every);
    if (wants) helper->want(-1);
  }
}

// The proxy thread's parking place (see the top of this file).
class ProxyBell {
 public:
  ProxyBell() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), set_(epoll_create1(EPOLL_CLOEXEC)) {
    NVST_REQUIRE(fd_ >= 0 && set_ >= 0, "proxy: eventfd or epoll_create1 failed (errno ", errno, ")");
  }
  ~ProxyBell() {
    close(fd_);
    close(set_);
  }
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
  // The provider's wait fd, which wakes the parked proxy too while it is
  // watched. A host thread that does the proxy's work for a while stops
  // watching it (unwatch) and watches it again when it ends (watch): the
  // proxy thread then sleeps through the events that thread handles, and
  // neither call wakes it (an fd that is readable when watched again does).
  // Only the thread doing the proxy's work calls these; false when
  // epoll_ctl failed (nothing changed). The fd stays in the set and is
  // switched on and off (EPOLL_CTL_MOD, events 0 when off): a provider's
  // wait fd is itself an epoll set, and adding one to a set runs the
  // kernel's loop checks, which cost about 1 us per hand-over on our VMs
  // (a MOD 0.3-0.5 us), twice per host call that does the proxy's work.
  void set_fabric_fd(int fd) {
    NVST_REQUIRE(fabric_fd_ < 0 && fd >= 0, "proxy: the provider's wait fd is set once");
    epoll_event e{};
    e.events = EPOLLIN;
    NVST_REQUIRE(epoll_ctl(set_, EPOLL_CTL_ADD, fd, &e) == 0,
                 "proxy: epoll_ctl(ADD) of the provider's wait fd failed (errno ", errno, ")");
    fabric_fd_ = fd;
    watched_.store(true, std::memory_order_release);
  }
  bool watch() { return switch_fd(true); }
  bool unwatch() { return switch_fd(false); }
  bool watched() const { return watched_.load(std::memory_order_acquire); }
  // The proxy: blocks until ring(), the watched fd is readable or `timeout`
  // passes, unless `idle()` (checked after the flag is set) says there is
  // work already.
  template <typename Idle>
  void park(std::chrono::microseconds timeout, Idle idle) {
    parked_.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (idle()) {
      pollfd fds[2] = {{fd_, POLLIN, 0}, {set_, POLLIN, 0}};
      const timespec ts = as_timespec(timeout);
      ppoll(fds, fabric_fd_ >= 0 ? 2 : 1, &ts, nullptr);
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
  // Switched on while readable, the fd wakes a parked proxy at once (the
  // kernel checks it on every MOD).
  bool switch_fd(bool on) {
    if (fabric_fd_ < 0 || watched_.load(std::memory_order_relaxed) == on) return true;
    epoll_event e{};
    e.events = on ? static_cast<std::uint32_t>(EPOLLIN) : 0u;
    if (epoll_ctl(set_, EPOLL_CTL_MOD, fabric_fd_, &e) != 0) return false;
    watched_.store(on, std::memory_order_release);
    return true;
  }

  int fd_;
  int set_;             // epoll set holding the provider's wait fd (switched off while unwatched)
  int fabric_fd_ = -1;  // -1: none (the proxy parks on the bell alone)
  std::atomic<bool> watched_{false};
  std::atomic<bool> parked_{false};
};

}  // namespace nvst::detail
