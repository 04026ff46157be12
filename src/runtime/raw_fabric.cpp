// The raw libfabric baseline (nvst/raw_fabric.hpp): the fabric transport
// opened beside the runtime's, on the job's bootstrap.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/bootstrap.hpp"
#include "nvst/error.hpp"
#include "nvst/nvst.hpp"
#include "nvst/raw_fabric.hpp"
#include "runtime/runtime_internal.hpp"
#include "transport/fabric.hpp"

namespace nvst {

class RawFabric::Impl {
 public:
  explicit Impl(std::size_t max) : max_(max) {
    src_ = static_cast<char*>(std::aligned_alloc(4096, round_up(max) + 4096));  // + the ping-pong's word
    dst_ = static_cast<char*>(std::aligned_alloc(4096, round_up(max)));
    control_ = static_cast<char*>(std::aligned_alloc(4096, 4096));
    NVST_REQUIRE(src_ && dst_ && control_, "raw fabric baseline: out of host memory for ", max, " bytes");
    std::memset(control_, 0, 4096);
    t_ = std::make_unique<fabric::Transport>(detail::runtime_bootstrap(), dst_, max, control_, 4096, src_,
                                             round_up(max) + 4096);
  }
  ~Impl() {
    t_.reset();
    std::free(src_);
    std::free(dst_);
    std::free(control_);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  RawFabric::Result measure(std::size_t bytes, int iters, int samples) {
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
    us.resize(static_cast<std::size_t>(samples));
    nvst::bootstrap_broadcast(us.data(), us.size() * sizeof(double), 0);
    return {std::move(us), wrong};
  }

  // One-way microseconds of an 8-byte write in a ping-pong between PEs 0
  // and 1, per sample of `iters` round trips (PE 0's, on every PE): each
  // side writes the round into the other's control word 1 and polls its
  // provider until its own word shows the reply.
  std::vector<double> pingpong(int iters, int samples) {
    const int me = nvst::my_pe();
    std::vector<double> us;
    for (int s = 0; s < samples + 1; ++s) {
      nvst::bootstrap_barrier();
      if (me > 1) continue;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        ++ping_;
        if (me == 0) send_ping(1);
        await_ping();
        if (me == 1) send_ping(0);
      }
      if (s > 0)
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters /
                     2);
    }
    us.resize(static_cast<std::size_t>(samples));
    nvst::bootstrap_broadcast(us.data(), us.size() * sizeof(double), 0);
    return us;
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
  std::uint64_t* ping_word() { return reinterpret_cast<std::uint64_t*>(src_ + round_up(max_)); }
  void send_ping(int to) {
    std::vector<fabric::Completion> done;
    *ping_word() = ping_;
    while (!t_->write(to, ping_word(), 8, fabric::Region::kControl, 8, &ctx_)) t_->progress(done);
    wait_one(done);
  }
  void await_ping() {
    std::vector<fabric::Completion> done;
    auto* word = reinterpret_cast<std::uint64_t*>(control_ + 8);
    while (std::atomic_ref<std::uint64_t>(*word).load(std::memory_order_acquire) != ping_) t_->progress(done);
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
  char* control_ = nullptr;  // word 0: the round PE 0 finished; word 1: the ping-pong
  std::uint64_t round_ = 0;
  std::uint64_t ping_ = 0;  // ping-pong rounds so far; control word 1 holds the peer's last
  std::unique_ptr<fabric::Transport> t_;
  fabric::ProviderContext ctx_{};  // the provider's scratch for our one operation in flight
};

RawFabric::RawFabric(std::size_t max_bytes) : impl_(std::make_unique<Impl>(max_bytes)) {}
RawFabric::~RawFabric() = default;
RawFabric::Result RawFabric::measure(std::size_t bytes, int iters, int samples) {
  NVST_REQUIRE(iters > 0 && samples > 0, "raw fabric baseline: iters (", iters, ") and samples (", samples,
               ") must be positive");
  return impl_->measure(bytes, iters, samples);
}
std::vector<double> RawFabric::pingpong(int iters, int samples) {
  NVST_REQUIRE(iters > 0 && samples > 0, "raw fabric baseline: iters (", iters, ") and samples (", samples,
               ") must be positive");
  return impl_->pingpong(iters, samples);
}

}  // namespace nvst
