#include "report.hpp"

#include "build_info.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <set>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <nlohmann/json.hpp>

#include "nvst/error.hpp"

namespace nvst::tools {

void progress(const std::string& what) {
  static const bool tty = ::isatty(2) != 0;
  static auto last = std::chrono::steady_clock::now() - std::chrono::seconds(60);
  if (tty) {
    std::fprintf(stderr, "  %-70s\r", what.c_str());
    return;
  }
  auto now = std::chrono::steady_clock::now();
  if (now - last < std::chrono::seconds(10)) return;
  last = now;
  std::fprintf(stderr, "# progress: %s\n", what.c_str());
}

void progress_done() {
  if (::isatty(2) != 0) std::fprintf(stderr, "%72s\r", "");
}


double median(std::vector<double> v) {
  NVST_REQUIRE(!v.empty(), "median of no samples");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

namespace {
std::string human(std::size_t b) {
  char s[32];
  if (b >= (1u << 30) && b % (1u << 30) == 0) std::snprintf(s, sizeof s, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0) std::snprintf(s, sizeof s, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(s, sizeof s, "%zuK", b >> 10);
  else std::snprintf(s, sizeof s, "%zu", b);
  return s;
}
}  // namespace

void Report::print_table(const std::string& ours, const std::vector<std::string>& baselines) const {
  std::vector<std::string> ops;
  for (auto& r : rows)
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  for (const auto& op : ops) {
    const bool latency = op == "pingpong" || op.rfind("bootstrap", 0) == 0;
    std::vector<std::string> impls;
    std::map<std::pair<std::size_t, std::string>, ResultRow> cell;
    std::set<std::size_t> sizes;
    for (auto& r : rows) {
      if (r.op != op) continue;
      if (std::find(impls.begin(), impls.end(), r.impl) == impls.end()) impls.push_back(r.impl);
      cell[{r.bytes, r.impl}] = r;
      sizes.insert(r.bytes);
    }
    std::printf("\n# op: %s   (%s; ours = %s)\n", op.c_str(),
                latency ? "time in us, lower is better" : "algbw in GB/s, higher is better",
                ours.c_str());
    std::printf("#%9s %10s", "size", latency ? "" : "time(us)");
    for (auto& i : impls) std::printf(" %13s", i.c_str());
    std::printf(" %10s %7s\n", "speed-up", "#wrong");
    for (std::size_t b : sizes) {
      auto it = cell.find({b, ours});
      std::printf("%10s %10s", human(b).c_str(),
                  (!latency && it != cell.end()) ? std::to_string(it->second.time_us).substr(0, 8).c_str() : "");
      long long wrong = 0;
      double best_base = 0, mine = 0;
      for (auto& i : impls) {
        auto c = cell.find({b, i});
        if (c == cell.end()) {
          std::printf(" %13s", "n/a");
          continue;
        }
        double v = latency ? c->second.time_us : c->second.algbw_gbps;
        std::printf(" %13.2f", v);
        wrong += c->second.wrong;
        if (i == ours) mine = v;
        if (std::find(baselines.begin(), baselines.end(), i) != baselines.end()) {
          if (best_base == 0 || (latency ? v < best_base : v > best_base)) best_base = v;
        }
      }
      double speedup = (mine > 0 && best_base > 0) ? (latency ? best_base / mine : mine / best_base) : 0;
      if (speedup > 0) std::printf(" %9.2fx %7lld\n", speedup, wrong);
      else std::printf(" %10s %7lld\n", "-", wrong);
    }
  }
  std::printf("\n# speed-up = ours over the best baseline (%s)",
              baselines.empty() ? "none" : "");
  for (std::size_t i = 0; i < baselines.size(); ++i) std::printf("%s%s", i ? ", " : "", baselines[i].c_str());
  std::printf("); #wrong = 32-bit words that differed from the expected data\n");
  std::fflush(stdout);
}

void Report::write_json(const std::string& path) const {
  if (path.empty()) return;
  nlohmann::json j;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  int n = 0;
  std::vector<std::string> gpus;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) gpus.emplace_back(p.name);
  }
  j["machine"] = std::string(host) + (gpus.empty() ? " (no GPU)" : " (" + std::to_string(n) + "x " + gpus[0] + ")");
  j["gpus"] = gpus;
  std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  j["date"] = date;
  j["commit"] = kGitCommit;
  int rt = 0, drv = 0, nccl = 0;
  cudaRuntimeGetVersion(&rt);
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  ncclGetVersion(&nccl);
  // NCCL encodes its version as major*10000 + minor*100 + patch (>= 2.9);
  // CUDA as major*1000 + minor*10. Write both as dotted strings.
  auto dotted_nccl = std::to_string(nccl / 10000) + "." + std::to_string(nccl % 10000 / 100) + "." +
                     std::to_string(nccl % 100);
  auto dotted_cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  j["versions"] = {{"cuda_runtime", dotted_cuda(rt)}, {"cuda_driver", dotted_cuda(drv)}, {"nccl", dotted_nccl},
                   {"nvshmem", nvshmem_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(nvshmem_version)}};
  j["label"] = label;
  for (auto& r : rows)
    j["rows"].push_back({{"op", r.op}, {"impl", r.impl}, {"bytes", r.bytes}, {"time_us", r.time_us},
                         {"algbw_gbps", r.algbw_gbps}, {"busbw_gbps", r.busbw_gbps}, {"wrong", r.wrong}});
  std::ofstream f(path);
  NVST_REQUIRE(f.good(), "cannot write ", path);
  f << j.dump(1) << "\n";
  std::printf("# wrote %s\n", path.c_str());
}

}  // namespace nvst::tools
