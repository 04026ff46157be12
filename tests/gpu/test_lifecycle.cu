// A PE's whole life on either backend: long runs hold no growing resource,
// and a PE that leaves without finalize() (exit, a crash) ends its job
// promptly with its own exit code instead of crashing or hanging in exit.
//   nvst_lifecycle_tests --np N [--soak CALLS]   the soak, then the exits
// The exits run as their own small jobs spawned from the parent (the
// parent asserts each job's exit code and how long it took).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_job.hpp"
#include "nvst/coll.hpp"
#include "nvst/device.cuh"
#include "nvst/error.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

namespace dev = nvst::dev;

namespace {

int g_np = 2;
long g_soak = 100000;
std::string g_exit_mode;  // set in the PEs of an exit job

int passed = 0, failed = 0;
void check(bool ok, const std::string& what) {
  if (nvst::my_pe() != 0) return;
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  (ok ? passed : failed)++;
}

// Resident host memory of this process, bytes (/proc/self/statm).
long resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * ::sysconf(_SC_PAGESIZE);
}

// Device memory in use on this GPU (every process on it), bytes.
long long device_used_bytes() {
  std::size_t free_b = 0, total_b = 0;
  NVST_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<long long>(total_b - free_b);
}

// One put_signal a call: `words` words to the next PE, SET of `value` on its
// signal, then a wait for the previous PE's signal of the same value.
__global__ void ring_put_signal_kernel(std::uint64_t* data, std::uint64_t* sig, int words, std::uint64_t value,
                                       int next) {
  if (threadIdx.x != 0) return;
  for (int i = 0; i < words; ++i) data[words + i] = value * 1000 + static_cast<std::uint64_t>(i);
  dev::putmem_signal(data, data + words, static_cast<std::size_t>(words) * 8, sig, value, dev::SignalOp::kSet, next);
  dev::signal_wait_until(sig, dev::Cmp::kGe, value);
}

struct Sample {
  long host;
  long long device;
};

int soak() {
  const int me = nvst::my_pe(), n = nvst::n_pes();
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreate(&s));
  constexpr std::size_t kCount = 1024;  // 4 KiB of f32
  auto* in = static_cast<float*>(nvst::malloc(kCount * 4));
  auto* out = static_cast<float*>(nvst::malloc(kCount * 4));
  auto* data = static_cast<std::uint64_t*>(nvst::calloc(16, 8));
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  std::vector<float> ones(kCount, 1.0f);
  NVST_CHECK_CUDA(cudaMemcpy(in, ones.data(), kCount * 4, cudaMemcpyHostToDevice));
  nvst::barrier_all();

  // Samples after a tenth of the calls (caches, pools and lazy loading have
  // settled) and at the end; each after a barrier so no PE is mid-call.
  auto sample = [&] {
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
    nvst::barrier_all();
    return Sample{resident_bytes(), device_used_bytes()};
  };
  Sample first{}, last{};
  long wrong = 0;
  const long tenth = std::max<long>(g_soak / 10, 1);
  for (long i = 0; i < g_soak; ++i) {
    nvst::coll::all_reduce(in, out, kCount, nvst::coll::DType::kF32, nvst::coll::RedOp::kSum, s);
    ring_put_signal_kernel<<<1, 32, 0, s>>>(data, sig, 8, static_cast<std::uint64_t>(i + 1), (me + 1) % n);
    NVST_CHECK_LAUNCH();
    if ((i + 1) % 4096 == 0 || i + 1 == g_soak) {  // check now and then; every call checks its own wait
      float got = 0;
      NVST_CHECK_CUDA(cudaMemcpyAsync(&got, out + kCount - 1, 4, cudaMemcpyDeviceToHost, s));
      NVST_CHECK_CUDA(cudaStreamSynchronize(s));
      if (got != static_cast<float>(n)) ++wrong;
    }
    if (i + 1 == tenth) first = sample();
    if (me == 0 && (i + 1) % (tenth * 2) == 0) std::printf("# soak %ld/%ld\n", i + 1, g_soak), std::fflush(stdout);
  }
  last = sample();
  std::uint64_t got_data[8];
  NVST_CHECK_CUDA(cudaMemcpy(got_data, data, sizeof(got_data), cudaMemcpyDeviceToHost));
  bool data_ok = true;
  for (int i = 0; i < 8; ++i) data_ok &= got_data[i] == static_cast<std::uint64_t>(g_soak) * 1000 + i;

  const long host_growth = last.host - first.host;
  const long long dev_growth = last.device - first.device;
  if (me == 0)
    std::printf("# soak: host resident %ld -> %ld bytes, device in use %lld -> %lld bytes\n", first.host, last.host,
                first.device, last.device);
  check(wrong == 0 && data_ok, std::to_string(g_soak) + " all_reduce and put_signal calls, results right");
  check(host_growth < (1L << 20),
        "host memory grows by " + std::to_string(host_growth) + " bytes over the last 90% of the calls (limit 1 MiB)");
  check(dev_growth <= 0,
        "device memory grows by " + std::to_string(dev_growth) + " bytes over the last 90% of the calls (limit 0)");
  nvst::free(sig);
  nvst::free(data);
  nvst::free(out);
  nvst::free(in);
  NVST_CHECK_CUDA(cudaStreamDestroy(s));
  return 0;
}

// In an exit job: start, do one collective, then leave as the mode says.
int exit_pe() {
  nvst::init();
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreate(&s));
  auto* buf = static_cast<float*>(nvst::calloc(256, 4));
  nvst::coll::all_reduce(buf, buf, 256, nvst::coll::DType::kF32, nvst::coll::RedOp::kSum, s);
  NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  nvst::barrier_all();
  if (g_exit_mode == "exit") std::exit(3);  // every PE, the runtime still up
  if (g_exit_mode == "crash" && nvst::my_pe() == 0) ::raise(SIGSEGV);
  if (g_exit_mode == "crash") std::exit(0);  // the others leave cleanly without finalize
  return 0;
}

// Spawns an exit job of this program and checks how it ended.
void run_exit_job(const char* self, const std::string& mode, bool (*ok_code)(int), const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  const int code = nvst::spawn_and_wait({g_np, {self, "--np", std::to_string(g_np), "--exit-mode", mode}, {}, 15});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool ok = ok_code(code) && s < 60;
  std::printf("%s %s (exit code %d after %.1f s)\n", ok ? "PASS" : "FAIL", what.c_str(), code, s);
  (ok ? passed : failed)++;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--np" && i + 1 < argc)
      g_np = std::atoi(argv[++i]);
    else if (a == "--soak" && i + 1 < argc)
      g_soak = std::atol(argv[++i]);
    else if (a == "--exit-mode" && i + 1 < argc)
      g_exit_mode = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s --np N [--soak CALLS]\n", argv[0]);
      return 2;
    }
  }
  if (!g_exit_mode.empty()) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return exit_pe();
  }
  const int rc = nvst::test::run_gpu_test(argc, argv, "nvst_lifecycle_tests", g_np, [] {
    nvst::init();
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (g_soak > 0) soak();
    nvst::barrier_all();
    const int me = nvst::my_pe(), bad = failed;
    nvst::finalize();
    if (me == 0) std::printf("%d passed, %d failed\n", passed, failed);
    return bad == 0 ? 0 : 1;
  });
  if (nvst::is_pe_process() || rc != 0) return rc;
  // The parent, after the soak job: the exits, each a job of its own.
  passed = failed = 0;
  run_exit_job(
      argv[0], "exit", [](int c) { return c == 3; },
      "every PE calls exit(3) with the runtime up: the job ends with code 3");
  run_exit_job(
      argv[0], "crash", [](int c) { return c != 0; },
      "PE 0 crashes (SIGSEGV) after a collective: the job ends promptly with a failure code");
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
