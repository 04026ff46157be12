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
  if (b >= (1u << 30) && b % (1u << 30) == 0)
    std::snprintf(s, sizeof s, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0)
    std::snprintf(s, sizeof s, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(s, sizeof s, "%zuK", b >> 10);
  else
    std::snprintf(s, sizeof s, "%zu", b);
  return s;
}

bool is_latency(const std::string& op) {
  return op == "pingpong" || op.rfind("bootstrap", 0) == 0 || op.rfind("signal_pingpong", 0) == 0;
}

// How many times faster `mine` is than `theirs`: time over time for latency
// ops, bandwidth over bandwidth otherwise. 0 where either is missing.
double speedup(const ResultRow& mine, const ResultRow& theirs, bool latency) {
  if (latency) return mine.time_us > 0 && theirs.time_us > 0 ? theirs.time_us / mine.time_us : 0;
  return mine.algbw_gbps > 0 && theirs.algbw_gbps > 0 ? mine.algbw_gbps / theirs.algbw_gbps : 0;
}

using Cells = std::map<std::pair<std::size_t, std::string>, ResultRow>;

// The four columns of an impl shown on its own (Report::print_table).
void print_own_header(const std::string& ours, const std::string& impl) {
  std::printf(" %13s %13s %13s %13s", (impl + "(us)").c_str(), (impl + "_busbw").c_str(), (ours + "/" + impl).c_str(),
              (impl + "_wrong").c_str());
}

void print_own_cells(const Cells& cell, std::size_t bytes, const std::string& ours, const std::string& impl,
                     bool latency) {
  auto theirs = cell.find({bytes, impl});
  if (theirs == cell.end()) {
    std::printf(" %13s %13s %13s %13s", "n/a", "n/a", "n/a", "n/a");
    return;
  }
  std::printf(" %13.2f %13.2f", theirs->second.time_us, theirs->second.busbw_gbps);
  auto mine = cell.find({bytes, ours});
  const double x = mine == cell.end() ? 0 : speedup(mine->second, theirs->second, latency);
  if (x > 0)
    std::printf(" %12.2fx", x);
  else
    std::printf(" %13s", "-");
  std::printf(" %13lld", theirs->second.wrong);
}
}  // namespace

void Report::add_speedups(const std::string& ours, const std::string& baseline) {
  for (auto& mine : rows) {
    if (mine.impl != ours) continue;
    for (const auto& theirs : rows) {
      if (theirs.impl != baseline || theirs.op != mine.op || theirs.bytes != mine.bytes) continue;
      const double x = speedup(mine, theirs, is_latency(mine.op));
      if (x > 0) mine.speedup_vs[baseline] = x;
    }
  }
}

void Report::print_table(const std::string& ours, const std::vector<std::string>& baselines,
                         const std::vector<std::string>& detailed) const {
  // Impls shown on their own: those of `detailed` that were measured.
  std::vector<std::string> own;
  for (const auto& d : detailed)
    if (std::any_of(rows.begin(), rows.end(), [&](const ResultRow& r) { return r.impl == d; })) own.push_back(d);
  auto is_own = [&](const std::string& impl) { return std::find(own.begin(), own.end(), impl) != own.end(); };
  std::vector<std::string> ops;
  for (auto& r : rows)
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  for (const auto& op : ops) {
    const bool latency = is_latency(op);
    std::vector<std::string> impls;
    Cells cell;
    std::set<std::size_t> sizes;
    for (auto& r : rows) {
      if (r.op != op) continue;
      if (!is_own(r.impl) && std::find(impls.begin(), impls.end(), r.impl) == impls.end()) impls.push_back(r.impl);
      cell[{r.bytes, r.impl}] = r;
      sizes.insert(r.bytes);
    }
    std::printf("\n# op: %s   (%s; ours = %s)\n", op.c_str(),
                latency ? "time in us, lower is better" : "algbw in GB/s, higher is better", ours.c_str());
    std::printf("#%9s %10s", "size", latency ? "" : "time(us)");
    for (auto& i : impls) std::printf(" %13s", i.c_str());
    std::printf(" %10s %7s", "speed-up", "#wrong");
    for (auto& i : own) print_own_header(ours, i);
    std::printf("\n");
    for (std::size_t b : sizes) {
      auto it = cell.find({b, ours});
      std::printf("%10s %10s", human(b).c_str(),
                  (!latency && it != cell.end()) ? std::to_string(it->second.time_us).substr(0, 8).c_str() : "");
      long long wrong = 0;
      const ResultRow* mine = nullptr;
      const ResultRow* best = nullptr;  // the fastest baseline at this size
      for (auto& i : impls) {
        auto c = cell.find({b, i});
        if (c == cell.end()) {
          std::printf(" %13s", "n/a");
          continue;
        }
        double v = latency ? c->second.time_us : c->second.algbw_gbps;
        std::printf(" %13.2f", v);
        wrong += c->second.wrong;
        if (i == ours) mine = &c->second;
        if (std::find(baselines.begin(), baselines.end(), i) != baselines.end() &&
            (best == nullptr || speedup(c->second, *best, latency) > 1))
          best = &c->second;
      }
      const double over_best = mine && best ? speedup(*mine, *best, latency) : 0;
      if (over_best > 0)
        std::printf(" %9.2fx %7lld", over_best, wrong);
      else
        std::printf(" %10s %7lld", "-", wrong);
      for (auto& i : own) print_own_cells(cell, b, ours, i, latency);
      std::printf("\n");
    }
  }
  std::printf("\n# speed-up = ours over the best baseline (%s", baselines.empty() ? "none" : "");
  for (std::size_t i = 0; i < baselines.size(); ++i) std::printf("%s%s", i ? ", " : "", baselines[i].c_str());
  std::printf("); #wrong = 32-bit words that differed from the expected data\n");
  for (auto& i : own) {
    const char* n = i.c_str();
    std::printf(
        "# %s(us), %s_busbw (GB/s), %s_wrong: %s's own time per operation, busbw and #wrong; "
        "%s/%s = ours over %s (speed-up and #wrong leave %s out)\n",
        n, n, n, n, ours.c_str(), n, n, n);
  }
  for (auto& note : notes) std::printf("# note: %s\n", note.c_str());
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
  auto dotted_nccl =
      std::to_string(nccl / 10000) + "." + std::to_string(nccl % 10000 / 100) + "." + std::to_string(nccl % 100);
  auto dotted_cuda = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  j["versions"] = {{"cuda_runtime", dotted_cuda(rt)},
                   {"cuda_driver", dotted_cuda(drv)},
                   {"nccl", dotted_nccl},
                   {"nvshmem", nvshmem_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(nvshmem_version)}};
  j["label"] = label;
  if (!notes.empty()) j["notes"] = notes;
  for (auto& r : rows) {
    nlohmann::json row = {{"op", r.op},
                          {"impl", r.impl},
                          {"bytes", r.bytes},
                          {"time_us", r.time_us},
                          {"algbw_gbps", r.algbw_gbps},
                          {"busbw_gbps", r.busbw_gbps},
                          {"wrong", r.wrong}};
    if (!r.speedup_vs.empty()) row["speedup_vs"] = r.speedup_vs;
    j["rows"].push_back(row);
  }
  std::ofstream f(path);
  NVST_REQUIRE(f.good(), "cannot write ", path);
  f << j.dump(1) << "\n";
  std::printf("# wrote %s\n", path.c_str());
}

}  // namespace nvst::tools
