// Cooperative memory copy for one thread, one warp or one block. Bulk data
// moves as 16-byte vectors (one LDG.128/STG.128 per thread per step, several
// loads in flight before the first store) when source and destination share
// their alignment modulo 16; otherwise 8, 4, 2 or 1 bytes at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nvst::dev {

enum class Scope { kThread, kWarp, kBlock };

template <Scope S>
struct Group;

template <>
struct Group<Scope::kThread> {
  __device__ __forceinline__ static unsigned rank() { return 0; }
  __device__ __forceinline__ static unsigned size() { return 1; }
  __device__ __forceinline__ static void sync() {}
};

template <>
struct Group<Scope::kWarp> {
  __device__ __forceinline__ static unsigned rank() { return threadIdx.x & 31u; }
  __device__ __forceinline__ static unsigned size() { return 32; }
  __device__ __forceinline__ static void sync() { __syncwarp(); }
};

template <>
struct Group<Scope::kBlock> {
  __device__ __forceinline__ static unsigned rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  __device__ __forceinline__ static unsigned size() { return blockDim.x * blockDim.y * blockDim.z; }
  __device__ __forceinline__ static void sync() { __syncthreads(); }
};

namespace detail {

// Copies n elements of type V, element i by member rank + k*size. Unroll
// keeps `kUnroll` loads in flight per thread before their stores.
template <typename V, int kUnroll>
__device__ __forceinline__ void strided_copy(V* __restrict__ dst, const V* __restrict__ src, std::size_t n,
                                             unsigned rank, unsigned size) {
  std::size_t i = rank;
  const std::size_t step = static_cast<std::size_t>(size) * kUnroll;
  for (; i + static_cast<std::size_t>(size) * (kUnroll - 1) < n; i += step) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + static_cast<std::size_t>(u) * size];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + static_cast<std::size_t>(u) * size] = v[u];
  }
  for (; i < n; i += size) dst[i] = src[i];
}

}  // namespace detail

// Copies `bytes` from src to dst with the members of group S. Every member
// must call it with the same arguments. No synchronisation is implied.
template <Scope S>
__device__ __forceinline__ void group_copy(void* dst_v, const void* src_v, std::size_t bytes) {
  using G = Group<S>;
  char* dst = static_cast<char*>(dst_v);
  const char* src = static_cast<const char*>(src_v);
  const unsigned rank = G::rank();
  const unsigned size = G::size();
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  if (((d ^ s) & 15u) == 0) {
    // Same phase modulo 16: bytes up to the first 16-byte boundary, then
    // vectors, then the tail.
    std::size_t head = (16u - (d & 15u)) & 15u;
    if (head > bytes) head = bytes;
    for (std::size_t i = rank; i < head; i += size) dst[i] = src[i];
    const std::size_t nvec = (bytes - head) / 16;
    detail::strided_copy<uint4, 4>(reinterpret_cast<uint4*>(dst + head), reinterpret_cast<const uint4*>(src + head),
                                   nvec, rank, size);
    const std::size_t done = head + nvec * 16;
    for (std::size_t i = done + rank; i < bytes; i += size) dst[i] = src[i];
    return;
  }
  if (((d ^ s) & 7u) == 0 && (d & 7u) == 0) {
    const std::size_t n = bytes / 8;
    detail::strided_copy<std::uint64_t, 4>(reinterpret_cast<std::uint64_t*>(dst),
                                           reinterpret_cast<const std::uint64_t*>(src), n, rank, size);
    for (std::size_t i = n * 8 + rank; i < bytes; i += size) dst[i] = src[i];
    return;
  }
  if (((d | s) & 3u) == 0) {
    const std::size_t n = bytes / 4;
    detail::strided_copy<std::uint32_t, 4>(reinterpret_cast<std::uint32_t*>(dst),
                                           reinterpret_cast<const std::uint32_t*>(src), n, rank, size);
    for (std::size_t i = n * 4 + rank; i < bytes; i += size) dst[i] = src[i];
    return;
  }
  detail::strided_copy<char, 4>(dst, src, bytes, rank, size);
}

}  // namespace nvst::dev
