// Probe: the per-operation time of back-to-back all_reduce calls at one PE
// (no peer: the launch and the kernel's own cost), eager and in a CUDA graph
// of 20, CUDA events, median of 50 rounds after 10.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "nvst/coll.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
int main() {
  nvst::init();
  nvst::coll::prepare();
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  NVST_CHECK_CUDA(cudaEventCreate(&a));
  NVST_CHECK_CUDA(cudaEventCreate(&b));
  for (std::size_t bytes : {1024ul, 65536ul, 1048576ul}) {
    const std::size_t n = bytes / 2;
    std::vector<__nv_bfloat16> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = __float2bfloat16(static_cast<float>((i * 37) % 101) / 7.0f);
    void *in, *out;
    NVST_CHECK_CUDA(cudaMalloc(&in, bytes));
    NVST_CHECK_CUDA(cudaMalloc(&out, bytes));
    NVST_CHECK_CUDA(cudaMemcpy(in, h.data(), bytes, cudaMemcpyHostToDevice));
    auto op = [&] { nvst::coll::all_reduce(in, out, n, nvst::coll::DType::kBF16, nvst::coll::RedOp::kSum, s); };
    auto median = [&](const std::function<void()>& round, int per) {
      std::vector<float> t;
      for (int i = 0; i < 60; ++i) {
        NVST_CHECK_CUDA(cudaEventRecord(a, s));
        round();
        NVST_CHECK_CUDA(cudaEventRecord(b, s));
        NVST_CHECK_CUDA(cudaEventSynchronize(b));
        float ms;
        NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
        if (i >= 10) t.push_back(ms * 1000 / per);
      }
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    const float eager = median([&] { for (int i = 0; i < 20; ++i) op(); }, 20);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    NVST_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 20; ++i) op();
    NVST_CHECK_CUDA(cudaStreamEndCapture(s, &g));
    NVST_CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
    const float graph = median([&] { NVST_CHECK_CUDA(cudaGraphLaunch(ge, s)); }, 20);
    std::vector<__nv_bfloat16> o(n);
    NVST_CHECK_CUDA(cudaMemcpy(o.data(), out, bytes, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += __bfloat162float(o[i]) != __bfloat162float(h[i]);
    std::printf("all_reduce %8zu B: eager %6.2f us/op, graph of 20 %6.2f us/op, %d wrong\n", bytes, eager, graph, wrong);
    NVST_CHECK_CUDA(cudaGraphExecDestroy(ge));
    NVST_CHECK_CUDA(cudaGraphDestroy(g));
    NVST_CHECK_CUDA(cudaFree(in));
    NVST_CHECK_CUDA(cudaFree(out));
  }
  nvst::finalize();
  return 0;
}
