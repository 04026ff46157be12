// Block-scope put through the Tensor Memory Accelerator (sm_90): the block's
// threads stage a chunk of the source in shared memory, one thread hands it
// to the TMA with cp.async.bulk (shared -> the peer's global memory over
// NVLink), and the block goes on staging the next chunk while the TMA
// writes. Large writes issued by the TMA use NVLink more efficiently than
// 16-byte stores from every thread, at the cost of kStages*kChunk bytes of
// static shared memory in kernels that call it.
//
// Requires 16-byte aligned source and destination; the 16-byte-multiple body
// goes through the TMA, a tail of < 16 bytes through ordinary stores.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvst/device/copy.cuh"
#include "nvst/device/state.cuh"

namespace nvst::dev {

namespace detail {
__device__ __forceinline__ void bulk_store_to_global(void* dst_global, const void* src_shared, std::uint32_t bytes) {
  const auto smem = static_cast<std::uint32_t>(__cvta_generic_to_shared(src_shared));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst_global), "r"(smem), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
}  // namespace detail

// Copies `bytes` from local src to `remote_dst` (already translated) with the
// whole block. Completion: when it returns, every byte has been written
// (wait_group 0) and ordered for the generic proxy, so a following quiet()
// or signal release covers it like ordinary stores.
template <int kStages = 4, int kChunk = 8192>
__device__ __forceinline__ void block_copy_tma(char* remote_dst, const char* src, std::size_t bytes) {
  static_assert(kChunk % 16 == 0 && kStages >= 2, "bad TMA staging shape");
  __shared__ alignas(128) uint4 stage[kStages][kChunk / 16];
  const unsigned tid = Group<Scope::kBlock>::rank();
  const unsigned nthreads = Group<Scope::kBlock>::size();
  const std::size_t body = bytes & ~std::size_t{15};
  const auto* src4 = reinterpret_cast<const uint4*>(src);
  const std::size_t nchunks = (body + kChunk - 1) / kChunk;
  for (std::size_t c = 0; c < nchunks; ++c) {
    const int s = static_cast<int>(c % kStages);
    if (c >= static_cast<std::size_t>(kStages)) {
      // The TMA must have read stage s (chunk c - kStages) before we refill it.
      if (tid == 0) detail::bulk_wait_read<kStages - 1>();
      __syncthreads();
    }
    const std::size_t off = c * kChunk;
    const std::size_t len = body - off < static_cast<std::size_t>(kChunk) ? body - off : kChunk;
    for (std::size_t i = tid; i < len / 16; i += nthreads) stage[s][i] = src4[off / 16 + i];
    detail::fence_proxy_async_shared();  // our st.shared before the TMA's reads
    __syncthreads();
    if (tid == 0) {
      detail::bulk_store_to_global(remote_dst + off, stage[s], static_cast<std::uint32_t>(len));
      detail::bulk_commit();
    }
  }
  if (tid == 0) {
    detail::bulk_wait_all();
    detail::fence_proxy_async_global();
  }
  for (std::size_t i = body + tid; i < bytes; i += nthreads) remote_dst[i] = src[i];
  __syncthreads();
}

// putmem_nbi_block through the TMA where both pointers are 16-byte aligned,
// else through the ordinary vector copy.
__device__ __forceinline__ void putmem_nbi_block_tma(void* dest, const void* src, std::size_t bytes, int pe) {
  if (bytes == 0) return;
  char* remote = rma_address(dest, bytes, pe);
  if (((reinterpret_cast<std::uintptr_t>(remote) | reinterpret_cast<std::uintptr_t>(src)) & 15u) == 0) {
    block_copy_tma(remote, static_cast<const char*>(src), bytes);
  } else {
    group_copy<Scope::kBlock>(remote, src, bytes);
  }
}

}  // namespace nvst::dev
