// `nvst bench p2p`: PE 0 -> PE 1 over NVLink, every implementation in one
// process and one run: our device put (SM stores, and TMA-staged), our
// copy-engine put, cudaMemcpy over legacy CUDA IPC, NCCL send/recv and
// NVSHMEM putmem (plugin). One direction and both at once, and a ping-pong
// latency. Each (impl, size) is timed with CUDA events over `iters`
// back-to-back operations, `samples` times; the median sample is reported.
// The receiver checks every 32-bit word of the data afterwards (#wrong).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "baseline_loader.hpp"
#include "bench.hpp"
#include "nvst/device.cuh"
#include "nvst/nvst.hpp"
#include "p2p_measure.cuh"
#include "report.hpp"

#define NVST_CHECK_NCCL(call) \
  do { \
    ncclResult_t r_ = (call); \
    NVST_REQUIRE(r_ == ncclSuccess, #call, " failed: ", ncclGetErrorString(r_)); \
  } while (0)

namespace nvst::tools {

using namespace p2p;

namespace {

// Our device put: block b moves its 16-byte-aligned share of the buffer.
template <bool kTma>
__global__ void put_kernel(char* dst, const char* src, std::size_t bytes, int pe) {
  const std::size_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const std::size_t off = per * blockIdx.x;
  if (off < bytes) {
    const std::size_t len = bytes - off < per ? bytes - off : per;
    if constexpr (kTma)
      nvst::dev::putmem_nbi_block_tma(dst + off, src + off, len, pe);
    else
      nvst::dev::putmem_nbi_block(dst + off, src + off, len, pe);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvst::dev::quiet();
}

// The same put with chunks dealt round-robin to the blocks (block b moves
// chunks b, b + grid, ...): at any moment the whole grid writes inside a
// window of grid * chunk bytes instead of one stretch per block spread over
// the buffer, which keeps fewer remote pages (and their translations) live.
__global__ void put_interleaved_kernel(char* dst, const char* src, std::size_t bytes, int pe, std::size_t chunk) {
  for (std::size_t off = chunk * blockIdx.x; off < bytes; off += chunk * gridDim.x) {
    const std::size_t len = bytes - off < chunk ? bytes - off : chunk;
    nvst::dev::putmem_nbi_block(dst + off, src + off, len, pe);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvst::dev::quiet();
}

// Sweep only: the interleaved put written out with a store cache hint and a
// deeper unroll, to see whether either moves the bandwidth-bound end.
// kHint 0: plain stores; 1: st.global.cs (streaming); 2: st.global.wt.
// Needs 16-byte aligned buffers and bytes % 16 == 0 (the sweep's sizes).
template <int kUnroll, int kHint>
__global__ void put_hinted_kernel(char* dst_sym, const char* src, std::size_t bytes, int pe) {
  auto* dst = reinterpret_cast<uint4*>(nvst::dev::rma_address(dst_sym, bytes, pe));
  const auto* s = reinterpret_cast<const uint4*>(src);
  const std::size_t n = bytes / 16, per_round = static_cast<std::size_t>(blockDim.x) * kUnroll;
  for (std::size_t base = per_round * blockIdx.x; base < n; base += per_round * gridDim.x) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + threadIdx.x + static_cast<std::size_t>(u) * blockDim.x;
      if (i < n) v[u] = __ldg(s + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + threadIdx.x + static_cast<std::size_t>(u) * blockDim.x;
      if (i < n) {
        if constexpr (kHint == 1)
          __stcs(dst + i, v[u]);
        else if constexpr (kHint == 2)
          __stwt(dst + i, v[u]);
        else
          dst[i] = v[u];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) nvst::dev::quiet();
}

__global__ void pingpong_kernel(std::uint64_t* flag, int me, int peer, int iters) {
  for (int i = 1; i <= iters; ++i) {
    const auto v = static_cast<std::uint64_t>(i);
    if (me == 0) {
      nvst::dev::p(flag, v, peer);
      nvst::dev::wait_until(flag, nvst::dev::Cmp::kEq, v);
    } else {
      nvst::dev::wait_until(flag, nvst::dev::Cmp::kEq, v);
      nvst::dev::p(flag, v, peer);
    }
  }
}

// How our SM-driven put is launched for a given size: blocks x threads, and
// the chunk each block takes in turn (interleaved, see the kernel). Read off
// the calibration sweep on 2x H200 (NVST_BENCH_SWEEP=1; docs/04-device-put.md
// discusses it):
//  - below 32 MB a put is latency-bound: 256-thread blocks launch faster than
//    1024-thread ones (about 0.3 us), and about one block per 32 KB (at least
//    8, at most 32 up to 4 MB, then up to 132) keeps enough stores in flight;
//    each block takes one contiguous share (chunk = bytes / blocks).
//  - from 32 MB it is bandwidth-bound: 2 full blocks per SM, 64 KB chunks
//    dealt round-robin so the grid writes inside a 17 MB window; this is
//    what lifts 256 MB..1 GB from 347 to 370 GB/s (fewer live remote pages).
struct PutPlan {
  int blocks, threads;
  std::size_t chunk;
};

PutPlan plan_put(std::size_t bytes, int sms) {
  if (bytes >= (std::size_t{32} << 20)) return {2 * sms, 1024, std::size_t{64} << 10};
  const std::size_t per32k = bytes >> 15, per128k = bytes >> 17;
  const std::size_t b = bytes <= (std::size_t{4} << 20) ? std::clamp<std::size_t>(per32k, 8, 32)
                                                        : std::clamp<std::size_t>(per128k, 32, sms);
  const std::size_t chunk = ((bytes + b - 1) / b + 15) / 16 * 16;
  return {static_cast<int>(b), 256, chunk};
}

}  // namespace

int bench_p2p(const BenchOptions& o) {
  nvst::InitOptions init;
  init.heap_bytes = 2 * o.max_bytes + (64u << 20);
  nvst::init(init);
  NVST_REQUIRE(nvst::n_pes() == 2, "nvst bench p2p runs on exactly 2 PEs (got ", nvst::n_pes(), "); use --np 2");
  NVST_REQUIRE(nvst::device() >= 0, "nvst bench p2p needs GPUs");
  if (nvst::transport_to(1 - nvst::my_pe()).rfind("fabric:", 0) == 0) return bench_p2p_internode(o);
  Ctx c{o};
  open_ctx(c);
  const bool sweep = std::getenv("NVST_BENCH_SWEEP") && std::string(std::getenv("NVST_BENCH_SWEEP")) == "1";

  char* src = static_cast<char*>(nvst::malloc(o.max_bytes));
  char* dst = static_cast<char*>(nvst::malloc(o.max_bytes));
  auto* flag = static_cast<std::uint64_t*>(nvst::calloc(1, sizeof(std::uint64_t)));

  // CUDA IPC baseline: a plain cudaMalloc buffer opened by the peer.
  char* ipc_local = nullptr;
  NVST_CHECK_CUDA(cudaMalloc(&ipc_local, o.max_bytes));
  cudaIpcMemHandle_t mine{};
  NVST_CHECK_CUDA(cudaIpcGetMemHandle(&mine, ipc_local));
  auto handles = nvst::bootstrap_allgather(&mine, sizeof(mine));
  cudaIpcMemHandle_t theirs;
  std::memcpy(&theirs, handles.data() + sizeof(theirs) * static_cast<std::size_t>(c.peer), sizeof(theirs));
  char* ipc_peer = nullptr;
  NVST_CHECK_CUDA(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&ipc_peer), theirs, cudaIpcMemLazyEnablePeerAccess));

  // NCCL over the two PEs.
  ncclUniqueId nid{};
  if (c.me == 0) NVST_CHECK_NCCL(ncclGetUniqueId(&nid));
  nvst::bootstrap_broadcast(&nid, sizeof(nid), 0);
  ncclComm_t comm{};
  NVST_CHECK_NCCL(ncclCommInitRank(&comm, 2, nid, c.me));

  // NVSHMEM, when its plugin loads.
  NvshmemBaseline nv = load_nvshmem_baseline();
  char* nv_src = nullptr;
  char* nv_dst = nullptr;
  std::uint64_t* nv_flag = nullptr;
  if (nv.loaded()) {
    std::string want = std::to_string(2 * o.max_bytes + (128u << 20));
    ::setenv("NVSHMEM_SYMMETRIC_SIZE", want.c_str(), 1);
    char err[256] = {};
    if (nv.init(c.me, 2, bootstrap_broadcast_cb, err, sizeof err) != 0) nv.why_not = err;
  }
  if (nv.loaded()) {
    nv_src = static_cast<char*>(nv.malloc(o.max_bytes));
    nv_dst = static_cast<char*>(nv.malloc(o.max_bytes));
    nv_flag = static_cast<std::uint64_t*>(nv.malloc(sizeof(std::uint64_t)));
    NVST_REQUIRE(nv_src && nv_dst && nv_flag, "nvshmem_malloc failed");
    NVST_CHECK_CUDA(cudaMemset(nv_flag, 0, sizeof(std::uint64_t)));
    NVST_CHECK_CUDA(cudaDeviceSynchronize());
    nv.barrier_all();
    c.report.nvshmem_version = nv.version();
  } else if (c.me == 0) {
    std::printf("# NVSHMEM column: n/a (%s)\n", nv.why_not.c_str());
  }

  const int threads = 1024;
  auto nv_put = [&](std::size_t bytes, int blocks, int to) {
    int rc = nv.put(nv_dst, nv_src, bytes, to, blocks, threads, c.stream);
    NVST_REQUIRE(rc == 0, "NVSHMEM put kernel launch failed: ", cudaGetErrorString(static_cast<cudaError_t>(rc)));
  };

  std::vector<std::size_t> sizes;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * 1.0000001; s *= o.factor)
    sizes.push_back(std::max<std::size_t>(4, static_cast<std::size_t>(s) / 4 * 4));  // whole words

  // Clocks ramp up over the first milliseconds of work: without this the
  // first rows (ours, 4 KB) would pay for it. ~0.2 s of large puts each way.
  for (int i = 0; i < 40; ++i)
    put_interleaved_kernel<<<2 * c.sms, threads, 0, c.stream>>>(
        dst, src, o.max_bytes < (64u << 20) ? o.max_bytes : (64u << 20), c.peer, std::size_t{64} << 10);
  NVST_CHECK_LAUNCH();
  NVST_CHECK_CUDA(cudaStreamSynchronize(c.stream));
  nvst::barrier_all();

  // One discarded pass over the smallest size first: the first rows of a run
  // otherwise pay for whatever the GPU did before (idle clocks, first use of
  // each kernel), and they would be ours, measured first.
  std::vector<std::pair<std::string, std::size_t>> plan_rows = {{"put", sizes.front()}};
  for (const std::string op : {"put", "put_bidir"})
    for (std::size_t bytes : sizes) plan_rows.emplace_back(op, bytes);
  for (std::size_t row = 0; row < plan_rows.size(); ++row) {
    if (row == 1) c.report.rows.clear();  // drop the warm-up pass
    const std::string op = plan_rows[row].first;
    const std::size_t bytes = plan_rows[row].second;
    const bool bidir = op == "put_bidir";
    const bool send = c.me == 0 || bidir, recv = c.me == 1 || bidir;
    {
      const PutPlan plan = plan_put(bytes, c.sms);
      measure(c, op, "nvst_put", bytes, src, dst, send, recv, [&] {
        if (send)
          put_interleaved_kernel<<<plan.blocks, plan.threads, 0, c.stream>>>(dst, src, bytes, c.peer, plan.chunk);
        NVST_CHECK_LAUNCH();
      });
      measure(c, op, "nvst_put_tma", bytes, src, dst, send, recv, [&] {
        if (send) put_kernel<true><<<plan.blocks, threads, 0, c.stream>>>(dst, src, bytes, c.peer);
        NVST_CHECK_LAUNCH();
      });
      if (sweep && !bidir) {
        // Calibration rows for choose_put_blocks: contiguous split and
        // interleaved chunks over block counts and block sizes.
        for (int t : {256, 1024})
          for (int b : {1, 2, 4, 8, 16, 32, 66, 132, 264}) {
            measure(c, op, "split_b" + std::to_string(b) + "_t" + std::to_string(t), bytes, src, dst, send, recv, [&] {
              if (send) put_kernel<false><<<b, t, 0, c.stream>>>(dst, src, bytes, c.peer);
              NVST_CHECK_LAUNCH();
            });
          }
        for (std::size_t chunk : {std::size_t{16} << 10, std::size_t{64} << 10, std::size_t{256} << 10})
          for (int b : {8, 32, 66, 132, 264}) {
            if ((b - 1) * chunk >= bytes && b > 8) continue;  // idle blocks only
            measure(c, op, "ilv_b" + std::to_string(b) + "_c" + std::to_string(chunk >> 10) + "k", bytes, src, dst,
                    send, recv, [&] {
                      if (send) put_interleaved_kernel<<<b, threads, 0, c.stream>>>(dst, src, bytes, c.peer, chunk);
                      NVST_CHECK_LAUNCH();
                    });
          }
        if (bytes >= (std::size_t{8} << 20)) {
          using K = void (*)(char*, const char*, std::size_t, int);
          const std::pair<const char*, K> hinted[] = {
              {"hint_u4_plain", put_hinted_kernel<4, 0>}, {"hint_u4_cs", put_hinted_kernel<4, 1>},
              {"hint_u4_wt", put_hinted_kernel<4, 2>},    {"hint_u8_plain", put_hinted_kernel<8, 0>},
              {"hint_u8_cs", put_hinted_kernel<8, 1>},    {"hint_u2_plain", put_hinted_kernel<2, 0>}};
          for (const auto& [name, k] : hinted)
            for (int b : {132, 264}) {
              measure(c, op, std::string(name) + "_b" + std::to_string(b), bytes, src, dst, send, recv, [&] {
                if (send) k<<<b, threads, 0, c.stream>>>(dst, src, bytes, c.peer);
                NVST_CHECK_LAUNCH();
              });
            }
        }
      }
      measure(c, op, "nvst_put_ce", bytes, src, dst, send, recv, [&] {
        if (send) nvst::putmem_on_stream(dst, src, bytes, c.peer, c.stream);
      });
      measure(c, op, "cuda_ipc_ce", bytes, src, ipc_local, send, recv, [&] {
        if (send) NVST_CHECK_CUDA(cudaMemcpyAsync(ipc_peer, src, bytes, cudaMemcpyDeviceToDevice, c.stream));
      });
      measure(c, op, "nccl", bytes, src, dst, send, recv, [&] {
        NVST_CHECK_NCCL(ncclGroupStart());
        if (send) NVST_CHECK_NCCL(ncclSend(src, bytes, ncclInt8, c.peer, comm, c.stream));
        if (recv) NVST_CHECK_NCCL(ncclRecv(dst, bytes, ncclInt8, c.peer, comm, c.stream));
        NVST_CHECK_NCCL(ncclGroupEnd());
      });
      if (nv.loaded()) {
        // Best over block counts, as the anchors measured NVSHMEM.
        std::size_t first = c.report.rows.size();
        for (int b : {1, 8, 32, 132}) {
          measure(c, op, "nvshmem_b" + std::to_string(b), bytes, nv_src, nv_dst, send, recv, [&] {
            if (send) nv_put(bytes, b, c.peer);
          });
        }
        ResultRow best = c.report.rows[first];
        for (std::size_t i = first; i < c.report.rows.size(); ++i)
          if (c.report.rows[i].time_us < best.time_us) best = c.report.rows[i];
        long long wrong = 0;
        for (std::size_t i = first; i < c.report.rows.size(); ++i) wrong += c.report.rows[i].wrong;
        if (!sweep) c.report.rows.resize(first);
        best.impl = "nvshmem";
        best.wrong = wrong;
        c.report.add(best);
      }
    }
  }

  // Ping-pong: one-way latency of p + wait_until.
  {
    const int rounds = std::max(1000, o.iters * 50);
    Ctx& cc = c;
    auto run_pp = [&](const std::function<void()>& launch) {
      std::vector<double> us;
      for (int s = 0; s < o.samples + 1; ++s) {
        launch();  // resets the flags, records start, launches
        NVST_CHECK_CUDA(cudaEventRecord(cc.stop, cc.stream));
        NVST_CHECK_CUDA(cudaEventSynchronize(cc.stop));
        float ms = 0;
        NVST_CHECK_CUDA(cudaEventElapsedTime(&ms, cc.start, cc.stop));
        if (s > 0) us.push_back(1000.0 * ms / (2.0 * rounds));  // first sample is warm-up
      }
      double t = median(us);
      nvst::bootstrap_broadcast(&t, sizeof(t), 0);
      return t;
    };
    // Flags count up within a run: reset them before each sample.
    auto reset = [&](std::uint64_t* f, bool nvshmem_flag) {
      NVST_CHECK_CUDA(cudaMemset(f, 0, sizeof(std::uint64_t)));
      NVST_CHECK_CUDA(cudaDeviceSynchronize());
      if (nvshmem_flag) nv.barrier_all();
      nvst::barrier_all();
    };
    double ours = run_pp([&] {
      reset(flag, false);
      NVST_CHECK_CUDA(cudaEventRecord(cc.start, cc.stream));
      pingpong_kernel<<<1, 1, 0, cc.stream>>>(flag, c.me, c.peer, rounds);
      NVST_CHECK_LAUNCH();
    });
    c.report.add({"pingpong", "nvst_p_wait", 8, ours, 0, 0, 0});
    if (nv.loaded()) {
      double theirs = run_pp([&] {
        reset(nv_flag, true);
        NVST_CHECK_CUDA(cudaEventRecord(cc.start, cc.stream));
        int rc = nv.pingpong(nv_flag, c.me, c.peer, rounds, cc.stream);
        NVST_REQUIRE(rc == 0, "NVSHMEM ping-pong launch failed");
      });
      c.report.add({"pingpong", "nvshmem", 8, theirs, 0, 0, 0});
    }
  }

  if (c.me == 0) {
    progress_done();
    c.report.print_table("nvst_put", {"cuda_ipc_ce", "nccl", "nvshmem"});
    c.report.write_json(o.json_path);
  }
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  if (nv.loaded()) {
    nv.free(nv_flag);
    nv.free(nv_dst);
    nv.free(nv_src);
    nv.finalize();
  }
  NVST_CHECK_NCCL(ncclCommDestroy(comm));
  NVST_CHECK_CUDA(cudaIpcCloseMemHandle(ipc_peer));
  nvst::barrier_all();
  NVST_CHECK_CUDA(cudaFree(ipc_local));
  NVST_CHECK_CUDA(cudaFree(c.wrong_dev));
  nvst::free(flag);
  nvst::free(dst);
  nvst::free(src);
  nvst::finalize();
  return 0;
}

}  // namespace nvst::tools
