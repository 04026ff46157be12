// Probe: the distribution of one low-latency op's "both" time (send + receive
// halves, one PE), 1000 iterations, event-timed one by one, to see whether
// the occasional 62 us medians (r128, r141) are a mode within a process.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "nvst/ep.hpp"
#include "nvst/nvst.hpp"
#include "nvst/error.hpp"
int main() {
  nvst::init();
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int T = 128, H = 7168, K = 8, E = 256;
  std::mt19937_64 rng(7);
  std::vector<std::int64_t> topk(T * K);
  for (int t = 0; t < T; ++t) {
    std::vector<int> ex(E);
    for (int e = 0; e < E; ++e) ex[e] = e;
    for (int k = 0; k < K; ++k) { std::swap(ex[k], ex[k + rng() % (E - k)]); topk[t * K + k] = ex[k]; }
  }
  std::vector<float> w(T * K);
  for (auto& v : w) v = 0.1f + (rng() % 1000) / 1000.0f;
  std::vector<__nv_bfloat16> xh(static_cast<std::size_t>(T) * H);
  for (auto& v : xh) v = __float2bfloat16((static_cast<int>(rng() % 2001) - 1000) / 1000.0f);
  std::int64_t* d_topk; float* d_w; void* x; void* out;
  NVST_CHECK_CUDA(cudaMalloc(&d_topk, topk.size() * 8));
  NVST_CHECK_CUDA(cudaMemcpy(d_topk, topk.data(), topk.size() * 8, cudaMemcpyHostToDevice));
  NVST_CHECK_CUDA(cudaMalloc(&d_w, w.size() * 4));
  NVST_CHECK_CUDA(cudaMemcpy(d_w, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
  NVST_CHECK_CUDA(cudaMalloc(&x, xh.size() * 2));
  NVST_CHECK_CUDA(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  NVST_CHECK_CUDA(cudaMalloc(&out, xh.size() * 2));
  nvst::ep::Buffer buf(0, T, H, E, K);
  cudaEvent_t a, b;
  NVST_CHECK_CUDA(cudaEventCreate(&a));
  NVST_CHECK_CUDA(cudaEventCreate(&b));
  auto dist = [&](const char* name, const std::function<void()>& op) {
    std::vector<float> t;
    for (int i = 0; i < 1050; ++i) {
      NVST_CHECK_CUDA(cudaEventRecord(a, s));
      op();
      NVST_CHECK_CUDA(cudaEventRecord(b, s));
      NVST_CHECK_CUDA(cudaEventSynchronize(b));
      float ms;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      if (i >= 50) t.push_back(ms * 1000);
    }
    std::vector<float> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    auto pct = [&](double p) { return sorted[static_cast<std::size_t>(p * (sorted.size() - 1))]; };
    int slow = 0;
    for (float v : t) slow += v > 1.5f * pct(0.1);
    // first 20 in order: does a slow mode come in runs?
    std::printf("%-14s p10 %6.1f p50 %6.1f p90 %6.1f max %6.1f us, %4d of %zu over 1.5x p10; first:", name, pct(0.1),
                pct(0.5), pct(0.9), sorted.back(), slow, t.size());
    for (int i = 0; i < 12; ++i) std::printf(" %.0f", t[i]);
    std::printf("\n");
  };
  nvst::ep::LowLatencyDispatchInput din{x, d_topk, T, H, K, E};
  din.use_fp8 = true;
  nvst::ep::LowLatencyDispatchOutput dout;
  dist("dispatch fp8", [&] { dout = buf.low_latency_dispatch(din, s); });
  din.use_fp8 = false;
  dout = buf.low_latency_dispatch(din, s);
  nvst::ep::LowLatencyCombineInput cin{dout.recv_x, d_topk, d_w, T, H, K, E, dout.buffer_index};
  dist("combine bf16", [&] { buf.low_latency_combine(cin, out, s); });
  cin.use_logfmt = true;
  dist("combine logfmt", [&] { buf.low_latency_combine(cin, out, s); });
  cin.use_logfmt = false;
  dist("combine bf16", [&] { buf.low_latency_combine(cin, out, s); });
  nvst::finalize();
  return 0;
}
