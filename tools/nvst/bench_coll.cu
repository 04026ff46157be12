// `nvst bench coll`: all_reduce, all_gather, reduce_scatter and all_to_all
// over every PE, ours against NCCL called from C++ in the same process, the
// same sizes, eager launches and under CUDA graphs (-G: operations per
// graph). Sizes are nccl-tests' (-b/-e/-f: bytes of the output buffer), and
// so are -d (bfloat16 by default, half, float, int32, int64) and -o (sum by
// default, prod, max, min). Inputs are small integers (1 or 2 for prod),
// exact in every type whatever the reduction order, so every result is
// checked exactly (#wrong). With PEs sharing one GPU (--np on a machine of
// one) NCCL refuses to run, so only ours does: a check of the results, not a
// measurement. NCCL's all_to_all is grouped ncclSend/ncclRecv,
// one pair per peer, as nccl-tests' alltoall (ncclAlltoAll is not in every
// libnccl this binary may load).
//
// Where the NVSHMEM plugin loads (nvshmem_baseline/baseline_abi.h), NVSHMEM's
// own stream collectives are a third implementation: the same input, copied
// into buffers of its symmetric heap, the same timing and the same check,
// in columns of their own. Where it does not, one line says why and the
// output is what it was without it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "baseline_loader.hpp"
#include "bench.hpp"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "report.hpp"

namespace nvst::tools {

namespace {

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kAllToAll };

const char* name_of(Coll kind) {
  switch (kind) {
    case Coll::kAllGather: return "all_gather";
    case Coll::kReduceScatter: return "reduce_scatter";
    case Coll::kAllToAll: return "all_to_all";
    default: return "all_reduce";
  }
}

enum class Impl { kOurs, kNccl, kNvshmem };

// The impl column of the report.
const char* name_of(Impl impl) {
  switch (impl) {
    case Impl::kNccl: return "nccl";
    case Impl::kNvshmem: return "nvshmem";
    default: return "nvst";
  }
}

// The element type and the reduction of a run (-d, -o), in each
// implementation's terms.
struct Element {
  std::size_t bytes;
  nvst::coll::DType ours;
  ncclDataType_t nccl;
  int nvshmem;  // NVSTB_*
};

Element element_named(const std::string& d) {
  using nvst::coll::DType;
  if (d == "half") return {2, DType::kF16, ncclFloat16, NVSTB_F16};
  if (d == "float") return {4, DType::kF32, ncclFloat32, NVSTB_F32};
  if (d == "int32") return {4, DType::kI32, ncclInt32, NVSTB_I32};
  if (d == "int64") return {8, DType::kI64, ncclInt64, NVSTB_I64};
  NVST_REQUIRE(d == "bfloat16", "nvst bench coll: -d ", d, " is not bfloat16, half, float, int32 or int64");
  return {2, DType::kBF16, ncclBfloat16, NVSTB_BF16};
}

enum class Op { kSum, kProd, kMax, kMin };

struct Reduction {
  Op op;
  nvst::coll::RedOp ours;
  ncclRedOp_t nccl;
  int nvshmem;  // NVSTB_*, or -1: NVSHMEM has no product
};

Reduction reduction_named(const std::string& o) {
  using nvst::coll::RedOp;
  if (o == "prod") return {Op::kProd, RedOp::kProd, ncclProd, -1};
  if (o == "max") return {Op::kMax, RedOp::kMax, ncclMax, NVSTB_MAX};
  if (o == "min") return {Op::kMin, RedOp::kMin, ncclMin, NVSTB_MIN};
  NVST_REQUIRE(o == "sum", "nvst bench coll: -o ", o, " is not sum, prod, max or min");
  return {Op::kSum, RedOp::kSum, ncclSum, NVSTB_SUM};
}

template <typename T>
__device__ T from_int(int v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <typename T>
__device__ double to_double(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else
    return static_cast<double>(v);
}

// PE pe's input element i: 0..7, or 1 or 2 for a product (whose results,
// powers of two, stay exact in every type).
__device__ int input_value(std::size_t i, int pe, bool prod) {
  return prod ? static_cast<int>((i * 7 + static_cast<std::size_t>(pe)) % 2) + 1
              : static_cast<int>((i * 7 + static_cast<std::size_t>(pe)) % 8);
}

template <typename T>
__global__ void fill_ints(T* p, std::size_t n, int pe, bool prod) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = from_int<T>(input_value(i, pe, prod));
}

// all_reduce: out[i] = the reduction over PEs of in[i]; all_gather:
// out[p*n + i] = PE p's in[i]; reduce_scatter: out[i] = the reduction over
// PEs of in[me*n + i]; all_to_all: out[p*n + i] = PE p's in[me*n + i].
template <typename T>
__global__ void count_wrong(const T* out, std::size_t n, int npes, int me, Coll coll, Op op,
                            unsigned long long* wrong) {
  unsigned long long bad = 0;
  const bool gathers = coll == Coll::kAllGather || coll == Coll::kAllToAll;
  const bool prod = op == Op::kProd && !gathers;
  const std::size_t total = gathers ? n * static_cast<std::size_t>(npes) : n;
  const std::size_t base = coll == Coll::kReduceScatter ? n * static_cast<std::size_t>(me) : 0;
  for (std::size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < total; j += gridDim.x * blockDim.x) {
    double want = 0;
    if (coll == Coll::kAllGather) {
      want = input_value(j % n, static_cast<int>(j / n), false);
    } else if (coll == Coll::kAllToAll) {
      want = input_value(n * static_cast<std::size_t>(me) + j % n, static_cast<int>(j / n), false);
    } else {
      want = input_value(base + j, 0, prod);
      for (int p = 1; p < npes; ++p) {
        const double v = input_value(base + j, p, prod);
        want = op == Op::kSum ? want + v : op == Op::kProd ? want * v : op == Op::kMax ? fmax(want, v) : fmin(want, v);
      }
    }
    bad += to_double(out[j]) != want;
  }
  if (bad) atomicAdd(wrong, bad);
}

// Calls fn with a value of e's element type (to name the type).
template <typename Fn>
void with_element(const Element& e, Fn&& fn) {
  using nvst::coll::DType;
  switch (e.ours) {
    case DType::kF16: return fn(__half{});
    case DType::kF32: return fn(float{});
    case DType::kI32: return fn(std::int32_t{});
    case DType::kI64: return fn(std::int64_t{});
    default: return fn(__nv_bfloat16{});
  }
}

// True when `ok` holds on every PE. For decisions every PE must take alike:
// a collective that one PE skips hangs the others.
bool on_every_pe(bool ok) {
  const unsigned char mine = ok ? 1 : 0;
  const auto all = nvst::bootstrap_allgather(&mine, sizeof mine);
  return std::all_of(all.begin(), all.end(), [](std::byte b) { return b != std::byte{0}; });
}

long long sum_over_pes(unsigned long long mine) {
  const auto all = nvst::bootstrap_allgather(&mine, sizeof mine);
  long long total = 0;
  for (std::size_t off = 0; off + sizeof mine <= all.size(); off += sizeof mine) {
    unsigned long long x;
    std::memcpy(&x, all.data() + off, sizeof x);
    total += static_cast<long long>(x);
  }
  return total;
}

// Captures `count` calls of `op` on `s` into an executable graph. nullptr,
// with the reason in `why`, when an operation throws or the capture or its
// instantiation fails; the stream leaves capture mode either way.
cudaGraphExec_t capture_graph(cudaStream_t s, int count, const std::function<void()>& op, std::string& why) {
  NVST_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < count; ++i) op();
  } catch (const std::exception& e) {
    why = e.what();
  }
  cudaGraph_t g = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &g);
  if (ended != cudaSuccess && why.empty()) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  if (why.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, g, 0);
    if (made != cudaSuccess) {
      why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
      exec = nullptr;
    }
  }
  if (g) NVST_CHECK_CUDA(cudaGraphDestroy(g));
  // A failed capture leaves its (non-sticky) error pending; `why` has it.
  if (!why.empty()) (void)cudaGetLastError();
  return exec;
}

void run_ours(Coll kind, const void* in, void* out, std::size_t count, const Element& e, const Reduction& r,
              cudaStream_t s) {
  if (kind == Coll::kAllGather)
    nvst::coll::all_gather(in, out, count, e.ours, s);
  else if (kind == Coll::kReduceScatter)
    nvst::coll::reduce_scatter(in, out, count, e.ours, r.ours, s);
  else if (kind == Coll::kAllToAll)
    nvst::coll::all_to_all(in, out, count, e.ours, s);
  else
    nvst::coll::all_reduce(in, out, count, e.ours, r.ours, s);
}

void run_nccl(Coll kind, const void* in, void* out, std::size_t count, const Element& e, const Reduction& red, int n,
              ncclComm_t comm, cudaStream_t s) {
  ncclResult_t r = ncclSuccess;
  if (kind == Coll::kAllToAll) {
    const std::size_t chunk = count * e.bytes;
    r = ncclGroupStart();
    for (int p = 0; p < n && r == ncclSuccess; ++p) {
      r = ncclSend(static_cast<const char*>(in) + chunk * p, count, e.nccl, p, comm, s);
      if (r == ncclSuccess) r = ncclRecv(static_cast<char*>(out) + chunk * p, count, e.nccl, p, comm, s);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
  } else {
    r = kind == Coll::kAllGather       ? ncclAllGather(in, out, count, e.nccl, comm, s)
        : kind == Coll::kReduceScatter ? ncclReduceScatter(in, out, count, e.nccl, red.nccl, comm, s)
                                       : ncclAllReduce(in, out, count, e.nccl, red.nccl, comm, s);
  }
  NVST_REQUIRE(r == ncclSuccess, "NCCL ", name_of(kind), " failed: ", ncclGetErrorString(r));
}

// NVSHMEM's collectives through the plugin. lib.why_not empty: measured.
struct NvshmemColl {
  NvshmemBaseline lib;
  bool started = false;  // NVSHMEM runs on every PE: finalize at the end
  void* in = nullptr;    // in its symmetric heap, max_bytes each
  void* out = nullptr;
  std::size_t rs_max_bytes = SIZE_MAX;  // the largest reduce_scatter source it takes
  std::set<Coll> refused;               // a call was refused: no rows
  std::set<Coll> eager_only;            // graph capture failed: no graph rows
  bool on() const { return lib.loaded(); }
};

int abi_coll(Coll kind) {
  switch (kind) {
    case Coll::kAllGather: return NVSTB_ALL_GATHER;
    case Coll::kReduceScatter: return NVSTB_REDUCE_SCATTER;
    case Coll::kAllToAll: return NVSTB_ALL_TO_ALL;
    default: return NVSTB_ALL_REDUCE;
  }
}

void run_nvshmem(const NvshmemColl& nv, Coll kind, std::size_t count, const Element& e, const Reduction& r,
                 cudaStream_t s) {
  char err[512] = {};
  const int rc = nv.lib.collective(abi_coll(kind), e.nvshmem, r.nvshmem < 0 ? NVSTB_SUM : r.nvshmem, nv.out, nv.in,
                                   count, s, err, sizeof err);
  NVST_REQUIRE(rc == 0, "NVSHMEM ", name_of(kind), " failed: ", err);
}

// NVSHMEM keeps a reduce scratch for each of NVSHMEM_MAX_TEAMS (32 by
// default) possible teams in its heap.
constexpr std::size_t kNvshmemMaxTeams = 32;

// Without NVLS, NVSHMEM's reduce_scatter takes sources up to half its reduce
// scratch, 512 KiB by default: enough for the largest source here, within
// 16 MiB (x 32 teams = 512 MiB of its heap).
std::size_t nvshmem_scratch_bytes(std::size_t max_bytes) {
  return std::bit_ceil(std::clamp(2 * max_bytes, std::size_t{512} << 10, std::size_t{16} << 20));
}

// NVSHMEM reads these at init. The caller's own values win: with a larger
// NVSHMEM_REDUCE_SCRATCH_SIZE, set NVSHMEM_SYMMETRIC_SIZE to match.
void set_nvshmem_env(std::size_t max_bytes) {
  const std::size_t scratch = nvshmem_scratch_bytes(max_bytes);
  ::setenv("NVSHMEM_REDUCE_SCRATCH_SIZE", std::to_string(scratch).c_str(), 0);
  // in and out, the teams' scratches, and room for NVSHMEM's own state.
  const std::size_t heap = 2 * max_bytes + kNvshmemMaxTeams * scratch + (std::size_t{128} << 20);
  ::setenv("NVSHMEM_SYMMETRIC_SIZE", std::to_string(heap).c_str(), 0);
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Loads the plugin, starts NVSHMEM (once in this process) and allocates
// its in and out buffers, on every PE or on none: at the first step that
// fails somewhere, lib.why_not says why on every PE.
NvshmemColl open_nvshmem(std::size_t max_bytes, int me, int n) {
  NvshmemColl nv;
  nv.lib = load_nvshmem_baseline();
  if (!on_every_pe(nv.lib.loaded())) {
    if (nv.lib.loaded()) nv.lib.why_not = "the NVSHMEM plugin did not load on every PE";
    return nv;
  }
  set_nvshmem_env(max_bytes);
  char err[512] = {};
  const bool started_here = nv.lib.init(me, n, bootstrap_broadcast_cb, err, sizeof err) == 0;
  // Finalizing is collective: only where NVSHMEM started everywhere.
  nv.started = on_every_pe(started_here);
  if (!nv.started) {
    nv.lib.why_not = started_here ? "NVSHMEM did not start on every PE" : err;
    return nv;
  }
  nv.in = nv.lib.malloc(max_bytes);
  nv.out = nv.lib.malloc(max_bytes);
  if (!on_every_pe(nv.in && nv.out)) {
    nv.lib.why_not = "nvshmem_malloc of 2 x " + std::to_string(max_bytes) +
                     " bytes failed on a PE (NVSHMEM_SYMMETRIC_SIZE=" + env_or("NVSHMEM_SYMMETRIC_SIZE", "unset") + ")";
    return nv;
  }
  // After the first allocation: NVSHMEM may set up its device state (and
  // learn whether PEs share GPUs) only at its first call after init.
  if (nv.lib.coll_supported(err, sizeof err) != 0) nv.lib.why_not = err;
  if (!on_every_pe(nv.lib.loaded())) {
    if (nv.lib.loaded()) nv.lib.why_not = "NVSHMEM's collectives cannot run on every PE";
    return nv;
  }
  if (nv.lib.coll_max_bytes(NVSTB_REDUCE_SCATTER, &nv.rs_max_bytes, err, sizeof err) != 0) nv.lib.why_not = err;
  return nv;
}

void close_nvshmem(NvshmemColl& nv) {
  if (!nv.started) return;
  if (nv.on()) {  // the buffers exist on every PE (nvshmem_free is collective)
    nv.lib.free(nv.out);
    nv.lib.free(nv.in);
  }
  nv.lib.finalize();  // releases the heap, buffers left by a failed open included
}

// What the JSON and the table say of the NVSHMEM column's set-up.
std::string nvshmem_setup_note(const NvshmemColl& nv) {
  return "nvshmem " + std::string(nv.lib.version()) +
         ": nvshmemx_<type>_{<op>_reduce,fcollect,<op>_reducescatter,alltoall}_on_stream on NVSHMEM_TEAM_WORLD, "
         "buffers in its symmetric heap; NVSHMEM_DISABLE_NVLS=" +
         env_or("NVSHMEM_DISABLE_NVLS", "unset") + ", NVSHMEM_DISABLE_NCCL=" + env_or("NVSHMEM_DISABLE_NCCL", "unset") +
         " (1: its own kernels, not NCCL's), NVSHMEM_REDUCE_SCRATCH_SIZE=" +
         env_or("NVSHMEM_REDUCE_SCRATCH_SIZE", "unset");
}

}  // namespace

int bench_coll(const BenchOptions& o) {
  nvst::InitOptions init;
  init.heap_bytes = std::size_t{512} << 20;  // the collectives' workspace (128 MiB) and flags
  nvst::init(init);
  NVST_REQUIRE(nvst::device() >= 0, "nvst bench coll needs GPUs");
  const int me = nvst::my_pe(), n = nvst::n_pes();
  nvst::coll::prepare();
  const Element elem = element_named(o.datatype);
  const Reduction red = reduction_named(o.redop);
  const std::size_t es = elem.bytes;
  // NCCL refuses two ranks on one GPU, and NVSHMEM's collectives too
  // without MPS: on a shared GPU only ours runs (results checked, times not
  // a measurement).
  const std::string shared = pes_sharing_a_gpu();
  ncclComm_t comm{};
  if (shared.empty()) {
    ncclUniqueId nid{};
    if (me == 0) NVST_REQUIRE(ncclGetUniqueId(&nid) == ncclSuccess, "ncclGetUniqueId failed");
    nvst::bootstrap_broadcast(&nid, sizeof(nid), 0);
    NVST_REQUIRE(ncclCommInitRank(&comm, n, nid, me) == ncclSuccess, "ncclCommInitRank failed");
  } else if (me == 0) {
    std::printf("# NCCL and NVSHMEM columns: n/a (%s share a GPU); ours only, to check -d %s -o %s\n", shared.c_str(),
                o.datatype.c_str(), o.redop.c_str());
  }
  NvshmemColl nv;
  if (shared.empty())
    nv = open_nvshmem(o.max_bytes, me, n);
  else
    nv.lib.why_not = "the PEs share a GPU";  // not loaded: an empty why_not would mean loaded
  if (shared.empty() && !nv.on() && me == 0) std::printf("# NVSHMEM column: n/a (%s)\n", nv.lib.why_not.c_str());
  cudaStream_t s;
  cudaEvent_t t0, t1;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  NVST_CHECK_CUDA(cudaEventCreate(&t0));
  NVST_CHECK_CUDA(cudaEventCreate(&t1));
  void *in = nullptr, *out = nullptr;
  unsigned long long* wrong = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&in, o.max_bytes));
  NVST_CHECK_CUDA(cudaMalloc(&out, o.max_bytes));
  NVST_CHECK_CUDA(cudaMalloc(&wrong, sizeof(*wrong)));
  Report report;
  report.label = o.label;
  if (nv.on()) {
    report.nvshmem_version = nv.lib.version();
    report.notes.push_back(nvshmem_setup_note(nv));
  }
  const int per_graph = o.graph_iters > 0 ? o.graph_iters : 20;

  // Median time per operation, in us. With `may_fail` (NVSHMEM), a refused
  // warm-up call or a failed capture returns nothing on every PE, `why`
  // saying why; without, they are errors.
  auto time_it = [&](const std::function<void()>& op, bool graph, bool may_fail,
                     std::string& why) -> std::optional<double> {
    if (may_fail) {
      // The plugin checks its arguments before NVSHMEM runs anything: a
      // refusal comes from the first call on every PE alike. That first call
      // is eager (-w 0 too), so NVSHMEM's set-up never runs inside a capture.
      bool ok = true;
      try {
        for (int i = 0; i < std::max(1, o.warmup); ++i) op();
      } catch (const std::exception& e) {
        why = e.what();
        ok = false;
      }
      if (!on_every_pe(ok)) {
        if (why.empty()) why = "it failed on another PE";
        return std::nullopt;
      }
    } else {
      for (int i = 0; i < o.warmup; ++i) op();
    }
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    cudaGraphExec_t exec = nullptr;
    if (graph) {
      exec = capture_graph(s, per_graph, op, why);
      if (!may_fail) NVST_REQUIRE(exec, "CUDA graph capture failed: ", why);
      if (!on_every_pe(exec != nullptr)) {
        if (exec) NVST_CHECK_CUDA(cudaGraphExecDestroy(exec));
        if (why.empty()) why = "it failed on another PE";
        return std::nullopt;
      }
      NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));  // warm the graph
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    }
    std::vector<double> us;
    for (int k = 0; k < o.samples; ++k) {
      nvst::bootstrap_barrier();
      NVST_CHECK_CUDA(cudaEventRecord(t0, s));
      if (graph)
        NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));
      else
        for (int i = 0; i < o.iters; ++i) op();
      NVST_CHECK_CUDA(cudaEventRecord(t1, s));
      NVST_CHECK_CUDA(cudaEventSynchronize(t1));
      float ms = 0;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
      us.push_back(1000.0 * ms / (graph ? per_graph : o.iters));
    }
    if (exec) NVST_CHECK_CUDA(cudaGraphExecDestroy(exec));
    double t = median(us);
    nvst::bootstrap_broadcast(&t, sizeof(t), 0);
    return t;
  };

  // Elements of `got` that differ from the expected result, over all PEs.
  auto wrong_elements = [&](const void* got, std::size_t per_pe, Coll kind) {
    NVST_CHECK_CUDA(cudaMemsetAsync(wrong, 0, sizeof(*wrong), s));
    with_element(elem, [&](auto zero) {
      using T = decltype(zero);
      count_wrong<T><<<132, 256, 0, s>>>(static_cast<const T*>(got), per_pe, n, me, kind, red.op, wrong);
    });
    NVST_CHECK_LAUNCH();
    unsigned long long w = 0;
    NVST_CHECK_CUDA(cudaMemcpyAsync(&w, wrong, sizeof(w), cudaMemcpyDeviceToHost, s));
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    return sum_over_pes(w);
  };

  std::vector<Impl> impls = {Impl::kOurs};
  if (shared.empty()) impls.push_back(Impl::kNccl);
  // NVSHMEM has no product: its column then has only the gathers.
  if (nv.on()) impls.push_back(Impl::kNvshmem);
  bool rs_limit_noted = false;
  // Sizes as nccl-tests: all_reduce the buffer, all_gather the output,
  // reduce_scatter the input (n x the output), all_to_all the send buffer.
  for (Coll kind : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kAllToAll}) {
    const char* coll = name_of(kind);
    for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes = static_cast<std::size_t>(bytes * o.factor)) {
      const std::size_t elems = bytes / es;
      const std::size_t per_pe = kind == Coll::kAllReduce ? elems : elems / static_cast<std::size_t>(n);
      if (per_pe == 0) continue;
      const std::size_t in_elems = kind == Coll::kReduceScatter || kind == Coll::kAllToAll ? per_pe * n : per_pe;
      const std::size_t out_elems = kind == Coll::kAllGather || kind == Coll::kAllToAll ? per_pe * n : per_pe;
      const std::size_t used = kind == Coll::kAllReduce ? per_pe : per_pe * n;  // bytes the size column counts
      const bool reduces = kind == Coll::kAllReduce || kind == Coll::kReduceScatter;
      with_element(elem, [&](auto zero) {
        using T = decltype(zero);
        fill_ints<T><<<132, 256, 0, s>>>(static_cast<T*>(in), in_elems, me, reduces && red.op == Op::kProd);
      });
      NVST_CHECK_LAUNCH();
      // NVSHMEM gets the same input, in its heap, where it can take the size.
      const bool nv_fits = nv.on() && !(kind == Coll::kReduceScatter && in_elems * es > nv.rs_max_bytes) &&
                           !(reduces && red.nvshmem < 0);
      if (nv_fits) NVST_CHECK_CUDA(cudaMemcpyAsync(nv.in, in, in_elems * es, cudaMemcpyDeviceToDevice, s));
      if (nv.on() && !nv_fits && !rs_limit_noted) {
        rs_limit_noted = true;
        report.notes.push_back("nvshmem reduce_scatter: sources above " + std::to_string(nv.rs_max_bytes) +
                               " bytes not measured (n/a): without NVLS it holds the whole source in "
                               "NVSHMEM_REDUCE_SCRATCH_SIZE / 2; set that to twice the largest source "
                               "(and NVSHMEM_SYMMETRIC_SIZE to match) to measure them");
      }
      const double alg_factor = 1.0;
      const double bus_factor = kind == Coll::kAllReduce ? 2.0 * (n - 1.0) / n : (n - 1.0) / n;
      for (bool graph : {false, true}) {
        for (Impl impl : impls) {
          const bool theirs = impl == Impl::kNvshmem;
          if (theirs && (!nv_fits || nv.refused.count(kind) || (graph && nv.eager_only.count(kind)))) continue;
          progress(std::string(coll) + " " + name_of(impl) + (graph ? " graph " : " eager ") + std::to_string(bytes));
          void* dst = theirs ? nv.out : out;
          NVST_CHECK_CUDA(cudaMemsetAsync(dst, 0xFF, out_elems * es, s));
          auto op = [&] {
            if (impl == Impl::kOurs)
              run_ours(kind, in, out, per_pe, elem, red, s);
            else if (impl == Impl::kNccl)
              run_nccl(kind, in, out, per_pe, elem, red, n, comm, s);
            else
              run_nvshmem(nv, kind, per_pe, elem, red, s);
          };
          std::string why;
          const std::optional<double> t = time_it(op, graph, /*may_fail=*/theirs, why);
          if (!t) {  // NVSHMEM only: refused, or did not capture
            (graph ? nv.eager_only : nv.refused).insert(kind);
            report.notes.push_back("nvshmem " + std::string(coll) +
                                   (graph ? ": CUDA graph capture failed (" + why + "); measured eager only"
                                          : ": " + why + "; not measured"));
            continue;
          }
          const long long total = wrong_elements(dst, per_pe, kind);
          const double algbw = static_cast<double>(used * es) * alg_factor / *t / 1e3;
          report.add({std::string(coll) + (graph ? "_graph" : "_eager"), name_of(impl), used * es, *t, algbw,
                      algbw * bus_factor, total});
        }
      }
      if (bytes * o.factor <= bytes) break;
    }
  }
  if (me == 0) {
    progress_done();
    std::printf("# %d PEs, %s, %s; time per operation; busbw as nccl-tests\n", n, o.datatype.c_str(), o.redop.c_str());
    report.notes.push_back("datatype " + o.datatype + ", op " + o.redop);
    if (!shared.empty()) report.notes.push_back("PEs share a GPU (" + shared + "): ours only, times not a measurement");
    if (nv.on()) {
      report.add_speedups("nvst", "nvshmem");
      report.print_table("nvst", {"nccl"}, {"nvshmem"});
    } else if (shared.empty()) {
      report.print_table("nvst", {"nccl"});
    } else {
      report.print_table("nvst", {});
    }
    report.write_json(o.json_path);
  }
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  close_nvshmem(nv);
  if (comm) ncclCommDestroy(comm);
  NVST_CHECK_CUDA(cudaFree(in));
  NVST_CHECK_CUDA(cudaFree(out));
  NVST_CHECK_CUDA(cudaFree(wrong));
  nvst::finalize();
  return 0;
}

}  // namespace nvst::tools
