// Host threads doing the proxy's work (wakeup.hpp's ProxyHelper). Where the
// proxy thread parks on the provider's wait fd (host heaps over tcp or
// verbs), a host thread that publishes a command or waits for the proxy
// takes the engine (proxy.hpp) while the proxy thread sleeps and runs the
// same rounds (Proxy::step) itself:
//  - post(): after publishing, rounds until one does nothing, so the command
//    is on the wire without waking the proxy thread;
//  - drive(): while waiting (a quiet, a signal, an atomic's answer), rounds
//    until the wait is over, parking as the proxy thread would between them
//    (a spin of help_spin_, then on the provider's wait fd and on
//    driver_bell_, which other host threads' commands ring). Meanwhile the
//    proxy thread's bell does not watch the fd, so the events this thread
//    handles do not wake the proxy thread too.
// A one-way signal then costs what raw libfabric's does plus a round's
// bookkeeping: the sender's thread posts it, the waiter's thread polls its
// own provider (or is woken by it) and applies it, and no other thread is
// woken between them. On a machine of few cores each PE has one busy
// thread, not two.
//
// Giving the engine back (give_back): every event the provider holds is
// taken (fi_trywait) before the proxy thread's bell watches the fd again, so
// the parked proxy thread wakes for the next one, and a command published
// meanwhile wakes it too. A cheaper hand-back that left the fd unwatched
// for a moment needs a timer to bound that moment, and arming one costs
// 6-11 us on our VMs, more than fi_trywait and epoll_ctl together.
#include <sched.h>

#include <chrono>
#include <optional>

#include "base/backoff.hpp"
#include "transport/proxy.hpp"
#include "transport/proxy_state.hpp"

namespace nvst {

using Clock = std::chrono::steady_clock;

bool Proxy::post(bool then_wait) {
  int e = engine_.load(std::memory_order_seq_cst);
  for (;;) {
    if (e == kProxy || failed_.load() || stop_.load()) return false;  // the proxy thread is awake: its bell
    if (e == kHost) {  // that thread takes the command, or rings the proxy thread when it gives the engine back
      driver_bell_.ring();
      return true;
    }
    if (then_wait) return true;  // the caller's drive() takes the engine next (or whoever comes first does the work)
    if (engine_.compare_exchange_weak(e, kHost, std::memory_order_seq_cst)) break;
  }
  rounds_on_host(nullptr, nullptr);
  return true;
}

Proxy::Drove Proxy::drive(const std::function<bool()>& ready, const std::function<void()>& check) {
  if (failed_.load() || stop_.load()) return Drove::kCannot;
  int e = kFree;
  if (!engine_.compare_exchange_strong(e, kHost, std::memory_order_seq_cst)) return Drove::kBusy;
  return rounds_on_host(&ready, &check);
}

// Hands the engine back to the parked proxy thread (see the top of this
// file). A command published while this thread held the engine, whose
// producer left it to this thread (post()): either that producer saw kFree
// and takes it itself, or this thread sees it pending and rings the proxy
// thread (both sides seq_cst).
void Proxy::give_back() noexcept {
  bool wake = false;
  try {
    for (int tries = 0; !failed_.load() && !transport_->may_block(); ++tries) {
      if (tries == 8) {  // a provider that keeps reporting events: the proxy thread takes over
        wake = true;
        break;
      }
      if (step(nullptr, false)) changes_.ring();
    }
    if (!bell_.watch()) wake = true;  // the proxy thread then looks at once and watches it itself
  } catch (const std::exception& e) {
    if (!failed_.load()) fail(e.what());
    wake = true;
  }
  host_gave_back_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  engine_.store(kFree, std::memory_order_seq_cst);
  if (wake)
    bell_.wake();
  else if (st_->host_consumer.pending())
    bell_.ring();
  if (wanted_.load(std::memory_order_seq_cst) > 0) changes_.ring();  // a blocked host thread may drive now
}

// Rounds on this host thread, which holds the engine; gives it back on
// return or throw. Without `ready` (post): until a round does nothing. A
// round that fails fails the proxy, as on the proxy thread; a check() that
// throws (the caller's timeout) only ends the wait.
Proxy::Drove Proxy::rounds_on_host(const std::function<bool()>* ready, const std::function<void()>* check) {
  struct GiveBack {
    Proxy& p;
    ~GiveBack() { p.give_back(); }
  } give_back{*this};
  bool first = true;
  auto round = [&] {
    try {
      const bool busy = step(ready, ready != nullptr, first);
      first = false;
      if (busy) changes_.ring();  // other host threads waiting on this PE
      return busy;
    } catch (const std::exception& e) {
      fail(e.what());
      throw Error(failure());
    }
  };
  if (ready == nullptr) {
    while (round() && !failed_.load()) {
    }
    return Drove::kSpent;
  }
  bell_.unwatch();  // if that fails the fd stays watched: spurious wake-ups of the proxy thread at worst
  std::optional<detail::PreciseSleep> precise;  // its parks end on time (backoff.hpp)
  auto spin_from = Clock::now();
  auto last_check = spin_from;
  for (;;) {
    const bool busy = round();
    if ((*ready)()) return Drove::kReady;
    if (failed_.load()) return Drove::kSpent;
    const auto now = Clock::now();
    if (now - last_check > std::chrono::microseconds(200)) {
      last_check = now;
      (*check)();
    }
    if (busy) spin_from = now;
    if (now - spin_from < help_spin_) {
      // The peer we wrote to, woken from sleep, often waits for this very
      // core (Linux runs a woken thread where its waker ran): let it.
      if (!busy) sched_yield();
      continue;
    }
    // Nothing for a while: park as the proxy thread would, on the
    // provider's fd (once it has no event left: fi_trywait) and on the bell
    // of other host threads' commands; look at least every 200 us (the
    // caller's timeout). Woken by nothing, park again at once.
    if (!transport_->may_block()) continue;
    if (!precise) precise.emplace();
    driver_bell_.park(std::chrono::microseconds(200), [&] { return !stop_.load() && !st_->host_consumer.pending(); });
    spin_from = Clock::now() - help_spin_;
  }
}

void Proxy::wait_until(const std::function<bool()>& ready, const std::function<void()>& check) {
  detail::wait_with(changes_, ready, check, std::chrono::microseconds(200),
                    can_help_ ? static_cast<detail::ProxyHelper*>(this) : nullptr);
}

}  // namespace nvst
