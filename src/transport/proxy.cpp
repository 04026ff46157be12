// The proxy thread: see proxy.hpp.
#include "transport/proxy.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "device/device_runtime.hpp"
#include "runtime/backoff.hpp"
#include "runtime/bootstrap.hpp"
#include "runtime/job_secret.hpp"
#include "runtime/settings.hpp"
#include "transport/inbox_bell.hpp"
#include "transport/proxy_trace.hpp"
#include "transport/topology.hpp"

namespace nvst {

namespace {
constexpr int kMaxInFlight = static_cast<int>(fabric::kMaxLocalInFlight);  // fabric operations posted at once
// Pieces of 256 KiB of data: small enough that a 1 MiB put is already a
// pipeline (staging copy of piece i+1 while piece i is on the wire and
// piece i-1 is copied into the target's GPU), large enough that per-piece
// costs (an operation, an acknowledgement) stay small next to the data. A
// slot holds a piece behind its 64-byte header, so a power-of-two put
// fills whole pieces (with the header inside 256 KiB, 1 MiB took a fifth
// piece of 256 bytes, one more trip through the whole pipeline: 256 KiB
// over shm took 133 us instead of 53). Smaller first and last pieces,
// to fill and drain the pipeline sooner, did not pay on one GPU (
// a staging or landing copy there takes 20-25 us whatever its size).
constexpr int kStageSlots = 16;                         // staging slots in the pipeline
constexpr std::size_t kPieceBytes = std::size_t{256} << 10;
constexpr int kInboxSlots = 16;                         // per (source, target) pair
static_assert(kInboxSlots <= fabric::kMaxRemoteDataPerPeer, "the transport's completion queue has room for "
              "kMaxRemoteDataPerPeer doorbells from each peer");
static_assert(kInboxSlots <= 1 << 16,
              "inbox_bell.hpp restores a seq from 16 bits: at most 2^16 pieces in flight per pair");
constexpr std::size_t kInboxHeader = 64;
constexpr std::size_t kSlotBytes = kInboxHeader + kPieceBytes;  // a staging or inbox slot
constexpr std::uint32_t kFifoCapacity = 4096;
using Clock = std::chrono::steady_clock;

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// The header in front of each piece in an inbox slot.
struct InboxHeader {
  std::uint64_t seq;        // piece number from this source, for checks
  std::uint64_t dest;       // heap offset
  std::uint64_t bytes;      // data bytes after the header
  std::uint64_t sig;        // heap offset of the signal word
  std::uint64_t sig_value;
  std::uint8_t has_signal;  // apply the signal after the data
  std::uint8_t sig_op;      // proxy::SignalOp
  std::uint8_t pad[6];
  std::uint64_t tag;        // piece_tag(sender, seq): only the job's PEs can compute it
  std::uint8_t pad2[8];
};
static_assert(sizeof(InboxHeader) == kInboxHeader);

// Control region layout (per PE, world PEs):
//   acks[world][kInboxSlots]   seq + 1 of my last piece in slot k that t applied (t writes)
//   slots[world][kInboxSlots]  header + data, or a header only when only
//                              signals use the inbox (s writes)
// A piece rings its own doorbell: it is written with remote CQ data (the
// sender and its seq, transport/inbox_bell.hpp), and the target's provider
// reports that once the bytes are in place (State::landed). Before, the sender waited for the write's
// completion and then wrote an 8-byte doorbell: two operations per piece,
// and one more one-way trip, where shm moves one RMA per peer at a time.
// Acks are plain 8-byte RMA writes, not fabric atomics: libfabric 1.17's
// shm applied several in-flight atomic writes from one sender with each
// other's operands (tests/host/test_fabric.cpp, *_inbox). Every read of an
// ack tests for one exact value, so a torn write (a provider that lands the
// 8 bytes in parts) reads as "not yet", never as a wrong yes. A word is
// written again only 16 pieces later, after its previous value was seen, so
// two writes to one word are never in flight together.
struct ControlLayout {
  int world;
  // Whether data travels through the inboxes (GPU heaps; host heaps with
  // NVST_PROXY_INBOX=1): slots of a header and a piece. Otherwise only
  // signals do (host heaps): slots of a header.
  bool data;
  std::size_t ack(int t, int k) const { return 8 * (static_cast<std::size_t>(t) * kInboxSlots + k); }
  std::size_t slots_begin() const { return round_up(ack(world, 0), 4096); }
  std::size_t slot_bytes() const { return data ? kSlotBytes : kInboxHeader; }
  std::size_t slot(int s, int k) const {
    return slots_begin() + (static_cast<std::size_t>(s) * kInboxSlots + k) * slot_bytes();
  }
  std::size_t bytes() const { return slot(world, 0); }
};

// A piece's tag: the job's inbox key (derived from its secret) mixed with
// the sender and seq, so a header a stranger wrote, or an old piece a
// forged doorbell points at, does not match the piece expected.
std::uint64_t piece_tag(std::uint64_t key, int src, std::uint64_t seq) {
  std::uint64_t z = key ^ (seq * 0x9e3779b97f4a7c15ull) ^ (static_cast<std::uint64_t>(src) << 48);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t load_acquire(const std::uint64_t* p) {
  return std::atomic_ref<const std::uint64_t>(*p).load(std::memory_order_acquire);
}

template <typename W>
void store_release(char* at, std::uint64_t value) {
  std::atomic_ref<W>(*reinterpret_cast<W*>(at)).store(static_cast<W>(value), std::memory_order_release);
}

// A signal to a word of this PE's host heap, applied by the proxy thread.
void apply_host_signal(char* heap, std::uint64_t sig, std::uint8_t sig_op, std::uint64_t value) {
  switch (proxy::signal_width(sig_op)) {  // the narrow SETs: p of a small element (proxy_fifo.hpp)
    case 1: return store_release<std::uint8_t>(heap + sig, value);
    case 2: return store_release<std::uint16_t>(heap + sig, value);
    case 4: return store_release<std::uint32_t>(heap + sig, value);
    default: break;
  }
  std::atomic_ref<std::uint64_t> w(*reinterpret_cast<std::uint64_t*>(heap + sig));
  if (sig_op == static_cast<std::uint8_t>(proxy::SignalOp::kAdd)) w.fetch_add(value, std::memory_order_release);
  else w.store(value, std::memory_order_release);
}

}  // namespace

// One posted fabric operation. Lives in the registered scratch area so that
// `value` (an ack's word) is registered memory.
struct Proxy::InFlight {
  enum Kind : int { kHeapWrite, kInboxWrite, kAck };
  // The provider's: with FI_CONTEXT / FI_CONTEXT2 mode it may use the first
  // 32 / 64 bytes behind the context pointer while the operation is in
  // flight. (Before this field existed, shm overwrote `value`, the doorbell
  // number, and the inbox path stalled.)
  fabric::ProviderContext provider_context;
  std::uint64_t value;  // kAck: the word written; kInboxWrite: the piece's seq
  int kind;
  int pe;
  int stage_slot;       // -1: none
  int group;            // host path put_signal: index into groups, -1: none
  Clock::time_point posted;
};

struct Proxy::State {
  ControlLayout layout;
  bool gpu = false;  // a GPU heap: inbox copies and signals go on `stream`
  int me = 0;
  std::uint64_t tag_key = 0;  // piece_tag's key
  // Incoming messages dropped as forged or malformed, and when the last
  // report of them was printed (at most one per second).
  std::uint64_t dropped = 0;
  Clock::time_point dropped_reported{};
  void drop(const std::string& what) {
    ++dropped;
    if (Clock::now() - dropped_reported < std::chrono::seconds(1)) return;
    dropped_reported = Clock::now();
    std::fprintf(stderr, "%sproxy: dropped %s (%llu dropped so far; not from this job?)\n",
                 detail::rank_prefix().c_str(), what.c_str(), static_cast<unsigned long long>(dropped));
  }
  char* heap = nullptr;
  std::size_t heap_bytes = 0;
  proxy::Consumer host_consumer;
  std::unique_ptr<proxy::Consumer> dev_consumer;
  InFlight* pool = nullptr;
  std::vector<int> free_ops;
  std::vector<char> op_busy = std::vector<char>(kMaxInFlight, 0);
  int in_flight = 0;
  int max_in_flight = 0;  // NVST_PROXY_DEBUG reports it
  std::uint64_t pieces_posted = 0, pieces_taken = 0;  // inbox pieces, for NVST_PROXY_DEBUG's per-piece costs
  char* stage = nullptr;
  std::vector<int> free_slots;
  // The command being posted piece by piece.
  bool active = false;
  proxy::Command cur{};
  std::size_t cur_done = 0;
  int cur_group = -1;
  bool cur_by_kernel = false;  // its source is staged by a kernel (driver_knows)
  bool cur_signal_sent = false;  // inbox path: the signal-carrying piece went
  Clock::time_point cur_since;
  // Host path put_signal: pieces in flight, and whether all were posted.
  struct Group {
    int remaining = 0;
    bool all_posted = false;
    proxy::Command cmd{};
  };
  std::vector<Group> groups;
  std::vector<int> free_groups;
  std::deque<int> ready_signals;
  // Inbox path: acks to write (after a piece was applied), each seq + 1
  // into one word of its sender's control region.
  struct ControlWord {
    int pe;
    std::size_t offset;
    std::uint64_t value;
  };
  std::deque<ControlWord> control_words;
  // Inbox path: pieces staged (a GPU source's copy queued on stage_stream),
  // posted in order once their copy is done. Meanwhile the thread keeps
  // driving the provider: a software provider (tcp) moves bytes only inside
  // progress calls, so waiting for each copy left the wire idle while it ran.
  struct Staged {
    int slot, pe;
    std::uint64_t seq;     // its inbox slot at pe is seq % kInboxSlots
    std::size_t bytes;     // header + data
    bool copying;          // a GPU copy into the slot, done when copied[slot] is
    Clock::time_point since;
    bool seen_copied = false;  // the trace recorded its copy's end
  };
  std::deque<Staged> staged;
  cudaEvent_t copied[kStageSlots] = {};  // per staging slot (GPU heaps)
  // Sending side: pieces sent per target. Receiving side: next piece
  // expected per source, pieces applied (copied, stream done) per source,
  // and the doorbells: landed[s * kInboxSlots + k] is seq + 1 of the last
  // piece from s whose write into inbox slot k reported it had landed.
  std::vector<std::uint64_t> sent;
  std::vector<std::uint64_t> recv, applied, landed;
  struct Applying {
    int src;
    cudaEvent_t done;
    Clock::time_point since;
  };
  std::deque<Applying> applying;
  std::vector<cudaEvent_t> free_events;
  cudaStream_t stream = nullptr;        // inbox copies into the heap
  cudaStream_t stage_stream = nullptr;  // staging copies out of GPU memory
  // Both are non-blocking streams: a kernel on the legacy default stream that
  // waits for the proxy must not be waited for by the proxy's own copies.
  // fence / quiet
  bool blocked = false;
  // While blocked: what is left to drain (drain_state) and since when it
  // has not changed, for the age check (a peer that never acks).
  std::uint64_t drain_state = 0;
  Clock::time_point drain_same_since;
  bool blocked_is_quiet = false;
  proxy::Consumer* blocked_fifo = nullptr;
  std::uint64_t blocked_ticket = 0;
  Clock::time_point last_age_check = Clock::now();
  Clock::time_point copy_stall_reported{};  // the stalled copy last reported (report_copy_stalled)
  Clock::time_point last_debug = Clock::now();
  std::vector<fabric::Completion> completions;

  ProxyTrace trace;  // NVST_PROXY_TRACE

  State(proxy::FifoShared* f, std::string trace_path) : host_consumer(f), trace(std::move(trace_path)) {}

  InFlight* take(int kind, int pe) {
    const int id = free_ops.back();
    InFlight* op = &pool[id];
    *op = InFlight{{}, 0, kind, pe, -1, -1, Clock::now()};
    return op;
  }
  bool in_heap(std::uint64_t addr) const {  // this PE's symmetric heap
    const auto base = reinterpret_cast<std::uintptr_t>(heap);
    return addr >= base && addr - base < heap_bytes;
  }
  void commit(InFlight* op) {  // the post succeeded
    free_ops.pop_back();
    op_busy[static_cast<std::size_t>(op - pool)] = 1;
    max_in_flight = std::max(max_in_flight, ++in_flight);
  }
  void release(InFlight* op) {
    --in_flight;
    const int id = static_cast<int>(op - pool);
    op_busy[static_cast<std::size_t>(id)] = 0;
    free_ops.push_back(id);
  }
  // Whether t has applied my piece `seq` (pieces are applied in order, so
  // all before it too).
  bool acked(int t, std::uint64_t seq) const {
    const int k = static_cast<int>(seq % kInboxSlots);
    return load_acquire(reinterpret_cast<const std::uint64_t*>(layout_base + layout.ack(t, k))) == seq + 1;
  }
  // Inbox slot for piece `sent` to t is free: its previous piece was applied.
  bool slot_free(int t, std::uint64_t seq) const { return seq < kInboxSlots || acked(t, seq - kInboxSlots); }
  bool all_acked() const {
    for (int t = 0; t < layout.world; ++t) {
      const std::uint64_t n = sent[static_cast<std::size_t>(t)];
      if (n > 0 && !acked(t, n - 1)) return false;
    }
    return true;
  }
  void ack(int src, std::uint64_t seq) {  // piece `seq` from src is applied
    ++applied[static_cast<std::size_t>(src)];
    control_words.push_back({src, layout.ack(me, static_cast<int>(seq % kInboxSlots)), seq + 1});
  }
  bool drained() const {
    return in_flight == 0 && !active && staged.empty() && ready_signals.empty() && control_words.empty() &&
           all_acked();
  }
  char* layout_base = nullptr;  // the control region
};

Proxy::Proxy(Bootstrap& boot, char* heap, std::size_t heap_bytes, int device, double timeout_s)
    : device_(device), timeout_s_(timeout_s) {
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
  // Whole pages: aligned_alloc wants a multiple of its alignment, and the
  // registrations below pin whole pages (none shared with other data).
  scratch_bytes_ = round_up(pool_bytes + kStageSlots * kSlotBytes, 4096);
  control_bytes_ = round_up(layout.bytes(), 4096);
  scratch_ = static_cast<char*>(std::aligned_alloc(4096, scratch_bytes_));
  control_ = static_cast<char*>(std::aligned_alloc(4096, control_bytes_));
  NVST_REQUIRE(scratch_ && control_, "proxy: cannot allocate ", scratch_bytes_ + control_bytes_,
               " bytes of staging and inbox memory");
  std::memset(scratch_, 0, scratch_bytes_);
  std::memset(control_, 0, control_bytes_);
  if (gpu) {
    // Pinned, so that the staging and inbox copies are DMA (and async).
    // Mapped too: a kernel may write the stage (launch_stage_copy).
    NVST_CHECK_CUDA(cudaHostRegister(scratch_, scratch_bytes_, cudaHostRegisterMapped));
    void* dev_view = nullptr;
    NVST_CHECK_CUDA(cudaHostGetDevicePointer(&dev_view, scratch_, 0));
    NVST_REQUIRE(dev_view == scratch_, "proxy: the GPU sees the staging memory at another address (no unified "
                 "addressing?)");
    NVST_CHECK_CUDA(cudaHostRegister(control_, control_bytes_, cudaHostRegisterDefault));
  }
  transport_ = std::make_unique<fabric::Transport>(boot, gpu ? nullptr : heap, heap_bytes, control_,
                                                   control_bytes_, scratch_, scratch_bytes_, device);

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
  host_producer_ = std::make_unique<proxy::HostProducer>(host_fifo_, &host_tail_, timeout_s);

  st_ = std::make_unique<State>(host_fifo_, settings::get("NVST_PROXY_TRACE").value_or(""));
  State& s = *st_;
  s.layout = layout;
  s.layout_base = control_;
  s.me = boot.rank();
  s.tag_key = secret::derive(boot.cookie(), "inbox tag");
  s.heap = heap;
  s.heap_bytes = heap_bytes;
  s.pool = reinterpret_cast<InFlight*>(scratch_);
  for (int i = kMaxInFlight - 1; i >= 0; --i) s.free_ops.push_back(i);
  s.stage = scratch_ + pool_bytes;
  for (int i = kStageSlots - 1; i >= 0; --i) s.free_slots.push_back(i);
  s.sent.assign(static_cast<std::size_t>(world), 0);
  s.recv.assign(static_cast<std::size_t>(world), 0);
  s.applied.assign(static_cast<std::size_t>(world), 0);
  s.landed.assign(static_cast<std::size_t>(world) * kInboxSlots, 0);
  s.gpu = gpu;
  if (gpu) {
    void* mem = nullptr;
    NVST_CHECK_CUDA(cudaHostAlloc(&mem, proxy::fifo_bytes(kFifoCapacity), cudaHostAllocMapped));
    dev_fifo_ = make_fifo(mem);
    NVST_CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_fifo_dev_), mem, 0));
    // The tail and the producers' cached copy of head, on separate lines.
    NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dev_tail_), 256));
    NVST_CHECK_CUDA(cudaMemset(dev_tail_, 0, 256));
    s.dev_consumer = std::make_unique<proxy::Consumer>(dev_fifo_);
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s.stage_stream, cudaStreamNonBlocking));
    for (int i = 0; i < kInboxSlots * world; ++i) {
      cudaEvent_t e;
      NVST_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      s.free_events.push_back(e);
    }
    for (cudaEvent_t& e : s.copied) NVST_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
  }
  debug_ = settings::get("NVST_PROXY_DEBUG").value_or("0") != "0";
  cuda_call_.set_accounting(debug_);
  transport_->provider_calls().set_accounting(debug_);
  thread_ = std::thread([this] { run(); });
  watchdog_ = std::thread([this] { watch(); });
}

bool Proxy::stuck_in_provider(CallWatch::Snapshot& call) const {
  call = transport_->provider_call();
  return call.inside() && call.age_s() > 0.8 * timeout_s_;
}

void Proxy::watch() {
  std::int64_t reported = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(watchdog_mu_);
      if (watchdog_cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_.load(); })) return;
    }
    // A provider call that does not return: the proxy thread cannot run its
    // own age check (step 2 of step()), so this thread fails it, naming the
    // peer, before the producers' NVST_TIMEOUT_S gives only "no progress".
    if (CallWatch::Snapshot call; !failed_.load(std::memory_order_relaxed) && stuck_in_provider(call)) {
      const std::string peer = call.pe >= 0 ? detail::concat("PE ", call.pe) : std::string("a peer");
      fail(detail::concat(detail::rank_prefix(), "the proxy thread has been inside ", call.what,
                          call.pe >= 0 ? " to " + peer : std::string(), " for ", call.age_s(),
                          " s (limit 0.8 x NVST_TIMEOUT_S) and cannot go on; ", peer,
                          " may be dead (libfabric's shm provider waits for good on a lock a killed peer held)"));
    }
    if (device_ < 0) continue;
    const CallWatch::Snapshot cuda = cuda_call_.snapshot();
    if (!cuda.inside() || cuda.since_ns == reported) continue;
    const double stuck_s = cuda.age_s();
    if (stuck_s < kStuckCudaCallS) continue;
    reported = cuda.since_ns;
    const char* what = cuda.what;
    std::fprintf(stderr,
                 "%sproxy: stuck for %.1f s in a CUDA call (%s): another CUDA call of this process holds the "
                 "driver, waiting for a kernel that waits on this proxy, which cannot finish while the proxy is "
                 "stuck. Usually that is a copy to pageable host memory (torch's .cpu(), cudaMemcpy into a "
                 "std::vector) queued behind such a kernel, a cudaMalloc or cudaFree meanwhile, or the first launch "
                 "of a kernel whose module CUDA loads lazily (CUDA_MODULE_LOADING=LAZY, the default). Copy into "
                 "pinned memory, allocate or synchronize first, or set CUDA_MODULE_LOADING=EAGER "
                 "(docs/09-expert-parallel.md)\n",
                 detail::rank_prefix().c_str(), stuck_s, what ? what : "?");
  }
}

bool Proxy::stop() {
  if (!thread_.joinable()) return !left_behind_;
  {
    std::lock_guard<std::mutex> lock(watchdog_mu_);
    stop_.store(true);
  }
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
                 "the thread ran, %.3f s in %llu provider calls, %.3f s in %llu CUDA calls; inbox pieces posted "
                 "%llu, taken in %llu\n",
                 detail::rank_prefix().c_str(), static_cast<unsigned long long>(transport_->refused()),
                 st_->max_in_flight, ran, prov.total_s(), static_cast<unsigned long long>(prov.calls()),
                 cuda_call_.total_s(), static_cast<unsigned long long>(cuda_call_.calls()),
                 static_cast<unsigned long long>(st_->pieces_posted),
                 static_cast<unsigned long long>(st_->pieces_taken));
  }
  st_->trace.write(st_->me);
  transport_.reset();
  if (device_ >= 0) {
    State& s = *st_;
    cudaStreamSynchronize(s.stream);
    cudaStreamSynchronize(s.stage_stream);
    for (auto& a : s.applying) s.free_events.push_back(a.done);
    for (cudaEvent_t e : s.free_events) cudaEventDestroy(e);
    for (cudaEvent_t e : s.copied) cudaEventDestroy(e);
    cudaStreamDestroy(s.stream);
    cudaStreamDestroy(s.stage_stream);
    cudaFreeHost(dev_fifo_);
    cudaFree(dev_tail_);
    cudaHostUnregister(scratch_);
    cudaHostUnregister(control_);
  }
  std::free(scratch_);
  std::free(control_);
}

std::uint64_t Proxy::push(const proxy::Command& c, proxy::Op op) {
  if (failed_.load(std::memory_order_acquire)) throw Error(failure());
  return host_producer_->push(c, op);
}

void Proxy::quiet() {
  const std::uint64_t t = push(proxy::Command{}, proxy::Op::kQuiet);
  try {
    host_producer_->wait_completed(t);
  } catch (const Error&) {
    if (std::string f = failure(); !f.empty()) throw Error(f);
    throw;
  }
}

std::uint64_t Proxy::dropped() const { return st_->dropped; }

std::string Proxy::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void Proxy::on_own_failure(std::function<void(const std::string&)> hook) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  own_failure_hook_ = std::move(hook);
}

void Proxy::fail(const std::string& why, bool own) {
  bool first = false;
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    first = failure_.empty();
    if (first) failure_ = why;
    if (own) hook = own_failure_hook_;
  }
  failed_.store(true, std::memory_order_release);  // after the message: push() reads it once this is set
  st_->host_consumer.set_failed();
  if (st_->dev_consumer) st_->dev_consumer->set_failed();
  std::fprintf(stderr, "%s\n", why.c_str());
  if (first && hook) hook(why);
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
  // Idle policy: spin for 1 ms after the last activity (a reply usually
  // comes within microseconds), then yield for up to 50 ms, then sleep 50 us
  // per round: an idle proxy costs little CPU, a busy one reacts at once.
  //
  // Refused posts: the provider takes no more until the peer has taken what
  // we sent (libfabric 1.17's shm takes one RMA at a time per peer). A peer
  // with a core of its own answers in microseconds; one that has not for
  // 100 us is waiting for a core, maybe ours: sleep 20 us per round. Spinning
  // or yielding instead made CI's two loaded cores up to 100x slower.
  detail::PreciseSleep precise;  // its 20 and 50 us sleeps last that long, not 70 and 100 (backoff.hpp)
  auto last_busy = Clock::now();
  std::uint64_t last_refused = 0;
  bool refusing = false;
  auto refusing_since = last_busy;
  while (!stop_.load(std::memory_order_relaxed) && !failed_.load(std::memory_order_relaxed)) {
    bool busy = false;
    try {
      busy = step();
    } catch (const std::exception& e) {
      fail(e.what());
      break;
    }
    const auto now = Clock::now();
    const std::uint64_t refusals = transport_->refused();
    const bool refused = refusals != last_refused;
    last_refused = refusals;
    if (busy || !refused) refusing = false;
    if (busy) {
      last_busy = now;
      continue;
    }
    if (refused) {
      if (!refusing) refusing = true, refusing_since = now;
      else if (now - refusing_since > std::chrono::microseconds(100))
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    const auto idle = now - last_busy;
    if (idle > std::chrono::milliseconds(50)) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else if (idle > std::chrono::milliseconds(1)) std::this_thread::yield();
  }
  // After a failure keep taking commands so producers are not left waiting
  // for slots; they see `failed` and stop.
  while (!stop_.load(std::memory_order_relaxed)) {
    proxy::Command c;
    while (st_->host_consumer.poll(c)) {
    }
    while (st_->dev_consumer && st_->dev_consumer->poll(c)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  exited_.store(true, std::memory_order_release);
}

// Whether the driver knows a kernel's put source. It knows device, managed
// and registered host memory: those are staged by a plain copy. One it does
// not know is, from a kernel, stream-ordered memory whose cudaFreeAsync the
// host has already issued (legal: the GPU frees it only after the kernel,
// which quiets first): the driver forgets the pointer at the call but the
// GPU maps it until then. A copy would take it for host memory (and crash)
// or refuse it as device memory, so a kernel stages it instead.
static bool driver_knows(const void* src) {
  cudaPointerAttributes at{};
  NVST_CHECK_CUDA(cudaPointerGetAttributes(&at, src));
  return at.type != cudaMemoryTypeUnregistered;
}

// One round; returns whether anything happened.
bool Proxy::step() {
  State& s = *st_;
  bool busy = false;
  // Whether a staged piece's copy out of the GPU is still running.
  auto copy_pending = [&](const State::Staged& f) {
    if (!f.copying) return false;
    CallWatch::Mark mark(cuda_call_, "cudaEventQuery on a staged piece");
    const cudaError_t q = cudaEventQuery(s.copied[f.slot]);
    if (q == cudaErrorNotReady) return true;
    NVST_CHECK_CUDA(q);
    return false;
  };
  // Whether a landed piece's copy into the GPU heap is still running.
  auto landing_pending = [&](const State::Applying& a) {
    CallWatch::Mark mark(cuda_call_, "cudaEventQuery on a landed put");
    const cudaError_t q = cudaEventQuery(a.done);
    if (q == cudaErrorNotReady) return true;
    NVST_CHECK_CUDA(q);
    return false;
  };

  // 1. Completions.
  s.completions.clear();
  if (transport_->progress(s.completions) > 0) busy = true;
  for (auto& c : s.completions) {
    if (c.remote) {  // a peer's piece landed in our inbox: ring its doorbell here
      // A doorbell can come from anyone who reaches our endpoint: one that
      // names no PE, or a piece outside the sender's window (a sender
      // never has more than kInboxSlots in flight), is dropped, and the
      // piece's tag is checked before it is applied (step 3).
      const int src = inbox::bell_sender(c.data);
      if (c.error != 0 || src >= s.layout.world) {
        s.drop(detail::concat("an incoming doorbell (data ", c.data, "): ",
                              c.error ? c.error_text : std::string("no such sender")));
        continue;
      }
      const std::uint64_t seq = inbox::bell_seq(c.data, s.recv[static_cast<std::size_t>(src)]);
      if (seq >= s.recv[static_cast<std::size_t>(src)] + kInboxSlots) {
        s.drop(detail::concat("a doorbell from PE ", src, " for piece ", seq, ", outside its window"));
        continue;
      }
      s.landed[static_cast<std::size_t>(src) * kInboxSlots + seq % kInboxSlots] = seq + 1;
      s.trace.add(ProxyTrace::kBell, src, seq);
      continue;
    }
    if (c.context == nullptr) {  // not ours: a provider's report about someone's operation on our memory
      if (c.error != 0) s.drop("an incoming write that failed: " + c.error_text);
      continue;
    }
    auto* op = static_cast<InFlight*>(c.context);
    static const char* names[] = {"write", "inbox write", "ack"};
    if (c.error != 0)
      NVST_FAIL(names[op->kind], " to PE ", op->pe, " failed: ", c.error_text, " (is PE ", op->pe, " alive?)");
    if (op->kind == InFlight::kInboxWrite) s.trace.add(ProxyTrace::kWritten, op->pe, op->value);
    if (op->stage_slot >= 0) s.free_slots.push_back(op->stage_slot);
    if (op->group >= 0) {
      auto& g = s.groups[static_cast<std::size_t>(op->group)];
      if (--g.remaining == 0 && g.all_posted) s.ready_signals.push_back(op->group);
    }
    s.release(op);
  }

  if (debug_ && Clock::now() - s.last_debug > std::chrono::seconds(2)) {
    s.last_debug = Clock::now();
    std::string peers;  // inbox path: what a stall looks like from both ends
    for (int t = 0; t < s.layout.world; ++t) {
      const auto i = static_cast<std::size_t>(t);
      const std::uint64_t bell = s.landed[i * kInboxSlots + s.recv[i] % kInboxSlots];
      peers += detail::concat(" ", t, ":", s.sent[i], "/", s.sent[i] == 0 || s.acked(t, s.sent[i] - 1) ? "yes" : "no",
                              "/", s.recv[i], "/", s.applied[i], "/", bell);
    }
    std::fprintf(
        stderr,
        "%sproxy: in_flight %d staged %zu active %d (op %d pe %u %zu/%llu bytes) blocked %d control words %zu "
        "signals %zu applying %zu free_slots %zu refused posts %llu host head %llu dev head %llu; per PE "
        "sent/last acked/received/applied/next doorbell's value:%s\n",
        detail::rank_prefix().c_str(), s.in_flight, s.staged.size(), s.active,
        static_cast<int>(proxy::tag_op(s.cur.tag)), s.cur.pe, s.cur_done, static_cast<unsigned long long>(s.cur.bytes),
        s.blocked, s.control_words.size(), s.ready_signals.size(), s.applying.size(), s.free_slots.size(),
        static_cast<unsigned long long>(transport_->refused()), static_cast<unsigned long long>(s.host_consumer.head()),
        static_cast<unsigned long long>(s.dev_consumer ? s.dev_consumer->head() : 0), peers.c_str());
  }

  // 2. Dead or wedged peers: operations that never complete, or a command
  // that cannot start (target's inbox full, EAGAIN while the provider reconnects).
  if ((s.in_flight > 0 || s.active || !s.staged.empty() || !s.applying.empty() || s.blocked) &&
      Clock::now() - s.last_age_check > std::chrono::milliseconds(200)) {
    s.last_age_check = Clock::now();
    const double limit = 0.8 * timeout_s_;  // before a producer's own wait gives up
    auto age_of = [](Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); };
    // The proxy's own copies (a piece staged out of the GPU, one landed into
    // it) take microseconds. One still running after seconds is stalled: a
    // copy, memset or pageable transfer queued behind a kernel that waits on
    // this proxy held the copy engine on 2x H200, and no call of the proxy
    // blocked, so the watchdog said nothing. Said once per stalled piece.
    const double stalled_after = std::min(kStuckCudaCallS, limit);
    auto report_copy_stalled = [&](const char* what, Clock::time_point since) {
      if (since == s.copy_stall_reported) return;
      s.copy_stall_reported = since;
      std::fprintf(stderr,
                   "%sproxy: %s has not finished after %.1f s. A copy, memset or transfer to pageable memory "
                   "queued (on any stream) behind a kernel that waits on this proxy holds the copy engine this "
                   "copy needs, and that kernel cannot end: across nodes, synchronize before queuing such work "
                   "(docs/09-expert-parallel.md)\n",
                   detail::rank_prefix().c_str(), what, age_of(since));
    };
    if (!s.applying.empty() && age_of(s.applying.front().since) >= stalled_after &&
        landing_pending(s.applying.front()))
      report_copy_stalled("the copy landing a peer's piece in the GPU heap", s.applying.front().since);
    if (!s.staged.empty()) {
      const State::Staged& f = s.staged.front();
      const double age = age_of(f.since);
      const bool copying = age >= stalled_after && copy_pending(f);  // asked only of an old piece
      if (copying) report_copy_stalled("the copy of a put's piece out of the GPU", f.since);
      if (age > limit && copying)
        NVST_FAIL("a piece of a put to PE ", f.pe, " has waited ", age,
                  " s for its copy out of the GPU (limit 0.8 x NVST_TIMEOUT_S)");
      if (age > limit)
        NVST_FAIL("a piece of a put to PE ", f.pe, " has waited ", age, " s to be posted: the provider takes no "
                  "more to PE ", f.pe, " (limit 0.8 x NVST_TIMEOUT_S); PE ", f.pe, " may be dead");
    }
    const double active_age = age_of(s.cur_since);
    if (s.active && active_age > limit)
      NVST_FAIL("an operation to PE ", s.cur.pe, " has gone ", active_age,
                " s without progress (limit 0.8 x NVST_TIMEOUT_S); PE ", s.cur.pe, " may be dead");
    for (int i = 0; i < kMaxInFlight; ++i) {
      if (!s.op_busy[static_cast<std::size_t>(i)]) continue;
      const double age = age_of(s.pool[i].posted);
      if (age > limit)
        NVST_FAIL("an operation to PE ", s.pool[i].pe, " has not completed after ", age,
                  " s (limit 0.8 x NVST_TIMEOUT_S); PE ", s.pool[i].pe, " may be dead");
    }
    // A fence or quiet also waits for acks (every write completed, a peer's
    // proxy never answered) and for signals with no inbox slot free at
    // their target yet: fail when none of that moved for the limit.
    if (s.blocked) {
      std::uint64_t state = s.in_flight + (s.staged.size() << 16) + (s.ready_signals.size() << 32);
      int unacked = -1;
      for (int t = 0; t < s.layout.world; ++t) {
        const std::uint64_t n = s.sent[static_cast<std::size_t>(t)];
        for (std::uint64_t q = n > kInboxSlots ? n - kInboxSlots : 0; q < n; ++q)
          if (s.acked(t, q)) state += 1ull << 48;
        if (n > 0 && !s.acked(t, n - 1) && unacked < 0) unacked = t;
      }
      if (state != s.drain_state) {
        s.drain_state = state;
        s.drain_same_since = Clock::now();
      }
      const double stalled = age_of(s.drain_same_since);
      if (stalled > limit && unacked >= 0)
        NVST_FAIL("a ", s.blocked_is_quiet ? "quiet" : "fence", " has waited ", stalled, " s for PE ", unacked,
                  " to acknowledge inbox piece ", s.sent[static_cast<std::size_t>(unacked)] - 1,
                  " (limit 0.8 x NVST_TIMEOUT_S); PE ", unacked, " may be dead");
      if (stalled > limit && !s.ready_signals.empty()) {
        const int pe = static_cast<int>(s.groups[static_cast<std::size_t>(s.ready_signals.front())].cmd.pe);
        NVST_FAIL("a signal to PE ", pe, " has waited ", stalled, " s for a free inbox slot there (limit 0.8 x "
                  "NVST_TIMEOUT_S); PE ", pe, " may be dead");
      }
    }
  }

  // Posts the staged inbox pieces, in order, each once its copy is done (a
  // host piece right after it is staged, so its wire starts at once).
  auto post_staged = [&] {
    while (!s.staged.empty() && !s.free_ops.empty()) {
      State::Staged& f = s.staged.front();
      if (copy_pending(f)) return;
      if (f.copying && !f.seen_copied) {
        f.seen_copied = true;
        s.trace.add(ProxyTrace::kCopied, f.pe, f.seq);
      }
      const int k = static_cast<int>(f.seq % kInboxSlots);
      InFlight* op = s.take(InFlight::kInboxWrite, f.pe);
      op->stage_slot = f.slot;
      op->value = f.seq;
      if (!transport_->write_with_data(f.pe, s.stage + static_cast<std::size_t>(f.slot) * kSlotBytes, f.bytes,
                                       fabric::Region::kControl, s.layout.slot(s.me, k), inbox::bell_data(s.me, f.seq),
                                       op))
        return;
      s.commit(op);
      s.trace.add(ProxyTrace::kPosted, f.pe, f.seq);
      s.staged.pop_front();
      ++s.pieces_posted;
      busy = true;
    }
  };
  // Stages the next inbox piece to PE `pe`: `bytes` of `src` for heap
  // offset `dest` (a GPU source is copied on stage_stream, posted by
  // post_staged once done; a host one at once), carrying c's signal when
  // `with_signal` (its target applies it after the data). A piece of 0
  // bytes with a signal is a signal on its own. False when no staging slot
  // or inbox slot at `pe` is free yet.
  auto stage_piece = [&](int pe, const proxy::Command& c, std::uint64_t dest, const char* src, std::size_t bytes,
                         bool with_signal) {
    auto& sent = s.sent[static_cast<std::size_t>(pe)];
    if (s.free_slots.empty() || !s.slot_free(pe, sent)) return false;
    const int slot = s.free_slots.back();
    char* stage = s.stage + static_cast<std::size_t>(slot) * kSlotBytes;
    auto* h = reinterpret_cast<InboxHeader*>(stage);
    *h = InboxHeader{};
    h->seq = sent;
    h->dest = dest;
    h->bytes = bytes;
    h->has_signal = with_signal;
    h->sig = c.sig;
    h->sig_value = c.sig_value;
    h->sig_op = c.sig_op;
    h->tag = piece_tag(s.tag_key, s.me, sent);
    const bool copying = bytes && s.gpu;
    if (copying) {
      CallWatch::Mark mark(cuda_call_, "staging a put's source from the GPU");
      if (s.cur_by_kernel)  // the stage is mapped: its host address is its device address (UVA)
        detail::launch_stage_copy(stage + kInboxHeader, src, bytes, s.stage_stream);
      else
        NVST_CHECK_CUDA(cudaMemcpyAsync(stage + kInboxHeader, src, bytes, cudaMemcpyDefault, s.stage_stream));
      NVST_CHECK_CUDA(cudaEventRecord(s.copied[slot], s.stage_stream));
    } else if (bytes) {
      std::memcpy(stage + kInboxHeader, src, bytes);
    }
    s.staged.push_back({slot, pe, sent, kInboxHeader + bytes, copying, Clock::now()});
    s.trace.add(ProxyTrace::kStaged, pe, sent);
    s.free_slots.pop_back();
    ++sent;
    if (!copying) post_staged();
    return true;
  };

  // 3. Small follow-up operations: host-path signals after their data;
  // inbox pieces whose doorbell rang (step 1) taken in, then acks after
  // their copies.
  while (!s.ready_signals.empty()) {
    const int g = s.ready_signals.front();
    const proxy::Command& cmd = s.groups[static_cast<std::size_t>(g)].cmd;
    if (!stage_piece(static_cast<int>(cmd.pe), cmd, 0, nullptr, 0, true)) break;
    s.ready_signals.pop_front();
    s.free_groups.push_back(g);
    busy = true;
  }
  {
    // Receiving: take every piece whose doorbell rang, in order per source.
    for (int src = 0; src < s.layout.world; ++src) {
      auto& next = s.recv[static_cast<std::size_t>(src)];
      for (;;) {
        const int k = static_cast<int>(next % kInboxSlots);
        if (s.landed[static_cast<std::size_t>(src) * kInboxSlots + k] != next + 1 ||
            (s.gpu && s.free_events.empty()))
          break;
        const auto* h = reinterpret_cast<const InboxHeader*>(control_ + s.layout.slot(src, k));
        if (h->tag != piece_tag(s.tag_key, src, next)) {  // a forged doorbell: wait for the real one
          s.landed[static_cast<std::size_t>(src) * kInboxSlots + k] = 0;
          s.drop(detail::concat("a doorbell for piece ", next, " from PE ", src, " whose header does not match"));
          break;
        }
        NVST_REQUIRE(h->seq == next && h->bytes <= (s.layout.data ? kPieceBytes : 0) && h->dest <= s.heap_bytes &&
                         h->bytes <= s.heap_bytes - h->dest &&
                         (!h->has_signal || h->sig <= s.heap_bytes - proxy::signal_width(h->sig_op)),
                     "proxy: inbox piece ", next, " from PE ", src, " is malformed (seq ", h->seq, ", dest ",
                     h->dest, ", bytes ", h->bytes, ")");
        if (!s.gpu) {  // host heap: applied now, by this thread (the only writer of inbox data)
          if (h->bytes) std::memcpy(s.heap + h->dest, reinterpret_cast<const char*>(h) + kInboxHeader, h->bytes);
          if (h->has_signal) apply_host_signal(s.heap, h->sig, h->sig_op, h->sig_value);
          s.trace.add(ProxyTrace::kLanded, src, next);
          s.ack(src, next);
          ++s.pieces_taken;
          ++next;
          busy = true;
          continue;
        }
        CallWatch::Mark mark(cuda_call_, "landing a peer's put in the GPU heap");
        if (h->bytes)
          NVST_CHECK_CUDA(cudaMemcpyAsync(s.heap + h->dest, reinterpret_cast<const char*>(h) + kInboxHeader,
                                          h->bytes, cudaMemcpyHostToDevice, s.stream));
        if (h->has_signal) {
          auto* word = reinterpret_cast<std::uint64_t*>(s.heap + h->sig);
          if (h->sig_op == static_cast<std::uint8_t>(proxy::SignalOp::kAdd))
            detail::launch_signal_add(word, h->sig_value, s.stream);
          else  // a copy-engine write of the SET's width (little-endian: the low bytes); no SM needed
            NVST_CHECK_CUDA(cudaMemcpyAsync(word, &h->sig_value, proxy::signal_width(h->sig_op),
                                            cudaMemcpyHostToDevice, s.stream));
        }
        cudaEvent_t e = s.free_events.back();
        s.free_events.pop_back();
        NVST_CHECK_CUDA(cudaEventRecord(e, s.stream));
        s.applying.push_back({src, e, Clock::now()});
        s.trace.add(ProxyTrace::kLanding, src, next);
        ++s.pieces_taken;
        ++next;
        busy = true;
      }
    }
    while (!s.applying.empty()) {
      if (landing_pending(s.applying.front())) break;
      const int src = s.applying.front().src;
      s.trace.add(ProxyTrace::kLanded, src, s.applied[static_cast<std::size_t>(src)]);
      s.free_events.push_back(s.applying.front().done);
      s.applying.pop_front();
      s.ack(src, s.applied[static_cast<std::size_t>(src)]);  // copies finish in order per source
      busy = true;
    }
  }
  while (!s.control_words.empty() && !s.free_ops.empty()) {
    const State::ControlWord w = s.control_words.front();
    InFlight* op = s.take(InFlight::kAck, w.pe);
    op->value = w.value;
    if (!transport_->write(w.pe, &op->value, 8, fabric::Region::kControl, w.offset, op)) break;
    s.commit(op);
    s.control_words.pop_front();
    s.trace.add(ProxyTrace::kAcked, w.pe, w.value - 1);
    busy = true;
  }

  // 4a. Staged inbox pieces whose copies are done (see post_staged).
  post_staged();

  // 4. The active command, piece by piece, as resources allow.
  while (s.active && !s.free_ops.empty()) {
    const proxy::Command& c = s.cur;
    const proxy::Op kind = proxy::tag_op(c.tag);
    const int pe = static_cast<int>(c.pe);
    const std::size_t left = c.bytes - s.cur_done;
    const bool with_signal = kind == proxy::Op::kPutSignal || kind == proxy::Op::kSignal;
    const char* src = reinterpret_cast<const char*>(c.src) + s.cur_done;

    if (s.layout.data) {
      // Inbox path: one piece per inbox slot; the last one carries the signal.
      if (left == 0 && (!with_signal || s.cur_signal_sent)) {
        s.active = false;
        break;
      }
      const std::size_t piece = std::min<std::size_t>({left, kPieceBytes, transport_->max_write() - kInboxHeader});
      const bool signal_here = with_signal && piece == left;  // the last piece carries it
      if (!stage_piece(pe, c, c.dest + s.cur_done, src, piece, signal_here)) break;
      s.cur_since = Clock::now();  // progress: the age check measures time without it
      s.cur_done += piece;
      if (signal_here) s.cur_signal_sent = true;
      busy = true;
      continue;
    }

    // Host path: data written straight into the target's heap, signals as
    // inbox pieces after it. To this PE itself: applied here, by the thread
    // that also applies the peers' signals (step 3), so one thread writes
    // every signal word of this heap.
    if (pe == s.me) {
      if (c.bytes) std::memmove(s.heap + c.dest, src, c.bytes);
      if (kind != proxy::Op::kPut) apply_host_signal(s.heap, c.sig, c.sig_op, c.sig_value);
      s.active = false;
      busy = true;
      break;
    }
    if (kind == proxy::Op::kSignal) {
      if (!stage_piece(pe, c, 0, nullptr, 0, true)) break;
      s.active = false;
      busy = true;
      break;
    }
    NVST_REQUIRE(!c.src_on_device, "proxy: a GPU source for a PE with a host heap (ticket ", proxy::tag_ticket(c.tag),
                 ")");
    if (left > 0) {
      const bool direct = src >= s.heap && src + left <= s.heap + s.heap_bytes;
      int slot = -1;
      std::size_t piece = std::min(left, transport_->max_write());
      const char* from = src;
      if (!direct) {
        if (s.free_slots.empty()) break;  // wait for a staging slot to come back
        slot = s.free_slots.back();
        piece = std::min<std::size_t>({left, kPieceBytes, transport_->max_write()});
        char* bounce = s.stage + static_cast<std::size_t>(slot) * kSlotBytes;
        std::memcpy(bounce, src, piece);
        from = bounce;
      }
      InFlight* op = s.take(InFlight::kHeapWrite, pe);
      op->stage_slot = slot;
      op->group = s.cur_group;
      if (!transport_->write(pe, from, piece, fabric::Region::kHeap, c.dest + s.cur_done, op)) break;
      s.commit(op);
      s.cur_since = Clock::now();
      if (slot >= 0) s.free_slots.pop_back();
      if (s.cur_group >= 0) ++s.groups[static_cast<std::size_t>(s.cur_group)].remaining;
      s.cur_done += piece;
      busy = true;
    }
    if (s.cur_done == c.bytes) {
      s.active = false;
      if (s.cur_group >= 0) {
        auto& g = s.groups[static_cast<std::size_t>(s.cur_group)];
        g.all_posted = true;
        if (g.remaining == 0) s.ready_signals.push_back(s.cur_group);
      }
    }
  }

  // 5. fence / quiet: wait for everything before them.
  // Ends a fence or quiet whose work has drained; a quiet publishes it.
  auto release_blocked = [&] {
    s.blocked = false;
    if (!s.blocked_is_quiet) return;
    s.blocked_fifo->set_completed(s.blocked_ticket + 1);
    s.trace.add(ProxyTrace::kQuietDone, -1, s.blocked_ticket);
  };
  if (s.blocked) {
    if (!s.drained()) return busy;
    release_blocked();
    busy = true;
  }

  // 6. A new command: the kernels' FIFO first, then the host's. A host
  // quiet (barrier_all, finalize) runs after cudaDeviceSynchronize, when every
  // kernel command is published; taking those first puts them before it.
  // Up to 64 commands per round while they finish at once (no-ops, a quiet
  // with nothing outstanding), so one fabric progress call serves many.
  for (int taken = 0; taken < 64 && !s.active && !s.blocked; ++taken) {
    proxy::Command c;
    proxy::Consumer* from = nullptr;
    if (s.dev_consumer && s.dev_consumer->poll(c)) from = s.dev_consumer.get();
    else if (s.host_consumer.poll(c)) from = &s.host_consumer;
    if (from == nullptr) {
      if (s.drained()) {  // everything taken has finished
        s.host_consumer.set_completed(s.host_consumer.head());
        if (s.dev_consumer) s.dev_consumer->set_completed(s.dev_consumer->head());
      }
      break;
    }
    const proxy::Op kind = proxy::tag_op(c.tag);
    NVST_REQUIRE(c.pe < static_cast<std::uint32_t>(s.layout.world) || kind == proxy::Op::kFence ||
                     kind == proxy::Op::kQuiet || kind == proxy::Op::kNop,
                 "proxy: command for PE ", c.pe, " out of range (ticket ", proxy::tag_ticket(c.tag), ")");
    switch (kind) {
      case proxy::Op::kPut:
      case proxy::Op::kPutSignal:
      case proxy::Op::kSignal:
        // The symmetric heap (most kernel sources) is known without asking.
        s.cur_by_kernel = from == s.dev_consumer.get() && kind != proxy::Op::kSignal && c.bytes && !s.in_heap(c.src);
        if (s.cur_by_kernel) {
          CallWatch::Mark mark(cuda_call_, "cudaPointerGetAttributes on a put's source");
          s.cur_by_kernel = !driver_knows(reinterpret_cast<const void*>(c.src));
        }
        s.active = true;
        s.cur_since = Clock::now();
        s.cur = c;
        s.trace.add(from == &s.host_consumer ? ProxyTrace::kTaken : ProxyTrace::kTakenFromKernel,
                    static_cast<int>(c.pe), kind == proxy::Op::kSignal ? 0 : c.bytes);
        if (kind == proxy::Op::kSignal) s.cur.bytes = 0;
        s.cur_done = 0;
        s.cur_signal_sent = false;
        s.cur_group = -1;
        if (kind == proxy::Op::kPutSignal && !s.layout.data && c.pe != static_cast<std::uint32_t>(s.me)) {
          if (s.free_groups.empty()) {
            s.groups.emplace_back();
            s.free_groups.push_back(static_cast<int>(s.groups.size()) - 1);
          }
          s.cur_group = s.free_groups.back();
          s.free_groups.pop_back();
          s.groups[static_cast<std::size_t>(s.cur_group)] = State::Group{0, false, c};
        }
        break;
      case proxy::Op::kNop:
        break;
      case proxy::Op::kFence:
      case proxy::Op::kQuiet:
        s.blocked = true;
        s.blocked_is_quiet = kind == proxy::Op::kQuiet;
        s.blocked_fifo = from;
        s.blocked_ticket = proxy::tag_ticket(c.tag);
        s.drain_state = ~0ull;  // the age check starts its clock at its first look
        s.drain_same_since = Clock::now();
        if (s.drained()) release_blocked();  // nothing outstanding: done at once
        break;
      default:
        NVST_FAIL("proxy: unknown command op ", static_cast<int>(kind), " (ticket ", proxy::tag_ticket(c.tag), ")");
    }
    busy = true;
  }
  return busy;
}

}  // namespace nvst
