// What the point-to-point benchmarks share: the data pattern and its check,
// the per-run context, and measure(): fill, poison, time (median of
// samples), check, one result row. Included by bench_p2p.cu and
// bench_p2p_internode.cu only.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench.hpp"
#include "nvst/nvst.hpp"
#include "report.hpp"

namespace nvst::tools::p2p {

inline __device__ std::uint32_t pattern(std::uint32_t seed, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(seed) << 32) ^ i ^ 0x9e3779b97f4a7c15ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x) | 1u;  // never zero
}

inline __global__ void fill_kernel(std::uint32_t* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = pattern(seed, i);
}

inline __global__ void count_wrong_kernel(const std::uint32_t* p, std::size_t n, std::uint32_t seed,
                                          unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    bad += p[i] != pattern(seed, i);
  if (bad) atomicAdd(wrong, bad);
}

struct Ctx {
  const BenchOptions& o;
  int me = 0, peer = 1, sms = 0;
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  unsigned long long* wrong_dev = nullptr;
  Report report;
  std::uint32_t seed = 1;
};

// Fills the context for PE 0 <-> PE 1 on this PE's GPU (after nvst::init).
inline void open_ctx(Ctx& c) {
  c.me = nvst::my_pe();
  c.peer = 1 - c.me;
  c.report.label = c.o.label;
  NVST_CHECK_CUDA(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, nvst::device()));
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  NVST_CHECK_CUDA(cudaEventCreate(&c.start));
  NVST_CHECK_CUDA(cudaEventCreate(&c.stop));
  NVST_CHECK_CUDA(cudaMalloc(&c.wrong_dev, sizeof(unsigned long long)));
}

// How an operation is timed: by CUDA events around GPU work on the stream,
// or by the host clock around calls that return when the operation is
// complete (the host API: putmem_nbi + quiet).
enum class Timing { kStream, kHost };

// Times `launch` (one operation) on this PE's stream: median over samples of
// iters back-to-back operations, in microseconds per operation.
inline double time_op(Ctx& c, const std::function<void()>& launch, Timing timing = Timing::kStream) {
  for (int i = 0; i < c.o.warmup; ++i) launch();
  NVST_CHECK_CUDA(cudaStreamSynchronize(c.stream));
  std::vector<double> us;
  for (int s = 0; s < c.o.samples; ++s) {
    nvst::bootstrap_barrier();  // both PEs start a sample together
    if (timing == Timing::kHost) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < c.o.iters; ++i) launch();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                   c.o.iters);
      continue;
    }
    NVST_CHECK_CUDA(cudaEventRecord(c.start, c.stream));
    for (int i = 0; i < c.o.iters; ++i) launch();
    NVST_CHECK_CUDA(cudaEventRecord(c.stop, c.stream));
    NVST_CHECK_CUDA(cudaEventSynchronize(c.stop));
    float ms = 0;
    NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, c.start, c.stop));
    us.push_back(1000.0 * ms / c.o.iters);
  }
  return median(us);
}

// Fills src (sender side), poisons dst (receiver side), runs, checks.
// `send` says whether this PE sends in this measurement, `recv` whether it
// receives; `launch` is run on every PE that sends or receives.
inline void measure(Ctx& c, const std::string& op, const std::string& impl, std::size_t bytes, char* src, char* dst,
                    bool send, bool recv, const std::function<void()>& launch, Timing timing = Timing::kStream) {
  const std::uint32_t seed = ++c.seed * 2654435761u + static_cast<std::uint32_t>(c.me);
  const std::uint32_t peer_seed = c.seed * 2654435761u + static_cast<std::uint32_t>(c.peer);
  const std::size_t words = bytes / 4;
  if (send) fill_kernel<<<264, 512, 0, c.stream>>>(reinterpret_cast<std::uint32_t*>(src), words, seed);
  if (recv) NVST_CHECK_CUDA(cudaMemsetAsync(dst, 0xFF, bytes, c.stream));
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaStreamSynchronize(c.stream));
  if (c.me == 0) progress(op + " " + impl + " " + std::to_string(bytes) + " bytes");
  double us = (send || recv) ? time_op(c, launch, timing) : 0.0;
  NVST_CHECK_CUDA(cudaStreamSynchronize(c.stream));
  nvst::barrier_all();
  long long wrong = 0;
  if (c.o.check && recv) {
    NVST_CHECK_CUDA(cudaMemsetAsync(c.wrong_dev, 0, sizeof(*c.wrong_dev), c.stream));
    count_wrong_kernel<<<264, 512, 0, c.stream>>>(reinterpret_cast<std::uint32_t*>(dst), words, peer_seed, c.wrong_dev);
    NVST_CHECK_LAUNCH();
    unsigned long long w = 0;
    NVST_CHECK_CUDA(cudaMemcpyAsync(&w, c.wrong_dev, sizeof(w), cudaMemcpyDeviceToHost, c.stream));
    NVST_CHECK_CUDA(cudaStreamSynchronize(c.stream));
    wrong = static_cast<long long>(w);
  }
  auto all = nvst::bootstrap_allgather(&wrong, sizeof(wrong));
  long long total = 0;
  for (std::size_t i = 0; i < all.size() / sizeof(long long); ++i) {
    long long w;
    std::memcpy(&w, all.data() + i * sizeof(w), sizeof(w));
    total += w;
  }
  double sent = static_cast<double>(bytes);
  ResultRow row{op, impl, bytes, us, sent / us / 1e3, (op == "put_bidir" ? 2 : 1) * sent / us / 1e3, total};
  // The time PE 0 measured is the one reported.
  double t0 = us;
  nvst::bootstrap_broadcast(&t0, sizeof(t0), 0);
  row.time_us = t0;
  row.algbw_gbps = sent / t0 / 1e3;
  row.busbw_gbps = (op == "put_bidir" ? 2 : 1) * sent / t0 / 1e3;
  c.report.add(row);
}

}  // namespace nvst::tools::p2p
