// `nvst bench ep`: expert-parallel dispatch and combine (nvst::ep::Buffer)
// at DeepEP's test configurations, against the same routing done with NCCL
// all-to-all-v in the same process and run.
//
// The baseline uses our layout (send_pos and the count matrix of the
// dispatch handle): a pack kernel puts each token's row into a send buffer
// ordered by destination, grouped ncclSend/ncclRecv move the rows, and for
// the combine the rows go back the same way and a kernel sums them per token
// in PE order. Its receive and combine buffers are therefore byte-for-byte
// what ours must produce, and #wrong compares the two exactly.
//
// Bandwidth is DeepEP's accounting (its tests/test_intranode.py and
// test_low_latency.py): normal dispatch = received rows x row bytes (fp8:
// x (1 + 4/128) with the scales), combine = received rows x hidden x 2;
// low latency = this PE's (token, expert) selections x the same row bytes.
//
// Per call (the last table): each low-latency and normal-mode call's GPU
// time (low latency: 20 calls captured in one CUDA graph, per call; normal
// mode, whose first dispatch syncs with the host: back to back on a stream),
// its eager latency (events around one call on an idle GPU, median), its
// host cost (CPU time to issue one call, no GPU wait), the bytes it must
// read and write at this PE, the roofline time of those bytes at the HBM
// copy bandwidth measured in the same run (a 1 GiB device-to-device copy)
// and the ratio; at one PE also the nearest plain CUDA equivalent (a gather
// of the same rows for a dispatch, a weighted sum for a combine).
//
// In a program linked to NVSHMEM (nvst_nvshmem) a second pass runs the same
// kernels again on NVSHMEM: the runtime restarts with its heap in
// nvshmem_malloc memory, the node peers' copies reached through nvshmem_ptr,
// and the rows land in the table's "nvst@nvshmem" column, checked against
// NCCL's result of the first pass like ours.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "bench.hpp"
#include "nvst/ep.hpp"
#include "nvst/nvst.hpp"
#include "report.hpp"

namespace nvst::tools {

namespace {

using nvst::ep::XType;

__device__ __forceinline__ std::uint32_t hash32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}
__global__ void fill_bf16(__nv_bfloat16* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(static_cast<float>(hash32(seed * 0x9E3779B97F4A7C15ull + i) % 4001) / 1000.f - 2.f);
}
// The low-latency combine's output on this PE against what it must be when
// every expert hands back the rows it received times `scale`: for token t,
// the sum over its slots (k in order, one fused multiply-add each) of
// w[t][k] * bf16(scale * x[t]), bit for bit; with LogFMT within its bound
// (2.2 % of the terms' magnitudes, plus bf16 rounding).
__global__ void check_ll_combine(const __nv_bfloat16* out, const __nv_bfloat16* x, const std::int64_t* topk,
                                 const float* w, int num_tokens, int hidden, int num_topk, float scale, bool logfmt,
                                 unsigned long long* wrong) {
  const std::size_t n = static_cast<std::size_t>(num_tokens) * hidden;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const std::size_t t = i / hidden;
    const float y = __bfloat162float(__float2bfloat16(scale * __bfloat162float(x[i])));
    float acc = 0.0f, mag = 0.0f;
    for (int k = 0; k < num_topk; ++k) {
      if (topk[t * num_topk + k] < 0) continue;
      const float wt = w[t * num_topk + k];
      acc = __fmaf_rn(wt, y, acc);
      mag += fabsf(wt * y);
    }
    const float got = __bfloat162float(out[i]);
    const bool bad = logfmt ? !(fabsf(got - acc) <= mag * 0.0223f + fabsf(acc) / 256 + 1e-6f)
                            : __bfloat16_as_ushort(out[i]) != __bfloat16_as_ushort(__float2bfloat16(acc));
    if (bad) atomicAdd(wrong, 1ull);
  }
}

// Expert outputs of the LogFMT combine row: [-0.5, 0.5], so that every
// group of 128 channels is under 1 in magnitude and goes compressed.
__global__ void quarter_bf16(__nv_bfloat16* p, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(0.25f * __bfloat162float(p[i]));
}
__global__ void fill_fp8(std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    std::uint8_t v = static_cast<std::uint8_t>(hash32(seed * 0x9E3779B97F4A7C15ull + i));
    p[i] = (v & 0x7F) == 0x7F ? static_cast<std::uint8_t>(v ^ 1) : v;  // no NaN
  }
}
__global__ void fill_f32(float* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = 0.25f + static_cast<float>(hash32(seed + i) % 1000) / 500.f;
}

// Differing 16-byte words between a and b (n bytes, a multiple of 16).
__global__ void count_diff(const int4* a, const int4* b, std::size_t n16, unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += gridDim.x * blockDim.x) {
    const int4 x = a[i], y = b[i];
    bad += x.x != y.x || x.y != y.y || x.z != y.z || x.w != y.w;
  }
  if (bad) atomicAdd(wrong, bad);
}

struct Offsets {
  int v[64];
};

// The plain CUDA equivalent of a low-latency dispatch at one PE: row
// dst[j] = x[src[j]] (a block a row), as bf16 or quantised to e4m3 with one
// scale per 128 channels (scales [row][H / 128]).
__global__ void gather_rows(const __nv_bfloat16* x, const int* src, const int* dst, int hidden, bool fp8, void* out,
                            float* scales) {
  const int j = blockIdx.x;
  const __nv_bfloat16* in = x + static_cast<std::size_t>(src[j]) * hidden;
  const std::size_t row = static_cast<std::size_t>(dst[j]);
  if (!fp8) {
    for (int v = threadIdx.x; v < hidden / 8; v += blockDim.x)
      reinterpret_cast<int4*>(static_cast<__nv_bfloat16*>(out) + row * hidden)[v] =
          reinterpret_cast<const int4*>(in)[v];
    return;
  }
  // A warp-aligned group of 8 threads holds one 128-channel group.
  for (int v0 = 0; v0 < hidden / 16; v0 += blockDim.x) {
    const int v = v0 + threadIdx.x;
    float f[16];
    float amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
      f[i] = v < hidden / 16 ? __bfloat162float(in[v * 16 + i]) : 0.0f;
      amax = fmaxf(amax, fabsf(f[i]));
    }
    for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
    if (v >= hidden / 16) continue;
    const float scale = fmaxf(amax, 1e-4f) / 448.0f;
    std::uint8_t q[16];
    for (int i = 0; i < 16; ++i)
      q[i] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(f[i] / scale, __NV_SATFINITE, __NV_E4M3));
    reinterpret_cast<int4*>(static_cast<std::uint8_t*>(out) + row * hidden)[v] = *reinterpret_cast<const int4*>(q);
    if (v % 8 == 0) scales[row * (hidden / 128) + v / 8] = scale;
  }
}

// The plain CUDA equivalent of a low-latency combine at one PE: out[t] =
// sum over k of w[t][k] * y[row[t][k]] in fp32, a thread per 8 channels.
__global__ void weighted_sum(const __nv_bfloat16* y, const int* row, const float* w, int num_tokens, int hidden,
                             int num_topk, __nv_bfloat16* out) {
  const int vecs = hidden / 8;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_tokens * vecs) return;
  const int t = i / vecs, v = i % vecs;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < num_topk; ++k) {
    const int r = row[t * num_topk + k];
    if (r < 0) continue;
    const float wt = w[t * num_topk + k];
    const int4 q = reinterpret_cast<const int4*>(y + static_cast<std::size_t>(r) * hidden)[v];
    const auto* h = reinterpret_cast<const __nv_bfloat16*>(&q);
    for (int c = 0; c < 8; ++c) acc[c] = __fmaf_rn(wt, __bfloat162float(h[c]), acc[c]);
  }
  int4 o;
  auto* oh = reinterpret_cast<__nv_bfloat16*>(&o);
  for (int c = 0; c < 8; ++c) oh[c] = __float2bfloat16(acc[c]);
  reinterpret_cast<int4*>(out + static_cast<std::size_t>(t) * hidden)[v] = o;
}

// Baseline pack: token t's row to send_buf[send_off[r] + send_pos[t][r]].
__global__ void pack_rows(const char* x, std::size_t row_bytes, const int* send_pos, int num_tokens, int npes,
                          Offsets send_off, char* send_buf) {
  const int warps = blockDim.x / 32, lane = threadIdx.x & 31;
  for (int t = blockIdx.x * warps + threadIdx.x / 32; t < num_tokens; t += gridDim.x * warps)
    for (int r = 0; r < npes; ++r) {
      const int p = send_pos[static_cast<std::size_t>(t) * npes + r];
      if (p < 0) continue;
      const int4* src = reinterpret_cast<const int4*>(x + static_cast<std::size_t>(t) * row_bytes);
      int4* dst = reinterpret_cast<int4*>(send_buf + static_cast<std::size_t>(send_off.v[r] + p) * row_bytes);
      for (std::size_t i = lane; i < row_bytes / 16; i += 32) dst[i] = src[i];
    }
}

// Baseline combine: out[t] = sum over PEs (in order) of the returned rows, fp32.
// In PE order, in fp32; the PEs of another node (nodes of G PEs; this is
// node `home`) are summed apart and rounded to bf16 first, as our
// hierarchical combine does on the relay, so that #wrong can be exact.
__global__ void reduce_rows(const __nv_bfloat16* back, const int* send_pos, int num_tokens, int npes, Offsets send_off,
                            int hidden, int G, int home, __nv_bfloat16* out) {
  const int warps = blockDim.x / 32, lane = threadIdx.x & 31;
  for (int t = blockIdx.x * warps + threadIdx.x / 32; t < num_tokens; t += gridDim.x * warps)
    for (int v = lane; v < hidden / 8; v += 32) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int n = 0; n < npes / G; ++n) {
        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        bool any = false;
        for (int r = n * G; r < (n + 1) * G; ++r) {
          const int p = send_pos[static_cast<std::size_t>(t) * npes + r];
          if (p < 0) continue;
          const int4 q = reinterpret_cast<const int4*>(back + static_cast<std::size_t>(send_off.v[r] + p) * hidden)[v];
          const auto* h = reinterpret_cast<const __nv_bfloat16*>(&q);
          for (int k = 0; k < 8; ++k) (n == home ? acc[k] : part[k]) += __bfloat162float(h[k]);
          any = true;
        }
        if (n != home && any)
          for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(__float2bfloat16(part[k]));
      }
      int4 o;
      auto* oh = reinterpret_cast<__nv_bfloat16*>(&o);
      for (int k = 0; k < 8; ++k) oh[k] = __float2bfloat16(acc[k]);
      reinterpret_cast<int4*>(out + static_cast<std::size_t>(t) * hidden)[v] = o;
    }
}

void check_nccl(ncclResult_t r, const char* what) {
  NVST_REQUIRE(r == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(r));
}

struct Case {
  const char* name;
  int T, H, K, E;
};

// The name of ours' rows in a pass on NVSHMEM's heap.
constexpr const char* kOnNvshmem = "nvst@nvshmem";

// One call of the per-call table, the slowest PE's values (us, bytes).
struct CallRow {
  std::string op;
  double gpu = 0;  // graph-batched (low latency) or back to back on a stream (normal mode)
  bool graph = false;
  double stream = 0;  // calls issued back to back on a stream, per call
  double eager = 0, host = 0, must = 0;
  double equiv = 0;  // the plain CUDA equivalent's GPU time (one PE), 0: none
};
struct CallTable {
  double copy_gbps = 0;  // HBM copy bandwidth: a 1 GiB device-to-device copy
  std::vector<CallRow> rows;
  // The table (rank 0), then the rows into the report for the JSON.
  void print(int n_pes) const;
  void add_to(Report& report) const;
};

void CallTable::print(int n_pes) const {
  std::printf(
      "\n# per call, %d PE(s): gpu = GPU time per call (low latency: %s; normal mode: back to back on a "
      "stream); stream = back to back on a stream; eager = one call on an idle GPU (events around it, "
      "median); host = CPU time to issue one call; must = bytes the call must read and write at one PE; "
      "roofline = must at %.0f GB/s (a 1 GiB device copy in this run); cuda = the plain CUDA equivalent "
      "(gather / weighted sum, one PE only)\n",
      n_pes, "20 calls in one CUDA graph", copy_gbps);
  std::printf("# %-58s %8s %8s %8s %8s %9s %9s %8s %8s\n", "call", "gpu(us)", "stream", "eager", "host", "must(MB)",
              "roofline", "gpu/roof", "cuda(us)");
  for (const CallRow& r : rows) {
    const double roof = r.must / copy_gbps / 1e3;
    std::printf("  %-58s %7.2f%s %8.2f %8.2f %8.2f %9.2f %9.2f %7.1fx", r.op.c_str(), r.gpu, r.graph ? "g" : "s",
                r.stream, r.eager, r.host, r.must / 1e6, roof, r.gpu / roof);
    if (r.equiv > 0)
      std::printf(" %8.2f\n", r.equiv);
    else
      std::printf(" %8s\n", "-");
  }
}

void CallTable::add_to(Report& report) const {
  for (const CallRow& r : rows) {
    const auto bytes = static_cast<std::size_t>(r.must);
    auto row = [&](const char* impl, double us) {
      if (us > 0) report.add({r.op, impl, bytes, us, r.must / us / 1e3, r.must / us / 1e3, 0});
    };
    row(r.graph ? "nvst_graph" : "nvst_stream", r.gpu);
    row("nvst_eager", r.eager);
    row("nvst_host", r.host);
    row("roofline", r.must / copy_gbps / 1e3);
    row("cuda_equiv", r.equiv);
  }
  if (!rows.empty())
    report.notes.push_back(
        "per call (ops named 'per call'): nvst_graph = GPU time per call, 20 calls in one CUDA "
        "graph; nvst_stream = back to back on a stream; nvst_eager = one call on an idle GPU; "
        "nvst_host = CPU time to issue one call; roofline = the bytes the call must read and write "
        "at one PE over the HBM copy bandwidth of the run (" +
        std::to_string(static_cast<int>(copy_gbps)) +
        " GB/s); cuda_equiv = a plain CUDA gather "
        "or weighted sum of the same rows (one PE)");
}

class EpBench {
 public:
  // `impl` names ours' rows ("nvst", or kOnNvshmem on NVSHMEM's heap); the
  // NCCL baseline and the SM sweep run only in the pass named "nvst".
  // `comm`: the NCCL communicator of every pass, made by the first (it
  // outlives the runtime's finalize; the caller destroys it).
  EpBench(const BenchOptions& o, Report& report, CallTable& calls, const std::string& impl, ncclComm_t& comm)
      : o_(o),
        me_(nvst::my_pe()),
        n_(nvst::n_pes()),
        impl_(impl),
        first_pass_(impl == "nvst"),
        report_(report),
        calls_(calls) {
    if (comm == nullptr) {
      const std::string shared = pes_sharing_a_gpu();
      NVST_REQUIRE(shared.empty(),
                   "nvst bench ep checks ours against NCCL all-to-all-v, and NCCL refuses two ranks "
                   "on one GPU: ",
                   shared,
                   "; give every PE a GPU of its own (nvst_ep_tests checks the Buffer on a "
                   "shared GPU)");
      ncclUniqueId nid{};
      if (me_ == 0) check_nccl(ncclGetUniqueId(&nid), "ncclGetUniqueId");
      nvst::bootstrap_broadcast(&nid, sizeof(nid), 0);
      check_nccl(ncclCommInitRank(&comm, n_, nid, me_), "ncclCommInitRank");
    }
    comm_ = comm;
    NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
    NVST_CHECK_CUDA(cudaEventCreate(&t0_));
    NVST_CHECK_CUDA(cudaEventCreate(&t1_));
    NVST_CHECK_CUDA(cudaMalloc(&wrong_, sizeof(*wrong_)));
  }
  ~EpBench() {
    cudaFree(wrong_);
    cudaEventDestroy(t0_);
    cudaEventDestroy(t1_);
    cudaStreamDestroy(s_);
  }

  void normal(const Case& c);
  void low_latency(const Case& c);
  // The HBM copy bandwidth (GB/s, read + write) into the call table: a
  // 1 GiB device-to-device copy, median of 5, PE by PE (PEs may share a GPU).
  void measure_copy_bandwidth();

 private:
  // GPU time per call: o_.graph_iters calls captured in one CUDA graph and
  // replayed; the slowest PE's median.
  double graph_time(const std::function<void()>& op) {
    op();
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    const int n = std::max(1, o_.graph_iters);
    cudaGraph_t g{};
    cudaGraphExec_t exec{};
    NVST_CHECK_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; ++i) op();
    NVST_CHECK_CUDA(cudaStreamEndCapture(s_, &g));
    NVST_CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    NVST_CHECK_CUDA(cudaGraphLaunch(exec, s_));
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    std::vector<double> us;
    for (int k = 0; k < std::max(o_.samples, 10); ++k) {
      nvst::bootstrap_barrier();
      NVST_CHECK_CUDA(cudaEventRecord(t0_, s_));
      NVST_CHECK_CUDA(cudaGraphLaunch(exec, s_));
      NVST_CHECK_CUDA(cudaEventRecord(t1_, s_));
      NVST_CHECK_CUDA(cudaEventSynchronize(t1_));
      float ms = 0;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0_, t1_));
      us.push_back(1000.0 * ms / n);
    }
    NVST_CHECK_CUDA(cudaGraphExecDestroy(exec));
    NVST_CHECK_CUDA(cudaGraphDestroy(g));
    return max_over_pes(median(us));
  }
  // One call on an idle GPU, events around it: the slowest PE's median.
  double eager_latency(const std::function<void()>& op) {
    std::vector<double> us;
    for (int k = 0; k < 20; ++k) {
      NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
      nvst::bootstrap_barrier();
      NVST_CHECK_CUDA(cudaEventRecord(t0_, s_));
      op();
      NVST_CHECK_CUDA(cudaEventRecord(t1_, s_));
      NVST_CHECK_CUDA(cudaEventSynchronize(t1_));
      float ms = 0;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0_, t1_));
      us.push_back(1000.0 * ms);
    }
    return max_over_pes(median(us));
  }
  // CPU time to issue one call (o_.iters calls back to back, no GPU wait
  // inside): the slowest PE's median.
  double host_cost(const std::function<void()>& op) {
    std::vector<double> us;
    for (int k = 0; k < o_.samples; ++k) {
      NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
      nvst::bootstrap_barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o_.iters; ++i) op();
      const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      us.push_back(took.count() / o_.iters);
    }
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    return max_over_pes(median(us));
  }
  // A row of the per-call table (first pass only): `stream` is the call's
  // back-to-back time already measured; with `graph`, the GPU time is the
  // graph-batched one, else `stream`.
  void add_call(const std::string& op, const std::function<void()>& call, bool graph, double stream, double must,
                double equiv = 0) {
    if (!first_pass_) return;
    progress(op + " per call");
    CallRow r;
    r.op = op + " per call";
    r.graph = graph;
    r.gpu = graph ? graph_time(call) : stream;
    r.stream = stream;
    r.eager = eager_latency(call);
    r.host = host_cost(call);
    r.must = mean_over_pes(must);
    r.equiv = equiv;
    calls_.rows.push_back(r);
  }

  // Median time of op (us) on this PE, then the slowest PE's, everywhere.
  // NCCL's result is every pass's reference; it is timed in the first pass
  // only (its row), later passes just run it once.
  double reference_op(const std::function<void()>& op) {
    if (first_pass_) return time_op(op);
    op();
    return 0;
  }
  // `iters` calls a sample (0: o_.iters).
  double time_op(const std::function<void()>& op, int iters = 0) {
    if (iters <= 0) iters = o_.iters;
    for (int i = 0; i < o_.warmup; ++i) op();
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    std::vector<double> us;
    for (int k = 0; k < o_.samples; ++k) {
      nvst::bootstrap_barrier();
      NVST_CHECK_CUDA(cudaEventRecord(t0_, s_));
      for (int i = 0; i < iters; ++i) op();
      NVST_CHECK_CUDA(cudaEventRecord(t1_, s_));
      NVST_CHECK_CUDA(cudaEventSynchronize(t1_));
      float ms = 0;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0_, t1_));
      us.push_back(1000.0 * ms / iters);
    }
    return max_over_pes(median(us));
  }
  double max_over_pes(double v) {
    auto all = nvst::bootstrap_allgather(&v, sizeof(v));
    double m = 0;
    for (int p = 0; p < n_; ++p) m = std::max(m, reinterpret_cast<const double*>(all.data())[p]);
    return m;
  }
  double mean_over_pes(double v) {
    auto all = nvst::bootstrap_allgather(&v, sizeof(v));
    double m = 0;
    for (int p = 0; p < n_; ++p) m += reinterpret_cast<const double*>(all.data())[p];
    return m / n_;
  }
  // Wrong values over all PEs: `count` launches, on s_, kernels that add
  // this PE's to the counter it is given.
  long long wrong_on_all_pes(const std::function<void(unsigned long long*)>& count) {
    NVST_CHECK_CUDA(cudaMemsetAsync(wrong_, 0, sizeof(*wrong_), s_));
    count(wrong_);
    NVST_CHECK_LAUNCH();
    unsigned long long w = 0;
    NVST_CHECK_CUDA(cudaMemcpyAsync(&w, wrong_, sizeof(w), cudaMemcpyDeviceToHost, s_));
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    return static_cast<long long>(mean_over_pes(static_cast<double>(w)) * n_ + 0.5);
  }
  long long diff(const void* a, const void* b, std::size_t bytes) {
    return wrong_on_all_pes([&](unsigned long long* wrong) {
      if (bytes)
        count_diff<<<264, 256, 0, s_>>>(static_cast<const int4*>(a), static_cast<const int4*>(b), bytes / 16, wrong);
    });
  }
  void add(const std::string& op, const std::string& impl, double bytes, double t, long long wrong) {
    const double gbps = bytes / t / 1e3;
    report_.add({op, impl, static_cast<std::size_t>(bytes), t, gbps, gbps, wrong});
  }
  // NCCL all-to-all-v of rows: PE r gets count[me][r] rows from send_buf at
  // send_off[r] and this PE gets count[r][me] rows at recv_off[r].
  void a2av(const nvst::ep::DispatchHandle& h, const char* send_buf, char* recv_buf, std::size_t row_bytes, bool back) {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n_; ++r) {
      // Forward: send rows to r, receive r's rows. Back: the other way.
      const std::size_t to_r = static_cast<std::size_t>(back ? h.count[r * n_ + me_] : h.count[me_ * n_ + r]);
      const std::size_t from_r = static_cast<std::size_t>(back ? h.count[me_ * n_ + r] : h.count[r * n_ + me_]);
      const std::size_t s_off = static_cast<std::size_t>(back ? h.recv_offset(r, me_) : h.send_offset(me_, r));
      const std::size_t r_off = static_cast<std::size_t>(back ? h.send_offset(me_, r) : h.recv_offset(r, me_));
      check_nccl(ncclSend(send_buf + s_off * row_bytes, to_r * row_bytes, ncclUint8, r, comm_, s_), "ncclSend");
      check_nccl(ncclRecv(recv_buf + r_off * row_bytes, from_r * row_bytes, ncclUint8, r, comm_, s_), "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }
  Offsets send_offsets(const nvst::ep::DispatchHandle& h) {
    Offsets off{};
    for (int r = 0; r < n_; ++r) off.v[r] = h.send_offset(me_, r);
    return off;
  }

  // Ours' row name for `sms` SMs: impl_ at DeepEP's 24, else nvst_smN.
  std::string impl_at(int sms) const {
    return sms == nvst::ep::Config{}.num_sms ? impl_ : "nvst_sm" + std::to_string(sms);
  }
  // SM counts to time: the sweep in the first pass, DeepEP's 24 after it.
  std::vector<int> sm_counts() const {
    return first_pass_ ? std::vector<int>{24, 32, 48, 64} : std::vector<int>{nvst::ep::Config{}.num_sms};
  }

  const BenchOptions& o_;
  int me_, n_;
  std::string impl_;
  bool first_pass_;
  ncclComm_t comm_{};
  cudaStream_t s_{};
  cudaEvent_t t0_{}, t1_{};
  unsigned long long* wrong_ = nullptr;
  Report& report_;
  CallTable& calls_;
};

void EpBench::measure_copy_bandwidth() {
  const std::size_t bytes = std::size_t{1} << 30;
  char* a = nullptr;
  char* b = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&a, bytes));
  NVST_CHECK_CUDA(cudaMalloc(&b, bytes));
  NVST_CHECK_CUDA(cudaMemsetAsync(a, 1, bytes, s_));
  double gbps = 0;
  for (int p = 0; p < n_; ++p) {
    nvst::bootstrap_barrier();
    if (p != me_) continue;
    std::vector<double> us;
    for (int k = 0; k < 6; ++k) {
      NVST_CHECK_CUDA(cudaEventRecord(t0_, s_));
      NVST_CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s_));
      NVST_CHECK_CUDA(cudaEventRecord(t1_, s_));
      NVST_CHECK_CUDA(cudaEventSynchronize(t1_));
      float ms = 0;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, t0_, t1_));
      if (k > 0) us.push_back(1000.0 * ms);  // the first warms up
    }
    gbps = 2.0 * static_cast<double>(bytes) / median(us) / 1e3;
  }
  nvst::bootstrap_barrier();
  NVST_CHECK_CUDA(cudaFree(a));
  NVST_CHECK_CUDA(cudaFree(b));
  calls_.copy_gbps = mean_over_pes(gbps);
}

std::vector<std::int64_t> random_topk(int T, int K, int E, int pe, std::uint64_t salt) {
  std::mt19937_64 rng(0x5eed + static_cast<std::uint64_t>(pe) * 7919 + salt);
  std::vector<std::int64_t> topk(static_cast<std::size_t>(T) * K), experts(E);
  for (int t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) experts[e] = e;
    for (int k = 0; k < K; ++k) {
      std::swap(experts[k], experts[k + rng() % static_cast<std::uint64_t>(E - k)]);
      topk[static_cast<std::size_t>(t) * K + k] = experts[k];
    }
  }
  return topk;
}

template <typename T>
T* device_alloc(std::size_t n) {
  T* p = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(T) + 16));
  return p;
}

void EpBench::normal(const Case& c) {
  const std::string tag = std::string(" ") + c.name + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
                          " top" + std::to_string(c.K) + "/" + std::to_string(c.E);
  progress("ep normal" + tag);
  const std::size_t TH = static_cast<std::size_t>(c.T) * c.H, spr = c.H / 128;
  auto* x = device_alloc<__nv_bfloat16>(TH);
  auto* x8 = device_alloc<std::uint8_t>(TH);
  auto* sc = device_alloc<float>(static_cast<std::size_t>(c.T) * spr);
  fill_bf16<<<264, 256, 0, s_>>>(x, TH, me_ + 1);
  fill_fp8<<<264, 256, 0, s_>>>(x8, TH, me_ + 1);
  fill_f32<<<264, 256, 0, s_>>>(sc, static_cast<std::size_t>(c.T) * spr, me_ + 1);
  NVST_CHECK_LAUNCH();
  const auto topk_h = random_topk(c.T, c.K, c.E, me_, 1);
  auto* topk = device_alloc<std::int64_t>(topk_h.size());
  NVST_CHECK_CUDA(cudaMemcpy(topk, topk_h.data(), topk_h.size() * 8, cudaMemcpyHostToDevice));
  auto* w = device_alloc<float>(topk_h.size());
  fill_f32<<<64, 256, 0, s_>>>(w, topk_h.size(), me_ + 7);
  NVST_CHECK_LAUNCH();

  nvst::ep::Buffer buf(nvst::ep::Buffer::nvl_size_hint(c.T * n_, c.H, c.K, XType::kBF16));
  nvst::ep::Config cfg;  // DeepEP's 24 SMs unless swept below
  nvst::ep::DispatchInput in{x, nullptr, topk, w, c.T, c.H, c.K, c.E, XType::kBF16, 1};
  nvst::ep::DispatchHandle h;
  // A first dispatch computes the layout and exchanges counts (host sync).
  nvst::ep::DispatchOutput out;
  const double t_first = time_op([&] {
    h = nvst::ep::DispatchHandle{};
    out = buf.dispatch(in, h, cfg, s_);
  });
  const int recv = h.num_recv_tokens;
  int sent = 0;
  for (int r = 0; r < n_; ++r) sent += h.count[me_ * n_ + r];
  const double bf16_bytes = mean_over_pes(static_cast<double>(recv) * c.H * 2);
  const double fp8_bytes = mean_over_pes(static_cast<double>(recv) * (c.H + spr * 4));

  // Baseline buffers.
  const std::size_t row2 = static_cast<std::size_t>(c.H) * 2;
  auto* send_buf = device_alloc<char>(static_cast<std::size_t>(sent) * row2);
  auto* recv_buf = device_alloc<char>(static_cast<std::size_t>(recv) * row2);
  auto* send_sc = device_alloc<char>(static_cast<std::size_t>(sent) * spr * 4);
  auto* recv_sc = device_alloc<char>(static_cast<std::size_t>(recv) * spr * 4);
  auto* back_buf = device_alloc<char>(static_cast<std::size_t>(sent) * row2);
  auto* ref_out = device_alloc<__nv_bfloat16>(TH);
  auto* our_out = device_alloc<__nv_bfloat16>(TH);
  const Offsets soff = send_offsets(h);
  auto nccl_dispatch = [&](const void* xs, std::size_t row_bytes, bool fp8) {
    pack_rows<<<132, 512, 0, s_>>>(static_cast<const char*>(xs), row_bytes, h.send_pos.get(), c.T, n_, soff, send_buf);
    if (fp8)
      pack_rows<<<132, 512, 0, s_>>>(reinterpret_cast<const char*>(sc), spr * 4, h.send_pos.get(), c.T, n_, soff,
                                     send_sc);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    a2av(h, send_buf, recv_buf, row_bytes, false);
    if (fp8) a2av(h, send_sc, recv_sc, spr * 4, false);
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    h.record_use(s_);  // the pack read send_pos
  };
  const int G = nvst::team_n_pes(nvst::Team::kNode), my_node = nvst::my_pe() / G;
  auto nccl_combine = [&](const void* y) {
    a2av(h, static_cast<const char*>(y), back_buf, row2, true);
    reduce_rows<<<132, 512, 0, s_>>>(reinterpret_cast<const __nv_bfloat16*>(back_buf), h.send_pos.get(), c.T, n_, soff,
                                     c.H, G, my_node, ref_out);
    h.record_use(s_);
  };

  add("dispatch_bf16 (layout + counts, host sync)" + tag, impl_, bf16_bytes, t_first, 0);
  for (bool fp8 : {false, true}) {
    const std::string op = std::string(fp8 ? "dispatch_fp8" : "dispatch_bf16") + tag;
    in.x = fp8 ? static_cast<const void*>(x8) : static_cast<const void*>(x);
    in.x_scales = fp8 ? sc : nullptr;
    in.x_type = fp8 ? XType::kFP8 : XType::kBF16;
    const std::size_t row_bytes = static_cast<std::size_t>(c.H) * (fp8 ? 1 : 2);
    const double bytes = fp8 ? fp8_bytes : bf16_bytes;
    progress(op + " nccl");
    const double t_nccl = reference_op([&] { nccl_dispatch(in.x, row_bytes, fp8); });
    for (int sms : sm_counts()) {
      progress(op + " " + impl_ + " sm" + std::to_string(sms));
      nvst::ep::Config cs;
      cs.num_sms = sms;
      const auto call = [&] { out = buf.dispatch(in, h, cs, s_); };
      const double t = time_op(call);
      long long wrong = diff(out.recv_x, recv_buf, static_cast<std::size_t>(recv) * row_bytes);
      if (fp8) wrong += diff(out.recv_x_scales, recv_sc, static_cast<std::size_t>(recv) * spr * 4);
      add(op, impl_at(sms), bytes, t, wrong);
      // Must move: x read, each row sent written once (with its scales).
      if (sms == cfg.num_sms)
        add_call(op, call, false, t,
                 static_cast<double>(TH) * (fp8 ? 1 : 2) + sent * (row_bytes + (fp8 ? spr * 4 : 0)));
    }
    if (first_pass_) add(op, "nccl_a2av", bytes, t_nccl, 0);
  }
  // Combine the bf16 rows as they were received.
  auto* y = device_alloc<char>(static_cast<std::size_t>(recv) * row2);
  in.x = x;
  in.x_scales = nullptr;
  in.x_type = XType::kBF16;
  out = buf.dispatch(in, h, cfg, s_);
  NVST_CHECK_CUDA(cudaMemcpyAsync(y, out.recv_x, static_cast<std::size_t>(recv) * row2, cudaMemcpyDeviceToDevice, s_));
  const std::string op = std::string("combine_bf16") + tag;
  progress(op + " nccl");
  const double t_nccl = reference_op([&] { nccl_combine(y); });
  for (int sms : sm_counts()) {
    progress(op + " " + impl_ + " sm" + std::to_string(sms));
    nvst::ep::Config cs;
    cs.num_sms = sms;
    NVST_CHECK_CUDA(cudaMemsetAsync(our_out, 0xFF, TH * 2, s_));
    const auto call = [&] { buf.combine({y, nullptr, nullptr, c.H}, h, {our_out, nullptr}, cs, s_); };
    const double t = time_op(call);
    add(op, impl_at(sms), bf16_bytes, t, diff(our_out, ref_out, TH * 2));
    // Must move: each received row read once, the tokens' rows written.
    if (sms == cfg.num_sms)
      add_call(op, call, false, t, static_cast<double>(recv) * row2 + static_cast<double>(TH) * 2);
  }
  if (first_pass_) add(op, "nccl_a2av", bf16_bytes, t_nccl, 0);
  NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
  for (void* p : {static_cast<void*>(x), static_cast<void*>(x8), static_cast<void*>(sc), static_cast<void*>(topk),
                  static_cast<void*>(w), static_cast<void*>(send_buf), static_cast<void*>(recv_buf),
                  static_cast<void*>(send_sc), static_cast<void*>(recv_sc), static_cast<void*>(back_buf),
                  static_cast<void*>(ref_out), static_cast<void*>(our_out), static_cast<void*>(y)})
    NVST_CHECK_CUDA(cudaFree(p));
}

void EpBench::low_latency(const Case& c) {
  const std::string tag = std::string(" ") + c.name + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
                          " top" + std::to_string(c.K) + "/" + std::to_string(c.E);
  progress("ep low latency" + tag);
  const std::size_t TH = static_cast<std::size_t>(c.T) * c.H;
  const int el = c.E / n_;
  auto* x = device_alloc<__nv_bfloat16>(TH);
  fill_bf16<<<264, 256, 0, s_>>>(x, TH, me_ + 11);
  NVST_CHECK_LAUNCH();
  const auto topk_h = random_topk(c.T, c.K, c.E, me_, 2);
  auto* topk = device_alloc<std::int64_t>(topk_h.size());
  NVST_CHECK_CUDA(cudaMemcpy(topk, topk_h.data(), topk_h.size() * 8, cudaMemcpyHostToDevice));
  auto* w = device_alloc<float>(topk_h.size());
  fill_f32<<<64, 256, 0, s_>>>(w, topk_h.size(), me_ + 13);
  const std::size_t rows_pe = static_cast<std::size_t>(n_) * c.T, packed = static_cast<std::size_t>(el) * rows_pe * c.H;
  auto* y = device_alloc<__nv_bfloat16>(packed);
  fill_bf16<<<264, 256, 0, s_>>>(y, packed, me_ + 17);
  auto* out = device_alloc<__nv_bfloat16>(TH);
  auto* counts = device_alloc<int>(el);
  NVST_CHECK_LAUNCH();
  nvst::ep::Buffer buf(0, c.T, c.H, c.E, c.K);
  const double selections = static_cast<double>(topk_h.size());  // every slot names an expert here
  // What a call must move at this PE: a dispatch reads the tokens and top-k
  // ids and writes each selection's row (fp8: with its scales) and source
  // info; a combine reads each selection's row, the ids and weights, and
  // writes the tokens.
  const double ids = static_cast<double>(topk_h.size()) * 8;
  const auto dispatch_must = [&](bool fp8) {
    return static_cast<double>(TH) * 2 + ids + selections * ((fp8 ? c.H + c.H / 128 * 4 : c.H * 2) + 12);
  };
  const double combine_must = selections * c.H * 2 + ids * 1.5 + static_cast<double>(TH) * 2;
  nvst::ep::LowLatencyDispatchInput in{x, topk, c.T, c.H, c.K, c.E, true};
  double t_dispatch[2] = {0, 0};
  for (bool fp8 : {true, false}) {
    in.use_fp8 = fp8;
    const std::string op = std::string(fp8 ? "ll_dispatch_fp8" : "ll_dispatch_bf16") + tag;
    progress(op);
    nvst::ep::LowLatencyDispatchOutput d;
    const double t = t_dispatch[fp8] = time_op([&] { d = buf.low_latency_dispatch(in, s_); });
    // Check: every selection of every PE arrived exactly once (rows are
    // checked value by value in the GPU tests).
    NVST_CHECK_CUDA(cudaMemcpyAsync(counts, d.recv_count, el * sizeof(int), cudaMemcpyDeviceToDevice, s_));
    std::vector<int> hc(el);
    NVST_CHECK_CUDA(cudaMemcpyAsync(hc.data(), counts, el * sizeof(int), cudaMemcpyDeviceToHost, s_));
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    double got = 0;
    for (int v : hc) got += v;
    const long long wrong = static_cast<long long>(
        std::llabs(static_cast<long long>(mean_over_pes(got) * n_ + 0.5) - static_cast<long long>(selections * n_)));
    const double bytes = mean_over_pes(selections * (fp8 ? c.H + c.H / 128 * 4 + 16 : c.H * 2));
    add(op, impl_, bytes, t, wrong);
  }
  // Combine: two dispatches (both buffer sets), then combines alternating
  // between them, as consecutive calls must.
  in.use_fp8 = false;
  const auto d0 = buf.low_latency_dispatch(in, s_);
  const auto d1 = buf.low_latency_dispatch(in, s_);
  int k = 0;
  const auto combine = [&](bool logfmt) {
    nvst::ep::LowLatencyCombineInput ci{y, topk, w, c.T, c.H, c.K, c.E, (k++ & 1) ? d1.buffer_index : d0.buffer_index};
    ci.use_logfmt = logfmt;
    buf.low_latency_combine(ci, out, s_);
  };
  const std::string op = std::string("ll_combine_bf16") + tag;
  progress(op);
  const double t = time_op([&] { combine(false); });
  // LogFMT: 10 bits a value on the wire (plus 8 bytes of range per 128
  // channels); the bytes column still counts bf16, as the row above, so
  // that the two GB/s compare as speeds of the same work. Its expert
  // outputs are quartered ([-0.5, 0.5]) so that every group is compressed.
  quarter_bf16<<<264, 256, 0, s_>>>(y, packed);
  NVST_CHECK_LAUNCH();
  const std::string op_log = std::string("ll_combine_logfmt") + tag;
  progress(op_log);
  const double t_log = time_op([&] { combine(true); });
  // #wrong of both rows: one more dispatch and combine each, the experts
  // handing back what they received (check_ll_combine).
  auto combine_wrong = [&](bool logfmt) {
    const auto d = buf.low_latency_dispatch(in, s_);
    NVST_CHECK_CUDA(cudaMemcpyAsync(y, d.recv_x, packed * 2, cudaMemcpyDeviceToDevice, s_));
    if (logfmt) quarter_bf16<<<264, 256, 0, s_>>>(y, packed);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaMemsetAsync(out, 0xFF, TH * 2, s_));  // poisoned: a value not written is wrong
    nvst::ep::LowLatencyCombineInput ci{y, topk, w, c.T, c.H, c.K, c.E, d.buffer_index};
    ci.use_logfmt = logfmt;
    buf.low_latency_combine(ci, out, s_);
    return wrong_on_all_pes([&](unsigned long long* wrong) {
      check_ll_combine<<<264, 256, 0, s_>>>(out, x, topk, w, c.T, c.H, c.K, logfmt ? 0.25f : 1.0f, logfmt, wrong);
    });
  };
  add(op, impl_, mean_over_pes(selections * c.H * 2), t, combine_wrong(false));
  add(op_log, impl_, mean_over_pes(selections * c.H * 2), t_log, combine_wrong(true));

  // Per call. At one PE the plain CUDA equivalents move the same rows: the
  // rows a dispatch put where (expert e, slot i) <- token, and for each
  // (token, k) the row it went to, both read from a dispatch's source info.
  double gather_us[2] = {0, 0}, wsum_us = 0;
  if (first_pass_ && n_ == 1) {
    const auto d = buf.low_latency_dispatch(in, s_);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
    std::vector<int> hc(el), info(static_cast<std::size_t>(el) * rows_pe * 3);
    NVST_CHECK_CUDA(cudaMemcpy(hc.data(), d.recv_count, el * sizeof(int), cudaMemcpyDeviceToHost));
    NVST_CHECK_CUDA(cudaMemcpy(info.data(), d.recv_src_info, info.size() * sizeof(int), cudaMemcpyDeviceToHost));
    std::vector<int> src, dst, row_of(topk_h.size(), -1);
    for (int e = 0; e < el; ++e)
      for (int i = 0; i < hc[e]; ++i) {
        const std::size_t row = static_cast<std::size_t>(e) * rows_pe + i;
        src.push_back(info[row * 3 + 1]);
        dst.push_back(static_cast<int>(row));
        row_of[static_cast<std::size_t>(info[row * 3 + 1]) * c.K + info[row * 3 + 2]] = static_cast<int>(row);
      }
    auto* d_src = device_alloc<int>(src.size());
    auto* d_dst = device_alloc<int>(dst.size());
    auto* d_row = device_alloc<int>(row_of.size());
    auto* sc = device_alloc<float>(static_cast<std::size_t>(el) * rows_pe * (c.H / 128));
    NVST_CHECK_CUDA(cudaMemcpy(d_src, src.data(), src.size() * sizeof(int), cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemcpy(d_dst, dst.data(), dst.size() * sizeof(int), cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemcpy(d_row, row_of.data(), row_of.size() * sizeof(int), cudaMemcpyHostToDevice));
    const int n_rows = static_cast<int>(src.size());
    for (bool fp8 : {false, true})
      gather_us[fp8] = graph_time([&] {
        gather_rows<<<std::max(1, n_rows), 448, 0, s_>>>(x, d_src, d_dst, c.H, fp8, y, sc);
        NVST_CHECK_LAUNCH();
      });
    const int threads = c.T * (c.H / 8);
    wsum_us = graph_time([&] {
      weighted_sum<<<std::max(1, (threads + 255) / 256), 256, 0, s_>>>(y, d_row, w, c.T, c.H, c.K, out);
      NVST_CHECK_LAUNCH();
    });
    for (void* p :
         {static_cast<void*>(d_src), static_cast<void*>(d_dst), static_cast<void*>(d_row), static_cast<void*>(sc)})
      NVST_CHECK_CUDA(cudaFree(p));
  }
  for (bool fp8 : {true, false}) {
    in.use_fp8 = fp8;
    add_call(
        std::string(fp8 ? "ll_dispatch_fp8" : "ll_dispatch_bf16") + tag, [&] { buf.low_latency_dispatch(in, s_); },
        true, t_dispatch[fp8], dispatch_must(fp8), gather_us[fp8]);
  }
  in.use_fp8 = false;
  (void)buf.low_latency_dispatch(in, s_);  // both sets hold bf16 rows again
  (void)buf.low_latency_dispatch(in, s_);
  add_call(op, [&] { combine(false); }, true, t, combine_must, wsum_us);
  add_call(op_log, [&] { combine(true); }, true, t_log, combine_must, wsum_us);
  // A decode step's pair, dispatch fp8 then combine bf16 of its rows: the
  // stream column issues 100 pairs back to back.
  in.use_fp8 = true;
  const auto pair = [&] {
    const auto d = buf.low_latency_dispatch(in, s_);
    buf.low_latency_combine({y, topk, w, c.T, c.H, c.K, c.E, d.buffer_index}, out, s_);
  };
  if (first_pass_)
    add_call("ll_dispatch_fp8+ll_combine_bf16" + tag, pair, true, time_op(pair, 100),
             dispatch_must(true) + combine_must);
  NVST_CHECK_CUDA(cudaStreamSynchronize(s_));
  for (void* p : {static_cast<void*>(x), static_cast<void*>(topk), static_cast<void*>(w), static_cast<void*>(y),
                  static_cast<void*>(out), static_cast<void*>(counts)})
    NVST_CHECK_CUDA(cudaFree(p));
}

}  // namespace

int bench_ep(const BenchOptions& o) {
  Report report;
  report.label = o.label;
  CallTable calls;
  // Ours, then (in a program linked to NVSHMEM) the same kernels on its heap.
  std::vector<std::pair<nvst::HeapKind, const char*>> passes{{nvst::HeapKind::kAuto, "nvst"}};
  if (nvst::nvshmem_backend_built()) passes.emplace_back(nvst::HeapKind::kNvshmem, kOnNvshmem);
  bool rank0 = false;
  int n = 0;
  ncclComm_t comm = nullptr;
  for (const auto& [kind, impl] : passes) {
    nvst::InitOptions init;
    init.heap_bytes = std::size_t{3} << 30;  // DeepEP's shapes: ~1 GiB normal + ~1 GiB low-latency at 8 PEs
    init.heap_kind = kind;
    nvst::init(init);
    NVST_REQUIRE(nvst::device() >= 0, "nvst bench ep needs GPUs");
    rank0 = nvst::my_pe() == 0;
    n = nvst::n_pes();
    if (kind == nvst::HeapKind::kNvshmem) {
      report.nvshmem_version = nvst::nvshmem_backend_version();
      report.notes.push_back("nvst@nvshmem: the same EP kernels on NVSHMEM " + report.nvshmem_version +
                             " (heap from nvshmem_malloc, node peers through nvshmem_ptr), DeepEP's 24 SMs");
    }
    {
      EpBench b(o, report, calls, impl, comm);
      if (std::string(impl) == "nvst") b.measure_copy_bandwidth();
      // DeepEP's test configurations (tests/test_intranode.py, test_low_latency.py)
      // and a smaller model.
      b.normal({"deepep", 4096, 7168, 8, 256});
      b.normal({"small", 4096, 4096, 6, 64});
      b.low_latency({"deepep", 128, 7168, 8, 288});
      // The same decode shape in normal mode: its NCCL column is the
      // all-to-all-v baseline for the low-latency rows.
      b.normal({"decode", 128, 7168, 8, 288});
      NVST_CHECK_CUDA(cudaDeviceSynchronize());
      nvst::barrier_all();
    }
    nvst::finalize();
  }
  if (comm != nullptr) ncclCommDestroy(comm);
  if (rank0) {
    progress_done();
    std::printf("\n# %d PEs; bytes per PE by DeepEP's accounting; time = slowest PE's median\n", n);
    report.print_table("nvst", {"nccl_a2av"}, {kOnNvshmem});
    calls.print(n);
    calls.add_to(report);
    report.write_json(o.json_path);
  }
  return 0;
}

}  // namespace nvst::tools
