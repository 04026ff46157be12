// The proxy's life (construction, stop, failure) and its loop: see proxy.hpp
// for what it does, proxy_state.hpp for the phases of one round.
#include "transport/proxy.hpp"

#include <cuda_runtime_api.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device/device_runtime.hpp"
#include "base/backoff.hpp"
#include "transport/host_stage.hpp"
#include "base/bootstrap.hpp"
#include "base/job_secret.hpp"
#include "nvst/settings.hpp"
#include "transport/inbox_bell.hpp"
#include "nvst/topology.hpp"
#include "transport/proxy_state.hpp"

namespace nvst {

using namespace proxy_impl;
using Clock = std::chrono::steady_clock;

Proxy::Proxy(Bootstrap& boot, char* heap, std::size_t heap_bytes, int device, double timeout_s, int pes_on_host,
             const HeapShare& heap_share)
    : device_(device), timeout_s_(timeout_s) {
  // Where every PE's two busy threads have a core, spinning up to 1 ms
  // answers fastest (a wake-up costs 5-10 us more on our VMs). Where they do
  // not (the 2-core CI machine: 2 PEs, 4 threads), a pure spinner takes the
  // core the thread it waits for needs: the proxy spins only 20 us, and a
  // waiter gives its core away at each look (sched_yield, 0.2 us when nobody
  // else wants it) for up to 200 us, then blocks. Linux wakes a thread on
  // its waker's core, so a host thread and its PE's proxy thread often share
  // one, and blocking at once cost a futex wake-up per call (about 5 us);
  // 200 us covers a 1 MiB put over shm.
  // Where host threads help (below), a PE has one busy thread doing the
  // proxy's work, whichever it is: a core per PE is room enough.
  cpu_set_t cores;
  CPU_ZERO(&cores);
  const int n_cores = sched_getaffinity(0, sizeof(cores), &cores) == 0 ? CPU_COUNT(&cores) : 1;
  const bool roomy = n_cores >= 2 * std::max(pes_on_host, 1);
  const bool core_per_pe = n_cores >= std::max(pes_on_host, 1);
  spin_ = std::chrono::microseconds(roomy ? 1000 : 20);
  changes_.set_spin(std::chrono::microseconds(roomy ? 1000 : 200), !roomy);
  help_spin_ = std::chrono::microseconds(core_per_pe ? 1000 : 20);
  const int world = boot.world();
  // GPU heaps send data through the inboxes (the provider cannot write GPU
  // memory without FI_HMEM). Host heaps are written directly, and
  // NVST_PROXY_INBOX=1 sends their data through the inboxes too, with memcpy
  // where the GPU path has copies on streams: the same protocol (pieces,
  // doorbells, acks), so CI tests it without a GPU. Signals always travel as
  // inbox pieces, applied by the target's proxy: no fabric atomics, which
  // libfabric 1.17's shm got wrong (lost or garbled adds, docs/06).
  const bool gpu = device >= 0;
  const auto asked = settings::get("NVST_PROXY_INBOX");
  NVST_REQUIRE(!asked || *asked == "0" || *asked == "1", "NVST_PROXY_INBOX='", *asked, "' is not 0 or 1");
  const bool inbox_data = gpu || (asked && *asked == "1");
  {  // A sender lays out its target's inbox slots as its own: one size for all.
    const std::uint8_t mine = inbox_data ? 1 : 0;
    const std::vector<std::byte> all = boot.allgather(&mine, 1, "the proxy's inbox layout");
    for (int p = 0; p < world; ++p)
      NVST_REQUIRE(static_cast<std::uint8_t>(all[static_cast<std::size_t>(p)]) == mine, "proxy: PE ", p,
                   (mine ? " writes host heaps directly" : " sends data through the inbox"), " and PE ", boot.rank(),
                   (mine ? " sends data through the inbox" : " writes host heaps directly"),
                   "; set NVST_PROXY_INBOX alike on every PE (and GPU or host heaps on all)");
  }
  NVST_REQUIRE(world <= inbox::kMaxPes, "proxy: the inbox protocol names a sender in 16 bits; ", world,
               " PEs are more");
  ControlLayout layout{world, inbox_data};
  const std::size_t pool_bytes = round_up(sizeof(InFlight) * kMaxInFlight, 4096);
  // GPU heaps add the staging rings that producers fill (proxy_fifo.hpp,
  // "Staged pieces") and their words; host heaps stage nothing themselves.
  const int slots = kStageSlots + (gpu ? kKernelRingSlots + kHostRingSlots : 0);
  const std::size_t ring_words = gpu ? sizeof(std::uint64_t) * (kKernelRingSlots + kHostRingSlots) : 0;
  // Whole pages: aligned_alloc wants a multiple of its alignment, and the
  // registrations below pin whole pages (none shared with other data).
  scratch_bytes_ = round_up(pool_bytes + slots * kSlotBytes + ring_words, 4096);
  control_bytes_ = round_up(layout.bytes(), 4096);
  scratch_ = static_cast<char*>(std::aligned_alloc(4096, scratch_bytes_));
  // GPU heaps: shared with the copy agent, which lands the inboxes' pieces.
  if (gpu) {
    control_mem_ = SharedMapping("nvst-inboxes", control_bytes_);
    control_ = control_mem_.data();
  } else {
    control_ = static_cast<char*>(std::aligned_alloc(4096, control_bytes_));
  }
  NVST_REQUIRE(scratch_ && control_, "proxy: cannot allocate ", scratch_bytes_ + control_bytes_,
               " bytes of staging and inbox memory");
  std::memset(scratch_, 0, scratch_bytes_);
  std::memset(control_, 0, control_bytes_);
  if (gpu) {
    // Pinned, so that the staging memory is DMA-able, and mapped: kernels
    // write their pieces into the staging ring and read its slots' words.
    NVST_CHECK_CUDA(cudaHostRegister(scratch_, scratch_bytes_, cudaHostRegisterMapped));
    void* dev_view = nullptr;
    NVST_CHECK_CUDA(cudaHostGetDevicePointer(&dev_view, scratch_, 0));
    NVST_REQUIRE(dev_view == scratch_,
                 "proxy: the GPU sees the staging memory at another address (no unified "
                 "addressing?)");
  }
  transport_ = std::make_unique<fabric::Transport>(boot, gpu ? nullptr : heap, heap_bytes, control_, control_bytes_,
                                                   scratch_, scratch_bytes_, device);
  // Host threads help where the proxy thread parks on the provider's wait
  // fd: host heaps (no kernel feeds the proxy) over a provider with one
  // (not shm, where a call can also spin for good on a dead peer's lock,
  // which must hold the proxy thread, never the caller's).
  if (!gpu && transport_->wait_fd() >= 0) {
    bell_.set_fabric_fd(transport_->wait_fd());
    driver_bell_.set_fabric_fd(transport_->wait_fd());
    const auto help = settings::get("NVST_PROXY_HELP");
    NVST_REQUIRE(!help || *help == "0" || *help == "1", "NVST_PROXY_HELP='", *help, "' is not 0 or 1");
    can_help_ = !help || *help == "1";
    // Awake, the proxy thread is then its PE's one busy thread (a waiting
    // host thread takes the work over at once: hand_over in run()).
    if (can_help_ && core_per_pe) spin_ = std::chrono::microseconds(1000);
  }

  auto make_fifo = [](void* mem) {
    auto* f = static_cast<proxy::FifoShared*>(mem);
    std::memset(mem, 0, proxy::fifo_bytes(kFifoCapacity));
    f->capacity = kFifoCapacity;
    return f;
  };
  host_fifo_mem_ = std::make_unique<std::byte[]>(proxy::fifo_bytes(kFifoCapacity) + 64);
  void* p = host_fifo_mem_.get();
  std::size_t space = proxy::fifo_bytes(kFifoCapacity) + 64;
  host_fifo_ = make_fifo(std::align(64, proxy::fifo_bytes(kFifoCapacity), p, space));
  host_producer_ = std::make_unique<proxy::HostProducer>(host_fifo_, &host_tail_, timeout_s, &bell_, &changes_,
                                                         can_help_ ? static_cast<detail::ProxyHelper*>(this) : nullptr);

  st_ = std::make_unique<State>(host_fifo_, settings::get("NVST_PROXY_TRACE").value_or(""));
  State& s = *st_;
  s.transport = transport_.get();
  s.control = control_;
  s.timeout_s = timeout_s;
  s.layout = layout;
  s.me = boot.rank();
  s.tag_key = secret::derive(boot.cookie(), "inbox tag");
  s.heap = heap;
  s.heap_bytes = heap_bytes;
  s.host_fifo = host_fifo_;
  s.pool = reinterpret_cast<InFlight*>(scratch_);
  for (int i = kMaxInFlight - 1; i >= 0; --i) s.free_ops.push_back(i);
  s.stage = scratch_ + pool_bytes;
  for (int i = kStageSlots - 1; i >= 0; --i) s.free_slots.push_back(i);
  if (gpu) s.ring_done = reinterpret_cast<std::uint64_t*>(s.stage + slots * kSlotBytes);
  s.sent.assign(static_cast<std::size_t>(world), 0);
  s.marked.assign(static_cast<std::size_t>(world), 0);
  s.lazy_acks.assign(static_cast<std::size_t>(world), {});
  s.recv.assign(static_cast<std::size_t>(world), 0);
  s.applied.assign(static_cast<std::size_t>(world), 0);
  s.landed.assign(static_cast<std::size_t>(world) * kInboxSlots, 0);
  s.gpu = gpu;
  if (gpu) {
    void* mem = nullptr;
    NVST_CHECK_CUDA(cudaHostAlloc(&mem, proxy::fifo_bytes(kFifoCapacity), cudaHostAllocMapped));
    dev_fifo_ = make_fifo(mem);
    s.dev_fifo = dev_fifo_;
    NVST_CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_fifo_dev_), mem, 0));
    // The tail (word 0), the staging ring's ticket counter (word 8) and the
    // producers' cached copy of head (word 16), on separate lines.
    NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev_tail_), 256));
    NVST_CHECK_CUDA(cudaMemset(dev_tail_, 0, 256));
    s.dev_consumer = std::make_unique<proxy::Consumer>(dev_fifo_);
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    // A piece's data fills the slot behind its header in one write.
    staged_piece_bytes_ = std::min(kPieceBytes, transport_->max_write() - kInboxHeader);
    host_stager_ = std::make_unique<proxy::HostStager>(s.stage + (kStageSlots + kKernelRingSlots) * kSlotBytes,
                                                       s.ring_done + kKernelRingSlots, kHostRingSlots,
                                                       staged_piece_bytes_, device, *host_producer_);
    // Room for every piece that can be in the inboxes at once.
    std::uint32_t capacity = 64;
    while (capacity < static_cast<std::uint32_t>(kInboxSlots * world)) capacity *= 2;
    agent_ = std::make_unique<CopyAgent>(heap_share, control_mem_, device, capacity, static_cast<int>(spin_.count()),
                                         timeout_s);
    s.agent = agent_.get();
  }
  debug_ = settings::get("NVST_PROXY_DEBUG").value_or("0") != "0";
  transport_->provider_calls().set_accounting(debug_);
  thread_ = std::thread([this] { run(); });
  watchdog_ = std::thread([this] { watch(); });
}

char* Proxy::device_stage_ring() const {
  return device_ >= 0 ? st_->stage + static_cast<std::size_t>(kStageSlots) * kSlotBytes : nullptr;
}
std::uint64_t* Proxy::device_stage_done() const { return st_->ring_done; }  // the kernels' ring comes first
int Proxy::device_stage_slots() { return kKernelRingSlots; }

bool Proxy::stop() {
  if (!thread_.joinable()) return !left_behind_;
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    stop_.store(true);
  }
  bell_.wake();
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (thread_.get_id() == std::this_thread::get_id()) {
    // exit() called on the proxy thread itself (a library's crash handler
    // does that): it cannot join itself, and the process is ending.
    thread_.detach();
    left_behind_ = true;
    return false;
  }
  // The thread leaves run() soon after stop_, unless a provider call holds
  // it for good (see watch()); joining that would hang this process.
  for (CallWatch::Snapshot call; !exited_.load(std::memory_order_acquire);
       std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
    if (!stuck_in_provider(call)) continue;
    std::fprintf(stderr, "%sproxy: its thread is still inside %s; left behind, not joined\n",
                 detail::rank_prefix().c_str(), call.what);
    thread_.detach();
    left_behind_ = true;
    return false;
  }
  thread_.join();
  return true;
}

void ProxyDeleter::operator()(Proxy* p) const {
  if (p->stop()) delete p;  // else its thread still runs and uses it: left allocated
}

Proxy::~Proxy() {
  stop();  // done already when ProxyDeleter destroys it (the only owner)
  if (debug_) {
    // Where the thread's time went: what is in neither call kind is its own
    // work (bookkeeping, host-heap memcpy) and idle rounds.
    const double ran = std::chrono::duration<double>(Clock::now() - started_).count();
    const CallWatch& prov = transport_->provider_calls();
    std::fprintf(stderr,
                 "%sproxy: finished; the provider refused %llu posts (FI_EAGAIN), at most %d in flight; of %.3f s "
                 "the thread ran, %.3f s in %llu provider calls; inbox pieces posted %llu, taken in %llu\n",
                 detail::rank_prefix().c_str(), static_cast<unsigned long long>(transport_->refused()),
                 st_->max_in_flight, ran, prov.total_s(), static_cast<unsigned long long>(prov.calls()),
                 static_cast<unsigned long long>(st_->pieces_posted),
                 static_cast<unsigned long long>(st_->pieces_taken));
  }
  st_->trace.write(st_->me);
  transport_.reset();
  if (device_ >= 0) {
    host_stager_.reset();  // its copies write the staging memory unregistered below
    cudaFreeHost(dev_fifo_);
    cudaFree(dev_tail_);
    cudaHostUnregister(scratch_);
  }
  agent_.reset();
  std::free(scratch_);
  if (!control_mem_.data()) std::free(control_);
}

// Whether a host thread's put source is GPU memory (device or managed): the
// calling thread stages it (HostStager). Host memory, pageable or pinned,
// the proxy copies itself with memcpy.
static bool on_gpu(std::uint64_t src) {
  cudaPointerAttributes at{};
  NVST_CHECK_CUDA(cudaPointerGetAttributes(&at, reinterpret_cast<const void*>(src)));
  return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

std::uint64_t Proxy::push(const proxy::Command& c, proxy::Op op, bool then_wait) {
  if (failed_.load(std::memory_order_acquire)) throw Error(failure());
  const bool data = (op == proxy::Op::kPut || op == proxy::Op::kPutSignal) && c.bytes > 0;
  if (host_stager_ && data && on_gpu(c.src)) return host_stager_->put(c, op, then_wait);
  NVST_REQUIRE(op != proxy::Op::kPutStaged && op != proxy::Op::kPutSignalStaged,
               "proxy: staged pieces are posted by HostStager only");
  return host_producer_->push(c, op, then_wait);
}

void Proxy::quiet() {
  const std::uint64_t t = push(proxy::Command{}, proxy::Op::kQuiet, true);
  try {
    host_producer_->wait_completed(t);
  } catch (const Error&) {
    if (std::string f = failure(); !f.empty()) throw Error(f);
    throw;
  }
}

std::uint64_t Proxy::atomic(const proxy::Command& c) {
  const std::uint64_t t = push(c, proxy::Op::kAtomic, true);
  try {
    return host_producer_->wait_answer(t);
  } catch (const Error&) {
    if (std::string f = failure(); !f.empty()) throw Error(f);
    throw;
  }
}

void Proxy::State::drop(const std::string& what) {
  const std::uint64_t n = dropped.fetch_add(1, std::memory_order_relaxed) + 1;
  if (Clock::now() - dropped_reported < std::chrono::seconds(1)) return;
  dropped_reported = Clock::now();
  std::fprintf(stderr, "%sproxy: dropped %s (%llu dropped so far; not from this job?)\n", detail::rank_prefix().c_str(),
               what.c_str(), static_cast<unsigned long long>(n));
}

std::uint64_t Proxy::dropped() const { return st_->dropped.load(std::memory_order_relaxed); }

std::string Proxy::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void Proxy::on_own_failure(OwnFailureHook hook) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  own_failure_hook_ = std::move(hook);
}

void Proxy::fail(const std::string& why, bool own, int pe) {
  // An own failure is told to the other PEs before anything below lets this
  // PE's waiters end: one that ends may exit the process at once, and the
  // others would hear only that this PE went, not why.
  std::string text = why;
  if (own) {
    OwnFailureHook hook;
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (failure_.empty()) hook = own_failure_hook_;
    }
    if (hook) text = hook(why, pe);
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    first = failure_.empty();
    if (first) failure_ = text;
  }
  failed_.store(true, std::memory_order_release);  // after the message: push() reads it once this is set
  st_->host_consumer.set_failed();
  if (st_->dev_consumer) st_->dev_consumer->set_failed();
  changes_.ring();  // waiters look at `failed` now
  // The bootstrap prints what it hears from outside; an own failure without
  // a hook (or before the watch runs) is said here.
  if (first && own && text == why) std::fprintf(stderr, "%s\n", why.c_str());
}

void Proxy::run() {
  started_ = Clock::now();
  if (device_ >= 0) {
    cudaSetDevice(device_);
    bound_cores_ = topology::bind_thread_near_gpu(device_);
    if (debug_)
      std::fprintf(stderr, "%sproxy thread for GPU %d bound to cores %s\n", detail::rank_prefix().c_str(), device_,
                   bound_cores_.empty() ? "(none: no preference)" : bound_cores_.c_str());
  }
  // Idle policy. A round that did something is followed by another at once,
  // and rings changes_ (host threads waiting for a signal or a quiet block on
  // it: wakeup.hpp). With nothing to do the thread spins spin_ (a reply
  // often comes within microseconds; see the constructor), then:
  //  - parks on bell_ (host producers ring it) and the provider's wait fd (a
  //    peer's data or a completion), where the provider has one (tcp;ofi_rxm)
  //    and no kernel feeds this proxy: it costs no core while idle, and the
  //    first operation after a pause waits one wake-up, not a sleep;
  //  - else yields: GPU producers cannot ring (a kernel cannot make a system
  //    call), and a provider without a wait fd (shm) moves a peer's data only
  //    inside our progress calls. A host-fed proxy idle for 50 ms there parks
  //    with a 50 us limit: a host producer still wakes it at once.
  // Parked with something outstanding, it looks again after 1 ms even if
  // nothing woke it: a safety net for an event a provider does not report
  // through its fd (then that operation waits up to 1 ms), never a hang.
  //
  // Refused posts: the provider takes no more until the peer has taken what
  // we sent (libfabric 1.17's shm takes one RMA at a time per peer). A peer
  // with a core of its own answers in microseconds; one that has not for
  // 100 us is waiting for a core, maybe ours: sleep 20 us per round. Spinning
  // or yielding instead made CI's two loaded cores up to 100x slower.
  //
  // Parked, the thread gives up the engine (engine_): a host thread that
  // publishes a command or waits for one then does the work itself
  // (proxy_help.cpp) and this thread sleeps on.
  detail::PreciseSleep precise;  // its 20 us sleeps last that long, not 70 (backoff.hpp)
  State& s = *st_;
  const bool can_park = !s.dev_consumer && transport_->wait_fd() >= 0;
  auto last_busy = Clock::now();
  std::uint64_t last_refused = 0;
  bool refusing = false;
  auto refusing_since = last_busy;
  bool holding = true;  // engine_ starts as kProxy
  while (!stop_.load(std::memory_order_relaxed) && !failed_.load(std::memory_order_relaxed)) {
    if (!holding) {
      int free = kFree;
      if (!engine_.compare_exchange_strong(free, kProxy, std::memory_order_seq_cst)) {
        // A host thread does the work (proxy_help.cpp). One that waits
        // stopped watching the fabric's fd, so this thread sleeps until that
        // thread gives the engine back (watching it again, and ringing if a
        // command is left); one that only posts holds it for microseconds.
        if (bell_.watched())
          std::this_thread::yield();
        else
          bell_.park(std::chrono::milliseconds(100),
                     [&] { return !stop_.load() && engine_.load(std::memory_order_seq_cst) == kHost; });
        continue;
      }
      holding = true;
      last_busy = Clock::now();  // a spin after waking: the news may need a few rounds
    }
    bool busy = false;
    try {
      busy = step();
    } catch (const std::exception& e) {
      fail(e.what(), true, st_->failed_pe);
      break;
    }
    const auto now = Clock::now();
    const std::uint64_t refusals = transport_->refused();
    const bool refused = refusals != last_refused;
    last_refused = refusals;
    if (busy || !refused) refusing = false;
    if (busy) {
      changes_.ring();
      last_busy = now;
      continue;
    }
    if (refused) {
      if (!refusing)
        refusing = true, refusing_since = now;
      else if (now - refusing_since > std::chrono::microseconds(100))
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    const auto idle = now - last_busy;
    // A host thread blocked waiting for the proxy: park now and ring, so it
    // does the work itself (proxy_help.cpp) instead of being woken per step.
    // One that did the work within the spin is likely to come back: park
    // now too, rather than hold the engine it will ask for.
    const bool hand_over = can_help_ && wanted_.load(std::memory_order_seq_cst) > 0;
    const bool host_helps =
        can_help_ && now.time_since_epoch().count() - host_gave_back_ns_.load(std::memory_order_relaxed) <
                         std::chrono::duration_cast<Clock::duration>(spin_).count();
    if (idle < spin_ && !hand_over && !host_helps) {
      if (changes_.spinners() && changes_.yielding()) std::this_thread::yield();  // a waiter may share the core
      continue;
    }
    auto nothing_new = [&] { return !stop_.load() && !s.host_consumer.pending(); };
    if (can_park) {
      if (!bell_.watch()) {  // a host thread that did the work could not watch it again
        fail(detail::concat("proxy: epoll_ctl(MOD) watching the provider's wait fd failed (errno ", errno, ")"));
        break;
      }
      if (!transport_->may_block()) continue;  // the provider has events: take them first
      const std::chrono::microseconds limit(s.drained() ? 100000 : 1000);
      engine_.store(kFree, std::memory_order_seq_cst);
      holding = false;
      if (hand_over) changes_.ring();
      bell_.park(limit, nothing_new);
    } else if (!s.dev_consumer && idle > std::chrono::milliseconds(50)) {
      bell_.park(std::chrono::microseconds(50), nothing_new);
    } else {
      std::this_thread::yield();
    }
  }
  // After a failure keep taking commands so producers are not left waiting
  // for slots; they see `failed` and stop.
  while (!stop_.load(std::memory_order_relaxed)) {
    int free = kFree;  // a host thread in the middle of a round finishes it first
    if (!holding && !(holding = engine_.compare_exchange_strong(free, kProxy))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    proxy::Command c;
    while (st_->host_consumer.poll(c)) {
    }
    while (st_->dev_consumer && st_->dev_consumer->poll(c)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  exited_.store(true, std::memory_order_release);
}

// One round: poll (completions, doorbells), handle (what they made ready),
// progress (post what can go), take new commands, acknowledge. Returns
// whether anything happened. `done` (a host thread's wait, proxy_help.cpp):
// once what landed satisfies it, the round ends there but for the acks
// asked for at once; the rest is the next round's. `idle`: a round that
// finds nothing else to do may post lazy acks (not one that a host thread
// runs right after posting, or before it returns: proxy_help.cpp).
bool Proxy::step(const std::function<bool()>* done, bool idle, bool send_first) {
  State& s = *st_;
  // A host thread's first round: the command it has just published goes out
  // before the provider is polled (a poll over tcp is 0.4 us of its put).
  bool busy = send_first && s.intake() && (s.advance_active(), true);
  busy |= s.complete();
  if (debug_) s.debug_report();
  s.check_ages();
  busy |= s.take_landed();
  busy |= s.finish_landings();
  if (done != nullptr && (*done)()) return s.post_acks() || busy;
  busy |= s.send_signals();
  busy |= s.send_answers();
  busy |= s.post_staged();
  busy |= s.advance_active();
  bool open = true;  // a fence or quiet that still waits takes no new commands
  if (s.blocked) {
    open = s.unblock();
    busy |= open;
  }
  if (open && s.intake()) {
    busy = true;
    s.advance_active();  // a new command goes out this round
  }
  // Acknowledgements last: a message sent this round (a ping-pong's reply)
  // does not wait behind an ack's write. Lazy ones wait for a round that
  // found nothing else to do (idle_round()).
  busy |= s.post_acks();
  if (!busy && idle) busy = s.idle_round();
  return busy;
}

// Completions of our own operations (a staging slot or an in-flight record
// comes back; a host-path put_signal's signal may go) and peers' inbox
// pieces that landed here (their doorbells).
bool Proxy::State::complete() {
  completions.clear();
  const bool any = transport->progress(completions) > 0;
  for (auto& c : completions) {
    if (c.remote) {  // a peer's piece landed in our inbox: ring its doorbell here
      // A doorbell can come from anyone who reaches our endpoint: one that
      // names no PE, or a piece outside the sender's window (a sender
      // never has more than kInboxSlots in flight), is dropped, and the
      // piece's tag is checked before it is applied (step 3).
      const int src = inbox::bell_sender(c.data);
      if (c.error != 0 || src >= layout.world) {
        drop(detail::concat("an incoming doorbell (data ", c.data,
                            "): ", c.error ? c.error_text : std::string("no such sender")));
        continue;
      }
      const std::uint64_t seq = inbox::bell_seq(c.data, recv[static_cast<std::size_t>(src)]);
      if (seq >= recv[static_cast<std::size_t>(src)] + kInboxSlots) {
        drop(detail::concat("a doorbell from PE ", src, " for piece ", seq, ", outside its window"));
        continue;
      }
      landed[static_cast<std::size_t>(src) * kInboxSlots + seq % kInboxSlots] = seq + 1;
      trace.add(ProxyTrace::kBell, src, seq);
      continue;
    }
    if (c.context == nullptr) {  // not ours: a provider's report about someone's operation on our memory
      if (c.error != 0) drop("an incoming write that failed: " + c.error_text);
      continue;
    }
    auto* op = static_cast<InFlight*>(c.context);
    static const char* names[] = {"write", "inbox write", "ack"};
    if (c.error != 0) {
      failed_pe = op->pe;
      NVST_FAIL(names[op->kind], " to PE ", op->pe, " failed: ", c.error_text, " (is PE ", op->pe, " alive?)");
    }
    if (op->kind == InFlight::kInboxWrite) trace.add(ProxyTrace::kWritten, op->pe, op->value);
    if (op->stage_slot >= 0) release_slot(op->stage_slot, op->ring_ticket);
    if (op->group >= 0) {
      auto& g = groups[static_cast<std::size_t>(op->group)];
      if (--g.remaining == 0 && g.all_posted) ready_signals.push_back(op->group);
    }
    release(op);
  }
  return any;
}

// Ends a fence or quiet whose work has drained; a quiet publishes it.
void Proxy::State::release_blocked() {
  blocked = false;
  if (!blocked_is_quiet) return;
  blocked_fifo->set_completed(blocked_ticket + 1);
  trace.add(ProxyTrace::kQuietDone, -1, blocked_ticket);
}

// fence / quiet: commands after them wait for everything before them.
// Whether the one pending has drained (and is released).
bool Proxy::State::unblock() {
  request_acks();
  if (!drained()) return false;
  release_blocked();
  return true;
}

// A quiet or fence waits for the acks of every piece sent; a target that
// acknowledges lazily (proxy_state.hpp) is asked for them, once per target
// and last piece: a marked piece's ack covers all before it.
void Proxy::State::request_acks() {
  // Not at once: a target that waits for anything acks within a round trip.
  if (Clock::now() - blocked_since < kAckRequestAfter) return;
  for (int t = 0; t < layout.world; ++t) {
    const std::uint64_t n = sent[static_cast<std::size_t>(t)];
    if (n == 0 || marked[static_cast<std::size_t>(t)] == n || acked(t, n - 1)) continue;
    stage_piece(t, proxy::Command{}, 0, nullptr, 0, proxy_atomic::kAckRequest);  // no free slot: the next round
  }
}

// New commands: the kernels' FIFO first, then the host's. A host quiet
// (barrier_all, finalize) runs after cudaDeviceSynchronize, when every
// kernel command is published; taking those first puts them before it. Up
// to 64 commands per round while they finish at once (no-ops, a quiet with
// nothing outstanding), so one fabric progress call serves many.
bool Proxy::State::intake() {
  bool any = false;
  for (int taken = 0; taken < 64 && !active && !blocked; ++taken) {
    proxy::Command c;
    proxy::Consumer* from = nullptr;
    if (dev_consumer && dev_consumer->poll(c))
      from = dev_consumer.get();
    else if (host_consumer.poll(c))
      from = &host_consumer;
    if (from == nullptr) {
      if (drained()) {  // everything taken has finished
        host_consumer.set_completed(host_consumer.head());
        if (dev_consumer) dev_consumer->set_completed(dev_consumer->head());
      }
      break;
    }
    const proxy::Op kind = proxy::tag_op(c.tag);
    NVST_REQUIRE(c.pe < static_cast<std::uint32_t>(layout.world) || kind == proxy::Op::kFence ||
                     kind == proxy::Op::kQuiet || kind == proxy::Op::kNop,
                 "proxy: command for PE ", c.pe, " out of range (ticket ", proxy::tag_ticket(c.tag), ")");
    switch (kind) {
      case proxy::Op::kPut:
      case proxy::Op::kPutSignal:
      case proxy::Op::kSignal: start(c, from); break;
      case proxy::Op::kPutStaged:
      case proxy::Op::kPutSignalStaged:
        // Only GPU heaps have the rings; a piece fills at most one slot.
        NVST_REQUIRE(gpu && c.bytes > 0 && c.bytes <= kPieceBytes, "proxy: staged piece (ticket ",
                     proxy::tag_ticket(c.tag), ") of ", c.bytes, " bytes", gpu ? "" : " on a host heap");
        start(c, from);
        advance_staged();  // posted at once if its inbox slot is free: the next command in this round too
        break;
      case proxy::Op::kAtomic:
        NVST_REQUIRE(proxy_atomic::request_valid(c.sig_op, c.sig, heap_bytes), "proxy: atomic command (ticket ",
                     proxy::tag_ticket(c.tag), ") with op code ", static_cast<int>(c.sig_op), " on heap offset ", c.sig,
                     " is malformed");
        start(c, from);
        break;
      case proxy::Op::kNop: break;
      case proxy::Op::kFence:
      case proxy::Op::kQuiet:
        blocked = true;
        blocked_is_quiet = kind == proxy::Op::kQuiet;
        blocked_fifo = from;
        blocked_ticket = proxy::tag_ticket(c.tag);
        drain_state = ~0ull;  // the age check starts its clock at its first look
        drain_same_since = blocked_since = Clock::now();
        if (drained()) release_blocked();  // nothing outstanding: done at once
        break;
      default:
        NVST_FAIL("proxy: unknown command op ", static_cast<int>(kind), " (ticket ", proxy::tag_ticket(c.tag), ")");
    }
    any = true;
  }
  return any;
}

// A put, signal or atomic taken from `from` becomes the active command
// (advance_active sends it). Only puts carry data.
void Proxy::State::start(const proxy::Command& c, proxy::Consumer* from) {
  const proxy::Op kind = proxy::tag_op(c.tag);
  const bool staged_piece = kind == proxy::Op::kPutStaged || kind == proxy::Op::kPutSignalStaged;
  const bool data = kind == proxy::Op::kPut || kind == proxy::Op::kPutSignal || staged_piece;
  cur_from_kernels = from == dev_consumer.get();
  active = true;
  cur_since = Clock::now();
  cur = c;
  // A staged put's pieces are commands of their own: its first piece
  // (`reserved`: the put's bytes) stands for the put in the trace.
  if (!staged_piece || c.reserved != 0)
    trace.add(cur_from_kernels ? ProxyTrace::kTakenFromKernel : ProxyTrace::kTaken, static_cast<int>(c.pe),
              staged_piece ? c.reserved
              : data       ? c.bytes
                           : 0);
  if (!data) cur.bytes = 0;
  // An atomic's answer names its ticket and FIFO (proxy_atomic::token).
  if (kind == proxy::Op::kAtomic) cur.reserved = proxy_atomic::token(proxy::tag_ticket(c.tag), from != &host_consumer);
  cur_done = 0;
  cur_signal_sent = false;
  cur_group = -1;
  if (kind == proxy::Op::kPutSignal && !layout.data && c.pe != static_cast<std::uint32_t>(me)) {
    if (free_groups.empty()) {
      groups.emplace_back();
      free_groups.push_back(static_cast<int>(groups.size()) - 1);
    }
    cur_group = free_groups.back();
    free_groups.pop_back();
    groups[static_cast<std::size_t>(cur_group)] = Group{0, false, c};
  }
}

}  // namespace nvst
