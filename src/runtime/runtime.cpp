// nvst::init and the host API: the process-wide runtime state and the
// functions of <nvst/nvst.hpp>.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "device/device_runtime.hpp"
#include "nvst/nvst.hpp"
#include "base/backoff.hpp"
#include "base/bootstrap.hpp"
#include "base/error_hooks.hpp"
#include "base/socket.hpp"
#include "runtime/heap_allocator.hpp"
#include "runtime/heap_backing.hpp"
#include "base/launch_env.hpp"
#include "runtime/runtime_internal.hpp"
#include "nvst/settings.hpp"
#include "runtime/teams.hpp"
#include "transport/proxy.hpp"

namespace nvst {

namespace {

constexpr std::size_t kDefaultAlignment = 256;

// What each PE tells the others at start-up.
struct PeerInfo {
  char hostname[64];
  char boot_id[40];
  char pci_bus_id[32];
  std::int32_t device;  // -1: no GPU
  std::int32_t heap_kind;
  std::uint64_t heap_bytes;
  std::int32_t pid;
  std::int32_t pad;
};

// Which GPU a PE has, as text ("host/boot/PCI bus"; "" without one): PEs
// with the same text share that GPU.
std::string gpu_key(const PeerInfo& o) {
  if (o.device < 0) return "";
  return std::string(o.hostname) + "/" + o.boot_id + "/" + o.pci_bus_id;
}

struct Runtime {
  LaunchInfo launch;
  std::unique_ptr<Bootstrap> bootstrap;
  std::vector<PeerInfo> peers;
  std::vector<int> node_pes;  // world ranks of this PE's node
  int node_index = 0;
  int device = -1;
  HeapKind kind = HeapKind::kHost;
  std::unique_ptr<HeapBacking> heap;
  std::unique_ptr<HeapAllocator> allocator;
  dev::DeviceError* mailbox = nullptr;  // pinned, mapped
  int* dead_pe = nullptr;               // pinned, mapped (DeviceState::dead_pe)
  ProxyOwner proxy;                     // when some PE is beyond load/store
  std::uint64_t alloc_calls = 0;
  std::unique_ptr<detail::TeamTable> teams;
  // The watch thread may call into the proxy: stopped before members go.
  ~Runtime() {
    if (bootstrap) bootstrap->stop_watch();
  }
};

std::unique_ptr<Runtime> g_rt;
std::uint64_t g_init_generation = 0;

// A PE that exits without finalize() (an exception out of main, exit() in a
// handler, a crash a provider's signal handler turns into exit) must not
// run the runtime's destructors at static destruction: its proxy thread
// would copy through a CUDA that has torn itself down, and the NVSHMEM
// heap's nvshmem_free is collective (peers may be gone) and takes a lock
// NVSHMEM's own exit handler has destroyed by then ("mutex lock failed",
// then a hang in exit). So the proxy stops and the rest is left to the OS.
void abandon_at_exit() {
  if (!g_rt) return;
  if (g_rt->bootstrap) g_rt->bootstrap->stop_watch();
  g_rt->proxy.reset();
  (void)g_rt.release();  // deliberately leaked: the process is ending
}

Runtime& rt(const char* fn) {
  NVST_REQUIRE(
      g_rt != nullptr, "nvst::", fn, " called ",
      g_init_generation == 0 ? "before nvst::init()" : "after nvst::finalize() (and before a new nvst::init())");
  return *g_rt;
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

void copy_str(char* dst, std::size_t cap, const std::string& s) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, s.data(), std::min(cap - 1, s.size()));
}

int visible_gpu_count() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: not an error for host PEs
    return 0;
  }
  return n;
}

HeapKind parse_heap_kind(const std::string& s) {
  if (s == "auto") return HeapKind::kAuto;
  if (s == "cumem") return HeapKind::kCuMem;
  if (s == "cudaipc") return HeapKind::kCudaIpc;
  if (s == "host") return HeapKind::kHost;
  if (s == "nvshmem") return HeapKind::kNvshmem;
  NVST_FAIL("NVST_HEAP='", s, "' is not one of auto, cumem, cudaipc, host, nvshmem");
}

// The node of this PE: PEs on the same host (same hostname and boot id),
// then split into logical nodes of NVST_NODE_SIZE. A node must be a
// contiguous range of world ranks (what every launcher produces).
void compute_node(Runtime& r) {
  const PeerInfo& me = r.peers[static_cast<std::size_t>(r.launch.rank)];
  std::vector<int> host_pes;
  for (int p = 0; p < r.launch.world; ++p) {
    const PeerInfo& o = r.peers[static_cast<std::size_t>(p)];
    if (std::strcmp(o.hostname, me.hostname) == 0 && std::strcmp(o.boot_id, me.boot_id) == 0) host_pes.push_back(p);
  }
  for (std::size_t i = 1; i < host_pes.size(); ++i)
    NVST_REQUIRE(host_pes[i] == host_pes[i - 1] + 1, "the PEs on host ", me.hostname,
                 " are not a contiguous range of ranks (", host_pes[i - 1], ", ", host_pes[i],
                 "); launch ranks node by node");
  int idx = static_cast<int>(std::find(host_pes.begin(), host_pes.end(), r.launch.rank) - host_pes.begin());
  int k = settings::node_size().value_or(static_cast<int>(host_pes.size()));
  int first = idx / k * k;
  int last = std::min(first + k, static_cast<int>(host_pes.size()));
  r.node_pes.assign(host_pes.begin() + first, host_pes.begin() + last);
  r.node_index = idx - first;
  NVST_REQUIRE(static_cast<int>(r.node_pes.size()) <= dev::kMaxNodePes, "a node of ", r.node_pes.size(),
               " PEs exceeds the supported ", dev::kMaxNodePes);
}

void check_agreement(const Runtime& r) {
  const PeerInfo& me = r.peers[static_cast<std::size_t>(r.launch.rank)];
  for (int p = 0; p < r.launch.world; ++p) {
    const PeerInfo& o = r.peers[static_cast<std::size_t>(p)];
    NVST_REQUIRE(o.heap_bytes == me.heap_bytes, "PEs disagree on the symmetric heap size: rank ", r.launch.rank,
                 " has ", me.heap_bytes, " bytes, rank ", p, " has ", o.heap_bytes,
                 " (NVST_SYMMETRIC_SIZE must be the same everywhere)");
    NVST_REQUIRE(o.heap_kind == me.heap_kind, "PEs disagree on the heap kind: rank ", r.launch.rank, " uses ",
                 heap_kind_name(static_cast<HeapKind>(me.heap_kind)), ", rank ", p, " uses ",
                 heap_kind_name(static_cast<HeapKind>(o.heap_kind)));
  }
}

void upload_state(Runtime& r) {
  if (r.device < 0) return;
  dev::DeviceState s{};
  s.my_pe = r.launch.rank;
  s.n_pes = r.launch.world;
  s.node_first_pe = r.node_pes.front();
  s.node_n_pes = static_cast<int>(r.node_pes.size());
  s.heap_base = r.heap->local_base();
  s.heap_size = r.heap->size();
  for (int i = 0; i < s.node_n_pes; ++i) s.peer_base[i] = r.heap->peer_base(i);
  s.barrier_seq = reinterpret_cast<std::uint64_t*>(s.heap_base);
  s.barrier_flags = reinterpret_cast<std::uint64_t*>(s.heap_base + 64);
  s.timeout_ns = static_cast<std::uint64_t>(settings::device_timeout_s() * 1e9);
  s.error = r.mailbox;
  s.dead_pe = r.dead_pe;
  if (r.proxy) {
    s.fifo = r.proxy->device_fifo_for_device();
    s.fifo_tail = r.proxy->device_tail();
    s.fifo_head_cache = r.proxy->device_head_cache();
    s.stage_ring = r.proxy->device_stage_ring();
    s.stage_done = r.proxy->device_stage_done();
    s.stage_tickets = r.proxy->device_stage_tickets();
    s.stage_slots = static_cast<std::uint64_t>(Proxy::device_stage_slots());
    s.stage_piece_bytes = r.proxy->staged_piece_bytes();
  }
  // The PEs that share this GPU, and this PE's place among them.
  const std::string mine = gpu_key(r.peers[static_cast<std::size_t>(r.launch.rank)]);
  for (int p = 0; p < r.launch.world; ++p)
    if (gpu_key(r.peers[static_cast<std::size_t>(p)]) == mine) {
      ++s.gpu_sharers;
      if (p < r.launch.rank) ++s.gpu_turn;
    }
  s.initialized = 1;
  s.backend = r.kind == HeapKind::kNvshmem ? dev::kBackendNvshmem : dev::kBackendNvst;
  detail::upload_device_state(s);
}

void check_pe(const Runtime& r, int pe, const char* fn) {
  NVST_REQUIRE(pe >= 0 && pe < r.launch.world, "nvst::", fn, ": PE ", pe, " out of range [0, ", r.launch.world, ")");
}

void check_symmetric(const Runtime& r, const void* addr, std::size_t bytes, const char* fn, const char* what) {
  const char* base = r.heap->local_base();
  const char* p = static_cast<const char*>(addr);
  const std::size_t size = r.heap->size();
  NVST_REQUIRE(
      p >= base + dev::kReservedHeapBytes && bytes <= size && static_cast<std::size_t>(p - base) <= size - bytes,
      "nvst::", fn, ": ", what, " ", addr, " (+", bytes,
      " bytes) is not inside the symmetric heap's allocatable range [",
      static_cast<const void*>(base + dev::kReservedHeapBytes), ", ", static_cast<const void*>(base + size), ")");
}

void init_after_bootstrap(Runtime& r, HeapKind kind, std::size_t heap_bytes);

}  // namespace

const char* heap_kind_name(HeapKind kind) {
  switch (kind) {
    case HeapKind::kAuto: return "auto";
    case HeapKind::kCuMem: return "cumem";
    case HeapKind::kCudaIpc: return "cudaipc";
    case HeapKind::kHost: return "host";
    case HeapKind::kNvshmem: return "nvshmem";
  }
  return "?";
}

void init(const InitOptions& options) {
  NVST_REQUIRE(g_rt == nullptr, "nvst::init called twice without nvst::finalize");
  auto r = std::make_unique<Runtime>();
  r->launch = launch_info_from_environment();
  detail::set_error_rank(r->launch.rank);

  HeapKind kind = options.heap_kind;
  const std::string backend =
      !options.backend.empty() ? options.backend : settings::get("NVST_BACKEND").value_or("nvst");
  NVST_REQUIRE(backend == "nvst" || backend == "nvshmem", options.backend.empty() ? "NVST_BACKEND=" : "backend ",
               backend, " is not one of nvst, nvshmem");
  if (kind == HeapKind::kAuto && backend == "nvshmem") kind = HeapKind::kNvshmem;
  if (kind == HeapKind::kAuto) kind = parse_heap_kind(settings::get("NVST_HEAP").value_or("auto"));
  NVST_REQUIRE(kind != HeapKind::kNvshmem || nvshmem_backend_built(),
               "NVST_BACKEND=nvshmem: this program has no NVSHMEM backend (it needs a build that found NVSHMEM "
               "and a program linked to nvst::nvst_nvshmem, such as nvst_gpu_tests_nvshmem)");
  const int gpus = kind == HeapKind::kHost ? 0 : visible_gpu_count();
  if (kind == HeapKind::kAuto) kind = gpus > 0 ? HeapKind::kCuMem : HeapKind::kHost;
  if (kind != HeapKind::kHost) {
    NVST_REQUIRE(gpus > 0, "heap kind ", heap_kind_name(kind),
                 " needs a GPU and none is visible (NVST_HEAP=host runs without one)");
    int want = static_cast<int>(settings::get_int("NVST_DEVICE").value_or(r->launch.local_rank % gpus));
    NVST_REQUIRE(want >= 0 && want < gpus, "device ", want, " out of range: ", gpus, " GPU(s) visible (local rank ",
                 r->launch.local_rank, ")");
    r->device = want;
    NVST_CHECK_CUDA(cudaSetDevice(r->device));
    NVST_CHECK_CUDA(cudaFree(nullptr));  // create the context now
  }
  r->kind = kind;
  const std::size_t heap_bytes =
      options.heap_bytes ? options.heap_bytes : settings::heap_bytes(kind == HeapKind::kHost);
  NVST_REQUIRE(heap_bytes > dev::kReservedHeapBytes, "symmetric heap of ", heap_bytes,
               " bytes is too small (the runtime reserves ", dev::kReservedHeapBytes, ")");

  r->bootstrap = std::make_unique<Bootstrap>(r->launch.id, r->launch.rank, r->launch.world, settings::host_timeout_s());
  try {
    init_after_bootstrap(*r, kind, heap_bytes);
  } catch (const std::exception& e) {
    // Tell the others why, so they report this instead of a closed socket.
    r->bootstrap->abort(e.what());
    throw;
  }
  g_rt = std::move(r);
  ++g_init_generation;
}

namespace {
void init_after_bootstrap(Runtime& rr, HeapKind kind, std::size_t heap_bytes) {
  Runtime* r = &rr;
  PeerInfo mine{};
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  copy_str(mine.hostname, sizeof(mine.hostname), host);
  copy_str(mine.boot_id, sizeof(mine.boot_id), read_first_line("/proc/sys/kernel/random/boot_id"));
  mine.device = r->device;
  if (r->device >= 0) NVST_CHECK_CUDA(cudaDeviceGetPCIBusId(mine.pci_bus_id, sizeof(mine.pci_bus_id), r->device));
  mine.heap_kind = static_cast<std::int32_t>(kind);
  mine.heap_bytes = heap_bytes;
  mine.pid = static_cast<std::int32_t>(::getpid());
  auto all = r->bootstrap->allgather(&mine, sizeof(mine), "init: peer info");
  r->peers.resize(static_cast<std::size_t>(r->launch.world));
  std::memcpy(r->peers.data(), all.data(), all.size());
  check_agreement(*r);
  compute_node(*r);
  r->teams = std::make_unique<detail::TeamTable>(r->launch.world, r->launch.rank, r->node_pes.front(),
                                                 static_cast<int>(r->node_pes.size()));

  NodeContext node{
      r->bootstrap.get(),        r->launch.rank, r->node_pes, r->node_index, r->device, r->bootstrap->cookie(),
      settings::host_timeout_s()};
  switch (kind) {
    case HeapKind::kCuMem: r->heap = make_cumem_heap(heap_bytes, node); break;
    case HeapKind::kCudaIpc: r->heap = make_cudaipc_heap(heap_bytes, node); break;
    case HeapKind::kNvshmem: r->heap = make_nvshmem_heap(heap_bytes, node, r->launch.world); break;
    default: r->heap = make_host_heap(heap_bytes); break;
  }
  r->allocator = std::make_unique<HeapAllocator>(dev::kReservedHeapBytes, r->heap->size());

  // The proxy and fabric transport, when some PE is out of load/store reach
  // (another node; any other PE with host heaps). Every PE decides alike:
  // the node layout and heap kind are the same everywhere.
  const bool someone_remote =
      kind == HeapKind::kHost ? r->launch.world > 1 : static_cast<int>(r->node_pes.size()) < r->launch.world;
  const bool proxy_on = settings::get("NVST_PROXY").value_or("1") != "0";
  if (someone_remote && proxy_on) {
    const HeapShare share = r->heap->share();
    const net::Fd share_fd(share.cumem_fd);  // the agent has its own copy once started
    r->proxy = ProxyOwner(new Proxy(*r->bootstrap, r->heap->local_base(), r->heap->size(),
                                    r->heap->on_device() ? r->device : -1, settings::host_timeout_s(),
                                    r->launch.local_world, share));
    Bootstrap* boot = r->bootstrap.get();
    r->proxy->on_own_failure([boot](const std::string& why, int pe) { return boot->report_failure(why, pe); });
  }
  if (r->device >= 0) {
    // Zero the heap (barrier words included) before any peer may write it.
    NVST_CHECK_CUDA(cudaMemset(r->heap->local_base(), 0, r->heap->size()));
    NVST_CHECK_CUDA(
        cudaHostAlloc(reinterpret_cast<void**>(&r->mailbox), sizeof(dev::DeviceError), cudaHostAllocMapped));
    std::memset(r->mailbox, 0, sizeof(dev::DeviceError));
    NVST_CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&r->dead_pe), sizeof(int), cudaHostAllocMapped));
    std::atomic_ref<int>(*r->dead_pe).store(-1);
    dev::DeviceError* mailbox = r->mailbox;
    detail::set_device_error_describer([mailbox] { return detail::describe_device_error(mailbox); });
    upload_state(*r);
    detail::preload_runtime_kernels();  // also the proxy's, built above
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
  }
  // What a death the bootstrap's watch learns of stops: the proxy (its
  // producers' waits, kernels' FIFO waits) and kernels' own waits (dead_pe).
  Proxy* proxy = r->proxy.get();
  const bool shm = proxy && proxy->provider() == "shm";
  int* dead_pe = r->dead_pe;
  r->bootstrap->on_failure([proxy, shm, dead_pe](const std::string& why, int rank) {
    detail::note_job_failure(why);
    if (dead_pe && rank >= 0) std::atomic_ref<int>(*dead_pe).store(rank, std::memory_order_release);
    if (proxy) proxy->fail_from_outside(why);
    if (shm) fabric::remove_stale_shm_regions();  // the dead PE's, once it has ended
  });
  r->bootstrap->barrier("init: heaps ready");
  // After the heap: CUDA and NVSHMEM have registered their exit handlers by
  // now, and handlers run in reverse order of registration, so this one
  // runs before theirs (once per init: a later init may start NVSHMEM).
  std::atexit(abandon_at_exit);
}
}  // namespace

void finalize() {
  Runtime& r = rt("finalize");
  // Everyone stops touching peers' heaps before anyone unmaps; barrier_all
  // quiets this PE's proxy first, so after it no write to anyone is pending.
  barrier_all();
  // The job ends on purpose from here: peers that finish first close their
  // connections, which is no failure. A death from now on is still
  // reported by the last barrier.
  r.bootstrap->stop_watch();
  r.proxy.reset();
  detail::set_device_error_describer(nullptr);
  r.heap.reset();
  if (r.mailbox) cudaFreeHost(r.mailbox);
  if (r.dead_pe) cudaFreeHost(r.dead_pe);  // the watch is stopped: nobody writes it
  r.bootstrap->barrier("finalize");
  g_rt.reset();
}

bool initialized() { return g_rt != nullptr; }
int my_pe() { return rt("my_pe").launch.rank; }
int n_pes() { return rt("n_pes").launch.world; }
int device() { return rt("device").device; }
HeapKind heap_kind() { return rt("heap_kind").kind; }

int team_my_pe(Team team) { return rt("team_my_pe").teams->shape(team, "team_my_pe").my_index; }
int team_n_pes(Team team) { return rt("team_n_pes").teams->shape(team, "team_n_pes").size; }
int team_translate_pe(Team team, int team_pe) {
  const detail::TeamShape& t = rt("team_translate_pe").teams->shape(team, "team_translate_pe");
  NVST_REQUIRE(team_pe >= 0 && team_pe < t.size, "nvst::team_translate_pe: PE ", team_pe, " out of range [0, ", t.size,
               ") of team ", static_cast<int>(team));
  return t.world_pe(team_pe);
}

namespace {
// A split is collective over the world: every PE publishes its call (which
// split, its arguments, how many teams it has, and whether its own checks
// passed), and every PE fails, naming the first PE that differs, unless all
// calls are the same. So a bad argument on one PE is refused on all of them
// rather than leaving the others waiting.
template <typename Split>
auto agreed_split(const char* fn, std::int32_t kind, std::initializer_list<std::int32_t> args, Split split) {
  Runtime& r = rt(fn);
  struct Call {
    std::int32_t kind, args[4], teams, ok;
    char why[180];
  } mine{};
  mine.kind = kind;
  std::size_t i = 0;
  for (std::int32_t a : args) mine.args[i++] = a;
  mine.teams = r.teams->count();
  decltype(split()) made{};
  try {
    made = split();
    mine.ok = 1;
  } catch (const Error& e) {
    std::snprintf(mine.why, sizeof(mine.why), "%s", e.what());
  }
  auto all = r.bootstrap->allgather(&mine, sizeof(mine), fn);
  for (int p = 0; p < r.launch.world; ++p) {
    Call c;
    std::memcpy(&c, all.data() + sizeof(Call) * static_cast<std::size_t>(p), sizeof(c));
    NVST_REQUIRE(c.ok, "nvst::", fn, " failed on PE ", p, ": ", c.why);
    NVST_REQUIRE(c.kind == mine.kind && std::equal(c.args, c.args + 4, mine.args) && c.teams == mine.teams,
                 "nvst::", fn, ": PE ", p, " made a different call (", c.teams, " teams so far, arguments ", c.args[0],
                 ", ", c.args[1], ", ", c.args[2], ", ", c.args[3], ") than PE ", r.launch.rank, " (", mine.teams,
                 " teams so far, arguments ", mine.args[0], ", ", mine.args[1], ", ", mine.args[2], ", ", mine.args[3],
                 "); every PE must create the same teams in the same order");
  }
  return made;
}
}  // namespace

Team team_split_strided(Team parent, int start, int stride, int size) {
  const char* fn = "team_split_strided";
  auto shape = agreed_split(fn, 1, {static_cast<int>(parent), start, stride, size},
                            [&] { return g_rt->teams->split_strided(parent, start, stride, size, fn); });
  return g_rt->teams->add(shape, fn);
}

std::pair<Team, Team> team_split_2d(Team parent, int xrange) {
  const char* fn = "team_split_2d";
  auto shapes = agreed_split(fn, 2, {static_cast<int>(parent), xrange, 0, 0},
                             [&] { return g_rt->teams->split_2d(parent, xrange, fn); });
  NVST_REQUIRE(g_rt->teams->count() + 2 <= detail::TeamTable::kMaxTeams, "nvst::", fn, ": at most ",
               detail::TeamTable::kMaxTeams, " teams");
  const Team x = g_rt->teams->add(shapes.first, fn);
  return {x, g_rt->teams->add(shapes.second, fn)};
}

void* align(std::size_t alignment, std::size_t bytes) {
  Runtime& r = rt("malloc");
  NVST_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0, "nvst::align: alignment ", alignment,
               " is not a power of two");
  // Every PE checks that every PE asked for the same thing, so a mismatch is
  // reported everywhere instead of corrupting offsets.
  struct Request {
    std::uint64_t bytes, alignment, call;
  } req{bytes, alignment, ++r.alloc_calls};
  auto all = r.bootstrap->allgather(&req, sizeof(req), "malloc");
  std::vector<Request> reqs(static_cast<std::size_t>(r.launch.world));
  std::memcpy(reqs.data(), all.data(), all.size());
  bool same = std::all_of(reqs.begin(), reqs.end(), [&](const Request& o) {
    return o.bytes == req.bytes && o.alignment == req.alignment && o.call == req.call;
  });
  if (!same) {
    std::ostringstream who;
    for (int p = 0; p < r.launch.world; ++p) {
      const Request& o = reqs[static_cast<std::size_t>(p)];
      who << (p ? "; " : "") << "rank " << p << ": " << o.bytes << " bytes, alignment " << o.alignment
          << ", allocation #" << o.call;
    }
    NVST_FAIL("nvst::malloc: PEs disagree on the symmetric allocation (", who.str(), ")");
  }
  if (bytes == 0) return nullptr;
  auto off = r.allocator->allocate(bytes, std::max<std::size_t>(alignment, 16));
  NVST_REQUIRE(off.has_value(), "nvst::malloc: symmetric heap exhausted: asked ", bytes, " bytes (alignment ",
               alignment, "), largest free block ", r.allocator->largest_free_block(), " of ",
               r.allocator->free_bytes(), " free bytes; heap size ", r.heap->size(),
               " (raise NVST_SYMMETRIC_SIZE or InitOptions::heap_bytes)");
  return r.heap->local_base() + *off;
}

void* malloc(std::size_t bytes) { return align(kDefaultAlignment, bytes); }

void* calloc(std::size_t count, std::size_t size) {
  NVST_REQUIRE(size == 0 || count <= SIZE_MAX / size, "nvst::calloc: ", count, " x ", size, " bytes overflows");
  const std::size_t bytes = count * size;
  void* p = malloc(bytes);
  if (p == nullptr) return p;
  if (rt("calloc").heap->on_device()) {
    NVST_CHECK_CUDA(cudaMemset(p, 0, bytes));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
  } else {
    std::memset(p, 0, bytes);
  }
  // Zeroed everywhere before anyone returns: a peer's put issued right after
  // its calloc must not land before a slower PE's memset (which would erase
  // it). CollHost.TeamCollectivesAndTheirComposition lost such a put.
  rt("calloc").bootstrap->barrier("calloc: zeroed");
  return p;
}

void free(void* ptr) {
  Runtime& r = rt("free");
  if (ptr == nullptr) return;
  const char* base = r.heap->local_base();
  const char* p = static_cast<const char*>(ptr);
  NVST_REQUIRE(p >= base && p < base + r.heap->size(), "nvst::free: pointer ", ptr, " is not in the symmetric heap");
  const std::size_t off = static_cast<std::size_t>(p - base);
  NVST_REQUIRE(r.allocator->block_size(off) > 0, "nvst::free: pointer ", ptr,
               " was not returned by nvst::malloc (or was freed already)");
  barrier_all();
  r.allocator->release(off);
}

std::size_t heap_size() { return rt("heap_size").heap->size(); }
std::size_t heap_free_bytes() { return rt("heap_free_bytes").allocator->free_bytes(); }
std::shared_ptr<void> heap_lease() { return rt("heap_lease").heap->lease(); }

bool is_symmetric(const void* addr, std::size_t bytes) {
  Runtime& r = rt("is_symmetric");
  const char* base = r.heap->local_base();
  const char* p = static_cast<const char*>(addr);
  return p >= base && bytes <= r.heap->size() && static_cast<std::size_t>(p - base) <= r.heap->size() - bytes;
}

void* ptr(const void* addr, int pe) {
  Runtime& r = rt("ptr");
  check_pe(r, pe, "ptr");
  NVST_REQUIRE(is_symmetric(addr, 1), "nvst::ptr: address ", addr, " is not in the symmetric heap");
  if (pe == r.launch.rank) return const_cast<void*>(addr);
  auto it = std::find(r.node_pes.begin(), r.node_pes.end(), pe);
  if (it == r.node_pes.end()) return nullptr;
  char* peer = r.heap->peer_base(static_cast<int>(it - r.node_pes.begin()));
  if (peer == nullptr) return nullptr;
  return peer + (static_cast<const char*>(addr) - r.heap->local_base());
}

void barrier_all() {
  Runtime& r = rt("barrier_all");
  if (r.device >= 0) NVST_CHECK_CUDA(cudaDeviceSynchronize());
  // On NVSHMEM, its quiet and then our bootstrap's barrier rather than
  // nvshmem_barrier_all: ours times out and names a PE that died.
  if (r.kind == HeapKind::kNvshmem) nvshmem_ops::quiet();
  if (r.proxy) r.proxy->quiet();
  r.bootstrap->barrier("barrier_all");
}

void barrier_all_on_stream(cudaStream_t stream) {
  Runtime& r = rt("barrier_all_on_stream");
  NVST_REQUIRE(r.device >= 0, "nvst::barrier_all_on_stream needs a GPU (this PE has a host heap)");
  for (int pe = 0; pe < r.launch.world; ++pe)
    NVST_REQUIRE(std::find(r.node_pes.begin(), r.node_pes.end(), pe) != r.node_pes.end(),
                 "nvst::barrier_all_on_stream: PE ", pe,
                 " is on another node; device barriers across nodes need the proxy transport");
  detail::launch_barrier_all(stream);  // on NVSHMEM too: the kernel's wait has our timeout (sync.cuh)
}

namespace {
void* peer_or_throw(Runtime& r, const void* sym, int pe, const char* fn) {
  void* p = ptr(sym, pe);
  NVST_REQUIRE(p != nullptr, "nvst::", fn, ": PE ", pe, " is not reachable from PE ", r.launch.rank,
               " by the copy engine (not on this node, or a host heap)");
  return p;
}

// The remote side of a host put (dest) or get (src) on NVSHMEM: our heap's
// allocatable range, as on our own heaps, or memory NVSHMEM's heap holds
// outside ours (nvshmem4py's tensors, an application's nvshmem_malloc),
// which NVSHMEM's put and get reach as well. A range that touches our heap
// must lie in its allocatable part: the head holds our barrier flags.
void check_nvshmem_remote(const Runtime& r, const void* addr, std::size_t bytes, const char* fn, const char* what) {
  const auto base = reinterpret_cast<std::uintptr_t>(r.heap->local_base());
  const auto p = reinterpret_cast<std::uintptr_t>(addr);
  const bool touches_ours = p < base + r.heap->size() && (p >= base || base - p < bytes);  // bytes > 0
  if (touches_ours) return check_symmetric(r, addr, bytes, fn, what);
  NVST_REQUIRE(nvshmem_ops::in_heap(addr, bytes), "nvst::", fn, ": ", what, " ", addr, " (+", bytes,
               " bytes) is in neither nvst's symmetric heap [", static_cast<const void*>(r.heap->local_base()), ", ",
               static_cast<const void*>(r.heap->local_base() + r.heap->size()),
               ") nor NVSHMEM's (nvshmem_malloc, nvshmem4py's tensors)");
}

// putmem[_on_stream] (kPut: dest is the remote side) and getmem[_on_stream]
// (kGet: src is); `fn` names the caller's call.
enum class Copy { kPut, kGet };
void copy_on_stream(const char* fn, Copy dir, void* dest, const void* src, std::size_t bytes, int pe,
                    cudaStream_t stream) {
  Runtime& r = rt(fn);
  check_pe(r, pe, fn);
  if (bytes == 0) return;
  const bool put = dir == Copy::kPut;
  const void* sym = put ? static_cast<const void*>(dest) : src;
  const char* what = put ? "dest" : "src";
  NVST_REQUIRE((put ? src : dest) != nullptr, "nvst::", fn, ": ", put ? "src" : "dest", " is null");
  if (r.kind == HeapKind::kNvshmem) {  // one node: NVSHMEM reaches every PE
    check_nvshmem_remote(r, sym, bytes, fn, what);
    if (put) return nvshmem_ops::putmem_on_stream(dest, src, bytes, pe, stream);
    return nvshmem_ops::getmem_on_stream(dest, src, bytes, pe, stream);
  }
  check_symmetric(r, sym, bytes, fn, what);
  void* remote = peer_or_throw(r, sym, pe, fn);
  void* to = put ? remote : dest;
  const void* from = put ? src : remote;
  if (!r.heap->on_device()) {  // host heap: only this PE is reachable, by memcpy
    std::memmove(to, from, bytes);
    return;
  }
  NVST_CHECK_CUDA(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream));
}
}  // namespace

void putmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream) {
  copy_on_stream("putmem_on_stream", Copy::kPut, dest, src, bytes, pe, stream);
}

void getmem_on_stream(void* dest, const void* src, std::size_t bytes, int pe, cudaStream_t stream) {
  copy_on_stream("getmem_on_stream", Copy::kGet, dest, src, bytes, pe, stream);
}

namespace {
void put_common(const char* fn, void* dest, const void* src, std::size_t bytes, std::uint64_t* sig,
                std::uint64_t signal, SignalOp op, int pe, bool with_signal, bool then_quiet = false);
}  // namespace

void putmem(void* dest, const void* src, std::size_t bytes, int pe) {
  Runtime& r = rt("putmem");
  check_pe(r, pe, "putmem");
  // Beyond load/store reach, through the proxy (none on NVSHMEM: one node).
  if (bytes != 0 && r.proxy) {
    check_symmetric(r, dest, bytes, "putmem", "dest");
    if (ptr(dest, pe) == nullptr) {
      put_common("putmem", dest, src, bytes, nullptr, 0, SignalOp::kSet, pe, false, true);
      r.proxy->quiet();
      return;
    }
  }
  copy_on_stream("putmem", Copy::kPut, dest, src, bytes, pe, cudaStreamPerThread);
  if (bytes && r.heap->on_device()) NVST_CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
}

void getmem(void* dest, const void* src, std::size_t bytes, int pe) {
  copy_on_stream("getmem", Copy::kGet, dest, src, bytes, pe, cudaStreamPerThread);
  if (bytes && g_rt->heap->on_device()) NVST_CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
}

// ---- one-sided operations through the proxy --------------------------------

namespace {
Proxy& proxy_or_throw(Runtime& r, int pe, const char* fn) {
  NVST_REQUIRE(r.proxy != nullptr, "nvst::", fn, ": PE ", pe, " is not reachable from PE ", r.launch.rank,
               " by load/store and the proxy transport is off (NVST_PROXY=0, or a single-node job)");
  return *r.proxy;
}

void check_signal_word(Runtime& r, const std::uint64_t* sig, const char* fn) {
  check_symmetric(r, sig, 8, fn, "signal word");
  NVST_REQUIRE(reinterpret_cast<std::uintptr_t>(sig) % 8 == 0, "nvst::", fn, ": signal word ",
               static_cast<const void*>(sig), " is not 8-byte aligned");
}

std::uint64_t offset_of(Runtime& r, const void* sym) {
  return static_cast<std::uint64_t>(static_cast<const char*>(sym) - r.heap->local_base());
}

// Host-heap PEs write their own heap (and a signal word) directly.
void apply_signal_locally(std::uint64_t* w, std::uint64_t v, SignalOp op) {
  std::atomic_ref<std::uint64_t> a(*w);
  if (op == SignalOp::kAdd)
    a.fetch_add(v, std::memory_order_release);
  else
    a.store(v, std::memory_order_release);
}

// `then_quiet`: the caller quiets right after (a blocking put), so the
// proxy's work is left to that quiet (Proxy::push).
void put_common(const char* fn, void* dest, const void* src, std::size_t bytes, std::uint64_t* sig,
                std::uint64_t signal, SignalOp op, int pe, bool with_signal, bool then_quiet) {
  Runtime& r = rt(fn);
  check_pe(r, pe, fn);
  if (bytes) {
    NVST_REQUIRE(src != nullptr, "nvst::", fn, ": src is null");
    check_symmetric(r, dest, bytes, fn, "dest");
  }
  if (with_signal) check_signal_word(r, sig, fn);
  // Load/store reach: written here. Except signals to this PE when it has a
  // proxy: its proxy thread applies the peers' signals to the same words
  // (inbox pieces), so it applies ours too (advance_direct, proxy_send.cpp).
  const bool signal_via_proxy = with_signal && r.proxy && !r.heap->on_device();
  if (void* near = bytes ? ptr(dest, pe) : ptr(with_signal ? static_cast<void*>(sig) : dest, pe);
      near != nullptr && !signal_via_proxy) {
    NVST_REQUIRE(!r.heap->on_device(), "nvst::", fn,
                 " from the host to a PE reachable by load/store on a GPU heap: use the device API or putmem");
    if (bytes) std::memmove(near, src, bytes);
    if (with_signal) apply_signal_locally(static_cast<std::uint64_t*>(ptr(sig, pe)), signal, op);
    return;
  }
  proxy::Command c{};
  c.dest = bytes ? offset_of(r, dest) : 0;
  c.src = reinterpret_cast<std::uint64_t>(src);
  c.bytes = bytes;
  c.pe = static_cast<std::uint32_t>(pe);
  // src_on_device stays 0: on GPU heaps Proxy::push asks where src is (a
  // GPU source is staged by this thread, a host one copied by the proxy).
  if (with_signal) {
    c.sig = offset_of(r, sig);
    c.sig_value = signal;
    c.sig_op = static_cast<std::uint8_t>(op == SignalOp::kAdd ? proxy::SignalOp::kAdd : proxy::SignalOp::kSet);
  }
  const proxy::Op kind = !with_signal ? proxy::Op::kPut : bytes ? proxy::Op::kPutSignal : proxy::Op::kSignal;
  proxy_or_throw(r, pe, fn).push(c, kind, then_quiet);
}
}  // namespace

void putmem_nbi(void* dest, const void* src, std::size_t bytes, int pe) {
  if (bytes == 0) {
    check_pe(rt("putmem_nbi"), pe, "putmem_nbi");
    return;
  }
  put_common("putmem_nbi", dest, src, bytes, nullptr, 0, SignalOp::kSet, pe, false);
}

void putmem_signal_nbi(void* dest, const void* src, std::size_t bytes, std::uint64_t* sig_addr, std::uint64_t signal,
                       SignalOp op, int pe) {
  put_common("putmem_signal_nbi", dest, src, bytes, sig_addr, signal, op, pe, true);
}

void signal_op(std::uint64_t* sig_addr, std::uint64_t signal, SignalOp op, int pe) {
  put_common("signal_op", nullptr, nullptr, 0, sig_addr, signal, op, pe, true);
}

namespace detail {
void p_bytes(void* dest, const void* value, std::size_t width, int pe) {
  Runtime& r = rt("p");
  check_pe(r, pe, "p");
  check_symmetric(r, dest, width, "p", "dest");
  NVST_REQUIRE(reinterpret_cast<std::uintptr_t>(dest) % width == 0, "nvst::p: dest ", dest, " is not aligned to ",
               width, " bytes");
  if (void* near = ptr(dest, pe); near != nullptr) {
    NVST_REQUIRE(!r.heap->on_device(),
                 "nvst::p from the host to a PE reachable by load/store on a GPU heap: use the device API or putmem");
    std::memcpy(near, value, width);
    return;
  }
  proxy::Command c{};
  c.pe = static_cast<std::uint32_t>(pe);
  c.sig = offset_of(r, dest);
  std::memcpy(&c.sig_value, value, width);  // the low bytes: what a SET of this width lands
  c.sig_op = static_cast<std::uint8_t>(proxy::set_of_width(width));
  proxy_or_throw(r, pe, "p").push(c, proxy::Op::kSignal);
}
}  // namespace detail

void fence() {
  Runtime& r = rt("fence");
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (r.proxy) r.proxy->push(proxy::Command{}, proxy::Op::kFence);
}

void quiet() {
  Runtime& r = rt("quiet");
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (r.kind == HeapKind::kNvshmem) return nvshmem_ops::quiet();
  if (r.proxy) r.proxy->quiet();
}

std::uint64_t signal_wait_until(std::uint64_t* sig_addr, Cmp cmp, std::uint64_t value) {
  Runtime& r = rt("signal_wait_until");
  check_signal_word(r, sig_addr, "signal_wait_until");
  NVST_REQUIRE(!r.heap->on_device(),
               "nvst::signal_wait_until on the host needs a host heap; "
               "in a kernel use nvst::dev::signal_wait_until");
  auto holds = [&](std::uint64_t v) {
    switch (cmp) {
      case Cmp::kEq: return v == value;
      case Cmp::kNe: return v != value;
      case Cmp::kGt: return v > value;
      case Cmp::kGe: return v >= value;
      case Cmp::kLt: return v < value;
      case Cmp::kLe: return v <= value;
    }
    return false;
  };
  static const char* names[] = {"==", "!=", ">", ">=", "<", "<="};
  const int c = static_cast<int>(cmp);
  NVST_REQUIRE(c >= 0 && c < 6, "nvst::signal_wait_until: comparison ", c, " is not one of Cmp's values");
  std::atomic_ref<std::uint64_t> a(*sig_addr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(settings::host_timeout_s());
  // The proxy applies peers' signals to a host heap: this thread does that
  // work itself while the proxy thread is parked, else blocks on changes(),
  // which wakes it with the signal, not a timer later.
  std::uint64_t v = 0;
  auto ready = [&] { return holds(v = a.load(std::memory_order_acquire)); };
  auto check = [&] {
    if (r.proxy && !r.proxy->failure().empty()) throw Error(r.proxy->failure());
    if (std::string f = r.bootstrap->failure(); !f.empty()) throw Error(f);
    NVST_REQUIRE(std::chrono::steady_clock::now() < deadline, "nvst::signal_wait_until: timed out after ",
                 settings::host_timeout_s(), " s waiting for signal word at heap offset ", offset_of(r, sig_addr), " ",
                 names[static_cast<int>(cmp)], " ", value, " (last seen ", v, "; NVST_TIMEOUT_S)");
  };
  if (r.proxy) {
    r.proxy->wait_until(ready, check);
  } else {
    detail::Wakeup unrung;  // no proxy (one PE): waits look every 200 us
    detail::wait_with(unrung, ready, check);
  }
  return v;
}

std::string transport_to(int pe) {
  Runtime& r = rt("transport_to");
  check_pe(r, pe, "transport_to");
  if (pe == r.launch.rank) return "self";
  if (ptr(r.heap->local_base(), pe) != nullptr) return "nvlink";
  if (r.proxy) return "fabric:" + r.proxy->provider();
  return "none";
}

std::string gpu_of(int pe) {
  Runtime& r = rt("gpu_of");
  check_pe(r, pe, "gpu_of");
  return gpu_key(r.peers[static_cast<std::size_t>(pe)]);
}

std::string new_loopback_unique_id() { return UniqueId::create_loopback().to_string(); }
std::string new_unique_id(const std::string& host) { return UniqueId::create_for_host(host).to_string(); }

std::uint64_t detail::init_generation() { return g_init_generation; }

void detail::check_pe(int pe, const char* fn) { nvst::check_pe(rt(fn), pe, fn); }
void detail::check_symmetric(const void* addr, std::size_t bytes, const char* fn, const char* what) {
  nvst::check_symmetric(rt(fn), addr, bytes, fn, what);
}
void detail::check_signal_word(const std::uint64_t* sig, const char* fn) { nvst::check_signal_word(rt(fn), sig, fn); }
void detail::check_gpu_heap(const char* fn) {
  NVST_REQUIRE(rt(fn).heap->on_device(), "nvst::", fn,
               ": needs a GPU heap (this PE's heap is in host memory; use the host-side forms)");
}

std::vector<std::uint8_t> detail::fabric_address_of(int pe) {
  Runtime& r = rt("fabric_address_of");
  nvst::check_pe(r, pe, "fabric_address_of");
  return r.proxy ? r.proxy->transport().address(pe) : std::vector<std::uint8_t>{};
}
std::uint64_t detail::fabric_key(int pe, bool heap) {
  Runtime& r = rt("fabric_key");
  nvst::check_pe(r, pe, "fabric_key");
  return r.proxy ? r.proxy->transport().key(pe, heap ? fabric::Region::kHeap : fabric::Region::kControl) : 0;
}
std::uint64_t detail::fabric_dropped() {
  Runtime& r = rt("fabric_dropped");
  return r.proxy ? r.proxy->dropped() : 0;
}

Bootstrap& detail::runtime_bootstrap() { return *rt("runtime_bootstrap").bootstrap; }
Proxy* detail::runtime_proxy(const char* fn) { return rt(fn).proxy.get(); }
bool detail::heap_on_device(const char* fn) { return rt(fn).heap->on_device(); }
std::uint64_t detail::heap_offset(const void* sym) {
  Runtime& r = rt("heap_offset");
  NVST_REQUIRE(is_symmetric(sym, 1), "heap_offset: ", sym, " is not in the symmetric heap");
  return offset_of(r, sym);
}

double host_timeout_seconds() { return settings::host_timeout_s(); }
double device_timeout_seconds() { return settings::device_timeout_s(); }

std::vector<std::byte> bootstrap_allgather(const void* mine, std::size_t bytes) {
  return rt("bootstrap_allgather").bootstrap->allgather(mine, bytes, "bootstrap_allgather");
}
void bootstrap_broadcast(void* data, std::size_t bytes, int root) {
  rt("bootstrap_broadcast").bootstrap->broadcast(data, bytes, root, "bootstrap_broadcast");
}
void bootstrap_barrier() { rt("bootstrap_barrier").bootstrap->barrier("bootstrap_barrier"); }

}  // namespace nvst
