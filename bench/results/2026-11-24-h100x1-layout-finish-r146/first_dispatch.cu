// Probe: where a first (uncached) dispatch's time goes, one PE.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>
#include <cuda_runtime.h>
#include "nvst/ep.hpp"
#include "nvst/nvst.hpp"
#include "nvst/error.hpp"
using Clock = std::chrono::steady_clock;
static double med_us(const std::function<void()>& f, int n = 300) {
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) f();
  for (int i = 0; i < n; ++i) {
    auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
int main() {
  nvst::init();
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int T : {128, 4096}) {
    const int H = 7168, K = 8, E = 256;
    std::mt19937_64 rng(1);
    std::vector<std::int64_t> topk(static_cast<std::size_t>(T) * K);
    for (auto& e : topk) e = static_cast<std::int64_t>(rng() % E);
    for (int t = 0; t < T; ++t)  // distinct experts per token
      for (int k = 0; k < K; ++k) topk[t * K + k] = (topk[t * K] + k * 31) % E;
    std::int64_t* d_topk; void* x; float* w; int *d_rank, *d_exp;
    NVST_CHECK_CUDA(cudaMalloc(&d_topk, topk.size() * 8));
    NVST_CHECK_CUDA(cudaMemcpy(d_topk, topk.data(), topk.size() * 8, cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMalloc(&x, static_cast<std::size_t>(T) * H * 2));
    NVST_CHECK_CUDA(cudaMemset(x, 1, static_cast<std::size_t>(T) * H * 2));
    NVST_CHECK_CUDA(cudaMalloc(&w, topk.size() * 4));
    NVST_CHECK_CUDA(cudaMemset(w, 0, topk.size() * 4));
    NVST_CHECK_CUDA(cudaMalloc(&d_rank, 64 * 4));
    NVST_CHECK_CUDA(cudaMalloc(&d_exp, E * 4));
    int* h_pinned;
    NVST_CHECK_CUDA(cudaMallocHost(&h_pinned, 4096));
    nvst::ep::Buffer buf(nvst::ep::Buffer::nvl_size_hint(T, H, K, nvst::ep::XType::kBF16));
    nvst::ep::Config cfg;
    nvst::ep::DispatchInput in{x, nullptr, d_topk, w, T, H, K, E, nvst::ep::XType::kBF16, 1};
    nvst::ep::DispatchHandle h;
    nvst::ep::LayoutOutput lo;
    lo.num_tokens_per_rank = d_rank;
    lo.num_tokens_per_expert = d_exp;
    const double sync = med_us([&] { NVST_CHECK_CUDA(cudaStreamSynchronize(s)); });
    const double d2h = med_us([&] {
      NVST_CHECK_CUDA(cudaMemcpyAsync(h_pinned, d_exp, E * 4, cudaMemcpyDeviceToHost, s));
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    });
    const double layout = med_us([&] {
      nvst::ep::get_dispatch_layout(d_topk, T, K, E, lo, s);
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    });
    const double ag = med_us([&] { int v = 1; (void)nvst::bootstrap_allgather(&v, sizeof(v)); });
    const double first = med_us([&] {
      h = nvst::ep::DispatchHandle{};
      (void)buf.dispatch(in, h, cfg, s);
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    });
    const double cached = med_us([&] {
      (void)buf.dispatch(in, h, cfg, s);
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    });
    std::printf("T=%5d  sync %6.1f  d2h+sync %6.1f  layout+sync %6.1f  allgather %6.1f  first dispatch+sync %7.1f  cached+sync %7.1f (us, host clock, median of 300)\n",
                T, sync, d2h, layout, ag, first, cached);
    cudaFree(d_topk); cudaFree(x); cudaFree(w); cudaFree(d_rank); cudaFree(d_exp); cudaFreeHost(h_pinned);
  }
  nvst::finalize();
  return 0;
}
