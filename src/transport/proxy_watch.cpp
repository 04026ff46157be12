// The proxy's watchdogs (proxy_state.hpp): its own thread's age check, run
// every round (operations or peers that stopped moving, copies that
// stalled), and a second thread that catches the proxy thread held inside
// one call (Proxy::watch); plus NVST_PROXY_DEBUG's periodic state report.
#include <cstdio>
#include <string>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"
#include "transport/proxy_state.hpp"

namespace nvst {

using namespace proxy_impl;
using Clock = std::chrono::steady_clock;

bool Proxy::stuck_in_provider(CallWatch::Snapshot& call) const {
  call = transport_->provider_call();
  return call.inside() && call.age_s() > 0.8 * timeout_s_;
}

void Proxy::watch() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(watchdog_mu_);
      if (watchdog_cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_.load(); })) return;
    }
    // A provider call that does not return: the proxy thread cannot run its
    // own age check (State::check_ages), so this thread fails it, naming the
    // peer, before the producers' NVST_TIMEOUT_S gives only "no progress".
    if (CallWatch::Snapshot call; !failed_.load(std::memory_order_relaxed) && stuck_in_provider(call)) {
      const std::string peer = call.pe >= 0 ? detail::concat("PE ", call.pe) : std::string("a peer");
      fail(detail::concat(detail::rank_prefix(), "the proxy thread has been inside ", call.what,
                          call.pe >= 0 ? " to " + peer : std::string(), " for ", call.age_s(),
                          " s (limit 0.8 x NVST_TIMEOUT_S) and cannot go on; ", peer,
                          " may be dead (libfabric's shm provider waits for good on a lock a killed peer held)"),
           true, call.pe);
    }
  }
}

// NVST_PROXY_DEBUG: the state on stderr every 2 s.
void Proxy::State::debug_report() {
  if (Clock::now() - last_debug <= std::chrono::seconds(2)) return;
  last_debug = Clock::now();
  std::string peers;  // inbox path: what a stall looks like from both ends
  for (int t = 0; t < layout.world; ++t) {
    const auto i = static_cast<std::size_t>(t);
    const std::uint64_t bell = landed[i * kInboxSlots + recv[i] % kInboxSlots];
    peers += detail::concat(" ", t, ":", sent[i], "/", sent[i] == 0 || acked(t, sent[i] - 1) ? "yes" : "no", "/",
                            recv[i], "/", applied[i], "/", bell);
  }
  std::fprintf(stderr,
               "%sproxy: in_flight %d staged %zu active %d (op %d pe %u %zu/%llu bytes) blocked %d control words %zu "
               "signals %zu applying %zu free_slots %zu refused posts %llu host head %llu dev head %llu; per PE "
               "sent/last acked/received/applied/next doorbell's value:%s\n",
               detail::rank_prefix().c_str(), in_flight, staged.size(), active,
               static_cast<int>(proxy::tag_op(cur.tag)), cur.pe, cur_done, static_cast<unsigned long long>(cur.bytes),
               blocked, control_words.size(), ready_signals.size(), applying.size(), free_slots.size(),
               static_cast<unsigned long long>(transport->refused()),
               static_cast<unsigned long long>(host_consumer.head()),
               static_cast<unsigned long long>(dev_consumer ? dev_consumer->head() : 0), peers.c_str());
}

// Dead or wedged peers: operations that never complete, or a command that
// cannot start (target's inbox full, EAGAIN while the provider reconnects).
// Looks every 200 ms while anything is outstanding.
void Proxy::State::check_ages() {
  if (!(in_flight > 0 || active || !staged.empty() || !applying.empty() || blocked) ||
      Clock::now() - last_age_check <= std::chrono::milliseconds(200))
    return;
  last_age_check = Clock::now();
  const double limit = 0.8 * timeout_s;  // before a producer's own wait gives up
  auto age_of = [](Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); };
  // The agent's landing copies take microseconds; one still running after
  // seconds is said once per piece (the GPU's copy engines are held).
  const double stalled_after = std::min(kStuckCopyS, limit);
  if (agent) {  // a dead agent lands nothing more: this PE takes no more data, so it counts as dead
    failed_pe = me;
    agent->check_alive();
    failed_pe = -1;
  }
  if (!applying.empty() && age_of(applying.front().since) >= stalled_after && landing_pending(applying.front()) &&
      applying.front().since != copy_stall_reported) {
    copy_stall_reported = applying.front().since;
    std::fprintf(stderr,
                 "%sproxy: the copy agent (pid %d) has not landed a piece from PE %d after %.1f s; its copies "
                 "wait for the GPU's copy engines\n",
                 detail::rank_prefix().c_str(), static_cast<int>(agent->pid()), applying.front().src,
                 age_of(applying.front().since));
  }
  if (!staged.empty()) {
    const State::Staged& f = staged.front();
    const double age = age_of(f.since);
    if (age > limit)
      NVST_FAIL("a piece of a put to PE ", f.pe, " has waited ", age,
                " s to be posted: the provider takes no "
                "more to PE ",
                f.pe, " (limit 0.8 x NVST_TIMEOUT_S); PE ", f.pe, " may be dead");
  }
  const double active_age = age_of(cur_since);
  if (active && active_age > limit)
    NVST_FAIL("an operation to PE ", cur.pe, " has gone ", active_age,
              " s without progress (limit 0.8 x NVST_TIMEOUT_S); PE ", cur.pe, " may be dead");
  for (int i = 0; i < kMaxInFlight; ++i) {
    if (!op_busy[static_cast<std::size_t>(i)]) continue;
    const double age = age_of(pool[i].posted);
    if (age > limit)
      NVST_FAIL("an operation to PE ", pool[i].pe, " has not completed after ", age,
                " s (limit 0.8 x NVST_TIMEOUT_S); PE ", pool[i].pe, " may be dead");
  }
  // A fence or quiet also waits for acks (every write completed, a peer's
  // proxy never answered) and for signals with no inbox slot free at
  // their target yet: fail when none of that moved for the limit.
  if (blocked) {
    std::uint64_t state = in_flight + (staged.size() << 16) + (ready_signals.size() << 32);
    int unacked = -1;
    for (int t = 0; t < layout.world; ++t) {
      const std::uint64_t n = sent[static_cast<std::size_t>(t)];
      for (std::uint64_t q = n > kInboxSlots ? n - kInboxSlots : 0; q < n; ++q)
        if (acked(t, q)) state += 1ull << 48;
      if (n > 0 && !acked(t, n - 1) && unacked < 0) unacked = t;
    }
    if (state != drain_state) {
      drain_state = state;
      drain_same_since = Clock::now();
    }
    const double stalled = age_of(drain_same_since);
    if (stalled > limit && unacked >= 0)
      NVST_FAIL("a ", blocked_is_quiet ? "quiet" : "fence", " has waited ", stalled, " s for PE ", unacked,
                " to acknowledge inbox piece ", sent[static_cast<std::size_t>(unacked)] - 1,
                " (limit 0.8 x NVST_TIMEOUT_S); PE ", unacked, " may be dead");
    if (stalled > limit && !ready_signals.empty()) {
      const int pe = static_cast<int>(groups[static_cast<std::size_t>(ready_signals.front())].cmd.pe);
      NVST_FAIL("a signal to PE ", pe, " has waited ", stalled,
                " s for a free inbox slot there (limit 0.8 x "
                "NVST_TIMEOUT_S); PE ",
                pe, " may be dead");
    }
  }
}

}  // namespace nvst
