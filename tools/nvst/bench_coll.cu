// `nvst bench coll`: all_reduce, all_gather, reduce_scatter (bf16, sum) and
// all_to_all (bf16) over every PE, ours against NCCL called from C++ in the same process, the same sizes,
// eager launches and under CUDA graphs (-G: operations per graph). Sizes are
// nccl-tests' (-b/-e/-f: bytes of the output buffer). Inputs are small
// integers, exact in bf16 whatever the reduction order, so every result is
// checked exactly (#wrong). NCCL's all_to_all is grouped ncclSend/ncclRecv,
// one pair per peer, as nccl-tests' alltoall (ncclAlltoAll is not in every
// libnccl this binary may load).
#include <cuda_bf16.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "bench.hpp"
#include "nvst/coll.hpp"
#include "nvst/nvst.hpp"
#include "report.hpp"

namespace nvst::tools {

namespace {

__global__ void fill_ints(__nv_bfloat16* p, std::size_t n, int pe) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(static_cast<float>((i * 7 + static_cast<std::size_t>(pe)) % 8));
}

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kAllToAll };

// all_reduce: out[i] = sum over PEs of in[i]; all_gather: out[p*n + i] = PE
// p's in[i]; reduce_scatter: out[i] = sum over PEs of in[me*n + i];
// all_to_all: out[p*n + i] = PE p's in[me*n + i].
__global__ void count_wrong(const __nv_bfloat16* out, std::size_t n, int npes, int me, Coll coll,
                            unsigned long long* wrong) {
  unsigned long long bad = 0;
  const bool gathers = coll == Coll::kAllGather || coll == Coll::kAllToAll;
  const std::size_t total = gathers ? n * static_cast<std::size_t>(npes) : n;
  const std::size_t base = coll == Coll::kReduceScatter ? n * static_cast<std::size_t>(me) : 0;
  for (std::size_t j = blockIdx.x * blockDim.x + threadIdx.x; j < total; j += gridDim.x * blockDim.x) {
    float want = 0;
    if (coll == Coll::kAllGather) {
      want = static_cast<float>(((j % n) * 7 + j / n) % 8);
    } else if (coll == Coll::kAllToAll) {
      want = static_cast<float>(((n * static_cast<std::size_t>(me) + j % n) * 7 + j / n) % 8);
    } else {
      for (int p = 0; p < npes; ++p) want += static_cast<float>(((base + j) * 7 + static_cast<std::size_t>(p)) % 8);
    }
    bad += __bfloat162float(out[j]) != want;
  }
  if (bad) atomicAdd(wrong, bad);
}

}  // namespace

int bench_coll(const BenchOptions& o) {
  nvst::InitOptions init;
  init.heap_bytes = std::size_t{512} << 20;  // the collectives' workspace (128 MiB) and flags
  nvst::init(init);
  NVST_REQUIRE(nvst::device() >= 0, "nvst bench coll needs GPUs");
  const int me = nvst::my_pe(), n = nvst::n_pes();
  nvst::coll::prepare();
  ncclUniqueId nid{};
  if (me == 0) NVST_REQUIRE(ncclGetUniqueId(&nid) == ncclSuccess, "ncclGetUniqueId failed");
  nvst::bootstrap_broadcast(&nid, sizeof(nid), 0);
  ncclComm_t comm{};
  NVST_REQUIRE(ncclCommInitRank(&comm, n, nid, me) == ncclSuccess, "ncclCommInitRank failed");
  cudaStream_t s;
  cudaEvent_t t0, t1;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  NVST_CHECK_CUDA(cudaEventCreate(&t0));
  NVST_CHECK_CUDA(cudaEventCreate(&t1));
  __nv_bfloat16 *in = nullptr, *out = nullptr;
  unsigned long long* wrong = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&in, o.max_bytes));
  NVST_CHECK_CUDA(cudaMalloc(&out, o.max_bytes));
  NVST_CHECK_CUDA(cudaMalloc(&wrong, sizeof(*wrong)));
  Report report;
  report.label = o.label;
  const int per_graph = o.graph_iters > 0 ? o.graph_iters : 20;

  auto time_it = [&](const std::function<void()>& op, bool graph) {
    for (int i = 0; i < o.warmup; ++i) op();
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    cudaGraphExec_t exec = nullptr;
    if (graph) {
      cudaGraph_t g;
      NVST_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < per_graph; ++i) op();
      NVST_CHECK_CUDA(cudaStreamEndCapture(s, &g));
      NVST_CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
      NVST_CHECK_CUDA(cudaGraphDestroy(g));
      NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));  // warm the graph
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    }
    std::vector<double> us;
    for (int k = 0; k < o.samples; ++k) {
      nvst::bootstrap_barrier();
      NVST_CHECK_CUDA(cudaEventRecord(t0, s));
      if (graph) NVST_CHECK_CUDA(cudaGraphLaunch(exec, s));
      else for (int i = 0; i < o.iters; ++i) op();
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

  // Sizes as nccl-tests: all_reduce the buffer, all_gather the output,
  // reduce_scatter the input (n x the output), all_to_all the send buffer.
  for (const char* coll : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}) {
    const Coll kind = std::string(coll) == "all_gather"       ? Coll::kAllGather
                      : std::string(coll) == "reduce_scatter" ? Coll::kReduceScatter
                      : std::string(coll) == "all_to_all"     ? Coll::kAllToAll
                                                              : Coll::kAllReduce;
    for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes = static_cast<std::size_t>(bytes * o.factor)) {
      const std::size_t elems = bytes / 2;
      const std::size_t per_pe = kind == Coll::kAllReduce ? elems : elems / static_cast<std::size_t>(n);
      if (per_pe == 0) continue;
      const std::size_t in_elems = kind == Coll::kReduceScatter || kind == Coll::kAllToAll ? per_pe * n : per_pe;
      const std::size_t out_elems = kind == Coll::kAllGather || kind == Coll::kAllToAll ? per_pe * n : per_pe;
      const std::size_t used = kind == Coll::kAllReduce ? per_pe : per_pe * n;  // bytes the size column counts
      fill_ints<<<132, 256, 0, s>>>(in, in_elems, me);
      NVST_CHECK_LAUNCH();
      const double alg_factor = 1.0;
      const double bus_factor = kind == Coll::kAllReduce ? 2.0 * (n - 1.0) / n : (n - 1.0) / n;
      for (bool graph : {false, true}) {
        for (const char* impl : {"nvst", "nccl"}) {
          const bool ours = std::string(impl) == "nvst";
          progress(std::string(coll) + " " + impl + (graph ? " graph " : " eager ") + std::to_string(bytes));
          NVST_CHECK_CUDA(cudaMemsetAsync(out, 0xFF, out_elems * 2, s));
          auto op = [&] {
            using nvst::coll::DType;
            using nvst::coll::RedOp;
            if (ours) {
              if (kind == Coll::kAllGather) nvst::coll::all_gather(in, out, per_pe, DType::kBF16, s);
              else if (kind == Coll::kReduceScatter) nvst::coll::reduce_scatter(in, out, per_pe, DType::kBF16, RedOp::kSum, s);
              else if (kind == Coll::kAllToAll) nvst::coll::all_to_all(in, out, per_pe, DType::kBF16, s);
              else nvst::coll::all_reduce(in, out, per_pe, DType::kBF16, RedOp::kSum, s);
            } else if (kind == Coll::kAllToAll) {
              ncclResult_t r = ncclGroupStart();
              for (int p = 0; p < n && r == ncclSuccess; ++p) {
                r = ncclSend(in + per_pe * p, per_pe, ncclBfloat16, p, comm, s);
                if (r == ncclSuccess) r = ncclRecv(out + per_pe * p, per_pe, ncclBfloat16, p, comm, s);
              }
              const ncclResult_t end = ncclGroupEnd();
              if (r == ncclSuccess) r = end;
              NVST_REQUIRE(r == ncclSuccess, "NCCL ", coll, " failed: ", ncclGetErrorString(r));
            } else {
              ncclResult_t r = kind == Coll::kAllGather ? ncclAllGather(in, out, per_pe, ncclBfloat16, comm, s)
                               : kind == Coll::kReduceScatter
                                   ? ncclReduceScatter(in, out, per_pe, ncclBfloat16, ncclSum, comm, s)
                                   : ncclAllReduce(in, out, per_pe, ncclBfloat16, ncclSum, comm, s);
              NVST_REQUIRE(r == ncclSuccess, "NCCL ", coll, " failed: ", ncclGetErrorString(r));
            }
          };
          const double t = time_it(op, graph);
          NVST_CHECK_CUDA(cudaMemsetAsync(wrong, 0, sizeof(*wrong), s));
          count_wrong<<<132, 256, 0, s>>>(out, per_pe, n, me, kind, wrong);
          NVST_CHECK_LAUNCH();
          unsigned long long w = 0;
          NVST_CHECK_CUDA(cudaMemcpyAsync(&w, wrong, sizeof(w), cudaMemcpyDeviceToHost, s));
          NVST_CHECK_CUDA(cudaStreamSynchronize(s));
          auto all = nvst::bootstrap_allgather(&w, sizeof(w));
          long long total = 0;
          for (int p = 0; p < n; ++p) {
            unsigned long long x;
            std::memcpy(&x, all.data() + p * sizeof(x), sizeof(x));
            total += static_cast<long long>(x);
          }
          const double algbw = static_cast<double>(used * 2) * alg_factor / t / 1e3;
          report.add({std::string(coll) + (graph ? "_graph" : "_eager"), impl, used * 2, t, algbw, algbw * bus_factor,
                      total});
        }
      }
      if (bytes * o.factor <= bytes) break;
    }
  }
  if (me == 0) {
    progress_done();
    std::printf("# %d PEs, bf16; time per operation; busbw as nccl-tests\n", n);
    report.print_table("nvst", {"nccl"});
    report.write_json(o.json_path);
  }
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  ncclCommDestroy(comm);
  NVST_CHECK_CUDA(cudaFree(in));
  NVST_CHECK_CUDA(cudaFree(out));
  NVST_CHECK_CUDA(cudaFree(wrong));
  nvst::finalize();
  return 0;
}

}  // namespace nvst::tools
