// `nvst selftest`: a one-minute end-to-end check that the runtime works on
// this machine: bootstrap, symmetric allocation, and (with GPUs) a ring of
// put_signal between node peers checked on the CPU, copy-engine puts and the
// stream barrier. The full suites are under tests/.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "nvst/device.cuh"
#include "nvst/nvst.hpp"

namespace nvst::tools {

namespace {

__global__ void ring_put_signal(const std::uint8_t* src, std::uint8_t* dst, std::size_t bytes, std::uint64_t* sig,
                                int next) {
  nvst::dev::putmem_signal_block(dst, src, bytes, sig, 1, nvst::dev::SignalOp::kAdd, next);
  if (threadIdx.x == 0) nvst::dev::signal_wait_until(sig, nvst::dev::Cmp::kGe, 1);
}

struct Checker {
  int passed = 0, failed = 0;
  void check(bool ok, const std::string& what) {
    // Every PE's verdict, so rank 0 can print one line per check.
    int mine = ok ? 1 : 0;
    auto all = nvst::bootstrap_allgather(&mine, sizeof(mine));
    std::vector<int> v(all.size() / sizeof(int));
    std::memcpy(v.data(), all.data(), all.size());
    std::string bad;
    for (std::size_t p = 0; p < v.size(); ++p)
      if (!v[p]) bad.append(" ").append(std::to_string(p));  // not " " + ...: GCC 12's false -Wrestrict
    if (bad.empty())
      ++passed;
    else
      ++failed;
    if (nvst::my_pe() == 0)
      std::printf("%s %s%s\n", bad.empty() ? "PASS" : "FAIL", what.c_str(),
                  bad.empty() ? "" : (" (failed on PE" + bad + ")").c_str());
  }
};

}  // namespace

int selftest_pe() {
  nvst::init();
  const int me = nvst::my_pe(), n = nvst::n_pes();
  if (me == 0)
    std::printf("nvst selftest: %d PE(s), heap %s, %zu MiB each\n", n, nvst::heap_kind_name(nvst::heap_kind()),
                nvst::heap_size() >> 20);
  Checker c;

  // Symmetric allocation: same offset on every PE.
  void* a = nvst::malloc(1 << 20);
  // Offset from this PE's heap base: identical everywhere for a symmetric object.
  std::uint64_t off = nvst::heap_size() - nvst::heap_free_bytes();
  auto offs = nvst::bootstrap_allgather(&off, sizeof(off));
  bool same = true;
  for (int p = 0; p < n; ++p) same = same && std::memcmp(offs.data() + p * sizeof(off), &off, sizeof(off)) == 0;
  c.check(a != nullptr && same, "malloc: every PE gets the same heap layout");

  if (nvst::device() >= 0 && nvst::team_n_pes(nvst::Team::kNode) == n) {
    const std::size_t bytes = 1'000'003;  // odd on purpose
    auto* src = static_cast<std::uint8_t*>(nvst::malloc(bytes));
    auto* dst = static_cast<std::uint8_t*>(nvst::malloc(bytes));
    auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, sizeof(std::uint64_t)));
    std::vector<std::uint8_t> h(bytes), got(bytes);
    std::mt19937_64 rng(1234 + static_cast<unsigned>(me));
    for (auto& b : h) b = static_cast<std::uint8_t>(rng());
    NVST_CHECK_CUDA(cudaMemcpy(src, h.data(), bytes, cudaMemcpyHostToDevice));
    NVST_CHECK_CUDA(cudaMemset(dst, 0xA5, bytes));
    nvst::barrier_all();
    ring_put_signal<<<1, 512>>>(src, dst, bytes, sig, (me + 1) % n);
    NVST_CHECK_LAUNCH();
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nvst::barrier_all();
    NVST_CHECK_CUDA(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
    // What the previous PE sent.
    std::mt19937_64 prev(1234 + static_cast<unsigned>((me + n - 1) % n));
    for (auto& b : h) b = static_cast<std::uint8_t>(prev());
    c.check(got == h, "device putmem_signal_block ring (1000003 bytes)");

    // Copy engine put to the next PE, then a stream barrier.
    NVST_CHECK_CUDA(cudaMemset(dst, 0xA5, bytes));
    nvst::barrier_all();
    nvst::putmem_on_stream(dst, src, bytes, (me + 1) % n, cudaStreamPerThread);
    nvst::barrier_all_on_stream(cudaStreamPerThread);
    NVST_CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
    NVST_CHECK_CUDA(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
    c.check(got == h, "copy-engine putmem_on_stream + barrier_all_on_stream");
    nvst::free(sig);
    nvst::free(dst);
    nvst::free(src);
  } else if (nvst::device() < 0 && n > 1) {
    // Host-memory PEs: a put_signal ring through the proxy and the fabric.
    const std::size_t bytes = 1'000'003;
    auto* dst = static_cast<std::uint8_t*>(nvst::malloc(bytes));
    auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, sizeof(std::uint64_t)));
    std::vector<std::uint8_t> h(bytes);
    std::mt19937_64 rng(1234 + static_cast<unsigned>(me));
    for (auto& b : h) b = static_cast<std::uint8_t>(rng());
    std::memset(dst, 0xA5, bytes);
    nvst::barrier_all();
    nvst::putmem_signal_nbi(dst, h.data(), bytes, sig, 1, nvst::SignalOp::kAdd, (me + 1) % n);
    nvst::signal_wait_until(sig, nvst::Cmp::kGe, 1);
    nvst::quiet();
    std::mt19937_64 prev(1234 + static_cast<unsigned>((me + n - 1) % n));
    for (auto& b : h) b = static_cast<std::uint8_t>(prev());
    c.check(std::memcmp(dst, h.data(), bytes) == 0,
            "host putmem_signal_nbi ring through the proxy (" + nvst::transport_to((me + 1) % n) + ")");
    nvst::barrier_all();
    nvst::free(sig);
    nvst::free(dst);
  } else if (me == 0) {
    std::printf("(not all PEs on one node: device checks skipped)\n");
  }
  nvst::free(a);
  c.check(nvst::heap_free_bytes() == nvst::heap_size() - nvst::dev::kReservedHeapBytes, "free returns every byte");
  nvst::finalize();
  if (me == 0) std::printf("%d passed, %d failed\n", c.passed, c.failed);
  return c.failed == 0 ? 0 : 1;
}

}  // namespace nvst::tools
