// The command FIFO with host-thread producers and one consumer: every
// command arrives exactly once, each producer's in its order, through a
// small ring (back-pressure), and waits end with a message, not a hang.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "pe_harness.hpp"
#include "base/backoff.hpp"
#include "transport/fifo_host.hpp"
#include "transport/inbox_bell.hpp"
#include "transport/wakeup.hpp"

using namespace nvst;
using namespace nvst::proxy;

namespace {
struct Ring {
  std::vector<std::byte> mem;
  FifoShared* fifo;
  std::uint64_t tail = 0;
  explicit Ring(std::uint32_t capacity) : mem(fifo_bytes(capacity) + 64) {
    void* p = mem.data();
    std::size_t space = mem.size();
    fifo = static_cast<FifoShared*>(std::align(64, fifo_bytes(capacity), p, space));
    std::memset(static_cast<void*>(fifo), 0, fifo_bytes(capacity));
    fifo->capacity = capacity;
  }
};
}  // namespace

TEST(ProxyFifo, ManyProducersNothingLostOrDuplicated) {
  for (std::uint32_t capacity : {16u, 1024u}) {
    Ring ring(capacity);
    constexpr int kProducers = 4;
    constexpr std::uint64_t kEach = 25000;  // 10^5 commands per capacity
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
      producers.emplace_back([&, p] {
        HostProducer prod(ring.fifo, &ring.tail, 30.0);
        for (std::uint64_t i = 0; i < kEach; ++i) {
          Command c{};
          c.pe = static_cast<std::uint32_t>(p);
          c.dest = i;
          c.src = i * 7919 + static_cast<std::uint64_t>(p);  // a checksum of the body
          c.bytes = i ^ 0x5555;
          prod.push(c, i % 3 == 0 ? Op::kPutSignal : Op::kPut);
        }
      });
    Consumer cons(ring.fifo);
    std::vector<std::uint64_t> next(kProducers, 0);
    std::vector<bool> ticket_seen(kProducers * kEach, false);
    std::uint64_t got = 0, bad = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got < kProducers * kEach && std::chrono::steady_clock::now() < deadline) {
      Command c;
      if (!cons.poll(c)) continue;
      const int p = static_cast<int>(c.pe);
      const std::uint64_t t = tag_ticket(c.tag);
      bad += p < 0 || p >= kProducers;
      if (p < 0 || p >= kProducers) continue;
      bad += c.dest != next[p];                                       // in order, none skipped
      bad += c.src != c.dest * 7919 + static_cast<std::uint64_t>(p);  // body complete
      bad += c.bytes != (c.dest ^ 0x5555);
      bad += tag_op(c.tag) != (c.dest % 3 == 0 ? Op::kPutSignal : Op::kPut);
      bad += t >= ticket_seen.size() || ticket_seen[t];  // unique tickets
      if (t < ticket_seen.size()) ticket_seen[t] = true;
      next[p] = c.dest + 1;
      ++got;
    }
    for (auto& t : producers) t.join();
    EXPECT_EQ(got, kProducers * kEach) << "capacity " << capacity;
    EXPECT_EQ(bad, 0u) << "capacity " << capacity;
    Command extra;
    EXPECT_FALSE(cons.poll(extra)) << "a command appeared twice";
    EXPECT_EQ(cons.head(), kProducers * kEach);
  }
}

TEST(ProxyFifo, FullRingWithoutConsumerTimesOutWithMessage) {
  Ring ring(4);
  HostProducer prod(ring.fifo, &ring.tail, 0.5);
  for (int i = 0; i < 4; ++i) prod.push(Command{}, Op::kPut);
  std::string msg = nvst::test::error_of([&] { prod.push(Command{}, Op::kPut); });
  EXPECT_TRUE(nvst::test::contains(msg, "timed out") && nvst::test::contains(msg, "free FIFO slot")) << msg;
}

TEST(ProxyFifo, FailedProxyReleasesWaiters) {
  Ring ring(4);
  HostProducer prod(ring.fifo, &ring.tail, 30.0);
  std::uint64_t t = prod.push(Command{}, Op::kQuiet);
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Consumer(ring.fifo).set_failed();
  });
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = nvst::test::error_of([&] { prod.wait_completed(t); });
  failer.join();
  EXPECT_TRUE(nvst::test::contains(msg, "proxy thread failed")) << msg;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

// The producer's timeout is time without progress: a quiet behind a backlog
// that a slow proxy works through (here 1.5 s of it, with a 0.4 s timeout)
// waits it out, as a loaded CI machine's proxy needs; when the proxy then
// stops, the next quiet times out within about the timeout.
TEST(ProxyFifo, QuietWaitsOutASlowProxyButNotAStalledOne) {
  Ring ring(64);
  HostProducer prod(ring.fifo, &ring.tail, 0.4);
  for (int i = 0; i < 30; ++i) prod.push(Command{}, Op::kPut);
  const std::uint64_t quiet = prod.push(Command{}, Op::kQuiet);
  std::atomic<bool> stop{false};
  std::thread proxy([&] {  // one command per 50 ms, then the quiet point moves
    Consumer cons(ring.fifo);
    Command c;
    for (std::uint64_t taken = 0; taken <= quiet && !stop;) {
      if (!cons.poll(c)) continue;
      ++taken;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    cons.set_completed(quiet + 1);
  });
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = nvst::test::error_of([&] { prod.wait_completed(quiet); });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  proxy.join();
  EXPECT_EQ(msg, "") << "after " << waited << " s";
  EXPECT_GT(waited, 1.0);  // it did outlast the timeout

  const std::uint64_t stalled = prod.push(Command{}, Op::kQuiet);  // nobody takes it
  t0 = std::chrono::steady_clock::now();
  msg = nvst::test::error_of([&] { prod.wait_completed(stalled); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(nvst::test::contains(msg, "timed out") && nvst::test::contains(msg, "quiet")) << msg;
  EXPECT_LT(took, 3.0);
}

// A waiter that has begun to sleep does so with 1 us of timer slack, so
// its 20 us sleeps are not stretched to 70 (backoff.hpp), and the thread
// gets its own slack back when the wait ends.
TEST(Backoff, SleepsPreciselyThenGivesTheSlackBack) {
  const long mine = 123000;  // ns: not the default, so a reset to it would show
  ASSERT_EQ(prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(mine), 0, 0, 0), 0);
  {
    nvst::detail::Backoff backoff;
    for (int i = 0; i < 256; ++i) backoff.pause();  // spinning and yielding
    EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), mine);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) backoff.pause();  // 50 sleeps of 20 us
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 1000);
    EXPECT_GE(us, 50 * 20.0);
    std::printf("50 sleeps of 20 us took %.0f us\n", us);
  }
  EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), mine);
  prctl(PR_SET_TIMERSLACK, 0UL, 0, 0, 0);  // back to the default
}

// An inbox piece's doorbell carries its sender and the low 16 bits of its
// seq; the target restores the seq from the next one it expects, for every
// piece of the window in flight, across the 16-bit wrap and far beyond it.
TEST(InboxBell, SenderAndSeqSurviveTheWrap) {
  for (int src : {0, 1, 7, nvst::inbox::kMaxPes - 1})
    for (std::uint64_t next : {std::uint64_t{0}, std::uint64_t{65530}, std::uint64_t{65536},
                               std::uint64_t{3} * 65536 + 65533, (std::uint64_t{1} << 40) - 3})
      for (std::uint64_t ahead = 0; ahead < 16; ++ahead) {
        const std::uint32_t data = nvst::inbox::bell_data(src, next + ahead);
        EXPECT_EQ(nvst::inbox::bell_sender(data), src);
        EXPECT_EQ(nvst::inbox::bell_seq(data, next), next + ahead) << "src " << src << " next " << next;
      }
}

// Two threads pass a token back and forth 20000 times, each blocking on its
// Wakeup between looks with a 5 s limit: a lost wake-up would cost 5 s, so
// the whole exchange finishing in seconds shows every ring reached its
// waiter (wakeup.hpp's invariant), also when the ring races the wait.
TEST(Wakeup, PingPongLosesNoWakeUp) {
  nvst::detail::Wakeup to_a, to_b;
  std::atomic<std::uint64_t> token{0};
  constexpr std::uint64_t kRounds = 20000;
  const auto every = std::chrono::microseconds(5000000);
  auto player = [&](nvst::detail::Wakeup& mine, nvst::detail::Wakeup& theirs, std::uint64_t parity) {
    for (std::uint64_t r = parity; r < kRounds; r += 2) {
      nvst::detail::wait_with(mine, [&] { return token.load() == r; }, [] {}, every);
      token.store(r + 1);
      theirs.ring();
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread b([&] { player(to_b, to_a, 1); });
  player(to_a, to_b, 0);
  b.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(token.load(), kRounds);
  EXPECT_LT(s, 4.5) << "a wake-up was lost (each costs 5 s)";
  std::printf("%llu hand-overs took %.3f s\n", static_cast<unsigned long long>(kRounds), s);
}

// A waiter in its yielding spin is counted (the proxy gives its core away
// between idle rounds while one is: it may share that core) and uncounted
// once its wait ends; one that does not yield is counted too.
TEST(Wakeup, SpinningWaiterIsSeenWhileItSpins) {
  for (const bool yielding : {true, false}) {
    nvst::detail::Wakeup w;
    w.set_spin(std::chrono::microseconds(10000000), yielding);  // never blocks within the test
    EXPECT_EQ(w.yielding(), yielding);
    std::atomic<bool> go{false};
    std::thread waiter([&] { nvst::detail::wait_with(w, [&] { return go.load(); }, [] {}); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!w.spinners() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    EXPECT_TRUE(w.spinners()) << "the waiter never showed up as spinning (yielding " << yielding << ")";
    go.store(true);
    waiter.join();
    EXPECT_FALSE(w.spinners()) << "the waiter is still counted after its wait ended";
  }
}

// A parked proxy wakes when a producer rings (and only waits out its limit
// when nobody does); a ring while it is not parked costs no wake-up later.
TEST(ProxyBell, RingWakesTheParkedProxyAtOnce) {
  nvst::detail::ProxyBell bell;
  using Clock = std::chrono::steady_clock;
  bell.ring();  // not parked: nothing written, so the next park waits its limit
  auto t0 = Clock::now();
  bell.park(std::chrono::microseconds(20000), [] { return true; });
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(19));
  for (int i = 0; i < 20; ++i) {
    std::atomic<bool> parked{false};
    std::thread producer([&] {
      while (!parked.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let it block in poll
      bell.ring();
    });
    t0 = Clock::now();
    bell.park(std::chrono::microseconds(5000000), [&] {
      parked.store(true);
      return true;
    });
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    producer.join();
    EXPECT_LT(ms, 2500.0) << "round " << i << ": the ring did not wake the parked proxy";
  }
}

// The provider's wait fd wakes the parked proxy while it is watched, not
// while a host thread that does the proxy's work has unwatched it; watched
// again while readable, it wakes the proxy at once (a pipe stands in).
TEST(ProxyBell, WatchedFdWakesTheParkedProxyUnwatchedItDoesNot) {
  nvst::detail::ProxyBell bell;
  using Clock = std::chrono::steady_clock;
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  bell.set_fabric_fd(pipe_fds[0]);
  ASSERT_TRUE(bell.watched());
  const char byte = 1;
  ASSERT_EQ(write(pipe_fds[1], &byte, 1), 1);
  auto t0 = Clock::now();
  bell.park(std::chrono::microseconds(5000000), [] { return true; });
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500)) << "a readable watched fd did not wake it";
  bell.unwatch();
  EXPECT_FALSE(bell.watched());
  t0 = Clock::now();
  bell.park(std::chrono::microseconds(20000), [] { return true; });
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(19)) << "an unwatched fd woke it";
  std::atomic<bool> parked{false};
  std::thread helper([&] {
    while (!parked.load()) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let it block in poll
    bell.watch();                                               // still readable: the parked proxy wakes
  });
  t0 = Clock::now();
  bell.park(std::chrono::microseconds(5000000), [&] {
    parked.store(true);
    return true;
  });
  helper.join();
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500)) << "watching a readable fd again did not wake it";
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}
