// The proxy: one CPU thread per PE that turns FIFO commands into fabric
// operations (transport/fabric.hpp) and keeps the device API's promises for
// PEs that load/store cannot reach (other nodes; every other PE when heaps
// are in host memory).
//
// Two data paths, chosen by where heaps live:
//  - Host heaps: the heap is registered; a put is fi_write straight into the
//    target's heap (sources outside registered memory are first copied into
//    pinned staging slots), and a signal is a header-only inbox piece (see
//    below), posted for a put_signal only after every piece of its data
//    completed (delivery completion: visible at the target); the target's
//    proxy applies it. No fabric atomics: libfabric 1.17's shm lost or
//    garbled adds (docs/06).
//  - GPU heaps (the providers on our machines have no FI_HMEM): the put's
//    producer copies the source into a staging slot (proxy_fifo.hpp,
//    "Staged pieces": a kernel's group, or the host thread that calls; the
//    proxy thread makes no CUDA call to send), the proxy writes a 64-byte
//    header in front of it, and the piece is written into one
//    of the target's inbox slots (its control region, host memory) with
//    remote CQ data naming it, which the target's provider reports once the
//    bytes are there (its doorbell). The target's proxy takes its inbox in order,
//    copies each piece into its GPU heap on a CUDA stream (and the signal
//    after it, in the same stream), and when the stream has done that it
//    returns the slot with a credit. Up to kInboxSlots pieces per pair are
//    in flight, so staging, wire and the target's copy overlap. A sender's
//    quiet waits for those credits: "complete" means in the target's memory.
//  - fence: commands after it start only once those before it completed
//    (all PEs, a simple strong form). quiet: the same, then it publishes the
//    FIFO's `completed` word.
// The proxy also drives the provider's progress, which lands peers' writes
// on software providers (tcp, shm). Failures (a completion error, an
// operation older than 0.8 x NVST_TIMEOUT_S) are recorded naming the PE;
// waiting producers then throw (host) or stop the kernel (device).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "nvst/proxy_fifo.hpp"
#include "base/shared_mapping.hpp"
#include "transport/call_watch.hpp"
#include "transport/copy_agent.hpp"
#include "transport/fabric.hpp"
#include "transport/fifo_host.hpp"
#include "transport/wakeup.hpp"

namespace nvst {

class Bootstrap;
namespace proxy {
class HostStager;
}

class Proxy final : private detail::ProxyHelper {
 public:
  // Collective over the world (opens the fabric transport). `device` >= 0:
  // the heap is GPU memory of that device (inbox path, and a FIFO for
  // kernels).
  // `pes_on_host`: PEs of this job on this machine (each runs an
  // application thread and a proxy thread: how long waits spin depends on
  // whether they all have a core, wakeup.hpp).
  // `heap_share`: how the copy agent maps a GPU heap (copy_agent.hpp).
  Proxy(Bootstrap& boot, char* heap, std::size_t heap_bytes, int device, double timeout_s, int pes_on_host,
        const HeapShare& heap_share = {});
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  const std::string& provider() const { return transport_->provider(); }

  // Host-thread producers (the host API). Thread-safe. `then_wait`: the
  // caller waits for the proxy right after (a blocking put's quiet). On GPU
  // heaps a put from GPU memory is staged here, by the calling thread
  // (host_stage.hpp); one from host memory the proxy copies.
  std::uint64_t push(const proxy::Command& c, proxy::Op op, bool then_wait = false);
  // Waits until every command pushed so far (by any host thread) finished.
  void quiet();
  // Waits until ready() holds for something the proxy brings about (a
  // signal on this PE's host heap): does the proxy's work on this thread
  // while the proxy thread is parked (proxy_help.cpp), else blocks on
  // changes(). check() runs now and then and may throw (a timeout).
  void wait_until(const std::function<bool()>& ready, const std::function<void()>& check);
  // Rung whenever the proxy thread changed something (a signal applied to a
  // host heap, a quiet released, a FIFO slot freed, an atomic answered):
  // host threads waiting for such a change block on it (wakeup.hpp).
  detail::Wakeup& changes() { return changes_; }
  // A remote atomic (host threads; c as proxy_fifo.hpp's kAtomic): posts it
  // and returns the old value once the target's proxy answered.
  std::uint64_t atomic(const proxy::Command& c);
  // The failure, if the proxy stopped on one ("" otherwise).
  std::string failure() const;
  // Stops the proxy on a failure found elsewhere (a dead PE the bootstrap's
  // watch reported), so its waiting producers end with that message.
  // Thread-safe.
  void fail_from_outside(const std::string& why) { fail(why, false); }
  // Called (on the proxy thread or its watchdog) when the proxy stops on a
  // failure it found itself, with the PE it blames (-1: none), so the
  // runtime can tell the other PEs. It runs before this PE's waiters can see
  // the failure (one that sees it may end the process), and returns the
  // text they get: the job's failure, which may be a cause the others told
  // of first. Thread-safe.
  using OwnFailureHook = std::function<std::string(const std::string& why, int pe)>;
  void on_own_failure(OwnFailureHook hook);
  // Incoming messages dropped as forged or malformed (read racily: for
  // reports and tests).
  std::uint64_t dropped() const;
  const fabric::Transport& transport() const { return *transport_; }
  // Stops the proxy thread and waits for it. False when it cannot: the
  // thread is held inside a provider call for good (a dead peer, see
  // watch()) or this is that thread; it is then left running, and this
  // object must outlive it (ProxyOwner never destroys it). Idempotent.
  bool stop();

  // Kernels' FIFO (GPU heaps only): the shared part as the device sees it
  // (pinned, mapped) and the producers' ticket counter (device memory).
  proxy::FifoShared* device_fifo_for_device() const { return dev_fifo_dev_; }
  unsigned long long* device_tail() const { return dev_tail_; }
  // Producers' cached copy of `head` (device memory), see device/proxy.cuh.
  unsigned long long* device_head_cache() const { return dev_tail_ + 16; }
  // Kernels' staging ring (proxy_fifo.hpp, "Staged pieces"; GPU heaps
  // only): its slots and their words (pinned, mapped: one address for host
  // and device), its number of slots, its ticket counter (device memory),
  // and the data bytes of a piece.
  char* device_stage_ring() const;
  std::uint64_t* device_stage_done() const;
  static int device_stage_slots();
  unsigned long long* device_stage_tickets() const { return dev_tail_ + 8; }
  std::size_t staged_piece_bytes() const { return staged_piece_bytes_; }

 private:
  struct State;
  struct InFlight;
  void run();
  bool step(const std::function<bool()>* done = nullptr, bool idle = true, bool send_first = false);
  // Host threads doing the proxy's work (proxy_help.cpp): ProxyHelper, and
  // the rounds of one host thread while it holds the engine.
  bool post(bool then_wait) override;
  Drove drive(const std::function<bool()>& ready, const std::function<void()>& check) override;
  void want(int delta) override { wanted_.fetch_add(delta, std::memory_order_seq_cst); }
  Drove rounds_on_host(const std::function<bool()>* ready, const std::function<void()>* check);
  void give_back() noexcept;  // a host thread hands the engine back to the parked proxy thread
  // `pe`: the PE an own failure blames (-1: none).
  void fail(const std::string& why, bool own = true, int pe = -1);
  // Whether the proxy thread has been inside one provider call (returned in
  // `call`) for longer than 0.8 x NVST_TIMEOUT_S.
  bool stuck_in_provider(CallWatch::Snapshot& call) const;

  int device_;
  double timeout_s_;
  bool debug_ = false;                // NVST_PROXY_DEBUG=1: state on stderr every 2 s
  std::string bound_cores_;           // where the thread was pinned (topology.hpp)
  char* scratch_ = nullptr;           // registered: in-flight records, then staging slots
  char* control_ = nullptr;           // registered for remote writes: inboxes, credits
  SharedMapping control_mem_;         // control_ where the copy agent maps it too (GPU heaps)
  std::unique_ptr<CopyAgent> agent_;  // lands inbox pieces in a GPU heap
  std::size_t scratch_bytes_ = 0, control_bytes_ = 0;
  std::unique_ptr<fabric::Transport> transport_;
  // Host FIFO (plain host memory) and its ticket counter.
  std::unique_ptr<std::byte[]> host_fifo_mem_;
  proxy::FifoShared* host_fifo_ = nullptr;
  std::uint64_t host_tail_ = 0;
  std::unique_ptr<proxy::HostProducer> host_producer_;
  // GPU heaps: host threads' puts from GPU memory, staged by the calling
  // thread (host_stage.hpp), and the data bytes of a staged piece.
  std::unique_ptr<proxy::HostStager> host_stager_;
  std::size_t staged_piece_bytes_ = 0;
  // Device FIFO: pinned host memory, and the tail in device memory.
  proxy::FifoShared* dev_fifo_ = nullptr;
  proxy::FifoShared* dev_fifo_dev_ = nullptr;
  unsigned long long* dev_tail_ = nullptr;

  detail::ProxyBell bell_;          // host producers wake the parked proxy thread
  detail::ProxyBell driver_bell_;   // ... and a host thread parked while it holds the engine (proxy_help.cpp)
  detail::Wakeup changes_;          // see changes()
  std::chrono::microseconds spin_;  // an idle proxy's spin before it parks
  // Who does the proxy's work (runs step()): the proxy thread (kProxy), one
  // host thread while the proxy thread is parked (kHost, proxy_help.cpp), or
  // nobody (kFree: the proxy thread is parked; whoever takes it first does
  // the work). Invariant: only the holder touches the State, calls the
  // provider and watches or unwatches bell_'s fd; with the engine kFree the
  // fd is watched, so an event with nobody working wakes the proxy thread.
  enum Engine : int { kFree, kProxy, kHost };
  std::atomic<int> engine_{kProxy};
  bool can_help_ = false;                           // host threads may hold the engine (see proxy_help.cpp)
  std::chrono::microseconds help_spin_;             // how long a host thread holding it spins without news, then parks
  std::atomic<int> wanted_{0};                      // host threads blocked waiting for the proxy (want())
  std::atomic<std::int64_t> host_gave_back_ns_{0};  // steady clock: when a host thread last gave the engine back
  std::unique_ptr<State> st_;
  std::atomic<bool> stop_{false};
  OwnFailureHook own_failure_hook_;                // under failure_mu_
  std::atomic<bool> failed_{false};                // fail() was called: the thread stops working
  std::atomic<bool> exited_{false};                // run() has returned
  bool left_behind_ = false;                       // stop() detached a thread that still runs
  std::chrono::steady_clock::time_point started_;  // when run() began (NVST_PROXY_DEBUG's time split)
  // The watchdog thread fails the proxy when a provider call has not
  // returned for 0.8 x NVST_TIMEOUT_S (fabric::Transport::provider_call).
  // (The proxy thread makes no CUDA call on the data path: producers stage,
  // the copy agent lands.) A landing older than kStuckCopyS is reported.
  static constexpr double kStuckCopyS = 3.0;
  std::thread watchdog_;
  std::mutex watchdog_mu_;  // with watchdog_cv_: the destructor wakes it at once
  std::condition_variable watchdog_cv_;
  void watch();
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::thread thread_;
};

// The one owner of a proxy: destroys it once stop() succeeded, and leaves a
// proxy whose thread is held for good allocated, since that thread uses it.
struct ProxyDeleter {
  void operator()(Proxy* p) const;
};
using ProxyOwner = std::unique_ptr<Proxy, ProxyDeleter>;

}  // namespace nvst
