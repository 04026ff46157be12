// The raw libfabric baseline of the inter-node benchmarks (`nvst bench p2p`
// across logical nodes, `nvst bench host`): PE 0 fi_writes a host buffer
// into PE 1's over the provider the proxy uses, one write in flight, each
// waited for. No GPU, no staging, no protocol: the ceiling a proxy over that
// provider can approach. Collective: every PE constructs it (the transport
// exchanges addresses) and calls measure(); PEs other than 0 and 1 only
// take part in its barriers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "nvst/nvst.hpp"
#include "report.hpp"
#include "base/bootstrap.hpp"
#include "runtime/runtime_internal.hpp"
#include "transport/fabric.hpp"

namespace nvst::tools {

class RawFabric {
 public:
  struct Result {
    double us;        // median microseconds per write (PE 0's, on every PE)
    long long wrong;  // bytes PE 1 found different from what PE 0 wrote
  };

  explicit RawFabric(std::size_t max) : max_(max) {
    src_ = static_cast<char*>(std::aligned_alloc(4096, round_up(max)));
    dst_ = static_cast<char*>(std::aligned_alloc(4096, round_up(max)));
    control_ = static_cast<char*>(std::aligned_alloc(4096, 4096));
    NVST_REQUIRE(src_ && dst_ && control_, "raw fabric baseline: out of host memory for ", max, " bytes");
    std::memset(control_, 0, 4096);
    t_ = std::make_unique<fabric::Transport>(detail::runtime_bootstrap(), dst_, max, control_, 4096, src_, max);
  }
  ~RawFabric() {
    t_.reset();
    std::free(src_);
    std::free(dst_);
    std::free(control_);
  }
  RawFabric(const RawFabric&) = delete;
  RawFabric& operator=(const RawFabric&) = delete;

  // `samples` + 1 samples (the first a warm-up) of `iters` writes of
  // `bytes`; the data is checked on PE 1 afterwards.
  Result measure(std::size_t bytes, int iters, int samples) {
    NVST_REQUIRE(bytes <= max_, "raw fabric baseline: ", bytes, " bytes asked, ", max_, " allocated");
    const int me = nvst::my_pe();
    auto expected = [bytes](std::size_t i) { return static_cast<char>((i * 131 + bytes) | 1); };
    if (me == 0)
      for (std::size_t i = 0; i < bytes; ++i) src_[i] = expected(i);
    if (me == 1) std::memset(dst_, 0, bytes);
    std::vector<double> us;
    for (int s = 0; s < samples + 1; ++s) {
      nvst::bootstrap_barrier();
      ++round_;
      if (me == 0) {
        const double t = send(bytes, iters);
        if (s > 0) us.push_back(t);
        for (std::size_t i = 0; i < std::min<std::size_t>(bytes, 8); ++i) src_[i] = expected(i);  // see send()
      } else if (me == 1) {
        receive();
      }
    }
    long long wrong = 0;
    if (me == 1)  // word 0 last carried the round flag, not data
      for (std::size_t i = 8; i < bytes; ++i) wrong += dst_[i] != expected(i);
    nvst::bootstrap_broadcast(&wrong, sizeof(wrong), 1);
    double t = me == 0 ? median(us) : 0;
    nvst::bootstrap_broadcast(&t, sizeof(t), 0);
    return {t, wrong};
  }

 private:
  static std::size_t round_up(std::size_t n) { return (std::max<std::size_t>(n, 1) + 4095) / 4096 * 4096; }

  void wait_one(std::vector<fabric::Completion>& done) {
    done.clear();
    while (t_->progress(done) == 0) {
    }
    NVST_REQUIRE(done[0].error == 0, "raw fabric write failed: ", done[0].error_text);
  }
  // PE 0: `iters` writes, each waited for; microseconds per write. Then the
  // round number into PE 1's control word (from src_'s first word: the data
  // is already sent), which ends PE 1's progress loop for this sample.
  double send(std::size_t n, int iters) {
    std::vector<fabric::Completion> done;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      while (!t_->write(1, src_, n, fabric::Region::kHeap, 0, &ctx_)) t_->progress(done);
      wait_one(done);
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    auto* v = reinterpret_cast<std::uint64_t*>(src_);
    *v = round_;
    while (!t_->write(1, v, 8, fabric::Region::kControl, 0, &ctx_)) t_->progress(done);
    wait_one(done);
    return us;
  }
  // PE 1: drives its provider (software providers move bytes only inside
  // progress calls) until PE 0 says the sample is over.
  void receive() {
    std::vector<fabric::Completion> done;
    auto* flag = reinterpret_cast<std::uint64_t*>(control_);
    // An exact match: a provider that landed the 8 bytes in parts shows "not yet".
    while (std::atomic_ref<std::uint64_t>(*flag).load(std::memory_order_acquire) != round_) t_->progress(done);
  }

  std::size_t max_;
  char* src_ = nullptr;      // PE 0: registered as scratch
  char* dst_ = nullptr;      // PE 1: registered as the "heap"
  char* control_ = nullptr;  // word 0: the round PE 0 finished
  std::uint64_t round_ = 0;
  std::unique_ptr<fabric::Transport> t_;
  fabric::ProviderContext ctx_{};  // the provider's scratch for our one operation in flight
};

}  // namespace nvst::tools
