// `nvst bench fifo`: how many commands per second GPU threads can hand to
// their PE's proxy through the FIFO (include/nvst/proxy_fifo.hpp). Each
// producer thread posts no-op commands (Op::kNop: the proxy takes and counts
// them, nothing goes on the wire), then one thread quiets: the time from the
// first post to the quiet covers every command being taken by the proxy.
// Producers: one thread, one warp, and 1..132 blocks of one warp each.
// Needs a proxy, so PE 1 must be on another node: `nvst bench fifo` spawns
// 2 PEs with NVST_NODE_SIZE=1.
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "bench.hpp"
#include "nvst/device.cuh"
#include "nvst/nvst.hpp"
#include "report.hpp"

namespace nvst::tools {

namespace {

__global__ void nop_producers(int per_thread) {
  for (int i = 0; i < per_thread; ++i) nvst::dev::proxy_push(nvst::proxy::Op::kNop, 0, 0, nullptr, 0, 0, 0, 0);
}

__global__ void quiet_kernel() { nvst::dev::quiet(); }

}  // namespace

int bench_fifo(const BenchOptions& o) {
  nvst::init();
  NVST_REQUIRE(nvst::device() >= 0, "nvst bench fifo needs a GPU");
  NVST_REQUIRE(nvst::n_pes() >= 2 && nvst::transport_to((nvst::my_pe() + 1) % nvst::n_pes()).rfind("fabric:", 0) == 0,
               "nvst bench fifo needs a proxy: run 2 PEs with NVST_NODE_SIZE=1 (nvst bench fifo does)");
  Report report;
  report.label = o.label;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  NVST_CHECK_CUDA(cudaEventCreate(&start));
  NVST_CHECK_CUDA(cudaEventCreate(&stop));
  struct Shape {
    const char* name;
    int blocks, threads;
  };
  const Shape shapes[] = {
      {"1_thread", 1, 1}, {"1_warp", 1, 32}, {"8_blocks", 8, 32}, {"32_blocks", 32, 32}, {"132_blocks", 132, 32}};
  if (nvst::my_pe() == 0) {
    for (const Shape& sh : shapes) {
      const int producers = sh.blocks * sh.threads;
      const int per = std::max(1, 200000 / producers);
      const double commands = static_cast<double>(per) * producers;
      std::vector<double> us;
      for (int s = 0; s < o.samples + 1; ++s) {
        progress(std::string("fifo ") + sh.name);
        NVST_CHECK_CUDA(cudaEventRecord(start, stream));
        nop_producers<<<sh.blocks, sh.threads, 0, stream>>>(per);
        NVST_CHECK_LAUNCH();
        quiet_kernel<<<1, 1, 0, stream>>>();
        NVST_CHECK_LAUNCH();
        NVST_CHECK_CUDA(cudaEventRecord(stop, stream));
        NVST_CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        if (s > 0) us.push_back(1000.0 * ms);  // the first sample warms up
      }
      const double t = median(us);
      // time_us: per command; algbw/busbw columns carry millions of commands/s.
      const double mcps = commands / t;
      report.add({"fifo_nop", sh.name, static_cast<std::size_t>(commands), t / commands, mcps, mcps, 0});
      std::printf("# fifo %-11s %3d x %-3d producers  %9.0f commands  %9.1f us  %7.2f M commands/s\n", sh.name,
                  sh.blocks, sh.threads, commands, t, mcps);
    }
    progress_done();
    report.write_json(o.json_path);
  }
  nvst::barrier_all();
  NVST_CHECK_CUDA(cudaStreamDestroy(stream));
  nvst::finalize();
  return 0;
}

}  // namespace nvst::tools
