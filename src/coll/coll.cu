// all_reduce and all_gather on one node, written on the device API: see
// include/nvst/coll.hpp for the algorithms. The synchronisation is per
// block: block b of every PE handles the same element range, so block b
// only waits for block b of the others (flags[phase][pe][b] = epoch), never
// for a grid-wide barrier.
//
// Reuse of the workspace without a second barrier: it is double-buffered by
// epoch parity. PE X rewrites buffer (e & 1) at epoch e + 2 only after its
// epoch e + 1 kernel waited for every peer's epoch e + 1 flags, which each
// peer set only after its whole epoch e kernel (the last reader of that
// buffer) had finished, since kernels on a stream run in order.
//
// The epoch lives on the GPU (so a CUDA graph replays correctly): every
// block reads the launch counter when it starts, and the last block to
// finish advances it; no block can start after that, so all blocks of a
// launch see the same epoch, and every PE counts the same launches.
//
// This file: the API, argument checks, workspaces, algorithm choice and
// launches. The kernels are in kernels.cuh; host-memory PEs (no GPU) run
// the same algorithms from host_coll.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <array>
#include <mutex>
#include <string>
#include <vector>

#include "coll/host_coll.hpp"
#include "device/device_runtime.hpp"
#include "coll/kernels.cuh"
#include "coll/ring_layout.hpp"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "runtime/runtime_internal.hpp"
#include "nvst/settings.hpp"

namespace nvst::coll {

using namespace internal;

namespace {

// One per team (by handle), made by prepare(team).
struct Workspace {
  std::uint64_t generation = 0;    // the nvst::init it belongs to (a later init starts afresh)
  std::size_t chunk = 0;           // bytes of each buffer below (NVST_COLL_WORKSPACE)
  std::size_t slot = 0;            // push algorithms: each member's part of data[], bytes
  char* data[2] = {};              // each PE's published input (symmetric)
  char* red[2] = {};               // two-shot: reduced slices (symmetric)
  char* ll[2] = {};                // the ll push: 2 x kLowLatencyMax per member (symmetric, zeroed)
  std::uint64_t* flags = nullptr;  // [kPhases][kMaxPes][kMaxBlocks] (symmetric)
  std::uint64_t* epoch = nullptr;  // device memory: [0] launches so far, [1] blocks done
};
std::vector<Workspace> g_ws;

// The team's shape, and checks that hold for every collective: this PE is a
// member and the team is small enough. On GPUs, whether some member is on
// another node (the kernels then reach it through the proxy).
TeamView check_team(const char* fn, Team team) {
  NVST_REQUIRE(nvst::initialized(), "nvst::coll::", fn, " called before nvst::init()");
  TeamView t{static_cast<int>(team), nvst::team_my_pe(team), nvst::team_n_pes(team), 0, 1};
  NVST_REQUIRE(t.me >= 0, "nvst::coll::", fn, ": this PE (world PE ", nvst::my_pe(), ") is not a member of team ",
               t.handle);
  NVST_REQUIRE(t.npes <= kMaxPes, "nvst::coll::", fn, ": at most ", kMaxPes, " PEs in a team (team ", t.handle, " has ",
               t.npes, ")");
  t.start = nvst::team_translate_pe(team, 0);
  t.stride = t.npes > 1 ? nvst::team_translate_pe(team, 1) - t.start : 1;
  if (host_heaps()) return t;
  const int first = nvst::team_translate_pe(Team::kNode, 0), node_n = nvst::team_n_pes(Team::kNode);
  for (int p = 0; p < t.npes; ++p) t.cross_node |= t.world_pe(p) < first || t.world_pe(p) >= first + node_n;
  return t;
}

// Validates a reduction's arguments; returns the element size.
std::size_t check_reduction_args(const char* fn, const void* in, const void* out, std::size_t count, DType dtype) {
  const std::size_t es = dtype_size(dtype);
  NVST_REQUIRE(count == 0 || (in != nullptr && out != nullptr), "nvst::coll::", fn, ": null buffer");
  NVST_REQUIRE((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) % es == 0,
               "nvst::coll::", fn, ": buffers must be aligned to the element size (", es, " bytes)");
  return es;
}

void check_root(const char* fn, int root, const TeamView& t) {
  NVST_REQUIRE(root >= 0 && root < t.npes, "nvst::coll::", fn, ": root ", root, " out of range [0, ", t.npes,
               ") of team ", t.handle);
}

ReduceKernel reduce_kernel(DType dtype, RedOp op, Kernel k) {
  switch (dtype) {
    case DType::kF32: return reduce_kernel<float>(op, k);
    case DType::kBF16: return reduce_kernel<__nv_bfloat16>(op, k);
    case DType::kF16: return reduce_kernel<__half>(op, k);
    case DType::kI32: return reduce_kernel<std::int32_t>(op, k);
    case DType::kI64: return reduce_kernel<std::int64_t>(op, k);
  }
  return nullptr;
}

void launch_reduce_dtype(DType dtype, RedOp op, Kernel k, int blocks, int threads, const Args& a, cudaStream_t s) {
  nvst::detail::launch_early(true, reduce_kernel(dtype, op, k), blocks, threads, s, a);
}

// Threads per block: 256-thread blocks launch about 1 us sooner at 1 KB
// (measured on 2x H200), 1024 keep more stores in flight for large messages.
int threads_for(std::size_t bytes) {
  static const long forced = std::getenv("NVST_COLL_THREADS") ? std::atol(std::getenv("NVST_COLL_THREADS")) : 0;
  if (forced > 0) return static_cast<int>(std::min<long>(forced, kThreads));
  return bytes <= (std::size_t{1} << 20) ? 256 : kThreads;
}

// NVST_COLL_MAX_BLOCKS caps the grid (calibration runs); default 128.
int max_blocks() {
  static const long forced = std::getenv("NVST_COLL_MAX_BLOCKS") ? std::atol(std::getenv("NVST_COLL_MAX_BLOCKS")) : 0;
  return static_cast<int>(forced > 0 ? std::min<long>(forced, kMaxBlocks) : 128);
}

// A grid for `bytes`: a block per `per_block` bytes, at least `least`, at
// most max_blocks().
int blocks_for(std::size_t bytes, std::size_t per_block, std::size_t least = 1) {
  const std::size_t cap = static_cast<std::size_t>(max_blocks());
  return static_cast<int>(std::clamp<std::size_t>((bytes + per_block - 1) / per_block, std::min(least, cap), cap));
}

// Whether [a, a + an) and [b, b + bn) share a byte. Across nodes a push is
// read by the proxy after the kernel posted it, so when a launch writes
// where its pushes read (in place), each push must complete before the
// block goes on (Args::push_blocking): a round trip per block, only then.
bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a && b && an && bn && x < y + bn && y < x + an;
}

// A launch's arguments for `sig` on team t: the workspace, and the call
// its exchange flags carry (kernels.cuh: the call word).
Args base_args(const TeamView& t, const CallSig& sig) {
  Workspace& w = workspace_of(g_ws, sig.fn, t);
  Args a{};
  a.call = sig.bits();
  a.call_root = sig.root;
  a.call_count = sig.count;
  a.team = t.handle;
  a.dest = -1;
  a.slot_bytes = w.slot;
  a.me = t.me;
  a.npes = t.npes;
  a.pe_start = t.start;
  a.pe_stride = t.stride;
  a.cross_node = t.cross_node;
  for (int b = 0; b < 2; ++b) {
    a.data_buf[b] = w.data[b];
    a.red_buf[b] = w.red[b];
    a.ll_buf[b] = w.ll[b];
  }
  a.flags = w.flags;
  a.epoch = w.epoch;
  return a;
}

Algo algo_from_env(Algo asked) {
  if (asked != Algo::kAuto) return asked;
  const char* e = std::getenv("NVST_COLL_ALGO");
  if (e == nullptr || std::string(e) == "auto") return Algo::kAuto;
  if (std::string(e) == "ll") return Algo::kLowLatency;
  if (std::string(e) == "oneshot") return Algo::kOneShot;
  if (std::string(e) == "twoshot") return Algo::kTwoShot;
  if (std::string(e) == "hierarchical") return Algo::kHierarchical;
  if (std::string(e) == "ring") return Algo::kRing;
  NVST_FAIL("NVST_COLL_ALGO='", e, "' is not one of auto, ll, oneshot, twoshot, ring, hierarchical");
}

// Checks the team, makes sure its workspace exists, and runs the host-heap
// version of a collective when this PE has no GPU. Returns true if it ran.
template <typename F>
bool on_host(const TeamView& t, const char* fn, CallSig sig, F&& run) {
  if (!host_heaps()) return false;
  sig.fn = fn;
  run(HostCall{t, host_workspace(fn, t), sig});
  return true;
}

}  // namespace

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  NVST_FAIL("nvst::coll: unknown dtype ", static_cast<int>(t));
}
const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}
const char* redop_name(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kProd: return "prod";
  }
  return "?";
}
const char* algo_name(Algo a) {
  switch (a) {
    case Algo::kAuto: return "auto";
    case Algo::kOneShot: return "oneshot";
    case Algo::kTwoShot: return "twoshot";
    case Algo::kHierarchical: return "hierarchical";
    case Algo::kRing: return "ring";
    case Algo::kLowLatency: return "ll";
  }
  return "?";
}

namespace {
// Loads every collective kernel once per process, before any of them can
// run behind a kernel that waits on the proxy: a kernel first launched
// there would be loaded (CUDA_MODULE_LOADING=LAZY) while the driver waits
// for that kernel, and the proxy's CUDA calls wait for the driver: a
// deadlock (docs/09).
void preload_coll_kernels() {
  static const bool done = [] {
    std::vector<const void*> k = {
        reinterpret_cast<const void*>(gather_kernel), reinterpret_cast<const void*>(lowlatency_gather_kernel),
        reinterpret_cast<const void*>(alltoallv_kernel), reinterpret_cast<const void*>(broadcast_kernel)};
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64})
      for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kMin, RedOp::kProd})
        for (Kernel kernel : {Kernel::kOneShot, Kernel::kTwoShot, Kernel::kRing, Kernel::kLowLatency})
          k.push_back(reinterpret_cast<const void*>(reduce_kernel(d, op, kernel)));
    nvst::detail::preload_kernels(k);
    return true;
  }();
  (void)done;
}
}  // namespace

void prepare(Team team) {
  NVST_REQUIRE(nvst::initialized(), "nvst::coll::prepare called before nvst::init()");
  const int handle = static_cast<int>(team);
  const int npes = nvst::team_n_pes(team);  // throws for a team never made
  NVST_REQUIRE(npes <= kMaxPes, "nvst::coll::prepare: at most ", kMaxPes, " PEs in a team (team ", handle, " has ",
               npes, ")");
  const std::size_t chunk = settings::coll_workspace_bytes();
  const std::size_t need = static_cast<std::size_t>(handle) + 1;
  if (host_heaps()) return host_prepare(handle, npes, chunk);
  if (prepared(g_ws, handle)) return;
  preload_coll_kernels();
  if (g_ws.size() < need) g_ws.resize(need);
  Workspace& w = g_ws[static_cast<std::size_t>(handle)];
  if (w.epoch != nullptr) cudaFree(w.epoch);  // from an earlier init; its heap is gone
  w = Workspace{};
  w.generation = nvst::detail::init_generation();
  w.chunk = chunk;
  w.slot = slot_for(chunk, npes);
  for (int b = 0; b < 2; ++b) {
    w.data[b] = static_cast<char*>(nvst::malloc(chunk));
    w.red[b] = static_cast<char*>(nvst::malloc(chunk));
    w.ll[b] = static_cast<char*>(nvst::calloc(static_cast<std::size_t>(npes) * 2, kLowLatencyMax));
  }
  w.flags = static_cast<std::uint64_t*>(nvst::calloc(kPhases * kMaxPes * kMaxBlocks, sizeof(std::uint64_t)));
  NVST_CHECK_CUDA(cudaMalloc(&w.epoch, 2 * sizeof(std::uint64_t)));
  NVST_CHECK_CUDA(cudaMemset(w.epoch, 0, 2 * sizeof(std::uint64_t)));
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
}

namespace {
// The hierarchical all_reduce's teams: the world's nodes (rows of node-size
// PEs) and, across them, the PEs of the same place in their node (columns).
// Made by its first call, a collective over the world.
struct HierTeams {
  std::uint64_t generation = 0;
  Team node{}, across{};
  int k = 0;      // PEs per node
  int nodes = 0;  // world / k
};
HierTeams g_hier;

// The hierarchical teams for a call of `fn` on `stream`: made by the first
// call, which therefore must not be captured.
const HierTeams& hier_teams(const char* fn, cudaStream_t stream) {
  if (g_hier.generation == nvst::detail::init_generation()) return g_hier;
  if (!host_heaps()) {
    NVST_REQUIRE(!nvst::detail::stream_capturing(stream), "nvst::coll::", fn,
                 " hierarchical: its first call makes teams (a collective allocation) and cannot be captured in a "
                 "CUDA graph; call it once before capturing");
  }
  const int k = nvst::team_n_pes(Team::kNode), n = nvst::n_pes();
  int sizes_agree = k;  // every node must be the same size
  auto all = nvst::bootstrap_allgather(&sizes_agree, sizeof(sizes_agree));
  for (int p = 0; p < n; ++p) {
    int v;
    std::memcpy(&v, all.data() + static_cast<std::size_t>(p) * sizeof(v), sizeof(v));
    NVST_REQUIRE(v == k, "nvst::coll::", fn, " hierarchical: nodes of different sizes (PE ", p, "'s has ", v,
                 " PEs, this PE's ", k, ")");
  }
  auto [node, across] = nvst::team_split_2d(Team::kWorld, k);
  prepare(node);
  prepare(across);
  g_hier = HierTeams{nvst::detail::init_generation(), node, across, k, n / k};
  return g_hier;
}

// Scratch buffers for one hierarchical call: two parts of one buffer that
// grows and is kept (device memory; host memory for host-memory PEs).
// Device: a cross-node step's source is read by the proxy on its own
// stream, and memory from cudaMallocAsync may only be used on the stream
// that made it (compute-sanitizer reported the proxy's reads of it as out of
// bounds). Each use waits for the last one (an event), so calls on
// different streams never share it at once; a buffer outgrown is left
// allocated (freeing would synchronise the device, which can wait on a
// kernel that waits on the proxy). Under capture: a graph allocation node
// (cudaMallocAsync), which the graph owns. A Scratch holds a lock for its
// life, so host threads calling collectives at once take turns for it.
struct ScratchArena {
  char* p = nullptr;
  std::size_t bytes = 0;
  cudaEvent_t last_use = nullptr;
  std::vector<char> host;
};
ScratchArena g_arena;
std::mutex g_arena_mutex;

class Scratch {
 public:
  Scratch(std::size_t first, std::size_t second, cudaStream_t s) : lock_(g_arena_mutex), stream_(s) {
    const std::size_t first_padded = (first + 255) / 256 * 256;
    const std::size_t total = std::max<std::size_t>(first_padded + second, 256);
    char* base = nullptr;
    if (host_heaps()) {
      if (g_arena.host.size() < total) g_arena.host.resize(total);
      base = g_arena.host.data();
    } else {
      if (nvst::detail::stream_capturing(s)) {
        NVST_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&async_), total, s));
        base = async_;
      } else {
        if (g_arena.bytes < total) {  // the arena changes only once the new buffer exists
          const std::size_t bytes = std::max(total, 2 * g_arena.bytes);
          char* p = nullptr;
          NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), bytes));
          g_arena.p = p;
          g_arena.bytes = bytes;
        }
        if (g_arena.last_use == nullptr)
          NVST_CHECK_CUDA(cudaEventCreateWithFlags(&g_arena.last_use, cudaEventDisableTiming));
        NVST_CHECK_CUDA(cudaStreamWaitEvent(s, g_arena.last_use, 0));
        base = g_arena.p;
      }
    }
    parts_ = {base, base + first_padded};
  }
  ~Scratch() {
    if (async_)
      cudaFreeAsync(async_, stream_);
    else if (!host_heaps())
      cudaEventRecord(g_arena.last_use, stream_);
  }
  char* operator[](std::size_t i) const { return parts_[i]; }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
  cudaStream_t stream_;
  char* async_ = nullptr;
  std::array<char*, 2> parts_{};
};

void copy_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  if (bytes == 0 || dst == src) return;
  if (host_heaps())
    std::memmove(dst, src, bytes);
  else
    NVST_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

// The ring on GPUs: launches of a slice of every segment, each as large as
// the workspace allows (steps regions per buffer).
void ring_all_reduce(const TeamView& t, CallSig sig, const void* in, void* out, std::size_t count, DType dtype,
                     RedOp op, cudaStream_t stream) {
  const std::size_t es = dtype_size(dtype), seg = ring::segment_elems(count, t.npes, es);
  sig.algo = kAlgoRing;
  const Args proto = base_args(t, sig);
  const std::size_t per = ring::slice_elems(g_ws[static_cast<std::size_t>(t.handle)].chunk, t.npes, es);
  for (std::size_t off = 0; off < seg; off += per) {
    Args a = proto;
    a.in = static_cast<const char*>(in);
    a.out = static_cast<char*>(out);
    a.n = count;
    a.ring_seg = seg;
    a.ring_off = off;
    a.ring_c = std::min(per, seg - off);
    a.vec_ok = ((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) & 15u) == 0;
    const std::size_t bytes = a.ring_c * es;  // per segment per launch
    const int blocks = blocks_for(bytes, 16384);
    launch_reduce_dtype(dtype, op, Kernel::kRing, blocks, threads_for(bytes), a, stream);
    NVST_CHECK_LAUNCH();
  }
}

// Whether a push collective with parts of `bytes` runs ll (GPU heaps: its
// callers ran host-memory PEs' form already): on one node, when asked for,
// or by auto up to kLowLatencyMax.
bool use_lowlatency(const char* fn, const TeamView& t, Algo algo, std::size_t bytes) {
  NVST_REQUIRE(!(t.cross_node && algo == Algo::kLowLatency), "nvst::coll::", fn,
               ": ll stores into the members' "
               "memory, which only NVLink peers allow, and team ",
               t.handle, " spans nodes (use oneshot or auto)");
  return !t.cross_node && (algo == Algo::kLowLatency || (algo == Algo::kAuto && bytes <= kLowLatencyMax));
}

// ll on GPUs: a launch per kLowLatencyMax bytes of each part, a thread per
// 16-byte line (8 bytes of a part), up to 64 blocks of 256. Member p's part
// is in + p * in_stride (bytes; 0: the same for all); `count` elements of
// `es` bytes each. The gather kernel counts in bytes (es = 1).
void lowlatency_launch(CallSig sig, const TeamView& t, ReduceKernel kernel, const void* in, std::size_t in_stride,
                       void* out, std::size_t out_stride, std::size_t count, std::size_t es, cudaStream_t stream) {
  sig.algo = kAlgoLowLatency;
  const Args proto = base_args(t, sig);
  const std::size_t chunk = kLowLatencyMax / es;
  for (std::size_t off = 0; off == 0 || off < count; off += chunk) {  // once for 0
    Args a = proto;
    a.in_base = static_cast<const char*>(in) + off * es;
    a.in_stride = in_stride;
    a.in = a.in_base + static_cast<std::size_t>(t.me) * in_stride;
    a.out = static_cast<char*>(out) + off * es;
    a.out_stride = out_stride;
    a.n = std::min(chunk, count - off);
    const std::size_t lines = (a.n * es + 7) / 8;
    const int blocks = static_cast<int>(std::clamp<std::size_t>((lines + 255) / 256, 1, 64));
    nvst::detail::launch_early(true, kernel, blocks, 256, stream, a);
  }
}

// NVST_COLL_ALGO=hierarchical on the world team, when it spans nodes of
// more than one PE (with nodes of one PE the flat form is the same thing).
// Every PE of a world that spans nodes makes (or finds) the teams, so nodes
// of different sizes are refused on every PE, not only on those whose own
// node has several PEs (which would leave the others in another algorithm).
// The teams when wanted, else null.
const HierTeams* hier_wanted(const char* fn, const TeamView& t, cudaStream_t stream) {
  if (t.handle != static_cast<int>(Team::kWorld) || nvst::team_n_pes(Team::kNode) >= t.npes ||
      algo_from_env(Algo::kAuto) != Algo::kHierarchical)
    return nullptr;
  // Also when this PE's node has one PE: hier_teams checks, on every PE,
  // that all nodes have the same size; a PE that skipped it would leave the
  // others waiting in that allgather instead of failing with the message.
  const HierTeams& h = hier_teams(fn, stream);
  return h.k > 1 ? &h : nullptr;
}

// `rows` blocks of `width` bytes from src (one every src_pitch bytes) to dst
// (one every dst_pitch bytes), in stream order: the transposes between the
// world's part order (node-major) and the node-then-column steps.
void copy_strided(char* dst, std::size_t dst_pitch, const char* src, std::size_t src_pitch, std::size_t width,
                  std::size_t rows, cudaStream_t s) {
  if (width == 0 || rows == 0) return;
  static const std::size_t max_pitch = [] {  // 2D copies refuse larger pitches (2 GiB on H100)
    if (host_heaps()) return std::size_t{0};
    int dev = 0, v = 0;
    NVST_CHECK_CUDA(cudaGetDevice(&dev));
    NVST_CHECK_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxPitch, dev));
    return static_cast<std::size_t>(v);
  }();
  if (!host_heaps() && std::max(dst_pitch, src_pitch) <= max_pitch) {
    NVST_CHECK_CUDA(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, s));
    return;
  }
  for (std::size_t r = 0; r < rows; ++r)  // host PEs, or parts of hundreds of MiB: a copy each
    copy_bytes(dst + r * dst_pitch, src + r * src_pitch, width, s);
}

// all_gather across the nodes first (each PE sends its part once to its
// column: PEs of its place in the other nodes), then inside the node (N
// parts per PE over NVLink): the bytes that cross nodes are 1/G of the flat
// form's (G PEs per node). The node step leaves part (m, g) at [g][m];
// copies put it at the world's place m * G + g.
void hier_all_gather(const HierTeams& h, const void* in, void* out, std::size_t count, DType dtype,
                     cudaStream_t stream) {
  const std::size_t cb = count * dtype_size(dtype), G = static_cast<std::size_t>(h.k);
  const std::size_t N = static_cast<std::size_t>(h.nodes);
  if (cb == 0) return;
  const Scratch scratch(N * cb, G * N * cb, stream);
  char *column = scratch[0], *both = scratch[1];
  all_gather(in, column, count, dtype, stream, h.across);
  all_gather(column, both, N * count, dtype, stream, h.node);
  for (std::size_t g = 0; g < G; ++g)
    copy_strided(static_cast<char*>(out) + g * cb, G * cb, both + g * N * cb, cb, cb, N, stream);
}

// reduce_scatter inside the node of the parts of this PE's column (PE g of
// the node gets the node's sums of parts (m, g) for every node m), then
// across the nodes (node n's PE g gets part (n, g) summed over nodes):
// 1/G of the flat form's bytes cross nodes. The result is the nodes' sums
// (each in node order) reduced in node order, as hier_all_reduce's.
void hier_reduce_scatter(const HierTeams& h, const void* in, void* out, std::size_t count, DType dtype, RedOp op,
                         cudaStream_t stream) {
  const std::size_t cb = count * dtype_size(dtype), G = static_cast<std::size_t>(h.k);
  const std::size_t N = static_cast<std::size_t>(h.nodes);
  if (cb == 0) return;
  const Scratch scratch(G * N * cb, N * cb, stream);
  char *by_column = scratch[0], *node_sums = scratch[1];
  for (std::size_t g = 0; g < G; ++g)  // [g][m] = part (m, g) = in[m * G + g]
    copy_strided(by_column + g * N * cb, cb, static_cast<const char*>(in) + g * cb, G * cb, cb, N, stream);
  reduce_scatter(by_column, node_sums, N * count, dtype, op, stream, h.node);
  reduce_scatter(node_sums, out, count, dtype, op, stream, h.across);
}

// reduce_scatter inside each node, all_reduce of one part across the nodes,
// all_gather inside each node: the bytes that cross nodes are 1/k of the
// flat algorithm's (k PEs per node), and the node steps run over NVLink.
// The result is the nodes' sums (each in node order) reduced in node order.
// A count that k does not divide is padded to k parts of c elements.
void hier_all_reduce(const HierTeams& h, const void* in, void* out, std::size_t count, DType dtype, RedOp op,
                     cudaStream_t stream) {
  const std::size_t es = dtype_size(dtype), k = static_cast<std::size_t>(h.k);
  const std::size_t c = (count + k - 1) / k;  // elements per part
  const bool padded = c * k != count;
  const Scratch scratch(padded ? c * k * es : 0, 2 * c * es, stream);
  char *whole = scratch[0], *part = scratch[1];
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (padded) {  // the pad's values reach only the pad of the result
    copy_bytes(whole, in, count * es, stream);
    if (host_heaps())
      std::memset(whole + count * es, 0, (c * k - count) * es);
    else
      NVST_CHECK_CUDA(cudaMemsetAsync(whole + count * es, 0, (c * k - count) * es, stream));
    src = dst = whole;
  }
  reduce_scatter(src, part, c, dtype, op, stream, h.node);
  all_reduce(part, part + c * es, c, dtype, op, stream, Algo::kOneShot, h.across);
  all_gather(part + c * es, dst, c, dtype, stream, h.node);
  if (padded) copy_bytes(out, whole, count * es, stream);
}
}  // namespace

void all_reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream, Algo algo,
                Team team) {
  const char* fn = "all_reduce";
  const TeamView t = check_team(fn, team);
  const std::size_t es = check_reduction_args(fn, in, out, count, dtype);
  const Algo asked = algo;
  algo = algo_from_env(algo);
  if (algo == Algo::kHierarchical && t.handle != static_cast<int>(Team::kWorld)) {
    NVST_REQUIRE(asked != Algo::kHierarchical,
                 "nvst::coll::all_reduce: hierarchical runs on the world team (its "
                 "nodes and the columns across them), not team ",
                 t.handle);
    algo = Algo::kAuto;  // NVST_COLL_ALGO=hierarchical means the world's all_reduces
  }
  // Nothing to split into ring steps or node parts: a push still compares the calls.
  if (count == 0 && (algo == Algo::kRing || algo == Algo::kHierarchical)) algo = Algo::kOneShot;
  if (algo == Algo::kHierarchical) {
    hier_all_reduce(hier_teams(fn, stream), in, out, count, dtype, op, stream);
    return;
  }
  // Across nodes from 3 members oneshot sends n-1 copies of everything
  // through the proxy, ring 2(n-1)/n: ring from 1 MiB, where bytes should
  // dominate the ring's 2(n-1) steps (chosen by bytes; not yet timed).
  if (algo == Algo::kAuto && t.cross_node && t.npes >= 3 && count * es >= kRingMin) algo = Algo::kRing;
  CallSig sig{fn, 1, dtype, op, -1, count};
  if (algo == Algo::kRing) {
    if (!on_host(t, fn, sig, [&](const HostCall& c) {
          host_ring_all_reduce(c, static_cast<const char*>(in), static_cast<char*>(out), count, dtype, op);
        }))
      ring_all_reduce(t, sig, in, out, count, dtype, op, stream);
    return;
  }
  if (on_host(t, fn, sig, [&](const HostCall& c) {
        host_push_reduce(c, static_cast<const char*>(in), 0, static_cast<char*>(out), count, dtype, op, -1);
      }))
    return;
  NVST_REQUIRE(!(t.cross_node && algo == Algo::kTwoShot),
               "nvst::coll::all_reduce: twoshot reads the members' "
               "memory, which only NVLink peers allow, and team ",
               t.handle, " spans nodes (use oneshot or auto)");
  if (use_lowlatency(fn, t, algo, count * es))
    return lowlatency_launch(sig, t, reduce_kernel(dtype, op, Kernel::kLowLatency), in, 0, out, 0, count, es, stream);
  // On 2 PEs both algorithms move the same remote bytes and oneshot has one
  // step less: it won at every size measured on 2x H200. Across nodes only
  // oneshot (pushes) works.
  const bool oneshot =
      algo == Algo::kOneShot || t.cross_node || (algo == Algo::kAuto && (t.npes == 2 || count * es <= kOneShotMax));
  sig.algo = oneshot ? kAlgoPush : kAlgoTwoShot;
  const Args proto = base_args(t, sig);
  // oneshot: each member's part of the workspace is a slot; twoshot
  // publishes the whole chunk.
  const std::size_t chunk = (oneshot ? proto.slot_bytes : g_ws[static_cast<std::size_t>(t.handle)].chunk) / es;
  for (std::size_t off = 0; off == 0 || off < count; off += chunk) {  // once for 0
    const std::size_t n = std::min(chunk, count - off);
    Args a = proto;
    a.in = static_cast<const char*>(in) + off * es;
    a.in_base = a.in;
    a.out = static_cast<char*>(out) + off * es;
    a.n = n;
    a.vec_ok = ((reinterpret_cast<std::uintptr_t>(a.in) | reinterpret_cast<std::uintptr_t>(a.out)) & 15u) == 0;
    const std::size_t bytes = n * es;
    a.push_blocking = t.cross_node && overlaps(a.in, bytes, a.out, bytes);
    // oneshot: a block per 8 KiB (latency-bound when small); twoshot: a
    // block per 64 KiB, at least 16 (enough remote loads in flight).
    const int blocks = oneshot ? blocks_for(bytes, 8192) : blocks_for(bytes, 65536, 16);
    const Kernel kernel = oneshot ? Kernel::kOneShot : Kernel::kTwoShot;
    launch_reduce_dtype(dtype, op, kernel, blocks, threads_for(bytes), a, stream);
    NVST_CHECK_LAUNCH();
  }
}

namespace {
// all_gather (in_stride 0) and all_to_all (in_stride = total): `total`
// bytes per member, part p of in at in + p * in_stride.
void gather(const char* fn, const void* in, std::size_t in_stride, void* out, std::size_t count, DType dtype,
            cudaStream_t stream, Team team) {
  const TeamView t = check_team(fn, team);
  const std::size_t total = count * dtype_size(dtype);
  NVST_REQUIRE(count == 0 || (in != nullptr && out != nullptr), "nvst::coll::", fn, ": null buffer");
  if (in_stride == 0)  // all_gather
    if (const HierTeams* h = hier_wanted(fn, t, stream)) return hier_all_gather(*h, in, out, count, dtype, stream);
  const CallSig sig{fn, in_stride == 0 ? 2 : 3, dtype, RedOp::kSum, -1, count};
  if (on_host(t, fn, sig, [&](const HostCall& c) {
        host_all_to_all(c, static_cast<const char*>(in), in_stride * total, static_cast<char*>(out), total);
      }))
    return;
  if (use_lowlatency(fn, t, algo_from_env(Algo::kAuto), total))
    return lowlatency_launch(sig, t, lowlatency_gather_kernel, in, in_stride * total, out, total, total, 1, stream);
  const Args proto = base_args(t, sig);
  for (std::size_t off = 0; off == 0 || off < total; off += proto.slot_bytes) {  // once for 0
    const std::size_t n = std::min(proto.slot_bytes, total - off);
    Args a = proto;
    a.in_base = static_cast<const char*>(in) + off;
    a.in_stride = in_stride * total;
    a.in = a.in_base + static_cast<std::size_t>(a.me) * a.in_stride;
    a.out = static_cast<char*>(out) + off;
    a.n = n;
    a.out_stride = total;
    const std::size_t in_span = a.in_stride ? a.in_stride * static_cast<std::size_t>(t.npes) : n;
    const std::size_t out_span = total * static_cast<std::size_t>(t.npes - 1) + n;
    a.push_blocking = t.cross_node && overlaps(a.in_base, in_span, a.out, out_span);
    const int blocks = blocks_for(n, 32768);
    nvst::detail::launch_early(true, gather_kernel, blocks, threads_for(n), stream, a);
  }
}
}  // namespace

void all_gather(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream, Team team) {
  gather("all_gather", in, 0, out, count, dtype, stream, team);
}

void all_to_all(const void* in, void* out, std::size_t count, DType dtype, cudaStream_t stream, Team team) {
  gather("all_to_all", in, 1, out, count, dtype, stream, team);
}

void barrier(cudaStream_t stream, Team team) {
  const char* fn = "barrier";
  const TeamView t = check_team(fn, team);
  const CallSig sig{fn, 4, DType::kF32, RedOp::kSum, -1, 0};
  if (on_host(t, fn, sig, [&](const HostCall& c) {
        nvst::quiet();  // this PE's puts land before the others go on
        host_exchange(c, nullptr, 0, 0);
      }))
    return;
  // The flag exchange of every collective with no data: one block, a thread
  // per member.
  Args a = base_args(t, sig);
  nvst::detail::launch_early(true, gather_kernel, 1, kMaxPes, stream, a);
}

namespace {
// The oneshot push with per-member parts: reduce_scatter (part p of in, at
// p * stride, to member p; every member reduces) and reduce (stride 0,
// dest = the root, which alone reduces).
void push_reduce(const char* fn, const TeamView& t, const void* in, std::size_t stride, void* out, std::size_t count,
                 DType dtype, RedOp op, int dest, cudaStream_t stream) {
  const std::size_t es = dtype_size(dtype);
  const CallSig sig{fn, dest < 0 ? 5 : 6, dtype, op, dest, count};
  if (on_host(t, fn, sig, [&](const HostCall& c) {
        host_push_reduce(c, static_cast<const char*>(in), stride, static_cast<char*>(out), count, dtype, op, dest);
      }))
    return;
  if (dest < 0 && use_lowlatency(fn, t, algo_from_env(Algo::kAuto), count * es))  // reduce_scatter
    return lowlatency_launch(sig, t, reduce_kernel(dtype, op, Kernel::kLowLatency), in, stride, out, 0, count, es,
                             stream);
  const Args proto = base_args(t, sig);
  const std::size_t chunk = proto.slot_bytes / es;
  for (std::size_t off = 0; off == 0 || off < count; off += chunk) {  // once for 0
    const std::size_t n = std::min(chunk, count - off);
    Args a = proto;
    a.dest = dest;
    a.in_base = static_cast<const char*>(in) + off * es;
    a.in_stride = stride;
    a.in = a.in_base + static_cast<std::size_t>(a.me) * stride;
    a.out = out ? static_cast<char*>(out) + off * es : nullptr;  // reduce: null off the root
    a.n = n;
    a.vec_ok = ((reinterpret_cast<std::uintptr_t>(a.in) | reinterpret_cast<std::uintptr_t>(a.out)) & 15u) == 0;
    const std::size_t bytes = n * es;
    const bool writes = dest < 0 || dest == t.me;  // reduce: only the root writes out
    a.push_blocking = t.cross_node && writes &&
                      overlaps(a.in_base, stride ? stride * static_cast<std::size_t>(t.npes) : bytes, a.out, bytes);
    const int blocks = blocks_for(bytes, 8192);
    launch_reduce_dtype(dtype, op, Kernel::kOneShot, blocks, threads_for(bytes), a, stream);
    NVST_CHECK_LAUNCH();
  }
}
}  // namespace

void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, RedOp op, cudaStream_t stream,
                    Team team) {
  const char* fn = "reduce_scatter";
  const TeamView t = check_team(fn, team);
  const std::size_t es = check_reduction_args(fn, in, out, count, dtype);
  if (const HierTeams* h = hier_wanted(fn, t, stream))
    return hier_reduce_scatter(*h, in, out, count, dtype, op, stream);
  push_reduce(fn, t, in, count * es, out, count, dtype, op, -1, stream);
}

void reduce(const void* in, void* out, std::size_t count, DType dtype, RedOp op, int root, cudaStream_t stream,
            Team team) {
  const char* fn = "reduce";
  const TeamView t = check_team(fn, team);
  check_root(fn, root, t);
  // Off the root, out is not used: check `in` against itself.
  check_reduction_args(fn, in, t.me == root ? out : in, count, dtype);
  push_reduce(fn, t, in, 0, out, count, dtype, op, root, stream);
}

void all_to_allv(const void* in, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 void* out, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                 DType dtype, cudaStream_t stream, Team team) {
  const char* fn = "all_to_allv";
  const TeamView t = check_team(fn, team);
  const int me = t.me;
  const std::size_t un = static_cast<std::size_t>(t.npes);
  NVST_REQUIRE(
      send_counts.size() == un && send_displs.size() == un && recv_counts.size() == un && recv_displs.size() == un,
      "nvst::coll::all_to_allv: counts and displacements need ", t.npes, " entries each (got ", send_counts.size(),
      ", ", send_displs.size(), ", ", recv_counts.size(), ", ", recv_displs.size(), ")");
  const std::size_t es = dtype_size(dtype);
  VArgs v{};
  bool sends = false, receives = false;
  for (std::size_t p = 0; p < un; ++p) {
    for (std::size_t x : {send_counts[p], send_displs[p], recv_counts[p], recv_displs[p]})
      NVST_REQUIRE(x <= (std::size_t{1} << 40) / es, "nvst::coll::all_to_allv: count or displacement ", x,
                   " too large");
    v.send_off[p] = send_displs[p] * es;
    v.send_len[p] = send_counts[p] * es;
    v.recv_off[p] = recv_displs[p] * es;
    v.recv_len[p] = recv_counts[p] * es;
    sends |= send_counts[p] != 0;
    receives |= recv_counts[p] != 0;
  }
  NVST_REQUIRE(send_counts[me] == recv_counts[me], "nvst::coll::all_to_allv: PE ", t.world_pe(me), " sends itself ",
               send_counts[me], " elements but expects ", recv_counts[me]);
  NVST_REQUIRE((!sends || in != nullptr) && (!receives || out != nullptr), "nvst::coll::all_to_allv: null buffer");
  const CallSig sig{fn, 8, dtype, RedOp::kSum, -1, 0};
  if (on_host(t, fn, sig, [&](const HostCall& c) {
        host_all_to_allv(c, static_cast<const char*>(in), v.send_off, v.send_len, static_cast<char*>(out), v.recv_off,
                         v.recv_len);
      }))
    return;
  v.a = base_args(t, sig);
  v.a.in_base = static_cast<const char*>(in);
  v.a.out = static_cast<char*>(out);
  std::size_t most = 0, in_end = 0, out_end = 0;
  for (std::size_t p = 0; p < un; ++p) {
    most = std::max({most, v.send_len[p], v.recv_len[p]});
    in_end = std::max(in_end, v.send_off[p] + v.send_len[p]);
    out_end = std::max(out_end, v.recv_off[p] + v.recv_len[p]);
  }
  v.a.push_blocking = t.cross_node && overlaps(in, in_end, out, out_end);
  // The grid must be the same on every PE (block b talks to block b).
  nvst::detail::launch_early(true, alltoallv_kernel, max_blocks(), threads_for(std::min(most, v.a.slot_bytes)), stream,
                             v);
}

void all_to_allv(const void* in, const std::size_t* send_counts, const std::size_t* send_displs, void* out,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, DType dtype, cudaStream_t stream,
                 Team team) {
  const std::size_t n = static_cast<std::size_t>(check_team("all_to_allv", team).npes);
  NVST_REQUIRE(send_counts && send_displs && recv_counts && recv_displs,
               "nvst::coll::all_to_allv: null counts or displacements");
  all_to_allv(in, {send_counts, n}, {send_displs, n}, out, {recv_counts, n}, {recv_displs, n}, dtype, stream, team);
}

void broadcast(const void* in, void* out, std::size_t count, DType dtype, int root, cudaStream_t stream, Team team) {
  const char* fn = "broadcast";
  const TeamView t = check_team(fn, team);
  check_root(fn, root, t);
  const std::size_t es = dtype_size(dtype);
  NVST_REQUIRE(count == 0 || (out != nullptr && (in != nullptr || t.me != root)), "nvst::coll::broadcast: null buffer");
  const std::size_t total = count * es;
  const CallSig sig{fn, 7, dtype, RedOp::kSum, root, count};
  if (on_host(t, fn, sig, [&](const HostCall& c) {
        host_broadcast(c, static_cast<const char*>(in), static_cast<char*>(out), total, root);
      }))
    return;
  const Args proto = base_args(t, sig);
  for (std::size_t off = 0; off == 0 || off < total; off += proto.slot_bytes) {  // once for 0
    const std::size_t n = std::min(proto.slot_bytes, total - off);
    Args a = proto;
    a.in = in ? static_cast<const char*>(in) + off : nullptr;
    a.in_base = a.in;
    a.out = static_cast<char*>(out) + off;
    a.n = n;
    a.root = root;
    a.push_blocking = t.cross_node && a.in != a.out && overlaps(a.in, n, a.out, n);  // in == out: no copy
    const int blocks = blocks_for(n, 32768);
    nvst::detail::launch_early(true, broadcast_kernel, blocks, threads_for(n), stream, a);
  }
}

}  // namespace nvst::coll
