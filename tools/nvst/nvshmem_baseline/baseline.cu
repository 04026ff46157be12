// NVIDIA NVSHMEM as a benchmark baseline: the same put kernel and ping-pong
// as ours, written with nvshmem calls. Built into a plugin so that nvst runs
// where NVSHMEM is absent.
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "baseline_abi.h"

namespace {

__global__ void put_kernel(char* dst, const char* src, size_t bytes, int pe) {
  const size_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  const size_t off = per * blockIdx.x;
  if (off < bytes) {
    const size_t len = bytes - off < per ? bytes - off : per;
    nvshmemx_putmem_nbi_block(dst + off, src + off, len, pe);
  }
  __syncthreads();
  if (threadIdx.x == 0) nvshmem_quiet();
}

__global__ void pingpong_kernel(uint64_t* flag, int me, int peer, int iters) {
  for (int i = 1; i <= iters; ++i) {
    if (me == 0) {
      nvshmem_uint64_p(flag, static_cast<uint64_t>(i), peer);
      nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_EQ, static_cast<uint64_t>(i));
    } else {
      nvshmem_uint64_wait_until(flag, NVSHMEM_CMP_EQ, static_cast<uint64_t>(i));
      nvshmem_uint64_p(flag, static_cast<uint64_t>(i), peer);
    }
  }
}

char g_version[64];

}  // namespace

extern "C" int nvstb_init(int rank, int nranks, nvstb_broadcast_fn bcast, char* err,
                          size_t errlen) {
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  setenv("NVSHMEM_REMOTE_TRANSPORT", "none", 0);
  setenv("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo", 0);
  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (rank == 0 && nvshmemx_get_uniqueid(&uid) != 0) {
    std::snprintf(err, errlen, "nvshmemx_get_uniqueid failed");
    return 1;
  }
  bcast(&uid, sizeof(uid), 0);
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  if (nvshmemx_set_attr_uniqueid_args(rank, nranks, &uid, &attr) != 0 ||
      nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
    std::snprintf(err, errlen, "nvshmemx_init_attr(UNIQUEID) failed");
    return 1;
  }
  // nvshmem_info_get_version() reports the OpenSHMEM spec level (1.3); the
  // library's own release is the vendor version.
  int major = 0, minor = 0, patch = 0;
  nvshmemx_vendor_get_version_info(&major, &minor, &patch);
  std::snprintf(g_version, sizeof(g_version), "%d.%d.%d", major, minor, patch);
  return 0;
}

extern "C" void* nvstb_malloc(size_t bytes) { return nvshmem_malloc(bytes); }
extern "C" void nvstb_free(void* p) { nvshmem_free(p); }

extern "C" int nvstb_put(void* dst, const void* src, size_t bytes, int pe, int blocks, int threads,
                         cudaStream_t stream) {
  put_kernel<<<blocks, threads, 0, stream>>>(static_cast<char*>(dst),
                                             static_cast<const char*>(src), bytes, pe);
  return static_cast<int>(cudaGetLastError());
}

extern "C" int nvstb_pingpong(uint64_t* flag, int me, int peer, int iters, cudaStream_t stream) {
  pingpong_kernel<<<1, 1, 0, stream>>>(flag, me, peer, iters);
  return static_cast<int>(cudaGetLastError());
}

extern "C" void nvstb_barrier_all(void) { nvshmem_barrier_all(); }
extern "C" void nvstb_finalize(void) { nvshmem_finalize(); }
extern "C" const char* nvstb_version(void) { return g_version; }
