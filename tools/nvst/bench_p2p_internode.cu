// `nvst bench p2p` between PEs of different nodes (NVST_NODE_SIZE splits a
// host into logical nodes): PE 0 -> PE 1 through the proxy and the fabric
// transport. In the same run and between the same two processes:
//  - nvst_proxy: a GPU kernel (one block of kPutThreads) putmem_nbi_block +
//    quiet, GPU heap to GPU heap: the block's stores into the staging ring,
//    FIFO, wire, the copy agent's landing copy, credit. (A put by one
//    thread stages with that thread alone: bulk data wants a block.)
//  - nvst_proxy_host: the same put issued by the host API (putmem_nbi +
//    quiet from the CPU): the proxy path without a kernel. On a machine of
//    one GPU it is the row to read below 64 KiB: there the kernel's
//    spinning quiet holds the GPU for its time slice (about 2.4 ms) while
//    the receiving PE's small landing copy waits for it, so nvst_proxy
//    measures the slice, not the proxy (docs/06);
//  - raw_fabric: libfabric fi_write of host memory to host memory over the
//    same provider, waiting for each completion (no GPU, no staging): the
//    ceiling a proxy over that provider can approach;
//  - nccl_net: NCCL send/recv forced onto its network transport
//    (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, sockets on loopback).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nvst/device.cuh"
#include "p2p_measure.cuh"
#include "nvst/raw_fabric.hpp"

namespace nvst::tools {

using namespace p2p;

namespace {

constexpr int kPutThreads = 1024;

__global__ void __launch_bounds__(kPutThreads) proxy_put_kernel(char* dst, const char* src, std::size_t bytes, int pe) {
  nvst::dev::putmem_nbi_block(dst, src, bytes, pe);
  if (threadIdx.x == 0) nvst::dev::quiet();
}

}  // namespace

int bench_p2p_internode(const BenchOptions& o) {
  Ctx c{o};
  open_ctx(c);
  if (c.me == 0) std::printf("# p2p across logical nodes: PE 0 -> PE 1 through %s\n", nvst::transport_to(1).c_str());

  char* src = static_cast<char*>(nvst::malloc(o.max_bytes));
  char* dst = static_cast<char*>(nvst::malloc(o.max_bytes));

  // NCCL on its network transport between the same two processes. NCCL
  // refuses two ranks on one GPU (logical nodes on a one-GPU machine): then
  // its column is left out (n/a) and the table says why.
  const std::string shared = pes_sharing_a_gpu();
  const bool with_nccl = shared.empty();
  if (c.me == 0 && !with_nccl) std::printf("# nccl_net not run: %s, and NCCL refuses a GPU twice\n", shared.c_str());
  ::setenv("NCCL_P2P_DISABLE", "1", 1);
  ::setenv("NCCL_SHM_DISABLE", "1", 1);
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  ncclComm_t comm{};
  if (with_nccl) {
    ncclUniqueId nid{};
    if (c.me == 0) NVST_REQUIRE(ncclGetUniqueId(&nid) == ncclSuccess, "ncclGetUniqueId failed");
    nvst::bootstrap_broadcast(&nid, sizeof(nid), 0);
    ncclResult_t nr = ncclCommInitRank(&comm, 2, nid, c.me);
    NVST_REQUIRE(nr == ncclSuccess, "ncclCommInitRank (network transport) failed: ", ncclGetErrorString(nr));
  }

  RawFabric raw(o.max_bytes);

  std::vector<std::size_t> sizes;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * 1.0000001; s *= o.factor)
    sizes.push_back(std::max<std::size_t>(4, static_cast<std::size_t>(s) / 4 * 4));
  const bool send = c.me == 0, recv = c.me == 1;
  for (std::size_t bytes : sizes) {
    measure(c, "put", "nvst_proxy", bytes, src, dst, send, recv, [&] {
      if (send) proxy_put_kernel<<<1, kPutThreads, 0, c.stream>>>(dst, src, bytes, c.peer);
      NVST_CHECK_LAUNCH();
    });
    measure(
        c, "put", "nvst_proxy_host", bytes, src, dst, send, recv,
        [&] {
          if (send) {
            nvst::putmem_nbi(dst, src, bytes, c.peer);
            nvst::quiet();
          }
        },
        Timing::kHost);
    if (with_nccl)
      measure(c, "put", "nccl_net", bytes, src, dst, send, recv, [&] {
        NVST_REQUIRE(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
        if (send) NVST_REQUIRE(ncclSend(src, bytes, ncclInt8, c.peer, comm, c.stream) == ncclSuccess, "ncclSend");
        if (recv) NVST_REQUIRE(ncclRecv(dst, bytes, ncclInt8, c.peer, comm, c.stream) == ncclSuccess, "ncclRecv");
        NVST_REQUIRE(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd");
      });
    const RawFabric::Result r = raw.measure(bytes, std::max(2, o.iters / 2), o.samples);
    const double raw_us = median(r.us);
    c.report.add({"put", "raw_fabric", bytes, raw_us, bytes / raw_us / 1e3, bytes / raw_us / 1e3, r.wrong});
  }
  if (c.me == 0) {
    progress_done();
    c.report.print_table("nvst_proxy", {"raw_fabric", "nccl_net"});
    for (const char* ours : {"nvst_proxy", "nvst_proxy_host"})
      for (const char* base : {"raw_fabric", "nccl_net"}) c.report.add_speedups(ours, base);
    c.report.write_json(o.json_path);
  }
  NVST_CHECK_CUDA(cudaDeviceSynchronize());
  nvst::barrier_all();
  if (with_nccl) ncclCommDestroy(comm);
  NVST_CHECK_CUDA(cudaFree(c.wrong_dev));
  nvst::free(dst);
  nvst::free(src);
  nvst::finalize();
  return 0;
}

}  // namespace nvst::tools
