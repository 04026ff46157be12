// Failures on GPU PEs, each case a job of two PEs of its own (a kernel that
// stops itself ends its process's CUDA context):
//  - members that make different collective calls (count, dtype, op, root,
//    algorithm, collective) stop with an error naming both calls, from the
//    call word in the flags and lines the kernels exchange anyway;
//  - a PE SIGKILLed while the other waits on it on the device (a
//    signal_wait_until, a collective by the flags and by the ll lines, the
//    EP Buffer's low-latency dispatch): the survivor's kernel stops naming
//    the dead PE within 10 s.
//   nvst_failure_tests --np 2      (NVST_TEST_SHARE_GPUS=1: both on one GPU)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpu_job.hpp"
#include "nvst/coll.hpp"
#include "nvst/device.cuh"
#include "nvst/ep.hpp"
#include "nvst/launch.hpp"
#include "nvst/nvst.hpp"

using nvst::coll::Algo;
using nvst::coll::DType;
using nvst::coll::RedOp;

namespace {

constexpr std::size_t kBig = std::size_t{1} << 20;  // elements: 4 MiB of float32, past ll: the push kernels

// One PE's call of a mismatch case: `odd` is PE 1, whose call differs.
using Call = std::function<void(bool odd, char* in, char* out, cudaStream_t s)>;
struct Mismatch {
  const char* name;
  const char* want;  // in both PEs' messages, besides "every member must make the same call"
  Call call;
  bool one_node = false;  // asks for ll, which a team across nodes refuses: skipped there
};

const std::vector<Mismatch>& mismatches() {
  static const std::vector<Mismatch> cases = {
      {"all_reduce count (ll)", "differ in count",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, odd ? 4097 : 4096, DType::kF32, RedOp::kSum, s);
       }},
      {"all_reduce count 0 against 4096 (ll)", "differ in count",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, odd ? 4096 : 0, DType::kF32, RedOp::kSum, s);
       }},
      {"all_reduce dtype (ll)", "dtype int32",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, 1024, odd ? DType::kI32 : DType::kF32, RedOp::kSum, s);
       }},
      {"all_reduce op (oneshot)", "op max",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, kBig, DType::kF32, odd ? RedOp::kMax : RedOp::kSum, s);
       }},
      {"all_reduce count (oneshot)", "differ in count",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, odd ? kBig + 8 : kBig, DType::kF32, RedOp::kSum, s);
       }},
      {"all_reduce dtype (ring)", "dtype int32",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, kBig, odd ? DType::kI32 : DType::kF32, RedOp::kSum, s, Algo::kRing);
       }},
      {"all_reduce algorithm (ll against oneshot)", "different algorithms",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, 1024, DType::kF32, RedOp::kSum, s, odd ? Algo::kOneShot : Algo::kLowLatency);
       },
       true},
      {"all_reduce algorithm (ring against twoshot)", "different algorithms",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_reduce(in, out, kBig, DType::kF32, RedOp::kSum, s, odd ? Algo::kTwoShot : Algo::kRing);
       },
       true},
      {"broadcast root", "differ in count, root",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::broadcast(in, out, 4096, DType::kF32, odd ? 1 : 0, s);
       }},
      {"reduce root", "differ in count, root",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::reduce(in, out, 4096, DType::kF32, RedOp::kSum, odd ? 1 : 0, s);
       }},
      {"all_gather count (ll)", "differ in count",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         nvst::coll::all_gather(in, out, odd ? 1001 : 1000, DType::kF32, s);
       }},
      {"all_reduce against all_gather", "all_gather",
       [](bool odd, char* in, char* out, cudaStream_t s) {
         if (odd)
           nvst::coll::all_gather(in, out, 4096, DType::kF32, s);
         else
           nvst::coll::all_reduce(in, out, 4096, DType::kF32, RedOp::kSum, s);
       }},
  };
  return cases;
}

// Kills: which PE dies, and what the other waits in meanwhile.
enum class Wait { kSignal, kOneShot, kLowLatency, kEpDispatch };
struct Kill {
  const char* name;
  int victim;
  Wait wait;
};
const Kill kKills[] = {{"SIGKILL during signal_wait_until", 1, Wait::kSignal},
                       {"SIGKILL of rank 0 during all_reduce (oneshot: flags)", 0, Wait::kOneShot},
                       {"SIGKILL during all_reduce (ll: lines)", 1, Wait::kLowLatency},
                       {"SIGKILL during ep low_latency_dispatch", 1, Wait::kEpDispatch}};

__global__ void wait_for_signal(std::uint64_t* sig) { nvst::dev::signal_wait_until(sig, nvst::dev::Cmp::kGe, 1); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The error a call (and the stream's work it queued) ends with; "" if none.
std::string error_of(const std::function<void()>& f, cudaStream_t s) {
  try {
    f();
    NVST_CHECK_CUDA(cudaStreamSynchronize(s));
  } catch (const nvst::Error& e) {
    return e.what();
  }
  return "";
}

// A PE's verdict, then its exit: its CUDA context may have ended.
[[noreturn]] void verdict(bool ok, const std::string& what) {
  std::printf("[PE %d] %s %s\n", nvst::my_pe(), ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(ok ? 0 : 1);
}

// Whether the PEs are on different (logical) nodes: the proxy between them.
bool across_nodes() { return nvst::team_n_pes(nvst::Team::kNode) < nvst::n_pes(); }

[[noreturn]] void run_mismatch(const Mismatch& c) {
  nvst::init();
  nvst::coll::prepare();
  if (c.one_node && across_nodes()) verdict(true, std::string(c.name) + ": skipped (needs one node)");
  const bool odd = nvst::my_pe() == 1;
  char *in = nullptr, *out = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&in, (kBig + 64) * 8));
  NVST_CHECK_CUDA(cudaMalloc(&out, (kBig + 64) * 8 * 2));
  NVST_CHECK_CUDA(cudaMemset(in, 0, (kBig + 64) * 8));
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  nvst::barrier_all();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { c.call(odd, in, out, s); }, s);
  const double dt = seconds_since(t0);
  // Stay until the other PE's kernel has stopped too: leaving now would let
  // it report this PE's exit instead of the mismatch it is about to find.
  try {
    nvst::bootstrap_barrier();
  } catch (const nvst::Error&) {
    // This PE's runtime has failed (its kernel stopped), so the barrier
    // refuses at once: stay all the same, for the other PE to find the
    // mismatch itself rather than this PE's exit.
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }
  const bool ok = msg.find("every member must make the same call") != std::string::npos &&
                  msg.find(c.want) != std::string::npos && dt < 10.0;
  verdict(ok, std::string(c.name) + " (" + std::to_string(dt) + " s): " + msg);
}

[[noreturn]] void run_kill(const Kill& k) {
  nvst::init();
  nvst::coll::prepare();
  // The victim is skipped too: the spawner expects it killed.
  if (k.wait == Wait::kLowLatency && across_nodes()) {
    if (nvst::my_pe() == k.victim) ::raise(SIGKILL);
    verdict(true, std::string(k.name) + ": skipped (ll needs one node)");
  }
  const int me = nvst::my_pe(), other = 1 - me;
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  const std::size_t count = k.wait == Wait::kOneShot ? kBig : 1024;
  char *in = nullptr, *out = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&in, count * 4));
  NVST_CHECK_CUDA(cudaMalloc(&out, count * 4));
  NVST_CHECK_CUDA(cudaMemset(in, 0, count * 4));
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // The EP case: a Buffer of 16 tokens of 128 channels, top-2 of 4 experts
  // (one on each PE), whose dispatch first waits for every PE to reach it.
  constexpr int kTokens = 16, kHidden = 128, kExperts = 4, kTopk = 2;
  std::unique_ptr<nvst::ep::Buffer> ep;
  nvst::ep::LowLatencyDispatchInput dispatch_in;
  if (k.wait == Wait::kEpDispatch) {
    ep = std::make_unique<nvst::ep::Buffer>(0, kTokens, kHidden, kExperts, kTopk);
    std::vector<std::int64_t> topk(kTokens * kTopk);
    for (int t = 0; t < kTokens; ++t) topk[t * kTopk] = 0, topk[t * kTopk + 1] = kExperts / 2;
    std::int64_t* d_topk = nullptr;
    NVST_CHECK_CUDA(cudaMalloc(&d_topk, topk.size() * 8));
    NVST_CHECK_CUDA(cudaMemcpy(d_topk, topk.data(), topk.size() * 8, cudaMemcpyHostToDevice));
    dispatch_in.x = in;  // zeros: the rows' values do not matter here
    dispatch_in.topk_idx = d_topk;
    dispatch_in.num_tokens = kTokens;
    dispatch_in.hidden = kHidden;
    dispatch_in.num_topk = kTopk;
    dispatch_in.num_experts = kExperts;
  }
  nvst::barrier_all();
  if (me == k.victim) {  // long enough for the other to be waiting on the GPU
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::raise(SIGKILL);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of(
      [&] {
        if (k.wait == Wait::kSignal) {
          wait_for_signal<<<1, 1, 0, s>>>(sig);
          NVST_CHECK_LAUNCH();
        } else if (k.wait == Wait::kEpDispatch) {
          ep->low_latency_dispatch(dispatch_in, s);
        } else {
          nvst::coll::all_reduce(in, out, count, DType::kF32, RedOp::kSum, s,
                                 k.wait == Wait::kOneShot ? Algo::kOneShot : Algo::kLowLatency);
        }
      },
      s);
  const double dt = seconds_since(t0);
  const std::string want = "PE " + std::to_string(other) + " died";
  verdict(msg.find(want) != std::string::npos && dt < 10.0,
          std::string(k.name) + ": told in " + std::to_string(dt) + " s, expected '" + want + "' in: " + msg);
}

// This process's copy agent (the child running nvst-copy-agent), or -1.
pid_t copy_agent_pid() {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status");
    std::string line, comm;
    pid_t ppid = -1;
    while (std::getline(status, line)) {
      if (line.rfind("Name:", 0) == 0) comm = line.substr(line.find_first_not_of(" \t", 5));
      if (line.rfind("PPid:", 0) == 0) ppid = static_cast<pid_t>(std::atol(line.c_str() + 5));
    }
    if (ppid == ::getpid() && comm.rfind("nvst-copy-agen", 0) == 0) return static_cast<pid_t>(std::atol(name.c_str()));
  }
  return -1;
}

// Across nodes: PE 1's copy agent is killed, then PE 0 puts to PE 1 and PE 1
// waits for the put's signal. PE 1's proxy notices the agent is gone at the
// first piece it cannot land, and both PEs' calls end naming it.
[[noreturn]] void run_agent_kill() {
  const char* name = "copy agent killed while a put crosses nodes";
  nvst::init();
  if (!across_nodes()) verdict(true, std::string(name) + ": skipped (needs two nodes)");
  constexpr std::size_t kBytes = 1 << 20;
  auto* sig = static_cast<std::uint64_t*>(nvst::calloc(1, 8));
  auto* dst = static_cast<char*>(nvst::malloc(kBytes));
  cudaStream_t s;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const pid_t agent = copy_agent_pid();
  if (agent < 0) verdict(false, std::string(name) + ": no copy agent found among this process's children");
  nvst::barrier_all();
  if (nvst::my_pe() == 1) ::kill(agent, SIGKILL);
  nvst::barrier_all();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of(
      [&] {
        if (nvst::my_pe() == 0) {
          nvst::putmem_signal_nbi(dst, dst, kBytes, sig, 1, nvst::SignalOp::kSet, 1);
          nvst::quiet();
        } else {
          wait_for_signal<<<1, 1, 0, s>>>(sig);
          NVST_CHECK_LAUNCH();
        }
      },
      s);
  const double dt = seconds_since(t0);
  verdict(msg.find("copy agent") != std::string::npos && dt < 10.0,
          std::string(name) + ": told in " + std::to_string(dt) + " s, expected 'copy agent' in: " + msg);
}

// Runs case `index` as a job of two PEs; true when it passed.
bool spawn_case(const std::vector<std::string>& args, int index, const char* name, int victim) {
  nvst::SpawnOptions o;
  o.nprocs = 2;
  o.argv = args;
  // A device wait that missed what it should have seen ends well after the
  // 10 s the cases allow, and says "timed out" instead.
  o.env = {{"NVST_TEST_CASE", std::to_string(index)}, {"NVST_DEVICE_TIMEOUT_S", "20"}, {"NVST_TIMEOUT_S", "30"}};
  o.grace_seconds = -1;
  o.deadline_seconds = 60;
  const std::vector<int> st = nvst::spawn(o);
  bool ok = true;
  for (int r = 0; r < 2; ++r) {
    const int status = st[static_cast<std::size_t>(r)];
    ok &= r == victim ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                      : WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", name);
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--np" && i + 1 < argc) {
      np = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s --np 2\n", argv[0]);
      return 2;
    }
  }
  if (np != 2) {
    std::fprintf(stderr, "nvst_failure_tests: the cases are written for --np 2\n");
    return 2;
  }
  try {
    const int n_mismatch = static_cast<int>(mismatches().size());
    if (nvst::is_pe_process()) {
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      const char* c = std::getenv("NVST_TEST_CASE");
      const int index = c ? std::atoi(c) : -1;
      if (index >= 0 && index < n_mismatch) run_mismatch(mismatches()[static_cast<std::size_t>(index)]);
      if (index >= n_mismatch && index < n_mismatch + static_cast<int>(std::size(kKills)))
        run_kill(kKills[index - n_mismatch]);
      if (index == n_mismatch + static_cast<int>(std::size(kKills))) run_agent_kill();
      std::fprintf(stderr, "nvst_failure_tests: no case %s\n", c ? c : "(NVST_TEST_CASE unset)");
      return 2;
    }
    if (int skip = nvst::test::skip_unless_gpus(np)) return skip;
    const std::vector<std::string> args(argv, argv + argc);
    int failed = 0, index = 0;
    for (const Mismatch& m : mismatches()) failed += !spawn_case(args, index++, m.name, -1);
    for (const Kill& k : kKills) failed += !spawn_case(args, index++, k.name, k.victim);
    failed += !spawn_case(args, index++, "copy agent killed while a put crosses nodes", -1);
    std::printf("%d passed, %d failed\n", index - failed, failed);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvst_failure_tests: %s\n", e.what());
    return 1;
  }
}
