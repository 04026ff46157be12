// `nvst bench host`: what can be measured without a GPU: the bootstrap's
// barrier and allgather latency, and puts and a signal ping-pong between
// host-memory PEs through the proxy and the fabric transport (PE 0 -> PE 1,
// putmem = put + quiet), each beside raw libfabric doing the same between
// the same two processes (nvst/raw_fabric.hpp), a sample of each in turn.
// NVST_PROXY_INBOX=1 sends them through the inbox protocol that GPU heaps
// use (pieces, doorbells, acks), with memcpy for the GPU's copies: the
// protocol's own cost, measurable without a GPU. With NVST_PROXY_TRACE=PREFIX
// the ping-pong's calls are timed too (PREFIX.app.RANK), for
// scripts/proxy_trace.py --pingpong.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "nvst/nvst.hpp"
#include "nvst/raw_fabric.hpp"
#include "report.hpp"

namespace nvst::tools {

int bench_host(const BenchOptions& o) {
  nvst::InitOptions init;
  init.heap_kind = nvst::HeapKind::kHost;
  nvst::init(init);
  Report report;
  report.label = o.label;
  using clock = std::chrono::steady_clock;
  // One timed sample: us per op over iters ops, every PE starting together.
  auto sample_us = [&](auto&& op) {
    nvst::bootstrap_barrier();
    const auto t0 = clock::now();
    for (int i = 0; i < o.iters; ++i) op();
    return std::chrono::duration<double, std::micro>(clock::now() - t0).count() / o.iters;
  };
  auto time_us = [&](auto&& op) {
    for (int i = 0; i < o.warmup; ++i) op();
    std::vector<double> samples;
    for (int s = 0; s < o.samples; ++s) samples.push_back(sample_us(op));
    double t = median(samples);
    nvst::bootstrap_broadcast(&t, sizeof(t), 0);
    return t;
  };
  // Ours and raw libfabric's in turn, a sample of each at a time, so that
  // both see the same moments of a shared machine (a VM's speed drifts
  // over seconds, and one run of each after the other compared drifts).
  // Each sample is warmed up first, as raw's are (RawFabric), so that
  // neither pays for the other's turn (our proxy parks while raw runs).
  // raw_sample() is collective and returns its sample's us per operation.
  // The medians (PE 0's), ours first.
  auto against_raw = [&](auto&& op, auto&& raw_sample) {
    std::vector<double> mine, theirs;
    for (int s = 0; s < o.samples; ++s) {
      for (int i = 0; i < o.warmup; ++i) op();
      mine.push_back(sample_us(op));
      theirs.push_back(raw_sample());
    }
    double m[2] = {median(mine), median(theirs)};
    nvst::bootstrap_broadcast(m, sizeof(m), 0);
    return std::pair<double, double>{m[0], m[1]};
  };
  if (nvst::my_pe() == 0)
    std::printf("# nvst bench host: %d host-memory PEs on loopback TCP (bootstrap channel)\n", nvst::n_pes());
  double t = time_us([] { nvst::bootstrap_barrier(); });
  report.add({"bootstrap_barrier", "nvst", 0, t, 0, 0, 0});
  const std::size_t cap = std::min<std::size_t>(o.max_bytes, 1u << 20);
  for (std::size_t b = std::max<std::size_t>(o.min_bytes, 8); b <= cap; b = static_cast<std::size_t>(b * o.factor)) {
    std::vector<char> mine(b, static_cast<char>(nvst::my_pe()));
    long long wrong = 0;
    double us = time_us([&] {
      auto all = nvst::bootstrap_allgather(mine.data(), b);
      for (int p = 0; p < nvst::n_pes(); ++p)
        wrong += all[static_cast<std::size_t>(p) * b + b / 2] != static_cast<std::byte>(p);
    });
    report.add({"bootstrap_allgather", "nvst", b, us, static_cast<double>(b) * nvst::n_pes() / us / 1e3, 0, wrong});
    if (b * o.factor <= b) break;
  }
  // Fabric puts, PE 0 -> PE 1, checked on PE 1.
  const std::size_t put_cap = std::min<std::size_t>(o.max_bytes, nvst::heap_size() / 4);
  auto* dst = static_cast<char*>(nvst::malloc(put_cap));
  std::vector<char> src(put_cap);
  RawFabric raw(put_cap);
  for (std::size_t i = 0; i < put_cap; ++i) src[i] = static_cast<char>((i * 131) | 1);
  for (std::size_t b = std::max<std::size_t>(o.min_bytes, 8); b <= put_cap;
       b = static_cast<std::size_t>(b * o.factor)) {
    if (nvst::my_pe() == 1) std::memset(dst, 0, b);
    nvst::barrier_all();
    long long raw_wrong = 0;
    const auto [us, raw_us] = against_raw(
        [&] {
          if (nvst::my_pe() == 0) nvst::putmem(dst, src.data(), b, 1);
        },
        [&] {
          const RawFabric::Result r = raw.measure(b, o.iters, 1);
          raw_wrong += r.wrong;
          return r.us.front();
        });
    nvst::barrier_all();
    long long wrong = 0;
    if (nvst::my_pe() == 1)
      for (std::size_t i = 0; i < b; ++i) wrong += dst[i] != src[i];
    nvst::bootstrap_broadcast(&wrong, sizeof(wrong), 1);
    report.add({"fabric_put", "nvst", b, us, b / us / 1e3, b / us / 1e3, wrong});
    report.add({"fabric_put", "raw_fabric", b, raw_us, b / raw_us / 1e3, b / raw_us / 1e3, raw_wrong});
    if (nvst::my_pe() == 0) progress("fabric put " + std::to_string(b) + " bytes");
    if (b * o.factor <= b) break;
  }
  nvst::free(dst);
  // Signal ping-pong, PE 0 <-> PE 1: one-way time of a signal from the
  // call to the waiter seeing it (through the target's proxy, or the work
  // the waiting thread does for it: docs/06).
  auto* flags = static_cast<std::uint64_t*>(nvst::calloc(2, 8));
  std::uint64_t round = 0;
  const int me = nvst::my_pe();
  const char* trace_prefix = std::getenv("NVST_PROXY_TRACE");
  std::vector<std::pair<std::int64_t, char>> calls;  // steady-clock ns; c: signal_op called, r: returned, w: wait over
  if (trace_prefix != nullptr) calls.reserve(static_cast<std::size_t>(3 * (o.warmup + o.samples * o.iters)));
  auto mark = [&](char what) {
    if (trace_prefix != nullptr) calls.emplace_back(clock::now().time_since_epoch().count(), what);
  };
  const auto [rt, raw_one_way] = against_raw(
      [&] {
        ++round;
        if (me == 0) {
          mark('c');
          nvst::signal_op(&flags[1], round, nvst::SignalOp::kSet, 1);
          mark('r');
          nvst::signal_wait_until(&flags[0], nvst::Cmp::kGe, round);
          mark('w');
        } else if (me == 1) {
          nvst::signal_wait_until(&flags[1], nvst::Cmp::kGe, round);
          mark('w');
          mark('c');
          nvst::signal_op(&flags[0], round, nvst::SignalOp::kSet, 0);
          mark('r');
        }
      },
      [&] { return raw.pingpong(o.iters, 1).front(); });
  if (trace_prefix != nullptr && me < 2) {
    const std::string path = std::string(trace_prefix) + ".app." + std::to_string(me);
    if (std::FILE* f = std::fopen(path.c_str(), "w")) {
      for (const auto& [ns, what] : calls) std::fprintf(f, "%lld %c\n", static_cast<long long>(ns), what);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "nvst bench host: cannot write %s\n", path.c_str());
    }
  }
  report.add({"signal_pingpong (one way)", "nvst", 0, rt / 2, 0, 0, 0});
  report.add({"signal_pingpong (one way)", "raw_fabric", 0, raw_one_way, 0, 0, 0});
  nvst::quiet();
  nvst::barrier_all();
  nvst::free(flags);
  if (nvst::my_pe() == 0) {
    progress_done();
    std::printf("# fabric puts go through %s\n", nvst::transport_to(1).c_str());
    report.print_table("nvst", {"raw_fabric"});
    report.add_speedups("nvst", "raw_fabric");
    report.write_json(o.json_path);
  }
  nvst::finalize();
  return 0;
}

}  // namespace nvst::tools
