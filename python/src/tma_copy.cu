// Bulk copies as the seed's tma_copy does them, one chunk per block at a
// time: thread 0 arms an mbarrier with the chunk's byte count, issues the
// global -> shared bulk copy that completes it, waits for it, issues the
// shared -> global bulk copy and waits until that has read shared memory
// before the next chunk reuses it. Many blocks per SM keep several chunks in
// flight. A bounded wait stops the kernel (trap) rather than hang.
#include "tma_copy.hpp"

#include <algorithm>
#include <cstdint>

#include "nvst/error.hpp"

namespace nvst_py {

namespace {

constexpr int kChunk = 16384;  // bytes of shared memory per block
constexpr int kThreads = 128;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void wait_parity(std::uint32_t bar, std::uint32_t parity) {
  const long long start = clock64();
  std::uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (!done && clock64() - start > (1LL << 36)) __trap();  // tens of seconds: the copy engine never answered
  }
}
#endif

// Bytes [begin, end) go by bulk copies (both pointers 16-byte aligned there,
// end - begin a multiple of 16); the bytes before and after, one by one.
__global__ void __launch_bounds__(kThreads)
    tma_copy_kernel(char* dst, const char* src, std::size_t begin, std::size_t end, std::size_t nbytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ alignas(128) char stage[kChunk];
  __shared__ alignas(8) std::uint64_t bar;
  const std::uint32_t bar_at = smem_addr(&bar), stage_at = smem_addr(stage);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar_at) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  std::uint32_t parity = 0;
  if (threadIdx.x == 0) {
    for (std::size_t at = begin + static_cast<std::size_t>(blockIdx.x) * kChunk; at < end;
         at += static_cast<std::size_t>(gridDim.x) * kChunk) {
      const std::uint32_t n = static_cast<std::uint32_t>(end - at < kChunk ? end - at : kChunk);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar_at), "r"(n) : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(stage_at),
          "l"(src + at), "r"(n), "r"(bar_at)
          : "memory");
      wait_parity(bar_at, parity);
      parity ^= 1;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst + at), "r"(stage_at),
                   "r"(n)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");  // stage is free again
    }
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // writes done before the kernel ends
  }
  // The parts the bulk copies do not cover, byte by byte.
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t rest = begin + (nbytes - end);
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < rest; j += stride) {
    const std::size_t i = j < begin ? j : end + (j - begin);
    dst[i] = src[i];
  }
#else
  __trap();  // built without sm_90: tma_copy refuses on the host first
#endif
}

}  // namespace

void tma_copy(void* dst, const void* src, std::size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return;
  int device = 0, major = 0, sms = 0;
  NVST_CHECK_CUDA(cudaGetDevice(&device));
  NVST_CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  NVST_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  NVST_REQUIRE(major >= 9,
               "nvshmem_tutorial.tma_copy: the bulk copy engine needs compute capability 9.0 (Hopper) "
               "or newer; this GPU has ",
               major, ".x");
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  // Bulk copies need 16-byte aligned addresses and sizes on both sides: when
  // the two pointers agree mod 16, all but a head and a tail of < 16 bytes.
  std::size_t begin = 0, end = 0;
  if (d % 16 == s % 16) {
    begin = std::min<std::size_t>((16 - d % 16) % 16, nbytes);
    end = begin + (nbytes - begin) / 16 * 16;
  }
  const std::size_t chunks = (std::max<std::size_t>(end - begin, 1) + kChunk - 1) / kChunk;
  const int blocks = static_cast<int>(std::min<std::size_t>(chunks, static_cast<std::size_t>(sms) * 8));
  tma_copy_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<char*>(dst), static_cast<const char*>(src), begin, end,
                                                   nbytes);
  NVST_CHECK_CUDA(cudaGetLastError());
}

}  // namespace nvst_py
