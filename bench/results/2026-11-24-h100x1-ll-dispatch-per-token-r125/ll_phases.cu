// Probe: each half of the low-latency dispatch and combine, one PE (no
// wire: the kernels' own cost), CUDA events, median of 200; and a hash of
// what each dispatch delivered, to compare builds.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include "nvst/ep.hpp"
#include "nvst/nvst.hpp"
#include "nvst/error.hpp"
using nvst::ep::Phase;
int main() {
  nvst::init();
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int T = 128, H = 7168, K = 8, E = 256, R = nvst::n_pes();
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
  auto time = [&](const std::function<void()>& before, const std::function<void()>& op,
                  const std::function<void()>& after) {
    std::vector<float> t;
    for (int i = 0; i < 220; ++i) {
      before();
      NVST_CHECK_CUDA(cudaEventRecord(a, s));
      op();
      NVST_CHECK_CUDA(cudaEventRecord(b, s));
      NVST_CHECK_CUDA(cudaEventSynchronize(b));
      float ms;
      NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      if (i >= 20) t.push_back(ms * 1000);
      after();
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  for (bool fp8 : {true, false}) {
    nvst::ep::LowLatencyDispatchInput din{x, d_topk, T, H, K, E};
    din.use_fp8 = fp8;
    nvst::ep::LowLatencyDispatchOutput dout;
    auto nothing = [] {};
    const float d_send = time(nothing, [&] { dout = buf.low_latency_dispatch(din, s, Phase::kSend); },
                              [&] { dout = buf.low_latency_dispatch(din, s, Phase::kReceive, dout.buffer_index); });
    // a receive needs its send: send outside the timed part
    const float d_recv = time([&] { dout = buf.low_latency_dispatch(din, s, Phase::kSend); },
                              [&] { dout = buf.low_latency_dispatch(din, s, Phase::kReceive, dout.buffer_index); },
                              nothing);
    const float d_both = time(nothing, [&] { dout = buf.low_latency_dispatch(din, s); }, nothing);
    // What arrived, independent of the order rows took their slots: the sum
    // over rows of a hash of (source info, row bytes, the row's scales).
    dout = buf.low_latency_dispatch(din, s);
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    const int EL = E / R, RM = dout.max_rows_per_expert;
    const std::size_t rb = static_cast<std::size_t>(H) * (fp8 ? 1 : 2);
    std::vector<int> cnt(EL), info(static_cast<std::size_t>(EL) * RM * 3);
    std::vector<unsigned char> rx(static_cast<std::size_t>(EL) * RM * rb);
    std::vector<float> sc(fp8 ? static_cast<std::size_t>(EL) * (H / 128) * RM : 0);
    NVST_CHECK_CUDA(cudaMemcpy(cnt.data(), dout.recv_count, EL * 4, cudaMemcpyDeviceToHost));
    NVST_CHECK_CUDA(cudaMemcpy(info.data(), dout.recv_src_info, info.size() * 4, cudaMemcpyDeviceToHost));
    NVST_CHECK_CUDA(cudaMemcpy(rx.data(), dout.recv_x, rx.size(), cudaMemcpyDeviceToHost));
    if (fp8) NVST_CHECK_CUDA(cudaMemcpy(sc.data(), dout.recv_x_scales, sc.size() * 4, cudaMemcpyDeviceToHost));
    unsigned long long total = 0;
    int rows = 0;
    for (int e = 0; e < EL; ++e)
      for (int i = 0; i < cnt[e]; ++i, ++rows) {
        const std::size_t row = static_cast<std::size_t>(e) * RM + i;
        unsigned long long h = 1469598103934665603ull;
        auto mix = [&](unsigned long long v) { h = (h ^ v) * 1099511628211ull; };
        for (int j = 0; j < 3; ++j) mix(static_cast<unsigned>(info[row * 3 + j]));
        for (std::size_t j = 0; j < rb; ++j) mix(rx[row * rb + j]);
        for (int j = 0; fp8 && j < H / 128; ++j) {
          unsigned u; float f = sc[(static_cast<std::size_t>(e) * (H / 128) + j) * RM + i];
          std::memcpy(&u, &f, 4); mix(u);
        }
        total += h;
      }
    std::printf("dispatch %s: send %6.1f  receive %6.1f  both %6.1f us  (rows %d, hash %016llx)\n", fp8 ? "fp8 " : "bf16",
                d_send, d_recv, d_both, rows, total);
  }
  // Experts hand back bf16 rows: any bf16 tensor of the dispatch's shape.
  nvst::ep::LowLatencyDispatchInput din{x, d_topk, T, H, K, E};
  din.use_fp8 = false;
  nvst::ep::LowLatencyDispatchOutput dout = buf.low_latency_dispatch(din, s);
  for (bool logfmt : {false, true}) {
    nvst::ep::LowLatencyCombineInput cin{dout.recv_x, d_topk, d_w, T, H, K, E, dout.buffer_index};
    cin.use_logfmt = logfmt;
    auto nothing = [] {};
    const float c_send = time(nothing, [&] { buf.low_latency_combine(cin, out, s, Phase::kSend); },
                              [&] { buf.low_latency_combine(cin, out, s, Phase::kReceive); });
    const float c_recv = time([&] { buf.low_latency_combine(cin, out, s, Phase::kSend); },
                              [&] { buf.low_latency_combine(cin, out, s, Phase::kReceive); }, nothing);
    const float c_both = time(nothing, [&] { buf.low_latency_combine(cin, out, s); }, nothing);
    // checksum of the result (the same for old and new builds at bf16)
    std::vector<__nv_bfloat16> o(xh.size());
    NVST_CHECK_CUDA(cudaMemcpy(o.data(), out, o.size() * 2, cudaMemcpyDeviceToHost));
    double sum = 0;
    unsigned long long bits = 0;
    for (auto& v : o) { sum += __bfloat162float(v); bits = bits * 31 + *reinterpret_cast<unsigned short*>(&v); }
    std::printf("combine %s: send %6.1f  receive %6.1f  both %6.1f us  (sum %.6e, hash %016llx)\n",
                logfmt ? "logfmt" : "bf16  ", c_send, c_recv, c_both, sum, bits);
  }
  nvst::finalize();
  (void)R;
  return 0;
}
